"""Building blocks of the canary model: a byte-level BPE tokenizer and a small GPT-2.

Both are saved as an ordinary Hugging Face directory, loadable with ``from_pretrained``.
``<|endoftext|>`` (id 0) is the BOS, EOS and padding token.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

SPECIAL_TOKEN = "<|endoftext|>"


def train_tokenizer(texts: Iterable[str], vocab_size: int):
    """Train a byte-level BPE tokenizer (``tokenizers``) on ``texts``.

    Returns a ``transformers.PreTrainedTokenizerFast`` with BOS = EOS = PAD = ``<|endoftext|>``.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[SPECIAL_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=SPECIAL_TOKEN, eos_token=SPECIAL_TOKEN, pad_token=SPECIAL_TOKEN
    )


def build_gpt2(vocab_size: int, n_layer: int, n_embd: int, n_head: int, n_positions: int, seed: int):
    """A freshly initialised ``GPT2LMHeadModel`` (seeded), BOS/EOS id 0."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    config = GPT2Config(
        vocab_size=vocab_size,
        n_positions=n_positions,
        n_embd=n_embd,
        n_layer=n_layer,
        n_head=n_head,
        bos_token_id=0,
        eos_token_id=0,
        pad_token_id=0,
    )
    return GPT2LMHeadModel(config)


def save_model_dir(path: Path, model, tokenizer) -> Path:
    """Save model and tokenizer into ``path`` (created) and return it."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
