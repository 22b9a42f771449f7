"""The local backend's resources: chunked reduction of logits, memory-sized batches, threads,
vocabulary statistics on request, and the default budget/threads (hand values)."""

import math

import numpy as np
import pytest
import torch

from blackbox_mia.backends.local import LocalBackend, LocalConfig, resources
from blackbox_mia.backends.local.packing import pass_widths
from blackbox_mia.backends.local.reduce import (
    LOGIT_COPIES,
    chunk_positions,
    reduce_chunks,
)
from blackbox_mia.backends.local.resources import ForwardBudget, ModelShape
from blackbox_mia.types import BlackboxMIAError

from ..conftest import gsm8k_questions


@pytest.fixture(scope="module")
def backend(tiny_model_dir):
    return LocalBackend(LocalConfig(str(tiny_model_dir), max_batch_tokens=512))


@pytest.mark.parametrize("chunk", [1, 3, 7, 100])
def test_reduce_chunks_equals_log_softmax_gather_and_moments(chunk):
    gen = torch.Generator().manual_seed(0)
    hidden = torch.randn(7, 5, generator=gen, dtype=torch.float64)
    weight = torch.randn(11, 5, generator=gen, dtype=torch.float64) * 3
    targets = torch.tensor([0, 3, 10, 2, 2, 7, 5])
    got = reduce_chunks(torch, hidden, targets, lambda h: h @ weight.T, chunk, vocab_stats=True)
    logp = torch.log_softmax(hidden @ weight.T, -1)
    p = logp.exp()
    mu = (p * logp).sum(-1)
    np.testing.assert_allclose(got.lp, logp[torch.arange(7), targets], atol=1e-6)
    np.testing.assert_allclose(got.mu, mu, atol=1e-6)
    np.testing.assert_allclose(got.sigma, ((p * logp**2).sum(-1) - mu**2).sqrt(), atol=1e-5)
    plain = reduce_chunks(torch, hidden, targets, lambda h: h @ weight.T, chunk, vocab_stats=False)
    assert plain.mu is None and plain.sigma is None
    np.testing.assert_allclose(plain.lp, got.lp, atol=0)


def test_reduce_chunks_float32_equals_float64_and_the_logsumexp_form():
    """A GPT-2-sized vocabulary in float32: lp within 1e-5 nats of float64 and of logit[target] −
    logsumexp (the form the reduction used before log_softmax); μ, σ (sums over 50,257 terms of
    about 6 nats) within 1e-4."""
    gen = torch.Generator().manual_seed(1)
    hidden = torch.randn(40, 64, generator=gen)
    weight = torch.randn(50257, 64, generator=gen) * 0.4
    targets = torch.randint(0, 50257, (40,), generator=gen)
    got = reduce_chunks(torch, hidden, targets, lambda h: h @ weight.T, 16, vocab_stats=True)
    logp = torch.log_softmax(hidden.double() @ weight.double().T, -1)
    p = logp.exp()
    mu = (p * logp).sum(-1)
    assert float((got.lp.double() - logp[torch.arange(40), targets]).abs().max()) <= 1e-5
    assert float((got.mu.double() - mu).abs().max()) <= 1e-4
    assert float((got.sigma.double() - (p * (logp - mu.unsqueeze(-1)) ** 2).sum(-1).sqrt()).abs().max()) <= 1e-4
    logits = hidden @ weight.T
    before = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, -1)
    assert float((got.lp - before).abs().max()) <= 1e-5 and 1.0 < float(got.sigma.min())


def test_budget_hand_values():
    shape = ModelShape(hidden=768, intermediate=3072, heads=12, vocab=50257, dtype_bytes=4)
    # 8·768 + 2·3072 + 2·12·100 = 14,688 elements per token at width 100
    assert shape.activation_bytes(100) == 14_688 * 4
    budget = ForwardBudget(budget_bytes=2**28, max_tokens=8192, shape=shape)  # 256 MiB
    # logits: a quarter of the budget over 3 float32 copies of 50,257 columns
    assert budget.chunk == chunk_positions(50257, 2**26) == 2**26 // (LOGIT_COPIES * 4 * 50257) == 111
    # activations: 3/4 of 256 MiB = 201,326,592 bytes; 58,752 bytes per token at width 100
    assert budget.capacity(100) == 201_326_592 // 58_752 == 3426
    assert budget.rows_per_pass(100) == 34  # 3,400 tokens fit, 3,500 do not
    assert ForwardBudget(2**40, 1000, shape).rows_per_pass(100) == 10  # the token cap binds
    assert ForwardBudget(2**40, 1000, shape).rows_per_pass(5000) == 1  # one row always runs
    assert chunk_positions(50257, 10) == 1


