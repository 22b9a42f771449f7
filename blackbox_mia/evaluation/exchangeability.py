"""Was a benchmark trained on in its canonical order? The sharded exchangeability test, exact.

Oren et al. 2024 (ICLR, "Proving Test Set Contamination in Black Box Language Models", §3-4):
a model trained on a benchmark file in its canonical order (the order the file holds its
items) assigns that order a higher likelihood than shuffled orders of the same items, while a
model that never saw the file cannot tell the canonical order from any other.

The sharded test. The N items, in canonical order, are cut into r contiguous shards
(:func:`shard_bounds`: sizes differ by at most one, the first N mod r one larger, as in the
authors' code). For shard s, L_s0 is the log-probability (nats, the whole text) of its items
joined in canonical order (:func:`~blackbox_mia.datasets.ordered.join_items`), and
L_s1 ... L_sm those of m orders drawn independently and uniformly among the shard's
permutations (:func:`draw_orders`; a draw may repeat the canonical order).

Null hypothesis H0: the item order is exchangeable for the model: given the r shards' item
sets, each shard's canonical order is a uniformly random permutation of its items, the shards'
independent, and the model (the function text -> reported log-prob) does not depend on which
order is the canonical one. This holds when the model was not trained on the benchmark in its
canonical order AND the file order carries no structure of its own (items sorted by topic,
length, difficulty or source could be preferred by any model: a false alarm the test cannot
tell from contamination).

The exact p-value (ours; the paper's own exact variant is a permutation test on the mean
difference). Per shard, R_s = #{j ≥ 1 : L_sj ≥ L_s0}, the canonical order's rank from the top
with ties counted against it. The statistic is S = Σ_s R_s (small = canonical preferred) and

    p = P(U_1 + ... + U_r ≤ S),  U_s iid uniform on {0, ..., m},

computed exactly (:func:`rank_sum_pvalue`, an inclusion-exclusion count). Proof of the level:
under H0 the m + 1 orders of shard s are iid uniform permutations, independent of the model,
so L_s0, ..., L_sm are iid; breaking ties at random, the number U_s of the L_sj (j ≥ 1) above
L_s0 is uniform on {0..m} (the m + 1 values' ranking is uniform), and R_s ≥ U_s (ties count
as above). The shards' orders are independent, so the U_s are iid and S ≥ Σ U_s. With F the
CDF of Σ U_s, p = F(S) ≥ F(Σ U_s), and F(X) of a discrete X with CDF F is super-uniform:
P(p ≤ alpha) ≤ alpha for every alpha. No normal approximation, no Monte Carlo error, and it
holds for any statistic of the text: a backend whose log-probs are bounded approximations (the
black-box tracker) keeps the level, as long as a text gets the same value whichever order is
canonical (precision costs power only). The smallest attainable p is (m + 1)^-r.

The paper's t-test (reported beside it, asymptotic): d_s = L_s0 − mean_j L_sj, t = mean(d) /
sd(d) · √r (sd with r − 1 degrees of freedom; the reference code divides by r), p = 1 − T_{r−1}(t).
Its level rests on the d_s being normal; with few items per shard it is only approximate.

A negative (p > alpha) says the canonical ORDER is not preferred: it does not clear the model
of having trained on the items in another order, shuffled into other data, or paraphrased
(the membership scorers and ``bbmia sweep`` test the items themselves).
"""

from __future__ import annotations

import math

import numpy as np

from ..option_names import named
from ..types import BlackboxMIAError

DEFAULT_SHARDS = 50  # r: Oren et al. 2024's shards (the authors' code and LLMSanitize default)
DEFAULT_PERMUTATIONS = 250  # m: shuffled orders per shard (the same defaults)
MIN_SHARD_ITEMS = 2  # a shard of one item has a single order
ASSUMPTION = ("the benchmark's item order is exchangeable for the model: the model did not train on the file in "
              "this order, and the order carries no structure of its own (topic, length or difficulty sorting)")


