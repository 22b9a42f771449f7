"""The logit_bias probability tracker: lp_i for every token of a text through a top-n API.

For position i the prefix is x_<i (token ids, BOS first when the tokenizer has one) and the
target token is x_i. Strategies, cheapest first (design.md §4):

``prompt``    echo + logprobs returns every prompt token's log-prob: 1 request per text, exact.
``topn``      request the prefix (max_tokens = 1, temperature 0, top-n log-probs); when x_i is
              listed its value is read, exact. Otherwise it bounds lp_i from above by the n-th
              listed value and by log(1 − Σ listed p). Needed anyway as the first request of a
              position by ``postbias`` and ``bisect``.
``forced``    bias x_i by +100 so it is sampled and read the log-prob reported for it: exact
              where the probe showed the reported value is the unbiased one (1 request).
``postbias``  with post-bias log-probs (pre-2024 semantics): bias x_i by b; with a reference
              token r listed both unbiased and biased, lp_i = lp_r + (lp'_i − lp'_r) − b
              (Finlayson et al. 2024; Carlini et al. 2024, "Stealing part of a production LM").
``bisect``    greedy-flip bisection: the smallest bias b* that makes the temperature-0 output x_i
              gives lp_i = lp_top − b*. The top-n list gives the lower end of the bracket, a
              galloping search (steps of 1, 2, 4, ... nats) the upper end, and bisection stops
              at ε nats; [lower, upper] are reported. A gap beyond the bias cap gives an
              upper bound only (flagged ``bisect>cap``). A flip that does not reproduce when the
              bracket is re-checked widens the bounds instead of moving the value.

Every value carries [lower, upper] bounds (nats) and the strategy that produced it. Positions
whose target lies beyond the ±100 bias range keep their upper bound as value and are flagged.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
from tqdm.auto import tqdm

from .backends.local import sliding_windows
from .capabilities import Capabilities
from .endpoint import Endpoint, NextToken
from .tokenization import TokenCodec
from .types import BlackboxMIAError, Provenance, TokenLogprobs

STRATEGIES = ("auto", "prompt", "topn", "forced", "postbias", "bisect")


@dataclass(frozen=True)
class TrackerConfig:
    """Configuration of :class:`Tracker`.

    Attributes:
        strategy: ``"auto"`` (cheapest the probe allows) or one strategy forced for every
            position: prompt, topn, forced, postbias, bisect.
        epsilon: bisection stops when the bracket is at most this wide (nats).
        max_bias: the largest |logit_bias| the API accepts (OpenAI: 100).
        verify_flips: re-ask a bisection bracket's ends with fresh requests and widen the
            bounds when a flip does not reproduce.
        verify_repeats: fresh requests per bracket end (2 × this many per bisected token).
        context: the model's context in tokens; longer texts use the local backend's sliding
            windows (stride = half the context). ``None``: whole prefixes.
    """

    strategy: str = "auto"
    epsilon: float = 0.01
    max_bias: float = 100.0
    verify_flips: bool = True
    verify_repeats: int = 2
    context: int | None = None


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


def topn_upper_bound(answer: NextToken) -> float:
    """Upper bound on the log-prob of an unlisted token: min(n-th listed lp, log(1 − Σ listed p))."""
    listed = [e.logprob for e in answer.top]
    rest = 1.0 - float(np.sum(np.exp(listed)))
    mass_bound = math.log(rest) if rest > 0 else -math.inf
    return min(min(listed), mass_bound) if listed else 0.0


async def gather_or_cancel(coroutines) -> list:
    """``asyncio.gather`` that cancels the other requests when one fails (no orphan requests)."""
    tasks = [asyncio.ensure_future(c) for c in coroutines]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


class Tracker:
    """Recovers per-token log-probs of texts through an :class:`Endpoint`.

    Args:
        endpoint: the endpoint adapter (client, tokenizer, prompt form).
        capabilities: what the capability probe found for this (endpoint, model).
        config: a :class:`TrackerConfig`.

    Raises:
        BlackboxMIAError: the endpoint cannot give absolute log-probs, or the forced strategy
            is not available on it (the message says why).
    """

    def __init__(self, endpoint: Endpoint, capabilities: Capabilities, config: TrackerConfig = TrackerConfig()):
        if config.strategy not in STRATEGIES:
            raise BlackboxMIAError(f"unknown strategy {config.strategy!r}; choose from {', '.join(STRATEGIES)}")
        available = capabilities.strategies()
        if not available:
            raise BlackboxMIAError(
                "this endpoint does not return log-probs usable for absolute values: "
                + "; ".join(capabilities.notes or ["no top-n log-probs"])
            )
        if config.strategy != "auto" and config.strategy not in available:
            raise BlackboxMIAError(
                f"strategy {config.strategy!r} is not available on this endpoint "
                f"(available: {', '.join(available)}): " + "; ".join(capabilities.notes)
            )
        self.endpoint = endpoint
        self.codec: TokenCodec = endpoint.codec
        self.caps = capabilities
        self.config = config
        self.available = available

    # -- public ---------------------------------------------------------------------------

    def sequence(self, text: str) -> list[int]:
        """The ids sent for ``text``: BOS (when the codec has one and prompts are ids) + text tokens."""
        ids = self.codec.encode(text)
        if self.codec.bos_id is not None and self.endpoint.token_id_prompts:
            ids = [self.codec.bos_id] + ids
        return ids

    async def track(self, texts: Sequence[str], progress: bool = False) -> list[TokenLogprobs]:
        """Log-probs of every scored token of every text; all positions are requested concurrently
        under the client's limits.

        Raises:
            BlackboxMIAError: a text with fewer than two tokens (nothing to condition on).
        """
        sequences = [self.sequence(t) for t in texts]
        for i, seq in enumerate(sequences):
            if len(seq) < 2:
                raise BlackboxMIAError(f"text #{i} has fewer than 2 tokens (no BOS): nothing to score")
        bar = tqdm(total=sum(len(s) - 1 for s in sequences), unit="tok", disable=not progress, desc="track")
        estimates = await gather_or_cancel(self._track_sequence(seq, bar) for seq in sequences)
        bar.close()
        return [self._to_logprobs(seq, est) for seq, est in zip(sequences, estimates)]

    def describe(self) -> dict:
        return {"tracker": asdict(self.config), "available_strategies": self.available}

    # -- per text / per position ---------------------------------------------------------------

    def _mode(self) -> str:
        """The forced strategy, or "prompt" / "auto" for the automatic choice."""
        if self.config.strategy == "auto" and "prompt" in self.available:
            return "prompt"
        return self.config.strategy

    async def _track_sequence(self, seq: list[int], bar) -> list[Estimate]:
        # the same windows as LocalBackend, so a model with a short context is compared fairly
        windows = sliding_windows(len(seq), self.config.context) if self.config.context else [(0, len(seq), 1)]
        if self._mode() == "prompt":
            estimates = []
            for start, end, first in windows:
                values = await self.endpoint.prompt_logprobs(seq[start:end])
                if any(v is None for v in values[first - start :]):
                    raise BlackboxMIAError("echo returned a null log-prob for a prompt token after the first")
                estimates += [Estimate.exact(v, "prompt") for v in values[first - start :]]
                bar.update(end - first)
            return estimates

        async def one(start: int, j: int) -> Estimate:
            estimate = await self._track_position(seq[start:j], seq[j])
            bar.update(1)
            return estimate

        return await gather_or_cancel(one(start, j) for start, end, first in windows for j in range(first, end))

    async def _track_position(self, prefix: list[int], target: int) -> Estimate:
        mode, n = self._mode(), self.caps.top_n
        if mode == "forced" or (mode == "auto" and "forced" in self.available):
            # one request: the forced token's pre-bias log-prob is exact, listed or not
            return await self._forced(prefix, target, n)
        answer = await self.endpoint.next_token(prefix, n)
        listed = answer.find(target)
        if listed is not None and mode in ("auto", "topn"):
            return Estimate.exact(listed, "topn")
        upper = listed if listed is not None else topn_upper_bound(answer)
        if mode == "auto":
            mode = next((s for s in ("forced", "postbias", "bisect") if s in self.available), "topn")
        if mode == "topn":
            return Estimate(upper, -math.inf, upper, "topn-bound")
        if mode == "forced":
            return await self._forced(prefix, target, n)
        if mode == "postbias":
            return await self._postbias(prefix, target, n, answer, upper)
        # a listed target (forced bisection) is bracketed by the argmax alone, not by its value
        return await self._bisect(prefix, target, answer, upper if listed is None else answer.top_logprob)

    async def _forced(self, prefix: list[int], target: int, n: int) -> Estimate:
        """Bias x_i by the cap; read the pre-bias log-prob reported for the sampled token."""
        answer = await self.endpoint.next_token(prefix, n, {target: self.config.max_bias})
        if target in answer.sampled and answer.sampled_logprob is not None:
            return Estimate.exact(float(answer.sampled_logprob), "forced")
        # not sampled even at the cap: the gap to the argmax exceeds the bias range
        unbiased = await self.endpoint.next_token(prefix, n)
        top = unbiased.top_logprob
        upper = min(topn_upper_bound(unbiased), top - self.config.max_bias)
        return Estimate(upper, -math.inf, upper, "forced>cap")

    async def _postbias(self, prefix: list[int], target: int, n: int, unbiased: NextToken, upper: float) -> Estimate:
        """lp_i = lp_r + (lp'_i − lp'_r) − b with a reference token r listed in both answers."""
        bias = self.config.max_bias
        biased = await self.endpoint.next_token(prefix, n, {target: bias})
        lp_target = biased.find(target)
        if lp_target is not None:
            for entry in unbiased.top:
                if target in entry.ids:
                    continue
                lp_ref_biased = next((e.logprob for e in biased.top if set(e.ids) & set(entry.ids)), None)
                if lp_ref_biased is not None:
                    value = entry.logprob + (lp_target - lp_ref_biased) - bias
                    return Estimate.exact(value, "postbias")
        top = unbiased.top_logprob
        bound = min(upper, top - bias)
        return Estimate(bound, -math.inf, bound, "postbias>cap")

    async def _flips(self, prefix: list[int], target: int, bias: float) -> bool:
        answer = await self.endpoint.next_token(prefix, 0, {target: bias})
        return target in answer.sampled

    async def _bisect(self, prefix: list[int], target: int, unbiased: NextToken, upper: float) -> Estimate:
        """Smallest bias b* that flips the greedy token to x_i; lp_i = lp_top − b*."""
        eps, cap = self.config.epsilon, self.config.max_bias
        top = unbiased.top_logprob
        if target in unbiased.sampled:  # already the argmax: nothing to flip
            return Estimate(top, top, top, "bisect")
        lo = max(0.0, top - upper)  # b* lies in (lo, hi]
        # galloping search: gaps are usually a few nats, so double a 1-nat step up to the cap
        step, hi = 1.0, min(cap, lo + 1.0)
        while not await self._flips(prefix, target, hi):
            if hi >= cap:
                bound = min(upper, top - cap)
                return Estimate(bound, -math.inf, bound, "bisect>cap")
            lo, step = hi, step * 2
            hi = min(cap, round(lo + step, 6))
        while hi - lo > eps:
            mid = round((lo + hi) / 2, 6)
            if await self._flips(prefix, target, mid):
                hi = mid
            else:
                lo = mid
        strategy = "bisect"
        if self.config.verify_flips:
            lo, hi, consistent = await self._verify(prefix, target, lo, hi)
            strategy = "bisect" if consistent else "bisect~"  # widened by a non-reproducible flip
        return Estimate(top - (lo + hi) / 2, top - hi, top - lo, strategy)

    async def _verify(self, prefix: list[int], target: int, lo: float, hi: float) -> tuple[float, float, bool]:
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
                if not await self._flips(prefix, target, min(cap, at_hi + nudge)):
                    return False
                if at_lo > 0 and await self._flips(prefix, target, at_lo - nudge):
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
