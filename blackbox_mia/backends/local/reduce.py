"""Per-token log-probs (and vocabulary statistics) from hidden states, a chunk of positions at a
time, so that the logits of a whole batch (tokens × vocabulary) are never held at once and the
full log-softmax is never materialised.

For each chunk of n positions: logits (n, V) = head(hidden), log-sum-exp over the vocabulary,
lp = logit[target] − lse; with ``vocab_stats`` also μ = Σ p·log p and σ = sqrt(Σ p·(log p − μ)²)
(the centred form: E[x²] − μ² cancels catastrophically in float32). Everything after the head
is float32, whatever the model's dtype.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

LOGIT_COPIES = 3
"""float32 (n, V) buffers alive at once while a chunk is reduced: the logits, exp(log p), and
one product temporary (the statistics); the log-prob-only path needs fewer."""

FLOAT32_BYTES = 4

LOG_ZERO = -1e4
"""log p is clamped to this (nats) in the statistics: 0 · (−inf) would give NaN."""


@dataclass(frozen=True)
class Reduced:
    """Reduction of N positions: float32 tensors of shape (N,), in nats; ``mu``/``sigma`` None
    unless the statistics were asked for."""

    lp: object
    mu: object | None
    sigma: object | None


def chunk_positions(vocab_size: int, budget_bytes: int) -> int:
    """Positions per chunk so that :data:`LOGIT_COPIES` float32 (n, V) buffers fit in
    ``budget_bytes`` (at least 1)."""
    return max(1, budget_bytes // (LOGIT_COPIES * FLOAT32_BYTES * vocab_size))


def reduce_chunks(torch, hidden, targets, head: Callable, chunk: int, vocab_stats: bool) -> Reduced:
    """log p(target) at every position, reduced ``chunk`` positions at a time.

    Args:
        torch: the torch module.
        hidden: (N, H) tensor: the model's last hidden states at the scored positions (or
            logits already, with ``head`` the identity).
        targets: (N,) long tensor: the token each position predicts.
        head: maps (n, H) hidden states to (n, V) logits (the output embedding).
        chunk: positions per chunk (>= 1; see :func:`chunk_positions`).
        vocab_stats: also compute μ and σ of log p over the vocabulary.

    Returns:
        :class:`Reduced` of float32 tensors of shape (N,), on ``hidden``'s device.
    """
    lps, mus, sds = [], [], []
    for start in range(0, hidden.shape[0], chunk):
        logits = head(hidden[start : start + chunk]).float()
        lse = torch.logsumexp(logits, dim=-1)
        tgt = targets[start : start + chunk]
        lps.append(logits.gather(-1, tgt.unsqueeze(-1)).squeeze(-1) - lse)
        if vocab_stats:
            logp = logits.sub_(lse.unsqueeze(-1))  # in place: the logits are not needed any more
            p = logp.exp()
            logp = logp.clamp_min_(LOG_ZERO)
            mu = (p * logp).sum(-1)
            mus.append(mu)
            sds.append((p * logp.sub_(mu.unsqueeze(-1)).square_()).sum(-1).sqrt())
    cat = torch.cat
    return Reduced(cat(lps), cat(mus) if vocab_stats else None, cat(sds) if vocab_stats else None)
