"""What every control construction shares: its configuration, its result, and the skip signal.

An item that cannot be rewritten raises :class:`Skip` with a reason (counted in the report);
``retry=True`` asks :func:`with_attempts` for another seeded draw.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TypeVar

from ..datasets import Item
from ..types import BlackboxMIAError

T = TypeVar("T")


@dataclass(frozen=True)
class ControlConfig:
    """How the control is built (saved next to every result that uses it).

    Attributes:
        seed: seeds every draw; item i's draws depend only on (seed, item id, attempt).
        max_attempts: draws tried per item before it is dropped.
        rel_offset: the offset bound relative to the significant part m: ⌈rel_offset·m⌉.
        min_offset, max_offset: the offset bound is clipped to [min_offset, max_offset] units
            of the significant part.
    """

    seed: int = 0
    max_attempts: int = 40
    rel_offset: float = 0.3
    min_offset: int = 2
    max_offset: int = 9

    def validate(self) -> None:
        """Raise :class:`BlackboxMIAError` for an impossible configuration."""
        if self.max_attempts < 1 or not 1 <= self.min_offset <= self.max_offset or self.rel_offset < 0:
            raise BlackboxMIAError(
                "control: need max_attempts >= 1, 1 <= min_offset <= max_offset, rel_offset >= 0"
            )


DEFAULT_CONFIG = ControlConfig()


@dataclass(frozen=True)
class ControlSet:
    """The control items (label 0) and how many source items were kept.

    Attributes:
        kind: ``"gsm8k"`` or ``"aqua"``.
        items: one control item per kept source item, id ``{source id}-control``; ``meta``
            holds ``source_id``, the new fields and ``mapping`` (old → new values as text).
        n_source: source items given.
        dropped: ``{reason: count}`` of the dropped items.
        config: the construction's configuration.
    """

    kind: str
    items: list[Item]
    n_source: int
    dropped: dict[str, int]
    config: ControlConfig

    @property
    def kept_fraction(self) -> float:
        """Kept items / source items."""
        return len(self.items) / self.n_source if self.n_source else 0.0

    def to_dict(self) -> dict:
        """JSON-ready summary (without the items) for reports."""
        return {
            "kind": self.kind,
            "method": f"{self.kind} numbers changed consistently, solution replayed and checked "
            "(blackbox_mia.controls; Maini et al. 2024 style held-out control)",
            "n_source": self.n_source,
            "n_kept": len(self.items),
            "kept_fraction": self.kept_fraction,
            "dropped": dict(sorted(self.dropped.items())),
            "config": asdict(self.config),
            "limits": "near-duplicates of the source wording (a memorised template scores high: "
            "the control is conservative and under-estimates contamination); only numbers "
            "change; semantics checked only as arithmetic; kept items skew to simpler problems",
        }


class Skip(Exception):
    """This item cannot be rewritten (internal to the constructions, never seen by callers).

    Attributes:
        reason: counted in :attr:`ControlSet.dropped`.
        retry: another seeded draw may succeed.
    """

    def __init__(self, reason: str, retry: bool = False):
        super().__init__(reason)
        self.reason = reason
        self.retry = retry


def with_attempts(config: ControlConfig, attempt_fn: Callable[[int], T]) -> T:
    """Run ``attempt_fn(attempt)`` for attempts 0, 1, ... until it returns; a final ``Skip`` stops at once.

    Raises:
        Skip: a final skip, or ``config.max_attempts`` retried skips (reason names the last).
    """
    last = None
    for attempt in range(config.max_attempts):
        try:
            return attempt_fn(attempt)
        except Skip as skip:
            if not skip.retry:
                raise
            last = skip
    raise Skip(f"no clean draw in {config.max_attempts} attempts (last: {last.reason})")
