"""The backend interface: per-token log-probs of texts, and generated continuations of prompts.

Async first: :meth:`Backend.alogprobs` and :meth:`Backend.agenerate` are the API; the sync
:meth:`Backend.logprobs` and :meth:`Backend.generate` wrap them, here and nowhere else. Every
backend runs its work on its own event loop in a daemon thread (:class:`~.loop.LoopThread`), so
both forms work in a plain script and inside a running event loop (Jupyter), and an ``await``
never blocks the caller's loop (a local model computes on the backend's thread).

Callers check :attr:`Backend.features`, never the backend's class.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from ..cost.estimate import CostEstimate
from ..types import ArgumentTypeError, BlackboxMIAError, Generation, TokenLogprobs
from .loop import LoopThread

if TYPE_CHECKING:  # the client is only imported by the API backend
    from ..tokenizers import TokenCodec
    from ..cost.usage import Usage

T = TypeVar("T")

LOGPROBS = "logprobs"
FULL_DISTRIBUTION = "full_distribution"
GENERATE = "generate"
FEATURES = (LOGPROBS, FULL_DISTRIBUTION, GENERATE)
"""What a backend may offer:

* ``logprobs``: :meth:`Backend.alogprobs` (per-token log-probs of texts);
* ``full_distribution``: those log-probs carry the per-position vocabulary mean ``mu`` and
  standard deviation ``sigma`` of log p (Min-K%++): a white-box model;
