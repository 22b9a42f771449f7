"""How a canary is unlearned (:class:`UnlearnConfig`, the settings of :func:`~.unlearn.unlearn_canary`):
the method, its schedule and the rule that picks the forget set."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass

from ..key_aliases import UNLEARN_CONFIG_KEYS
from ..option_names import named
from ..types import BlackboxMIAError

GRADIENT_ASCENT, ALTERNATIVE_LABELS = "gradient_ascent", "alternative_labels"
METHODS = (GRADIENT_ASCENT, ALTERNATIVE_LABELS)
ALL_MEMBERS, MEMORIZED = "members", "memorized"
FORGET_FROM = (ALL_MEMBERS, MEMORIZED)  # where a forget count N samples from


@dataclass(frozen=True)
class UnlearnConfig:
    """How a canary is unlearned.

    Attributes:
        steps: gradient-ascent steps (batches), cycling over the forget set's windows.
        lr: constant AdamW learning rate.
        batch_size: windows per step (fewer when the forget set has fewer).
        seed: seeds the forget sample (``forget`` as a count) and the batch order.
        retain_weight: weight of a retain term added to the ascent loss: KL(original ||
            current) per token (nats) on a batch of the kept members' windows each step (the
            "KL" unlearning baseline); 0 is pure gradient ascent.
        target_loss: gradient ascent only: a forget window whose loss (nats/token) already
            exceeds this is left out of the ascent (it counts in the batch's token total but
            adds no gradient); None: never.
        method: ``gradient_ascent`` or ``alternative_labels`` (see the module docstring).
        alpha: alternative labels: the weight of the reinforced model's boost taken away from
            the base logits (> 0).
        forget_from: ``members`` (a count N samples all members) or ``memorized`` (only the
            members memorized before unlearning, :func:`memorized_members`; a file of ids must
            name only those).
        memorized_target_fpr: the target non-member false-positive rate of the "memorized
            before" rule (its threshold is the non-members' ``1 - memorized_target_fpr``
            quantile of the loss score).
    """

    steps: int = 20
    lr: float = 1e-4
    batch_size: int = 8
    seed: int = 0
    retain_weight: float = 0.0
    target_loss: float | None = None
    method: str = GRADIENT_ASCENT
    alpha: float = 1.0
    forget_from: str = ALL_MEMBERS
    memorized_target_fpr: float = 0.05

    def validate(self) -> None:
        """Raise :class:`BlackboxMIAError` naming the option of an impossible value."""
        for name in ("steps", "batch_size"):
            if isinstance(getattr(self, name), bool) or getattr(self, name) < 1:
                raise BlackboxMIAError(f"{named(name)} must be at least 1, got {getattr(self, name)}")
        if not self.lr > 0:
            raise BlackboxMIAError(f"{named('lr')} must be > 0, got {self.lr}")
        if not self.retain_weight >= 0:
            raise BlackboxMIAError(f"{named('retain_weight')} must be >= 0, got {self.retain_weight}")
        if self.target_loss is not None and not self.target_loss > 0:
            raise BlackboxMIAError(f"{named('target_loss')} must be > 0 nats/token, got {self.target_loss}")
        if self.method not in METHODS:
            raise BlackboxMIAError(f"{named('method')} must be one of {', '.join(METHODS)}, got {self.method!r}")
        if self.target_loss is not None and self.method != GRADIENT_ASCENT:
            raise BlackboxMIAError(f"{named('target_loss')} applies to {GRADIENT_ASCENT} only, not {self.method}")
        if not (math.isfinite(self.alpha) and self.alpha > 0):
            raise BlackboxMIAError(f"{named('alpha')} must be > 0, got {self.alpha}")
        if self.forget_from not in FORGET_FROM:
            raise BlackboxMIAError(f"{named('forget_from')} must be one of {', '.join(FORGET_FROM)}, got {self.forget_from!r}")
        if not 0 < self.memorized_target_fpr < 1:
            raise BlackboxMIAError(f"{named('memorized_target_fpr')} must lie in (0, 1), got {self.memorized_target_fpr}")

    def short_hash(self, forget_ids: list[str]) -> str:
        """12 hex digits identifying these settings and the forget set. Each setting is hashed
        under the name it had when the hash was introduced (``memorized_fpr``, renamed
        ``memorized_target_fpr``: docs/migration.md), so an unlearned canary keeps its directory."""
        settings = {UNLEARN_CONFIG_KEYS.get(name, name): value for name, value in asdict(self).items()}
        blob = json.dumps({**settings, "forget": forget_ids}, sort_keys=True)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:12]
