"""Datasets: the shipped benchmarks and user JSONL files, as lists of :class:`Item`.

A dataset *spec* is one of the shipped names below, or a path to a JSONL file.

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

``{i}`` is the 0-based record index in the file. Text formats (see :func:`gsm8k_text`,
:func:`aqua_text`):

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

import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ..types import BlackboxMIAError

DATA_DIR = Path(__file__).resolve().parent.parent / "data"


@dataclass(frozen=True)
class Item:
    """One text to score.

    Attributes:
        id: unique within its dataset (``gsm8k-test-17``).
        text: the text scored.
        label: 1 = member, 0 = non-member, ``None`` = unknown.
        meta: the raw record's other fields (GSM8K: question, answer; AQuA: question, options,
            rationale, correct; WikiMIA: hf_index, ...).
    """

    id: str
    text: str
    label: int | None = None
    meta: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Dataset:
    """Items of one source file.

    Attributes:
        name: the canonical spec (``gsm8k:test``) or the file path for user files.
        items: the items, in file order.
        source: path of the source file.
        sha256: hex sha256 of the source file's bytes.
    """

    name: str
    items: list[Item]
    source: str
    sha256: str

    @property
    def labelled(self) -> bool:
        """True when every item carries a membership label."""
        return all(item.label is not None for item in self.items)

    def __len__(self) -> int:
        return len(self.items)


def gsm8k_text(question: str, answer: str) -> str:
    """The text of a GSM8K problem: ``"Question: {question}\\nAnswer: {answer}"`` (answer verbatim)."""
    return f"Question: {question}\nAnswer: {answer}"


def aqua_text(question: str, options: list[str], rationale: str, correct: str) -> str:
    """The text of an AQuA-RAT problem: question, the five options joined by spaces, rationale, letter."""
    return f"Question: {question}\nOptions: {' '.join(options)}\nRationale: {rationale}\nAnswer: {correct}"


def file_sha256(path: Path) -> str:
    """Hex sha256 of a file's bytes."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def read_jsonl(path: Path) -> Iterator[tuple[int, dict]]:
    """``(line number, object)`` for every non-blank line of a JSON Lines file (numbers from 1).

    Raises:
        BlackboxMIAError: the file is missing/unreadable, or a line is not a JSON object.
    """
    path = Path(path)
    if not path.is_file():
        raise BlackboxMIAError(
            f"dataset file not found: {path} (named datasets: {', '.join(NAMED)}; anything else is a JSONL path)"
        )
    try:
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise BlackboxMIAError(f"{path}:{number}: malformed JSON ({exc.msg})") from exc
                if not isinstance(obj, dict):
                    raise BlackboxMIAError(f"{path}:{number}: expected a JSON object, got {type(obj).__name__}")
                yield number, obj
    except (OSError, UnicodeDecodeError) as exc:
        raise BlackboxMIAError(f"cannot read {path}: {exc}") from exc


def _parse_label(value, where: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, (bool, int, float)) and value in (0, 1):
        return int(value)
    raise BlackboxMIAError(f"{where}: label must be 0, 1 or null, got {value!r}")


def _check_text(text, where: str) -> str:
    if not isinstance(text, str):
        raise BlackboxMIAError(f"{where}: text must be a string, got {type(text).__name__}")
    if not text.strip():
        raise BlackboxMIAError(f"{where}: empty text")
    return text


def _field(obj: dict, key: str, where: str):
    if key not in obj:
        raise BlackboxMIAError(f"{where}: missing field {key!r}")
    return obj[key]


def _gsm8k_item(split: str) -> Callable[[int, dict, str], Item]:
    def make(i: int, obj: dict, where: str) -> Item:
        question, answer = _field(obj, "question", where), _field(obj, "answer", where)
        text = _check_text(gsm8k_text(question, answer), where)
        return Item(f"gsm8k-{split}-{i}", text, None, {"question": question, "answer": answer})

    return make


def _aqua_item(split: str) -> Callable[[int, dict, str], Item]:
    def make(i: int, obj: dict, where: str) -> Item:
        raw = {k: _field(obj, k, where) for k in ("question", "options", "rationale", "correct")}
        return Item(f"aqua-{split}-{i}", _check_text(aqua_text(**raw), where), None, raw)

    return make


def _wikimia_item(prefix: str) -> Callable[[int, dict, str], Item]:
    def make(i: int, obj: dict, where: str) -> Item:
        text = _check_text(_field(obj, "input", where), where)
        label = _parse_label(_field(obj, "label", where), where)
        meta = {k: v for k, v in obj.items() if k not in ("input", "label")}
        return Item(f"{prefix}-{obj.get('hf_index', i)}", text, label, meta)

    return make


def _user_item(stem: str) -> Callable[[int, dict, str], Item]:
    def make(i: int, obj: dict, where: str) -> Item:
        key = "text" if "text" in obj else "input" if "input" in obj else None
        if key is None:
            raise BlackboxMIAError(f"{where}: no 'text' or 'input' field (keys: {', '.join(obj) or 'none'})")
        text = _check_text(obj[key], where)
        label = _parse_label(obj.get("label"), where)
        item_id = obj.get("id", f"{stem}-{i}")
        if not isinstance(item_id, (str, int)) or isinstance(item_id, bool):
            raise BlackboxMIAError(f"{where}: id must be a string or an integer, got {item_id!r}")
        meta = {k: v for k, v in obj.items() if k not in (key, "label", "id")}
        return Item(str(item_id), text, label, meta)

    return make


# spec -> (canonical name, file under DATA_DIR, item builder)
NAMED: dict[str, tuple[str, str, Callable[[int, dict, str], Item]]] = {
    "gsm8k": ("gsm8k:test", "gsm8k/test.jsonl", _gsm8k_item("test")),
    "gsm8k:test": ("gsm8k:test", "gsm8k/test.jsonl", _gsm8k_item("test")),
    "gsm8k:train": ("gsm8k:train", "gsm8k/train.jsonl", _gsm8k_item("train")),
    "aqua": ("aqua:test", "aqua/test.json", _aqua_item("test")),
    "aqua:test": ("aqua:test", "aqua/test.json", _aqua_item("test")),
    "aqua:dev": ("aqua:dev", "aqua/dev.json", _aqua_item("dev")),
    "wikimia64": ("wikimia64", "wikimia/WikiMIA_length64.jsonl", _wikimia_item("wikimia64")),
    "wikimia128": ("wikimia128", "wikimia/WikiMIA_length128_subset200.jsonl", _wikimia_item("wikimia128")),
    "wikimia24": ("wikimia24", "wikimia/WikiMIA24_length128_subset200.jsonl", _wikimia_item("wikimia24")),
    "ja-debian-docs": ("ja-debian-docs", "ja_debian_docs/paragraphs.jsonl", _user_item("ja")),
}


def shipped_path(spec: str) -> Path:
    """Path of a named dataset's file; raises :class:`BlackboxMIAError` for an unknown name."""
    if spec not in NAMED:
        raise BlackboxMIAError(f"unknown dataset {spec!r}; named datasets: {', '.join(NAMED)}")
    return DATA_DIR / NAMED[spec][1]


def load_dataset(spec: str) -> Dataset:
    """Load a named dataset (see the module docstring) or a JSONL file.

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
        name, make = spec, _user_item(path.stem)
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
