"""The scored-results JSONL file: its configuration saved beside it, a run killed mid-append made
resumable, and rows appended (written, flushed, fsynced) the moment they are scored."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

from tqdm.auto import tqdm

from .backends.base import Backend
from .io import check_saved_config, json_line, write_json_atomic
from .option_names import named
from .progress import ProgressTicker
from .results import ScoredText, read_rows
from .types import BlackboxMIAError

CONFIG_SUFFIX = ".config.json"
OVERWRITE_HINT = (f"choose another {named('out_dir')} to keep these results, or pass {named('resume')} to replace "
                  "them (an endpoint's "
                  "answers stay in its response cache: the requests that do not change are not paid again)")
"""What to do when a results file was written with another configuration (the message names the
first differing setting; :func:`~blackbox_mia.io.check_saved_config`)."""


def config_path_for(out_path: Path) -> Path:
    """Where the configuration of the result file ``out_path`` lives: ``<out>.config.json``."""
    out_path = Path(out_path)
    return out_path.with_name(out_path.name + CONFIG_SUFFIX)


def repair_tail(path: Path) -> bool:
    """Make a JSONL file killed mid-append resumable.

    A last line without its trailing newline is a row cut mid-write when it is not a JSON
    object: it is dropped (the file is truncated back to the end of the last complete line).
    When it is a complete JSON object only its newline is missing, which is added. A malformed
    line that does end in a newline is left alone (:func:`read_rows` reports it).

    Returns:
        True when a cut last line was dropped.

    Raises:
        BlackboxMIAError: the file cannot be read or written.
    """
    path = Path(path)
    try:
        with open(path, "rb+") as f:
            size = f.seek(0, os.SEEK_END)
            start, tail = size, b""
            while start > 0 and b"\n" not in tail:
                step = min(1 << 16, start)
                start -= step
                f.seek(start)
                tail = f.read(step) + tail
            newline = tail.rfind(b"\n")
            cut = start + newline + 1  # start of the unterminated last line (0 without a newline)
            last = tail[newline + 1 :]
            if not last.strip():
                return False
            try:
                complete = isinstance(json.loads(last.decode("utf-8")), dict)
            except (UnicodeDecodeError, ValueError):
                complete = False
            if complete:
                f.seek(size)
                f.write(b"\n")
            else:
                f.truncate(cut)
            f.flush()
            os.fsync(f.fileno())
            return not complete
    except OSError as exc:
        raise BlackboxMIAError(f"cannot repair {path}: {exc.strerror or exc}") from exc


def check_resumable(out_path: Path, settings: dict, resume: bool) -> None:
    """Before any backend is built (a model can take a minute to load): refuse to resume
    ``out_path`` when its saved configuration differs in one of ``settings``, a part of the run
    configuration (:func:`~blackbox_mia.runner.run_settings`: rows of another data set or other
    scorers); :func:`prepare_output` checks the whole configuration later.

    Raises:
        BlackboxMIAError: the existing rows were made with other ``settings``, or with no
            configuration saved; an unreadable configuration file.
    """
    if resume and out_path.is_file() and (config_path_for(out_path).exists() or out_path.stat().st_size > 0):
        check_saved_config(config_path_for(out_path), settings, "run configuration", out_path, OVERWRITE_HINT,
                           partial=True)


def prepare_output(out_path: Path, config: dict | None, resume: bool, labels: Sequence[str]) -> dict[str, ScoredText]:
    """Rows already in ``out_path`` when resuming (after :func:`repair_tail`), else an empty,
    freshly created file; ``<out>.config.json`` holds ``config`` afterwards (when given).

    Raises:
        BlackboxMIAError: the existing rows were made with another configuration, or with none
            saved; a malformed row or configuration file; the files cannot be written.
    """
    config_path = config_path_for(out_path)
    try:
        out_path.parent.mkdir(parents=True, exist_ok=True)
        if resume and out_path.exists():
            if not out_path.is_file():
                raise BlackboxMIAError(f"{out_path} is not a file")
            if config is not None and (config_path.exists() or out_path.stat().st_size > 0):
                check_saved_config(config_path, config, "run configuration", out_path, OVERWRITE_HINT)
            repair_tail(out_path)
            done = {row.id: row for row in read_rows(out_path, labels)}
        else:
            config_path.unlink(missing_ok=True)  # never leave an old configuration beside new rows
            out_path.write_text("", encoding="utf-8")
            done = {}
    except OSError as exc:
        raise BlackboxMIAError(f"cannot prepare {out_path}: {exc.strerror or exc}") from exc
    if config is not None:
        write_json_atomic(config_path, config)
    return done


class RowSink:
    """Where :func:`~blackbox_mia.runner.score_items` puts each scored row the moment it is done: appended to the
    JSONL output (written, flushed, fsynced; none without an output), kept in ``done`` (id →
    row, the rows of a resumed file already there) and ``order`` (ids in file order), and counted
    on the progress bar (texts) with the backends' usage line under it.

    Raises:
        BlackboxMIAError: the output cannot be opened or written (on entering, adding or leaving).
    """

    def __init__(self, out_path: Path | None, done: dict[str, ScoredText], total: int, progress: bool,
                 backends: list[Backend]):
        self.out_path, self.done, self.order = out_path, done, list(done)
        self.bar = tqdm(total=total, initial=len(done), unit="text", disable=not progress, desc="score")
        self.ticker = ProgressTicker(self.bar, backends) if progress else None
        self.file = None

    def __enter__(self) -> RowSink:
        try:
            if self.out_path is not None:
                self.file = open(self.out_path, "a", encoding="utf-8")
        except OSError as exc:
            self.__exit__(None, None, None)
            raise BlackboxMIAError(f"cannot write {self.out_path}: {exc.strerror or exc}") from exc
        return self

    def add(self, row: ScoredText) -> None:
        """Write and keep one row, and move the bar."""
        if self.file is not None:
            self.file.write(json_line(row.to_json(), f"row {row.id!r}"))
            self.file.flush()
            os.fsync(self.file.fileno())
        self.done[row.id] = row
        self.order.append(row.id)
        self.bar.update(1)
        if self.ticker is not None:
            self.ticker.refresh()

    def __exit__(self, kind, error, trace) -> None:
        if self.file is not None:
            self.file.close()
        if self.ticker is not None:
            self.ticker.stop()
        self.bar.close()
        if isinstance(error, OSError):
            raise BlackboxMIAError(f"cannot write {self.out_path}: {error.strerror or error}") from error