def test_gpu_batches_sized_by_free_memory_not_a_token_cap(monkeypatch):
    """On CUDA (fake numbers: 80 GiB free) the budget is half the free memory and no fixed
    token cap applies unless one is given; on CPU the default cap is 8,192."""

    class FakeCuda:
        @staticmethod
        def mem_get_info(device):
            return 80 * 2**30, 141 * 2**30

    class FakeTorch:
        cuda = FakeCuda

    gpu, cpu = torch.device("cuda"), torch.device("cpu")
    budget_bytes = resources.default_budget_bytes(FakeTorch, gpu)
    assert budget_bytes == 40 * 2**30
    assert resources.token_cap(gpu, None) is None and resources.token_cap(cpu, None) == resources.CPU_BATCH_TOKENS == 8192
    assert resources.token_cap(gpu, 4096) == resources.token_cap(cpu, 4096) == 4096  # a given cap holds everywhere
    gpt2_1b = ModelShape(hidden=2048, intermediate=8192, heads=16, vocab=50257, dtype_bytes=2)  # bf16
    budget = ForwardBudget(budget_bytes, resources.token_cap(gpu, None), gpt2_1b)
    # per token at width 1,024: 8·2048 + 2·8192 + 2·16·1024 = 65,536 values · 2 bytes = 128 KiB;
    # activations 3/4 · 40 GiB = 30 GiB: 245,760 padded tokens, 30× the CPU cap
    assert budget.capacity(1024) == 30 * 2**30 // 2**17 == 245_760
    assert budget.rows_per_pass(1024) == 240
    # logits: 10 GiB over 3 float32 copies of 50,257 columns
    assert budget.chunk == 10 * 2**30 // (3 * 4 * 50257) == 17_804
    capped = ForwardBudget(budget_bytes, resources.token_cap(cpu, None), gpt2_1b)
    assert capped.capacity(1024) == 8192


def test_default_threads_leave_the_busy_cores(monkeypatch):
    monkeypatch.setattr(resources.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3, 4, 5, 6, 7}, raising=False)
    for load, want in [(0.2, 4), (5.4, 3), (6.6, 1), (30.0, 1)]:
        monkeypatch.setattr(resources.os, "getloadavg", lambda load=load: (load, 0.0, 0.0))
        assert resources.default_threads() == want


def test_default_budget_from_available_memory(monkeypatch):
    cpu = torch.device("cpu")
    monkeypatch.setattr(resources, "available_ram_bytes", lambda: 2**30)  # 1 GiB available
    assert resources.default_budget_bytes(torch, cpu) == 2**28  # a quarter of it
    monkeypatch.setattr(resources, "available_ram_bytes", lambda: 64 * 2**30)
    assert resources.default_budget_bytes(torch, cpu) == int(resources.CPU_BUDGET_CAP_GIB * 2**30)
    monkeypatch.setattr(resources, "available_ram_bytes", lambda: None)
    assert resources.default_budget_bytes(torch, cpu) == int(resources.CPU_BUDGET_CAP_GIB * 2**30)


@pytest.mark.parametrize("field, value, message", [
    ("threads", 0, "threads= must be an integer >= 1"),
    ("max_memory_gb", -1.0, "max_memory_gb= must be a finite number > 0, got -1.0"),
    ("threads", 2.5, "threads= must be an integer >= 1, got 2.5"),
])
def test_bad_threads_or_memory(tiny_model_dir, field, value, message):
    with pytest.raises(BlackboxMIAError, match=message):
        LocalBackend(LocalConfig(str(tiny_model_dir), **{field: value}))


