"""Configuration of the validation server: :class:`ServerConfig`, loopback check."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from ..backends.api.http.wire import MAX_LOGPROBS_COMPLETIONS, MAX_TOP_LOGPROBS_CHAT
from ..backends.api.precision import SIGNIFICANT_BITS
from ..config import MAX_PORT, check_number
from ..option_names import named
from ..types import BlackboxMIAError
from .reporting import Reporting
from .templates import check_chat_template

LOGPROBS_MODES = ("raw", "processed")
MAX_BODY_BYTES = 2**20  # default request-body limit (1 MiB)
MAX_TOKENIZE_CHARS = 2**20  # default /tokenize text limit (characters): what the default body limit can carry


@dataclass(frozen=True)
class ServerConfig:
    """Configuration of :class:`ValidationServer`.

    Attributes:
        model: local model directory or hub name (loaded with :class:`LocalBackend`).
        host: interface to bind; 127.0.0.1 by default (binding elsewhere exposes the model).
        port: TCP port; 0 picks a free one.
        api_key: bearer token every request must carry (401 otherwise); ``None`` = open.
        served_name: model name in ``/v1/models`` and requests; ``None`` = ``model``.
        logprobs_mode: ``"raw"`` (pre-bias, reported log-probs ignore logit_bias) or
            ``"processed"`` (post-bias: log_softmax(logits + bias)).
        echo: accept ``echo`` together with ``logprobs`` (prompt log-probs); False gives 400.
        logprobs: return log-probs at all; False answers ``logprobs: null``.
        max_logprobs_completions: largest ``logprobs`` (top-n) on /v1/completions.
        max_logprobs_chat: largest ``top_logprobs`` on /v1/chat/completions.
        token_id_prompts: accept completions prompts given as token ids; False refuses them
            with ``token_id_refusal_status``.
        token_id_refusal_status: HTTP status (400..599) of that refusal. 4xx answers an
            ``unsupported_parameter`` error; 5xx emulates a server failing deterministically on
            id prompts: a ``server_error`` whose body is the same every time.
        empty_partial_names: name a token whose bytes are not valid UTF-8 on their own (part of
            a multi-byte character) ``""`` in completions ``tokens`` / ``top_logprobs`` keys
            and chat ``token`` fields, as vLLM and OpenAI chat do; chat ``bytes`` stay exact.
            Several such tokens in one completions top list collide on the key ``""``: the
            HIGHEST value is kept (the first written, the list being built best-first), so the
            value read under ``""`` bounds every partial token of that list from above.
            False (default): OpenAI's ``"bytes:\\xNN"`` names.
        zero_max_tokens_unlimited: ``max_tokens: 0`` (both endpoints) means "generate to the end
            of the context" instead of "prompt only" (completions with echo; 400 otherwise).
        chat_template: how chat messages become the prompt (:mod:`.templates`): ``"model"``
            applies the served tokenizer's own chat template (ChatML when it has none), a Jinja
            source applies that template, both as a chat model's server does (roles and
            assistant turn included); a text with ``{content}`` (e.g.
            :data:`~.templates.DEFAULT_CHAT_TEMPLATE`) gets the concatenated contents. Chat
            log-probs are then conditional on the template. ``None``: contents concatenated as is.
        vllm: answer as vLLM's OpenAI-compatible server (:mod:`.vllm`): the ``prompt_logprobs``
            request field (capped by ``max_logprobs_completions``, vLLM's ``max_logprobs``) on
            both endpoints, echo built from the prompt log-probs, ``stop_reason`` and
            ``prompt_logprobs`` in every completions choice, one completion token billed for
            echo with ``max_tokens: 0``, and ``/tokenize`` adding special tokens unless told
            otherwise. False: ``prompt_logprobs`` is ignored, as OpenAI-style servers do.
        text_bos: prepend the tokenizer's BOS token to TEXT prompts (completions strings and
            chat prompts, as vLLM / llama.cpp for Llama-family models); ``usage.prompt_tokens``
            counts it. False: no BOS. Token-id prompts are never changed.
        max_body_bytes: largest request body accepted (bytes); a bigger one gets 413.
        max_tokenize_chars: longest text ``/tokenize`` tokenizes (characters, after a chat
            template); a longer one gets 400 before it is tokenized, whatever ``max_body_bytes``
            lets in (completions and chat refuse what cannot fit the context the same way).
        logprob_precision: round every reported log-prob to ``"bfloat16"``, ``"float16"`` or
            ``"float32"`` (to nearest, as hosted models that return values like −22.125 do);
            ``None``: as computed. Sampling is unaffected.
        nondeterministic: σ (nats) of Gaussian noise added to every logit of every position of
            each request, drawn afresh per request (seeded by ``jitter_seed`` and the request's
            number): the same request gets different log-probs and, near ties, another token, as
            on servers with batch-dependent kernels. Prompt positions (echo, ``prompt_logprobs``)
            get the same noise per listed token. 0: deterministic.
        jitter_seed: seed of that noise (and of ``shape_noise``).
        shape_noise: nats by which every logit of a generated position moves with the request's
            shape: a uniform draw in [−shape_noise, shape_noise] per token, seeded by the
            request's prompt length and the position, so identical requests agree but a context
            read inside a longer run differs from the same context read as a whole prompt (as
            llama.cpp's batch-dependent quantized kernels). 0: none.
        batch_window_ms: how long the first queued next-token request waits for others before
            the forward pass (ms); 0 disables micro-batching (one forward pass per request).
        max_batch: most next-token requests (rows) per forward pass.
        device, dtype, threads: passed to :class:`LocalConfig` when the server loads the model
            itself (``threads``: torch CPU threads, ``None``: the local backend's default).

    Raises:
        BlackboxMIAError: an invalid value (mode, window, top-n caps, refusal status, template
            of no known kind, body limit below 1 byte).
    """

    model: str
    host: str = "127.0.0.1"
    port: int = 0
    api_key: str | None = field(default=None, repr=False)
    served_name: str | None = None
    logprobs_mode: str = "raw"
    echo: bool = True
    logprobs: bool = True
    max_logprobs_completions: int = MAX_LOGPROBS_COMPLETIONS
    max_logprobs_chat: int = MAX_TOP_LOGPROBS_CHAT
    token_id_prompts: bool = True
    token_id_refusal_status: int = 400
    empty_partial_names: bool = False
    zero_max_tokens_unlimited: bool = False
    chat_template: str | None = None
    vllm: bool = False
    text_bos: bool = False
    max_body_bytes: int = MAX_BODY_BYTES
    max_tokenize_chars: int = MAX_TOKENIZE_CHARS
    logprob_precision: str | None = None
    nondeterministic: float = 0.0
    jitter_seed: int = 0
    shape_noise: float = 0.0
    batch_window_ms: float = 2.0
    max_batch: int = 64
    device: str | None = None
    dtype: str = "auto"
    threads: int | None = None

    def __post_init__(self) -> None:
        if self.logprobs_mode not in LOGPROBS_MODES:
            raise BlackboxMIAError(f"logprobs_mode must be raw or processed, got {self.logprobs_mode!r}")
        # named as `bbmia serve` spells them
        check_number(named("port"), self.port, at_least=0, at_most=MAX_PORT)
        check_number(named("batch_window_ms"), self.batch_window_ms, at_least=0)
        check_number(named("max_batch"), self.max_batch, at_least=1)
        check_number(named("max_logprobs_completions"), self.max_logprobs_completions, at_least=0)
        check_number(named("max_logprobs_chat"), self.max_logprobs_chat, at_least=0)
        check_number(named("token_id_refusal_status"), self.token_id_refusal_status, at_least=400, at_most=599)
        check_number(named("max_body_bytes"), self.max_body_bytes, at_least=1)
        check_number(named("max_tokenize_chars"), self.max_tokenize_chars, at_least=1)
        check_number(named("nondeterministic"), self.nondeterministic, at_least=0)
        check_number(named("shape_noise"), self.shape_noise, at_least=0)
        if self.logprob_precision is not None and self.logprob_precision not in SIGNIFICANT_BITS:
            raise BlackboxMIAError(f"{named('logprob_precision')} must be one of {', '.join(SIGNIFICANT_BITS)}, "
                                   f"got {self.logprob_precision!r}")
        check_number(named("threads"), self.threads, at_least=1)
        check_chat_template(self.chat_template)

    @property
    def reporting(self) -> Reporting:
        """What the server does to log-probs before reporting them (:mod:`.reporting`)."""
        return Reporting(self.logprob_precision, self.nondeterministic, self.jitter_seed, self.shape_noise)

    @property
    def name(self) -> str:
        """The model name clients must send."""
        return self.served_name or self.model


def is_loopback(host: str) -> bool:
    """Whether ``host`` only accepts local connections (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
