"""Datasets: the shipped benchmarks, user data files and Hugging Face data sets, as lists of :class:`Item`.

A leaf: trained canaries' specs (``canary`` / ``canary:PATH``) are resolved in
:mod:`blackbox_mia.canary.dataset`, whose :func:`~blackbox_mia.canary.dataset.load_items` takes
every spec and is the entry point of the commands and audits. Modules: :mod:`.items` (Item,
Dataset), :mod:`.formats` (text formats and item builders), :mod:`.registry` (the named
datasets, data files), :mod:`.files` (data files by suffix), :mod:`.fields` (which field is the
text, label, id), :mod:`.huggingface` (``hf:``, ``mimir:``, ``wikimia:`` specs).
"""

from .fields import Fields
from .formats import aqua_text, gsm8k_text
from .items import Dataset, Item, file_sha256
from .registry import (
    DATA_DIR,
    NAMED,
    limit_items,
    load_shipped_or_jsonl,
    read_jsonl,
)

__all__ = [
    "DATA_DIR", "NAMED", "Dataset", "Fields", "Item", "aqua_text", "file_sha256", "gsm8k_text", "limit_items",
    "load_shipped_or_jsonl", "read_jsonl",
]
