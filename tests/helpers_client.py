"""A small OpenAI-shaped server (FakeApi) and client settings for the ApiClient tests
(tests/unit/test_client*.py; the ``fake``, ``make_client`` and ``client`` fixtures are in conftest)."""

from __future__ import annotations

import asyncio
import json
import re
import time

from aiohttp import web

from blackbox_mia.backends.api.http.client import ApiConfig

KEY = "sk-test-SECRET-123"
MODEL = "fake-model"


class FakeApi:
    """OpenAI-shaped answers for /v1/completions and /v1/chat/completions, with fault injection.

    ``faults`` are served first, one per request: dicts with ``status``, optional ``headers``,
    and ``json`` or ``text``. Counts requests, keeps the bodies and the most requests in flight.
    """

    def __init__(self):
        self.base_url = ""
        self.faults: list[dict] = []
        self.delay_s = 0.0
        self.hits = 0
        self.bodies: list[dict] = []
        self.times: list[float] = []
        self.in_flight = 0
        self.max_in_flight = 0

    async def handle(self, request: web.Request) -> web.Response:
        self.hits += 1
        self.times.append(time.monotonic())
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            body = await request.json()
            self.bodies.append(body)
            auth = request.headers.get("Authorization", "")
            if auth != f"Bearer {KEY}":  # echo the key the way OpenAI's message does
                error = {"message": f"Incorrect API key provided: {auth[7:]}", "code": "invalid_api_key"}
                return web.json_response({"error": error}, status=401)
            if body.get("model") != MODEL:
                error = {"message": f"The model `{body.get('model')}` does not exist", "code": "model_not_found"}
                return web.json_response({"error": error}, status=404)
            if self.faults:
                fault = self.faults.pop(0)
                # "{auth}" in a fault's body echoes the Authorization header, as some servers do
                text = json.dumps(fault["json"]) if "json" in fault else fault["text"]
                return web.Response(text=text.replace("{auth}", auth), status=fault["status"],
                                    headers=fault.get("headers"),
                                    content_type="application/json" if "json" in fault else "text/plain")
            if request.path.endswith("/chat/completions"):
                return web.json_response(chat_answer(body))
            return web.json_response(completion_answer(body))
        finally:
            self.in_flight -= 1


GENERATED = [(" A", -0.5), (" B", -1.0), (" C", -2.0)]  # canned generated tokens and log-probs


def completion_answer(body: dict) -> dict:
    prompt = body["prompt"]
    if isinstance(prompt, list):
        prompt_tokens, prompt_text = [f"<{i}>" for i in prompt], "".join(f"<{i}>" for i in prompt)
    else:
        words = prompt.split(" ")
        prompt_tokens, prompt_text = [words[0]] + [" " + w for w in words[1:]], prompt
    steps = GENERATED[: body.get("max_tokens", 16)]
    echo = bool(body.get("echo"))
    text = (prompt_text if echo else "") + "".join(t for t, _ in steps)
    logprobs = None
    if body.get("logprobs") is not None:
        n = body["logprobs"]
        rows = []
        if echo:
            rows.append((prompt_tokens[0], None, None))
            rows += [(t, -1.0 * i, {t: -1.0 * i, " x": -9.0}) for i, t in enumerate(prompt_tokens[1:], 1)]
        # top listed in ascending order on purpose: the client sorts by log-prob
        rows += [(t, lp, dict(reversed([(" A", -0.5), (" B", -1.5), (" C", -2.5)][:n]))) for t, lp in steps]
        offsets, at = [], 0
        for t, _, _ in rows:
            offsets.append(at)
            at += len(t)
        logprobs = {"tokens": [r[0] for r in rows], "token_logprobs": [r[1] for r in rows],
                    "top_logprobs": [r[2] for r in rows], "text_offset": offsets}
    return {
        "id": "cmpl-1", "object": "text_completion", "model": MODEL,
        "choices": [{"index": 0, "text": text, "logprobs": logprobs, "finish_reason": "length"}],
        "usage": {"prompt_tokens": len(prompt_tokens), "completion_tokens": len(steps),
                  "total_tokens": len(prompt_tokens) + len(steps)},
    }


def chat_answer(body: dict) -> dict:
    steps = GENERATED[: body.get("max_tokens", 16)]
    logprobs = None
    if body.get("logprobs"):
        top = [(" A", -0.25), (" B", -1.75), ("é", -3.0)][: body.get("top_logprobs", 0)]
        item = lambda t, lp: {"token": t, "logprob": lp, "bytes": list(t.encode())}
        logprobs = {"content": [{**item(t, lp), "top_logprobs": [item(*x) for x in top]} for t, lp in steps]}
    return {
        "id": "chatcmpl-1", "object": "chat.completion", "model": MODEL,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "".join(t for t, _ in steps)},
                     "logprobs": logprobs, "finish_reason": "length"}],
        "usage": {"prompt_tokens": 4, "completion_tokens": len(steps), "total_tokens": 4 + len(steps)},
    }


def config(base_url: str, **overrides) -> ApiConfig:
    settings = dict(base_url=base_url, model=MODEL, api_key=KEY, backoff_base_s=0.01, backoff_max_s=0.05,
                    max_retries=3, timeout_s=5.0)
    return ApiConfig(**{**settings, **overrides})


def retry_waits(log_text: str) -> list[float]:
    """The waits (seconds) the client asked for before each retry, read from its log lines
    ("retry K of N in X s"): what a test checks instead of timing the retries."""
    return [float(wait) for wait in re.findall(r"; retry \d+ of \d+ in ([\d.]+) s", log_text)]
