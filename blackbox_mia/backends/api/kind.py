"""The ``api:`` backend kind: its target (:class:`ApiTarget`), options (:class:`ApiOptions`) and
builder, registered in :mod:`blackbox_mia.backends.options`
(``api:MODEL@URL?tokenizer=gpt2&top_n=20``)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from ...config import CACHE_ENV, NOT_AN_OPTION
from ...cost.prices import DEFAULT_PRICES
from ...types import BlackboxMIAError
from ..base import Backend
from ..options import NOT_A_QUERY_KEY, KindOptions, configured, register_backend, setting
from .http.config import API_KEY_ENV, ApiConfig
from .tracker.config import TrackerConfig

API_SPEC = re.compile(r"^(?P<model>.+?)@(?P<url>https?://.+)$")
"""``MODEL@URL``: the first ``@`` followed by ``http://`` or ``https://`` ends the model name."""


TARGET, TRACKER = "Target", "Tracker"
"""The ``--help`` panels of the api kind's flags."""


@dataclass(frozen=True)
class ApiTarget:
    """The model an ``api:`` backend reads: ``model`` behind the OpenAI-compatible endpoint
    ``base_url`` (``http://`` or ``https://``, up to ``/v1``)."""

    model: str
    base_url: str

    @classmethod
    def parse(cls, text: str) -> ApiTarget:
        """``ApiTarget("m@x", "http://h/v1")`` from ``"m@x@http://h/v1"`` (:data:`API_SPEC`).

        Raises:
            BlackboxMIAError: ``text`` is not ``MODEL@URL``.
        """
        match = API_SPEC.match(text)
        if match is None:
            raise BlackboxMIAError(f"api:{text} is not api:MODEL@URL (e.g. api:gpt-4o-mini@https://api.openai.com/v1)")
        return cls(match["model"], match["url"])


