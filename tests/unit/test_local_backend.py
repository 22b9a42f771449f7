"""LocalBackend against manual log_softmax gathers, one-at-a-time runs and full-context runs (on the
CPU, where the hand references run; tests/integration/test_local_gpu.py checks CUDA)."""

import numpy as np
import pytest
import torch

from blackbox_mia.backends.local import LocalBackend, LocalConfig
from blackbox_mia.text.windows import sliding_windows
from blackbox_mia.types import BlackboxMIAError

from ..conftest import gsm8k_questions


@pytest.fixture(scope="module")
def backend(tiny_model_dir):
    return LocalBackend(LocalConfig(str(tiny_model_dir), device="cpu", max_batch_tokens=512))


def manual(backend, ids):
    """log p(ids[j] | ids[:j]) for j >= 1, plus mu and sigma, from one unpadded forward pass."""
    with torch.no_grad():
        logits = backend.model(torch.tensor([ids])).logits[0, :-1].double()
    logp = torch.log_softmax(logits, -1)
    p = logp.exp()
    mu = (p * logp).sum(-1)
    sigma = ((p * logp**2).sum(-1) - mu**2).sqrt()
    return logp[torch.arange(len(ids) - 1), torch.tensor(ids[1:])].numpy(), mu.numpy(), sigma.numpy()


def test_batched_equals_one_at_a_time_and_manual_gather(backend):
    texts = [q[: 20 + 7 * i] for i, q in enumerate(gsm8k_questions(8))]  # ragged, within the context
    assert all(len(backend.encode(t)) < 63 for t in texts)
    batched = backend.logprobs(texts)
    for text, lp in zip(texts, batched):
        single = backend.logprobs([text])[0]
        np.testing.assert_allclose(lp.logprobs, single.logprobs, atol=1e-5)
        ids = [backend.bos_id] + backend.encode(text)
        want_lp, want_mu, want_sigma = manual(backend, ids)
        np.testing.assert_allclose(lp.logprobs, want_lp, atol=1e-5)
        np.testing.assert_allclose(lp.mu, want_mu, atol=1e-5)
        np.testing.assert_allclose(lp.sigma, want_sigma, atol=1e-5)
        assert lp.token_ids.tolist() == ids[1:]  # BOS context: every text token scored
        assert lp.context_ids == (backend.bos_id,)
        assert "".join(lp.tokens) == text


def test_sliding_windows_cover_every_target_once():
    for length, context in [(5, 8), (8, 8), (9, 8), (40, 8), (41, 9), (100, 64)]:
        scored = []
        for start, end, first in sliding_windows(length, context):
            assert end - start <= context and start < first <= end
            assert first - start >= 1
            scored.extend(range(first, end))
        assert scored == list(range(1, length))
    assert sliding_windows(40, 8)[:3] == [(0, 8, 1), (4, 12, 8), (8, 16, 12)]


def test_sliding_window_equals_full_context_where_both_apply(tiny_model_dir, backend):
    small = LocalBackend(LocalConfig(str(tiny_model_dir), device="cpu", max_length=16, max_batch_tokens=64))
    text = gsm8k_questions(1)[0][:70]
    assert 30 < len(backend.encode(text)) < 63
    full = backend.logprobs([text])[0].logprobs
    windowed = small.logprobs([text])[0].logprobs
    ids = [backend.bos_id] + backend.encode(text)
    # the first window sees the same context as the full pass
    np.testing.assert_allclose(windowed[:15], full[:15], atol=1e-5)
    # every later target equals a manual pass over its own window
    for start, end, first in sliding_windows(len(ids), 16)[1:]:
        want, _, _ = manual(backend, ids[start:end])
        np.testing.assert_allclose(windowed[first - 1 : end - 1], want[first - start - 1 :], atol=1e-5)
    assert not np.allclose(windowed, full, atol=1e-3)  # the window really did cut context


def test_next_token_logprobs_match_sequence(backend):
    ids = [backend.bos_id] + backend.encode("Tom has 3 red apples")
    dist = backend.next_token_logprobs([ids[:3], ids[:5], ids])
    want, _, _ = manual(backend, ids)
    assert dist.shape == (3, backend.vocab_size)
    assert dist[0, ids[3]] == pytest.approx(want[2], abs=1e-5)
    assert dist[1, ids[5]] == pytest.approx(want[4], abs=1e-5)
    np.testing.assert_allclose(np.exp(dist).sum(1), 1.0, atol=1e-4)


def test_no_bos_leaves_first_token_unscored(tiny_model_dir, backend):
    nobos = LocalBackend(LocalConfig(str(tiny_model_dir), device="cpu", bos=False))
    text = "Tom has 3 red apples"
    lp = nobos.logprobs([text])[0]
    ids = backend.encode(text)
    assert lp.context_ids == (ids[0],) and lp.token_ids.tolist() == ids[1:]
    want, _, _ = manual(backend, ids)
    np.testing.assert_allclose(lp.logprobs, want, atol=1e-5)
    assert not lp.provenance.bos


def test_bad_input(tiny_model_dir, backend):
    with pytest.raises(BlackboxMIAError, match="empty"):
        backend.logprobs(["fine", "   "])
    with pytest.raises(BlackboxMIAError, match="cannot load model"):
        LocalBackend(LocalConfig(str(tiny_model_dir.parent), local_files_only=True))  # a directory, no model
    nobos = LocalBackend(LocalConfig(str(tiny_model_dir), device="cpu", bos=False))
    one_token = next(t for t in ["a", "T", "1"] if len(backend.encode(t)) == 1)
    with pytest.raises(BlackboxMIAError, match="single token"):
        nobos.logprobs([one_token])


