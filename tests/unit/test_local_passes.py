"""The shape of the local backend's forward passes (issue: scoring on a GPU at the forward pass's own
speed), checked on CPU: the few row widths of a call (hand values), at most two shapes per width,
no KV cache, and the output embedding padded to aligned rows with the values of the model's own
head."""

import numpy as np
import pytest
import torch

from blackbox_mia.backends.local import LocalBackend, LocalConfig, packing
from blackbox_mia.backends.local.head import HEAD_ROW_MULTIPLE, PaddedHead, head_row_multiple, scoring_head
from blackbox_mia.backends.local.packing import pack_rows, pass_widths
from blackbox_mia.backends.local.resources import ForwardBudget, ModelShape

from ..conftest import gsm8k_questions


def test_pass_widths_hand_values(monkeypatch):
    # lengths 2, 3, 9, 10 in two groups: {2}{3,9,10} pads to 2 + 3·10 = 32 tokens, {2,3}{9,10} to
    # 2·3 + 2·10 = 26, {2,3,9}{10} to 3·9 + 10 = 37: widths 3 and 10, 2 padded tokens of 26 (7.7%)
    monkeypatch.setattr(packing, "MAX_WIDTHS", 2)
    assert pass_widths([10, 2, 9, 3]) == [3, 10]
    # a 5% bound on padding takes a third width: {2}{3}{9,10} pads 1 token of 25 (4%)
    monkeypatch.setattr(packing, "MAX_PADDING_SHARE", 0.05)
    assert pass_widths([10, 2, 9, 3]) == [2, 3, 10]
    monkeypatch.setattr(packing, "MAX_WIDTHS", 8)
    assert pass_widths([10, 2, 9, 3, 3]) == [2, 3, 9, 10]  # fewer lengths than widths: no padding
    assert pass_widths([7, 7, 7]) == [7] and pass_widths([]) == []


def test_pack_rows_at_most_two_shapes_per_width():
    rng = np.random.default_rng(0)
    lengths = [int(n) for n in rng.integers(5, 300, size=500)]
    shape = ModelShape(hidden=64, intermediate=256, heads=2, vocab=300, dtype_bytes=4)
    budget = ForwardBudget(budget_bytes=2**40, max_tokens=4096, shape=shape)  # the token cap binds
    order = sorted(range(len(lengths)), key=lambda r: -lengths[r])
    passes = list(pack_rows(order, lengths, budget))
    widths = pass_widths(lengths)
    assert len(widths) == packing.MAX_WIDTHS
    assert sorted(r for rows, _ in passes for r in rows) == list(range(len(lengths)))  # every row once
    assert [w for _, w in passes] == sorted((w for _, w in passes), reverse=True)  # widest first
    for rows, width in passes:
        assert all(width == min(w for w in widths if w >= lengths[r]) for r in rows)
        assert len(rows) <= budget.rows_per_pass(width) == 4096 // width
    for width in widths:  # full passes, then at most one smaller
        sizes = [len(rows) for rows, w in passes if w == width]
        assert all(n == budget.rows_per_pass(width) for n in sizes[:-1])
    assert len({(len(rows), w) for rows, w in passes}) <= 2 * packing.MAX_WIDTHS


def test_head_rows_padded_on_cuda_only():
    assert head_row_multiple(torch.device("cuda")) == HEAD_ROW_MULTIPLE == 64
    assert head_row_multiple(torch.device("cpu")) == 1
    aligned = torch.nn.Linear(8, 128, bias=False)
    assert scoring_head(torch, aligned, 64) is aligned  # no copy when the rows are aligned already
    odd = torch.nn.Linear(8, 50, bias=True)
    padded = scoring_head(torch, odd, 64)
    assert isinstance(padded, PaddedHead) and padded.weight.shape == (64, 8) and padded.bias.shape == (64,)
    hidden = torch.randn(5, 8)
    with torch.inference_mode():
        np.testing.assert_allclose(padded(hidden), odd(hidden), atol=1e-6)
    assert padded(hidden).shape == (5, 50)


