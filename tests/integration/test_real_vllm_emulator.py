"""The emulator's vLLM mode (``bbmia serve --vllm``) against a real vLLM on the same model
directory: the same requests get the same statuses, the same answer fields and the same values
(within float32 tolerance). Each difference found here was a fix in the emulator (a full-context
echo refused, logit_bias values beyond ±100 taken, the ``token_ids``/``prompt_token_ids`` and
``token_strs`` fields, ``prompt_logprobs`` returned for echoed log-probs). One difference is
left (a strict xfail below): vLLM names a token in the context of the tokens before it, the
emulator without. Skipped without the vLLM venv, failed when ``BBMIA_REQUIRE_VLLM=1``."""

from __future__ import annotations

import pytest

from blackbox_mia.backends.local import LocalBackend, LocalConfig
from blackbox_mia.emulator import ServerConfig, serve_in_background

from ..realserver.vllm_server import MAX_LOGPROBS
from .test_real_vllm import EXACT, post

FIELDS_ONLY_REAL = {"routed_experts"}  # vLLM 0.32's MoE field (null for other models): not emulated


def requests(context: int, vocab: int) -> list[tuple[str, dict]]:
    """(path, body without model) of the compared requests: valid ones and the refusals an
    auditing client may meet (lengths at the context, caps, out-of-vocabulary ids)."""
    ids = [10 + i % 200 for i in range(context + 1)]
    return [
        ("/completions", {"prompt": ids[:12], "max_tokens": 1, "prompt_logprobs": 0, "temperature": 0}),
        ("/completions", {"prompt": ids[:12], "max_tokens": 1, "prompt_logprobs": 3, "logprobs": 2, "temperature": 0}),
        ("/completions", {"prompt": ids[:12], "max_tokens": 0, "echo": True, "logprobs": 1, "temperature": 0}),
        ("/completions", {"prompt": ids[:12], "max_tokens": 2, "echo": True, "logprobs": 2, "temperature": 0}),
        ("/completions", {"prompt": ids[:5], "max_tokens": 3, "logprobs": 2, "temperature": 0}),
        ("/completions", {"prompt": ids[:8], "max_tokens": 1, "logprobs": 5, "temperature": 0,
                          "logit_bias": {"200": 100}}),
        ("/completions", {"prompt": ids[:8], "max_tokens": 1, "temperature": 0, "logit_bias": {"5": 500}}),
        ("/completions", {"prompt": ids[: context - 1], "max_tokens": 1, "prompt_logprobs": 0, "temperature": 0}),
        ("/completions", {"prompt": ids[:context], "max_tokens": 1, "prompt_logprobs": 0}),
        ("/completions", {"prompt": ids[: context + 1], "max_tokens": 1}),
        ("/completions", {"prompt": ids[:context], "max_tokens": 0, "echo": True, "logprobs": 0}),
        ("/completions", {"prompt": ids[:10], "max_tokens": context + 36}),
        ("/completions", {"prompt": ids[:10], "max_tokens": 1, "logprobs": MAX_LOGPROBS + 1}),
        ("/completions", {"prompt": ids[:10], "max_tokens": 1, "prompt_logprobs": MAX_LOGPROBS + 1}),
        ("/completions", {"prompt": ids[:10], "max_tokens": -1}),
        ("/completions", {"prompt": [vocab + 100], "max_tokens": 1}),
        ("/completions", {"prompt": [], "max_tokens": 1}),
        ("/completions", {"prompt": ids[:10], "max_tokens": 1, "logit_bias": {str(vocab + 100): 5}}),
        ("/completions", {"prompt": ids[:10], "max_tokens": 1, "temperature": -1}),
        ("/completions", {"prompt": ids[:10], "max_tokens": 1, "n": 0}),
        ("/completions", {"prompt": "Crème brûlée", "max_tokens": 1, "prompt_logprobs": 3, "temperature": 0}),
        ("/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1,
                               "logprobs": True, "top_logprobs": MAX_LOGPROBS + 1}),
    ]  # fmt: skip


def values(answer) -> list[float]:
    """Every log-prob of an answer, in order (legacy logprobs, then prompt_logprobs)."""
    out = []
    for choice in answer.get("choices", []):
        legacy = choice.get("logprobs") or {}
        out += [v for v in legacy.get("token_logprobs") or [] if v is not None]
        for top in legacy.get("top_logprobs") or []:
            out += sorted((top or {}).values())
        for row in choice.get("prompt_logprobs") or []:
            out += [row[k]["logprob"] for k in sorted(row or {}, key=int)]
    return out