def test_on_done_reports_each_text_after_its_last_batch(tiny_model_dir):
    small = LocalBackend(LocalConfig(str(tiny_model_dir), device="cpu", max_length=16, max_batch_tokens=48))
    # texts of 3+ windows whose last window is narrower than the context (the shape that
    # packing by window width alone would leave until the very end)
    def wanted(text):
        windows = sliding_windows(len(small.full_ids(small.encode(text))), 16)
        return len(windows) >= 3 and windows[-1][1] - windows[-1][0] < 16

    texts = [q[:80] for q in gsm8k_questions(40) if wanted(q[:80])][:6]
    assert len(texts) == 6
    forwards = []
    real_forward = small._forward

    def counting_forward(rows, width, vocab_stats):
        forwards.append(len(rows))
        return real_forward(rows, width, vocab_stats)

    small._forward = counting_forward
    reported = []
    result = small.logprobs(texts, on_done=lambda i, lp: reported.append((i, len(forwards), lp)))
    assert sorted(i for i, _, _ in reported) == list(range(len(texts)))
    for i, _, lp in reported:
        assert lp is result[i]
    # texts are reported while the rest still run: the first within the first half of the batches
    assert len(forwards) > 6 and reported[0][1] <= 3
    assert len({at for _, at, _ in reported}) >= 4
    windows = [len(sliding_windows(len(small.full_ids(small.encode(t))), 16)) for t in texts]
    assert max(windows) > 1  # some text spans several windows, hence several batches
    # a text is reported only once all its windows ran: never before its window count of rows
    for i, at, _ in reported:
        assert sum(forwards[:at]) >= windows[i]


def test_on_done_error_stops_and_propagates(backend):
    texts = [q[:40] for q in gsm8k_questions(3)]

    def boom(i, lp):
        raise BlackboxMIAError(f"stop at {i}")

    with pytest.raises(BlackboxMIAError, match="stop at"):
        backend.logprobs(texts, on_done=boom)


def test_special_token_strings_are_plain_text(backend):
    text = "Answer: 42<|endoftext|>Question: Tom has 3 apples."
    eos = backend.tokenizer.eos_token_id
    assert eos is not None and backend.tokenizer.convert_ids_to_tokens(eos) == "<|endoftext|>"
    ids = backend.encode(text)
    assert eos not in ids and len(ids) > 10
    lp = backend.logprobs([text])[0]
    assert eos not in lp.token_ids.tolist() and lp.n_tokens == len(ids)
    assert "".join(lp.tokens) == text
    assert np.isfinite(lp.logprobs).all()
    want, _, _ = manual(backend, [backend.bos_id] + ids)
    np.testing.assert_allclose(lp.logprobs, want, atol=1e-5)
    texts = [text, "", "Tom has 3 apples."]  # one tokenizer call for many texts: the same ids
    assert backend.codec.encode_many(texts) == [backend.encode(t) for t in texts] and backend.codec.encode_many([]) == []


@pytest.mark.parametrize("device, message", [("nonsense", "unknown device='nonsense'"), ("cuda:99", "cuda:99")])
def test_bad_device_is_a_clear_error(tiny_model_dir, device, message):
    with pytest.raises(BlackboxMIAError, match=message):
        LocalBackend(LocalConfig(str(tiny_model_dir), device=device))


def test_token_strings_follow_the_codec_convention(backend):
    """Partial UTF-8 tokens are named "bytes:\\x..", as on the API path, never U+FFFD."""
    text = "Zoë paid 5 € for crème brûlée"
    lp = backend.logprobs([text])[0]
    assert lp.tokens == [backend.codec.token_string(i) for i in lp.token_ids]
    partial = [t for t in lp.tokens if t.startswith("bytes:")]
    assert partial and not any("\ufffd" in t for t in lp.tokens)
    raw = b"".join(backend.codec.token_bytes(i) for i in lp.token_ids)
    assert raw.decode("utf-8") == text


def test_pass_in_flight_while_the_last_is_read_same_values(tiny_model_dir):
    """With one pass in flight (CUDA's setting, forced here on CPU) each batch's results are
    read after the next pass was launched: the same values, every text reported once."""
    small = LocalBackend(LocalConfig(str(tiny_model_dir), device="cpu", max_length=16, max_batch_tokens=48))
    texts = [q[: 20 + 9 * i] for i, q in enumerate(gsm8k_questions(8))]
    want = small.logprobs(texts)
    assert small._in_flight == 0  # CPU
    small._in_flight = 1
    forwards = []
    real = small._forward
    small._forward = lambda rows, width, stats: forwards.append(len(rows)) or real(rows, width, stats)
    reported = []
    got = small.logprobs(texts, on_done=lambda i, lp: reported.append((i, len(forwards))))
    assert sorted(i for i, _ in reported) == list(range(len(texts))) and len(forwards) > 3
    assert reported[0][1] == 2  # the first batch is read once the second is launched
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g.logprobs, w.logprobs)
        np.testing.assert_array_equal(g.mu, w.mu)
        np.testing.assert_array_equal(g.sigma, w.sigma)
