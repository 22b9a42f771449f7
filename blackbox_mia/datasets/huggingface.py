"""Data sets of the Hugging Face Datasets library (extra ``datasets``), and MIMIR and WikiMIA as published.

Specs (each may end in ``?text_field=...&label_field=...&id_field=...``, :mod:`.fields`):

* ``hf:NAME[:CONFIG][:SPLIT]``: ``datasets.load_dataset(NAME, CONFIG)``'s split SPLIT, from the
  local Hugging Face cache (or the hub when online: ``HF_DATASETS_OFFLINE=1`` keeps it off), or
  NAME a local directory: ``save_to_disk`` output or a folder of Parquet / JSON / CSV files,
  ``hf:DIR[:SPLIT]``. ``hf:NAME::SPLIT`` gives a split without a config. Without SPLIT, the one
  split the data set has. Records as in a user file (``text`` or ``input``, ``label``, ``id``;
  default id ``{NAME's last part}-{row}``).
* ``mimir:DOMAIN[:SPLIT]`` (Duan et al. 2024, "Do Membership Inference Attacks Work on Large
  Language Models?"): ``iamgroot42/mimir``, config DOMAIN (:data:`MIMIR_DOMAINS`), split SPLIT
  (default ``ngram_13_0.8``). Each row holds a ``member`` and a ``nonmember`` text, as MIMIR's
  own loader reads them (``ds["member"]``, ``ds["nonmember"]``): every member text (label 1,
  id ``mimir-{DOMAIN}-{SPLIT}-member-{row}``), then every non-member text (label 0, ``...-nonmember-{row}``).
  DOMAIN may be a local directory holding such splits (its name is the domain in the ids).
* ``wikimia:LENGTH`` (Shi et al. 2024, "Detecting Pretraining Data from Large Language
  Models"): ``swj0419/WikiMIA``, split ``WikiMIA_length{LENGTH}`` (:data:`WIKIMIA_LENGTHS`), as
  the Min-K% loader reads it: text ``input``, ``label`` 1 = member; id ``wikimia{LENGTH}-{row}``
  (the shipped ``wikimia64`` has the same ids). ``wikimia:DIR:LENGTH`` reads a local copy.

Data that needs the network while it is off fails in one line naming ``HF_DATASETS_OFFLINE``
and the cache; a split that does not exist, in one line listing those that do.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from ..types import BlackboxMIAError
from .fields import Fields, split_fields, with_fields
from .formats import build_items, mimir_item, user_item, wikimia_item
from .items import Dataset, Item

HF, MIMIR, WIKIMIA = "hf", "mimir", "wikimia"
"""The prefixes of the specs read here."""

MIMIR_HUB = "iamgroot42/mimir"
MIMIR_DOMAINS = ("arxiv", "dm_mathematics", "github", "hackernews", "pile_cc", "pubmed_central", "wikipedia_(en)",
                 "full_pile", "c4", "temporal_arxiv", "temporal_wiki")
"""MIMIR's configs (its data set card): the Pile's domains, then two more sources and two temporal shifts."""
MIMIR_DEFAULT_SPLIT = "ngram_13_0.8"
"""The paper's main setting: non-members with at most 80% 13-gram overlap with the training data."""

WIKIMIA_HUB = "swj0419/WikiMIA"
WIKIMIA_LENGTHS = (32, 64, 128, 256)
"""WikiMIA's length subsets (words per text), its splits ``WikiMIA_length{L}``."""


def is_hf_spec(spec: str) -> bool:
    """True for the specs read here: ``hf:...``, ``mimir:...``, ``wikimia:...``."""
    return spec.partition(":")[0] in (HF, MIMIR, WIKIMIA) and ":" in spec


def load_hf(spec: str, fields: Fields = Fields()) -> Dataset:
    """The items of an ``hf:``, ``mimir:`` or ``wikimia:`` spec (module docstring).

    Args:
        spec: the spec, optionally with its field names after ``?``.
        fields: field names of an ``hf:`` spec's records (with those of the spec's ``?`` part).

    Returns:
        A :class:`Dataset` named by the canonical spec, ``source`` the local directory or
        ``hf:NAME[:CONFIG]``, ``sha256`` of the records read (each as one line of sorted-key
        JSON: the same data gives the same hash wherever it is stored), ``format`` ``hf``.

    Raises:
        BlackboxMIAError: the ``datasets`` library missing, a malformed spec, an unknown MIMIR
            domain or WikiMIA length, data that needs the network while it is off, a split
            that does not exist, or what a user file's records raise (a missing column...).
    """
    source, own = split_fields(with_fields(spec, fields))
    prefix, _, rest = source.partition(":")
    if prefix == HF:
        name, config, split = _hf_parts(rest, source)
        rows, where = _load_split(name, config, split, source)
        stem = Path(name).name if Path(name).expanduser().is_dir() else name.rsplit("/", 1)[-1]
        items = build_items(_numbered(rows, where), user_item(stem, own), where)
    elif own != Fields():
        raise BlackboxMIAError(f"{spec}: {prefix} data has its own fields; field names are for hf: and files")
    elif prefix == MIMIR:
        items, where = _mimir(rest, source)
    else:
        items, where = _wikimia(rest, source)
    digest = hashlib.sha256()
    for item in items:
        digest.update(json.dumps([item.id, item.text, item.label], ensure_ascii=False).encode() + b"\n")
    return Dataset(with_fields(source, own), items, where, digest.hexdigest(), format=HF)


