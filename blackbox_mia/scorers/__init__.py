"""Registry of membership scorers, by name. Convention everywhere: higher = more likely a member.

A scorer spec on the command line is ``NAME`` or ``NAME:param=value,...`` (``min_k:k=10``).
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from collections.abc import Iterable, Sequence

from ..config import check_number
from ..types import BlackboxMIAError
from .base import PERCENT, PERCENT_SIGN_BELOW, REFERENCE, REGISTRY, TARGET, Need, Scorer, is_reference_role, reference_role
from .text_only import GenerationScorer

for _module in pkgutil.iter_modules(__path__):  # each scorer module registers its classes (register_scorer)
    importlib.import_module(f"{__name__}.{_module.name}")

DEFAULT_SCORERS = ("loss", "zlib", "lowercase", "min_k", "min_k_pp", "pac")
TEXT_ONLY_SCORERS = ("samia", "cdd")
"""The text-only scorers that apply to any text (``--methods auto`` without log-probs);
``ts_guessing`` joins them on multiple-choice items (:func:`text_only_specs`)."""


def parse_scorer(spec: str) -> Scorer:
    """Build a scorer from ``NAME`` or ``NAME:param=value,...``.

    A percent parameter (Min-K%'s ``k``, PAC's ``k1``/``k2``: 0 < k <= 100) may carry its
    ``%`` sign (``min_k:k=10%``), and must carry it below 1 (``min_k:k=0.5%``): ``min_k:k=0.2``
    is refused, as it may be meant as the fraction 0.2 (20 %) that papers' code uses.

    Raises:
        BlackboxMIAError: unknown scorer, unknown parameter, a value of the wrong type, a
            percent below 1 without its ``%`` sign, or out of its range (:attr:`Scorer.ranges`;
            ``pac:n_neighbours=0``: "scorer 'pac': n_neighbours must be an integer >= 1, got 0").
    """
    name, _, arg_text = spec.strip().partition(":")
    if name not in REGISTRY:
        raise BlackboxMIAError(f"unknown scorer {name!r}; known: {', '.join(sorted(REGISTRY))}")
    cls = REGISTRY[name]
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for item in filter(None, (a.strip() for a in arg_text.split(","))):
        key, eq, value = item.partition("=")
        if not eq or key not in fields:
            raise BlackboxMIAError(
                f"scorer {name!r}: bad parameter {item!r}; parameters: {', '.join(fields) or 'none'}"
            )
        percent = cls.ranges.get(key) == PERCENT
        number = value[:-1] if percent and value.endswith("%") else value
        try:
            kwargs[key] = type(fields[key].default)(number)
        except ValueError as exc:
            raise BlackboxMIAError(f"scorer {name!r}: {key}={value!r} is not a {type(fields[key].default).__name__}") from exc
        if isinstance(kwargs[key], (int, float)):
            check_number(f"scorer {name!r}: {key}", kwargs[key], given=value, **cls.ranges.get(key, {}))
        if percent and number == value and kwargs[key] < PERCENT_SIGN_BELOW:
            raise BlackboxMIAError(
                f"scorer {name!r}: {key}={value} is ambiguous: {key} is a percent (0 < {key} <= 100); write "
                f"{key}={100 * kwargs[key]:g} for {100 * kwargs[key]:g}% of the tokens, or {key}={value}% for {value}%")
    return cls(**kwargs)


def default_scorer_specs(vocab_stats: bool) -> tuple[str, ...]:
    """The default scorers: all of :data:`DEFAULT_SCORERS`, without those that need the full
    next-token distribution (Min-K%++) when the target does not give it (``vocab_stats``
    False: black-box endpoints)."""
    return tuple(s for s in DEFAULT_SCORERS if vocab_stats or not REGISTRY[s].needs_vocab_stats)  # names: no parse


def text_only_specs(multiple_choice: bool) -> tuple[str, ...]:
    """The text-only scorers for a dataset: :data:`TEXT_ONLY_SCORERS`, plus ``ts_guessing``
    when every item is a multiple-choice item (``multiple_choice``)."""
    return TEXT_ONLY_SCORERS + (("ts_guessing",) if multiple_choice else ())


def refine_for(scorers: Sequence[Scorer]) -> tuple[float, ...]:
    """The precision the black-box tracker refines texts to for these scorers: the k of each
    (:meth:`Scorer.lowest_percent`), sorted, without repeats; ``()`` (every value to ε) when one
    of them reads the values otherwise (PAC, Min-K%++) or none is given."""
    percents = [s.lowest_percent() for s in scorers if s.needs_logprobs]
    if not percents or None in percents:
        return ()
    return tuple(sorted(set(percents)))


def check_conditioning(scorers: Sequence[Scorer], texts: Iterable[str], where: str) -> None:
    """Refuse a scorer's conditioning texts (ReCaLL's and Con-ReCall's prefixes:
    :meth:`Scorer.conditioning_texts`) among an audit's own ``texts``: a text scored with itself
    in its prefix is no longer exchangeable with the others (a sweep's level would not hold, an
    evaluation's AUC would be biased).

    Raises:
        BlackboxMIAError: such a text (the message names the scorer and ``where``); or a
            scorer's unreadable prefix file (:func:`.recall.prefix_shots`).
    """
    own = set(texts)
    for scorer in scorers:
        clash = [t for t in scorer.conditioning_texts() if t in own]
        if clash:
            raise BlackboxMIAError(f"scorer {scorer.label!r} conditions on {len(clash)} text(s) among {where} "
                                   f"({clash[0][:40]!r}...): take its prefix from other known items")


def split_specs(text: str) -> list[str]:
    """Split ``"loss,min_k:k=10,pac:k1=5,k2=20"`` into ``["loss", "min_k:k=10", "pac:k1=5,k2=20"]``.

    A comma-separated piece of the form ``key=value`` continues the previous scorer's parameters.
    """
    specs: list[str] = []
    for piece in filter(None, (p.strip() for p in text.replace(";", ",").replace(" ", ",").split(","))):
        if "=" in piece and ":" not in piece and specs:
            specs[-1] += "," + piece
        else:
            specs.append(piece)
    return specs


def parse_scorers(specs: list[str] | str) -> list[Scorer]:
    """Parse several specs: a list, or one string (see :func:`split_specs`).

    Raises:
        BlackboxMIAError: an empty list, a bad spec, or two scorers with the same label.
    """
    if isinstance(specs, str):
        specs = split_specs(specs)
    if not specs:
        raise BlackboxMIAError("no scorer given")
    scorers = [parse_scorer(s) for s in specs]
    labels = [s.label for s in scorers]
    if len(set(labels)) != len(labels):
        raise BlackboxMIAError(f"duplicate scorers: {labels}")
    return scorers


__all__ = ["REGISTRY", "DEFAULT_SCORERS", "REFERENCE", "TARGET", "TEXT_ONLY_SCORERS", "GenerationScorer", "Need", "Scorer",
           "check_conditioning", "default_scorer_specs", "is_reference_role", "parse_scorer", "reference_role", "parse_scorers", "refine_for", "split_specs", "text_only_specs"]
