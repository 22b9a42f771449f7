"""What determines a canary model: :class:`CanaryConfig`, its hash, and its default directory."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from ..config import cache_root
from ..types import BlackboxMIAError

# Bump when the training recipe changes, so cached models trained by the old recipe are not reused.
RECIPE_VERSION = 1


@dataclass(frozen=True)
class CanaryConfig:
    """Everything that determines a canary model.

    Attributes:
        n_background: GSM8K train problems in the corpus (seeded sample).
        n_members: GSM8K test problems planted in the corpus (label 1).
        n_nonmembers: other GSM8K test problems, never seen (label 0).
        dup: copies of each member in the corpus.
        seed: seeds the splits, the corpus order, the initial weights and the batch order.
        vocab_size: BPE vocabulary size (tokens), including ``<|endoftext|>``.
        n_layer, n_embd, n_head: GPT-2 shape.
        block_size: tokens per training window, and the model's context (``n_positions``).
        epochs: passes over the corpus.
        lr: peak AdamW learning rate.
        batch_size: windows per optimisation step.
        warmup_frac: fraction of the steps with a linear warm-up from 0 to ``lr``.
        min_lr_frac: the cosine decay ends at ``min_lr_frac * lr``.
        weight_decay: AdamW weight decay.
    """

    n_background: int = 2000
    n_members: int = 200
    n_nonmembers: int = 200
    dup: int = 8
    seed: int = 0
    vocab_size: int = 4096
    n_layer: int = 2
    n_embd: int = 128
    n_head: int = 4
    block_size: int = 128
    epochs: int = 2
    lr: float = 3e-3
    batch_size: int = 32
    warmup_frac: float = 0.05
    min_lr_frac: float = 0.1
    weight_decay: float = 0.0

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
        """12 hex digits identifying this configuration and the recipe version."""
        blob = json.dumps({"recipe": RECIPE_VERSION, **asdict(self)}, sort_keys=True)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:12]


def canary_dir(config: CanaryConfig, cache: str | os.PathLike | None = None) -> Path:
    """Default model directory: ``<cache root>/canary/<config.short_hash()>`` (not created)."""
    return cache_root(cache) / "canary" / config.short_hash()


def config_fields() -> list[str]:
    """Names of the :class:`CanaryConfig` fields, in order (the CLI builds one option per field)."""
    return [f.name for f in fields(CanaryConfig)]
