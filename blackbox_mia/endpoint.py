"""One next-token question to an OpenAI-compatible endpoint, in token ids.

:class:`Endpoint` hides the difference between ``/v1/completions`` and ``/v1/chat/completions``
and between token-id and text prompts, and maps the token names the server returns back to ids
of the target tokenizer. The tracker and the capability probe talk only to it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .client import ApiClient
from .tokenization import TokenCodec
from .types import BlackboxMIAError


@dataclass(frozen=True)
class Listed:
    """One returned (token, log-prob) pair: candidate ids for the name, log-prob in nats."""

    ids: tuple[int, ...]
    logprob: float


@dataclass(frozen=True)
class NextToken:
    """The answer to one ``max_tokens = 1`` request at temperature 0.

    Attributes:
        sampled: candidate ids of the sampled (greedy) token.
        sampled_logprob: the log-prob the server reported for it (nats), or None.
        top: the top-n list as returned (may hold the sampled token as an extra entry).
        retokenized: the prefix went as text and re-encoding it changed its tokens.
    """

    sampled: tuple[int, ...]
    sampled_logprob: float | None
    top: tuple[Listed, ...]
    retokenized: bool = False

    def find(self, token_id: int) -> float | None:
        """Reported log-prob of ``token_id`` in the top list, or None when it is not listed."""
        for entry in self.top:
            if token_id in entry.ids:
                return entry.logprob
        return None

    @property
    def top_logprob(self) -> float | None:
        """The largest listed log-prob (the argmax's, when no bias was sent)."""
        return max((e.logprob for e in self.top), default=None)


class Endpoint:
    """Next-token and prompt-log-prob requests for prefixes given as token ids.

    Args:
        client: the async API client (cache, retries, limits, usage).
        codec: the target model's tokenizer.
        kind: ``"completions"`` or ``"chat"``.
        token_id_prompts: send prompts as id lists (completions only); otherwise as text, whose
            re-tokenization is checked.
    """

    def __init__(self, client: ApiClient, codec: TokenCodec, kind: str, token_id_prompts: bool):
        if kind not in ("completions", "chat"):
            raise BlackboxMIAError(f"unknown endpoint kind {kind!r}: completions or chat")
        self.client = client
        self.codec = codec
        self.kind = kind
        self.token_id_prompts = token_id_prompts and kind == "completions"

    def _prompt(self, prefix: Sequence[int]) -> tuple[list[int] | str, bool]:
        if self.token_id_prompts:
            return [int(i) for i in prefix], False
        text = self.codec.decode(prefix)
        return text, self.codec.encode(text) != list(prefix)

    def _ids(self, entry: dict) -> tuple[int, ...]:
        return tuple(self.codec.lookup(entry["token"], entry.get("bytes")))

    async def next_token(
        self, prefix: Sequence[int], top_n: int, bias: dict[int, float] | None = None
    ) -> NextToken:
        """Greedy next token after ``prefix`` (temperature 0, one token), with top-``top_n`` log-probs
        (``top_n = 0``: the sampled token and its log-prob only).

        Raises:
            BlackboxMIAError: the server answered without a sampled token.
        """
        prompt, retokenized = self._prompt(prefix)
        if self.kind == "completions":
            result = await self.client.complete(prompt, max_tokens=1, temperature=0.0, logprobs=top_n, logit_bias=bias)
        else:
            result = await self.client.chat(prompt, max_tokens=1, temperature=0.0, top_logprobs=top_n, logit_bias=bias)
        if not result["tokens"]:  # no log-probs at all: only the sampled text tells the token
            sampled = tuple(self.codec.lookup(result.get("text") or ""))
            if not sampled:
                raise BlackboxMIAError(f"the server returned no token for a max_tokens=1 request ({self.kind})")
            return NextToken(sampled, None, (), retokenized)
        first = result["tokens"][0]
        top = tuple(Listed(self._ids(e), float(e["logprob"])) for e in first.get("top") or [])
        if first.get("logprob") is not None and not any(set(self._ids(first)) & set(e.ids) for e in top):
            top = top + (Listed(self._ids(first), float(first["logprob"])),)
        return NextToken(self._ids(first), first.get("logprob"), top, retokenized)

    async def prompt_logprobs(self, ids: Sequence[int]) -> list[float | None]:
        """Echoed log-probs of every prompt token (entry 0 has no conditional: None).

        Raises:
            BlackboxMIAError: the endpoint returned no or misaligned prompt log-probs.
        """
        prompt, _ = self._prompt(ids)
        # max_tokens = 0: the prompt alone, so a full context window fits
        result = await self.client.complete(prompt, max_tokens=0, temperature=0.0, logprobs=1, echo=True)
        echoed = result.get("prompt_tokens")
        if not echoed or len(echoed) != len(ids):
            raise BlackboxMIAError(
                f"echo returned {len(echoed or [])} prompt log-probs for {len(ids)} prompt tokens"
            )
        return [None if e.get("logprob") is None else float(e["logprob"]) for e in echoed]
