"""The document canary (``corpus = "documents"``): whole multi-problem documents with known contamination.

Ground truth for ``bbmia documents`` (the Min-K% paper's copyrighted-books audit, Shi et al.
2024 §5). A document is ``doc_items`` consecutive GSM8K test problems (a block of the dataset's
own order) joined by :data:`ITEM_SEPARATOR`, a "book". The blocks are shuffled (seeded) and dealt
out as:

* test members (``n_members``): planted whole, ``dup`` copies cycling through
  :func:`~blackbox_mia.canary.config.dup_levels` (1, 2, 4, 8): truth 1;
* held-out test documents (``n_nonmembers``): never trained on: truth 0;
* partly planted test documents (``doc_partial``): one contiguous run of a quarter, half or
  three quarters of their problems (:data:`PARTIAL_FRACTIONS`, rounded to whole problems) is
  planted, the run's position seeded; the (fraction, dup) pairs cycle so every pair occurs;
* validation documents (``doc_validation`` planted whole, ``doc_validation`` held out), for the
  threshold, disjoint from the test documents.

Each planted copy is one training document (the whole document, or the planted run), so a
planted document is seen as it is read, windowed by the recipe of :mod:`.train`. The truth of a
document is its ``planted_fraction`` (planted problems / problems) and ``planted_word_fraction``
(whitespace-separated words, what a chunk-level rate estimates).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

from ..datasets import Item
from ..types import BlackboxMIAError
from .config import CanaryConfig, dup_levels

ITEM_SEPARATOR = "\n\n"
PARTIAL_FRACTIONS = (0.25, 0.5, 0.75)
DOCUMENTS_FILE = "documents.jsonl"
VALIDATION_FILE = "documents_validation.jsonl"
TEST, VALIDATION = "test", "validation"


@dataclass(frozen=True)
class CanaryDocument:
    """One document of the document canary.

    Attributes:
        doc_id: ``doc-NNN`` (test file) or ``val-NNN`` (validation file); ids say nothing about
            the truth, and the files list documents in a seeded random order.
        split: ``test`` or ``validation``.
        kind: ``member`` (planted whole), ``heldout`` (never trained on) or ``partial``.
        items: the GSM8K test problems, in document order.
        planted: per item, whether it was planted (a contiguous run for ``partial``).
        dup: copies of the planted part in the training corpus (0 for ``heldout``).
    """

    doc_id: str
    split: str
    kind: str
    items: tuple[Item, ...]
    planted: tuple[bool, ...]
    dup: int

    @property
    def text(self) -> str:
        """The document: its problems' texts joined by :data:`ITEM_SEPARATOR`."""
        return ITEM_SEPARATOR.join(item.text for item in self.items)

    @property
    def label(self) -> int:
        """1 when any of it was planted, else 0."""
        return int(any(self.planted))

    def training_texts(self) -> list[str]:
        """The corpus texts it contributes: ``dup`` copies of its planted run (none when held out)."""
        run = ITEM_SEPARATOR.join(item.text for item, p in zip(self.items, self.planted) if p)
        return [run] * self.dup if run else []

    def record(self) -> dict:
        """Its manifest entry: ``doc_id, split, kind, items`` (ids), ``planted_items`` (ids),
        ``planted_fraction`` (problems), ``planted_word_fraction`` (whitespace words), ``n_words``, ``dup``."""
        words = [len(item.text.split()) for item in self.items]
        planted_words = sum(w for w, p in zip(words, self.planted) if p)
        return {
            "doc_id": self.doc_id,
            "split": self.split,
            "kind": self.kind,
            "items": [item.id for item in self.items],
            "planted_items": [item.id for item, p in zip(self.items, self.planted) if p],
            "planted_fraction": sum(self.planted) / len(self.planted),
            "planted_word_fraction": planted_words / sum(words),
            "n_words": sum(words),
            "dup": self.dup,
        }


def n_documents(config: CanaryConfig) -> int:
    """Documents the configuration asks for (test and validation)."""
    return config.n_members + config.n_nonmembers + config.doc_partial + 2 * config.doc_validation


def partial_run(n_items: int, fraction: float) -> int:
    """Problems planted in a partial document of ``n_items``: ``round(fraction * n_items)``
    kept within 1 .. n_items - 1, so the document is neither held out nor whole."""
    return min(n_items - 1, max(1, round(fraction * n_items)))


def plan_documents(config: CanaryConfig, items: list[Item], rng: random.Random) -> list[CanaryDocument]:
    """The documents of a document canary (test documents first, then validation), from the
    planted dataset's ``items`` (GSM8K test); uses ``rng`` for the block order, the partial runs'
    positions and the order of the files.

    Raises:
        BlackboxMIAError: more documents than the dataset has blocks of ``doc_items`` problems.
    """
    size = config.doc_items
    blocks = [tuple(items[start : start + size]) for start in range(0, len(items) - size + 1, size)]
    if n_documents(config) > len(blocks):
        raise BlackboxMIAError(
            f"canary: {n_documents(config)} documents of {size} problems exceed the {len(blocks)} "
            f"blocks of {len(items)} GSM8K test problems"
        )
    rng.shuffle(blocks)
    deal = iter(blocks)
    levels = dup_levels(config.dup)
    test: list[tuple] = []  # (kind, items, planted, dup)
    for i in range(config.n_members):
        test.append(("member", next(deal), (True,) * size, levels[i % len(levels)]))
    for _ in range(config.n_nonmembers):
        test.append(("heldout", next(deal), (False,) * size, 0))
    for i in range(config.doc_partial):
        run = partial_run(size, PARTIAL_FRACTIONS[i % len(PARTIAL_FRACTIONS)])
        start = rng.randrange(size - run + 1)
        planted = tuple(start <= j < start + run for j in range(size))
        test.append(("partial", next(deal), planted, levels[(i // len(PARTIAL_FRACTIONS)) % len(levels)]))
    validation = [("member", next(deal), (True,) * size, levels[i % len(levels)]) for i in range(config.doc_validation)]
    validation += [("heldout", next(deal), (False,) * size, 0) for _ in range(config.doc_validation)]
    documents = []
    for split, prefix, plan in ((TEST, "doc", test), (VALIDATION, "val", validation)):
        rng.shuffle(plan)
        documents += [CanaryDocument(f"{prefix}-{n:03d}", split, *entry) for n, entry in enumerate(plan)]
    return documents


def write_documents(out_dir: Path, documents: list[CanaryDocument]) -> dict:
    """Write the test and validation documents as JSON Lines ``{"doc_id", "text", "label"}``
    (what ``bbmia documents`` reads) into ``out_dir``.

    Returns:
        The manifest entries: ``documents_file`` and ``validation_file`` (names in ``out_dir``),
        ``documents`` (every document's :meth:`CanaryDocument.record`).
    """
    for split, name in ((TEST, DOCUMENTS_FILE), (VALIDATION, VALIDATION_FILE)):
        with open(out_dir / name, "w", encoding="utf-8") as f:
            f.writelines(
                json.dumps({"doc_id": d.doc_id, "text": d.text, "label": d.label}, ensure_ascii=False) + "\n"
                for d in documents
                if d.split == split
            )
    return {"documents_file": DOCUMENTS_FILE, "validation_file": VALIDATION_FILE,
            "documents": [d.record() for d in documents]}  # fmt: skip
