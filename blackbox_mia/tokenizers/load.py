"""The target model's tokenizer from a user's ``--tokenizer`` spec and the model name."""

from __future__ import annotations

from pathlib import Path

from ..hub import check_gguf
from .base import TokenCodec
from .hf import HFTokenCodec, check_tokenizer_path
from .tiktoken_codec import TIKTOKEN_NAMES, TiktokenCodec


def load_codec(tokenizer: str | None, model: str) -> TokenCodec:
    """The target model's tokenizer.

    Args:
        tokenizer: ``None`` (tiktoken's encoding for an OpenAI model name), a tiktoken encoding
            (``cl100k_base`` or ``tiktoken:cl100k_base``; ``gpt2`` is tiktoken's unless a
            directory of that name exists: the hub's is ``openai-community/gpt2``), a Hugging Face
            tokenizer directory / hub name, or a GGUF model file (``FILE.gguf``).
        model: the API model name.

    Raises:
        BlackboxMIAError: no tokenizer can be found for the model.
    """
    if tokenizer is None:
        return TiktokenCodec.for_model(model)
    if is_tiktoken(tokenizer):
        return TiktokenCodec(tokenizer.removeprefix("tiktoken:"))
    return HFTokenCodec.load(tokenizer)


def is_tiktoken(tokenizer: str) -> bool:
    """Whether the ``--tokenizer`` spec names a tiktoken encoding (:data:`TIKTOKEN_NAMES`, with
    or without ``tiktoken:``) rather than a directory of that name."""
    name = tokenizer.removeprefix("tiktoken:")
    return name in TIKTOKEN_NAMES and (name != tokenizer or not Path(tokenizer).expanduser().exists())


def check_codec_spec(tokenizer: str | None) -> None:
    """The checks of :func:`load_codec` that load nothing: a Hugging Face tokenizer path that
    does not exist, or a file that is not a GGUF transformers reads (:func:`~blackbox_mia.hub.check_gguf`),
    is refused (run before a slower check, such as asking the server).

    Raises:
        BlackboxMIAError: ``tokenizer`` names a directory that does not exist, or a file refused
            by :func:`~blackbox_mia.hub.check_gguf`.
    """
    if tokenizer is not None and not is_tiktoken(tokenizer):
        check_tokenizer_path(tokenizer)
        if Path(tokenizer).expanduser().is_file():
            check_gguf(Path(tokenizer).expanduser(), "tokenizer")

