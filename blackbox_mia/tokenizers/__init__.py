"""Tokenizers that match the target model's token ids, for the black-box path.

A :class:`TokenCodec` encodes texts to ids, knows each id's exact bytes, and renders ids the way
OpenAI-compatible servers name tokens in ``top_logprobs``: the token's UTF-8 text, or
``"bytes:\\xe2\\x80"`` when its bytes are not valid UTF-8 on their own. Sources:

* tiktoken encodings (OpenAI models). The BPE rank files ship inside the package
  (``data/tiktoken``, MIT via tiktoken-rs); tiktoken reads them from a cache directory named by
  sha1(url), so no download is ever attempted;
* a Hugging Face tokenizer (``tokenizer.json`` directory or hub name) for open models.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
from abc import ABC, abstractmethod
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path

from ..config import cache_root
from ..types import BlackboxMIAError

TIKTOKEN_DATA = Path(__file__).resolve().parent.parent / "data" / "tiktoken"
TIKTOKEN_URL = "https://openaipublic.blob.core.windows.net/encodings/{name}.tiktoken"
TIKTOKEN_SHIPPED = ("r50k_base", "p50k_base", "cl100k_base", "o200k_base")


def render_token(token_bytes: bytes) -> str:
    """OpenAI's name of a token: its UTF-8 text, else ``"bytes:"`` + ``\\xNN`` escapes."""
    try:
        return token_bytes.decode("utf-8")
    except UnicodeDecodeError:
        return "bytes:" + "".join(f"\\x{b:02x}" for b in token_bytes)


class TokenCodec(ABC):
    """Text ↔ token ids of one model, with OpenAI-style token names.

    Attributes:
        name: tokenizer name (saved with results).
        bos_id: BOS token id prepended before scoring, or ``None`` (then the first text token
            is context, not scored).
    """

    name: str
    bos_id: int | None = None

    @abstractmethod
    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``; special-token strings in it are encoded as plain text."""

    @abstractmethod
    def token_bytes(self, token_id: int) -> bytes:
        """The exact bytes of one token."""

    @property
    @abstractmethod
    def vocab_size(self) -> int:
        """Number of token ids (ids are ``0 .. vocab_size - 1``)."""

    def decode(self, ids: Sequence[int]) -> str:
        """Text of a sequence of ids (invalid UTF-8 replaced)."""
        return b"".join(self.token_bytes(i) for i in ids).decode("utf-8", errors="replace")

    def token_string(self, token_id: int) -> str:
        """OpenAI-style name of one token (see :func:`render_token`)."""
        return render_token(self.token_bytes(token_id))

    @cached_property
    def ids_by_string(self) -> dict[str, list[int]]:
        """Inverse of :meth:`token_string`: names that several ids share map to all of them."""
        table: dict[str, list[int]] = {}
        for i in range(self.vocab_size):
            with contextlib.suppress(KeyError, ValueError):
                table.setdefault(self.token_string(i), []).append(i)
        return table

    @cached_property
    def partial_ids(self) -> frozenset[int]:
        """Ids whose bytes are not valid UTF-8 on their own (part of a multi-byte character)."""
        return frozenset(i for ids in self.ids_by_string.values() for i in ids if self._is_partial(i))

    def _is_partial(self, token_id: int) -> bool:
        try:
            self.token_bytes(token_id).decode("utf-8")
        except UnicodeDecodeError:
            return True
        return False

    def lookup(self, token: str, token_bytes: Sequence[int] | None = None) -> list[int]:
        """Ids that a returned entry may denote: exact when its bytes are given, else by name."""
        if token_bytes is not None:
            rendered = render_token(bytes(token_bytes))
            return [i for i in self.ids_by_string.get(rendered, []) if self.token_bytes(i) == bytes(token_bytes)]
        if token.startswith("token_id:"):  # vLLM's return_tokens_as_token_ids
            return [int(token.removeprefix("token_id:"))]
        return self.ids_by_string.get(token, [])


class TiktokenCodec(TokenCodec):
    """A tiktoken encoding loaded from the shipped BPE rank files (no network).

    Args:
        encoding: ``"cl100k_base"``, ``"o200k_base"``, ``"p50k_base"`` or ``"r50k_base"``.
        cache_dir: where the rank files are laid out under tiktoken's cache names.

    Raises:
        BlackboxMIAError: unknown encoding.
    """

    def __init__(self, encoding: str, cache_dir: Path | None = None):
        import tiktoken
        from tiktoken_ext import openai_public

        if encoding not in TIKTOKEN_SHIPPED:
            raise BlackboxMIAError(f"unknown tiktoken encoding {encoding!r}; shipped: {', '.join(TIKTOKEN_SHIPPED)}")
        directory = Path(cache_dir or cache_root() / "tiktoken")
        directory.mkdir(parents=True, exist_ok=True)
        for name in TIKTOKEN_SHIPPED:
            target = directory / hashlib.sha1(TIKTOKEN_URL.format(name=name).encode()).hexdigest()
            if not target.exists():
                shutil.copyfile(TIKTOKEN_DATA / f"{name}.tiktoken", target)
        with _environ("TIKTOKEN_CACHE_DIR", str(directory)):
            spec = openai_public.ENCODING_CONSTRUCTORS[encoding]()
        self.encoding = tiktoken.Encoding(
            name=spec["name"],
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
            BlackboxMIAError: tiktoken does not know the model (pass ``--tokenizer``).
        """
        import tiktoken

        try:
            encoding = tiktoken.encoding_name_for_model(model)
        except KeyError as exc:
            raise BlackboxMIAError(
                f"no tiktoken encoding known for model {model!r}: pass --tokenizer "
                "(a tiktoken encoding such as cl100k_base, or a Hugging Face tokenizer directory)"
            ) from exc
        return cls(encoding, cache_dir)

    def encode(self, text: str) -> list[int]:
        return self.encoding.encode(text, disallowed_special=())

    def token_bytes(self, token_id: int) -> bytes:
        return self.encoding.decode_single_token_bytes(token_id)

    @property
    def vocab_size(self) -> int:
        return self.encoding.n_vocab


