"""The validation server's generation against the white-box model: greedy chains, EOS, seeded sampling."""

from __future__ import annotations

import numpy as np
import pytest

from ..conftest import gsm8k_questions
from ..helpers_server import post, prefixes

# -- generation as the API backends ask for it (max_tokens up to ~64, temperature 0 or > 0, seed) ----


def greedy_chain(backend, prompt: list[int], steps: int, bias: dict[int, float] | None = None):
    """White-box greedy continuation: argmax of log p(. | ids) + bias at every step, until EOS
    (included) or ``steps`` tokens. Returns the tokens and the raw rows they were chosen from."""
    eos = backend.tokenizer.eos_token_id
    ids, tokens, rows = list(prompt), [], []
    for _ in range(steps):
        row = backend.next_token_logprobs([ids])[0]
        biased = row.astype(np.float64)
        for token, b in (bias or {}).items():
            biased[token] += b
        tokens.append(int(np.argmax(biased)))
        rows.append(row)
        ids.append(tokens[-1])
        if tokens[-1] == eos:
            break
    return tokens, rows


def generation_request(kind: str, backend, max_tokens: int, **options) -> tuple[str, dict, list[int]]:
    """(path, body, ids the model sees) of a completions request with BOS + token ids, or of a
    chat request with one user message (text, no BOS, no template)."""
    if kind == "completions":
        prompt = prefixes(backend, 1)[0]
        return "/completions", {"prompt": prompt, "max_tokens": max_tokens, "logprobs": 0, **options}, prompt
    text = gsm8k_questions(1)[0][:25]
    body = {"messages": [{"role": "user", "content": text}], "max_tokens": max_tokens, "logprobs": True,
            "top_logprobs": 0, **options}
    return "/chat/completions", body, backend.encode(text)


def generated(kind: str, body: dict) -> tuple[str, list[str], list[float], str]:
    """(text, token names, token log-probs, finish_reason) of a completions or chat answer."""
    choice = body["choices"][0]
    if kind == "completions":
        lp = choice["logprobs"]
        return choice["text"], lp["tokens"], lp["token_logprobs"], choice["finish_reason"]
    content = choice["logprobs"]["content"]
    return (choice["message"]["content"], [c["token"] for c in content], [c["logprob"] for c in content],
            choice["finish_reason"])


@pytest.mark.parametrize("kind", ["completions", "chat"])
def test_greedy_generation_is_the_white_box_argmax_chain(raw_url, backend, codec, name, kind):
    path, request, prompt = generation_request(kind, backend, 0, temperature=0)
    steps = min(48, backend.context - len(prompt))  # as long as the tiny model's 64-token context allows
    assert steps >= 40
    want, rows = greedy_chain(backend, prompt, steps)
    assert backend.tokenizer.eos_token_id not in want  # this prompt: no EOS, the generation runs to its length
    status, body = post(raw_url, path, {**request, "model": name, "max_tokens": steps})
    assert status == 200
    text, tokens, logprobs, finish = generated(kind, body)
    assert tokens == [codec.token_string(t) for t in want]
    assert text == codec.decode(want) and finish == "length"
    assert logprobs == pytest.approx([float(row[t]) for row, t in zip(rows, want)], abs=1e-5)
    assert body["usage"] == {"prompt_tokens": len(prompt), "completion_tokens": steps,
                             "total_tokens": len(prompt) + steps}


@pytest.mark.parametrize("kind", ["completions", "chat"])
def test_generation_stops_at_eos_with_finish_reason_stop(raw_url, backend, codec, name, kind):
    """A bias on EOS between the gaps (argmax - EOS, in nats) of two steps of the greedy chain
    makes EOS the argmax first at step k: the answer ends there, EOS listed but not in the text."""
    eos = backend.tokenizer.eos_token_id
    path, request, prompt = generation_request(kind, backend, 0, temperature=0)
    steps = min(48, backend.context - len(prompt))
    chain, rows = greedy_chain(backend, prompt, steps)
    gaps = [float(row.max() - row[eos]) for row in rows]
    k = next(j for j in range(2, steps) if gaps[j] < min(gaps[:j]))  # the first record low after step 1
    bias = (gaps[k] + min(gaps[:k])) / 2  # above gap k, below every earlier gap
    assert 0 < bias <= 100
    want, _ = greedy_chain(backend, prompt, steps, {eos: bias})
    assert want == chain[:k] + [eos]  # the white-box chain with the bias: EOS first wins at step k
    status, body = post(raw_url, path, {**request, "model": name, "max_tokens": steps, "logit_bias": {str(eos): bias}})
    assert status == 200
    text, tokens, _, finish = generated(kind, body)
    assert finish == "stop" and body["usage"]["completion_tokens"] == k + 1
    assert tokens == [codec.token_string(t) for t in want] and text == codec.decode(chain[:k])


@pytest.mark.parametrize("kind", ["completions", "chat"])
def test_seeded_sampling_replays_numpys_generator(raw_url, backend, codec, name, kind):
    """temperature 0.7, seed s: one uniform u from numpy's default_rng(s) per step, the token is
    the first whose cumulative softmax(log p / T) mass exceeds u (inverse CDF); the same seed
    gives the same answer, another seed another one."""
    temperature, steps = 0.7, 32
    path, request, prompt = generation_request(kind, backend, steps, temperature=temperature)

    def replay(seed: int) -> list[int]:
        rng, ids = np.random.default_rng(seed), list(prompt)
        for _ in range(steps):
            scaled = backend.next_token_logprobs([ids])[0].astype(np.float64) / temperature
            cdf = np.cumsum(np.exp(scaled - scaled.max()))
            ids.append(int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right")))
            if ids[-1] == backend.tokenizer.eos_token_id:
                break
        return ids[len(prompt):]

    answers = [generated(kind, post(raw_url, path, {**request, "model": name, "seed": seed})[1])
               for seed in (11, 11, 12)]
    assert answers[0] == answers[1] and answers[0][1] != answers[2][1]
    for seed, (text, tokens, _, _) in zip((11, 12), (answers[0], answers[2])):
        want = replay(seed)
        assert tokens == [codec.token_string(t) for t in want]
        assert text == codec.decode([t for t in want if t != backend.tokenizer.eos_token_id])
