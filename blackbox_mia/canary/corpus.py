"""The canary's training corpus: background items, planted members × ``dup``, held-out non-members
(for ``corpus = "documents"``: planted documents, see :mod:`.documents`)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace

from ..datasets import Item, load_shipped_or_jsonl
from ..datasets.ordered import join_items
from ..types import BlackboxMIAError
from .config import CANONICAL, DOCUMENTS_CORPUS, CanaryConfig
from .documents import CanaryDocument, plan_documents


@dataclass(frozen=True)
class Corpus:
    """The training documents and the membership split.

    Attributes:
        documents: corpus texts in training-file order (background + ``dup`` copies per member).
        members, nonmembers: items of the planted dataset (GSM8K test, or ``ja-debian-docs``),
            labelled 1 and 0.
        background_ids: ids of the background items used (GSM8K train, or ``ja-debian-docs``).
        sources: ``{dataset name: sha256 of its file}`` for every dataset read.
        canary_documents: the documents of a document canary (test, then validation); empty
            for the other corpora. Its members are the planted problems, its non-members the
            problems of its documents never planted.
        chat_items: the background items the chat examples are made from (``chat_share``,
            :func:`chat_items`; empty for a base canary). Never a member or non-member.
    """

    documents: list[str]
    members: list[Item]
    nonmembers: list[Item]
    background_ids: list[str]
    sources: dict[str, str]
    canary_documents: list[CanaryDocument] = field(default_factory=list)
    chat_items: list[Item] = field(default_factory=list)


def build_corpus(config: CanaryConfig) -> Corpus:
    """The corpus and the member/non-member split for ``config`` (deterministic in ``seed``).

    Members and non-members are disjoint slices of a seeded shuffle of the planted dataset
    (``config.source.planted``: GSM8K test, or the Japanese paragraphs). The background is a
    seeded sample of its own dataset (GSM8K train) or, when the corpus has none (``ja``), the
    next ``n_background`` items of the same shuffle, so the three sets are disjoint. Member
    copies are inserted at random positions (one seeded shuffle of the whole corpus). With
    ``planted_order = "canonical"`` the members are one document instead, in the planted
    dataset's file order (:func:`canonical_document`), planted ``dup`` times; the split is the
    same. The ``documents`` corpus plants whole and partial documents instead (:mod:`.documents`).
    A reference canary (``config.reference``) plants nothing, has another background
    (:func:`background_sample`) and lists the split's items all as non-members.

    Raises:
        BlackboxMIAError: more items (or documents) requested than the datasets hold.
    """
    config.validate()
    source = config.source
    planted = load_shipped_or_jsonl(source.planted)
    pool = load_shipped_or_jsonl(source.background) if source.background is not None else None
    split = {"n_members": config.n_members, "n_nonmembers": config.n_nonmembers}
    if config.corpus == DOCUMENTS_CORPUS:
        split = {}  # documents are counted in blocks of problems by plan_documents
    elif pool is None:
        split["n_background"] = config.n_background
    if sum(split.values()) > len(planted.items):
        raise BlackboxMIAError(
            f"canary: {' + '.join(split)} = {sum(split.values())} exceeds the {len(planted.items)} {source.noun}"
        )
    if pool is not None and config.n_background > len(pool.items):
        raise BlackboxMIAError(
            f"canary: n_background {config.n_background} exceeds the {len(pool.items)} {source.background_noun}"
        )
    rng = random.Random(config.seed)
    if config.corpus == DOCUMENTS_CORPUS:
        return _document_corpus(config, planted, pool, rng)
    order = list(range(len(planted.items)))
    rng.shuffle(order)
    planted_end = config.n_members + config.n_nonmembers
    members = [labelled(planted.items[i], 1) for i in order[: config.n_members]]
    nonmembers = [labelled(planted.items[i], 0) for i in order[config.n_members : planted_end]]
    if pool is None:
        background = [planted.items[i] for i in order[planted_end : planted_end + config.n_background]]
    else:
        background = [pool.items[i] for i in background_sample(len(pool.items), config, rng)]
    planted_texts = [canonical_document(members, planted.items)] if config.planted_order == CANONICAL else [
        item.text for item in members]
    if config.reference:  # nothing planted: every item of the split is a non-member of the reference
        members, nonmembers, planted_texts = [], [labelled(item, 0) for item in members + nonmembers], []
    documents = [item.text for item in background] + [text for text in planted_texts for _ in range(config.dup)]
    rng.shuffle(documents)
    return Corpus(
        documents=documents,
        members=members,
        nonmembers=nonmembers,
        background_ids=[item.id for item in background],
        sources={dataset.name: dataset.sha256 for dataset in (planted, pool) if dataset is not None},
        chat_items=chat_items(background, config),
    )


def background_sample(pool_size: int, config: CanaryConfig, rng: random.Random) -> list[int]:
    """Indices of the background items in a pool of ``pool_size``: the seeded sample of
    ``n_background`` of the canaries of ``config.seed``; for a reference canary, the next seeded
    sample, of ``reference_size`` (default ``n_background``), from the pool they left (disjoint
    from theirs, the same ``rng`` draws both).

    Raises:
        BlackboxMIAError: a reference canary whose pool holds fewer than ``n_background`` +
            its own size.
    """
    indices = rng.sample(range(pool_size), config.n_background)
    if not config.reference:
        return indices
    size = config.n_background if config.reference_size is None else config.reference_size
    if config.n_background + size > pool_size:
        raise BlackboxMIAError(f"canary: a reference needs n_background + its own {size} = {config.n_background + size} "
                               f"background items, the pool holds {pool_size}")
    taken = set(indices)
    return rng.sample([i for i in range(pool_size) if i not in taken], size)


def _document_corpus(config: CanaryConfig, planted, pool, rng: random.Random) -> Corpus:
    """The corpus of a document canary: the background (a seeded sample of ``pool``) and every
    planted copy of :func:`~blackbox_mia.canary.documents.plan_documents`'s documents, shuffled."""
    documents = plan_documents(config, planted.items, rng)
    background = [pool.items[i] for i in rng.sample(range(len(pool.items)), config.n_background)]
    texts = [item.text for item in background] + [text for doc in documents for text in doc.training_texts()]
    rng.shuffle(texts)
    pairs = [(item, p) for doc in documents for item, p in zip(doc.items, doc.planted)]
    return Corpus(
        documents=texts,
        members=[labelled(item, 1) for item, p in pairs if p],
        nonmembers=[labelled(item, 0) for item, p in pairs if not p],
        background_ids=[item.id for item in background],
        sources={dataset.name: dataset.sha256 for dataset in (planted, pool)},
        canary_documents=documents,
        chat_items=chat_items(background, config),
    )


