"""Result rows: one scored text (scores with their intervals, bound-only tokens, condition), as
written to and read back from a ``bbmia score`` JSONL file."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .datasets import read_jsonl
from .io import json_type
from .option_names import named
from .scorers.bounded import DEFAULT_TOLERANCE_NATS, Bounded
from .types import BlackboxMIAError, TokenLogprobs


@dataclass
class ScoredText:
    """One output row: the item, its scores by scorer label, and N scored tokens.

    A score is a number only when it is known: its log-prob aggregates are within the run's
    tolerance (:attr:`~blackbox_mia.scorers.bounded.Bounded.spread` ≤ ``tolerance`` nats) and it
    is finite. Otherwise it is ``None`` (JSON null): the labels of scores too imprecise to report
    are in :attr:`unscored` with the reason, those that came out NaN or ±inf (e.g. ``lowercase``
    on a text whose mean log-prob is exactly 0) in :attr:`nonfinite`.

    Attributes:
        bound_only: scored tokens of the text whose log-prob is known only from above (black-box
            path: beyond the bias cap, ambiguous identity, unsendable prefix).
        condition: ``None`` when the scores use the text's own log-probs, else what the
            log-probs are conditional on (``"chat-template"``).
        bounds: label → ``[lower, upper]`` of the score (``None`` for an unbounded end), for
            texts whose log-probs are not all exact (black-box path); empty otherwise.
        unscored: label → why the score is null although it was computed (its interval).
    """

    id: str
    label: int | None
    scores: dict[str, float | None]
    n_tokens: int
    bound_only: int = 0
    condition: str | None = None
    bounds: dict[str, list[float | None]] = field(default_factory=dict)
    unscored: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_scores(cls, id: str, label: int | None, scores: dict[str, Bounded], lp: TokenLogprobs | None,
                    tolerance: float = DEFAULT_TOLERANCE_NATS, condition: str | None = None) -> ScoredText:
        """A row from the scorers' bounded scores and the text's log-probs.

        A score whose spread exceeds ``tolerance`` (nats) is ``None`` with its reason in
        :attr:`unscored`; a non-finite one is ``None`` and listed in :attr:`nonfinite`. ``lp``
        None: every score is text-only (exact, from generations), ``n_tokens`` is 0 (no
        log-prob was scored) and ``condition`` is what the generations were conditional on
        (with ``lp`` given, its provenance's condition is used).
        """
        exact = lp is None or (lp.lower is None and lp.upper is None)
        clean: dict[str, float | None] = {}
        bounds: dict[str, list[float | None]] = {}
        unscored: dict[str, str] = {}
        for key, b in scores.items():
            clean[key] = float(b.value) if math.isfinite(b.value) else None
            if not exact:
                bounds[key] = [_finite_or_none(b.lower), _finite_or_none(b.upper)]
            if b.spread > tolerance:
                clean[key] = None
                unscored[key] = (f"interval [{b.lower:.4g}, {b.upper:.4g}]: its log-prob means are known only "
                                 f"to {b.spread:.3g} nats (tolerance {tolerance:g})")
        if lp is None:
            return cls(id, label, clean, 0, 0, condition, bounds, unscored)
        bound_only = 0 if lp.lower is None else int((~np.isfinite(lp.lower)).sum())
        return cls(id, label, clean, lp.n_tokens, bound_only, lp.provenance.condition, bounds, unscored)

    @property
    def nonfinite(self) -> list[str]:
        """Labels of the scorers whose score was NaN or ±inf (stored as ``None``)."""
        return [k for k, v in self.scores.items() if v is None and k not in self.unscored]

    def to_json(self) -> dict:
        row = {"id": self.id, "n_tokens": self.n_tokens, "scores": self.scores}
        if self.label is not None:
            row["label"] = self.label
        if self.nonfinite:
            row["nonfinite"] = self.nonfinite
        if self.unscored:
            row["unscored"] = self.unscored
        if self.bounds:
            row["score_bounds"] = self.bounds
        if self.bound_only:
            row["bound_only"] = self.bound_only
        if self.condition is not None:
            row["condition"] = self.condition
        return row


def _finite_or_none(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def _row(obj: dict, labels: Sequence[str] | None) -> ScoredText:
    """A :class:`ScoredText` from one parsed JSONL row; raises ValueError saying what is wrong."""
    row_id, label, scores, n_tokens = obj.get("id"), obj.get("label"), obj.get("scores"), obj.get("n_tokens")
    if not isinstance(row_id, str):
        raise ValueError(f"'id' must be a string, got {row_id!r}")
    if label not in (None, 0, 1) or isinstance(label, bool):
        raise ValueError(f"'label' must be 0, 1 or absent, got {label!r}")
    if not isinstance(n_tokens, int) or isinstance(n_tokens, bool) or n_tokens < 0:
        raise ValueError(f"'n_tokens' must be a non-negative integer, got {n_tokens!r}")
    if not isinstance(scores, dict):
        raise ValueError(f"'scores' must be an object, got {json_type(scores)}")
    clean: dict[str, float | None] = {}
    for key, value in scores.items():
        if value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool)):
            raise ValueError(f"score {key!r} must be a number or null, got {value!r}")
        clean[key] = None if value is None or not math.isfinite(value) else float(value)
    if labels is not None and set(clean) != set(labels):
        raise ValueError(f"scores {sorted(clean)} do not match the scorers {sorted(labels)}")
    bound_only, condition = obj.get("bound_only", 0), obj.get("condition")
    if not isinstance(bound_only, int) or isinstance(bound_only, bool) or not 0 <= bound_only <= n_tokens:
        raise ValueError(f"'bound_only' must be an integer in [0, n_tokens], got {bound_only!r}")
    if condition is not None and not isinstance(condition, str):
        raise ValueError(f"'condition' must be a string or absent, got {condition!r}")
    unscored = obj.get("unscored", {})
    if not isinstance(unscored, dict) or not all(k in clean and clean[k] is None and isinstance(v, str)
                                                  for k, v in unscored.items()):
        raise ValueError(f"'unscored' must map null scores to reasons, got {unscored!r}")
    bounds = obj.get("score_bounds", {})
    if not isinstance(bounds, dict) or not all(k in clean and _is_interval(v) for k, v in bounds.items()):
        raise ValueError(f"'score_bounds' must map scores to [lower, upper] (numbers or null), got {bounds!r}")
    return ScoredText(row_id, label, clean, n_tokens, bound_only, condition, bounds, unscored)


def _is_interval(value: object) -> bool:
    return isinstance(value, list) and len(value) == 2 and all(
        v is None or (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)) for v in value)


def read_rows(path: Path, labels: Sequence[str] | None = None) -> list[ScoredText]:
    """Rows of a ``bbmia score`` JSONL file (blank lines skipped).

    Args:
        path: the file.
        labels: when given, every row must hold exactly these scorer labels.

    Raises:
        BlackboxMIAError: a missing file, or a malformed line (its number is named): not JSON,
            not an object, a field missing or of the wrong type, other scorers than ``labels``.
    """
    path = Path(path)
    if not path.is_file():
        raise BlackboxMIAError(f"no such result file: {path}")
    rows = []
    for number, obj in read_jsonl(path):
        try:
            rows.append(_row(obj, labels))
        except ValueError as exc:
            raise BlackboxMIAError(
                f"{path}:{number}: malformed result row ({exc}); fix or delete the line, or rescore with {named('resume')}"
            ) from exc
    return rows
