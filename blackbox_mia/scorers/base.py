"""The scorer interface: one small base class, one module per attack, registered by
:func:`register_scorer` (the package imports every module of its folder: a new scorer is one file).

Every scorer maps the :class:`~blackbox_mia.types.TokenLogprobs` of a text (computed once and
shared by all scorers) to one :class:`~.bounded.Bounded` number (the score and the interval its
tokens' bounds allow), with one sign convention: **higher = more likely a member**. A scorer
that needs more log-probs (PAC's neighbours, the lowercased text, a reference model) declares
them in :meth:`Scorer.needs`; the runner computes them through the same backend interface,
batched with everything else, so scorers never touch torch or HTTP.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, TypeVar

import numpy as np

from ..types import TokenLogprobs
from .bounded import Bounded, set_size

PERCENT = {"above": 0.0, "at_most": 100.0}  # bounds of a k% parameter (check_number keywords)

PERCENT_SIGN_BELOW = 1.0
"""A percent parameter below this value is written with its ``%`` sign in a spec (``k=0.5%``):
without it, ``k=0.2`` could as well be the fraction 0.2 (20 %) of papers' code, so it is refused
(:func:`~blackbox_mia.scorers.parse_scorer`)."""

TARGET = "target"
REFERENCE = "reference"


def reference_role(index: int) -> str:
    """The backend role of the ``index``-th reference model (0-based, ``--ref`` order):
    ``reference``, then ``reference2``, ``reference3``... (the first keeps the one-reference name)."""
    return REFERENCE if index == 0 else f"{REFERENCE}{index + 1}"


def is_reference_role(role: str) -> bool:
    """Whether ``role`` names a reference model (:func:`reference_role` of some index)."""
    return role == REFERENCE or (role.startswith(REFERENCE) and role[len(REFERENCE):].isdigit())


@dataclass(frozen=True)
class Need:
    """A text whose log-probs a scorer needs, and which backend ("target" or "reference")."""

    text: str
    role: str = TARGET


class Scorer(ABC):
    """Base class of membership scorers. Subclasses are frozen dataclasses of their parameters.

    Class attributes:
        name: registry name (``"min_k"``).
        needs_vocab_stats: True when the scorer reads ``mu``/``sigma`` (local backend only).
        needs_logprobs: True when the scorer reads log-probs (:meth:`score`); False for the
            text-only scorers (:mod:`.text_only`), which read generations.
        ranges: per numeric parameter, its bounds as keyword arguments of
            :func:`~blackbox_mia.config.check_number` (checked when a spec is parsed).
    """

    name: ClassVar[str]
    needs_vocab_stats: ClassVar[bool] = False
    needs_logprobs: ClassVar[bool] = True
    ranges: ClassVar[Mapping[str, Mapping[str, float]]] = {}

    def needs(self, text: str) -> list[Need]:
        """Texts beyond ``text`` itself (under the target) whose log-probs :meth:`score` reads."""
        return []

    @abstractmethod
    def score(self, text: str, lp: TokenLogprobs, aux: list[TokenLogprobs]) -> Bounded:
        """Membership score of ``text`` with its interval (:mod:`.bounded`); ``aux[j]`` holds the
        log-probs of ``self.needs(text)[j]``.

        Raises:
            BlackboxMIAError: a text with no scored token, or log-probs the scorer cannot read.
        """

    def conditioning_texts(self) -> tuple[str, ...]:
        """Texts the scorer prepends to every scored text (ReCaLL's non-member prefix): an audit
        refuses them among its own items, whose exchangeability they would break. Empty for most."""
        return ()

    def lowest_percent(self) -> float | None:
        """k (percent) when the score is made of means of the lowest k% of the log-probs of each
        text it reads (k = 100: their mean), so bounds on those means bound the score and the
        black-box tracker need refine a text only until they are ε wide
        (:mod:`blackbox_mia.backends.api.tracker.refine`); None when the score reads the values
        otherwise (then every value is refined to ε)."""
        return None

    def dataset_test(self, scores: np.ndarray, seed: int) -> dict | None:
        """A dataset-level test the scorer's paper applies to the scores of one partition (the
        members, or the non-members, of a labelled set), as ``{"test": name, "significant":
        bool, ...}``; None when the paper has none (most scorers)."""
        return None

    def params(self) -> dict:
        """The scorer's parameters, as saved next to every result."""
        return dataclasses.asdict(self)  # type: ignore[call-overload]

    @property
    def label(self) -> str:
        """Column name in outputs: the name, plus any parameter that differs from its default."""
        changed = [
            f"{f.name}={_format(getattr(self, f.name), self.ranges.get(f.name) == PERCENT)}"
            for f in dataclasses.fields(self)  # type: ignore[arg-type]
            if getattr(self, f.name) != f.default
        ]
        return self.name + (":" + ",".join(changed) if changed else "")


REGISTRY: dict[str, type[Scorer]] = {}
"""Every scorer class by its :attr:`Scorer.name`, filled by :func:`register_scorer` when its module
is imported (:mod:`blackbox_mia.scorers` imports them all)."""

S = TypeVar("S", bound=type[Scorer])


def register_scorer(cls: S) -> S:
    """Class decorator: add a scorer class to :data:`REGISTRY` under its ``name``.

    Raises:
        ValueError: another class is registered under the same name (a programming error).
    """
    if REGISTRY.setdefault(cls.name, cls) is not cls:
        raise ValueError(f"two scorers named {cls.name!r}: {REGISTRY[cls.name].__qualname__} and {cls.__qualname__}")
    return cls


def _format(value, percent: bool = False) -> str:
    """A parameter's value as a spec writes it (a percent below :data:`PERCENT_SIGN_BELOW` with its sign)."""
    text = f"{value:g}" if isinstance(value, float) else str(value)
    return text + "%" if percent and value < PERCENT_SIGN_BELOW else text


def mean_logprob(lp: TokenLogprobs) -> float:
    """Mean lp_i in nats/token; raises :class:`BlackboxMIAError` when no token is scored."""
    set_size(lp.n_tokens, 100)
    return float(np.mean(lp.logprobs))