@dataclass(frozen=True)
class ApiOptions(KindOptions):
    """Settings of an ``api:`` model: query keys, and ``--`` flags of the same names but
    ``context``: ``--context-tokens``; ``top_n``, ``price``, ``timeout_s`` and ``max_retries``
    are query keys only, ``api_key`` a flag only. Each field's :func:`~..options.setting` is its
    one home (default, range, flag, help, the :class:`ApiConfig` or :class:`TrackerConfig`
    field it fills).

    Attributes:
        tokenizer: the model's tokenizer (tiktoken encoding, Hugging Face directory or GGUF file, see
            :func:`blackbox_mia.tokenizers.load_codec`); ``None``: tiktoken's for the model.
        endpoint: ``completions`` or ``chat``.
        chat_template: with ``endpoint=chat``: ``continuation`` or a template file.
        allow_chat_conditional: accept chat log-probs conditional on the server's template.
        api_key: the API key (never stored or printed); ``None``: ``$OPENAI_API_KEY``.
        strategy: tracker strategy (:data:`~.tracker.config.STRATEGIES`).
        epsilon: bisection precision, nats, > 0.
        context: the model's context, tokens, ≥ 2 (longer texts in sliding windows); ``None``:
            whole prefixes.
        top_n: most top log-probs a request asks for, ≥ 1 (the endpoint's cap when lower;
            ``TrackerConfig.max_top_n``).
        concurrency: requests in flight, ≥ 1.
        rpm, tpm: requests and tokens per minute, > 0; ``None``: no limit.
        max_cost: stop before the request that would take the spend past this many USD, ≥ 0
            (0: cached answers only).
        max_requests: stop before the request that would take the requests sent (retries
            included) past this many, ≥ 0 (0: cached answers only): the cap for a model
            without a price.
        price: (USD per 1M prompt tokens, USD per 1M completion tokens) of this model, each
            ≥ 0, added to the list prices; ``None``: the list price (:data:`DEFAULT_PRICES`).
        timeout_s: seconds to wait for one HTTP answer, > 0.
        max_retries: retries after a request's first attempt, ≥ 0.
        cache_dir: cache root of responses and capability probes; ``None``: the default root.
        reprobe: probe the endpoint's capabilities again.
        refine_for: the precision bisection refines texts to, from the command's scorers
            (:func:`~blackbox_mia.scorers.refine_for`; ``()``: every value to ε); neither a
            flag nor a query key (``--precision`` chooses it).
        check_first: ``GET /models`` before the tokenizer loads (the command line).

    Raises:
        BlackboxMIAError: a number out of its range.
    """

    tokenizer: str | None = setting(
        None, help="tiktoken encoding, HF tokenizer dir, or a .gguf file (default: tiktoken's for the model)",
        panel=TARGET)
    endpoint: str = setting(help="completions or chat", panel=TARGET, source=(ApiConfig, "endpoint"))
    chat_template: str | None = setting(help="with --endpoint chat: 'continuation' or a template file", panel=TARGET,
                                        source=(ApiConfig, "chat_template"))
    allow_chat_conditional: bool = setting(
        False, help="with --endpoint chat: accept log-probs that are conditional on the server's chat template (not "
        "the text's own log-probs)", panel=TARGET)
    api_key: str | None = setting(None, help="API key (never stored or printed)", panel=TARGET, envvar=API_KEY_ENV,
                                  query=False, repr=False)
    strategy: str = setting(help="auto, prompt, run, topn, forced, postbias or bisect", panel=TRACKER,
                            source=(TrackerConfig, "strategy"))
    epsilon: float = setting(help="bisection precision (nats)", panel=TRACKER, source=(TrackerConfig, "epsilon"))
    context: int | None = setting(
        flag="--context-tokens", help="model context in tokens: longer texts go in sliding windows like --local",
        panel=TRACKER, source=(TrackerConfig, "context"))
    top_n: int = setting(help="most top log-probs a request asks for", option=False,
                         source=(TrackerConfig, "max_top_n"))
    concurrency: int = setting(help="requests in flight", panel=TRACKER, source=(ApiConfig, "concurrency"))
    rpm: float | None = setting(help="requests-per-minute limit", panel=TRACKER, source=(ApiConfig, "rpm"))
    tpm: float | None = setting(help="tokens-per-minute limit", panel=TRACKER, source=(ApiConfig, "tpm"))
    max_cost: float | None = setting(
        help="stop cleanly before the request that would take the spend past this many USD", panel=TRACKER,
        source=(ApiConfig, "max_cost"))
    max_requests: int | None = setting(
        help="stop cleanly before the request that would take the requests sent (retries included) past this "
        "many: the cap for a model without a price", panel=TRACKER, source=(ApiConfig, "max_requests"))
    price: tuple[float, float] | None = setting(
        None, help="USD per 1M prompt tokens, USD per 1M completion tokens", option=False, at_least=0)
    timeout_s: float = setting(help="seconds to wait for one HTTP answer", option=False, source=(ApiConfig, "timeout_s"))
    max_retries: int = setting(help="retries after a request's first attempt", option=False,
                               source=(ApiConfig, "max_retries"))
    cache_dir: Path | None = setting(None, help="cache root (default ./cache)", envvar=CACHE_ENV)
    reprobe: bool = setting(False, help="probe the endpoint's capabilities again", panel=TRACKER)
    refine_for: tuple[float, ...] = setting(help="the precision bisection refines to", option=False, query=False,
                                            source=(TrackerConfig, "refine_for"))
    check_first: bool = field(default=False, metadata={**NOT_AN_OPTION, **NOT_A_QUERY_KEY})


@register_backend("api", ApiOptions, "api:MODEL@URL", ApiTarget.parse)
def build_api(target: ApiTarget, options: ApiOptions) -> Backend:
    """The model ``target.model`` behind the OpenAI-compatible endpoint ``target.base_url``,
    through the tracker; no request is sent, unless ``options.check_first``
    (the command line): then ``GET /models`` checks the server, the key and the model name
    before the tokenizer loads.

    Raises:
        BlackboxMIAError: no tokenizer for the model, a bad
            setting (see :class:`ApiConfig`, :class:`TrackerConfig`); with ``check_first``: a
            refused connection, a refused key, a model the server does not list.
    """
    from .backend import ApiBackend

    api = ApiConfig(
        base_url=target.base_url,
        model=target.model,
        **configured(ApiConfig, options),
        **({"prices": {**DEFAULT_PRICES, target.model: options.price}} if options.price else {}),
        **({"api_key": options.api_key} if options.api_key else {}),
    )
    tracker = TrackerConfig(**configured(TrackerConfig, options))
    return ApiBackend(api, options.tokenizer, tracker, options.cache_dir, options.reprobe,
                      allow_chat_conditional=options.allow_chat_conditional, check_first=options.check_first)
