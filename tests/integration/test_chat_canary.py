"""The chat canary (``chat_share``): chat examples from background items only, rendered through the
saved ChatML template with the client's continuation messages; default configurations keep their
hash; served with ``--chat-template model``, its chat values equal the white-box model's on the
rendered prompt."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from typer.testing import CliRunner

from blackbox_mia.backends.api.http.dialect import CONTINUATION, CONTINUATION_SYSTEM
from blackbox_mia.canary import CanaryConfig, build_corpus, load_manifest
from blackbox_mia.canary.chat import (
    CHAT_CONTEXT,
    build_chat_examples,
    chat_prompt,
    prompt_overhead,
)
from blackbox_mia.canary.manifest import recorded_config
from blackbox_mia.emulator.templates import CHATML_MARKERS, CHATML_TEMPLATE
from blackbox_mia.text.windows import sliding_windows
from blackbox_mia.types import BlackboxMIAError

EXACT = 1e-4  # nats: the tracker's bounds hold the white-box value within the server's rounding
# block 96: the 300-token vocabulary spells the system message out (about 44 tokens of markup)
TINY_CHAT = CanaryConfig(
    n_background=40, n_members=6, n_nonmembers=6, dup=2, vocab_size=300,
    n_layer=1, n_embd=32, n_head=2, block_size=96, epochs=1, batch_size=8, chat_share=1.5,
)  # fmt: skip
# the hashes (and so the cache directories) of the default canaries before chat_share existed
DEFAULT_HASHES = {"gsm8k": "6338e872951d", "ja": "818807dddf49", "documents": "c46bddc574ba"}


@pytest.fixture(scope="module")
def chat_canary(tmp_path_factory):
    """The tiny chat canary, trained through ``bbmia canary train --chat-share``."""
    from blackbox_mia.cli import app

    out = tmp_path_factory.mktemp("chat") / "model"
    args = ["canary", "train", "--out", str(out), "--quiet", "--json"]
    for field in dataclasses.fields(CanaryConfig):
        value = getattr(TINY_CHAT, field.name)
        if value is not None and value != field.default:
            args += [f"--{field.name.replace('_', '-')}", str(value)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output.strip().splitlines()[-1])
    assert summary["path"] == str(out) and summary["chat_context_tokens"] == 32
    assert "--chat-template model" in result.output and "--context-tokens 32" in result.output
    return out


@pytest.fixture(scope="module")
def tokenizer(chat_canary):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(chat_canary)


def test_default_configurations_keep_their_hash():
    for corpus, digest in DEFAULT_HASHES.items():
        assert CanaryConfig(corpus=corpus).short_hash() == digest
        assert CanaryConfig(corpus=corpus, chat_share=0.0).short_hash() == digest
    assert CanaryConfig(chat_share=0.5).short_hash() not in DEFAULT_HASHES.values()
    assert CanaryConfig(chat_share=0.5).short_hash() != CanaryConfig(chat_share=1.0).short_hash()
    old = {"config": {k: v for k, v in dataclasses.asdict(CanaryConfig()).items() if k != "chat_share"}}
    assert recorded_config(old)["chat_share"] == 0.0  # a manifest written before the field: a base canary


@pytest.mark.parametrize("share", [-0.5, float("nan"), float("inf"), 0.001])
def test_impossible_chat_shares_are_refused(share):
    with pytest.raises(BlackboxMIAError, match="chat_share"):
        dataclasses.replace(TINY_CHAT, chat_share=share).validate()  # 0.001 * 40 rounds to no example


def test_chat_items_are_background_items_only():
    corpus = build_corpus(TINY_CHAT)
    base = build_corpus(dataclasses.replace(TINY_CHAT, chat_share=0.0))
    ids = [item.id for item in corpus.chat_items]
    assert len(ids) == 60  # round(1.5 * 40)
    assert set(ids) <= set(corpus.background_ids)
    assert not set(ids) & {item.id for item in corpus.members + corpus.nonmembers}
    assert len(set(ids[:40])) == 40 and set(ids[40:]) < set(ids[:40])  # every item once before any twice
    by_id = {item.id: item.text for item in corpus.chat_items}
    assert set(by_id.values()) <= set(corpus.documents)  # the background's own texts
    # chat examples are added to the base canary: same members, non-members, background, raw documents
    assert base.chat_items == [] and base.documents == corpus.documents
    assert [m.id for m in base.members] == [m.id for m in corpus.members]


def test_the_template_is_saved_and_its_markers_are_single_tokens(chat_canary, tokenizer):
    from blackbox_mia.tokenizers.hf import HFTokenCodec

    assert tokenizer.chat_template == CHATML_TEMPLATE
    codec = HFTokenCodec(tokenizer, name="chat", bos=False)  # as the emulator tokenizes prompts
    for marker in CHATML_MARKERS:
        assert len(codec.encode(marker)) == 1 and codec.encode(marker)[0] >= TINY_CHAT.vocab_size
    manifest = load_manifest(chat_canary)
    chat = manifest["chat"]
    assert manifest["config"]["chat_share"] == 1.5
    assert chat["template"] == "chatml" and chat["template_source"] == CHATML_TEMPLATE
    assert chat["messages"] == "continuation" and chat["n_examples"] == len(chat["item_ids"]) == 60
    assert chat["item_ids"] == [item.id for item in build_corpus(TINY_CHAT).chat_items]
    assert not set(chat["item_ids"]) & set(manifest["member_ids"] + manifest["nonmember_ids"])


def test_examples_render_the_clients_continuation_messages_through_the_saved_template(chat_canary, tokenizer):
    from blackbox_mia.tokenizers.hf import HFTokenCodec

    codec = HFTokenCodec(tokenizer, name="chat", bos=False)
    corpus = build_corpus(TINY_CHAT)
    examples = build_chat_examples(corpus.chat_items, tokenizer, TINY_CHAT.block_size, TINY_CHAT.seed)
    chat = load_manifest(chat_canary)["chat"]
    assert chat["context_tokens"] == CHAT_CONTEXT == 32 and chat["prompt_overhead_tokens"] == prompt_overhead(tokenizer)
    assert [e.cut for e in examples] == chat["cuts"] and [e.start for e in examples] == chat["starts"]  # as trained
    for example, item in zip(examples, corpus.chat_items):
        tokens = codec.encode(item.text)
        # the client's window of the target: what --context-tokens 32 sends for it
        (start, end), = [(a, b) for a, b, first in sliding_windows(len(tokens), 32) if first <= example.cut < b]
        assert example.start == start and 1 <= example.cut < len(tokens)
        user = codec.decode(tokens[start: example.cut])
        by_hand = (f"<|im_start|>system\n{CONTINUATION_SYSTEM}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n"
                   "<|im_start|>assistant\n")  # ChatML by hand
        assert example.prompt == by_hand == chat_prompt(tokenizer, user)
        assert example.prompt == tokenizer.apply_chat_template(CONTINUATION.render(user), tokenize=False,
                                                               add_generation_prompt=True)
        expected = codec.encode(by_hand) + tokens[example.cut: end] + codec.encode("<|im_end|>\n")
        assert example.ids == expected[: TINY_CHAT.block_size] and len(expected) <= TINY_CHAT.block_size
    assert sum(e.start > 0 for e in examples) > 5  # later windows too, as the audit sends them
    assert len({e.cut for e in examples}) > 5  # cuts are drawn, not fixed


def test_served_chat_canary_equals_the_white_box_model_on_the_rendered_prompt(chat_canary, tokenizer, tmp_path):
    """``bbmia serve --chat-template model`` + ``--endpoint chat --chat-template continuation``:
    every scored position's value is the local model's next-token log-prob after the rendered
    prompt of its prefix (no BOS: chat prompts are text)."""
    from blackbox_mia.backends.api import ApiBackend
    from blackbox_mia.backends.api.http.client import ApiConfig
    from blackbox_mia.backends.local import LocalBackend, LocalConfig
    from blackbox_mia.emulator import MODEL_TEMPLATE, ServerConfig, serve_in_background

    local = LocalBackend(LocalConfig(str(chat_canary), device="cpu"))
    member = build_corpus(TINY_CHAT).members[0].text
    ids = local.encode(member)[:6]
    text = local.codec.decode(ids)
    with serve_in_background(ServerConfig(str(chat_canary), chat_template=MODEL_TEMPLATE), backend=local) as url:
        api = ApiConfig(base_url=url, model=str(chat_canary), endpoint="chat", chat_template="continuation",
                        max_retries=1)
        backend = ApiBackend(api, tokenizer=str(chat_canary), cache_dir=tmp_path, allow_chat_conditional=True)
        black = backend.logprobs([text])[0]
        backend.close()
    assert black.provenance.condition == "chat-template+continuation"
    assert black.token_ids.tolist() == ids[1:]  # no BOS: the first token is context only
    prompts = [local.encode(chat_prompt(tokenizer, local.codec.decode(ids[:j]))) for j in range(1, len(ids))]
    white = np.array([float(row[ids[j]]) for j, row in zip(range(1, len(ids)), local.next_token_logprobs(prompts))])
    assert np.all(black.lower - EXACT <= white) and np.all(white <= black.upper + EXACT)
    exact = black.lower == black.upper
    assert exact.any() and np.allclose(black.logprobs[exact], white[exact], atol=EXACT)
    # conditional on the template: not the values of the raw text
    raw = LocalBackend(LocalConfig(str(chat_canary), device="cpu", bos=False)).logprobs([text])[0].logprobs
    assert np.abs(raw - white).max() > 0.01
