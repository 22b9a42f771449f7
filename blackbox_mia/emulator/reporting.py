"""What the server does to log-probs before it reports them: the precision they are rounded to,
the noise of a nondeterministic server, and values that move with the request's shape
(``bbmia serve --logprob-precision``, ``--nondeterministic``, ``--shape-noise``).

Both emulate hosted providers: some return log-probs rounded to bfloat16 (values like −22.125),
and on servers with batch-dependent kernels the same request can return other log-probs (and,
near a tie, another token). The noise acts on the logits of each generated position, so a
request's answer stays one consistent distribution; prompt positions (echo, ``prompt_logprobs``),
read from the model in one pass, get the same noise per listed token instead.

Shape noise emulates llama.cpp's quantized kernels, whose log-probs for one context depend on
how the tokens were batched: identical requests agree, but a position read inside a request of
another prompt length (a generated step of a longer run, rather than the last position of its
own prompt) gets other values. It acts on generated positions only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..backends.api.precision import round_to


@dataclass(frozen=True)
class Reporting:
    """How reported log-probs differ from the model's.

    Attributes:
        precision: ``"bfloat16"``, ``"float16"`` or ``"float32"`` (round to nearest); ``None``:
            as computed.
        jitter: σ (nats) of the Gaussian noise on every logit, drawn per request; 0: none.
        seed: the noise's seed (with the request's number: :meth:`noise`; with the prompt
            length and position: :meth:`reshape`).
        shape: nats by which a logit moves with the request's shape: each generated position's
            logits get a uniform draw in [−shape, shape] per token, seeded by the request's
            prompt length and the position (:meth:`reshape`); 0: none.
    """

    precision: str | None = None
    jitter: float = 0.0
    seed: int = 0
    shape: float = 0.0

    def noise(self, request: int) -> np.random.Generator | None:
        """The noise generator of the ``request``-th request (``None`` without jitter)."""
        return np.random.default_rng([self.seed, request]) if self.jitter else None

    def perturb(self, row: np.ndarray, noise: np.random.Generator | None) -> np.ndarray:
        """Log-probs ``row`` (V,) after noise on the logits, renormalised (float64); ``row``
        itself without noise."""
        if noise is None:
            return row
        return log_softmax(row.astype(np.float64) + noise.normal(0.0, self.jitter, row.shape))

    def reshape(self, row: np.ndarray, prompt_length: int, position: int) -> np.ndarray:
        """Log-probs ``row`` (V,) of the generated ``position`` (its index in prompt + output)
        of a request whose prompt has ``prompt_length`` tokens, after the shape noise on the
        logits (the same draw for the same prompt length and position), renormalised (float64);
        ``row`` itself without shape noise."""
        if not self.shape:
            return row
        rng = np.random.default_rng([self.seed, prompt_length, position])
        return log_softmax(row.astype(np.float64) + rng.uniform(-self.shape, self.shape, row.shape))

    def round(self, values: np.ndarray) -> np.ndarray:
        """``values`` (nats) rounded to :attr:`precision` (unchanged without one)."""
        return values if self.precision is None else round_to(values, self.precision)

    def position(self, token: int, logprob: float, top: Sequence[tuple[int, float]],
                 noise: np.random.Generator | None) -> tuple[float, tuple[tuple[int, float], ...]]:
        """A prompt position as reported: ``token``'s log-prob and the top list ((id, nats), best
        first), each distinct token shifted by one draw of the noise (at most 0), then rounded; the top list
        re-sorted (best first, ties in id order)."""
        ids = [token] + [i for i, _ in top]
        values = np.asarray([logprob] + [v for _, v in top], dtype=np.float64)
        if noise is not None:
            shift = {i: noise.normal(0.0, self.jitter) for i in dict.fromkeys(ids)}
            values = np.minimum(values + np.asarray([shift[i] for i in ids]), 0.0)  # a log-prob, still
        values = self.round(values)
        listed = sorted(zip(ids[1:], values[1:].tolist()), key=lambda e: (-e[1], e[0]))
        return float(values[0]), tuple(listed)


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """``logits`` (V,) renormalised into log-probs (nats, float64)."""
    top = logits.max()
    return logits - (top + np.log(np.exp(logits - top).sum()))
