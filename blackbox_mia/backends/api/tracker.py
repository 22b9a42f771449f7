"""The logit_bias probability tracker: lp_i for every token of a text through a top-n API.

For position i the prefix is x_<i (token ids, BOS first when the tokenizer has one) and the
target token is x_i. Strategies, cheapest first (docs/blackbox.md):

``prompt``    echo + logprobs returns every prompt token's log-prob: 1 request per text (per
              window), exact.
``topn``      request the prefix (max_tokens = 1, temperature 0, top-n log-probs); when x_i is
              listed its value is read, exact. Otherwise it bounds lp_i from above by the n-th
              listed value and by log(1 − Σ listed p) (``topn-bound``).
``forced``    bias x_i by +100 so it is sampled and read the log-prob reported for it: exact
              where the probe showed the reported value is the unbiased one (1 request).
``postbias``  with post-bias log-probs (pre-2024 semantics): bias x_i by b; with a reference
              token r listed both unbiased and biased, lp_i = lp_r + (lp'_i − lp'_r) − b
              (Finlayson et al. 2024; Carlini et al. 2024, "Stealing part of a production LM").
``bisect``    greedy-flip bisection: the smallest bias b* that makes the temperature-0 output x_i
              gives lp_i = lp_top − b*. The top-n list gives the lower end of the bracket, a
              galloping search (steps of 1, 2, 4, ... nats) the upper end, and bisection stops
              at ε nats; [lower, upper] are reported. A flip that does not reproduce when the
              bracket is re-checked widens the bounds instead of moving the value (``bisect~``).

Every value carries [lower, upper] bounds (nats) and the strategy that produced it. Values known
only from above have ``lower = -inf`` and one of these strategies:

``*>cap``       the target is not sampled even at the bias cap: lp_i ≤ lp_top − cap.
``topn-bound``  the top-n bound only (``--strategy topn``, or no exact solve was possible).
``ambiguous``   the server's name for the sampled or listed token does not tell whether it is the
                target (e.g. a partial UTF-8 token named ``""``, and the argmax is one too):
                the top-n bound, never a guess.
``unsendable``  prompts go as text and this prefix does not reach the model as these tokens (it
                ends inside a character, or re-tokenizes differently): [−inf, 0].

Token identity never rests on a name alone. With a bias on the target only, the greedy token is
either the unbiased argmax or the target, so an unnamed sampled token is the target when it
cannot be the argmax (different candidates, the argmax listed below it, or, with pre-bias
log-probs, a different reported value).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass

import numpy as np
from tqdm.auto import tqdm

from ...text.windows import sliding_windows
from ...tokenizers import TokenCodec
from ...types import BlackboxMIAError, Provenance, TokenLogprobs
from .capabilities import Capabilities
from .endpoint import Endpoint, NextToken, may_be, surely, with_bos
from .wire import MAX_BIAS

STRATEGIES = ("auto", "prompt", "topn", "forced", "postbias", "bisect")
PER_POSITION = ("forced", "postbias", "bisect")  # strategies that ask one prefix at a time
REPORT_PRECISION_NATS = 1e-4  # servers round log-probs; the mass bound allows this much per entry


@dataclass(frozen=True)
class TrackerConfig:
    """Configuration of :class:`Tracker`.

    Attributes:
        strategy: ``"auto"`` (cheapest the probe allows) or one strategy forced for every
            position: prompt, topn, forced, postbias, bisect.
        epsilon: bisection stops when the bracket is at most this wide (nats), > 0.
        max_bias: the largest |logit_bias| the API accepts (nats; OpenAI: 100).
        verify_flips: re-ask a bisection bracket's ends with fresh requests and widen the
            bounds when a flip does not reproduce.
        verify_repeats: fresh requests per bracket end (2 × this many per bisected token).
        context: the model's context in tokens (≥ 2); longer texts use the local backend's
            sliding windows (stride = half the context). ``None``: whole prefixes.
        pending: most positions (or echo windows) in progress at once; ``None`` = twice the
            client's concurrency. Positions are generated lazily, so memory stays linear in
            the text length.

    Raises:
        BlackboxMIAError: an unknown strategy or an out-of-range number.
    """

    strategy: str = "auto"
    epsilon: float = 0.01
    max_bias: float = MAX_BIAS
    verify_flips: bool = True
    verify_repeats: int = 2
    context: int | None = None
    pending: int | None = None

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise BlackboxMIAError(f"unknown strategy {self.strategy!r}; choose from {', '.join(STRATEGIES)}")
        if not (math.isfinite(self.epsilon) and self.epsilon > 0):
            raise BlackboxMIAError(f"epsilon must be a positive number of nats, got {self.epsilon}")
        if not (math.isfinite(self.max_bias) and 0 < self.max_bias <= MAX_BIAS):
            raise BlackboxMIAError(f"max_bias must be in (0, {MAX_BIAS:g}], got {self.max_bias}")
        if self.verify_repeats < 0:
            raise BlackboxMIAError(f"verify_repeats must be >= 0, got {self.verify_repeats}")
        if self.context is not None and self.context < 2:
            raise BlackboxMIAError(f"the context must be at least 2 tokens, got {self.context}")
        if self.pending is not None and self.pending < 1:
            raise BlackboxMIAError(f"pending must be at least 1, got {self.pending}")


@dataclass
class Estimate:
    """lp_i with bounds (nats) and the strategy that produced it."""

    value: float
    lower: float
    upper: float
    strategy: str

    @classmethod
    def exact(cls, value: float, strategy: str) -> Estimate:
        return cls(value, value, value, strategy)

    @classmethod
    def at_most(cls, upper: float, strategy: str) -> Estimate:
        """Only an upper bound is known: the value is the bound, the lower end is -inf."""
        return cls(upper, -math.inf, upper, strategy)


def topn_upper_bound(answer: NextToken, target: int) -> float:
    """Upper bound (nats) on lp of ``target`` given an unbiased answer that does not list it for sure.

    An unlisted token lies below every listed one and below log(1 − Σ listed p) (with a margin
    of :data:`REPORT_PRECISION_NATS` per entry for rounded reports); an entry that may be the
    target (an ambiguous name) raises the bound to that entry's value.
    """
    listed = [e.logprob for e in answer.top]
    rest = 1.0 - float(np.sum(np.exp(np.asarray(listed) - REPORT_PRECISION_NATS)))
    unlisted = min(min(listed), math.log(rest)) if rest > 0 else min(listed)
    ambiguous = answer.ambiguous(target)
    return unlisted if ambiguous is None else max(unlisted, ambiguous)


def sampled_is_target(
    answer: NextToken, target: int, unbiased: NextToken | None, pre_bias: bool, tolerance: float
) -> bool | None:
    """Whether the greedy token of a request that biased only ``target`` upward is the target.

    The greedy token is then the unbiased argmax or the target. ``None`` when the answer cannot
    tell (an ambiguous name and no way to rule out the argmax).

    Args:
        answer: the biased answer.
        target: the biased token id.
        unbiased: the unbiased answer at the same prefix (its sampled token is the argmax), or None.
        pre_bias: reported log-probs ignore the bias (then the argmax keeps its unbiased value).
        tolerance: nats by which two reports of one value may differ (the probe measures it).
    """
    ids = answer.sampled
    if not may_be(ids, target):
        return False
    if surely(ids, target):
        return True
    if unbiased is None:
        return None
    argmax = unbiased.sampled
    if surely(argmax, target):
        return True
    if argmax is not None and ids is not None and not argmax & ids:
        return True
    if argmax is not None and len(argmax) == 1:
        listed = answer.find(next(iter(argmax)))
        if listed is not None and listed < answer.sampled_logprob - tolerance:
            return True  # the argmax is listed below the sampled token: the sampled one is the target
    if pre_bias and abs(answer.sampled_logprob - unbiased.sampled_logprob) > tolerance:
        return True  # not the argmax's unbiased value
    return None


class _Unknown(Exception):
    """A flip could not be told apart from the argmax (see :func:`sampled_is_target`)."""


class Tracker:
    """Recovers per-token log-probs of texts through an :class:`Endpoint`.

    Args:
        endpoint: the endpoint adapter (client, tokenizer, prompt form).
        capabilities: what the capability probe found for this (endpoint, model).
        config: a :class:`TrackerConfig`.

    Raises:
        BlackboxMIAError: the endpoint cannot give absolute log-probs, or the requested strategy
            is not available on it (the message gives the probe's reason).
    """

    def __init__(self, endpoint: Endpoint, capabilities: Capabilities, config: TrackerConfig = TrackerConfig()):
        available = capabilities.strategies()
        if not available:
            raise BlackboxMIAError(
                "this endpoint does not return log-probs usable for absolute values: " + capabilities.reason("topn")
            )
        if config.strategy != "auto" and config.strategy not in available:
            raise BlackboxMIAError(
                f"strategy {config.strategy!r} is not available on this endpoint "
                f"(available: {', '.join(available)}): {capabilities.reason(config.strategy)}"
            )
        self.endpoint = endpoint
        self.codec: TokenCodec = endpoint.codec
        self.caps = capabilities
        self.config = config
        self.available = available

    # -- public ---------------------------------------------------------------------------

    def sequence(self, text: str) -> list[int]:
        """The ids sent for ``text``: BOS (when the codec has one and prompts are ids) + text tokens."""
        return with_bos(self.codec, self.codec.encode(text), self.endpoint.token_id_prompts)

    async def track(
        self,
        texts: Sequence[str],
        progress: bool = False,
        on_done: Callable[[int, TokenLogprobs], None] | None = None,
    ) -> list[TokenLogprobs]:
        """Log-probs of every scored token of every text.

        Positions (or echo windows) of all texts are generated lazily and worked on by at most
        ``config.pending`` tasks at once, under the client's limits. When a task fails, no new
        position starts, the ones in flight finish (their answers are cached), then the first
        error is raised.

        Args:
            texts: the texts.
            progress: show a progress bar over scored tokens.
            on_done: called as ``on_done(index, logprobs)`` the moment a text is complete.

        Raises:
            BlackboxMIAError: a text with fewer than two tokens, or a failed request.
        """
        sequences = [self.sequence(t) for t in texts]
        for i, seq in enumerate(sequences):
            if len(seq) < 2:
                raise BlackboxMIAError(f"text #{i} has fewer than 2 tokens (no BOS): nothing to score")
        estimates: list[list[Estimate | None]] = [[None] * (len(s) - 1) for s in sequences]
        remaining = [len(s) - 1 for s in sequences]
        results: list[TokenLogprobs | None] = [None] * len(sequences)
        bar = tqdm(total=sum(remaining), unit="tok", disable=not progress, desc="track")

        async def run(job: tuple[int, int, int, int]) -> None:
            t, start, end, first = job
            seq = sequences[t]
            if self._mode() == "prompt":
                found = await self._window(seq, start, end, first)
            else:  # one position: target seq[first] after the window's prefix
                found = [await self._position(seq[start:first], seq[first], self._mode())]
            estimates[t][first - 1 : end - 1] = found
            remaining[t] -= len(found)
            bar.update(len(found))
            if remaining[t] == 0:
                results[t] = self._to_logprobs(seq, estimates[t])
                estimates[t] = []
                if on_done is not None:
                    on_done(t, results[t])

        try:
            await self._work(self._jobs(sequences), run)
        finally:
            bar.close()
        return results

    def describe(self) -> dict:
        return {"tracker": asdict(self.config), "available_strategies": self.available}

    # -- scheduling -------------------------------------------------------------------------

    def _jobs(self, sequences: list[list[int]]) -> Iterator[tuple[int, int, int, int]]:
        """``(text, start, end, first)``: an echo window, or (per position) one target ``first``
        with prefix ``seq[start:first]`` (then ``end = first + 1``)."""
        for t, seq in enumerate(sequences):
            windows = sliding_windows(len(seq), self.config.context) if self.config.context else [(0, len(seq), 1)]
            for start, end, first in windows:
                if self._mode() == "prompt":
                    yield t, start, end, first
                else:
                    for j in range(first, end):
                        yield t, start, j + 1, j

    async def _work(self, jobs: Iterator, run: Callable) -> None:
        """Run ``run(job)`` for every job with at most ``pending`` in progress (lazy: a job is
        drawn only when a worker is free)."""
        width = self.config.pending or 2 * self.endpoint.client.config.concurrency
        failures: list[Exception] = []

        async def worker() -> None:
            for job in jobs:  # next() never awaits, so workers can share the generator
                try:
                    await run(job)
                except Exception as exc:  # noqa: BLE001 - re-raised below, after in-flight work ends
                    failures.append(exc)
                if failures:
                    return

        tasks = [asyncio.ensure_future(worker()) for _ in range(width)]
        try:
            await asyncio.gather(*tasks)
        except BaseException:  # cancelled (Ctrl-C): stop everything
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        if failures:
            raise failures[0]

    def _mode(self) -> str:
        """The forced strategy, or "prompt" / "auto" for the automatic choice."""
        if self.config.strategy == "auto" and "prompt" in self.available:
            return "prompt"
        return self.config.strategy

    # -- one echo window ------------------------------------------------------------------------

    async def _window(self, seq: list[int], start: int, end: int, first: int) -> list[Estimate]:
        """Targets ``first .. end-1`` of one window from one echo request.

        The request generates one token (``max_tokens = 1``), so a window as long as the context
        sends all but its last token and reads the last target from the generated position's
        top-n, falling back to a per-position strategy when it is not listed there.
        """
        full = self.config.context is None or end - start < self.config.context
        ids = seq[start:end] if full else seq[start : end - 1]
        if not self.endpoint.sendable(ids):  # text prompts that do not round-trip: position by position
            return [await self._position(seq[start:j], seq[j], "auto") for j in range(first, end)]
        values, after = await self.endpoint.prompt_logprobs(ids, self.caps.top_n)
        found = [Estimate.exact(v, "prompt") for v in values[first - start :]]
        if not full:
            listed = after.find(seq[end - 1])
            found.append(
                Estimate.exact(listed, "topn") if listed is not None
                else await self._position(seq[start : end - 1], seq[end - 1], "auto")
            )
        return found

    # -- one position ---------------------------------------------------------------------------

    async def _position(self, prefix: list[int], target: int, mode: str) -> Estimate:
        """lp of ``target`` after ``prefix`` with ``mode`` (``auto``: the cheapest available)."""
        if not self.endpoint.sendable(prefix):
            return Estimate.at_most(0.0, "unsendable")
        n = self.caps.top_n
        if mode == "forced" or (mode == "auto" and "forced" in self.available):
            return await self._forced(prefix, target, n)
        answer = await self.endpoint.next_token(prefix, n)
        listed = answer.find(target)
        if listed is not None and mode in ("auto", "topn"):
            return Estimate.exact(listed, "topn")
        upper = listed if listed is not None else topn_upper_bound(answer, target)
        if mode == "auto":
            mode = next((s for s in ("postbias", "bisect") if s in self.available), "topn")
        if mode == "topn":
            return Estimate.at_most(upper, "topn-bound")
        if mode == "postbias":
            return await self._postbias(prefix, target, n, answer, upper)
        # a listed target (forced bisection) is bracketed by the argmax alone, not by its value
        return await self._bisect(prefix, target, answer, upper if listed is None else answer.top_logprob)

    def _is_target(self, answer: NextToken, target: int, unbiased: NextToken | None) -> bool | None:
        return sampled_is_target(answer, target, unbiased, self.caps.reported == "pre-bias", self.caps.tolerance)

    async def _forced(self, prefix: list[int], target: int, n: int) -> Estimate:
        """Bias x_i by the cap; read the pre-bias log-prob reported for the sampled token."""
        biased = await self.endpoint.next_token(prefix, n, {target: self.config.max_bias})
        hit = self._is_target(biased, target, None)
        unbiased = None
        if hit is not True:
            unbiased = await self.endpoint.next_token(prefix, n)
            hit = self._is_target(biased, target, unbiased) if hit is None else hit
        if hit:
            return Estimate.exact(biased.sampled_logprob, "forced")
        listed = unbiased.find(target)
        if listed is not None:
            return Estimate.exact(listed, "topn")
        upper = topn_upper_bound(unbiased, target)
        if hit is None:
            return Estimate.at_most(upper, "ambiguous")
        # not sampled even at the cap: the gap to the argmax exceeds the bias range
        return Estimate.at_most(min(upper, unbiased.top_logprob - self.config.max_bias), "forced>cap")

    async def _postbias(self, prefix: list[int], target: int, n: int, unbiased: NextToken, upper: float) -> Estimate:
        """lp_i = lp_r + (lp'_i − lp'_r) − b with a reference token r listed in both answers."""
        bias = self.config.max_bias
        biased = await self.endpoint.next_token(prefix, n, {target: bias})
        hit = self._is_target(biased, target, unbiased)
        lp_target = biased.find(target)
        if lp_target is None and hit:
            lp_target = biased.sampled_logprob
        if lp_target is not None:
            for entry in unbiased.top:
                if entry.ids is None or len(entry.ids) != 1 or target in entry.ids:
                    continue
                lp_ref_biased = biased.find(next(iter(entry.ids)))
                if lp_ref_biased is not None:
                    return Estimate.exact(entry.logprob + (lp_target - lp_ref_biased) - bias, "postbias")
            return Estimate.at_most(upper, "topn-bound")  # listed, but no reference to solve with
        if hit is False and biased.ambiguous(target) is None:
            # not even listed at the cap: lp_i + b < lp_top
            return Estimate.at_most(min(upper, unbiased.top_logprob - bias), "postbias>cap")
        return Estimate.at_most(upper, "ambiguous")

    async def _flips(self, prefix: list[int], target: int, bias: float, unbiased: NextToken) -> bool:
        answer = await self.endpoint.next_token(prefix, self.caps.top_n, {target: bias})
        hit = self._is_target(answer, target, unbiased)
        if hit is None:
            raise _Unknown
        return hit

    async def _bisect(self, prefix: list[int], target: int, unbiased: NextToken, upper: float) -> Estimate:
        """Smallest bias b* that flips the greedy token to x_i; lp_i = lp_top − b*."""
        try:
            return await self._bisect_bracket(prefix, target, unbiased, upper)
        except _Unknown:
            return Estimate.at_most(upper, "ambiguous")

    async def _bisect_bracket(self, prefix: list[int], target: int, unbiased: NextToken, upper: float) -> Estimate:
        eps, cap = self.config.epsilon, self.config.max_bias
        top = unbiased.top_logprob
        if surely(unbiased.sampled, target):  # already the argmax: nothing to flip
            return Estimate.exact(top, "bisect")
        lo = max(0.0, top - upper)  # b* lies in (lo, hi]
        # galloping search: gaps are usually a few nats, so double a 1-nat step up to the cap
        step, hi = 1.0, min(cap, lo + 1.0)
        while not await self._flips(prefix, target, hi, unbiased):
            if hi >= cap:
                return Estimate.at_most(min(upper, top - cap), "bisect>cap")
            lo, step = hi, step * 2
            hi = min(cap, round(lo + step, 6))
        while hi - lo > eps:
            mid = round((lo + hi) / 2, 6)
            if await self._flips(prefix, target, mid, unbiased):
                hi = mid
            else:
                lo = mid
        strategy = "bisect"
        if self.config.verify_flips:
            lo, hi, consistent = await self._verify(prefix, target, lo, hi, unbiased)
            strategy = "bisect" if consistent else "bisect~"  # widened by a non-reproducible flip
        return Estimate(top - (lo + hi) / 2, top - hi, top - lo, strategy)

    async def _verify(
        self, prefix: list[int], target: int, lo: float, hi: float, unbiased: NextToken
    ) -> tuple[float, float, bool]:
        """Re-ask both ends of the bracket (lo, hi] with fresh requests; widen it until they agree.

        Serving at temperature 0 is not perfectly deterministic: near b* a flip may not
        reproduce. Each end is asked again ``verify_repeats`` times (the bias nudged by 1e-6 per
        repeat, so the answer is not the cached one). If every answer agrees (flip at hi, none
        at lo) the bracket stands: ``(lo, hi, True)``. Otherwise a margin m = ε, 2ε, 4ε, ... is
        added on both sides until fresh answers at lo − m and hi + m agree, and
        ``(lo − m, hi + m, False)`` is returned: the bounds widen, the value is not trusted
        to one noisy answer.
        """
        eps, cap, repeats = self.config.epsilon, self.config.max_bias, self.config.verify_repeats

        async def agree(at_lo: float, at_hi: float) -> bool:
            for j in range(1, repeats + 1):
                nudge = j * 1e-6
                if not await self._flips(prefix, target, min(cap, at_hi + nudge), unbiased):
                    return False
                if at_lo > 0 and await self._flips(prefix, target, at_lo - nudge, unbiased):
                    return False
            return True

        if await agree(lo, hi):
            return lo, hi, True
        margin = eps
        while True:
            at_lo, at_hi = max(0.0, round(lo - margin, 6)), min(cap, round(hi + margin, 6))
            if await agree(at_lo, at_hi) or (at_lo <= 0 and at_hi >= cap):
                return at_lo, at_hi, False
            margin *= 2

    # -- assembly ---------------------------------------------------------------------------

    def _to_logprobs(self, seq: list[int], estimates: list[Estimate]) -> TokenLogprobs:
        strategies = [e.strategy for e in estimates]
        kinds = set(strategies)
        provenance = Provenance(
            backend="api",
            model=self.endpoint.client.config.model,
            strategy=kinds.pop() if len(kinds) == 1 else "mixed",
            bos=self.codec.bos_id is not None and seq[0] == self.codec.bos_id and self.endpoint.token_id_prompts,
            condition=self.caps.condition,
        )
        return TokenLogprobs(
            token_ids=np.asarray(seq[1:]),
            tokens=[self.codec.token_string(i) for i in seq[1:]],
            logprobs=[e.value for e in estimates],
            context_ids=(seq[0],),
            provenance=provenance,
            lower=[e.lower for e in estimates],
            upper=[e.upper for e in estimates],
            strategies=strategies,
        )
