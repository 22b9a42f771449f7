"""Datasets: the shipped benchmarks and user data files, as lists of :class:`Item`.

A dataset *spec* is one of the shipped names below, ``canary`` / ``canary:PATH`` (a trained
canary's members and non-members, resolved by :mod:`blackbox_mia.canary.dataset`, whose
:func:`~blackbox_mia.canary.dataset.load_items` takes every spec), a Hugging Face spec
(:mod:`.huggingface`), or a path to a data file (:mod:`.files`), optionally with its field names
(:mod:`.fields`); :func:`load_shipped_or_jsonl` here takes the shipped names and data files.

* ``gsm8k`` (= ``gsm8k:test``), ``gsm8k:train``: ``gsm8k/{test,train}.jsonl``, 1,319 / 7,473
  problems, ids ``gsm8k-test-{i}`` / ``gsm8k-train-{i}``.
* ``aqua`` (= ``aqua:test``), ``aqua:dev``: ``aqua/{test,dev}.json`` (JSON Lines), 254 / 254
  problems, ids ``aqua-test-{i}`` / ``aqua-dev-{i}``.
* ``wikimia64``: ``wikimia/WikiMIA_length64.jsonl``, 542 rows (284 members), ids
  ``wikimia64-{hf_index}``; ``wikimia128``: ``wikimia/WikiMIA_length128_subset200.jsonl`` and
  ``wikimia24``: ``wikimia/WikiMIA24_length128_subset200.jsonl``, 200 rows each, ids
  ``wikimia128-{hf_index}`` / ``wikimia24-{hf_index}``.
* ``ja-debian-docs``: ``ja_debian_docs/paragraphs.jsonl``, 1,807 Japanese paragraphs from
  Debian's Japanese documentation (GPL-2), ids ``ja-{nnnn}`` as in the file; unlabelled. Text
  without spaces between words, for the Japanese and multi-byte paths.

``{i}`` is the 0-based record index in the file. Text formats (see
:func:`~blackbox_mia.datasets.formats.gsm8k_text`, :func:`~blackbox_mia.datasets.formats.aqua_text`):

* GSM8K: ``"Question: {question}\\nAnswer: {answer}"``, the answer verbatim (with its
  ``<<calc>>`` annotations and the final ``#### N``); ``meta`` = ``{question, answer}``.
* AQuA: ``"Question: {question}\\nOptions: {' '.join(options)}\\nRationale: {rationale}\\nAnswer:
  {correct}"``; ``meta`` = ``{question, options, rationale, correct}``.
* WikiMIA: the ``input`` field; ``label`` 1 = member (pre-2017 Wikipedia), 0 = non-member;
  the other fields (``hf_index``, ``md5``...) go to ``meta``.
* A user data file: records with ``text`` (or ``input``), optional ``label`` (0/1, or null)
  and optional ``id`` (default ``{file stem}-{i}``), or the fields :class:`~.fields.Fields`
  names; other fields go to ``meta``. Blank lines of JSON Lines are skipped.

Sources and licences of the shipped files: ``blackbox_mia/data/README.md``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

from ..option_names import named
from ..types import BlackboxMIAError
from .fields import Fields, split_fields, with_fields
from .files import READERS, describe_format, file_format, file_stem, read_lines, read_records
from .formats import ItemMaker, aqua_item, build_items, gsm8k_item, user_item, wikimia_item
from .huggingface import is_hf_spec
from .items import Dataset, Item, file_sha256

DATA_DIR = Path(__file__).resolve().parent.parent / "data"

# spec -> (canonical name, file under DATA_DIR, item builder)
NAMED: dict[str, tuple[str, str, ItemMaker]] = {
    "gsm8k": ("gsm8k:test", "gsm8k/test.jsonl", gsm8k_item("test")),
    "gsm8k:test": ("gsm8k:test", "gsm8k/test.jsonl", gsm8k_item("test")),
    "gsm8k:train": ("gsm8k:train", "gsm8k/train.jsonl", gsm8k_item("train")),
    "aqua": ("aqua:test", "aqua/test.json", aqua_item("test")),
    "aqua:test": ("aqua:test", "aqua/test.json", aqua_item("test")),
    "aqua:dev": ("aqua:dev", "aqua/dev.json", aqua_item("dev")),
    "wikimia64": ("wikimia64", "wikimia/WikiMIA_length64.jsonl", wikimia_item("wikimia64")),
    "wikimia128": ("wikimia128", "wikimia/WikiMIA_length128_subset200.jsonl", wikimia_item("wikimia128")),
    "wikimia24": ("wikimia24", "wikimia/WikiMIA24_length128_subset200.jsonl", wikimia_item("wikimia24")),
    "ja-debian-docs": ("ja-debian-docs", "ja_debian_docs/paragraphs.jsonl", user_item("ja")),
}


def dataset_not_found(path: Path, names: Sequence[str]) -> BlackboxMIAError:
    """The error for a dataset spec that is neither a named dataset nor a file: a directory is
    said to be one, anything else is not found; the message lists ``names``."""
    what = (f"is a directory, not a data file (a Hugging Face data set on disk: hf:{path})" if path.is_dir()
            else "not found")
    return BlackboxMIAError(f"dataset file {what}: {path} (named datasets: {', '.join(names)}; "
                            f"anything else is a file: {', '.join(f'.{name}' for name in READERS)}, each also .gz)")


def read_jsonl(path: Path) -> Iterator[tuple[int, dict]]:
    """``(line number, object)`` for every non-blank line of a JSON Lines file (numbers from 1),
    gzip-compressed when its name ends in ``.gz``.

    A UTF-8 byte-order mark at the start of the file is skipped.

    Raises:
        BlackboxMIAError: the file is missing/unreadable or a directory, a truncated gzip file, a
            line is not UTF-8 (named by line and column) or not a JSON object (the message says
            what a line must be).
    """
    path = Path(path)
    if not path.is_file():
        raise dataset_not_found(path, list(NAMED))
    return read_lines(path)


def load_shipped_or_jsonl(spec: str, fields: Fields = Fields()) -> Dataset:
    """Load a named dataset or a data file (canary specs: :func:`blackbox_mia.canary.dataset.load_any_dataset`;
    Hugging Face specs: :func:`blackbox_mia.datasets.huggingface.load_hf`).

    Args:
        spec: ``gsm8k``, ``gsm8k:train``, ``gsm8k:test``, ``aqua``, ``aqua:dev``, ``aqua:test``,
            ``wikimia64``, ``wikimia128``, ``wikimia24``, ``ja-debian-docs``, or a path to a
            data file read by its suffix (:mod:`.files`: ``.jsonl``, ``.json``, ``.csv``,
            ``.parquet``, each also ``.gz``), optionally followed by ``?`` and its field names
            (:mod:`.fields`).
        fields: the field names of a file's records, with those of the spec's ``?`` part.

    Returns:
        A :class:`Dataset` whose ``sha256`` is that of the source file's bytes and, for a user
        file, whose ``format`` says how it was read (``csv``, ``jsonl (gzip)``...).

    Raises:
        BlackboxMIAError: missing file, malformed record, a record without the text field
            (naming the fields it has), an empty text, a label outside {0, 1, null}, a
            duplicate id, or no item at all; the message names the file and the line or record.
    """
    if spec in NAMED:
        name, relative, make = NAMED[spec]
        path, form = DATA_DIR / relative, None
        records = ((f"{path}:{number}", obj) for number, obj in read_jsonl(path))
    else:
        source, own = split_fields(with_fields(spec, fields))
        path = Path(source).expanduser()
        name, form = with_fields(source, own), describe_format(path)
        make = user_item(file_stem(path), own, cells_are_text=file_format(path)[0] == "csv")
        if not path.is_file():
            raise dataset_not_found(path, list(NAMED))
        records = read_records(path)
    items = build_items(records, make, str(path))
    return Dataset(name=name, items=items, source=str(path), sha256=file_sha256(path), format=form)


def spec_slug(spec: str) -> str:
    """A folder-name-safe short name of a dataset spec (its field names left out): a file's stem
    (``data/items.csv.gz`` → ``items``), a Hugging Face spec with ``-`` for ``/`` and ``:``
    (``mimir:arxiv:ngram_13_0.8`` → ``mimir-arxiv-ngram_13_0.8``), a shipped name with ``-``
    for ``:`` (``gsm8k:test`` → ``gsm8k-test``)."""
    source = split_fields(spec)[0]
    if is_hf_spec(source):  # a local directory by its name, a hub name with - for /
        prefix, _, rest = source.partition(":")
        head, *tail = rest.split(":")
        head = Path(head).name if Path(head).expanduser().is_dir() else head.replace("/", "-")
        return "-".join([prefix, head, *(part for part in tail if part)])
    if "/" in source or "\\" in source or Path(source).suffix:
        return file_stem(Path(source))
    return source.replace(":", "-")


def limit_items(items: Sequence[Item], limit: int | None) -> list[Item]:
    """``limit`` items, stratified by label, in the dataset's order (all of them when ``limit``
    is None).

    Unlabelled or one-label data: the first ``limit`` items. Data with several labels (a canary
    lists its members first): the first items of each label, as many as its share of the data
    (largest-remainder rounding, and at least one of each label when ``limit`` allows), so that
    ``--limit 40`` on 200 members and 200 non-members keeps 20 of each, not 40 members and no
    AUC.

    Raises:
        BlackboxMIAError: ``limit`` below 1 (``--limit 0`` must not mean "everything", nor
            ``--limit -1`` "all but the last").
    """
    if limit is None:
        return list(items)
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise BlackboxMIAError(f"{named('limit')} must be an integer >= 1, got {limit!r}")
    counts: dict[int | None, int] = {}
    for item in items:
        counts[item.label] = counts.get(item.label, 0) + 1
    if len(counts) < 2 or limit >= len(items):
        return list(items[:limit])
    quota = label_quota(counts, limit)
    kept: list[Item] = []
    for item in items:
        if quota[item.label] > 0:
            quota[item.label] -= 1
            kept.append(item)
    return kept


def label_quota(counts: dict, limit: int) -> dict:
    """How many items of each label a stratified ``limit`` keeps: ``limit * count / total``
    rounded by largest remainder (ties to the label seen first), then one item moved from the
    largest quota to each label left at 0 while ``limit`` covers every label.

    Args:
        counts: items per label, in the order the labels first appear (every count >= 1).
        limit: items to keep, 1 <= limit < sum of counts.

    Returns:
        label → items to keep; the quotas sum to ``limit``.
    """
    total = sum(counts.values())
    exact = {label: limit * n / total for label, n in counts.items()}
    quota = {label: int(share) for label, share in exact.items()}
    by_remainder = sorted(counts, key=lambda label: -(exact[label] - quota[label]))  # stable: first seen wins ties
    for label in by_remainder[: limit - sum(quota.values())]:
        quota[label] += 1
    for label in counts:
        if quota[label] == 0 and limit >= len(counts):
            quota[max(quota, key=quota.get)] -= 1
            quota[label] = 1
    return quota
