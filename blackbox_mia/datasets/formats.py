"""Text formats of the shipped benchmarks and the item builders of each file format.

An item builder is ``make(i, record, where) -> Item``: ``i`` the 0-based record index,
``where`` the ``file:line`` named in error messages. Each raises
:class:`~blackbox_mia.types.BlackboxMIAError` for a missing field, an empty text or a label
outside {0, 1, null}.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from ..io import json_type
from ..option_names import named
from ..types import BlackboxMIAError
from .fields import Fields
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


def mimir_item(prefix: str, n_rows: int) -> ItemMaker:
    """Builder of MIMIR items from its rows read twice, members first: item ``i < n_rows`` is
    row ``i``'s ``member`` text (label 1, id ``{prefix}-member-{i}``), item ``n_rows + i`` its
    ``nonmember`` text (label 0, id ``{prefix}-nonmember-{i}``); meta ``{"row": i}``."""

    def make(i: int, obj: dict, where: str) -> Item:
        role, label, row = ("member", 1, i) if i < n_rows else ("nonmember", 0, i - n_rows)
        if role not in obj:
            raise BlackboxMIAError(f"{where}: no {role!r} field (fields: {', '.join(obj)}); "
                                   "MIMIR's rows hold a member and a nonmember text")
        return Item(f"{prefix}-{role}-{row}", _check_text(obj[role], where), label, {"row": row})

    return make


def user_item(stem: str, fields: Fields = Fields(), cells_are_text: bool = False) -> ItemMaker:
    """Builder of user items: the text field (default ``text``, else ``input``), an optional label
    and id (default ``label`` and ``id``; an id absent is ``{stem}-{i}``); other fields go to meta.

    Args:
        stem: the file's stem, the prefix of default ids.
        fields: the field names given (:class:`~.fields.Fields`); a field named there must be
            in every record.
        cells_are_text: the records' values are text (a CSV's cells): a label ``"0"`` / ``"1"``
            is 0 / 1 and an empty cell is null; an empty id cell is absent.
    """

    def make(i: int, obj: dict, where: str) -> Item:
        key = fields.text_field or ("text" if "text" in obj else "input" if "input" in obj else None)
        if key not in obj:
            wanted = repr(key) if key else "'text' or 'input'"
            raise BlackboxMIAError(f"{where}: no {wanted} field (fields: {', '.join(map(str, obj)) or 'none'}); "
                                   f"name the text field with {named('text_field')}")
        for name, given in (("label", fields.label_field), ("id", fields.id_field)):
            if given is not None and given not in obj:
                raise BlackboxMIAError(f"{where}: no {given!r} field for the {name} (fields: {', '.join(map(str, obj))})")
        label_key, id_key = fields.label_field or "label", fields.id_field or "id"
        label, item_id = obj.get(label_key), obj.get(id_key)
        if cells_are_text:
            label = CELL_LABELS.get(label.strip(), label) if isinstance(label, str) else label
            item_id = None if item_id == "" else item_id
        text = _check_text(obj[key], where)
        label = parse_label(label, where)
        item_id = f"{stem}-{i}" if item_id is None else item_id
        if not isinstance(item_id, (str, int)) or isinstance(item_id, bool):
            raise BlackboxMIAError(f"{where}: id must be a string or an integer, got {item_id!r}")
        meta = {k: v for k, v in obj.items() if k not in (key, label_key, id_key)}
        return Item(str(item_id), text, label, meta)

    return make


CELL_LABELS = {"0": 0, "1": 1, "": None, "null": None}
"""A label cell of a CSV file (text) and the label it is: 0, 1, or null (an empty cell)."""


def build_items(records: Iterable[tuple[str, dict]], make: ItemMaker, source: str) -> list[Item]:
    """The items ``make`` builds from ``records`` (``(where, record)`` pairs), in order.

    Raises:
        BlackboxMIAError: what ``make`` raises, a duplicate id (naming both places), or no
            record at all (``source`` named).
    """
    items: list[Item] = []
    seen: dict[str, str] = {}
    for where, obj in records:
        item = make(len(items), obj, where)
        if item.id in seen:
            raise BlackboxMIAError(f"{where}: duplicate id {item.id!r} (first at {seen[item.id]})")
        seen[item.id] = where
        items.append(item)
    if not items:
        raise BlackboxMIAError(f"{source}: empty dataset (no record)")
    return items
