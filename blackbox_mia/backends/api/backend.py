"""Black-box backend: an OpenAI-compatible endpoint, the capability probe and the tracker.

A drop-in for :class:`~blackbox_mia.backends.local.LocalBackend`: same input, same
:class:`~blackbox_mia.types.TokenLogprobs` output, plus [lower, upper] bounds and a strategy per
token; and :class:`~blackbox_mia.types.Generation` through plain completion requests. Every answer
is cached on disk as it arrives (JSON), so a rerun makes zero requests.

Constructing the backend sends nothing: the capability probe runs on first use, once (or when
asked: ``await backend.aprobe()`` / ``backend.probe()``). The HTTP client lives on the backend's
own event loop (see :mod:`blackbox_mia.backends.base`), so the backend works from scripts, from
Jupyter, and from other event loops alike.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .http.cache.responses import ResponseCache
from ...config import cache_root
from ...cost.estimate import CostEstimate
from ...cost.prices import request_cost
from ...option_names import named
from ...tokenizers import load_codec
from ...tokenizers.load import check_codec_spec
from ...types import (
    FINISH_REASONS,
    BlackboxMIAError,
    Generation,
    NoLogprobs,
    Provenance,
    TokenLogprobs,
)
from ..base import GENERATE, LOGPROBS, Backend, OnDone, Prompt
from ..loop import in_daemon_thread
from ..generation import sample_seed, strategy_name
from .capabilities import Capabilities
from .http.client import ApiClient, ApiConfig
from .tracker.costs import estimate
from .endpoint import Endpoint
from .probe import load_or_probe, record_path
from .tracker.tracker import Tracker
from .tracker.config import TrackerConfig

LOG = logging.getLogger(__name__)

if TYPE_CHECKING:
    from .http.client import Usage

INTERRUPT_GRACE_S = 5.0  # Ctrl-C: seconds the requests in flight get to land in the cache before they are cancelled


class ApiBackend(Backend):
    """Per-token log-probs and generations through an OpenAI-compatible API.

    Features: ``logprobs`` (through the tracker; the first call fails clearly when the endpoint
    cannot give absolute log-probs) and ``generate``.

    Attributes:
        codec, client, endpoint: the tokenizer, the HTTP client, the endpoint adapter.
        tracker_config: the tracker's configuration.

    Args:
        api: endpoint, model, key, limits.
        tokenizer: the target's tokenizer (see :func:`blackbox_mia.tokenizers.load_codec`).
        tracker: tracker configuration (strategy, ε); default ``TrackerConfig()``.
        cache_dir: cache root (responses and capability probes live under it).
        reprobe: probe the endpoint again even when a cached probe exists.
        allow_chat_conditional: accept ``endpoint="chat"``, whose values are log-probs
            conditional on the server's chat template, not the text's own (every result's
            provenance then says ``condition: "chat-template"``).

    Raises:
        BlackboxMIAError: a chat endpoint without ``allow_chat_conditional``, or no tokenizer
            for the model (no request is sent). Unreachable endpoints, refused keys, unknown
            models and endpoints without absolute log-probs are reported by the first call.

    Example:
        >>> api = ApiConfig(base_url="http://127.0.0.1:8000/v1", model="m")  # doctest: +SKIP
        >>> backend = ApiBackend(api, tokenizer="gpt2")             # doctest: +SKIP
        >>> lps = await backend.alogprobs(["Tom has 3 apples."])      # doctest: +SKIP
    """

    kind = "api"
    features = frozenset({LOGPROBS, GENERATE})

    def __init__(
        self,
        api: ApiConfig,
        tokenizer: str | None = None,
        tracker: TrackerConfig | None = None,
        cache_dir: Path | None = None,
        reprobe: bool = False,
        allow_chat_conditional: bool = False,
        check_first: bool = False,
    ):
        super().__init__()
        if api.endpoint == "chat" and not allow_chat_conditional:
            raise BlackboxMIAError(
                f"{named('endpoint', 'chat')} returns log-probs conditional on the server's chat template, not "
                "the text's own log-probs, so scores would not be comparable to completions or a local model; "
                f"pass {named('allow_chat_conditional', True)} to accept that (results are then labelled chat-template)"
            )
        self._root = cache_root(cache_dir)
        self.tracker_config = tracker if tracker is not None else TrackerConfig()
        self.context = self.tracker_config.context  # --context-tokens: None when not given
        self._reprobe = reprobe
        self.client = ApiClient(api, cache=ResponseCache(self._root / "responses"))
        try:  # a server that is down, refuses the key or lacks the model fails before the tokenizer loads
            if check_first:
                check_codec_spec(tokenizer)  # a missing directory is said before the server is asked
                self._call(self.client.check_server())
            self.codec = load_codec(tokenizer, api.model)
        except BaseException:
            self._call(self.client.close())
            super().close()
            raise
        self.endpoint = Endpoint(self.client, self.codec, api.endpoint, token_id_prompts=True)
        self._capabilities: Capabilities | None = None
        self._tracker: Tracker | None = None
        self._probe_lock = asyncio.Lock()  # binds to the backend's loop on first use
        self._closed = False

    # -- the capability probe ---------------------------------------------------------------

    async def aprobe(self, full: bool = False) -> Capabilities:
        """The endpoint's capabilities: the cached probe, else the probe runs now (a few dozen
        requests, cached), once per backend however many callers ask at the same time.

        Args:
            full: also run the checks a probe that stopped at the prompt path left out (about a
                hundred requests, cached), which scoring a text with a window as long as the
                context runs anyway before its first window.

        Raises:
            BlackboxMIAError: the endpoint is unreachable, refuses the key, does not know the
                model, or the probe failed (nothing is saved then; the next call probes again).
        """
        probed = await self._loop.acall(self._probed())
        return await self._loop.acall(self._probed_in_full()) if full else probed

    def probe(self, full: bool = False) -> Capabilities:
        """Blocking form of :meth:`aprobe`."""
        return self._call(self.aprobe(full))

    @property
    def capabilities(self) -> Capabilities:
        """The endpoint's capabilities (:meth:`probe` on first access)."""
        return self.probe()

    async def _probed(self) -> Capabilities:
        async with self._probe_lock:
            if self._capabilities is None:
                await self._discover_context()
                self._capabilities = await load_or_probe(
                    self.endpoint, self._root, self.tracker_config, refresh=self._reprobe
                )
        return self._capabilities

    async def _discover_context(self) -> None:
        """Without a context (``--context-tokens``), the model's: as the server lists it
        (``GET /models``: vLLM's ``max_model_len``...), else as the tokenizer's configuration
        says (:attr:`~blackbox_mia.tokenizers.TokenCodec.max_length`); texts longer than it
        then go in sliding windows instead of being refused by the server. Logged; the
        tracker's configuration, saved with every result, records it."""
        if self.tracker_config.context is not None:
            return
        found = await self.client.served_context()
        if found is not None:
            context, source = found[0], f"GET /models {found[1]}"
        elif self.codec.max_length is not None:
            context, source = self.codec.max_length, f"the tokenizer's model_max_length ({self.codec.name})"
        else:
            return
        self.tracker_config = replace(self.tracker_config, context=context)
        self.context = context
        LOG.info("%s: context %d tokens, from %s", self.client.config.model, context, source)

    async def _tracking(self) -> Tracker:
        """The tracker, built once after the probe.

        Raises:
            NoLogprobs: the endpoint cannot give absolute log-probs (the message names the cached
                verdict and how to probe again: the endpoint may have recovered since).
            BlackboxMIAError: the requested strategy is not available on it.
        """
        capabilities = await self._probed()
        if self._tracker is None:
            try:
                self._tracker = Tracker(self.endpoint, capabilities, self.tracker_config,
                                        complete=self._probed_in_full)
            except NoLogprobs as exc:
                where = record_path(self.endpoint, self._root, self.tracker_config)
                raise NoLogprobs(f"{exc} (the probe's verdict, cached in {where}: {named('reprobe', True)} "
                                 "probes again)") from None
        return self._tracker

    async def _probed_in_full(self) -> Capabilities:
        """The capabilities with every check run: the rest of a probe that stopped at the prompt
        path (:attr:`Capabilities.complete`), run (and saved) now, once.

        Raises:
            BlackboxMIAError: the probe failed (the stopped record stays).
        """
        async with self._probe_lock:
            if self._capabilities is None or not self._capabilities.complete:
                self._capabilities = await load_or_probe(self.endpoint, self._root, self.tracker_config, full=True)
        return self._capabilities

    # -- features -----------------------------------------------------------------------------

    async def _alogprobs(
        self, texts: list[str], progress: bool, on_done: OnDone | None, vocab_stats: bool | None
    ) -> list[TokenLogprobs]:
        tracker = await self._tracking()
        return await tracker.track(texts, progress=progress, on_done=on_done)

    async def _asequence_lengths(self, texts: list[str]) -> list[int]:
        """The tracker's sequences (BOS only when prompts go as ids), after the probe."""
        tracker = await self._tracking()
        return [len(sequence) for sequence in await tracker.sequences(texts)]

    async def _aestimate_cost(self, texts: list[str]) -> CostEstimate:
        """Requests, billed tokens and USD of scoring ``texts`` (:mod:`.costs`: exact for echo and
        forced read-out, measured rates for postbias and bisection), from the capability probe
        (run now when it is not cached, in full where the texts' windows need it) and the
        tokenizer; no request for the texts."""
        tracker, price = await self._tracking(), self.client.config.price()
        if not tracker.caps.complete:  # where windows may need them, the probe's other checks first, as scoring does
            await tracker.complete_for(await tracker.sequences(texts))
        return await in_daemon_thread(lambda _: estimate(tracker, texts, price), "bbmia-estimate")  # tokenizes

    def estimate_generation(self, prompt_tokens: Sequence[int], max_new_tokens: Sequence[int],
                            sent: Sequence[int] | None = None) -> CostEstimate:
        """Requests, billed tokens and USD of generation (:meth:`_agenerate`: one request per
        prompt at temperature 0, one per sample otherwise, ``sent[i]`` of them; the codec's BOS
        added to each prompt), sending nothing (no probe either). Completion tokens are counted
        at ``max_new_tokens``: an upper bound.

        Raises:
            ValueError: the sequences differ in length.
        """
        super().estimate_generation(prompt_tokens, max_new_tokens, sent)
        sent = [1] * len(prompt_tokens) if sent is None else sent
        bos = int(self.codec.bos_id is not None)
        prompt = sum((n + bos) * k for n, k in zip(prompt_tokens, sent))
        completion = sum(m * k for m, k in zip(max_new_tokens, sent))
        price = self.client.config.price()
        usd = request_cost(prompt, completion, price)
        notes = ("answers already in the response cache are counted as if paid",
                 "completion tokens counted as if every generation ran to its token budget (an upper bound)")
        return CostEstimate(requests=sum(sent), prompt_tokens=prompt, completion_tokens=completion, usd=usd,
                            strategy="generate", unpriced=price is None, notes=notes)

    async def _agenerate(
        self, prompts: list[Prompt], max_new_tokens: int, temperature: float, n: int, seed: int | None,
        logprobs: bool,
    ) -> list[Generation]:
        """One request per prompt at temperature 0 (its ``n`` samples are that answer), else one
        per sample with seed ``seed + j`` (each answer cached under its seed).

        Generation needs no capability probe. With ``logprobs`` the requests ask for the chosen
        tokens' log-probs (``top_n = 0``): their names (or bytes) give the generated ids, each of
        which must denote exactly one id of the tokenizer. Without it (for endpoints that give no
        log-probs at all: reasoning models, many chat APIs, ``bbmia serve --no-logprobs``) the
        requests ask for none; token ids are then the tokenizer's encoding of the returned text
        (an end-of-sequence token is not among them) and ``logprobs`` is None.
        """
        ids = [self.codec.encode(p) if isinstance(p, str) else [int(t) for t in p] for p in prompts]
        provenance = Provenance(
            backend="api",
            model=self.client.config.model,
            strategy=strategy_name(temperature),
            bos=self.codec.bos_id is not None and self.endpoint.token_id_prompts,
            condition=self.endpoint.dialect.condition,
        )
        samples = 1 if temperature == 0 else n
        seeds = [None if temperature == 0 else sample_seed(seed, j) for j in range(samples)]
        answers = await asyncio.gather(
            *(
                self.endpoint.generate(ids[i], max_new_tokens, temperature, seeds[j], top_n=0 if logprobs else None)
                for i in range(len(prompts))
                for j in range(samples)
            )
        )
        return [
            self._generation(answers[i * samples + (j if samples > 1 else 0)], i, j, provenance)
            for i in range(len(prompts))
            for j in range(n)
        ]

    def _generation(self, answer: dict, prompt_index: int, sample: int, provenance: Provenance) -> Generation:
        """A :class:`Generation` from one validated answer (see :meth:`_agenerate`)."""
        if answer["finish_reason"] not in FINISH_REASONS:
            raise BlackboxMIAError(
                f"the endpoint ended a generation with finish_reason {answer['finish_reason']!r} "
                f"(expected one of {', '.join(FINISH_REASONS)})"
            )
        entries = answer["tokens"]
        candidates = [self.endpoint.candidates(e) for e in entries]
        if entries and all(c is not None and len(c) == 1 for c in candidates):
            ids = [next(iter(c)) for c in candidates]
            logprobs = np.asarray([e["logprob"] for e in entries], dtype=np.float64)
        else:
            ids, logprobs = self.codec.encode(answer["text"]), None
        return Generation(
            text=answer["text"],
            token_ids=np.asarray(ids, dtype=np.int64),
            tokens=[self.codec.token_string(i) for i in ids],
            logprobs=logprobs,
            finish_reason=answer["finish_reason"],
            prompt_index=prompt_index,
            sample=sample,
            provenance=provenance,
        )

    async def _settle(self) -> None:
        """Ctrl-C: send nothing more and give the requests in flight :data:`INTERRUPT_GRACE_S`
        seconds to land in the cache (answers paid for are not paid again by the rerun)."""
        await self.client.stop_sending(INTERRUPT_GRACE_S)

    async def _resume(self) -> None:
        """After the interrupted call: the next one sends again."""
        self.client.resume_sending()

    @property
    def usage(self) -> Usage:
        """Requests, tokens and estimated cost so far (see :class:`~.client.Usage`)."""
        return self.client.usage

    @property
    def capped(self) -> bool:
        """Whether ``ApiConfig.max_cost`` or ``ApiConfig.max_requests`` caps the spend."""
        config = self.client.config
        return config.max_cost is not None or config.max_requests is not None

    def describe(self) -> dict:
        """Endpoint, model, tokenizer, the probed ``capabilities`` and the tracker's
        configuration (runs the probe when it has not run yet).

        Raises:
            BlackboxMIAError: the probe failed, or the endpoint cannot give absolute log-probs.
        """
        return {
            "backend": "api",
            **self.client.config.describe(),
            "tokenizer": self.codec.name,
            "capabilities": self.capabilities.to_json(),
            **self._call(self._tracking()).describe(),
        }

    def describe_generation(self) -> dict:
        """Endpoint, model, tokenizer and the dialect's condition: what determines generations,
        without the log-prob probe (which a generation-only endpoint fails)."""
        return {
            "backend": "api",
            **self.client.config.describe(),
            "tokenizer": self.codec.name,
            "condition": self.endpoint.dialect.condition,
        }

    def close(self) -> None:
        """Close the HTTP connections and the response cache, then the backend's thread."""
        if not self._closed:
            self._closed = True
            self._call(self.client.close())
        super().close()
