"""Canary dataset specs: the labelled members and non-members of a trained canary model.

``canary`` names the default canary, ``canary_dir(CanaryConfig(), cache_dir)``: the directory
``<cache root>/canary/<config hash>`` that ``bbmia canary train`` (and ``bbmia demo``) write,
where the cache root is ``cache_dir``, else ``$BBMIA_CACHE_DIR``, else ``./cache``
(:func:`blackbox_mia.config.cache_root`). ``canary:PATH`` names the model directory PATH as
given (``~`` expanded; a relative PATH is relative to the working directory, not the cache),
a canary of any corpus (``--corpus ja``: its items are ``ja-debian-docs`` paragraphs).

This is the only place that resolves canary specs, and :func:`load_any_dataset` / :func:`load_items`
here take every dataset spec (the others go to :mod:`blackbox_mia.datasets`, which knows
nothing of canaries): the commands' and audits' entry points.
"""

from __future__ import annotations

import os
from pathlib import Path

from .. import datasets
from ..datasets import Dataset, Item, file_sha256, limit_items
from ..datasets.fields import Fields, split_fields
from ..datasets.huggingface import is_hf_spec, load_hf
from ..datasets.registry import dataset_not_found
from ..types import BlackboxMIAError
from .config import CanaryConfig, canary_dir
from .manifest import MANIFEST, canary_items

CANARY = "canary"


def dataset_names() -> list[str]:
    """Every dataset spec that is a name: ``canary``, ``canary:PATH`` and the shipped datasets
    (:data:`blackbox_mia.datasets.NAMED`, aliases included); anything else is a JSONL path."""
    return [CANARY, f"{CANARY}:PATH", *datasets.NAMED]


def dataset_help() -> str:
    """The help of a DATASET argument, from :func:`dataset_names`."""
    return (", ".join(dataset_names()) + ", hf:NAME[:CONFIG][:SPLIT] or hf:DIRECTORY[:SPLIT], mimir:DOMAIN[:SPLIT], "
            "wikimia:LENGTH, or a data file: .jsonl, .json, .csv, .parquet, each also .gz (docs/datasets.md)")


def is_canary_spec(spec: str) -> bool:
    """True for ``canary`` and ``canary:PATH``."""
    return spec == CANARY or spec.startswith(CANARY + ":")


def canary_spec_path(spec: str, cache_dir: str | os.PathLike | None = None) -> Path:
    """The model directory a canary spec names (see the module docstring; not created).

    Raises:
        BlackboxMIAError: ``spec`` is not a canary spec, or ``canary:`` without a path.
    """
    if spec == CANARY:
        return canary_dir(CanaryConfig(), cache_dir)
    if not is_canary_spec(spec) or not spec[len(CANARY) + 1 :]:
        raise BlackboxMIAError(f"not a canary spec: {spec!r} (expected {CANARY} or {CANARY}:PATH)")
    return Path(spec[len(CANARY) + 1 :]).expanduser()


def load_canary_dataset(spec: str, cache_dir: str | os.PathLike | None = None) -> Dataset:
    """The members (label 1) then non-members (label 0) of a trained canary, as a :class:`Dataset`.

    ``name`` is ``canary:<model dir>``, ``source`` the manifest and ``sha256`` the manifest's
    (it fixes the membership split).

    Args:
        spec: ``canary`` or ``canary:PATH``.
        cache_dir: the cache root override for ``canary`` (see the module docstring).

    Raises:
        BlackboxMIAError: no complete canary there (train it with ``bbmia canary train``), or
            the shipped file of its planted dataset (GSM8K test, ``ja-debian-docs``) differs
            from the one it was trained on.
    """
    path = canary_spec_path(spec, cache_dir)
    if not (path / MANIFEST).is_file():
        hint = "bbmia canary train" if spec == CANARY else f"bbmia canary train --out {path}"
        raise BlackboxMIAError(f"no trained canary at {path} (no {MANIFEST}); train one with: {hint}")
    items = canary_items(path)
    return Dataset(f"{CANARY}:{path}", items, str(path / MANIFEST), file_sha256(path / MANIFEST))


def load_any_dataset(spec: str, cache_dir: str | os.PathLike | None = None, fields: Fields = Fields()) -> Dataset:
    """Load any dataset spec: ``canary`` / ``canary:PATH`` (:func:`load_canary_dataset`), a
    Hugging Face spec (:func:`blackbox_mia.datasets.huggingface.load_hf`), else a named dataset
    or a data file (:func:`blackbox_mia.datasets.load_shipped_or_jsonl`).

    Args:
        spec: a canary spec, ``hf:`` / ``mimir:`` / ``wikimia:`` spec, a shipped name or a data
            file's path; a file or ``hf:`` spec may end in ``?`` and its field names.
        cache_dir: cache root override, used only by ``canary`` (the default canary lives in
            ``<cache root>/canary/<config hash>``); None = ``$BBMIA_CACHE_DIR``, else ``./cache``.
        fields: the text, label and id fields of a file's or ``hf:`` data set's records.

    Raises:
        BlackboxMIAError: no such file nor named dataset (the message lists the names, ``canary``
            among them); see :func:`blackbox_mia.datasets.load_shipped_or_jsonl`; for a canary spec: no
            trained canary there.
    """
    if is_canary_spec(spec) or spec in datasets.NAMED:
        if fields != Fields() or "?" in spec:
            raise BlackboxMIAError(f"{spec}: field names are for data files and hf: data sets; {spec} has its own")
        return load_canary_dataset(spec, cache_dir) if is_canary_spec(spec) else datasets.load_shipped_or_jsonl(spec)
    if is_hf_spec(spec):
        return load_hf(spec, fields)
    source = Path(split_fields(spec)[0]).expanduser()
    if not source.is_file():
        raise dataset_not_found(source, dataset_names())
    return datasets.load_shipped_or_jsonl(spec, fields)


def load_items(spec: str, limit: int | None = None, cache_dir: str | os.PathLike | None = None,
               fields: Fields = Fields()) -> tuple[list[Item], dict]:
    """Items of any dataset spec (the first ``limit``), and the dataset's metadata for the config.

    Args:
        spec: any spec :func:`load_any_dataset` takes.
        limit: keep only the first ``limit`` items (None = all).
        cache_dir: cache root override for ``canary`` (see :func:`load_any_dataset`).
        fields: the text, label and id fields of a file's or ``hf:`` data set's records.

    Returns:
        ``(items, {"name", "source", "sha256"} and a user file's "format")``.

    Raises:
        BlackboxMIAError: an unreadable dataset, no trained canary there, or ``limit`` < 1.
    """

    dataset = load_any_dataset(spec, cache_dir, fields)
    return limit_items(dataset.items, limit), dataset.metadata()
