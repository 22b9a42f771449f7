"""Which control a benchmark gets, and building it: the registry of control kinds.

A kind is recognised by the fields its items carry in ``meta`` (the shipped GSM8K and AQuA
datasets carry them); :func:`build_control` rewrites every item with that kind's construction
and keeps the ones that check.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..datasets import Item, aqua_text, gsm8k_text
from ..types import BlackboxMIAError
from .aqua import perturb_aqua
from .base import DEFAULT_CONFIG, ControlConfig, ControlSet, Skip
from .gsm8k import perturb_gsm8k


@dataclass(frozen=True)
class ControlKind:
    """One benchmark family a control can be built from.

    Attributes:
        fields: the ``meta`` keys every item must carry.
        perturb: ``(meta, item id, config) -> (new fields, {old: new value as text})``; raises
            :class:`~blackbox_mia.controls.base.Skip` for an item it cannot rewrite.
        text: the item text of the new fields (the dataset's own text format).
    """

    fields: frozenset[str]
    perturb: Callable[[dict, str, ControlConfig], tuple[dict, dict]]
    text: Callable[..., str]


# Tried in this order: the first kind whose fields every item carries.
KINDS: dict[str, ControlKind] = {
    "gsm8k": ControlKind(frozenset({"question", "answer"}), perturb_gsm8k, gsm8k_text),
    "aqua": ControlKind(frozenset({"question", "options", "rationale", "correct"}), perturb_aqua, aqua_text),
}


def control_kind(items: Sequence[Item]) -> str | None:
    """``"gsm8k"`` or ``"aqua"`` when every item carries that benchmark's fields in ``meta``
    (the shipped datasets do), else None (no control can be built)."""
    for name, kind in KINDS.items():
        if items and all(kind.fields <= set(it.meta) for it in items):
            return name
    return None


def build_control(items: Sequence[Item], config: ControlConfig = DEFAULT_CONFIG) -> ControlSet:
    """Rewrite every item with new numbers (see :mod:`blackbox_mia.controls`); keep the ones that check.

    Args:
        items: GSM8K-style (``meta`` with question, answer) or AQuA-style (question, options,
            rationale, correct) items.
        config: seed and perturbation size.

    Returns:
        :class:`ControlSet` with the kept items (label 0, id ``{source id}-control``) in source order.

    Raises:
        BlackboxMIAError: the items are neither GSM8K nor AQuA problems, or a bad config.
    """
    config.validate()
    name = control_kind(items)
    if name is None:
        raise BlackboxMIAError(
            "a control can be built only from GSM8K-style items (question, answer) or AQuA-style "
            "items (question, options, rationale, correct)"
        )
    kind = KINDS[name]
    kept, dropped = [], {}
    for item in items:
        try:
            fields_, mapping = kind.perturb(item.meta, item.id, config)
        except Skip as skip:
            dropped[skip.reason] = dropped.get(skip.reason, 0) + 1
            continue
        meta = {"source_id": item.id, **fields_, "mapping": mapping}
        kept.append(Item(f"{item.id}-control", kind.text(**fields_), 0, meta))
    return ControlSet(name, kept, len(items), dropped, config)
