"""The units every dataset is made of: :class:`Item` (one text) and :class:`Dataset` (one source file)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Item:
    """One text to score.

    Attributes:
        id: unique within its dataset (``gsm8k-test-17``).
        text: the text scored.
        label: 1 = member, 0 = non-member, ``None`` = unknown.
        meta: the raw record's other fields (GSM8K: question, answer; AQuA: question, options,
            rationale, correct; WikiMIA: hf_index, ...).
    """

    id: str
    text: str
    label: int | None = None
    meta: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Dataset:
    """Items of one source file.

    Attributes:
        name: the canonical spec (``gsm8k:test``) or the file path for user files.
        items: the items, in file order.
        source: path of the source file.
        sha256: hex sha256 of the source file's bytes (a Hugging Face dataset: of its
            records, :func:`blackbox_mia.datasets.huggingface.load_hf`).
        format: how a user's data was read (``csv``, ``jsonl (gzip)``, ``hf``...); ``None``
            for a shipped dataset.
    """

    name: str
    items: list[Item]
    source: str
    sha256: str
    format: str | None = None

    @property
    def labelled(self) -> bool:
        """True when every item carries a membership label."""
        return all(item.label is not None for item in self.items)

    def __len__(self) -> int:
        return len(self.items)

    def metadata(self) -> dict:
        """``{"name", "source", "sha256"}`` and the ``format`` of a user's data: what a run's
        configuration records of its dataset."""
        return {"name": self.name, "source": self.source, "sha256": self.sha256,
                **({"format": self.format} if self.format else {})}


def file_sha256(path: Path) -> str:
    """Hex sha256 of a file's bytes."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()
