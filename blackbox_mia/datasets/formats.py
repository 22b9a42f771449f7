"""Text formats of the shipped benchmarks and the item builders of each file format.

An item builder is ``make(i, record, where) -> Item``: ``i`` the 0-based record index,
``where`` the ``file:line`` named in error messages. Each raises
:class:`~blackbox_mia.types.BlackboxMIAError` for a missing field, an empty text or a label
outside {0, 1, null}.
"""

from __future__ import annotations

from collections.abc import Callable

from ..io import json_type
from ..types import BlackboxMIAError
from .items import Item

ItemMaker = Callable[[int, dict, str], Item]


def gsm8k_text(question: str, answer: str) -> str:
    """The text of a GSM8K problem: ``"Question: {question}\\nAnswer: {answer}"`` (answer verbatim)."""
    return f"Question: {question}\nAnswer: {answer}"


def aqua_text(question: str, options: list[str], rationale: str, correct: str) -> str:
    """The text of an AQuA-RAT problem: question, the five options joined by spaces, rationale, letter."""
    return f"Question: {question}\nOptions: {' '.join(options)}\nRationale: {rationale}\nAnswer: {correct}"


def parse_label(value, where: str) -> int | None:
    """0, 1 or None from a record's label (0.0, 1.0 and booleans accepted); raises at ``where`` otherwise."""
    if value is None:
        return None
    if isinstance(value, (bool, int, float)) and value in (0, 1):
        return int(value)
    raise BlackboxMIAError(f"{where}: label must be 0, 1 or null, got {value!r}")


def _check_text(text, where: str) -> str:
    """``text`` if it is a non-blank string; raises at ``where`` otherwise."""
    if not isinstance(text, str):
        raise BlackboxMIAError(f"{where}: text must be a string, got {json_type(text)}")
    if not text.strip():
        raise BlackboxMIAError(f"{where}: empty text")
    return text


def _field(obj: dict, key: str, where: str):
    """``obj[key]``; raises at ``where`` when the field is missing."""
    if key not in obj:
        raise BlackboxMIAError(f"{where}: missing field {key!r}")
    return obj[key]


def gsm8k_item(split: str) -> ItemMaker:
    """Builder of GSM8K items: id ``gsm8k-{split}-{i}``, text :func:`gsm8k_text`, meta ``{question, answer}``, no label."""

    def make(i: int, obj: dict, where: str) -> Item:
        question, answer = _field(obj, "question", where), _field(obj, "answer", where)
        text = _check_text(gsm8k_text(question, answer), where)
        return Item(f"gsm8k-{split}-{i}", text, None, {"question": question, "answer": answer})

    return make


def aqua_item(split: str) -> ItemMaker:
    """Builder of AQuA-RAT items: id ``aqua-{split}-{i}``, text :func:`aqua_text`, meta the four raw fields, no label."""

    def make(i: int, obj: dict, where: str) -> Item:
        raw = {k: _field(obj, k, where) for k in ("question", "options", "rationale", "correct")}
        return Item(f"aqua-{split}-{i}", _check_text(aqua_text(**raw), where), None, raw)

    return make


def wikimia_item(prefix: str) -> ItemMaker:
    """Builder of WikiMIA items: id ``{prefix}-{hf_index}`` (else ``{prefix}-{i}``), text ``input``, ``label`` required."""

    def make(i: int, obj: dict, where: str) -> Item:
        text = _check_text(_field(obj, "input", where), where)
        label = parse_label(_field(obj, "label", where), where)
        meta = {k: v for k, v in obj.items() if k not in ("input", "label")}
        return Item(f"{prefix}-{obj.get('hf_index', i)}", text, label, meta)

    return make


def user_item(stem: str) -> ItemMaker:
    """Builder of user JSONL items: ``text`` (or ``input``), optional ``label`` and ``id`` (default ``{stem}-{i}``)."""

    def make(i: int, obj: dict, where: str) -> Item:
        key = "text" if "text" in obj else "input" if "input" in obj else None
        if key is None:
            raise BlackboxMIAError(f"{where}: no 'text' or 'input' field (keys: {', '.join(obj) or 'none'})")
        text = _check_text(obj[key], where)
        label = parse_label(obj.get("label"), where)
        item_id = obj.get("id", f"{stem}-{i}")
        if not isinstance(item_id, (str, int)) or isinstance(item_id, bool):
            raise BlackboxMIAError(f"{where}: id must be a string or an integer, got {item_id!r}")
        meta = {k: v for k, v in obj.items() if k not in (key, "label", "id")}
        return Item(str(item_id), text, label, meta)

    return make
