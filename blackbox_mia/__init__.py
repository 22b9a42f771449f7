"""blackbox_mia: membership inference and benchmark-contamination audits for LLMs.

Black-box through any OpenAI-compatible endpoint (top-n log-probs + logit_bias), white-box
through local Hugging Face models. Convention everywhere: higher score = more likely a member.

In a script or a notebook (the sync calls work inside Jupyter's running event loop too)::

    from blackbox_mia import ascore_texts, build_backend, parse_scorers, score_texts

    target = build_backend("local:gpt2")          # or "api:MODEL@http://127.0.0.1:8000/v1"
    results = score_texts(["Tom has 3 apples."], parse_scorers("loss,min_k"), {"target": target})
    scores, logprobs = results[0]                 # {"loss": Bounded, "min_k": ...}, TokenLogprobs
    scores["loss"].value, scores["loss"].lower, scores["loss"].upper   # nats/token, with its interval

    results = await ascore_texts(["Tom has 3 apples."], "loss,min_k", {"target": "local:gpt2"})  # async form
    lps = await target.alogprobs(["Tom has 3 apples."])
    gens = target.generate(["Tom has"], max_new_tokens=16)       # greedy continuations

The names below are imported on first use, so ``import blackbox_mia`` stays light (no torch,
no HTTP client).
"""

from __future__ import annotations

from .lazy import lazy_exports

__version__ = "0.1.0"

_EXPORTS = {
    "Backend": "blackbox_mia.backends.base",
    "LocalOptions": "blackbox_mia.backends.registry",
    "ApiOptions": "blackbox_mia.backends.registry",
    "options_from_query": "blackbox_mia.backends.registry",
    "build_backend": "blackbox_mia.backends.registry",
    "LocalBackend": "blackbox_mia.backends.local",
    "LocalConfig": "blackbox_mia.backends.local",
    "ApiBackend": "blackbox_mia.backends.api",
    "ApiConfig": "blackbox_mia.backends.api.http.client",
    "TrackerConfig": "blackbox_mia.backends.api.tracker.config",
    "score_texts": "blackbox_mia.runner",
    "ascore_texts": "blackbox_mia.runner",
    "score_items": "blackbox_mia.runner",
    "parse_scorers": "blackbox_mia.scorers",
    "load_any_dataset": "blackbox_mia.canary.dataset",
    "Fields": "blackbox_mia.datasets.fields",
    "BlackboxMIAError": "blackbox_mia.types",
    "SpendRefused": "blackbox_mia.types",
    "NoLogprobs": "blackbox_mia.types",
    "Generation": "blackbox_mia.types",
    "Provenance": "blackbox_mia.types",
    "TokenLogprobs": "blackbox_mia.types",
    "ApiError": "blackbox_mia.backends.api.http.errors",
    "APIConnectionError": "blackbox_mia.backends.api.http.errors",
    "APITimeoutError": "blackbox_mia.backends.api.http.errors",
    "APIStatusError": "blackbox_mia.backends.api.http.errors",
    "BadRequestError": "blackbox_mia.backends.api.http.errors",
    "AuthenticationError": "blackbox_mia.backends.api.http.errors",
    "PermissionDeniedError": "blackbox_mia.backends.api.http.errors",
    "NotFoundError": "blackbox_mia.backends.api.http.errors",
    "ConflictError": "blackbox_mia.backends.api.http.errors",
    "UnprocessableEntityError": "blackbox_mia.backends.api.http.errors",
    "RateLimitError": "blackbox_mia.backends.api.http.errors",
    "InternalServerError": "blackbox_mia.backends.api.http.errors",
    "InvalidAnswerError": "blackbox_mia.backends.api.http.errors",
    "NotAnApiError": "blackbox_mia.backends.api.http.errors",
}

__all__ = ["__version__"] + list(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
