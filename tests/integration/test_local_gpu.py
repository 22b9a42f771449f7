"""The local backend on a CUDA GPU: bfloat16 by default, checked against float32 (on GPU and on
CPU), and a default memory budget from the free device memory. Skipped without a GPU."""

import numpy as np
import pytest
import torch

from blackbox_mia.backends.local import LocalBackend, LocalConfig
from blackbox_mia.backends.local.head import PaddedHead

from ..conftest import gsm8k_questions

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def test_bfloat16_close_to_float32_and_float32_equal_to_cpu(tiny_model_dir):
    texts = [q[: 30 + 6 * i] for i, q in enumerate(gsm8k_questions(8))]
    cpu = LocalBackend(LocalConfig(str(tiny_model_dir), device="cpu")).logprobs(texts)
    fp32 = LocalBackend(LocalConfig(str(tiny_model_dir), device="cuda", dtype="float32")).logprobs(texts)
    half = LocalBackend(LocalConfig(str(tiny_model_dir), device="cuda"))
    assert half.dtype == torch.bfloat16
    # the output embedding (vocabulary 300) runs padded to 320 rows on CUDA; on CPU it is the model's own
    assert isinstance(half._scoring_head, PaddedHead) and half._scoring_head.weight.shape[0] == 320
    bf16 = half.logprobs(texts)
    for c, f, b in zip(cpu, fp32, bf16):
        np.testing.assert_allclose(f.logprobs, c.logprobs, atol=1e-4)
        np.testing.assert_allclose(f.sigma, c.sigma, atol=1e-4)
        assert np.abs(b.logprobs - f.logprobs).mean() < 0.05  # nats per token
        assert b.logprobs.dtype == np.float64 and np.isfinite(b.sigma).all()


def test_default_budget_is_half_the_free_gpu_memory(tiny_model_dir):
    backend = LocalBackend(LocalConfig(str(tiny_model_dir), device="cuda"))
    free, _ = torch.cuda.mem_get_info(backend.device)
    assert 0 < backend.budget.budget_bytes <= free