def shard_bounds(n_items: int, n_shards: int) -> list[tuple[int, int]]:
    """The r contiguous shards of N items, as ``(start, end)`` index pairs (end excluded).

    Sizes differ by at most one: the first ``N mod r`` shards hold one item more (as in the
    authors' code).

    Raises:
        BlackboxMIAError: ``n_shards`` < 1, or fewer than :data:`MIN_SHARD_ITEMS` items per shard.
    """
    if n_shards < 1:
        raise BlackboxMIAError(f"{named('n_shards')} must be at least 1, got {n_shards}")
    if n_items < MIN_SHARD_ITEMS * n_shards:
        raise BlackboxMIAError(
            f"{n_items} items make fewer than {MIN_SHARD_ITEMS} items per shard with {n_shards} shards (a shard needs "
            f"two items to have an order): use {named('n_shards', max(1, n_items // MIN_SHARD_ITEMS))} or fewer")
    size, extra = divmod(n_items, n_shards)
    bounds, start = [], 0
    for s in range(n_shards):
        end = start + size + (s < extra)
        bounds.append((start, end))
        start = end
    return bounds


def draw_orders(bounds: list[tuple[int, int]], n_permutations: int, seed: int) -> list[list[tuple[int, ...]]]:
    """Per shard, ``n_permutations`` orders of its items, each drawn uniformly and independently
    (with replacement: the canonical order itself may be drawn), seeded.

    Returns:
        ``orders[s][j]``: a tuple of the item indices (into the whole sequence) of shard s, in
        the j-th shuffled order.

    Raises:
        BlackboxMIAError: ``n_permutations`` < 1.
    """
    if n_permutations < 1:
        raise BlackboxMIAError(f"{named('n_permutations')} must be at least 1, got {n_permutations}")
    rng = np.random.default_rng(seed)
    return [[tuple(int(i) for i in start + rng.permutation(end - start)) for _ in range(n_permutations)]
            for start, end in bounds]


def canonical_ranks(canonical, permuted) -> np.ndarray:
    """R_s = #{j : L_sj ≥ L_s0}: per shard, the shuffled orders at least as likely as the canonical.

    Args:
        canonical: shape (r,), L_s0 (nats).
        permuted: shape (r, m), L_sj (nats).

    Returns:
        Shape (r,), integers in [0, m] (ties counted against the canonical order).

    Raises:
        BlackboxMIAError: shapes that disagree or non-finite log-probs.
    """
    canonical, permuted = _checked(canonical, permuted)
    return (permuted >= canonical[:, None]).sum(axis=1)