def test_emulator_vllm_mode_answers_like_real_vllm(vllm_server, vllm_model_dir, tmp_path):
    local = LocalBackend(LocalConfig(str(vllm_model_dir), device="cpu"))
    cases = requests(vllm_server.max_model_len, local.vocab_size)
    real = [post(vllm_server.url + path, {"model": vllm_server.model, **body}) for path, body in cases]
    root = vllm_server.url.removesuffix("/v1")
    real_tokens = post(root + "/tokenize", {"model": vllm_server.model, "prompt": "Crème brûlée"})
    config = ServerConfig(str(vllm_model_dir), vllm=True, max_logprobs_completions=MAX_LOGPROBS,
                          max_logprobs_chat=MAX_LOGPROBS, empty_partial_names=True)  # fmt: skip
    with serve_in_background(config, backend=local) as url:
        emulated = [post(url + path, {"model": str(vllm_model_dir), **body}) for path, body in cases]
        emulated_tokens = post(url.removesuffix("/v1") + "/tokenize", {"model": str(vllm_model_dir), "prompt": "Crème brûlée"})
    differences = []
    for (path, body), (status, answer), (e_status, e_answer) in zip(cases, real, emulated):
        if status != e_status:
            differences.append((path, body, status, e_status, str(answer)[:200], str(e_answer)[:200]))
            continue
        if status != 200:
            continue
        choice, e_choice = answer["choices"][0], e_answer["choices"][0]
        if set(choice) - FIELDS_ONLY_REAL != set(e_choice):
            differences.append((path, body, "fields", sorted(set(choice) ^ set(e_choice))))
        if answer["usage"]["prompt_tokens"] != e_answer["usage"]["prompt_tokens"] or \
                answer["usage"]["completion_tokens"] != e_answer["usage"]["completion_tokens"]:
            differences.append((path, body, "usage", answer["usage"], e_answer["usage"]))
        got, want = values(answer), values(e_answer)
        if len(got) != len(want) or any(abs(a - b) > EXACT for a, b in zip(got, want)):
            differences.append((path, body, "values", got[:6], want[:6]))
        if choice.get("text") != e_choice.get("text"):
            differences.append((path, body, "text", choice.get("text"), e_choice.get("text")))
    assert real_tokens[0] == emulated_tokens[0] == 200
    assert real_tokens[1]["tokens"] == emulated_tokens[1]["tokens"] and set(real_tokens[1]) == set(emulated_tokens[1])
    assert differences == [], "\n".join(map(str, differences))
    assert vllm_server.server_errors() == 0 and vllm_server.alive(), vllm_server.log_tail()


@pytest.mark.parametrize("field", ["logprobs", "prompt_logprobs"])
def test_caps_name_the_limit(field, vllm_server):
    """The refusal of a top-n above ``--max-logprobs`` names the cap (the probe reads it)."""
    status, answer = post(vllm_server.url + "/completions", {
        "model": vllm_server.model, "prompt": [10, 11, 12], "max_tokens": 1, field: MAX_LOGPROBS + 1})
    assert status == 400 and f"max allowed: {MAX_LOGPROBS}" in answer


@pytest.mark.xfail(strict=True, reason="not emulated yet: vLLM names a token decoded after the tokens before "
                   "it (a UTF-8 continuation byte after its lead byte is named by the whole character, e.g. 'è'); "
                   "the emulator names it alone ('' with --empty-partial-names)")
def test_partial_utf8_token_names_depend_on_the_context(vllm_server, vllm_model_dir):
    local = LocalBackend(LocalConfig(str(vllm_model_dir), device="cpu"))
    body = {"prompt": "Crème brûlée", "max_tokens": 1, "logprobs": 3, "echo": True, "temperature": 0}
    status, answer = post(vllm_server.url + "/completions", {"model": vllm_server.model, **body})
    config = ServerConfig(str(vllm_model_dir), vllm=True, max_logprobs_completions=MAX_LOGPROBS, empty_partial_names=True)
    with serve_in_background(config, backend=local) as url:
        e_status, e_answer = post(url + "/completions", {"model": str(vllm_model_dir), **body})
    assert status == e_status == 200
    names = [sorted(top or {}) for top in answer["choices"][0]["logprobs"]["top_logprobs"]]
    assert names == [sorted(top or {}) for top in e_answer["choices"][0]["logprobs"]["top_logprobs"]]
