"""Sampling and reported log-probs: what one next-token distribution turns into (runs on the
model's worker thread)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..backends.api.http.wire import FLOOR_LOGPROB
from .reporting import Reporting


@dataclass(frozen=True)
class Sampling:
    """How one request picks tokens and what it reports.

    Attributes:
        max_tokens: tokens to generate.
        temperature: 0 = greedy argmax of logits + bias; > 0 samples softmax((logits + bias)/T).
        top_n: top-n log-probs to report per position; ``None`` = no log-probs requested.
        bias: logit_bias as {token id: bias in nats}.
        seed: seed of the sampling generator (temperature > 0); ``None`` = fresh entropy.
        stop: stop sequences: generation ends once the generated text contains one, and the
            text is cut before it.
    """

    max_tokens: int
    temperature: float
    top_n: int | None
    bias: dict[int, float]
    seed: int | None = None
    stop: tuple[str, ...] = ()


@dataclass(frozen=True)
class Step:
    """One generated position: sampled token, its reported log-prob and the reported top-n
    (ids and log-probs in nats, best first), all under the configured logprobs mode."""

    token: int
    logprob: float
    top: tuple[tuple[int, float], ...]


@dataclass(frozen=True)
class Continuation:
    """What one request generated (the server's view; :class:`blackbox_mia.types.Generation` is
    what a backend returns): every step (the stop token included), the text (without the
    EOS token, cut before a stop sequence), OpenAI's ``finish_reason`` (``"stop"`` after EOS or
    a stop sequence, else ``"length"``) and the stop sequence that ended it (``None``: none did)."""

    steps: list[Step]
    text: str
    finish_reason: str
    stop_reason: str | None = None


def top_n(logprobs: np.ndarray, n: int) -> list[tuple[int, float]]:
    """The ``n`` largest entries as (id, value), best first (equal values in id order)."""
    if n <= 0:
        return []
    n = min(n, len(logprobs))
    idx = np.argpartition(-logprobs, n - 1)[:n]
    idx = idx[np.lexsort((idx, -logprobs[idx]))]
    return [(int(i), float(logprobs[i])) for i in idx]


def choose(row: np.ndarray, sampling: Sampling, mode: str, rng: np.random.Generator,
           reporting: Reporting = Reporting(), noise: np.random.Generator | None = None,
           shape: tuple[int, int] = (0, 0)) -> Step:
    """Pick the next token from raw log-probs ``row`` (V,) and the values reported for it.

    ``row`` first gets the request's logit noise (:meth:`Reporting.perturb` with ``noise``; a
    deterministic server: none) and its shape noise (:meth:`Reporting.reshape` with ``shape``:
    the request's prompt length and this position). The sampling distribution is log_softmax(row + bias) (row
    differs from the logits by a constant). Temperature 0: its argmax (greedy). Temperature
    T > 0: inverse CDF of softmax((row + bias) / T) at one uniform draw ``rng.random()`` per
    step, so a seeded ``rng`` shared by the steps of a request makes the whole generation
    reproducible. Reported values (nats) use ``row`` in raw mode, log_softmax(row + bias) in
    processed mode (``mode``), rounded as ``reporting`` says.
    """
    row = reporting.reshape(reporting.perturb(row, noise), *shape)
    biased = row.astype(np.float64)
    if sampling.bias:
        biased[list(sampling.bias)] += list(sampling.bias.values())
    if sampling.temperature == 0:
        token = int(np.argmax(biased))
    else:
        scaled = biased / sampling.temperature
        p = np.exp(scaled - scaled.max())
        cdf = np.cumsum(p)
        token = min(int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right")), len(row) - 1)
    if mode == "raw" or not sampling.bias:
        reported = row
    else:
        reported = biased - (biased.max() + np.log(np.exp(biased - biased.max()).sum()))
    top = top_n(reported, sampling.top_n or 0)
    values = reporting.round(np.asarray([reported[token]] + [v for _, v in top], dtype=np.float64))
    return Step(token, float(values[0]), tuple((i, float(v)) for (i, _), v in zip(top, values[1:])))


def finite(value: float) -> float:
    """A JSON-safe log-prob (nats): -inf (and NaN) become OpenAI's :data:`FLOOR_LOGPROB` (-9999)."""
    return value if np.isfinite(value) else FLOOR_LOGPROB