def rank_sum_pvalue(rank_sum: int, n_shards: int, n_permutations: int) -> float:
    """Exact P(U_1 + ... + U_r ≤ S), U_s iid uniform on {0, ..., m}: the test's p-value.

    The count of (u_1..u_r) in {0..m}^r with sum ≤ S is, by inclusion-exclusion over the
    coordinates forced above m (Feller 1968, vol. I, §XI.7 for the sum of uniform dice),
    Σ_{k ≥ 0} (−1)^k C(r, k) C(S − k(m + 1) + r, r), computed in integers and divided by
    (m + 1)^r (correctly rounded), so tiny p-values keep their digits.

    Raises:
        BlackboxMIAError: r < 1, m < 1 or S outside [0, r·m].
    """
    r, m = n_shards, n_permutations
    if r < 1 or m < 1 or not 0 <= rank_sum <= r * m:
        raise BlackboxMIAError(f"a rank sum needs r >= 1, m >= 1 and 0 <= S <= r*m; got S={rank_sum}, r={r}, m={m}")
    count = sum((-1) ** k * math.comb(r, k) * math.comb(rank_sum - k * (m + 1) + r, r)
                for k in range(min(r, rank_sum // (m + 1)) + 1))
    return count / (m + 1) ** r


def t_test(canonical, permuted) -> dict:
    """The paper's one-sided t-test of the per-shard differences (asymptotic).

    d_s = L_s0 − mean_j L_sj (nats); t = mean(d) / sd(d) · √r with sd on r − 1 degrees of
    freedom; p = 1 − T_{r−1}(t) (Oren et al. 2024, §4; their code's sd divides by r instead).

    Returns:
        ``{"t", "p_value", "mean_difference_nats", "df"}``; ``t`` and ``p_value`` None when
        r < 2 or every d_s is equal (no spread to test).

    Raises:
        BlackboxMIAError: shapes that disagree or non-finite log-probs.
    """
    canonical, permuted = _checked(canonical, permuted)
    diffs = canonical - permuted.mean(axis=1)
    r = len(diffs)
    sd = float(diffs.std(ddof=1)) if r >= 2 else 0.0
    if sd == 0.0:
        return {"t": None, "p_value": None, "mean_difference_nats": float(diffs.mean()), "df": r - 1}
    from scipy import stats  # imported where used: the CLI starts without scipy

    t = float(diffs.mean() / sd * math.sqrt(r))
    return {"t": t, "p_value": float(stats.t.sf(t, df=r - 1)), "mean_difference_nats": float(diffs.mean()), "df": r - 1}


def exchangeability_test(canonical, permuted, *, alpha: float = 0.05) -> dict:
    """The verdict: is the canonical order preferred (see the module docstring)?

    Args:
        canonical: shape (r,), per shard the log-prob (nats) of its items in canonical order.
        permuted: shape (r, m), per shard the log-probs of its m shuffled orders.
        alpha: the verdict's level (fraction).

    Returns:
        ``{"test", "preferred" (p ≤ alpha), "alpha", "p_value" (exact), "rank_sum" (S),
        "null_mean_rank_sum" (r·m/2), "min_p_value" ((m + 1)^-r), "ranks" (R_s per shard),
        "shard_p_values" ((R_s + 1)/(m + 1) each), "t_test" (:func:`t_test`), "n_shards",
        "n_permutations", "assumption", "method", "sentence"}``.

    Raises:
        BlackboxMIAError: alpha outside (0, 1), shapes that disagree, non-finite log-probs.
    """
    if not 0 < alpha < 1:
        raise BlackboxMIAError(f"alpha must be in (0, 1), got {alpha}")
    canonical, permuted = _checked(canonical, permuted)
    r, m = permuted.shape
    ranks = canonical_ranks(canonical, permuted)
    rank_sum = int(ranks.sum())
    p_value = rank_sum_pvalue(rank_sum, r, m)
    preferred = p_value <= alpha
    verdict = "canonical order PREFERRED" if preferred else "canonical order not preferred"
    sentence = (f"{verdict} at alpha = {alpha:g}: p = {p_value:.3g} (exact; sum of the canonical order's ranks "
                f"{rank_sum} over {r} shards of {m} shuffled orders each, null mean {r * m / 2:g}); assumes {ASSUMPTION}.")
    return {
        "test": "sharded exchangeability test (Oren et al. 2024), exact rank sum",
        "preferred": bool(preferred),
        "alpha": alpha,
        "p_value": p_value,
        "rank_sum": rank_sum,
        "null_mean_rank_sum": r * m / 2,
        "min_p_value": 1 / (m + 1) ** r,
        "ranks": ranks.tolist(),
        "shard_p_values": ((ranks + 1) / (m + 1)).tolist(),
        "t_test": t_test(canonical, permuted),
        "n_shards": r,
        "n_permutations": m,
        "assumption": ASSUMPTION,
        "method": "per shard, the shuffled orders at least as likely as the canonical order (ties counted against it); "
                  "their sum's exact law under exchangeability (iid uniform ranks)",
        "sentence": sentence,
    }


def _checked(canonical, permuted) -> tuple[np.ndarray, np.ndarray]:
    """The log-probs as float arrays of shapes (r,) and (r, m), checked."""
    canonical = np.asarray(canonical, dtype=np.float64)
    permuted = np.asarray(permuted, dtype=np.float64)
    if canonical.ndim != 1 or permuted.ndim != 2 or len(canonical) != len(permuted) or not canonical.size or not permuted.shape[1]:
        raise BlackboxMIAError(f"need canonical log-probs of shape (r,) and shuffled ones of shape (r, m), got "
                               f"{canonical.shape} and {permuted.shape}")
    if not (np.isfinite(canonical).all() and np.isfinite(permuted).all()):
        raise BlackboxMIAError("the shard log-probs contain NaN or infinite values")
    return canonical, permuted
