"""What backends return: per-token log-probs of one text, and generated continuations; and the
toolkit's error types (:class:`BlackboxMIAError`, the base of every error it raises on purpose).

Scoring convention (the same for every backend):

* ``context_ids`` are tokens fed to the model but not scored. With a BOS token the context is
  ``[bos]`` and every text token is scored; without one, the first text token has no
  conditional and becomes the context, so ``N = len(text tokens) - 1``.
* ``logprobs[i] = log p(token_ids[i] | context_ids, token_ids[:i])`` in nats.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

import numpy as np

from .cost.prices import PRICE_HINT
from .option_names import as_arguments, named


class BlackboxMIAError(Exception):
    """Base class of every error the toolkit raises on purpose (bad input, refused endpoint...).

    The CLI turns it into a one-line message and a non-zero exit code. Its subclasses below, and
    the failed requests' :class:`~blackbox_mia.backends.api.http.errors.ApiError` hierarchy, are
    every kind a caller may want to catch apart.

    A message names settings with :func:`~blackbox_mia.option_names.named`: ``str()`` shows the
    Python arguments (``target_fpr=``), the CLI the flags (``--target-fpr``).
    """

    def __str__(self) -> str:
        return as_arguments(super().__str__())


class BudgetExceeded(BlackboxMIAError):
    """The next request could take the spend past the cap: nothing more is sent (everything paid
    so far is cached, so a rerun with a higher cap resumes where this run stopped)."""


class SpendRefused(BlackboxMIAError):
    """A run estimated above the spend guard (:mod:`blackbox_mia.spend.guard`: more than
    ``limit_requests`` requests, or ``limit_usd`` USD at a known price) was neither confirmed
    (``yes=True``, ``--yes``) nor capped (``max_cost=``, ``--max-cost``, or ``max_requests=``,
    ``--max-requests``: the cap for a model without a price): nothing was sent but the capability
    probe.

    Attributes:
        requests: the estimated requests of the whole run.
        usd: the estimated USD, or ``None`` for an unpriced model.
    """

    def __init__(self, requests: int, usd: float | None, limit_requests: int, limit_usd: float):
        cost = "unpriced model" if usd is None else f"about ${usd:,.2f}"
        cap = (f"{named('max_requests')} N to cap the requests ({named('max_cost')} needs a price: {PRICE_HINT})"
               if usd is None else f"{named('max_cost')} USD or {named('max_requests')} N to cap the spend")
        super().__init__(
            f"refusing to start: this run is estimated at {requests:,} requests ({cost}), over the "
            f"{limit_requests:,} requests / ${limit_usd:g} that run without confirmation; pass {cap}, or "
            f"{named('yes', True)} to run it as it is (--dry-run prints the estimate)"
        )
        self.requests = requests
        self.usd = usd


class NoLogprobs(BlackboxMIAError):
    """The target gives no log-probs usable for absolute values (its capability probe found
    none, and saved that verdict): the log-prob scorers cannot run, the text-only tests can."""


class ExpressionError(BlackboxMIAError):
    """An expression that :func:`~blackbox_mia.controls.arith.safe_eval` refuses (not plain
    arithmetic) or cannot evaluate."""


class BadRow(BlackboxMIAError):
    """A row of the response cache that cannot be trusted as an answer (it is quarantined:
    :mod:`blackbox_mia.backends.api.http.cache.disk`).

    Attributes:
        reason: why, in words (``"a row stored in mode 3 ..."``).
    """

    def __init__(self, directory: str | os.PathLike, reason: str):
        super().__init__(f"the response cache {directory} holds a bad row: {reason}")
        self.reason = reason
class ArgumentTypeError(BlackboxMIAError, TypeError):
    """An argument of the wrong type from a Python caller (one ``str`` where a list of texts is
    meant): a ``TypeError`` to Python, and a :class:`BlackboxMIAError` to the CLI's one-line
    report."""


@dataclass(frozen=True)
class Provenance:
    """Where a :class:`TokenLogprobs` came from.

    Attributes:
        backend: ``"local"`` or ``"api"``.
        model: model directory, hub name or API model name.
        strategy: how the values were obtained (``"forward"`` for a local forward pass, or the
            black-box tracker's strategy, ``"mixed"`` when positions used different ones).
        bos: whether a BOS token was prepended (then every text token is scored).
        condition: ``None`` when the values are the text's own log-probs; otherwise what they
            are conditional on (``"chat-template"``: the server wrapped the prefix in its chat
            template, so the values are not the text's log-probs).
    """

    backend: str
    model: str
    strategy: str
    bos: bool
    condition: str | None = None


@dataclass
class TokenLogprobs:
    """Per-token log-probs of one text.

    Attributes:
        token_ids: shape (N,), int64, the scored tokens x_i.
        tokens: N token strings, one per id: the UTF-8 text of the token's bytes, or
            ``"bytes:\\xe2\\x80"`` when they are not valid UTF-8 on their own (part of a
            character); the same on every backend (:func:`blackbox_mia.tokenizers.render_token`).
        logprobs: shape (N,), float64, lp_i = log p(x_i | x_<i) in nats.
        context_ids: unscored tokens before ``token_ids`` (BOS, or the first text token).
        provenance: backend, model, strategy, BOS convention.
        lower, upper: shape (N,) bounds on lp_i in nats (black-box path; ``None`` when exact).
            ``lower`` may be ``-inf`` where only an upper bound is known.
        strategies: N per-token strategy names (black-box path), else ``None``.
        mu, sigma: shape (N,) mean and standard deviation of log p_v under p at each position,
            over the whole vocabulary (Min-K%++; Zhang et al. 2025), else ``None``.
    """

    token_ids: np.ndarray
    tokens: list[str]
    logprobs: np.ndarray
    context_ids: tuple[int, ...]
    provenance: Provenance
    lower: np.ndarray | None = None
    upper: np.ndarray | None = None
    strategies: list[str] | None = None
    mu: np.ndarray | None = None
    sigma: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.token_ids = np.asarray(self.token_ids, dtype=np.int64)
        self.logprobs = np.asarray(self.logprobs, dtype=np.float64)
        n = len(self.token_ids)
        if self.logprobs.shape != (n,) or len(self.tokens) != n:
            raise ValueError(
                f"token_ids ({n}), tokens ({len(self.tokens)}) and logprobs "
                f"{self.logprobs.shape} must have the same length"
            )
        for name in ("lower", "upper", "mu", "sigma"):
            value = getattr(self, name)
            if value is not None:
                value = np.asarray(value, dtype=np.float64)
                if value.shape != (n,):
                    raise ValueError(f"{name} must have shape ({n},), got {value.shape}")
                setattr(self, name, value)

    @property
    def n_tokens(self) -> int:
        """Number of scored tokens N."""
        return len(self.token_ids)

    @property
    def has_vocab_stats(self) -> bool:
        """Whether ``mu`` and ``sigma`` are present (the full-distribution feature)."""
        return self.mu is not None and self.sigma is not None

    def to_json(self) -> dict:
        """A JSON-ready dict: provenance plus one record per token (lower is None where unbounded)."""
        lower = self.logprobs if self.lower is None else self.lower
        upper = self.logprobs if self.upper is None else self.upper
        rows = [
            {
                "id": int(self.token_ids[i]),
                "token": self.tokens[i],
                "logprob": float(self.logprobs[i]),
                # JSON has no -inf: a lower bound of None means "upper bound only".
                "lower": float(lower[i]) if np.isfinite(lower[i]) else None,
                "upper": float(upper[i]),
                "strategy": self.strategies[i] if self.strategies else self.provenance.strategy,
            }
            for i in range(self.n_tokens)
        ]
        return {"provenance": asdict(self.provenance), "context_ids": list(self.context_ids), "tokens": rows}


FINISH_REASONS = ("stop", "length")


@dataclass(frozen=True)
class Generation:
    """One generated continuation of one prompt.

    The prompt gets the scoring context convention (BOS prepended when the backend uses one).
    Generation stops after the end-of-sequence token (``finish_reason = "stop"``; that token is
    the last of ``token_ids`` but not part of ``text``) or after ``max_new_tokens`` tokens
    (``"length"``).

    Attributes:
        text: the generated text (without the end-of-sequence token), invalid UTF-8 replaced.
        token_ids: shape (T,), int64, the generated tokens.
        tokens: T token strings (same convention as :attr:`TokenLogprobs.tokens`).
        logprobs: shape (T,), float64, log p(token_ids[t] | prompt, token_ids[:t]) in nats under
            the model's raw distribution (temperature 1, no sampling transforms), or ``None``
            where the backend cannot give them.
        finish_reason: ``"stop"`` or ``"length"``.
        prompt_index: index of the prompt in the request.
        sample: index of this sample among the prompt's ``n``.
        provenance: backend, model, strategy (``"greedy"`` or ``"sample"``), BOS convention.
    """

    text: str
    token_ids: np.ndarray
    tokens: list[str]
    logprobs: np.ndarray | None
    finish_reason: str
    prompt_index: int
    sample: int
    provenance: Provenance

    def __post_init__(self) -> None:
        ids = np.asarray(self.token_ids, dtype=np.int64).reshape(-1)
        object.__setattr__(self, "token_ids", ids)
        if len(self.tokens) != len(ids):
            raise ValueError(f"token_ids ({len(ids)}) and tokens ({len(self.tokens)}) must have the same length")
        if self.logprobs is not None:
            lp = np.asarray(self.logprobs, dtype=np.float64)
            if lp.shape != ids.shape:
                raise ValueError(f"logprobs must have shape {ids.shape}, got {lp.shape}")
            object.__setattr__(self, "logprobs", lp)
        if self.finish_reason not in FINISH_REASONS:
            raise ValueError(f"finish_reason must be one of {FINISH_REASONS}, got {self.finish_reason!r}")

    @property
    def n_tokens(self) -> int:
        """Number of generated tokens T."""
        return len(self.token_ids)

    def to_json(self) -> dict:
        """A JSON-ready dict: text, finish reason, indices, provenance and one record per token
        (``logprob`` None where not available)."""
        return {
            "text": self.text,
            "finish_reason": self.finish_reason,
            "prompt_index": self.prompt_index,
            "sample": self.sample,
            "provenance": asdict(self.provenance),
            "tokens": [
                {
                    "id": int(self.token_ids[t]),
                    "token": self.tokens[t],
                    "logprob": None if self.logprobs is None else float(self.logprobs[t]),
                }
                for t in range(self.n_tokens)
            ],
        }
