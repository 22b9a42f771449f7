"""Every score carries its interval: hand-computed bounds, random log-probs within the tokens'
bounds always score inside the interval, and a score resting on bound-only tokens is null with
its reason, never a number."""

from __future__ import annotations

import json
import math
import zlib

import numpy as np
import pytest

from blackbox_mia.audits.common import score_column
from blackbox_mia.results import ScoredText, read_rows
from blackbox_mia.runner import score_items
from blackbox_mia.scorers import parse_scorers
from blackbox_mia.scorers.bounded import DEFAULT_TOLERANCE_NATS, Bounded
from blackbox_mia.types import BlackboxMIAError, Provenance, TokenLogprobs

PROV = Provenance("api", "m", "mixed", False)
TEXT = "alpha beta gamma delta epsilon zeta eta theta"


def blp(values, lower=None, upper=None) -> TokenLogprobs:
    n = len(values)
    return TokenLogprobs(list(range(n)), ["t"] * n, values, (0,), PROV, lower=lower, upper=upper)


def test_loss_and_min_k_bounds_by_hand():
    # values -1, -2, -4, -5; token 2 known only as <= -3 (bound-only), token 1 in [-2.5, -1.5]
    lp = blp([-1.0, -2.0, -4.0, -5.0], lower=[-1.0, -2.5, -math.inf, -5.0], upper=[-1.0, -1.5, -3.0, -5.0])
    loss = parse_scorers("loss")[0].score(TEXT, lp, [])
    assert (loss.value, loss.lower, loss.upper) == (-3.0, -math.inf, (-1 - 1.5 - 3 - 5) / 4)
    assert loss.spread == math.inf
    # min_k at 50%: the 2 smallest. Lower ends -inf,-5; upper ends sorted -5,-3 -> -4
    mink = parse_scorers("min_k:k=50")[0].score(TEXT, lp, [])
    assert mink.value == -4.5 and mink.lower == -math.inf and mink.upper == -4.0
    # min_k at 25%: one token, the smallest: lower -inf, upper min(-1,-1.5,-3,-5) = -5 = value
    one = parse_scorers("min_k:k=25")[0].score(TEXT, lp, [])
    assert (one.value, one.upper) == (-5.0, -5.0) and one.lower == -math.inf


def test_finite_bounds_give_finite_intervals_and_spreads():
    lp = blp([-1.0, -2.0, -3.0, -4.0], lower=[-1.0, -2.02, -3.0, -4.04], upper=[-1.0, -1.98, -3.0, -4.0])
    loss = parse_scorers("loss")[0].score(TEXT, lp, [])
    assert loss.lower == pytest.approx(-10.06 / 4) and loss.upper == pytest.approx(-9.98 / 4)
    assert loss.spread == pytest.approx(0.08 / 4)
    z = parse_scorers("zlib")[0].score(TEXT, lp, [])
    size = len(zlib.compress(TEXT.encode()))
    assert z.lower == pytest.approx(loss.lower / size) and z.upper == pytest.approx(loss.upper / size)
    assert z.spread == loss.spread  # the tolerance reads the mean, in nats
    # ref: target mean minus reference mean, the interval ends crossed
    ref = parse_scorers("ref")[0].score(TEXT, lp, [blp([-2.0, -2.0], lower=[-2.1, -2.0], upper=[-2.0, -2.0])])
    assert ref.lower == pytest.approx(loss.lower - (-2.0)) and ref.upper == pytest.approx(loss.upper - (-2.05))
    # lowercase: NLL(lower)/NLL(text) = mean(lowered)/mean(own), both negative
    low = parse_scorers("lowercase")[0].score(TEXT, lp, [blp([-5.0, -5.0], lower=[-5.2, -5.0], upper=[-5.0, -5.0])])
    assert low.value == pytest.approx(-5.0 / -2.5)
    assert low.lower == pytest.approx(-5.0 / loss.lower) and low.upper == pytest.approx(-5.1 / loss.upper)


def test_lowercase_divisor_that_may_be_zero_is_unbounded():
    lp = blp([-0.01, -0.01], lower=[-0.02, -0.02], upper=[0.0, 0.0])
    low = parse_scorers("lowercase")[0].score(TEXT, lp, [blp([-1.0, -1.0])])
    assert low.lower == -math.inf and low.upper == math.inf and math.isfinite(low.value)


