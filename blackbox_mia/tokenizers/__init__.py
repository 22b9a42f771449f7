"""One tokenizer layer for every backend: text ↔ token ids, and how tokens are named.

The token-string convention (used by ``TokenLogprobs.tokens`` on every path, local and API):
a token is named by its exact bytes decoded as UTF-8, or, when those bytes are not valid UTF-8
on their own (part of a multi-byte character), by ``"bytes:"`` followed by one ``\\xNN`` escape
per byte, e.g. ``"bytes:\\xe6\\x97"``. That is OpenAI's name for such tokens in ``top_logprobs``;
:func:`render_token` is its one definition (see ``docs/design.md``).

* :mod:`.base`: :class:`TokenCodec` (the interface), :func:`render_token` and :func:`is_partial`;
* :mod:`.tiktoken_codec`: :class:`TiktokenCodec`, tiktoken encodings from the BPE rank files
  shipped in ``blackbox_mia/data/tiktoken`` (no download);
* :mod:`.hf`: :class:`HFTokenCodec`, a Hugging Face tokenizer for open models;
* :mod:`.load`: :func:`load_codec`, the codec named by a ``--tokenizer`` spec.
"""

from .base import TokenCodec, is_partial, render_token
from .hf import HFTokenCodec
from .load import load_codec
from .tiktoken_codec import TIKTOKEN_DATA, TIKTOKEN_SHIPPED, TIKTOKEN_URL, TiktokenCodec

__all__ = [
    "TIKTOKEN_DATA",
    "TIKTOKEN_SHIPPED",
    "TIKTOKEN_URL",
    "HFTokenCodec",
    "TiktokenCodec",
    "TokenCodec",
    "is_partial",
    "load_codec",
    "render_token",
]
