"""Post-bias read-out: one biased request per token, solved in closed form.

A server that reports log-probs after ``logit_bias`` (``Capabilities.reported == "post-bias"``:
pre-2024 OpenAI, vLLM's ``processed_logprobs``) answers a request with bias b on the target
with the target's biased log-prob lp' = lp + b − log(1 − p + p·e^b), i.e.
logit(p') = logit(p) + b, so

    lp = lp' − logaddexp(b + log1mexp(lp'), lp')            (:func:`unbias`)

(Finlayson et al. 2024, "Logits of API-protected LLMs leak proprietary information":
p = p' / (e^b − p'·e^b + p'); ``exact_solve`` in github.com/justinchiu/openlogprobs). One
request per token wherever the biased answer lists the target.

Bounds. The map f: lp' → lp is increasing; a reported lp' is within δ of the model's
(:meth:`~..capabilities.Capabilities.computed_error`: the report's rounding, the server's own
arithmetic, at best float32's ±2^-24 near 0, and its jitter), so lp ∈ [f(lp' − δ),
f(min(lp' + δ, 0))]. The slope of f, (1 − p)/(1 − p') = 1 − p + p·e^b, amplifies δ up to e^b
as p → 1. The guard (:func:`guard_bias`): the first request's bias is the largest b (up to the
cap) whose amplified error 2·δ(0)·(1 − p + p·e^b) is at most ε for every p; a target the answer
does not list has lp' ≤ the lowest listed value (an upper bound on lp) and is asked again with
the largest bias guarded for p below that bound (larger than the last by at least
log(R) + the lowest listed value's magnitude, :func:`guard_bias`); a listed target
whose interval is still wider than ε with p' > 1/2 is asked once more with the bias re-aimed
at logit(p') = 0 (best conditioned), and the two intervals are intersected.

Consistency. An answer must be a post-bias distribution: its listed mass at most 1 and its
sampled (greedy) token its largest value. Each entry of a biased answer is lp_j − log Z'
(Z' = 1 − p + p·e^b), so every other entry's lp_j − lp = lp'_j − lp' + b: two answers that list
the target must agree on it, and so must the unbiased answer where it is known. An answer that
fails is not used: the position gets the unbiased top-n's listed value, else its bound.
"""

from __future__ import annotations

import math

import numpy as np

from ..endpoint import NextToken
from .strategies import Estimate, Position, Strategy, Unidentified, topn_upper_bound

MIN_RATIO = 2.0  # the amplification the guard allows where even no bias misses ε (a server too coarse for ε)
STEP = math.log(MIN_RATIO)  # nats: the least a bias grows after an answer that did not list the target
HALF = math.log(0.5)  # nats: above it a re-aimed bias conditions the solve better