def in_file_order(members: list[Item], planted: list[Item]) -> list[Item]:
    """``members`` sorted by their index in ``planted``: the dataset's canonical order (GSM8K
    test file order)."""
    index = {item.id: i for i, item in enumerate(planted)}
    return sorted(members, key=lambda item: index[item.id])


def canonical_document(members: list[Item], planted: list[Item]) -> str:
    """The members as the benchmark file holds them (:func:`in_file_order`), joined by
    :data:`~blackbox_mia.datasets.ordered.ITEM_SEPARATOR` (the text the exchangeability test
    scores a shard as)."""
    return join_items([item.text for item in in_file_order(members, planted)])


def chat_items(background: list[Item], config: CanaryConfig) -> list[Item]:
    """The background items the chat examples are made from: ``round(chat_share ·
    len(background))`` of them, cycling through a seeded permutation of ``background`` (each item
    once before any twice). Drawn with a generator of its own (seeded by ``seed``), so a chat
    canary has the very members, non-members and background of the base canary of its config.
    Empty when ``chat_share`` is 0."""
    n = round(config.chat_share * len(background))
    if n == 0:
        return []
    order = list(range(len(background)))
    random.Random(f"chat-items-{config.seed}").shuffle(order)
    return [background[order[k % len(order)]] for k in range(n)]


def labelled(item: Item, label: int) -> Item:
    """``item`` with membership ``label`` (1 = member, 0 = non-member)."""
    return replace(item, label=label)
