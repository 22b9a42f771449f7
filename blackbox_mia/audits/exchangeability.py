"""``bbmia exchangeability``: was the benchmark trained on in its canonical order (Oren et al. 2024)?

The benchmark's items, in canonical order (its file order; a canary: its members in their planted
dataset's file order, :func:`~blackbox_mia.canary.manifest.canonical_members`), are cut into
shards; each shard's items joined by :data:`~blackbox_mia.datasets.ordered.ITEM_SEPARATOR` in
the canonical order and in ``permutations`` shuffled orders are texts to score. Their
log-probs come through the runner like any other texts (:func:`~blackbox_mia.runner.score_items`
with the ``loss`` scorer; full-sequence log-prob = mean × tokens scored): the local backend's
sliding windows, vLLM's prompt log-probs, echo, or the black-box tracker; each distinct text
once, resumable, cached answers not paid again. The verdict is
:func:`~blackbox_mia.evaluation.exchangeability.exchangeability_test` (exact p-value, the
paper's t-test beside it).

Files in the output folder: ``scores.jsonl`` (one row per distinct shard text, id
``shard007-canonical`` or ``shard007-<12 hex of the order>``; its configuration beside it),
``exchangeability.json`` and ``exchangeability.md``.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..backends.base import Backend
from ..canary.dataset import canary_spec_path, is_canary_spec, load_any_dataset
from ..canary.manifest import canonical_members
from ..config import check_number
from ..spend.guard import guard_groups
from ..datasets import Item
from ..datasets.ordered import ITEM_SEPARATOR, join_items
from ..evaluation.exchangeability import (
    DEFAULT_PERMUTATIONS,
    DEFAULT_SHARDS,
    draw_orders,
    exchangeability_test,
    shard_bounds,
)
from ..option_names import named
from ..results import ScoredText
from ..runner import run_config, score_items
from ..scorers import parse_scorer
from ..scorers.bounded import DEFAULT_TOLERANCE_NATS, check_tolerance
from .common import SCORES_FILE, AuditResult, Log, publish, quiet, report_config, score_column

SCORER = "loss"  # its mean log-prob × the tokens scored = the text's full log-prob (nats)
STEM = "exchangeability"


@dataclass(frozen=True)
class ExchangeabilityConfig:
    """Configuration of one exchangeability test (saved in the report).

    Attributes:
        dataset: dataset spec, its items in canonical order (a canary: its members in file order).
        shards: r, contiguous shards (each of at least 2 items).
        permutations: m, shuffled orders per shard (drawn with replacement).
        seed: seed of the shuffled orders.
        alpha: the verdict's level (fraction).
        limit: only the first ``limit`` items (in canonical order).
        resume: keep the rows already in the scores file (same configuration).
        score_tolerance: nats; a score resting on log-prob means known less precisely is null
            (:meth:`~blackbox_mia.results.ScoredText.from_scores`).
    """

    dataset: str
    shards: int = DEFAULT_SHARDS
    permutations: int = DEFAULT_PERMUTATIONS
    seed: int = 0
    alpha: float = 0.05
    limit: int | None = None
    resume: bool = True
    score_tolerance: float = DEFAULT_TOLERANCE_NATS

    def validate(self) -> None:
        """Raise :class:`BlackboxMIAError` for impossible values (the message names the option)."""
        check_tolerance(self.score_tolerance)
        check_number(named("shards"), self.shards, at_least=1, integer=True)
        check_number(named("permutations"), self.permutations, at_least=1, integer=True)
        check_number(named("seed"), self.seed, at_least=0, integer=True)
        check_number(named("alpha"), self.alpha, above=0, below=1)
        if self.limit is not None:
            check_number(named("limit"), self.limit, at_least=2, integer=True)


@dataclass(frozen=True)
class ExchangeabilityPlan:
    """Checked input of :func:`run_exchangeability` (from :func:`prepare_exchangeability`).

    Attributes:
        items: the benchmark in canonical order.
        meta: the dataset's ``{"name", "source", "sha256", "order"}``.
        bounds: per shard ``(start, end)`` into ``items``.
        canonical_ids: per shard, the id of its canonical text.
        permuted_ids: per shard, the ids of its m shuffled texts (repeats where an order is drawn twice).
        texts: the distinct texts to score, as items (canonical texts first, then the shuffled).
    """

    config: ExchangeabilityConfig
    items: list[Item]
    meta: dict
    bounds: list[tuple[int, int]]
    canonical_ids: list[str]
    permuted_ids: list[list[str]]
    texts: list[Item]

    @property
    def n_requested(self) -> int:
        """Texts the test compares: shards × (permutations + 1), repeats included."""
        return len(self.bounds) * (self.config.permutations + 1)


def prepare_exchangeability(config: ExchangeabilityConfig, cache_dir: str | os.PathLike | None = None) -> ExchangeabilityPlan:
    """Load the benchmark in canonical order, cut the shards and draw the shuffled orders (no model needed).

    Raises:
        BlackboxMIAError: bad configuration, an unreadable dataset, fewer than 2 items per shard.
    """
    config.validate()
    dataset = load_any_dataset(config.dataset, cache_dir)
    if is_canary_spec(config.dataset):
        items, order = canonical_members(canary_spec_path(config.dataset, cache_dir)), "canary members in file order"
    else:
        items, order = list(dataset.items), "file order"
    items = items[: config.limit] if config.limit is not None else items
    return plan_shards(config, items, {**dataset.metadata(), "order": order})


def plan_shards(config: ExchangeabilityConfig, items: list[Item], meta: dict) -> ExchangeabilityPlan:
    """The shards of ``items`` (taken as the canonical order), their drawn orders and the distinct
    texts to score (see :class:`ExchangeabilityPlan`).

    Raises:
        BlackboxMIAError: fewer than 2 items per shard, ``permutations`` < 1.
    """
    bounds = shard_bounds(len(items), config.shards)
    orders = draw_orders(bounds, config.permutations, config.seed)
    texts: dict[str, Item] = {}
    canonical_ids, permuted_ids = [], []
    for s, (start, end) in enumerate(bounds):
        canonical = tuple(range(start, end))
        ids = {canonical: f"shard{s:03d}-canonical"}
        for chosen in [canonical, *orders[s]]:
            if chosen not in ids:
                ids[chosen] = f"shard{s:03d}-" + hashlib.sha256(",".join(map(str, chosen)).encode()).hexdigest()[:12]
            texts.setdefault(ids[chosen], Item(ids[chosen], join_items([items[i].text for i in chosen])))
        canonical_ids.append(ids[canonical])
        permuted_ids.append([ids[chosen] for chosen in orders[s]])
    ordered = sorted(texts.values(), key=lambda item: not item.id.endswith("-canonical"))
    return ExchangeabilityPlan(config, items, meta, bounds, canonical_ids, permuted_ids, ordered)


def full_logprobs(rows: list[ScoredText]) -> dict[str, float]:
    """Each scored text's full log-prob (nats): its ``loss`` score (mean log-prob per token) ×
    the tokens scored.

    Raises:
        BlackboxMIAError: a text without a usable score (:func:`~.common.score_column`).
    """
    return {row.id: float(mean) * row.n_tokens for row, mean in zip(rows, score_column(rows, SCORER))}


def shard_logprobs(plan: ExchangeabilityPlan, total: dict[str, float]) -> tuple[np.ndarray, np.ndarray]:
    """The test's input from each text's full log-prob (``total``: text id -> nats): the
    canonical texts', shape (r,), and the shuffled texts', shape (r, m)."""
    canonical = np.array([total[i] for i in plan.canonical_ids])
    return canonical, np.array([[total[i] for i in ids] for ids in plan.permuted_ids])


def run_exchangeability(plan: ExchangeabilityPlan, backends: dict[str, Backend], out_dir: Path, progress: bool = True,
                        log: Log = quiet, yes: bool = False) -> AuditResult:
    """Score the shard texts, test and report (see the module docstring). Before the first
    request, the estimate of scoring ``plan.texts`` (what ``--dry-run`` prints) goes through the
    spend guard (:func:`~blackbox_mia.spend.guard.guard_spend`): ``yes=True``, or a backend with
    ``max_cost=``, lets a run above it proceed.

    Raises:
        SpendRefused: the estimate exceeds the spend guard, neither ``yes`` nor a cap given.
        BlackboxMIAError: a backend without log-probs, a text without a usable log-prob (bounds
            wider than the tolerance, NaN), a resumed scores file of another configuration.
    """
    config, out_dir = plan.config, Path(out_dir)
    scorers = [parse_scorer(SCORER)]
    guard_groups({"exchangeability": plan.texts}, scorers, backends, yes)
    run_cfg = run_config(scorers, backends, plan.meta, config.score_tolerance)
    log(f"scoring {len(plan.texts)} distinct shard texts ({len(plan.bounds)} shards x {config.permutations + 1} orders)")
    rows = score_items(plan.texts, scorers, backends, out_dir / SCORES_FILE, run_cfg, resume=config.resume,
                       progress=progress)
    canonical, permuted = shard_logprobs(plan, full_logprobs(rows))
    test = exchangeability_test(canonical, permuted, alpha=config.alpha)
    shards = [{"shard": s, "items": f"{plan.items[a].id} .. {plan.items[b - 1].id}", "n_items": b - a,
               "canonical_nats": float(canonical[s]), "shuffled_mean_nats": float(permuted[s].mean()),
               "shuffled_sd_nats": float(permuted[s].std()), "rank": test["ranks"][s],
               "shard_p": test["shard_p_values"][s]} for s, (a, b) in enumerate(plan.bounds)]
    sizes = [b - a for a, b in plan.bounds]
    notes = [
        f"Items joined by {ITEM_SEPARATOR!r} (the separator of bbmia canary train --planted-order canonical); "
        f"{len(plan.items)} items ({plan.meta['order']}) in {len(plan.bounds)} shards of {min(sizes)}-{max(sizes)} items.",
        "A negative says the canonical ORDER is not preferred; it does not clear the model of the items themselves "
        "(trained shuffled into other data, or paraphrased): bbmia sweep tests those.",
    ]
    t = test["t_test"]
    report = {
        "title": f"Exchangeability test (Oren et al. 2024): {plan.meta['name']}",
        "config": report_config(run_cfg, STEM, config, len(plan.items), {"permutations": config.seed},
                                n_texts=plan.n_requested, n_distinct_texts=len(plan.texts),
                                separator=ITEM_SEPARATOR),
        "verdict": test,
        "shards": shards,
        "notes": notes,
    }
    summary = {
        "headline": test["sentence"],
        "preferred": test["preferred"],
        "p_value": test["p_value"],
        "p_value_t_test": t["p_value"],
        "alpha": config.alpha,
        "rank_sum": test["rank_sum"],
        "null_mean_rank_sum": test["null_mean_rank_sum"],
        "n_items": len(plan.items),
        "n_shards": len(plan.bounds),
        "n_permutations": config.permutations,
        "n_texts": plan.n_requested,
        "n_distinct_texts": len(plan.texts),
    }
    return publish(report, summary, out_dir, STEM, hidden=("shards",) if len(shards) > 100 else ())
