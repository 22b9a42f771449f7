"""Datasets: the shipped benchmarks, trained canaries and user JSONL files, as lists of :class:`Item`.

One registry (:mod:`.registry`) resolves every dataset spec; :func:`load_items` is the entry
point of the commands and audits. Modules: :mod:`.items` (Item, Dataset), :mod:`.formats`
(text formats and item builders), :mod:`.registry` (the named datasets, JSONL files, the spec
dispatch), :mod:`.canary` (``canary`` / ``canary:PATH`` specs, resolved in the cache root).
"""

from .canary import CANARY, canary_spec_path, is_canary_spec, load_canary_dataset
from .formats import aqua_text, gsm8k_text
from .items import Dataset, Item, file_sha256
from .registry import (
    DATA_DIR,
    NAMED,
    limit_items,
    load_dataset,
    load_items,
    read_jsonl,
)

__all__ = [
    "CANARY", "DATA_DIR", "NAMED", "Dataset", "Item", "aqua_text", "canary_spec_path", "file_sha256",
    "gsm8k_text", "is_canary_spec", "limit_items", "load_canary_dataset", "load_dataset", "load_items", "read_jsonl",
]
