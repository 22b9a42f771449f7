"""Records of a data file, read by its suffix: JSON Lines, JSON, CSV or Parquet, each also gzip-compressed.

* ``.jsonl``: one JSON object per line (blank lines skipped); any unknown suffix too;
* ``.json``: an array of objects, or an object of columns (``{"text": [...], ...}``);
* ``.csv``: a header line, then one record per row (Python's :mod:`csv`; cells are text);
* ``.parquet``: a Parquet table (:mod:`pyarrow`, extra ``datasets``), one record per row;
* ``.X.gz``: the same, gzip-compressed.

Each reader yields ``(where, record)``: ``where`` names the file and the line (``data.csv:3``)
or the record (``data.parquet: row 3``) in error messages; ``record`` maps a column to its value.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from ..io import json_type
from ..types import BlackboxMIAError

Records = Iterator[tuple[str, dict]]

LINE_FORMAT = 'each line of a dataset file must be one JSON object, e.g. {"text": "...", "label": 1} (label optional)'


def file_format(path: Path) -> tuple[str, bool]:
    """``(format, gzip)`` of a data file by its suffixes: ``data.csv.gz`` → ``("csv", True)``;
    an unknown suffix is ``jsonl`` (the historical default of user files)."""
    suffixes = [s.lower() for s in path.suffixes]
    compressed = bool(suffixes) and suffixes[-1] == ".gz"
    suffix = (suffixes[-2] if len(suffixes) > 1 else "") if compressed else (suffixes[-1] if suffixes else "")
    return (suffix[1:] if suffix[1:] in READERS else "jsonl"), compressed


def describe_format(path: Path) -> str:
    """How :func:`read_records` reads ``path``: ``"csv"``, ``"jsonl (gzip)"``..."""
    name, compressed = file_format(path)
    return name + (" (gzip)" if compressed else "")


def file_stem(path: Path) -> str:
    """The file name without its last suffix and a ``.gz`` before it (``items.jsonl.gz`` → ``items``)."""
    return Path(path.name[: -len(".gz")] if file_format(path)[1] else path.name).stem


def read_records(path: Path) -> Records:
    """``(where, record)`` for every record of a data file, read by its suffix (module docstring).

    Raises:
        BlackboxMIAError: an unreadable file, a truncated or corrupt gzip stream, text that is
            not UTF-8 (named by line and column for JSON Lines), malformed JSON, a record that
            is not an object, columns of different lengths, a file that is not Parquet.
    """
    name, compressed = file_format(path)
    return _guarded(path, READERS[name](path, compressed))


def read_lines(path: Path) -> Iterator[tuple[int, dict]]:
    """``(line number, object)`` for every non-blank line of a JSON Lines file (numbers from 1),
    gzip-compressed when its name ends in ``.gz``; raises as :func:`read_records`."""
    return _guarded(path, _jsonl_lines(path, file_format(path)[1]))


def _guarded(path: Path, records: Iterator) -> Iterator:
    """``records`` with a truncated gzip stream and OS errors as one-line errors naming ``path``."""
    try:
        yield from records
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise BlackboxMIAError(f"{path}: truncated or corrupt gzip file ({exc})") from exc
    except OSError as exc:
        raise BlackboxMIAError(f"cannot read {path}: {exc.strerror or exc}") from exc


@contextmanager
def _binary(path: Path, compressed: bool) -> Iterator[IO[bytes]]:
    """The file's bytes, decompressed when ``compressed``."""
    with open(path, "rb") as raw:
        yield gzip.GzipFile(fileobj=raw) if compressed else raw


def _decode(data: bytes, path: Path) -> str:
    """``data`` as UTF-8 (a byte-order mark skipped); raises at ``path`` otherwise."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise BlackboxMIAError(f"{path}: not UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start}: "
                               f"{exc.reason}); save the file as UTF-8") from exc


def _jsonl(path: Path, compressed: bool) -> Records:
    for number, obj in _jsonl_lines(path, compressed):
        yield f"{path}:{number}", obj


def _jsonl_lines(path: Path, compressed: bool) -> Iterator[tuple[int, dict]]:
    with _binary(path, compressed) as f:  # decoded line by line: a non-UTF-8 byte is named by line
        for number, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8-sig" if number == 1 else "utf-8")  # a byte-order mark is accepted
            except UnicodeDecodeError as exc:
                raise BlackboxMIAError(
                    f"{path}:{number}: not UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1}: "
                    f"{exc.reason}); save the file as UTF-8") from exc
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise BlackboxMIAError(f"{path}:{number}: malformed JSON ({exc.msg}); {LINE_FORMAT}") from exc
            if not isinstance(obj, dict):
                raise BlackboxMIAError(f"{path}:{number}: expected a JSON object, got {json_type(obj)}; {LINE_FORMAT}")
            yield number, obj


def _json(path: Path, compressed: bool) -> Records:
    with _binary(path, compressed) as f:
        text = _decode(f.read(), path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BlackboxMIAError(f"{path}:{exc.lineno}: malformed JSON ({exc.msg})") from exc
    if isinstance(data, dict):
        yield from _columns(data, path)
        return
    if not isinstance(data, list):
        raise BlackboxMIAError(f"{path}: expected an array of objects or an object of columns, got {json_type(data)}")
    for i, obj in enumerate(data):
        if not isinstance(obj, dict):
            raise BlackboxMIAError(f"{path}: record {i}: expected a JSON object, got {json_type(obj)}")
        yield f"{path}: record {i}", obj


def _columns(data: dict, path: Path) -> Records:
    """The records of an object of columns (``{"text": [...], "label": [...]}``), equal lengths."""
    lengths = {key: len(value) if isinstance(value, list) else None for key, value in data.items()}
    if None in lengths.values() or len(set(lengths.values())) > 1:
        shown = ", ".join(f"{k}: {'not an array' if n is None else n}" for k, n in lengths.items())
        raise BlackboxMIAError(f"{path}: an object of columns needs arrays of one length ({shown})")
    for i in range(next(iter(lengths.values()), 0)):
        yield f"{path}: record {i}", {key: value[i] for key, value in data.items()}


def _csv(path: Path, compressed: bool) -> Records:
    with _binary(path, compressed) as f:
        text = _decode(f.read(), path)
    reader = csv.DictReader(io.StringIO(text, newline=""), strict=True)
    try:
        for row in reader:
            if None in row or None in row.values():
                raise BlackboxMIAError(f"{path}:{reader.line_num}: not as many cells as the header's "
                                       f"{len(reader.fieldnames)} columns")
            yield f"{path}:{reader.line_num}", row
    except csv.Error as exc:
        raise BlackboxMIAError(f"{path}:{reader.line_num}: malformed CSV ({exc})") from exc


def _parquet(path: Path, compressed: bool) -> Records:
    try:
        import pyarrow
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise BlackboxMIAError(f"{path}: reading Parquet needs pyarrow: pip install 'blackbox_mia[datasets]'") from exc
    with _binary(path, compressed) as f:
        data = f.read()
    try:
        table = pq.read_table(pyarrow.BufferReader(data))
    except pyarrow.ArrowException as exc:
        raise BlackboxMIAError(f"{path}: not a Parquet file ({' '.join(str(exc).split())})") from exc
    for i, row in enumerate(table.to_pylist()):
        yield f"{path}: row {i}", row


READERS: dict[str, Callable[[Path, bool], Records]] = {"jsonl": _jsonl, "json": _json, "csv": _csv, "parquet": _parquet}
"""The reader of each format, by the suffix it is named after."""
