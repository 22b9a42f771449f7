"""Shared fixtures: a tiny random GPT-2 with a BPE tokenizer trained on GSM8K text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[1] / "blackbox_mia" / "data"


def gsm8k_questions(n: int, split: str = "train") -> list[str]:
    with open(DATA / "gsm8k" / f"{split}.jsonl", encoding="utf-8") as f:
        return [json.loads(line)["question"] for _, line in zip(range(n), f)]


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A 2-layer, 32-dim GPT-2 (context 64 tokens, vocab 300) with random weights."""
    from blackbox_mia.canary_model import build_gpt2, save_model_dir, train_tokenizer

    tokenizer = train_tokenizer(gsm8k_questions(300), vocab_size=300)
    model = build_gpt2(len(tokenizer), n_layer=2, n_embd=32, n_head=2, n_positions=64, seed=0)
    return save_model_dir(tmp_path_factory.mktemp("tiny"), model, tokenizer)
