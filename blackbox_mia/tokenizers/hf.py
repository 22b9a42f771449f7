"""Hugging Face tokenizers (``tokenizer.json`` directory or hub name), for open models."""

from __future__ import annotations

from pathlib import Path

from ..hub import load_pretrained
from ..types import BlackboxMIAError
from .base import TokenCodec


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
        """Load with ``AutoTokenizer.from_pretrained``; a hub name from the local cache, and
        downloaded only when the hub answers (:func:`~blackbox_mia.hub.load_pretrained`).

        Raises:
            BlackboxMIAError: ``path`` is a file system path that does not exist (a hub name is
                ``NAME`` or ``ORG/NAME``), transformers is missing, or the tokenizer cannot be
                loaded.
        """
        if _is_path(path) and not Path(path).expanduser().exists():
            raise BlackboxMIAError(f"cannot load tokenizer {path!r}: no such directory "
                                   f"(and not a hub name, which is NAME or ORG/NAME)")
        try:
            from transformers import AutoTokenizer
        except ImportError as exc:
            raise BlackboxMIAError(f"cannot load tokenizer {path!r}: {exc}") from exc
        return cls(load_pretrained(AutoTokenizer.from_pretrained, path, "tokenizer"), name=path, bos=bos)

    def encode(self, text: str) -> list[int]:
        # special-token strings in the text ("<|endoftext|>") are plain text, never control tokens
        return self.tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]

    def token_bytes(self, token_id: int) -> bytes:
        """The exact bytes of one token; special tokens are their UTF-8 text.

        Byte-level BPE pieces are mapped back through GPT-2's unicode→byte table; other
        tokenizers fall back to the UTF-8 of ``tokenizer.decode([token_id])``.

        Raises:
            KeyError: ``token_id`` names no token.
        """
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


def _is_path(name: str) -> bool:
    """Whether ``name`` can only be a file system path, not a hub repository id (``NAME`` or
    ``ORG/NAME``): it starts with ``/``, ``.`` or ``~``, has more than one ``/``, a backslash, or
    ends with ``/``."""
    return name.startswith(("/", ".", "~")) or name.count("/") > 1 or "\\" in name or name.endswith("/")


def _byte_level_decoder(tokenizer) -> dict[str, int] | None:
    """GPT-2's unicode→byte table when the tokenizer is byte-level BPE, else ``None``."""
    backend = getattr(tokenizer, "backend_tokenizer", None)  # only fast tokenizers have one
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
