"""A real pretrained model end to end: SmolLM2-135M-Instruct (Q4_1 GGUF, `bbmia models path
smollm2`) served by the real llama.cpp (llama-cpp-python 0.3.36), its tokenizer read from the
GGUF itself, checked against llama.cpp's own full-sequence evaluation of the same GGUF
(`Llama(..., logits_all=True).eval(ids)`, tests/realserver/llama_reference.py).

llama.cpp's quantized kernels give one context other log-probs when its tokens are batched
otherwise (measured here: up to 0.42 nats on a GSM8K text between one batch and one token at a
time); the probe measures that shape variation and widens every bound by it. Each strategy
(auto, forced, run reading, bisect), the chat endpoint with the model's own ChatML template,
windows of a text longer than the served context, ASCII / accented / Japanese / curly-quote
texts and 20 GSM8K texts (auto, forced and bisect on all of them): 0 values outside their
bounds, an exact value's bounds no wider than twice the measured variation, a bisected one's no
wider than that plus the bisection's ε. The local backend on the dequantized weights is another
computation (llama.cpp quantizes activations too): its mean log-prob per text is within
:data:`LOCAL_GAP` of llama.cpp's.

Skipped with the reason when llama.cpp or the GGUF is missing; under `BBMIA_REQUIRE_LLAMA=1`
(`.ci/run`, which installs both) they fail instead. Kept small: short texts, one server and one
probe per strategy set."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from blackbox_mia.backends.api import ApiBackend
from blackbox_mia.backends.api.http.client import ApiConfig
from blackbox_mia.backends.api.tracker.flips import BIAS_ROUNDING_SLACK
from blackbox_mia.backends.api.tracker.tracker import TrackerConfig
from blackbox_mia.datasets import load_shipped_or_jsonl
from blackbox_mia.tokenizers import load_codec
from blackbox_mia.text.windows import sliding_windows

from ..realserver.fixtures import SMOLLM2_CTX

EPSILON = 0.01  # nats, bisection
LOCAL_GAP = 0.1  # nats/token: mean log-prob, local backend on dequantized weights vs llama.cpp
TEXTS = {
    "ascii": "Natalia sold clips to 48 of her friends in April.",
    "accented": "Crème brûlée at the café costs ½ price, naïve señor.",
    "japanese": load_shipped_or_jsonl("ja-debian-docs").items[0].text[:12],
    "curly": "He said “wait…” — then left; ‘why?’ she asked.",
}
GSM8K = [item.text[:40] for item in load_shipped_or_jsonl("gsm8k").items[:20]]  # about 11 tokens each
LONG = load_shipped_or_jsonl("gsm8k").items[23].text  # 91 tokens: two windows of SMOLLM2_CTX
FLOAT32 = 2.0**-20  # relative: the server computes and reports float32 log-probs, the reference float64
BRACKETED = ("bisect", "bisect~")  # bisection's brackets (bisect~: widened by a flip that did not reproduce)


@pytest.fixture(scope="module")
def codec(smollm2_gguf):
    return load_codec(str(smollm2_gguf), "smollm2")


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    """One cache for the module: the probe runs once per endpoint, and every answer is paid once."""
    return tmp_path_factory.mktemp("smollm2-cache")


def backend_for(server, gguf, cache_dir, strategy="auto", endpoint="completions"):
    config = ApiConfig(base_url=server.url, model=server.model, max_retries=1, backoff_base_s=0.01, endpoint=endpoint)
    tracker = TrackerConfig(strategy=strategy, epsilon=EPSILON, context=SMOLLM2_CTX)
    return ApiBackend(config, tokenizer=str(gguf), tracker=tracker, cache_dir=cache_dir,
                      allow_chat_conditional=endpoint == "chat")


def windowed_reference(reference, seqs: list[list[int]]) -> list[np.ndarray]:
    """llama.cpp's values of each sequence's tokens 1.. as the tracker reads them: each window
    of :func:`sliding_windows` evaluated in one batch, its targets from its own context."""
    spans = [(k, start, end, first) for k, seq in enumerate(seqs)
             for start, end, first in sliding_windows(len(seq), SMOLLM2_CTX)]
    answer = reference({"sequences": [seqs[k][start:end] for k, start, end, _ in spans]})["sequences"]
    values = [np.zeros(len(seq) - 1) for seq in seqs]
    for (k, start, end, first), window in zip(spans, answer):
        values[k][first - 1:end - 1] = window[first - start - 1:]
    return values


def assert_within_bounds(black, truth, shape: float, epsilon: float) -> tuple[int, Counter]:
    """Every value within its bounds of llama.cpp's (to float32's precision); an exact value's
    width at most twice the shape variation, a bisected one's at most that plus ε (``bisect~``, a
    bracket widened by a flip that did not reproduce, and a value known only by an upper bound,
    lower = -inf, make no claim on their width). Returns the exact values and how many values
    each read strategy gave."""
    exact, counts = 0, Counter()
    for lp, want in zip(black, truth):
        slack = FLOAT32 * (1.0 + np.abs(want))
        outside = [(lp.tokens[i], lp.strategies[i], want[i], lp.lower[i], lp.upper[i]) for i in range(lp.n_tokens)
                   if not lp.lower[i] - slack[i] <= want[i] <= lp.upper[i] + slack[i]]
        assert outside == [], outside[:5]
        strategies = np.asarray(lp.strategies)
        is_exact = np.isfinite(lp.lower) & ~np.isin(strategies, BRACKETED)
        width = lp.upper - lp.lower
        assert np.all(width[is_exact] <= 2 * shape + 1e-9), (lp.strategies, width)
        assert np.all(width[strategies == "bisect"] <= 2 * shape + epsilon + BIAS_ROUNDING_SLACK + 1e-9), \
            (lp.strategies, width)
        exact += int(is_exact.sum())
        counts.update(lp.strategies)
    return exact, counts


def test_the_gguf_tokenizer_tokenizes_as_llama_cpp(codec, smollm2_reference):
    texts = [*TEXTS.values(), *GSM8K, LONG]
    assert [codec.encode(t) for t in texts] == smollm2_reference({"texts": texts})["texts"]
    assert codec.bos_id is None  # the GGUF says add_bos_token false, as llama.cpp reads it


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["auto", "forced", "run", "bisect"])
def test_every_strategy_within_bounds_of_llama_cpps_evaluation(strategy, smollm2_server, smollm2_gguf, codec,
                                                                 smollm2_reference, cache_dir):
    texts = [*TEXTS.values(), *GSM8K]  # forced and bisect; auto adds a text read in windows
    texts = {"auto": [*texts, LONG], "run": [TEXTS["ascii"], GSM8K[0]]}.get(strategy, texts)
    backend = backend_for(smollm2_server, smollm2_gguf, cache_dir, strategy)
    try:
        caps = backend.capabilities
        assert strategy == "auto" or strategy in caps.strategies(), caps.reason(strategy)
        black = backend.logprobs(texts)
    finally:
        backend.close()
    shape = caps.shape_variation
    assert shape > 0 and caps.evidence["repeat_noise"]["max_abs_diff"] == 0.0  # invisible to repeated requests
    assert f"values move with the request's shape (±{shape:.3g} nats)" in caps.reading()
    seqs = [[int(lp.context_ids[0]), *lp.token_ids.tolist()] for lp in black]
    assert seqs == [codec.encode(t) for t in texts]
    assert strategy != "auto" or len(seqs[-1]) > SMOLLM2_CTX  # LONG is read in windows
    exact, counts = assert_within_bounds(black, windowed_reference(smollm2_reference, seqs), shape, EPSILON)
    assert strategy == "auto" or strategy in counts
    assert smollm2_server.alive() and smollm2_server.server_errors() <= 2  # the probe's refused token-id prompts
    print(f"{strategy}: {counts.total()} values, {exact} exact ({dict(sorted(counts.items()))}); "
          f"shape variation {shape:.3g} nats, {caps.strategies()}")


@pytest.mark.slow
def test_chat_values_within_bounds_of_the_rendered_template(smollm2_server, smollm2_gguf, codec, smollm2_reference,
                                                            cache_dir):
    text = TEXTS["ascii"][:24]
    backend = backend_for(smollm2_server, smollm2_gguf, cache_dir, endpoint="chat")
    try:
        caps = backend.capabilities
        lp = backend.logprobs([text])[0]
    finally:
        backend.close()
    assert lp.provenance.condition == "chat-template"
    ids = codec.encode(text)
    # each value is the first assistant token's, after the model's own template around the prefix
    prompts = [[codec.tokenizer.apply_chat_template([{"role": "user", "content": codec.decode(ids[:k])}],
                                                    add_generation_prompt=True, tokenize=False), ids[k]]
               for k in range(1, len(ids))]
    truth = np.asarray(smollm2_reference({"prompts": prompts})["prompts"])
    assert caps.condition == "chat-template" and len(lp.strategies) == len(prompts)
    assert_within_bounds([lp], [truth], caps.shape_variation, EPSILON)


@pytest.mark.slow
def test_the_local_backend_on_dequantized_weights_is_close_to_llama_cpp(smollm2_gguf, codec, smollm2_reference):
    from blackbox_mia.backends.local import LocalBackend, LocalConfig

    texts = [*TEXTS.values(), *GSM8K[:4]]
    backend = LocalBackend(LocalConfig(str(smollm2_gguf)))
    white = backend.logprobs(texts)
    backend.close()
    seqs = [codec.encode(t) for t in texts]
    truth = smollm2_reference({"sequences": seqs})["sequences"]
    gaps = []
    for lp, seq, want in zip(white, seqs, truth):
        assert [int(lp.context_ids[0]), *lp.token_ids.tolist()] == seq  # no BOS, as llama.cpp
        gaps.append(abs(float(np.mean(lp.logprobs)) - float(np.mean(want))))
    assert max(gaps) <= LOCAL_GAP, gaps
    print(f"local vs llama.cpp: mean log-prob gaps {np.round(gaps, 4).tolist()} nats/token")


WHOLE = [item.text for item in load_shipped_or_jsonl("gsm8k").items[:2]]  # 208 tokens, read in one context each
WHOLE_CTX = 2048  # the served context of the docs and the case study


@pytest.fixture(scope="module")
def whole_server(llama_python, smollm2_gguf, tmp_path_factory):
    from ..realserver.fixtures import serving
    from ..realserver.server import LlamaServer

    yield from serving(LlamaServer(smollm2_gguf, llama_python, model="smollm2", n_ctx=WHOLE_CTX,
                                   log_path=tmp_path_factory.mktemp("smollm2-whole") / "server.log"))


@pytest.mark.slow
def test_forced_on_whole_gsm8k_problems_within_bounds(whole_server, smollm2_gguf, codec, smollm2_reference, tmp_path):
    """Whole problems in the docs' 2,048-token context, read by ``forced``: with the shape margin at
    2, a tail token of the first one (" duck", log-prob -7.8) lay 0.016 nats outside its bounds in
    2 of 3 runs of benchmarks/real_server_check.py on a fresh server; at 3 none does."""
    config = ApiConfig(base_url=whole_server.url, model=whole_server.model, max_retries=1, backoff_base_s=0.01)
    backend = ApiBackend(config, tokenizer=str(smollm2_gguf), tracker=TrackerConfig(strategy="forced"),
                         cache_dir=tmp_path)
    try:
        caps = backend.capabilities
        black = backend.logprobs(WHOLE)
    finally:
        backend.close()
    seqs = [[int(lp.context_ids[0]), *lp.token_ids.tolist()] for lp in black]
    assert seqs == [codec.encode(t) for t in WHOLE] and max(map(len, seqs)) < WHOLE_CTX
    truth = smollm2_reference({"sequences": seqs})["sequences"]
    exact, counts = assert_within_bounds(black, [np.asarray(t) for t in truth], caps.shape_variation, 0.0)
    assert counts["forced"] > 0 and sum(counts.values()) == sum(len(s) - 1 for s in seqs)
    print(f"whole GSM8K problems, forced: {sum(counts.values())} values, {exact} exact, {dict(counts)}, "
          f"shape variation {caps.shape_variation:.3g}")
