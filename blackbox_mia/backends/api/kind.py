"""The ``api:`` backend kind: its options (:class:`ApiOptions`) and its builder, registered in
:mod:`blackbox_mia.backends.options` (``api:MODEL@URL?tokenizer=gpt2&top_n=20``)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from ...config import NOT_AN_OPTION
from ...cost.prices import DEFAULT_PRICES
from ...types import BlackboxMIAError
from ..base import Backend
from ..options import NOT_A_QUERY_KEY, KindOptions, register_backend
from .http.config import ApiConfig
from .tracker.config import MAX_TOP_N, TrackerConfig

API_SPEC = re.compile(r"^(?P<model>.+?)@(?P<url>https?://.+)$")
"""``MODEL@URL``: the first ``@`` followed by ``http://`` or ``https://`` ends the model name."""


@dataclass(frozen=True)
class ApiOptions(KindOptions):
    """Settings of an ``api:`` model (query keys, and ``--`` flags of the same names but
    ``context``: ``--context-tokens``; ``top_n``, ``price``, ``timeout_s`` and ``max_retries``
    are query keys only, ``api_key`` a flag only).

    Attributes:
        tokenizer: the model's tokenizer (tiktoken encoding or Hugging Face directory, see
            :func:`blackbox_mia.tokenizers.load_codec`); ``None``: tiktoken's for the model.
        endpoint: ``completions`` or ``chat``.
        chat_template: with ``endpoint=chat``: ``continuation`` or a template file.
        allow_chat_conditional: accept chat log-probs conditional on the server's template.
        api_key: the API key (never stored or printed); ``None``: ``$OPENAI_API_KEY``.
        strategy: tracker strategy (:data:`~.tracker.config.STRATEGIES`).
        epsilon: bisection precision, nats, > 0.
        context: the model's context, tokens, ≥ 2 (longer texts in sliding windows); ``None``:
            whole prefixes.
        top_n: most top log-probs a request asks for, ≥ 1 (the endpoint's cap when lower).
        concurrency: requests in flight, ≥ 1.
        rpm, tpm: requests and tokens per minute, > 0; ``None``: no limit.
        max_cost: stop before the request that would take the spend past this many USD, > 0.
        price: (USD per 1M prompt tokens, USD per 1M completion tokens) of this model, each
            ≥ 0, added to the list prices; ``None``: the list price (:data:`DEFAULT_PRICES`).
        timeout_s: seconds to wait for one HTTP answer, > 0.
        max_retries: retries after a request's first attempt, ≥ 0.
        cache_dir: cache root of responses and capability probes; ``None``: the default root.
        reprobe: probe the endpoint's capabilities again.
        refine_for: the precision bisection refines texts to, from the command's scorers
            (:func:`~blackbox_mia.scorers.refine_for`; ``()``: every value to ε); neither a
            flag nor a query key (``--precision`` chooses it).

    Raises:
        BlackboxMIAError: a number out of its range.
    """

    ranges = {"epsilon": {"above": 0}, "context": {"at_least": 2}, "top_n": {"at_least": 1},
              "concurrency": {"at_least": 1}, "rpm": {"above": 0}, "tpm": {"above": 0}, "max_cost": {"above": 0},
              "price": {"at_least": 0}, "timeout_s": {"above": 0}, "max_retries": {"at_least": 0}}

    tokenizer: str | None = None
    endpoint: str = ApiConfig.endpoint
    chat_template: str | None = ApiConfig.chat_template
    allow_chat_conditional: bool = False
    api_key: str | None = field(default=None, repr=False, metadata=NOT_A_QUERY_KEY)
    strategy: str = TrackerConfig.strategy
    epsilon: float = TrackerConfig.epsilon
    context: int | None = TrackerConfig.context
    top_n: int = field(default=MAX_TOP_N, metadata=NOT_AN_OPTION)
    concurrency: int = ApiConfig.concurrency
    rpm: float | None = ApiConfig.rpm
    tpm: float | None = ApiConfig.tpm
    max_cost: float | None = ApiConfig.max_cost
    price: tuple[float, float] | None = field(default=None, metadata=NOT_AN_OPTION)
    timeout_s: float = field(default=ApiConfig.timeout_s, metadata=NOT_AN_OPTION)
    max_retries: int = field(default=ApiConfig.max_retries, metadata=NOT_AN_OPTION)
    cache_dir: Path | None = None
    reprobe: bool = False
    refine_for: tuple[float, ...] = field(default=(), metadata={**NOT_AN_OPTION, **NOT_A_QUERY_KEY})
    check_first: bool = field(default=False, metadata={**NOT_AN_OPTION, **NOT_A_QUERY_KEY})


@register_backend("api", ApiOptions, "api:MODEL@URL")
def build_api(target: str, options: ApiOptions) -> Backend:
    """The model ``MODEL`` behind the OpenAI-compatible endpoint ``URL`` (``target`` is
    ``MODEL@URL``), through the tracker; no request is sent, unless ``options.check_first``
    (the command line): then ``GET /models`` checks the server, the key and the model name
    before the tokenizer loads.

    Raises:
        BlackboxMIAError: ``target`` is not ``MODEL@URL``, no tokenizer for the model, a bad
            setting (see :class:`ApiConfig`, :class:`TrackerConfig`); with ``check_first``: a
            refused connection, a refused key, a model the server does not list.
    """
    from .backend import ApiBackend

    match = API_SPEC.match(target)
    if match is None:
        raise BlackboxMIAError(f"api:{target} is not api:MODEL@URL (e.g. api:gpt-4o-mini@https://api.openai.com/v1)")
    api = ApiConfig(
        base_url=match["url"],
        model=match["model"],
        endpoint=options.endpoint,
        chat_template=options.chat_template,
        concurrency=options.concurrency,
        rpm=options.rpm,
        tpm=options.tpm,
        timeout_s=options.timeout_s,
        max_retries=options.max_retries,
        max_cost=options.max_cost,
        **({"prices": {**DEFAULT_PRICES, match["model"]: options.price}} if options.price else {}),
        **({"api_key": options.api_key} if options.api_key else {}),
    )
    tracker = TrackerConfig(strategy=options.strategy, epsilon=options.epsilon, context=options.context,
                            refine_for=options.refine_for, max_top_n=options.top_n)
    return ApiBackend(api, options.tokenizer, tracker, options.cache_dir, options.reprobe,
                      allow_chat_conditional=options.allow_chat_conditional, check_first=options.check_first)
