"""The backend of the ``uniform:`` test kind (:mod:`.uniform_kind`): byte tokens, each with
log-prob ``-ln V``."""

from __future__ import annotations

import math

import numpy as np

from blackbox_mia.backends.base import LOGPROBS, Backend
from blackbox_mia.tokenizers.base import TokenCodec
from blackbox_mia.types import Provenance, TokenLogprobs


class ByteCodec(TokenCodec):
    """One token per UTF-8 byte (ids 0..255), no BOS: the first byte is context."""

    name = "bytes"

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def token_bytes(self, token_id: int) -> bytes:
        if not 0 <= token_id < 256:
            raise KeyError(token_id)
        return bytes([token_id])

    @property
    def vocab_size(self) -> int:
        return 256


class UniformBackend(Backend):
    """Every scored byte has log p = -ln(vocab) nats."""

    kind = "uniform"
    features = frozenset({LOGPROBS})

    def __init__(self, name: str, vocab: int) -> None:
        super().__init__()
        self.name, self.vocab, self.codec = name, vocab, ByteCodec()

    async def _alogprobs(self, texts, progress, on_done, vocab_stats):
        results = []
        for index, text in enumerate(texts):
            ids = self.codec.encode(text)
            result = TokenLogprobs(np.array(ids[1:]), [self.codec.token_string(i) for i in ids[1:]],
                                   np.full(len(ids) - 1, -math.log(self.vocab)), (ids[0],),
                                   Provenance("uniform", self.name, "uniform", False))
            if on_done is not None:
                on_done(index, result)
            results.append(result)
        return results

    def describe(self) -> dict:
        return {"backend": "uniform", "model": self.name, "vocab": self.vocab}