def test_padded_head_gives_the_model_head_s_values(tiny_model_dir):
    """The tiny GPT-2 (vocabulary 300) scored through its output embedding padded to 320 rows:
    log-probs, μ and σ within 1e-6 nats of its own head's, next-token distributions too."""
    texts = [q[: 20 + 7 * i] for i, q in enumerate(gsm8k_questions(6))]
    backend = LocalBackend(LocalConfig(str(tiny_model_dir), device="cpu", threads=1))
    assert backend._scoring_head is backend._head  # on CPU: the model's own head
    plain = backend.logprobs(texts)
    prefixes = [[0, 5, 9], [0, 7]]
    plain_next = backend.next_token_logprobs(prefixes)
    backend._scoring_head = PaddedHead(torch, backend._head, 64)
    assert backend._scoring_head.weight.shape[0] == 320
    for a, b in zip(backend.logprobs(texts), plain):
        assert np.abs(a.logprobs - b.logprobs).max() <= 1e-6
        assert np.abs(a.mu - b.mu).max() <= 1e-6 and np.abs(a.sigma - b.sigma).max() <= 1e-6
    np.testing.assert_allclose(backend.next_token_logprobs(prefixes), plain_next, atol=1e-6)


@pytest.fixture(scope="module")
def r50k_model_dir(tmp_path_factory):
    """A 2-layer, 64-wide random GPT-2 with the r50k_base (GPT-2) tokenizer, vocabulary 50,257
    and context 1,024: GSM8K texts as long as a real GPT-2 sees them."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from benchmarks.bench_local import build_random_model

    path = build_random_model("gpt2-tiny", tmp_path_factory.mktemp("bench"))
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path)).save_pretrained(path)
    return path


def test_1024_gsm8k_texts_run_in_few_shapes_without_a_kv_cache(r50k_model_dir, monkeypatch):
    """1,024 GSM8K test texts (62-400 tokens): at most 8 widths and 16 (rows, width) shapes
    (before: 26 passes of 26 shapes, a KV cache built in each), no KV cache returned by any
    pass, padding within MAX_PADDING_SHARE; and values equal to the model's own forward of each
    text alone. The shapes are counted with the reduction after the body left out (its 1,024 ×
    50,257-wide log-softmax costs minutes on a loaded CPU and shapes nothing)."""
    from blackbox_mia.backends.local import backend as local_backend
    from blackbox_mia.backends.local.reduce import Reduced
    from blackbox_mia.datasets import load_shipped_or_jsonl

    texts = [item.text for item in load_shipped_or_jsonl("gsm8k:test").items[:1024]]
    backend = LocalBackend(LocalConfig(str(r50k_model_dir), device="cpu", threads=1))
    shapes, caches = [], []

    def hook(module, args, kwargs, output):
        shapes.append(tuple(kwargs["input_ids"].shape))
        caches.append(output.past_key_values)

    handle = backend.model.base_model.register_forward_hook(hook, with_kwargs=True)
    with monkeypatch.context() as patch:
        patch.setattr(local_backend, "reduce_chunks", lambda torch, hidden, *_: Reduced(hidden[:, 0], None, None))
        scored = backend.logprobs(texts, vocab_stats=False)
    handle.remove()
    assert len({w for _, w in shapes}) <= 8 and len(set(shapes)) <= 16
    assert all(c is None for c in caches)
    tokens = sum(len(lp.logprobs) + 1 for lp in scored)  # BOS + the text's tokens, per text
    padded = sum(rows * width for rows, width in shapes)
    assert padded - tokens <= packing.MAX_PADDING_SHARE * padded
    picked = [texts[i] for i in (0, 511, 1023)]
    for text, got in zip(picked, backend.logprobs(picked)):
        ids = torch.tensor([backend.full_ids(backend.encode(text))])
        with torch.inference_mode():
            logp = torch.log_softmax(backend.model(input_ids=ids).logits[0, :-1].float(), -1)
        want = logp.gather(-1, ids[0, 1:].unsqueeze(-1)).squeeze(-1).numpy()
        assert np.abs(got.logprobs - want).max() <= 1e-5
