"""A real llama.cpp server (llama-cpp-python 0.3.36) over the peaked test model: what it answers
is the white-box model's distribution (tests/realserver; skipped without the llama venv)."""

from __future__ import annotations

import json
import urllib.request

import pytest

from ..conftest import gsm8k_questions

TOLERANCE = 2e-3  # nats: llama.cpp f32 against transformers fp32 (measured: < 1e-4)


def post(url: str, body: dict) -> dict:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


def ascii_texts(tokenizer, n: int, max_tokens: int) -> list[str]:
    """ASCII GSM8K questions cut to `max_tokens` tokens (and back to the same tokens)."""
    texts = []
    for question in gsm8k_questions(50, "test"):
        ids = tokenizer(question)["input_ids"][:max_tokens]
        text = tokenizer.decode(ids)
        if question.isascii() and tokenizer(text)["input_ids"] == ids:
            texts.append(text)
        if len(texts) == n:
            return texts
    raise AssertionError("not enough ASCII questions")


@pytest.mark.slow
def test_llama_server_answers_the_white_box_distribution(llama_server, peaked_model_dir):
    import torch
    from transformers import AutoModelForCausalLM

    from blackbox_mia.backends.local import LocalBackend, LocalConfig
    from blackbox_mia.tokenizers import HFTokenCodec

    server = llama_server
    assert server.alive() and server.url.endswith("/v1")
    with urllib.request.urlopen(server.url + "/models", timeout=10) as r:
        assert [m["id"] for m in json.loads(r.read())["data"]] == [server.model]

    local = LocalBackend(LocalConfig(str(peaked_model_dir), bos=False, device="cpu"))
    model = AutoModelForCausalLM.from_pretrained(peaked_model_dir).eval()
    tokenizer, vocab = local.tokenizer, model.config.vocab_size
    # the server names a token by its bytes decoded with errors="ignore" (a control token: ""):
    # "" stands for <|endoftext|> and the 128 bytes 0x80-0xFF, every other name for one id
    codec = HFTokenCodec(tokenizer, "peaked")
    names = [codec.token_bytes(i).decode("utf-8", errors="ignore") if i else "" for i in range(vocab)]
    unique = {n for n in names if names.count(n) == 1}
    assert names.count("") == 129 and len(unique) == len(set(names)) - 1
    texts = ascii_texts(tokenizer, 2, max_tokens=40)  # + 1 generated token within the 64 positions
    white = local.logprobs(texts)
    local.close()

    before, errors_before = server.requests("/v1/completions"), server.server_errors()
    sent, compared, worst = 0, 0, 0.0
    for text, w in zip(texts, white):
        ids = tokenizer(text)["input_ids"]
        assert w.token_ids.tolist() == ids[1:]  # no BOS: the first token is unscored context
        with torch.no_grad():
            full = torch.log_softmax(model(torch.tensor([ids])).logits[0].double(), -1)
        for k in range(1, len(ids)):
            body = {"model": server.model, "prompt": tokenizer.decode(ids[:k]), "max_tokens": 1,
                    "logprobs": vocab, "temperature": 0}  # fmt: skip
            answer = post(server.url + "/completions", body)
            sent += 1
            assert answer["usage"]["prompt_tokens"] == k  # the same tokens, no BOS added
            top = answer["choices"][0]["logprobs"]["top_logprobs"][0]
            # the text's token, as LocalBackend scores it
            worst = max(worst, abs(top[names[ids[k]]] - float(w.logprobs[k - 1])))
            # and the whole distribution, wherever a name stands for one id
            for i in range(vocab):
                if names[i] in unique:
                    worst = max(worst, abs(top[names[i]] - float(full[k - 1, i])))
                    compared += 1
    assert compared > 100 * sent and worst < TOLERANCE, (compared, worst)
    assert server.requests("/v1/completions") - before == sent
    assert server.server_errors() == errors_before and server.alive()