def log1mexp(x: np.ndarray | float) -> np.ndarray:
    """log(1 − e^x) (nats) for x ≤ 0, −inf at 0; accurate near 0 and far below (Mächler 2012,
    "Accurately computing log(1 − exp(−|a|))"). Shape of ``x``."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(x > HALF, np.log(-np.expm1(x)), np.log1p(-np.exp(x)))


def unbias(biased: np.ndarray | float, bias: float) -> np.ndarray:
    """The unbiased log-prob lp (nats) of a target reported at ``biased`` = lp' with ``bias`` = b
    nats on it by a post-bias server: lp' − logaddexp(b + log1mexp(lp'), lp') (Finlayson et al.
    2024); increasing in lp'; lp' ≥ 0 gives 0, −inf gives −inf. Shape of ``biased``."""
    biased = np.minimum(np.asarray(biased, dtype=np.float64), 0.0)
    with np.errstate(invalid="ignore"):
        return np.where(np.isneginf(biased), -np.inf, biased - np.logaddexp(bias + log1mexp(biased), biased))


def logit(logprob: float) -> float:
    """log(p / (1 − p)) of a log-prob (nats); +inf at 0."""
    return logprob - float(log1mexp(logprob))


def guard_bias(error_at_zero: float, epsilon: float, max_bias: float, p_max: float = 1.0) -> float:
    """The largest bias (nats, at most ``max_bias``) whose amplified report error stays within
    ``epsilon`` for every target probability up to ``p_max``: the solve's interval is about
    2·δ0·(1 − p + p·e^b) wide (δ0 = ``error_at_zero``, the error of a value near 0, where the
    amplification is largest), at most ε for every p ≤ p_max when b ≤ log1p((R − 1) / p_max),
    R = ε / (2·δ0) (at least :data:`MIN_RATIO`, where no bias reaches ε)."""
    ratio = max(MIN_RATIO, epsilon / (2 * error_at_zero))
    return max_bias if p_max <= 0 else min(max_bias, math.log1p((ratio - 1) / p_max))


class PostBias(Strategy):
    """lp of the target in closed form from its post-bias value under one bias (module docstring):
    one request where the biased answer lists the target."""

    name = "postbias"

    async def resolve(self, position: Position) -> Estimate:
        """The listed value where the unbiased answer is known already (a run's), else :meth:`measure`."""
        listed = None if position.unbiased is None else await self.listed(position)
        return listed or await self.measure(position)

    async def measure(self, position: Position) -> Estimate:
        cap, eps = self.config.max_bias, self.config.epsilon
        bias, upper = guard_bias(self.error(0.0), eps, cap), 0.0
        try:
            while True:  # raise the bias until the answer lists the target
                answer = await self.biased(position, bias)
                if not self.plausible(answer):
                    return await self.listed_or_bound(position)
                value = await self.target_value(answer, position)
                if value is not None:
                    break
                bound = topn_upper_bound(answer, position.target, self.caps)
                upper = min(upper, float(unbias(bound + self.error(bound), bias)))
                if bias >= cap:
                    ambiguous = answer.ambiguous(position.target) is not None
                    return Estimate.at_most(upper, "ambiguous" if ambiguous else "postbias>cap")
                bias = min(cap, max(bias + STEP, guard_bias(self.error(0.0), eps, cap, math.exp(upper))))
            first = self.solve(bias, value, upper)
            if first.upper - first.lower <= eps or value <= HALF:
                agree = self.agrees(position.target, (position.unbiased, 0.0, first.value), (answer, bias, value), first)
                return first if agree else await self.listed_or_bound(position)
            aim = value if value + self.error(value) < 0 else value - self.error(value)
            again = min(cap, max(-cap, bias - logit(aim)))
            second = await self.biased(position, again)
            other = await self.target_value(second, position) if self.plausible(second) else None
        except Unidentified:
            return await self.listed_or_bound(position, "ambiguous")
        if other is None:
            return first
        both = self.solve(again, other, upper)
        lower, high = max(first.lower, both.lower), min(first.upper, both.upper)
        if lower > high or not self.agrees(position.target, (answer, bias, value), (second, again, other), both):
            return await self.listed_or_bound(position)
        best = min((first, both), key=lambda e: e.upper - e.lower)
        return Estimate(min(max(best.value, lower), high), lower, high, self.name)

    def error(self, value: float) -> float:
        """δ (nats) of a reported value: :meth:`~..capabilities.Capabilities.computed_error`."""
        return float(self.caps.computed_error(np.asarray(value)))

    def solve(self, bias: float, value: float, upper: float) -> Estimate:
        """The closed form of a target reported at ``value`` under ``bias``, its bounds from the
        value's δ, the upper end at most ``upper`` (what unlisted answers showed)."""
        delta = self.error(value)
        low, mid, high = unbias(np.asarray([value - delta, value, min(value + delta, 0.0)]), bias)
        high = min(float(high), upper)
        return Estimate(min(float(mid), high), float(low), high, self.name)

    async def target_value(self, answer: NextToken, position: Position) -> float | None:
        """The target's reported value in a biased answer: listed, or the sampled token's where
        that is the target (told apart from the argmax with the unbiased answer where the name
        does not tell: asked then); None when not listed.

        Raises:
            Unidentified: the sampled token may or may not be the target.
        """
        value = answer.find(position.target)
        if value is not None:
            return value
        hit = self.is_target(answer, position.target, position.unbiased)
        if hit is None and position.unbiased is None:
            hit = self.is_target(answer, position.target, await self.unbiased(position))
        if hit is None:
            raise Unidentified(position.target)
        return answer.sampled_logprob if hit else None

    def plausible(self, answer: NextToken) -> bool:
        """Whether ``answer`` may be a post-bias distribution's: listed mass at most 1 and the
        sampled (greedy) token's value the largest, each value allowed its δ and the tolerance."""
        values = np.asarray([e.logprob for e in answer.top] + [answer.sampled_logprob])
        error = self.caps.computed_error(values) + self.caps.tolerance
        low, high = values - error, values + error
        return float(np.sum(np.exp(low[:-1]))) <= 1.0 and high[-1] >= float(np.max(low[:-1], initial=-np.inf))

    def agrees(self, target: int, first: tuple[NextToken | None, float, float],
               second: tuple[NextToken, float, float], solved: Estimate) -> bool:
        """Whether two answers at one prefix, each ``(answer, bias, target's value)``, agree on
        every other uniquely named entry's lp_j − lp = lp'_j − lp' + b (the unbiased answer is one
        with bias 0 and the solved value as its target's; a ``None`` answer agrees), each side
        allowed the δ of both its values, the tolerance and the solved interval's width."""
        (answer, bias, value), (other, other_bias, other_value) = first, second
        if answer is None:
            return True
        slack = self.caps.tolerance + (solved.upper - solved.lower) + self.error(value) + self.error(other_value)
        for entry in answer.top:
            if entry.ids is None or len(entry.ids) != 1 or target in entry.ids:
                continue
            seen = other.find(next(iter(entry.ids)))
            if seen is None:
                continue
            gap = abs((entry.logprob - value + bias) - (seen - other_value + other_bias))
            if gap > slack + self.error(entry.logprob) + self.error(seen):
                return False
        return True
