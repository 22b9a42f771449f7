"""tiktoken encodings (OpenAI models) from the BPE rank files shipped inside the package.

The rank files live in ``blackbox_mia/data/tiktoken`` (MIT, via tiktoken-rs; see its
PROVENANCE.md). tiktoken reads them from a cache directory named by sha1(url), so they are laid
out there first and no download is ever attempted.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
from pathlib import Path

from ..config import cache_root
from ..option_names import named
from ..types import BlackboxMIAError
from .base import TokenCodec

TIKTOKEN_DATA = Path(__file__).resolve().parent.parent / "data" / "tiktoken"
TIKTOKEN_URL = "https://openaipublic.blob.core.windows.net/encodings/{name}.tiktoken"
TIKTOKEN_SHIPPED = ("r50k_base", "p50k_base", "cl100k_base", "o200k_base")
TIKTOKEN_ALIASES = {"gpt2": "r50k_base"}
"""tiktoken encodings that are a shipped one under another name: tiktoken's ``gpt2`` has
``r50k_base``'s ranks, split pattern and ``<|endoftext|>`` (50256), so it is read from that file."""
TIKTOKEN_NAMES = (*TIKTOKEN_SHIPPED, *TIKTOKEN_ALIASES)
"""Every encoding :class:`TiktokenCodec` loads (offline)."""


class TiktokenCodec(TokenCodec):
    """A tiktoken encoding loaded from the shipped BPE rank files (no network).

    Args:
        encoding: ``"cl100k_base"``, ``"o200k_base"``, ``"p50k_base"``, ``"r50k_base"`` or
            ``"gpt2"`` (:data:`TIKTOKEN_NAMES`).
        cache_dir: where the rank files are laid out under tiktoken's cache names.

    Raises:
        BlackboxMIAError: unknown encoding.
    """

    def __init__(self, encoding: str, cache_dir: Path | None = None):
        import tiktoken
        from tiktoken_ext import openai_public

        if encoding not in TIKTOKEN_NAMES:
            raise BlackboxMIAError(f"unknown tiktoken encoding {encoding!r}; shipped: {', '.join(TIKTOKEN_NAMES)}")
        directory = Path(cache_dir or cache_root() / "tiktoken")
        directory.mkdir(parents=True, exist_ok=True)
        for name in TIKTOKEN_SHIPPED:
            target = directory / hashlib.sha1(TIKTOKEN_URL.format(name=name).encode()).hexdigest()
            if not target.exists():
                shutil.copyfile(TIKTOKEN_DATA / f"{name}.tiktoken", target)
        with _environ("TIKTOKEN_CACHE_DIR", str(directory)):
            spec = openai_public.ENCODING_CONSTRUCTORS[TIKTOKEN_ALIASES.get(encoding, encoding)]()
        self.encoding = tiktoken.Encoding(
            name=encoding,
            pat_str=spec["pat_str"],
            mergeable_ranks=spec["mergeable_ranks"],
            special_tokens=spec["special_tokens"],
            explicit_n_vocab=spec.get("explicit_n_vocab"),
        )
        self.name = f"tiktoken:{encoding}"

    @classmethod
    def for_model(cls, model: str, cache_dir: Path | None = None) -> TiktokenCodec:
        """The encoding tiktoken maps an OpenAI model name to.

        Raises:
            BlackboxMIAError: tiktoken does not know the model (name its tokenizer).
        """
        import tiktoken

        try:
            encoding = tiktoken.encoding_name_for_model(model)
        except KeyError as exc:
            raise BlackboxMIAError(
                f"no tiktoken encoding known for model {model!r}: name its tokenizer, a tiktoken encoding such as "
                f"cl100k_base or a Hugging Face tokenizer directory ({named('tokenizer')}, or ?tokenizer= in an api: "
                "spec)"
            ) from exc
        return cls(encoding, cache_dir)

    def encode(self, text: str) -> list[int]:
        return self.encoding.encode(text, disallowed_special=())

    def token_bytes(self, token_id: int) -> bytes:
        return self.encoding.decode_single_token_bytes(token_id)

    @property
    def vocab_size(self) -> int:
        return self.encoding.n_vocab


@contextlib.contextmanager
def _environ(key: str, value: str):
    """Set one environment variable for the duration of a block, then restore it."""
    old = os.environ.get(key)
    os.environ[key] = value
    try:
        yield
    finally:
        if old is None:
            del os.environ[key]
        else:
            os.environ[key] = old