def test_small_budget_many_passes_same_values(tiny_model_dir, backend):
    texts = [q[: 30 + 5 * i] for i, q in enumerate(gsm8k_questions(10))]
    small = LocalBackend(LocalConfig(str(tiny_model_dir), max_memory_gb=2e-5, threads=1))  # about 21 KB
    assert small.budget.chunk == 1 and small.threads == 1
    assert small._call(_threads_on_backend_thread()) == 1
    passes = []
    real = small._forward
    small._forward = lambda rows, width, stats: passes.append(len(rows)) or real(rows, width, stats)
    got = small.logprobs(texts)
    want = backend.logprobs(texts)
    assert len(passes) > 1 and sum(passes) == len(texts)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.logprobs, w.logprobs, atol=1e-5)
        np.testing.assert_allclose(g.mu, w.mu, atol=1e-5)
        np.testing.assert_allclose(g.sigma, w.sigma, atol=1e-5)


def test_passes_pad_to_the_call_s_widths_and_equal_one_at_a_time(tiny_model_dir, backend):
    """Ragged texts: every row is padded to the smallest of the call's :func:`pass_widths` that
    holds it, and each text's values equal its own one-text pass within 1e-4 nats (float32)."""
    texts = [q[: 15 + 6 * i] for i, q in enumerate(gsm8k_questions(12))]  # within the context
    passes = []
    real = backend._forward
    backend._forward = lambda rows, width, stats: passes.append(([len(r) for r in rows], width)) or real(rows, width, stats)
    try:
        got = backend.logprobs(texts)
    finally:
        del backend._forward
    lengths = sorted((len(backend.encode(t)) + 1 for t in texts), reverse=True)
    assert sorted((n for rows, _ in passes for n in rows), reverse=True) == lengths
    assert any(len(rows) > 1 for rows, _ in passes)
    widths = pass_widths(lengths)
    for rows, width in passes:
        assert width in widths and all(width == min(w for w in widths if w >= n) for n in rows)
    for text, lp in zip(texts, got):
        one = backend.logprobs([text])[0]
        assert np.abs(lp.logprobs - one.logprobs).max() <= 1e-4
        assert np.abs(lp.mu - one.mu).max() <= 1e-4 and np.abs(lp.sigma - one.sigma).max() <= 1e-4


async def _threads_on_backend_thread():
    return torch.get_num_threads()


def test_vocab_stats_only_when_asked(tiny_model_dir, backend):
    texts = [q[:50] for q in gsm8k_questions(3)]
    with_stats = backend.logprobs(texts)  # the default: the backend offers them
    assert all(lp.has_vocab_stats for lp in with_stats)
    without = backend.logprobs(texts, vocab_stats=False)
    assert not any(lp.has_vocab_stats for lp in without)
    for a, b in zip(with_stats, without):
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=0)
    offering_none = LocalBackend(LocalConfig(str(tiny_model_dir), vocab_stats=False))
    assert "full_distribution" not in offering_none.features
    assert not offering_none.logprobs(texts)[0].has_vocab_stats
    with pytest.raises(BlackboxMIAError, match="does not offer 'full_distribution'"):
        offering_none.logprobs(texts, vocab_stats=True)


def test_model_logits_path_equals_hidden_state_path(tiny_model_dir, backend):
    """A model whose logits are not head(last hidden state) is reduced from its own logits."""
    assert backend._split  # GPT-2: logits = lm_head(hidden)
    other = LocalBackend(LocalConfig(str(tiny_model_dir), max_batch_tokens=512))
    other._split = False
    texts = [q[:40] for q in gsm8k_questions(4)]
    for a, b in zip(other.logprobs(texts), backend.logprobs(texts)):
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-5)
        np.testing.assert_allclose(a.sigma, b.sigma, atol=1e-5)
    np.testing.assert_allclose(
        other.next_token_logprobs([[0, 5, 9]]), backend.next_token_logprobs([[0, 5, 9]]), atol=1e-5
    )


def test_describe_leaves_out_speed_settings(tiny_model_dir):
    described = LocalBackend(LocalConfig(str(tiny_model_dir), device="cpu", threads=1, max_memory_gb=0.5)).describe()
    assert "threads" not in described and "max_memory_gb" not in described
    assert described["max_batch_tokens"] == 8192 and math.isfinite(described["context_tokens"])
