"""Black-box backend: an OpenAI-compatible endpoint, the capability probe and the tracker.

A drop-in for :class:`~blackbox_mia.backends.local.LocalBackend`: same input, same
:class:`~blackbox_mia.types.TokenLogprobs` output, plus [lower, upper] bounds and a strategy per
token. Every answer is cached on disk as it arrives (JSON), so a rerun makes zero requests.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

from ...cache import ResponseCache
from ...config import cache_root
from ...tokenizers import TIKTOKEN_SHIPPED, HFTokenCodec, TiktokenCodec, TokenCodec
from ...types import BlackboxMIAError, TokenLogprobs
from ..base import Backend, OnDone, check_texts
from .capabilities import Capabilities
from .client import ApiClient, ApiConfig
from .endpoint import Endpoint
from .probe import load_or_probe
from .tracker import Tracker, TrackerConfig


def load_codec(tokenizer: str | None, model: str) -> TokenCodec:
    """The target model's tokenizer.

    Args:
        tokenizer: ``None`` (tiktoken's encoding for an OpenAI model name), a tiktoken encoding
            (``cl100k_base`` or ``tiktoken:cl100k_base``), or a Hugging Face tokenizer
            directory / hub name.
        model: the API model name.

    Raises:
        BlackboxMIAError: no tokenizer can be found for the model.
    """
    if tokenizer is None:
        return TiktokenCodec.for_model(model)
    name = tokenizer.removeprefix("tiktoken:")
    if name in TIKTOKEN_SHIPPED:
        return TiktokenCodec(name)
    return HFTokenCodec.load(tokenizer)


class ApiBackend(Backend):
    """Per-token log-probs through an OpenAI-compatible API.

    Args:
        api: endpoint, model, key, limits.
        tokenizer: see :func:`load_codec`.
        tracker: tracker configuration (strategy, ε).
        cache_dir: cache root (responses and capability probes live under it).
        reprobe: probe the endpoint again even when a cached probe exists.
        allow_chat_conditional: accept ``endpoint="chat"``, whose values are log-probs
            conditional on the server's chat template, not the text's own (every result's
            provenance then says ``condition: "chat-template"``).

    Raises:
        BlackboxMIAError: a chat endpoint without ``allow_chat_conditional`` (before any
            request); the endpoint is unreachable, refuses the key, does not know the model, or
            cannot give absolute log-probs.
    """

    provides_vocab_stats = False

    def __init__(
        self,
        api: ApiConfig,
        tokenizer: str | None = None,
        tracker: TrackerConfig = TrackerConfig(),
        cache_dir: Path | None = None,
        reprobe: bool = False,
        allow_chat_conditional: bool = False,
    ):
        if api.endpoint == "chat" and not allow_chat_conditional:
            raise BlackboxMIAError(
                "--endpoint chat returns log-probs conditional on the server's chat template, not the "
                "text's own log-probs, so scores would not be comparable to completions or --local; "
                "pass --allow-chat-conditional to accept that (results are then labelled chat-template)"
            )
        root = cache_root(cache_dir)
        self.loop = asyncio.new_event_loop()
        self.codec = load_codec(tokenizer, api.model)
        self.client = ApiClient(api, cache=ResponseCache(root / "responses"))
        self.endpoint = Endpoint(self.client, self.codec, api.endpoint, token_id_prompts=True)
        try:
            self.capabilities: Capabilities = self.loop.run_until_complete(
                load_or_probe(self.endpoint, root, tracker, refresh=reprobe)
            )
            self.tracker = Tracker(self.endpoint, self.capabilities, tracker)
        except BaseException:
            self.close()
            raise

    @property
    def usage(self):
        """Requests, tokens and estimated cost so far (see :class:`~blackbox_mia.client.Usage`)."""
        return self.client.usage

    def logprobs(
        self,
        texts: Sequence[str],
        progress: bool = False,
        on_done: OnDone | None = None,
    ) -> list[TokenLogprobs]:
        check_texts(texts)
        return self.loop.run_until_complete(self.tracker.track(texts, progress=progress, on_done=on_done))

    def describe(self) -> dict:
        return {
            "backend": "api",
            **self.client.config.describe(),
            "tokenizer": self.codec.name,
            "capabilities": self.capabilities.to_json(),
            **self.tracker.describe(),
        }

    def close(self) -> None:
        if not self.loop.is_closed():
            self.loop.run_until_complete(self.client.close())
            self.loop.close()
