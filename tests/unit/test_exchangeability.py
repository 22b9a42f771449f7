"""The exchangeability test (Oren et al. 2024): exact p-values by hand and by enumeration, the level
by simulation, power on a planted preference, shards and orders; the canonical-order canary's
config and corpus."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest

from blackbox_mia.canary import CanaryConfig, build_corpus
from blackbox_mia.datasets import load_shipped_or_jsonl
from blackbox_mia.datasets.ordered import ITEM_SEPARATOR, join_items
from blackbox_mia.evaluation.exchangeability import (
    canonical_ranks,
    draw_orders,
    exchangeability_test,
    rank_sum_pvalue,
    shard_bounds,
    t_test,
)
from blackbox_mia.types import BlackboxMIAError


def test_rank_sum_pvalue_by_hand():
    # r = 3 shards, m = 4: sums <= 3 of three values in {0..4}: C(3 + 3, 3) = 20 of 5^3 = 125
    assert rank_sum_pvalue(3, 3, 4) == 20 / 125
    assert rank_sum_pvalue(0, 3, 4) == 1 / 125  # the canonical order first in every shard
    assert rank_sum_pvalue(12, 3, 4) == 1.0
    # r = 1: the single shard's permutation p-value (R + 1) / (m + 1)
    assert rank_sum_pvalue(2, 1, 9) == pytest.approx(3 / 10)
    # tiny values keep their digits: 50 shards of 250 orders, all ranked first
    assert rank_sum_pvalue(0, 50, 250) == pytest.approx(251.0**-50, rel=1e-12)


@pytest.mark.parametrize("r,m", [(1, 5), (2, 3), (3, 4), (4, 2), (2, 7)])
def test_rank_sum_pvalue_matches_enumeration(r, m):
    sums = [sum(u) for u in itertools.product(range(m + 1), repeat=r)]
    for s in range(r * m + 1):
        assert rank_sum_pvalue(s, r, m) == pytest.approx(sum(x <= s for x in sums) / len(sums), abs=1e-15)


@pytest.mark.parametrize("r,m", [(3, 4), (2, 7), (4, 3)])
def test_level_by_enumeration(r, m):
    # every rank vector is equally likely under H0: P(p <= alpha) <= alpha at every alpha
    pvalues = [rank_sum_pvalue(sum(u), r, m) for u in itertools.product(range(m + 1), repeat=r)]
    for alpha in (0.01, 0.05, 0.1, 0.2, 0.5):
        assert np.mean(np.array(pvalues) <= alpha) <= alpha + 1e-12


def test_level_by_simulation_with_ties():
    # exchangeable orders: iid log-probs, rounded so that ties occur (counted against the canonical)
    rng = np.random.default_rng(0)
    n_sim, r, m = 4000, 6, 9
    rejected = 0
    for _ in range(n_sim):
        values = np.round(rng.normal(size=(r, m + 1)), 1)
        rejected += exchangeability_test(values[:, 0], values[:, 1:], alpha=0.05)["preferred"]
    rate = rejected / n_sim
    assert rate <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / n_sim)
    assert rate > 0.02  # not vacuous: close to the level


def test_power_on_a_planted_preference():
    rng = np.random.default_rng(1)
    permuted = rng.normal(size=(10, 19))
    out = exchangeability_test(permuted.max(axis=1) + 1.0, permuted)  # canonical above every shuffle
    assert out["ranks"] == [0] * 10 and out["rank_sum"] == 0
    assert out["p_value"] == pytest.approx(20.0**-10) and out["preferred"]
    assert out["sentence"].startswith("canonical order PREFERRED at alpha = 0.05: p = 9.77e-14 (exact")


def test_ranks_count_ties_against_the_canonical_order():
    canonical = np.array([1.0, 5.0])
    permuted = np.array([[1.0, 0.0, 2.0], [4.0, 4.0, 4.0]])
    assert canonical_ranks(canonical, permuted).tolist() == [2, 0]


def test_t_test_by_hand():
    canonical = np.array([3.0, 1.0, 2.0])
    permuted = np.array([[1.0, 1.0], [1.0, 1.0], [0.0, 0.0]])  # differences 2, 0, 2
    out = t_test(canonical, permuted)
    t = (4 / 3) / math.sqrt(4 / 3) * math.sqrt(3)  # mean 4/3, sample variance 4/3
    assert out["t"] == pytest.approx(t) and out["df"] == 2
    from scipy import stats

    assert out["p_value"] == pytest.approx(stats.t.sf(t, 2))
    assert t_test(np.array([1.0, 1.0]), np.zeros((2, 3)))["p_value"] is None  # no spread


def test_bad_input():
    with pytest.raises(BlackboxMIAError, match="shape"):
        exchangeability_test(np.zeros(3), np.zeros((2, 4)))
    with pytest.raises(BlackboxMIAError, match="NaN"):
        exchangeability_test(np.array([np.nan]), np.zeros((1, 4)))
    with pytest.raises(BlackboxMIAError, match="alpha"):
        exchangeability_test(np.zeros(1), np.zeros((1, 4)), alpha=1.0)
    with pytest.raises(BlackboxMIAError, match="S <= r"):
        rank_sum_pvalue(13, 3, 4)


def test_shards_and_orders():
    assert shard_bounds(10, 3) == [(0, 4), (4, 7), (7, 10)]
    with pytest.raises(BlackboxMIAError, match="n_shards=2 or fewer"):
        shard_bounds(5, 3)
    with pytest.raises(BlackboxMIAError, match="n_shards= must be at least 1"):
        shard_bounds(5, 0)
    orders = draw_orders([(0, 4), (4, 7)], 50, seed=3)
    assert len(orders) == 2 and all(len(o) == 50 for o in orders)
    assert all(sorted(o) == [0, 1, 2, 3] for o in orders[0]) and all(sorted(o) == [4, 5, 6] for o in orders[1])
    assert len(set(orders[0])) > 10  # uniform over 24 orders: many distinct
    assert orders == draw_orders([(0, 4), (4, 7)], 50, seed=3) != draw_orders([(0, 4), (4, 7)], 50, seed=4)
    with pytest.raises(BlackboxMIAError, match="n_permutations="):
        draw_orders([(0, 4)], 0, seed=0)


def test_canary_hashes_pinned():
    # every canary trained before --planted-order keeps its directory
    assert CanaryConfig().short_hash() == "6338e872951d"
    assert CanaryConfig(dup=4).short_hash() == "07cd9bde2442"
    assert CanaryConfig(planted_order="canonical", dup=4).short_hash() == "25eeca3e5873"
    with pytest.raises(BlackboxMIAError, match="planted_order= must be one of shuffled, canonical"):
        CanaryConfig(planted_order="sorted").validate()
    with pytest.raises(BlackboxMIAError, match="does not apply to corpus='documents'"):
        CanaryConfig(corpus="documents", planted_order="canonical").validate()


def test_canonical_corpus_plants_one_document_in_file_order():
    config = CanaryConfig(dup=3, n_members=5, n_nonmembers=4, n_background=20)
    shuffled, canonical = build_corpus(config), build_corpus(CanaryConfig(**{**config.__dict__, "planted_order": "canonical"}))
    assert [m.id for m in canonical.members] == [m.id for m in shuffled.members]
    assert canonical.background_ids == shuffled.background_ids
    index = {item.id: i for i, item in enumerate(load_shipped_or_jsonl("gsm8k:test").items)}
    in_order = sorted(canonical.members, key=lambda item: index[item.id])
    document = join_items([m.text for m in in_order])
    assert document.count(ITEM_SEPARATOR) >= 4 and document.startswith(in_order[0].text)
    assert len(canonical.documents) == 20 + 3 and canonical.documents.count(document) == 3
    assert len(shuffled.documents) == 20 + 15


@pytest.fixture()
def ordered_jsonl(tmp_path):
    path = tmp_path / "bench.jsonl"
    texts = ["Question: Tom has 3 apples.", "Question: Ivy walks 4 miles.", "Question: Zed sells 5 kites.",
             "Question: A robe takes 2 bolts.", "Question: Sam reads 7 pages.", "Question: Kim bakes 9 pies."]
    path.write_text("".join(json.dumps({"id": f"q{i}", "text": t}) + "\n" for i, t in enumerate(texts)))
    return path


@pytest.mark.parametrize("args, fragments", [
    (["--shards", "0"], ["--shards must be an integer >= 1, got 0"]),
    (["--shards", "4"], ["6 items make fewer than 2 items per shard with 4 shards", "use --shards 3 or fewer"]),
    (["--permutations", "0"], ["--permutations must be an integer >= 1, got 0"]),
    (["--alpha", "1"], ["--alpha must be a finite number > 0 and < 1, got 1"]),
    (["--limit", "1"], ["--limit must be an integer >= 2, got 1"]),
    (["--ref", "/nonexistent/ref"], ["exchangeability uses no reference model: drop --ref"]),
])
def test_cli_errors_are_one_line(ordered_jsonl, tmp_path, args, fragments):
    from .test_cli import assert_one_line_error, invoke

    result = invoke("exchangeability", ordered_jsonl, "--local", "/nonexistent/model", "--cache-dir", tmp_path, *args)
    assert_one_line_error(result, *fragments)


def test_cli_dry_run_then_run_on_a_tiny_model(ordered_jsonl, tiny_model_dir, tmp_path):
    from blackbox_mia.results import read_rows

    from .test_cli import invoke

    common = [ordered_jsonl, "--local", tiny_model_dir, "--shards", "2", "--permutations", "5", "--seed", "1",
              "--out", tmp_path / "run", "--cache-dir", tmp_path, "--quiet"]
    dry = invoke("exchangeability", *common, "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert dry.stdout.startswith("12 texts to compare (2 shards x 6 orders)") and not (tmp_path / "run").exists()
    result = invoke("exchangeability", *common, "--json")
    assert result.exit_code == 0, result.output
    first = result.stdout.splitlines()[0]  # stdout: progress bars (loading weights) go to stderr
    assert first.startswith("canonical order ") and "(exact; sum of the canonical order's ranks" in first
    summary = json.loads(result.output.strip().splitlines()[-1])
    assert summary["n_texts"] == 12 and summary["n_shards"] == 2 and summary["n_items"] == 6
    # the verdict is the exact test of the scored texts' full log-probs (mean x tokens)
    rows = {row.id: row.scores["loss"] * row.n_tokens for row in read_rows(tmp_path / "run" / "scores.jsonl")}
    assert len(rows) == summary["n_distinct_texts"] <= 12
    report = json.loads((tmp_path / "run" / "exchangeability.json").read_text())
    ranks = [sum(rows[i] >= rows[f"shard{s:03d}-canonical"] for i in permuted)
             for s, permuted in enumerate(_permuted_ids(ordered_jsonl, tmp_path))]
    assert report["verdict"]["ranks"] == ranks and summary["rank_sum"] == sum(ranks)
    assert summary["p_value"] == pytest.approx(rank_sum_pvalue(sum(ranks), 2, 5))
    assert report["config"]["exchangeability"]["permutations"] == 5 and report["config"]["separator"] == "\n\n"


def _permuted_ids(path, cache):
    from blackbox_mia.audits.exchangeability import ExchangeabilityConfig, prepare_exchangeability

    plan = prepare_exchangeability(ExchangeabilityConfig(str(path), shards=2, permutations=5, seed=1), cache)
    assert [item.text for item in plan.texts if item.id == "shard000-canonical"] == [
        "Question: Tom has 3 apples.\n\nQuestion: Ivy walks 4 miles.\n\nQuestion: Zed sells 5 kites."]
    return plan.permuted_ids
