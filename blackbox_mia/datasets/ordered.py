"""A benchmark as one text: its items in a given order, joined by :data:`ITEM_SEPARATOR`.

The canonical-order canary (``bbmia canary train --planted-order canonical``) plants its members
as one such document, in their benchmark file order; the exchangeability test
(:mod:`blackbox_mia.evaluation.exchangeability`) scores each shard of a benchmark as one such
text, in the canonical order and in shuffled orders. Both join with the same separator, so
the test's texts are substrings of the planted document at item boundaries.
"""

from __future__ import annotations

from collections.abc import Sequence

ITEM_SEPARATOR = "\n\n"
"""Between two consecutive items (a blank line: the items' own texts hold single newlines)."""


def join_items(texts: Sequence[str]) -> str:
    """The items' texts in the given order as one text: ``ITEM_SEPARATOR.join(texts)``."""
    return ITEM_SEPARATOR.join(texts)
