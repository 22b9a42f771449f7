"""Build any backend from a spec, so a command (or a notebook) can take several targets.

Specs:

* ``local:PATH`` or a bare ``PATH``: a Hugging Face causal LM (directory or hub name) run
  locally (:class:`~blackbox_mia.backends.local.LocalBackend`);
* ``api:MODEL@URL``: the model ``MODEL`` behind the OpenAI-compatible endpoint ``URL``
  (``http://`` or ``https://``, up to ``/v1``), through the tracker
  (:class:`~blackbox_mia.backends.api.ApiBackend`). ``MODEL`` may itself contain ``@``; the
  first ``@`` followed by ``http://`` or ``https://`` separates it from the URL.

The kinds are registered by name (``local``, ``api``); :func:`register_backend` adds one (a
``vllm`` kind later). Settings that are not part of a spec (device, API key, tracker ε...) come
from one :class:`BackendOptions`, each kind reading the fields that concern it.

Example:
    >>> target = build_backend("api:my-model@http://127.0.0.1:8000/v1",
    ...                        BackendOptions(tokenizer="gpt2"))       # doctest: +SKIP
    >>> reference = build_backend("local:gpt2")                         # doctest: +SKIP
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..config import NOT_AN_OPTION
from ..types import BlackboxMIAError
from .base import Backend

API_SPEC = re.compile(r"^(?P<model>.+?)@(?P<url>https?://.+)$")
KIND_PREFIX = re.compile(r"^(?P<kind>[a-z][a-z0-9_]*):(?P<rest>.*)$")


@dataclass(frozen=True)
class BackendOptions:
    """Settings of the backends a command builds; each kind reads its own fields.

    Attributes:
        device: torch device of local models (``None``: CUDA when available).
        dtype: weights' dtype of local models (``float32``, ``bfloat16``, ``float16``, ``auto``).
        batch_tokens: padded tokens per forward pass of local models, at most (the memory
            budget usually binds first).
        api_key: the API key (never stored or printed); ``None``: the client's default
            (``OPENAI_API_KEY``).
        endpoint: ``completions`` or ``chat``.
        allow_chat_conditional: accept chat log-probs conditional on the server's template.
        tokenizer: the API model's tokenizer (see :func:`blackbox_mia.tokenizers.load_codec`).
        strategy, epsilon, context: tracker strategy, bisection precision (nats), model
            context (tokens) (see :class:`~blackbox_mia.backends.api.tracker.config.TrackerConfig`).
        concurrency, rpm, tpm: requests in flight, requests and tokens per minute.
        cache_dir: cache root of responses and capability probes.
        reprobe: probe the endpoint's capabilities again.
        threads: torch CPU threads of local models (``None``: a default that does not
            oversubscribe the machine).
        max_memory_gb: memory budget (GiB) of one local forward pass (``None``: from the device).
        local_engine: engine of local models: ``torch`` (:mod:`.local`) or ``vllm``
            (:mod:`.vllm_engine`, extra ``vllm``).
        chat_template: with ``endpoint="chat"``: ``continuation`` or a template file.
        refine_for: the precision bisection refines texts to, from the command's scorers
            (:func:`~blackbox_mia.scorers.refine_for`; ``()``: every value to ε); not a
            command-line option (``--precision`` chooses it).
        max_cost: stop before the request that would take the spend past this many USD.
    """

    device: str | None = None
    dtype: str = "auto"
    batch_tokens: int = 8192
    api_key: str | None = None
    endpoint: str = "completions"
    allow_chat_conditional: bool = False
    tokenizer: str | None = None
    strategy: str = "auto"
    epsilon: float = 0.01
    context: int | None = None
    concurrency: int = 16
    rpm: float | None = None
    tpm: float | None = None
    cache_dir: Path | None = None
    reprobe: bool = False
    threads: int | None = None
    max_memory_gb: float | None = None
    local_engine: str = "torch"
    chat_template: str | None = None
    max_cost: float | None = None
    refine_for: tuple[float, ...] = field(default=(), metadata=NOT_AN_OPTION)


Builder = Callable[[str, BackendOptions], Backend]
"""``builder(rest_of_spec, options) -> Backend`` for one kind."""


LOCAL_ENGINES = ("torch", "vllm")
"""Engines of ``local:`` models (``BackendOptions.local_engine``)."""


def _local(model: str, options: BackendOptions) -> Backend:
    if not model:
        raise BlackboxMIAError("local: needs a model directory or hub name, e.g. local:gpt2")
    if options.local_engine == "vllm":
        from .vllm_engine import VllmBackend, VllmConfig

        return VllmBackend(VllmConfig(model, dtype=options.dtype))
    if options.local_engine != "torch":
        raise BlackboxMIAError(f"unknown --local-engine {options.local_engine!r}: use {' or '.join(LOCAL_ENGINES)}")
    from .local import LocalBackend, LocalConfig

    return LocalBackend(
        LocalConfig(
            model,
            device=options.device,
            dtype=options.dtype,
            max_batch_tokens=options.batch_tokens,
            threads=options.threads,
            max_memory_gb=options.max_memory_gb,
        )
    )


def _api(rest: str, options: BackendOptions) -> Backend:
    from .api import ApiBackend
    from .api.http.client import ApiConfig
    from .api.tracker.config import TrackerConfig

    match = API_SPEC.match(rest)
    if match is None:
        raise BlackboxMIAError(f"api:{rest} is not api:MODEL@URL (e.g. api:gpt-4o-mini@https://api.openai.com/v1)")
    api = ApiConfig(
        base_url=match["url"],
        model=match["model"],
        endpoint=options.endpoint,
        chat_template=options.chat_template,
        concurrency=options.concurrency,
        rpm=options.rpm,
        tpm=options.tpm,
        max_cost=options.max_cost,
        **({"api_key": options.api_key} if options.api_key else {}),
    )
    tracker = TrackerConfig(
        strategy=options.strategy, epsilon=options.epsilon, context=options.context, refine_for=options.refine_for
    )
    return ApiBackend(
        api,
        options.tokenizer,
        tracker,
        options.cache_dir,
        options.reprobe,
        allow_chat_conditional=options.allow_chat_conditional,
    )


BUILDERS: dict[str, Builder] = {"local": _local, "api": _api}


def register_backend(kind: str, builder: Builder) -> None:
    """Make ``kind:...`` specs build through ``builder``.

    Raises:
        BlackboxMIAError: ``kind`` is already registered or not a lowercase name.
    """
    if not re.fullmatch(r"[a-z][a-z0-9_]*", kind):
        raise BlackboxMIAError(f"backend kind {kind!r} must be a lowercase name")
    if kind in BUILDERS:
        raise BlackboxMIAError(f"backend kind {kind!r} is already registered")
    BUILDERS[kind] = builder


def parse_spec(spec: str) -> tuple[str, str]:
    """``(kind, rest)`` of a backend spec; a spec without a registered ``kind:`` prefix is a
    local model path or hub name.

    Raises:
        BlackboxMIAError: an empty spec, or ``word:...`` naming no registered kind and no
            existing path.
    """
    if not spec:
        raise BlackboxMIAError("empty backend spec: use local:PATH or api:MODEL@URL")
    match = KIND_PREFIX.match(spec)
    if match is None:
        return "local", spec
    if match["kind"] in BUILDERS:
        return match["kind"], match["rest"]
    if Path(spec).exists():
        return "local", spec
    raise BlackboxMIAError(
        f"unknown backend kind {match['kind']!r} in {spec!r}; known: {', '.join(sorted(BUILDERS))} "
        "(local:PATH, api:MODEL@URL)"
    )


def build_backend(spec: str, options: BackendOptions | None = None) -> Backend:
    """The backend a spec names (see the module docstring); no request is sent.

    Args:
        spec: ``local:PATH``, ``PATH``, ``api:MODEL@URL``, or a registered ``kind:...``.
        options: settings outside the spec; default ``BackendOptions()``.

    Raises:
        BlackboxMIAError: a malformed spec, or the backend cannot be built (model not found,
            no tokenizer for the API model, bad option).
    """
    kind, rest = parse_spec(spec)
    return BUILDERS[kind](rest, options if options is not None else BackendOptions())
