"""What determines a canary model: :class:`CanaryConfig`, its corpus, its hash, and its default directory."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from ..config import cache_root
from ..types import BlackboxMIAError

# Bump when the training recipe changes, so cached models trained by the old recipe are not reused.
RECIPE_VERSION = 1


@dataclass(frozen=True)
class CorpusSource:
    """Where the texts of one canary corpus come from.

    Attributes:
        planted: dataset spec whose items become the members and the non-members.
        background: dataset spec of the background; ``None``: the background is drawn from
            ``planted`` too, disjoint from the members and non-members.
        noun: what ``planted``'s items are, for messages ("GSM8K test problems").
        background_noun: what the background's items are ("GSM8K train problems").
        defaults: values of the :class:`CanaryConfig` fields left ``None`` (``n_background``, ``epochs``).
    """

    planted: str
    background: str | None
    noun: str
    background_noun: str
    defaults: dict = field(default_factory=dict)


DEFAULT_CORPUS = "gsm8k"

# corpus name -> its source. GSM8K: members and non-members from the 1,319 test problems, the
# background from the 7,473 train problems. ja: the 1,807 Japanese paragraphs of
# ``ja-debian-docs`` split three ways: 200 members, 200 non-members, the other 1,407 as background.
# Paragraph lengths with the default ja canary's BPE (4096 tokens, BOS included): median 60,
# 90th percentile 110, max 301 tokens; the 107 paragraphs longer than block_size = 128 are cut
# into the scoring windows (stride 64, see .train), never truncated. ja trains 4 epochs (about 400
# steps, as GSM8K's 2): after 2 its loss is still 7.0 nats/token and loss AUC 0.60 (0.85 after 4).
CORPORA: dict[str, CorpusSource] = {
    DEFAULT_CORPUS: CorpusSource("gsm8k:test", "gsm8k:train", "GSM8K test problems", "GSM8K train problems",
                                 {"n_background": 2000, "epochs": 2}),
    "ja": CorpusSource("ja-debian-docs", None, "ja-debian-docs paragraphs", "ja-debian-docs paragraphs",
                       {"n_background": 1407, "epochs": 4}),
}  # fmt: skip


@dataclass(frozen=True)
class CanaryConfig:
    """Everything that determines a canary model.

    Attributes:
        corpus: a name in :data:`CORPORA`: ``gsm8k`` (planted GSM8K test problems among GSM8K
            train problems) or ``ja`` (planted Japanese paragraphs among the other paragraphs
            of ``ja-debian-docs``).
        n_background: background items in the corpus (seeded sample); ``None`` (the default)
            takes the corpus's default (``CORPORA[corpus].defaults``: 2000 GSM8K train
            problems; 1407 Japanese paragraphs, all those neither members nor non-members at
            the default sizes).
        n_members: items planted in the corpus (label 1).
        n_nonmembers: other items of the same source, never seen (label 0).
        dup: copies of each member in the corpus.
        seed: seeds the splits, the corpus order, the initial weights and the batch order.
        vocab_size: BPE vocabulary size (tokens), including ``<|endoftext|>``.
        n_layer, n_embd, n_head: GPT-2 shape.
        block_size: tokens per training window, and the model's context (``n_positions``).
        epochs: passes over the corpus; ``None`` (the default) takes the corpus's default (2
            for GSM8K, 4 for ja).
        lr: peak AdamW learning rate.
        batch_size: windows per optimisation step.
        warmup_frac: fraction of the steps with a linear warm-up from 0 to ``lr``.
        min_lr_frac: the cosine decay ends at ``min_lr_frac * lr``.
        weight_decay: AdamW weight decay.
    """

    corpus: str = DEFAULT_CORPUS
    n_background: int | None = None
    n_members: int = 200
    n_nonmembers: int = 200
    dup: int = 8
    seed: int = 0
    vocab_size: int = 4096
    n_layer: int = 2
    n_embd: int = 128
    n_head: int = 4
    block_size: int = 128
    epochs: int | None = None
    lr: float = 3e-3
    batch_size: int = 32
    warmup_frac: float = 0.05
    min_lr_frac: float = 0.1
    weight_decay: float = 0.0

    def __post_init__(self) -> None:
        """Fill the fields left ``None`` with the corpus's defaults.

        Raises:
            BlackboxMIAError: an unknown corpus.
        """
        if self.corpus not in CORPORA:
            raise BlackboxMIAError(f"canary: unknown corpus {self.corpus!r}; corpora: {', '.join(CORPORA)}")
        for name, value in CORPORA[self.corpus].defaults.items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, value)

    @property
    def source(self) -> CorpusSource:
        """Where this canary's texts come from (``CORPORA[corpus]``)."""
        return CORPORA[self.corpus]

    def validate(self) -> None:
        """Raise :class:`BlackboxMIAError` for an impossible configuration."""
        positive = ("n_members", "n_nonmembers", "dup", "vocab_size", "n_layer", "n_embd", "n_head", "epochs", "batch_size")
        for name in positive:
            if getattr(self, name) < 1:
                raise BlackboxMIAError(f"canary: {name} must be at least 1, got {getattr(self, name)}")
        if self.n_background < 0:
            raise BlackboxMIAError(f"canary: n_background must be >= 0, got {self.n_background}")
        if self.block_size < 2:
            raise BlackboxMIAError(f"canary: block_size must be at least 2 tokens, got {self.block_size}")
        if self.n_embd % self.n_head:
            raise BlackboxMIAError(f"canary: n_embd ({self.n_embd}) must be a multiple of n_head ({self.n_head})")
        if not (self.lr > 0 and 0 <= self.warmup_frac < 1 and 0 <= self.min_lr_frac <= 1 and self.weight_decay >= 0):
            raise BlackboxMIAError("canary: need lr > 0, 0 <= warmup_frac < 1, 0 <= min_lr_frac <= 1, weight_decay >= 0")

    def short_hash(self) -> str:
        """12 hex digits identifying this configuration and the recipe version.

        The default corpus is left out of the hashed fields, so GSM8K canaries keep the hash
        (and the directory) they had before the corpus could be chosen.
        """
        identity = asdict(self)
        if self.corpus == DEFAULT_CORPUS:
            del identity["corpus"]
        blob = json.dumps({"recipe": RECIPE_VERSION, **identity}, sort_keys=True)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:12]


def canary_dir(config: CanaryConfig, cache: str | os.PathLike | None = None) -> Path:
    """Default model directory: ``<cache root>/canary/<config.short_hash()>`` (not created)."""
    return cache_root(cache) / "canary" / config.short_hash()


def config_fields() -> list[str]:
    """Names of the :class:`CanaryConfig` fields, in order (the CLI builds one option per field)."""
    return [f.name for f in fields(CanaryConfig)]
