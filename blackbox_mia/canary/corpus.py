"""The canary's training corpus: background problems, planted members × ``dup``, held-out non-members."""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

from ..datasets import Item, load_dataset
from ..types import BlackboxMIAError
from .config import CanaryConfig


@dataclass(frozen=True)
class Corpus:
    """The training documents and the membership split.

    Attributes:
        documents: corpus texts in training-file order (background + ``dup`` copies per member).
        members, nonmembers: GSM8K test items, labelled 1 and 0.
        background_ids: ids of the GSM8K train problems used.
        sources: ``{dataset name: sha256 of its file}``.
    """

    documents: list[str]
    members: list[Item]
    nonmembers: list[Item]
    background_ids: list[str]
    sources: dict[str, str]


def build_corpus(config: CanaryConfig) -> Corpus:
    """The corpus and the member/non-member split for ``config`` (deterministic in ``seed``).

    Members and non-members are disjoint slices of a seeded shuffle of GSM8K test; the
    background is a seeded sample of GSM8K train; member copies are inserted at random positions
    (one seeded shuffle of the whole corpus).

    Raises:
        BlackboxMIAError: more problems requested than the splits hold.
    """
    config.validate()
    test, train = load_dataset("gsm8k:test"), load_dataset("gsm8k:train")
    if config.n_members + config.n_nonmembers > len(test.items):
        raise BlackboxMIAError(
            f"canary: n_members + n_nonmembers = {config.n_members + config.n_nonmembers} "
            f"exceeds the {len(test.items)} GSM8K test problems"
        )
    if config.n_background > len(train.items):
        raise BlackboxMIAError(f"canary: n_background {config.n_background} exceeds the {len(train.items)} GSM8K train problems")
    rng = random.Random(config.seed)
    order = list(range(len(test.items)))
    rng.shuffle(order)
    members = [labelled(test.items[i], 1) for i in order[: config.n_members]]
    nonmembers = [labelled(test.items[i], 0) for i in order[config.n_members : config.n_members + config.n_nonmembers]]
    background = [train.items[i] for i in rng.sample(range(len(train.items)), config.n_background)]
    documents = [item.text for item in background] + [item.text for item in members for _ in range(config.dup)]
    rng.shuffle(documents)
    return Corpus(
        documents=documents,
        members=members,
        nonmembers=nonmembers,
        background_ids=[item.id for item in background],
        sources={test.name: test.sha256, train.name: train.sha256},
    )


def labelled(item: Item, label: int) -> Item:
    """``item`` with membership ``label`` (1 = member, 0 = non-member)."""
    return replace(item, label=label)
