"""The OpenAI-compatible validation server (``bbmia serve``): a local model behind
``/v1/completions`` and ``/v1/chat/completions``, emulating real servers' behaviours, so every
log-prob the black-box client recovers can be checked against the white-box value.

Modules: :mod:`.config` (:class:`ServerConfig`), :mod:`.templates` (chat templates: ``{content}``
texts, or real Jinja templates rendered like a chat model's server), :mod:`.vllm` (vLLM's
``prompt_logprobs`` and echo shapes), :mod:`.errors` (:class:`HttpError`,
the error JSON the server answers with), :mod:`.params` (request-body validation),
:mod:`.sampling` (token choice and reported log-probs), :mod:`.batcher` (micro-batched forward
passes), :mod:`.names` (token names), :mod:`.render` (response bodies), :mod:`.server`
(:class:`ValidationServer`: routes and lifecycle), :mod:`.background` (run in a thread). The
fault-injecting reverse proxy is a test tool: ``tests/tools/fault_proxy.py``. OpenAI's own limits live in
:mod:`blackbox_mia.backends.api.http.wire`, shared with the client.
"""

from .background import run_in_background, serve_in_background
from .config import LOGPROBS_MODES, ServerConfig, is_loopback
from .errors import HttpError
from .server import ValidationServer
from .templates import (
    CHATML_TEMPLATE,
    CONTENT_FIELD,
    DEFAULT_CHAT_TEMPLATE,
    MODEL_TEMPLATE,
    load_chat_template,
)

__all__ = [
    "CHATML_TEMPLATE",
    "CONTENT_FIELD",
    "DEFAULT_CHAT_TEMPLATE",
    "LOGPROBS_MODES",
    "MODEL_TEMPLATE",
    "HttpError",
    "ServerConfig",
    "ValidationServer",
    "is_loopback",
    "load_chat_template",
    "run_in_background",
    "serve_in_background",
]
