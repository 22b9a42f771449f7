"""Pieces shared by the commands: loading items, building backends, AUC tables."""

from __future__ import annotations

from collections.abc import Sequence

from ..backends.base import Backend
from ..datasets import Item, load_dataset
from ..scorers import REFERENCE, TARGET, Scorer
from ..types import BlackboxMIAError


def load_items(spec: str, limit: int | None = None) -> tuple[list[Item], dict]:
    """Items of a dataset spec (first ``limit``), and the dataset's metadata for the config."""
    ds = load_dataset(spec)
    items = ds.items[:limit] if limit else ds.items
    return items, {"name": ds.name, "source": ds.source, "sha256": ds.sha256, "n_items": len(items)}


def build_backends(
    *, local: str | None, ref: str | None = None, device: str | None = None, dtype: str = "auto", batch_tokens: int = 8192
) -> dict[str, Backend]:
    """``{"target": ..., "reference": ...}`` from command-line options.

    Raises:
        BlackboxMIAError: no target model given.
    """
    from ..backends.local import LocalBackend, LocalConfig

    if not local:
        raise BlackboxMIAError("no target model: pass --local PATH")

    def make(model: str) -> Backend:
        return LocalBackend(LocalConfig(model, device=device, dtype=dtype, max_batch_tokens=batch_tokens))

    backends = {TARGET: make(local)}
    if ref:
        backends[REFERENCE] = make(ref)
    return backends


def auc_by_scorer(rows, scorers: Sequence[Scorer]) -> dict[str, float]:
    """AUC of each scorer on labelled rows ({} when the rows carry no or one-class labels)."""
    from sklearn.metrics import roc_auc_score

    labelled = [r for r in rows if r.label is not None]
    labels = [r.label for r in labelled]
    if len(set(labels)) < 2:
        return {}
    return {s.label: float(roc_auc_score(labels, [r.scores[s.label] for r in labelled])) for s in scorers}


def format_auc_table(aucs: dict[str, float], rows) -> str:
    """A plain-text table: scorer, AUC."""
    n_members = sum(1 for r in rows if r.label == 1)
    n_non = sum(1 for r in rows if r.label == 0)
    width = max(len(k) for k in aucs) + 2
    lines = [f"{'scorer':<{width}}AUC   ({n_members} members, {n_non} non-members)"]
    lines += [f"{name:<{width}}{value:.3f}" for name, value in aucs.items()]
    return "\n".join(lines)