def _numbered(rows: Iterable[dict], where: str) -> Iterator[tuple[str, dict]]:
    """``(where: row i, row)`` for the rows of a split."""
    return ((f"{where}: row {i}", row) for i, row in enumerate(rows))


def _hf_parts(rest: str, spec: str) -> tuple[str, str | None, str | None]:
    """``(name, config, split)`` of ``hf:NAME[:CONFIG][:SPLIT]``; a local directory takes no config."""
    parts = rest.split(":")
    if not parts[0] or len(parts) > 3:
        raise BlackboxMIAError(f"{spec}: expected hf:NAME[:CONFIG][:SPLIT] or hf:DIRECTORY[:SPLIT]")
    if Path(parts[0]).expanduser().is_dir():
        if len(parts) > 2:
            raise BlackboxMIAError(f"{spec}: a local directory takes a split, not a config: hf:DIRECTORY[:SPLIT]")
        return str(Path(parts[0]).expanduser()), None, parts[1] if len(parts) == 2 else None
    name, config, split = parts + [None] * (3 - len(parts))
    return name, config or None, split or None


def _mimir(rest: str, spec: str) -> tuple[list[Item], str]:
    """MIMIR's members then non-members of ``DOMAIN[:SPLIT]`` (DOMAIN: a config or a directory)."""
    domain, _, split = rest.rpartition(":") if rest.count(":") else (rest, "", "")
    split = split or MIMIR_DEFAULT_SPLIT
    local = Path(domain).expanduser()
    if local.is_dir():
        rows, where = _load_split(str(local), None, split, spec)
        domain = local.name
    elif domain in MIMIR_DOMAINS:
        rows, where = _load_split(MIMIR_HUB, domain, split, spec)
    else:
        raise BlackboxMIAError(f"{spec}: unknown MIMIR domain {domain!r} (domains: {', '.join(MIMIR_DOMAINS)}; "
                               "or a local directory)")
    rows = list(rows)
    records = _numbered(rows + rows, where)  # every member text, then every non-member text
    return build_items(records, mimir_item(f"{MIMIR}-{domain}-{split}", len(rows)), where), where


def _wikimia(rest: str, spec: str) -> tuple[list[Item], str]:
    """WikiMIA's rows of ``[DIR:]LENGTH`` as the Min-K% loader reads them."""
    directory, _, length = rest.rpartition(":")
    if not length.isdigit() or int(length) not in WIKIMIA_LENGTHS:
        raise BlackboxMIAError(f"{spec}: WikiMIA's lengths are {', '.join(map(str, WIKIMIA_LENGTHS))}, got {length!r}")
    name = str(Path(directory).expanduser()) if directory else WIKIMIA_HUB
    rows, where = _load_split(name, None, f"WikiMIA_length{length}", spec)
    return build_items(_numbered(rows, where), wikimia_item(f"{WIKIMIA}{length}"), where), where


def _load_split(name: str, config: str | None, split: str | None, spec: str) -> tuple[Iterator[dict], str]:
    """The rows of one split and where they are from (``hf:NAME[:CONFIG]:SPLIT`` or the
    directory): ``name`` a local directory (``save_to_disk`` output, else a folder of data
    files) or a data set of the hub (its cache when offline).

    Raises:
        BlackboxMIAError: see :func:`load_hf`.
    """
    try:
        import datasets
    except ImportError as exc:
        raise BlackboxMIAError(f"{spec}: Hugging Face data sets need the datasets library: "
                               "pip install 'blackbox_mia[datasets]'") from exc
    local = Path(name)
    try:
        if local.is_dir() and ((local / "dataset_dict.json").is_file() or (local / "state.json").is_file()):
            loaded = datasets.load_from_disk(str(local))
        else:
            loaded = datasets.load_dataset(name, config)
    except datasets.exceptions.DatasetNotFoundError as exc:
        raise BlackboxMIAError(f"{spec}: no data set {name!r} on the hub, or no access to it (a gated one needs a "
                               f"login: hf auth login) ({' '.join(str(exc).split())})") from exc
    except ConnectionError as exc:
        offline = ", ".join(f"{var}={os.environ.get(var, 'unset')}" for var in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE"))
        raise BlackboxMIAError(
            f"{spec}: not in the local Hugging Face cache ({datasets.config.HF_DATASETS_CACHE}) and the hub cannot be "
            f"reached ({offline}): load it once online, or give a local directory "
            f"({' '.join(str(exc).split())})") from exc
    except (OSError, ValueError, RuntimeError) as exc:  # no such config, no data files, a loading script...
        raise BlackboxMIAError(f"{spec}: cannot load {name}: {' '.join(str(exc).split())}") from exc
    if isinstance(loaded, datasets.Dataset):  # save_to_disk of one split
        if split is not None:
            raise BlackboxMIAError(f"{spec}: {name} holds one split, not {split!r}: leave the split out")
        return iter(loaded), str(local)
    splits = list(loaded)
    if split is None and len(splits) == 1:
        split = splits[0]
    if split not in splits:
        what = "no split given" if split is None else f"no split {split!r}"
        raise BlackboxMIAError(f"{spec}: {what}; the splits are {', '.join(splits)}")
    where = str(local) if local.is_dir() else f"{HF}:{name}" + (f":{config}" if config else "")
    return iter(loaded[split]), f"{where}:{split}"