@pytest.mark.parametrize("spec", ["loss", "zlib", "min_k", "min_k:k=10", "pac", "lowercase", "ref"])
def test_values_drawn_within_the_token_bounds_score_within_the_interval(spec):
    """Property: for log-probs anywhere inside their bounds, the score lies in the interval."""
    rng = np.random.default_rng(0)
    [scorer] = parse_scorers(spec)
    n_aux = len(scorer.needs(TEXT))
    for _ in range(200):
        def draw(n):
            upper = -rng.exponential(3.0, n)
            lower = upper - rng.exponential(0.5, n) * (rng.random(n) < 0.5)
            truth = lower + (upper - lower) * rng.random(n)
            mid = (lower + upper) / 2
            return blp(mid, lower, upper), blp(truth)

        n = int(rng.integers(2, 30))
        own, own_truth = draw(n)
        aux = [draw(int(rng.integers(2, 30))) for _ in range(n_aux)]
        b = scorer.score(TEXT, own, [a for a, _ in aux])
        truth = scorer.score(TEXT, own_truth, [t for _, t in aux]).value
        assert b.lower - 1e-9 <= truth <= b.upper + 1e-9, (spec, b, truth)
        assert b.lower - 1e-9 <= b.value <= b.upper + 1e-9


def test_a_row_reports_only_scores_known_within_the_tolerance(tmp_path):
    tight = Bounded(-2.0, -2.01, -1.99, 0.02)
    wide = Bounded(-2.0, -math.inf, -1.5, math.inf)
    lp = blp([-1.0, -3.0], lower=[-1.0, -math.inf], upper=[-1.0, -3.0])
    row = ScoredText.from_scores("a", 1, {"loss": tight, "min_k": wide}, lp)
    assert row.scores == {"loss": -2.0, "min_k": None}
    assert row.bound_only == 1 and row.nonfinite == []
    assert "interval [-inf, -1.5]" in row.unscored["min_k"] and f"tolerance {DEFAULT_TOLERANCE_NATS:g}" in row.unscored["min_k"]
    record = row.to_json()
    assert record["score_bounds"] == {"loss": [-2.01, -1.99], "min_k": [None, -1.5]}
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(record) + "\n")
    assert read_rows(path) == [row]  # reads back the same
    with pytest.raises(BlackboxMIAError, match="1 of 1 texts: their tokens are known only by bounds"):
        score_column([row], "min_k")
    assert score_column([row], "loss").tolist() == [-2.0]
    # a looser tolerance of the run accepts it; an exact (local) text has no bounds in its row
    assert ScoredText.from_scores("a", 1, {"loss": Bounded(-2.0, -2.1, -1.9, 0.2)}, lp, tolerance=0.5).scores == {"loss": -2.0}
    exact = ScoredText.from_scores("b", 0, {"loss": Bounded.exact(-2.0)}, blp([-1.0, -3.0]))
    assert "score_bounds" not in exact.to_json() and exact.unscored == {}


def test_score_items_nulls_scores_from_bound_only_tokens(tmp_path):
    from tests.unit.test_runner import StreamingFake, fake_lp

    class HalfBounded(StreamingFake):
        async def _alogprobs(self, texts, progress, on_done, vocab_stats=None):
            out = []
            for i, t in enumerate(texts):
                lp = fake_lp(t)
                lower = lp.logprobs.copy()
                if t.startswith("b"):
                    lower[0] = -math.inf  # one bound-only token
                lp.lower, lp.upper = lower, lp.logprobs.copy()
                on_done(i, lp)
                out.append(lp)
            return out

    from blackbox_mia.datasets import Item

    items = [Item("a", "alpha one", 1), Item("b", "bravo two", 0)]
    rows = score_items(items, parse_scorers("loss,min_k"), {"target": HalfBounded()}, tmp_path / "s.jsonl", None,
                       progress=False)
    assert rows[0].scores["loss"] is not None and rows[0].unscored == {}
    assert rows[1].scores == {"loss": None, "min_k": None} and set(rows[1].unscored) == {"loss", "min_k"}
    assert rows[1].bound_only == 1
