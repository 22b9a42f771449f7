"""llama.cpp's pre-tokenizers of byte-level (``gpt2``) GGUF vocabularies, where transformers'
GGUF support does not reproduce them.

A GGUF names its pre-tokenizer (``tokenizer.ggml.pre``); llama.cpp splits the text with that
type's regular expressions before the BPE merges. transformers maps some types to their split
(``GGUF_PRE_TOKENIZER_SPLITS``) and reads every other one as GPT-2's byte-level pattern, which
is right for ``gpt-2`` but not for ``smollm`` (SmolLM2): llama.cpp splits every digit (``\\p{N}``,
including ``½``) off first, so ``" ½"`` is ``" "`` + ``"½"`` there and one merged token in
transformers' reading, a different context for every later position. A type neither table
knows is refused (:func:`check_pre_tokenizer`) rather than tokenized in a way the server may not.
"""

from __future__ import annotations

from ..types import BlackboxMIAError

GPT2_PATTERN_TYPES = ("gpt-2",)
"""Pre-tokenizer types that llama.cpp splits with GPT-2's pattern alone (transformers' default
reading; checked against llama.cpp's tokenizer on the canary's GGUF)."""

DIGITS_FIRST_TYPES = ("smollm",)
"""Pre-tokenizer types that llama.cpp splits every ``\\p{N}`` character off before GPT-2's pattern
(checked against llama.cpp 0.3.36's tokenizer on SmolLM2's GGUF: digits, ``½``, GSM8K texts)."""


def check_pre_tokenizer(tokenizer_model: str | None, pre: str | None, where: str) -> None:
    """Refuse a byte-level GGUF vocabulary (``tokenizer_model == "gpt2"``) whose pre-tokenizer
    type ``pre`` is neither reproduced by transformers nor listed here.

    Raises:
        BlackboxMIAError: one line naming ``where``, the type, and the way out.
    """
    if tokenizer_model != "gpt2":
        return
    from transformers.integrations.gguf.gguf_tokenizer_mapping import GGUF_PRE_TOKENIZER_SPLITS

    known = (*GPT2_PATTERN_TYPES, *DIGITS_FIRST_TYPES, *GGUF_PRE_TOKENIZER_SPLITS)
    if (pre or "gpt-2") not in known:
        raise BlackboxMIAError(f"{where}: its pre-tokenizer {pre!r} is not one whose splitting this toolkit can "
                               "reproduce as llama.cpp does, so texts could be tokenized differently from the "
                               "server; pass the model's Hugging Face tokenizer directory instead")


def fit_pre_tokenizer(tokenizer, pre: str | None):
    """``tokenizer`` (transformers' reading of a GGUF) with llama.cpp's pre-tokenizer where
    transformers' differs (:data:`DIGITS_FIRST_TYPES`: each digit split off, then GPT-2's
    byte-level pattern); returned as it is otherwise."""
    if pre not in DIGITS_FIRST_TYPES:
        return tokenizer
    from tokenizers import pre_tokenizers

    tokenizer.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
    ])
    return tokenizer
