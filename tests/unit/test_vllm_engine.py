"""The vLLM engine's wiring, against a fake ``vllm`` module that answers ``prompt_logprobs`` from
the tiny torch model (vLLM itself needs a GPU): prompts, sampling parameters, windows, values."""

import sys
import types
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest
import torch

from blackbox_mia.backends import LocalOptions, build_backend
from blackbox_mia.backends.local import LocalBackend, LocalConfig
from blackbox_mia.backends.vllm_engine import VllmBackend, VllmConfig
from blackbox_mia.types import BlackboxMIAError

from ..conftest import gsm8k_questions


@dataclass
class Logprob:
    logprob: float
    rank: int | None = None


class SamplingParams:
    def __init__(self, **kwargs):
        self.kwargs = kwargs


class FakeLLM:
    """vLLM's offline ``LLM``: ``generate`` answers prompt log-probs of token-id prompts."""

    calls: ClassVar[list] = []

    def __init__(self, model, dtype, max_model_len, gpu_memory_utilization):
        from transformers import AutoModelForCausalLM

        self.init = {"model": model, "dtype": dtype, "max_model_len": max_model_len,
                     "gpu_memory_utilization": gpu_memory_utilization}
        self.model = AutoModelForCausalLM.from_pretrained(model).eval()

    def generate(self, prompts, params, use_tqdm=True):
        """Like vLLM's: ``params`` one for all prompts or one per prompt; a prompt must leave
        room for the generated token (vLLM raises otherwise); ``allowed_token_ids`` forces the
        generated token, whose ``logprobs`` entry holds its raw (unmasked) log-prob."""
        FakeLLM.calls.append((prompts, params))
        outputs = []
        for prompt, param in zip(prompts, params if isinstance(params, list) else [params] * len(prompts)):
            ids = prompt["prompt_token_ids"]
            if len(ids) + 1 > self.init["max_model_len"]:
                raise ValueError(f"The decoder prompt (length {len(ids)}) plus the number of requested output "
                                 f"tokens (at least 1) is longer than the maximum model length")
            with torch.no_grad():
                logp = torch.log_softmax(self.model(torch.tensor([ids])).logits[0].double(), -1)
            entries = [None] + [{ids[j]: Logprob(float(logp[j - 1, ids[j]]))} for j in range(1, len(ids))]
            allowed = param.kwargs.get("allowed_token_ids")
            token = allowed[0] if allowed else int(logp[-1].argmax())
            step = {token: Logprob(float(logp[-1, token]))} if param.kwargs.get("logprobs") is not None else None
            generated = types.SimpleNamespace(token_ids=[token], logprobs=[step] if step else None)
            outputs.append(types.SimpleNamespace(prompt_logprobs=entries, outputs=[generated]))
        return outputs


@pytest.fixture
def fake_vllm(monkeypatch):
    module = types.ModuleType("vllm")
    module.LLM, module.SamplingParams, module.__version__ = FakeLLM, SamplingParams, "0.0-fake"
    monkeypatch.setitem(sys.modules, "vllm", module)
    FakeLLM.calls = []
    return module


def test_values_equal_the_torch_backend_one_prompt_per_text(fake_vllm, tiny_model_dir):
    texts = [q[:60] for q in gsm8k_questions(4)]
    backend = build_backend(f"local:{tiny_model_dir}?engine=vllm")
    assert isinstance(backend, VllmBackend) and backend.features == {"logprobs"}
    got = backend.logprobs(texts)
    want = LocalBackend(LocalConfig(str(tiny_model_dir))).logprobs(texts)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.logprobs, w.logprobs, atol=1e-5)
        assert g.token_ids.tolist() == w.token_ids.tolist() and g.context_ids == w.context_ids
    ((prompts, params),) = FakeLLM.calls  # one generate call for every text
    assert [p.kwargs for p in params] == [{"max_tokens": 1, "prompt_logprobs": 0, "temperature": 0.0}] * len(texts)
    assert [p["prompt_token_ids"] for p in prompts] == [[backend.bos_id] + backend.codec.encode(t) for t in texts]
    assert backend.llm.init["max_model_len"] == 64 and backend.describe()["engine"] == "vllm"


def test_long_texts_are_windowed_like_the_torch_backend(fake_vllm, tiny_model_dir):
    text = gsm8k_questions(1)[0][:120]
    vllm_backend = VllmBackend(VllmConfig(str(tiny_model_dir), max_length=16))
    torch_backend = LocalBackend(LocalConfig(str(tiny_model_dir), max_length=16))
    got, want = vllm_backend.logprobs([text])[0], torch_backend.logprobs([text])[0]
    assert got.n_tokens > 40  # several windows
    np.testing.assert_allclose(got.logprobs, want.logprobs, atol=1e-5)
    ((prompts, params),) = FakeLLM.calls
    # a full window goes without its last token, generated (forced) instead: vLLM needs the room
    assert len(prompts) > 3 and all(len(p["prompt_token_ids"]) <= 15 for p in prompts)
    assert sum(bool(p.kwargs.get("allowed_token_ids")) for p in params) >= 3


def test_without_vllm_a_clear_error(monkeypatch, tiny_model_dir):
    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm raises ImportError
    with pytest.raises(BlackboxMIAError, match=r"needs vLLM.*pip install 'blackbox_mia\[vllm\]'"):
        build_backend(f"local:{tiny_model_dir}", LocalOptions(engine="vllm"))


def test_unknown_engine_and_missing_path(tiny_model_dir):
    with pytest.raises(BlackboxMIAError, match="unknown engine='onnx'"):
        build_backend(f"local:{tiny_model_dir}", LocalOptions(engine="onnx"))
    with pytest.raises(BlackboxMIAError, match="local model path '/nonexistent' does not exist"):
        build_backend("local:/nonexistent")