* ``generate``: :meth:`Backend.agenerate` (greedy or sampled continuations).
"""

OnDone = Callable[[int, TokenLogprobs], None]
"""Completion callback of :meth:`Backend.logprobs`: ``on_done(index, logprobs)``."""

Prompt = str | Sequence[int]
"""A generation prompt: a text, or the token ids of a text (no BOS: the backend adds its own)."""


class Backend(ABC):
    """A source of per-token log-probs and generations (local torch model, or API + tracker).

    Subclasses call ``super().__init__()``, set :attr:`features` and :attr:`codec`, and
    implement the coroutines :meth:`_alogprobs` / :meth:`_agenerate` of the features they declare
    (they run on the backend's own loop thread) and :meth:`describe`.

    Attributes:
        kind: the backend's kind as the registry names it (``"local"``, ``"api"``).
        features: what this backend offers, a subset of :data:`FEATURES`.
        codec: the model's tokenizer (:class:`~blackbox_mia.tokenizers.TokenCodec`): the ids
            of token-id prompts and of :attr:`TokenLogprobs.token_ids` are its ids, so a caller
            can cut a text into a prompt of N tokens without retokenization drift.
        context: the most tokens one sequence may hold (the codec's BOS, a prompt and what is
            generated after it), or ``None`` when unknown (then nothing is checked before
            sending).
    """

    kind: str = "backend"
    features: frozenset[str] = frozenset()
    codec: TokenCodec
    context: int | None = None

    def __init__(self) -> None:
        self._loop = LoopThread(f"bbmia-{type(self).__name__}", settle=self._settle, resume=self._resume)

    # -- the public API -------------------------------------------------------------------------

    async def alogprobs(
        self, texts: Sequence[str], progress: bool = False, on_done: OnDone | None = None, *,
        vocab_stats: bool | None = None,
    ) -> list[TokenLogprobs]:
        """Log-probs of every scored token of every text, in input order.

        Args:
            texts: the texts.
            progress: show a progress bar on stderr.
            on_done: called as ``on_done(index, logprobs)`` once per text, as soon as the
                log-probs of ``texts[index]`` are final (in any order, before this method
                returns). It runs on the backend's own thread (not the caller's): keep it quick,
                and do not call this backend's sync methods from it. Whatever it raises stops
                the computation and propagates out of this method; texts finished before that
                were reported.
            vocab_stats: compute μ and σ over the vocabulary at every position (Min-K%++;
                ``full_distribution`` backends only); ``None``: the backend's default (the local
                backend computes them when it offers them). ``False`` skips their cost.

        Raises:
            BlackboxMIAError: the backend lacks the ``logprobs`` feature (or
                ``full_distribution`` when ``vocab_stats`` is true); an empty text, or a text
                with no scorable token.
        """
        self.require(LOGPROBS)
        if vocab_stats:
            self.require(FULL_DISTRIBUTION)
        check_texts(texts)
        return await self._loop.acall(self._alogprobs(list(texts), progress, on_done, vocab_stats))

    async def agenerate(
        self,
        prompts: Sequence[Prompt],
        max_new_tokens: int,
        temperature: float = 0.0,
        n: int = 1,
        seed: int | None = None,
        logprobs: bool = True,
    ) -> list[Generation]:
        """``n`` continuations of every prompt, prompt-major: result ``i * n + j`` is sample
        ``j`` of ``prompts[i]``.

        Args:
            prompts: texts, or token-id sequences of texts (the backend prepends its BOS
                convention to both, as for scoring).
            max_new_tokens: at most this many tokens per continuation (>= 1).
            temperature: 0 = greedy (then the ``n`` samples are equal); > 0 samples from
                softmax(logits / temperature).
            n: samples per prompt (>= 1).
            seed: sample ``j`` uses seed ``seed + j``, so a prompt's samples are reproducible
                whatever the other prompts; ``None`` = fresh randomness.
            logprobs: ask for the generated tokens' log-probs (and, through an API, their
                names, hence their exact ids). ``False`` works on endpoints that give no
                log-probs at all (generation-only APIs); a backend that has them for free (a
                local model) returns them anyway.

        Raises:
            BlackboxMIAError: the backend lacks the ``generate`` feature; an empty prompt, or a
                bad ``max_new_tokens``, ``temperature``, ``n`` or ``seed``.
        """
        self.require(GENERATE)
        check_generation(prompts, max_new_tokens, temperature, n, seed)
        return await self._loop.acall(
            self._agenerate(list(prompts), max_new_tokens, float(temperature), n, seed, logprobs)
        )

    def logprobs(
        self, texts: Sequence[str], progress: bool = False, on_done: OnDone | None = None, *,
        vocab_stats: bool | None = None,
    ) -> list[TokenLogprobs]:
        """Blocking form of :meth:`alogprobs` (works inside a running event loop too)."""
        return self._call(self.alogprobs(texts, progress=progress, on_done=on_done, vocab_stats=vocab_stats))

    async def asequence_lengths(self, texts: Sequence[str]) -> list[int]:
        """How many tokens each text is as :meth:`alogprobs` scores it (a BOS the backend
        prepends included): what decides whether it fits :attr:`context` or goes in sliding
        windows (:mod:`~blackbox_mia.text.windows`). An API backend probes its endpoint first
        (its context may come from the server)."""
        return await self._loop.acall(self._asequence_lengths(list(texts)))

    def sequence_lengths(self, texts: Sequence[str]) -> list[int]:
        """Blocking form of :meth:`asequence_lengths`."""
        return self._call(self.asequence_lengths(texts))

    def generate(
        self,
        prompts: Sequence[Prompt],
        max_new_tokens: int,
        temperature: float = 0.0,
        n: int = 1,
        seed: int | None = None,
        logprobs: bool = True,
    ) -> list[Generation]:
        """Blocking form of :meth:`agenerate` (works inside a running event loop too)."""
        return self._call(
            self.agenerate(prompts, max_new_tokens, temperature=temperature, n=n, seed=seed, logprobs=logprobs)
        )

    def require(self, feature: str) -> None:
        """Raise unless this backend offers ``feature``.

        Raises:
            BlackboxMIAError: naming the missing feature and the backend.
        """
        if feature not in FEATURES:
            raise ValueError(f"unknown feature {feature!r}: one of {', '.join(FEATURES)}")
        if feature not in self.features:
            raise BlackboxMIAError(
                f"this {self.kind} backend does not offer {feature!r} "
                f"(it offers: {', '.join(sorted(self.features)) or 'nothing'})"
            )

    async def aestimate_cost(self, texts: Sequence[str]) -> CostEstimate:
        """What :meth:`alogprobs` on ``texts`` is expected to cost, sending nothing for the texts
        (an API backend may run its capability probe once, which is cached).

        The default (a backend that sends no requests): zeros.

        Raises:
            BlackboxMIAError: an empty or non-string text; for an API backend, a failed probe.
        """
        check_texts(texts)
        return await self._loop.acall(self._aestimate_cost(list(texts)))

    def estimate_cost(self, texts: Sequence[str]) -> CostEstimate:
        """Blocking form of :meth:`aestimate_cost`."""
        return self._call(self.aestimate_cost(texts))

    def estimate_generation(self, prompt_tokens: Sequence[int], max_new_tokens: Sequence[int],
                            sent: Sequence[int] | None = None) -> CostEstimate:
        """What generation is expected to cost, sending nothing: one prompt of
        ``prompt_tokens[i]`` tokens (the codec's BOS not counted) generating at most
        ``max_new_tokens[i]`` tokens per entry, sent ``sent[i]`` times (``None``: once each, as
        greedy generation; a sampled prompt is sent once per sample, each with its seed).

        The default (a backend that sends no requests): zeros.

        Raises:
            ValueError: the sequences differ in length.
        """
        if len(prompt_tokens) != len(max_new_tokens) or (sent is not None and len(sent) != len(prompt_tokens)):
            raise ValueError("prompt_tokens, max_new_tokens and sent must have one entry per prompt")
        return CostEstimate()

    @property
    def usage(self) -> Usage | None:
        """Requests, tokens and estimated cost so far; ``None`` for a backend that sends no
        requests (a local model)."""
        return None

    @property
    def capped(self) -> bool:
        """Whether a spending cap bounds what this backend sends (``max_cost=`` in USD,
        ``max_requests=`` in requests); ``False``: uncapped, or a backend that sends no requests."""
        return False

    @abstractmethod
    def describe(self) -> dict:
        """JSON-ready configuration of this backend, saved next to every result; its
        ``"backend"`` key names the kind (``"local"``, ``"api"``)."""

    def describe_generation(self) -> dict:
        """JSON-ready configuration that determines this backend's generations, saved next to
        results made of generations only (``bbmia memorize``): :meth:`describe` by default. A
        backend whose :meth:`describe` needs what generating does not (the API backend's
        log-prob capability probe, which fails on a generation-only endpoint) overrides it."""
        return self.describe()

    def close(self) -> None:
        """Release resources (connections, the backend's thread); idempotent."""
        self._loop.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- for subclasses -----------------------------------------------------------------------

    async def _alogprobs(
        self, texts: list[str], progress: bool, on_done: OnDone | None, vocab_stats: bool | None
    ) -> list[TokenLogprobs]:
        """The ``logprobs`` feature, on the backend's loop (texts already checked; ``vocab_stats``
        true only on a ``full_distribution`` backend)."""
        raise NotImplementedError

    async def _agenerate(
        self, prompts: list[Prompt], max_new_tokens: int, temperature: float, n: int, seed: int | None,
        logprobs: bool,
    ) -> list[Generation]:
        """The ``generate`` feature, on the backend's loop (arguments already checked)."""
        raise NotImplementedError

    async def _asequence_lengths(self, texts: list[str]) -> list[int]:
        """:meth:`asequence_lengths` on the backend's loop: the codec's tokens, plus its BOS when
        it has one (a backend that sends sequences otherwise says so here)."""
        bos = int(self.codec.bos_id is not None)
        return [len(self.codec.encode(text)) + bos for text in texts]

    async def _aestimate_cost(self, texts: list[str]) -> CostEstimate:
        """:meth:`aestimate_cost` on the backend's loop (texts already checked): zeros."""
        return CostEstimate()

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine of this backend to completion from synchronous code (Ctrl-C:
        :meth:`_settle`, then the coroutine is cancelled, then :meth:`_resume`)."""
        return self._loop.call(coro)

    async def _settle(self) -> None:
        """On Ctrl-C during a blocking call, before its coroutine is cancelled, on the backend's
        loop: nothing here (a backend sending paid requests lets those in flight land)."""

    async def _resume(self) -> None:
        """After a call interrupted by Ctrl-C has ended, on the backend's loop: undo
        :meth:`_settle` (nothing here)."""


def refuse_one_str(values, what: str = "texts") -> None:
    """Refuse one ``str`` where a list is meant (it would be read character by character).

    Raises:
        ArgumentTypeError: ``values`` is a ``str`` (a ``TypeError`` and a ``BlackboxMIAError``).
    """
    if isinstance(values, str):
        raise ArgumentTypeError(f"{what} must be a list, got one str: pass [{what[:-1]}]")


def check_texts(texts: Sequence[str]) -> None:
    """Raise :class:`BlackboxMIAError` naming the first empty or non-string text
    (:class:`~blackbox_mia.types.ArgumentTypeError` for one ``str``)."""
    refuse_one_str(texts)
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise BlackboxMIAError(f"text #{i} is {type(text).__name__}, not a string")
        if not text.strip():
            raise BlackboxMIAError(f"text #{i} is empty: nothing to score")


def check_generation(prompts: Sequence[Prompt], max_new_tokens: int, temperature: float, n: int, seed: int | None) -> None:
    """Raise :class:`BlackboxMIAError` for an empty or malformed prompt or a bad setting."""
    refuse_one_str(prompts, "prompts")
    for i, prompt in enumerate(prompts):
        if not isinstance(prompt, str) and not all(isinstance(t, (int, np.integer)) and not isinstance(t, bool) and t >= 0 for t in prompt):
            raise BlackboxMIAError(f"prompt #{i} is neither a text nor a list of token ids")
        if len(prompt) == 0:
            raise BlackboxMIAError(f"prompt #{i} is empty")
    for name, value in (("max_new_tokens", max_new_tokens), ("n", n)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise BlackboxMIAError(f"{name} must be an integer >= 1, got {value!r}")
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not 0 <= temperature <= 2:
        raise BlackboxMIAError(f"temperature must be a number in [0, 2], got {temperature!r}")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise BlackboxMIAError(f"seed must be a non-negative integer or None, got {seed!r}")
