"""Generation helpers shared by the backends: a reproducible per-row sampler for Hugging Face
``generate``, and :class:`~blackbox_mia.types.Generation` built from generated ids."""

from __future__ import annotations

import secrets
from collections.abc import Sequence

import numpy as np

from ..tokenizers import TokenCodec
from ..types import Generation, Provenance

SEED_LIMIT = 2**63  # seeds are integers in [0, 2**63) (also what the OpenAI API accepts)


def sample_seed(seed: int | None, sample: int) -> int:
    """The seed of sample ``sample`` of a prompt: ``seed + sample``, or a fresh random seed when
    ``seed`` is None (wrapped into [0, 2**63))."""
    if seed is None:
        return secrets.randbelow(SEED_LIMIT)
    return (seed + sample) % SEED_LIMIT


def strategy_name(temperature: float) -> str:
    """``"greedy"`` at temperature 0, else ``"sample"`` (the provenance's strategy)."""
    return "greedy" if temperature == 0 else "sample"


def build_generation(
    codec: TokenCodec,
    ids: Sequence[int],
    logprobs: Sequence[float] | None,
    eos_id: int | None,
    prompt_index: int,
    sample: int,
    provenance: Provenance,
) -> Generation:
    """A :class:`Generation` from the generated ids (cut after the first ``eos_id``, which is
    kept in the ids but not in the text; ``finish_reason`` ``"stop"`` then, else ``"length"``).

    Args:
        codec: the model's tokenizer (token strings and text).
        ids: generated ids, shape (T,), possibly padded after the EOS.
        logprobs: log-prob of each id in nats, same length as ``ids``, or None.
        eos_id: the end-of-sequence id, or None when the model has none.
    """
    ids = [int(i) for i in ids]
    stop = eos_id is not None and eos_id in ids
    end = ids.index(eos_id) + 1 if stop else len(ids)
    ids = ids[:end]
    text_ids = ids[:-1] if stop else ids
    return Generation(
        text=codec.decode(text_ids),
        token_ids=np.asarray(ids, dtype=np.int64),
        tokens=[codec.token_string(i) for i in ids],
        logprobs=None if logprobs is None else np.asarray(logprobs[:end], dtype=np.float64),
        finish_reason="stop" if stop else "length",
        prompt_index=prompt_index,
        sample=sample,
        provenance=provenance,
    )


def seeded_sampler(seeds: Sequence[int], temperature: float, device):
    """A ``transformers`` logits processor that samples each row from softmax(scores / T) with
    its own ``torch.Generator`` (seeded with ``seeds[row]``) and leaves only that token finite,
    so greedy decoding takes it: a row's samples depend only on its seed and its own
    distribution, never on the other rows of the batch."""
    import torch
    from transformers import LogitsProcessor

    generators = [torch.Generator(device=device).manual_seed(int(s)) for s in seeds]

    class SeededSampler(LogitsProcessor):
        def __call__(self, input_ids, scores):
            probs = torch.softmax(scores.float() / temperature, dim=-1)
            picks = torch.stack([torch.multinomial(probs[r], 1, generator=g) for r, g in enumerate(generators)])
            out = torch.full_like(scores, -float("inf"))
            return out.scatter(1, picks, 0.0)

    return SeededSampler()
