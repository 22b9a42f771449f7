"""Datasets: the shipped benchmarks and user JSONL files, as lists of :class:`Item`.

A dataset *spec* is one of the shipped names below, ``canary`` / ``canary:PATH`` (a trained
canary's members and non-members, resolved by :mod:`blackbox_mia.canary.dataset`, whose
:func:`~blackbox_mia.canary.dataset.load_items` takes every spec), or a path to a JSONL file;
:func:`load_shipped_or_jsonl` here takes the shipped names and JSONL files.

* ``gsm8k`` (= ``gsm8k:test``), ``gsm8k:train``: ``gsm8k/{test,train}.jsonl``, 1,319 / 7,473
  problems, ids ``gsm8k-test-{i}`` / ``gsm8k-train-{i}``.
* ``aqua`` (= ``aqua:test``), ``aqua:dev``: ``aqua/{test,dev}.json`` (JSON Lines), 254 / 254
  problems, ids ``aqua-test-{i}`` / ``aqua-dev-{i}``.
* ``wikimia64``: ``wikimia/WikiMIA_length64.jsonl``, 542 rows (284 members), ids
  ``wikimia64-{hf_index}``; ``wikimia128``: ``wikimia/WikiMIA_length128_subset200.jsonl`` and
  ``wikimia24``: ``wikimia/WikiMIA24_length128_subset200.jsonl``, 200 rows each, ids
  ``wikimia128-{hf_index}`` / ``wikimia24-{hf_index}``.
* ``ja-debian-docs``: ``ja_debian_docs/paragraphs.jsonl``, 1,807 Japanese paragraphs from
  Debian's Japanese documentation (GPL-2), ids ``ja-{nnnn}`` as in the file; unlabelled. Text
  without spaces between words, for the Japanese and multi-byte paths.

``{i}`` is the 0-based record index in the file. Text formats (see
:func:`~blackbox_mia.datasets.formats.gsm8k_text`, :func:`~blackbox_mia.datasets.formats.aqua_text`):

* GSM8K: ``"Question: {question}\\nAnswer: {answer}"``, the answer verbatim (with its
  ``<<calc>>`` annotations and the final ``#### N``); ``meta`` = ``{question, answer}``.
* AQuA: ``"Question: {question}\\nOptions: {' '.join(options)}\\nRationale: {rationale}\\nAnswer:
  {correct}"``; ``meta`` = ``{question, options, rationale, correct}``.
* WikiMIA: the ``input`` field; ``label`` 1 = member (pre-2017 Wikipedia), 0 = non-member;
  the other fields (``hf_index``, ``md5``...) go to ``meta``.
* A user JSONL file: one object per line with ``text`` (or ``input``), optional ``label``
  (0/1, or null) and optional ``id`` (default ``{file stem}-{i}``); other fields go to
  ``meta``. Blank lines are skipped.

Sources and licences of the shipped files: ``blackbox_mia/data/README.md``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path

from ..io import json_type
from ..option_names import named
from ..types import BlackboxMIAError
from .formats import ItemMaker, aqua_item, gsm8k_item, user_item, wikimia_item
from .items import Dataset, Item, file_sha256

DATA_DIR = Path(__file__).resolve().parent.parent / "data"

# spec -> (canonical name, file under DATA_DIR, item builder)
NAMED: dict[str, tuple[str, str, ItemMaker]] = {
    "gsm8k": ("gsm8k:test", "gsm8k/test.jsonl", gsm8k_item("test")),
    "gsm8k:test": ("gsm8k:test", "gsm8k/test.jsonl", gsm8k_item("test")),
    "gsm8k:train": ("gsm8k:train", "gsm8k/train.jsonl", gsm8k_item("train")),
    "aqua": ("aqua:test", "aqua/test.json", aqua_item("test")),
    "aqua:test": ("aqua:test", "aqua/test.json", aqua_item("test")),
    "aqua:dev": ("aqua:dev", "aqua/dev.json", aqua_item("dev")),
    "wikimia64": ("wikimia64", "wikimia/WikiMIA_length64.jsonl", wikimia_item("wikimia64")),
    "wikimia128": ("wikimia128", "wikimia/WikiMIA_length128_subset200.jsonl", wikimia_item("wikimia128")),
    "wikimia24": ("wikimia24", "wikimia/WikiMIA24_length128_subset200.jsonl", wikimia_item("wikimia24")),
    "ja-debian-docs": ("ja-debian-docs", "ja_debian_docs/paragraphs.jsonl", user_item("ja")),
}


LINE_FORMAT = 'each line of a dataset file must be one JSON object, e.g. {"text": "...", "label": 1} (label optional)'


def dataset_not_found(path: Path, names: Sequence[str]) -> BlackboxMIAError:
    """The error for a dataset spec that is neither a named dataset nor a file: a directory is
    said to be one, anything else is not found; the message lists ``names``."""
    what = "is a directory, not a JSONL file" if path.is_dir() else "not found"
    return BlackboxMIAError(f"dataset file {what}: {path} (named datasets: {', '.join(names)}; "
                            "anything else is a JSONL path)")


def read_jsonl(path: Path) -> Iterator[tuple[int, dict]]:
    """``(line number, object)`` for every non-blank line of a JSON Lines file (numbers from 1).

    A UTF-8 byte-order mark at the start of the file is skipped.

    Raises:
        BlackboxMIAError: the file is missing/unreadable or a directory, a line is not UTF-8
            (named by line and column) or not a JSON object (the message says what a line must be).
    """
    path = Path(path)
    if not path.is_file():
        raise dataset_not_found(path, list(NAMED))
    try:
        with open(path, "rb") as f:  # decoded line by line: a non-UTF-8 byte is named by line
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
                    raise BlackboxMIAError(
                        f"{path}:{number}: expected a JSON object, got {json_type(obj)}; {LINE_FORMAT}")
                yield number, obj
    except OSError as exc:
        raise BlackboxMIAError(f"cannot read {path}: {exc.strerror or exc}") from exc


def load_shipped_or_jsonl(spec: str) -> Dataset:
    """Load a named dataset or a JSONL file (canary specs: :func:`blackbox_mia.canary.dataset.load_any_dataset`).

    Args:
        spec: ``gsm8k``, ``gsm8k:train``, ``gsm8k:test``, ``aqua``, ``aqua:dev``, ``aqua:test``,
            ``wikimia64``, ``wikimia128``, ``wikimia24``, ``ja-debian-docs``, or a path to a
            JSONL file.

    Returns:
        A :class:`Dataset` whose ``sha256`` is that of the source file's bytes.

    Raises:
        BlackboxMIAError: missing file, malformed JSON line, a line without a text field, an
            empty text, a label outside {0, 1}, a duplicate id, or no item at all; the message
            names the file and the line number.
    """
    if spec in NAMED:
        name, relative, make = NAMED[spec]
        path = DATA_DIR / relative
    else:
        path = Path(spec).expanduser()
        name, make = spec, user_item(path.stem)
    items: list[Item] = []
    seen: dict[str, int] = {}
    for number, obj in read_jsonl(path):
        where = f"{path}:{number}"
        item = make(len(items), obj, where)
        if item.id in seen:
            raise BlackboxMIAError(f"{where}: duplicate id {item.id!r} (first on line {seen[item.id]})")
        seen[item.id] = number
        items.append(item)
    if not items:
        raise BlackboxMIAError(f"{path}: empty dataset (no non-blank line)")
    return Dataset(name=name, items=items, source=str(path), sha256=file_sha256(path))


def limit_items(items: Sequence[Item], limit: int | None) -> list[Item]:
    """``limit`` items, stratified by label, in the dataset's order (all of them when ``limit``
    is None).

    Unlabelled or one-label data: the first ``limit`` items. Data with several labels (a canary
    lists its members first): the first items of each label, as many as its share of the data
    (largest-remainder rounding, and at least one of each label when ``limit`` allows), so that
    ``--limit 40`` on 200 members and 200 non-members keeps 20 of each, not 40 members and no
    AUC.

    Raises:
        BlackboxMIAError: ``limit`` below 1 (``--limit 0`` must not mean "everything", nor
            ``--limit -1`` "all but the last").
    """
    if limit is None:
        return list(items)
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise BlackboxMIAError(f"{named('limit')} must be an integer >= 1, got {limit!r}")
    counts: dict[int | None, int] = {}
    for item in items:
        counts[item.label] = counts.get(item.label, 0) + 1
    if len(counts) < 2 or limit >= len(items):
        return list(items[:limit])
    quota = label_quota(counts, limit)
    kept: list[Item] = []
    for item in items:
        if quota[item.label] > 0:
            quota[item.label] -= 1
            kept.append(item)
    return kept


def label_quota(counts: dict, limit: int) -> dict:
    """How many items of each label a stratified ``limit`` keeps: ``limit * count / total``
    rounded by largest remainder (ties to the label seen first), then one item moved from the
    largest quota to each label left at 0 while ``limit`` covers every label.

    Args:
        counts: items per label, in the order the labels first appear (every count >= 1).
        limit: items to keep, 1 <= limit < sum of counts.

    Returns:
        label → items to keep; the quotas sum to ``limit``.
    """
    total = sum(counts.values())
    exact = {label: limit * n / total for label, n in counts.items()}
    quota = {label: int(share) for label, share in exact.items()}
    by_remainder = sorted(counts, key=lambda label: -(exact[label] - quota[label]))  # stable: first seen wins ties
    for label in by_remainder[: limit - sum(quota.values())]:
        quota[label] += 1
    for label in counts:
        if quota[label] == 0 and limit >= len(counts):
            quota[max(quota, key=quota.get)] -= 1
            quota[label] = 1
    return quota