class HFTokenCodec(TokenCodec):
    """A Hugging Face tokenizer (``AutoTokenizer``), byte-exact for byte-level BPE.

    Args:
        tokenizer: a loaded ``PreTrainedTokenizerBase``.
        name: label saved with results.
        bos: prepend the tokenizer's BOS token; ``None`` = when it has one (the convention of
            :class:`~blackbox_mia.backends.local.LocalBackend`).
    """

    def __init__(self, tokenizer, name: str, bos: bool | None = None):
        self.tokenizer = tokenizer
        self.name = name
        self.bos_id = tokenizer.bos_token_id if bos in (None, True) else None
        self._byte_decoder = _byte_level_decoder(tokenizer)

    @classmethod
    def load(cls, path: str, bos: bool | None = None) -> HFTokenCodec:
        """Load with ``AutoTokenizer.from_pretrained``; BlackboxMIAError when it cannot."""
        try:
            from transformers import AutoTokenizer

            return cls(AutoTokenizer.from_pretrained(path), name=path, bos=bos)
        except (OSError, ValueError, ImportError) as exc:
            raise BlackboxMIAError(f"cannot load tokenizer {path!r}: {exc}") from exc

    def encode(self, text: str) -> list[int]:
        # special-token strings in the text ("<|endoftext|>") are plain text, never control tokens
        return self.tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]

    def token_bytes(self, token_id: int) -> bytes:
        piece = self.tokenizer.convert_ids_to_tokens(int(token_id))
        if piece is None:
            raise KeyError(token_id)
        if piece in self.tokenizer.all_special_tokens:
            return piece.encode("utf-8")
        if self._byte_decoder is not None:
            return bytes(self._byte_decoder[c] for c in piece)
        return self.tokenizer.decode([int(token_id)]).encode("utf-8")

    @property
    def vocab_size(self) -> int:
        return len(self.tokenizer)


def _byte_level_decoder(tokenizer) -> dict[str, int] | None:
    """GPT-2's unicode→byte table when the tokenizer is byte-level BPE, else ``None``."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or "ByteLevel" not in type(backend.pre_tokenizer).__name__ + repr(backend.pre_tokenizer):
        return None
    from tokenizers.pre_tokenizers import ByteLevel

    # GPT-2 bytes_to_unicode: printable bytes map to themselves, the others to 256 + n.
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    mapping, extra = {}, 0
    for b in range(256):
        if b in printable:
            mapping[chr(b)] = b
        else:
            mapping[chr(256 + extra)] = b
            extra += 1
    return mapping if set(mapping) == set(ByteLevel.alphabet()) else None


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
