"""The tracker's configuration: :class:`TrackerConfig`, the strategies it may force and its limits.

A leaf of the tracker's modules: the strategies (:mod:`.strategies`, :mod:`.flips`,
:mod:`.choice`) take their settings from it, and :mod:`.tracker` builds them from it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ....config import bounded, check_bounds
from ....types import BlackboxMIAError
from ..http.wire import MAX_BIAS

STRATEGIES = ("auto", "prompt", "run", "topn", "forced", "postbias", "bisect")
MAX_TOP_N = 100  # default TrackerConfig.max_top_n (entries per position a request asks for)

# the most positions (generated tokens) one chained request covers: longer chains bill more
# completion tokens for almost no request saved (figures: records/measured-settings.md)
CHAIN_TOKENS = 4


@dataclass(frozen=True)
class TrackerConfig:
    """Configuration of :class:`~.tracker.Tracker`.

    Attributes:
        strategy: ``"auto"`` (cheapest the probe allows) or one strategy forced for every
            position: prompt, run (runs, else ``auto`` per position), topn, forced, postbias,
            bisect.
        epsilon: bisection stops when the bracket is at most this wide (nats), > 0; the probe
            validates bisection with it.
        max_bias: the largest |logit_bias| sent (nats), at most the API's
            :data:`~.wire.MAX_BIAS`; the probe validates the strategies with it.
        verify_flips: re-ask bisection brackets' ends with fresh requests and widen the bounds
            when a flip does not reproduce (which brackets: :class:`~.flips.FlipChecks`).
        verify_repeats: fresh requests per bracket end (2 × this many per re-checked token).
        verify_every: while no flip has been seen not to reproduce, re-check the brackets of a
            text's first positions and one bisected position in this many (1: every one).
        refine_for: how far bisection refines: empty, every value to ε; else the k (percent)
            of each requested score that is the mean of a text's lowest k% of values (100: the
            loss score; Min-K%'s k), and a text's brackets are narrowed until each such score's
            interval is at most ε (:mod:`.refine`: fewer requests, each value still within its
            reported bounds). Build it with :func:`~blackbox_mia.scorers.refine_for`.
        chain_tokens: the most consecutive positions one bisection request asks about where the
            probe verified chained requests (:mod:`.chains`; each generated token is billed as
            completion); 1: one question per request.
        context: the model's context in tokens (≥ 2); longer texts use the local backend's
            sliding windows (stride = half the context). ``None``: whole prefixes.
        pending: most positions (or echo windows, or texts bisected whole) in
            progress at once; ``None`` = twice the client's concurrency. Positions are generated
            lazily, so memory stays linear in the text length (but for texts bisected whole).
        max_top_n: the most top log-probs (entries per position) a request asks for, ≥ 1: the
            endpoint's own cap (``Capabilities.top_n``, which the probe finds) when lower. A
            larger top-n lists more targets (read exactly, no further request) but every answer
            grows with it: a server that lists its whole vocabulary would send ~50k entries
            (megabytes of JSON) per position, and the client's CPU per answer grows about
            linearly with the entries (figures: records/measured-settings.md). The capability
            probe asks for at most this many too, after its one request for the whole
            vocabulary.

    Raises:
        BlackboxMIAError: an unknown strategy or an out-of-range number (each range is its
            field's :func:`~blackbox_mia.config.bounded`).
    """

    strategy: str = "auto"
    epsilon: float = bounded(0.01, above=0)
    max_bias: float = bounded(MAX_BIAS, above=0, at_most=MAX_BIAS)
    verify_flips: bool = True
    verify_repeats: int = bounded(2, at_least=0)
    verify_every: int = bounded(32, at_least=1)
    refine_for: tuple[float, ...] = bounded((), above=0, at_most=100)
    chain_tokens: int = bounded(CHAIN_TOKENS, at_least=1)
    context: int | None = bounded(None, at_least=2)
    pending: int | None = bounded(None, at_least=1)
    max_top_n: int = bounded(MAX_TOP_N, at_least=1)

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise BlackboxMIAError(f"unknown strategy {self.strategy!r}; choose from {', '.join(STRATEGIES)}")
        check_bounds(self)
