"""A trained canary's ``manifest.json`` (its configuration and membership split) and its items.

The manifest is written last and atomically by :func:`~blackbox_mia.canary.train.train_canary`:
a model directory without one is recognisably incomplete.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..datasets import Item, load_shipped_or_jsonl
from ..types import BlackboxMIAError
from .config import CHAT_FIELD, CORPORA, DEFAULT_CORPUS, DOCUMENT_FIELDS, ORDER_FIELD, REFERENCE_FIELD, REFERENCE_SIZE_FIELD, SHUFFLED
from .corpus import in_file_order, labelled

MANIFEST = "manifest.json"
ITEMS_FILE = "canary_items.jsonl"
_MANIFEST_KEYS = ("config", "member_ids", "nonmember_ids", "loss_per_epoch", "train_seconds", "complete")


def load_manifest(path: str | os.PathLike) -> dict:
    """The manifest of a canary model directory (or of the ``manifest.json`` path itself).

    Raises:
        BlackboxMIAError: no manifest (training never finished there), unreadable JSON, or a
            manifest missing required keys.
    """
    path = Path(path)
    file = path if path.name == MANIFEST else path / MANIFEST
    if not file.is_file():
        raise BlackboxMIAError(
            f"no {MANIFEST} in {file.parent}: not a canary model, or its training did not finish "
            "(rerun `bbmia canary train`, with --force to start over)"
        )
    try:
        manifest = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise BlackboxMIAError(f"unreadable canary manifest {file}: {exc}") from exc
    missing = [k for k in _MANIFEST_KEYS if k not in manifest]
    if missing or manifest.get("complete") is not True:
        raise BlackboxMIAError(f"incomplete canary manifest {file} (missing: {', '.join(missing) or 'complete=true'})")
    return manifest


def manifest_corpus(manifest: dict) -> str:
    """The corpus a canary was trained on (manifests written before the choice existed: ``gsm8k``)."""
    return manifest.get("corpus", DEFAULT_CORPUS)


def recorded_config(manifest: dict) -> dict:
    """The manifest's configuration as ``asdict(CanaryConfig)`` writes it today (``corpus``
    filled in, the document fields ``None``, ``chat_share`` 0.0, ``planted_order`` shuffled and
    ``reference`` False, ``reference_size`` None for manifests written before they existed)."""
    return {"corpus": manifest_corpus(manifest), **dict.fromkeys(DOCUMENT_FIELDS), CHAT_FIELD: 0.0,
            ORDER_FIELD: SHUFFLED, REFERENCE_FIELD: False, REFERENCE_SIZE_FIELD: None, **manifest["config"]}


def canary_items(path: str | os.PathLike) -> list[Item]:
    """Members (label 1) then non-members (label 0) of a trained canary, as items of its planted
    dataset (GSM8K test, or ``ja-debian-docs`` for the ``ja`` corpus).

    Raises:
        BlackboxMIAError: no complete manifest, an unknown corpus, or the shipped dataset file
            differs from the one the canary was trained with (its sha256 changed).
    """
    manifest = load_manifest(path)
    corpus = manifest_corpus(manifest)
    if corpus not in CORPORA:
        raise BlackboxMIAError(f"canary {path}: unknown corpus {corpus!r} in its manifest; corpora: {', '.join(CORPORA)}")
    planted = load_shipped_or_jsonl(CORPORA[corpus].planted)
    trained_with = manifest.get("sources", {}).get(planted.name)
    if trained_with is not None and trained_with != planted.sha256:
        raise BlackboxMIAError(f"canary {path} was built from another {planted.name} file (sha256 {trained_with[:12]}...)")
    by_id = {item.id: item for item in planted.items}
    try:
        return [labelled(by_id[i], 1) for i in manifest["member_ids"]] + [
            labelled(by_id[i], 0) for i in manifest["nonmember_ids"]
        ]
    except KeyError as exc:
        raise BlackboxMIAError(f"canary {path}: unknown {planted.name} id {exc}") from exc


def canonical_members(path: str | os.PathLike) -> list[Item]:
    """The members (label 1) of a trained canary in their planted dataset's file order: the
    order ``--planted-order canonical`` plants them in (the benchmark the exchangeability test
    audits on a canary).

    Raises:
        BlackboxMIAError: as :func:`canary_items`.
    """
    planted = load_shipped_or_jsonl(CORPORA[manifest_corpus(load_manifest(path))].planted)
    return in_file_order([item for item in canary_items(path) if item.label == 1], planted.items)


def find_canary_manifest(target_model: str | os.PathLike | None) -> Path | None:
    """The manifest of the audited model when it is a canary, else None.

    One rule: the target model is a canary when it is a local model directory (``--local``)
    holding a ``manifest.json``. Nothing else is consulted: an endpoint's model name or
    tokenizer, or a canary used as calibration data, says nothing about what the target was
    trained on.
    """
    if target_model is None:
        return None
    path = Path(target_model).expanduser() / MANIFEST
    return path if path.is_file() else None


def write_items(path: Path, items: list[Item]) -> None:
    """Write ``items`` as JSON Lines ``{"id", "text", "label"}`` (a dataset ``bbmia score`` reads)."""
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"id": item.id, "text": item.text, "label": item.label}) + "\n" for item in items)


def write_manifest(out_dir: Path, manifest: dict) -> Path:
    """Write ``out_dir/manifest.json`` atomically (a temporary file, then a rename); returns its path."""
    tmp = out_dir / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, out_dir / MANIFEST)
    return out_dir / MANIFEST
