"""Is the benchmark contaminated at all? A dataset-level verdict with an exact p-value.

The prevalence interval (:mod:`.estimate`) answers "how much", and pays for its exactness with
width: on a canary whose members a scorer separates well it often still reaches down to 0.
This module answers the narrower question first, "does the swept benchmark hold any member?",
with a test whose false-alarm rate is exact in finite samples.

Null hypothesis H0: no swept item is a member, and the swept items and the reference
non-members are exchangeable (drawn alike: e.g. a random split of the same benchmark, or items
the model cannot have seen that come from the same source). Under H0 the N + n pooled scores
are assigned to "swept" (N) and "reference" (n) as a uniformly random n-subset, so any
statistic of the pooled ranks has a law that depends on N and n only (a permutation test:
Fisher 1935; Lehmann & Romano, Testing Statistical Hypotheses, §15.2). Ties are broken at
random, which keeps that law exact.

The tail test (the headline). Members sit in the upper tail of the non-member scores, so the
evidence is in how many swept items rise above the highest reference scores. For each rank j
of :data:`TAIL_RANKS` (up to n), X_j = the number of swept items above the j-th highest reference
score; under H0, X_j ≥ c exactly when the top c + j − 1 pooled items hold fewer than j reference
items, so

    p_j = P(X_j ≥ x_j) = P(Hypergeometric(N + n, n, x_j + j − 1) ≤ j − 1)

exactly (negative hypergeometric law of X_j). One rank suits one signal strength: j = 1 (the
count above the largest reference score) wins when members sit beyond every non-member, larger j
when they overlap the tail. The statistic is m = min_j p_j; its null law is simulated from
``n_draws`` random n-subsets, and the p-value (1 + #{draws with min-p ≤ m}) / (n_draws + 1) is
valid at every level for any ``n_draws`` (Besag & Clifford 1989; Phipson & Smyth 2010: the
observed arrangement is one more draw of the same law). The Bonferroni bound
min(1, J · m) is also valid (and conservative); it is reported too, because it does not stop
at the Monte Carlo floor 1/(n_draws + 1).

Combined features. Given F membership features per item (several scorers) and known members
(calibration members, disjoint from both sets), :func:`combined_scores` fits one linear score: a
class-balanced logistic regression of the members against the POOLED swept + reference items
(Maini et al. 2024 combine features linearly too, but fit them on the suspect-vs-validation
labels, which the exact test cannot use). The pooled items are mostly non-members, so the fit
learns what sets members apart from them; and since it sees the pooled sample only as an
unordered set (rows sorted before fitting), the combined score is the same function of every
item whichever n of them are the reference: the tail test on it keeps its exact level.

Where the reference is not exchangeable with the swept non-members (a perturbed control that
inherits its sources' membership, items of another era or style) the level is not guaranteed:
the verdict states its assumption and its reference.
"""

from __future__ import annotations

import numpy as np
from scipy import stats
from sklearn.linear_model import LogisticRegression

from ..types import BlackboxMIAError
from .prevalence import finite_scores

TAIL_RANKS = (1, 2, 3, 5, 8, 13, 21)  # ranks j of the reference scores the tail test counts above
DEFAULT_DRAWS = 9999  # null draws of the Monte Carlo permutation law (p-value floor 1e-4)
COMBINER_C = 1.0  # inverse L2 strength of the feature combination (features standardised on the pooled sample)
DRAW_CHUNK = 500  # null arrangements simulated at once (memory: chunk · (N + n) floats)
ASSUMPTION = ("the reference non-members are exchangeable with the swept items that are not members "
              "(same source, same selection; only membership differs)")


def tail_ranks(n_reference: int) -> tuple[int, ...]:
    """The ranks of :data:`TAIL_RANKS` a reference of ``n_reference`` scores has (j ≤ n).

    Raises:
        BlackboxMIAError: ``n_reference`` < 1.
    """
    if n_reference < 1:
        raise BlackboxMIAError("the tail test needs at least one reference non-member")
    return tuple(j for j in TAIL_RANKS if j <= n_reference)


def rank_pvalues(counts: np.ndarray, n_swept: int, n_reference: int, ranks: tuple[int, ...]) -> np.ndarray:
    """Exact one-sided p-values P(X_j ≥ x_j) of the counts above the reference order statistics.

    Args:
        counts: shape (..., J), x_j = swept items above the j-th highest reference score, for
            each j of ``ranks`` (length J).
        n_swept, n_reference: N and n.
        ranks: the ranks j (1-based), increasing.

    Returns:
        Shape (..., J): P(Hypergeometric(N + n, n, x_j + j − 1) ≤ j − 1), the negative
        hypergeometric tail of X_j under exchangeability (see the module docstring).
    """
    j = np.asarray(ranks)
    return stats.hypergeom.cdf(j - 1, n_swept + n_reference, n_reference, np.asarray(counts) + j - 1)


def _counts_above(reference_positions: np.ndarray, ranks: tuple[int, ...]) -> np.ndarray:
    """x_j from the sorted positions (0 = highest pooled score) of the reference items, shape
    (..., n): the j-th reference has position p_j, so p_j − (j − 1) swept items are above it."""
    j = np.asarray(ranks)
    return reference_positions[..., j - 1] - (j - 1)


def tail_null(n_swept: int, n_reference: int, ranks: tuple[int, ...], n_draws: int = DEFAULT_DRAWS,
              seed: int = 0) -> np.ndarray:
    """The simulated null law of the tail test's min-p statistic: shape (n_draws,), sorted.

    Each draw places the n reference items at a uniformly random n-subset of the N + n pooled
    positions (H0) and takes min_j p_j. It depends on (N, n, ranks, n_draws, seed) only, so a
    caller testing many splits of equal sizes computes it once.

    Raises:
        BlackboxMIAError: n_swept < 1, bad ranks, n_draws < 1.
    """
    if n_swept < 1 or n_draws < 1 or not ranks or max(ranks) > n_reference or min(ranks) < 1:
        raise BlackboxMIAError(f"tail null needs N >= 1, n_draws >= 1 and ranks in [1, n]; got N={n_swept}, "
                               f"n={n_reference}, ranks={ranks}, n_draws={n_draws}")
    rng = np.random.default_rng(seed)
    top = max(ranks)
    out = []
    for start in range(0, n_draws, DRAW_CHUNK):
        keys = rng.random((min(DRAW_CHUNK, n_draws - start), n_swept + n_reference))
        # the reference is the n positions with the smallest keys: a uniform random n-subset
        chosen = np.argpartition(keys, n_reference - 1, axis=1)[:, :n_reference]
        positions = np.sort(np.partition(chosen, top - 1, axis=1)[:, :top], axis=1)
        out.append(rank_pvalues(_counts_above(positions, ranks), n_swept, n_reference, ranks).min(axis=1))
    return np.sort(np.concatenate(out))


def reference_positions(swept, reference, seed: int = 0) -> np.ndarray:
    """Sorted positions of the reference items in the pooled sample ordered by decreasing score
    (0 = the highest), ties broken at random (seeded), shape (n,)."""
    pooled = np.concatenate([swept, reference])
    tiebreak = np.random.default_rng(seed).random(len(pooled))
    order = np.lexsort((tiebreak, -pooled))
    return np.flatnonzero(order >= len(swept))


def tail_test(swept_scores, reference_scores, *, alpha: float = 0.05, ranks: tuple[int, ...] | None = None,
              n_draws: int = DEFAULT_DRAWS, seed: int = 0, null: np.ndarray | None = None) -> dict:
    """The tail test: do more swept items rise above the top reference scores than chance allows?

    Args:
        swept_scores: shape (N,), the swept benchmark items (higher = member).
        reference_scores: shape (n,), known non-members, exchangeable with the swept
            non-members under H0.
        alpha: the level of the verdict (fraction).
        ranks: the reference ranks j counted above (default :func:`tail_ranks`).
        n_draws: draws of the simulated null law (``null`` None).
        seed: seed of the null draws and of the random tie-breaking.
        null: a precomputed :func:`tail_null` for these sizes and ranks (else computed).

    Returns:
        ``{"test", "detected" (p ≤ alpha), "alpha", "p_value" (Monte Carlo permutation, exact
        level), "p_floor" (1/(draws + 1)), "p_bonferroni" (min(1, J·min p_j), valid too),
        "counts" ({j: x_j}), "expected_counts" ({j: N·j/(n + 1)}, the null mean of x_j),
        "rank_p_values" ({j: p_j}), "n_swept", "n_reference", "n_draws", "method"}``.

    Raises:
        BlackboxMIAError: empty or non-finite scores, alpha outside (0, 1), a null of the wrong
            length for ``n_draws`` when both are given.
    """
    swept = finite_scores(swept_scores, "swept")
    reference = finite_scores(reference_scores, "reference non-member")
    if not 0 < alpha < 1:
        raise BlackboxMIAError(f"alpha must be in (0, 1), got {alpha}")
    n_swept, n_ref = len(swept), len(reference)
    ranks = tail_ranks(n_ref) if ranks is None else tuple(ranks)
    if null is None:
        null = tail_null(n_swept, n_ref, ranks, n_draws, seed)
    counts = _counts_above(reference_positions(swept, reference, seed), ranks)
    p_ranks = rank_pvalues(counts, n_swept, n_ref, ranks)
    m = float(p_ranks.min())
    n_le = int(np.searchsorted(null, m * (1 + 1e-12), side="right"))  # draws with min-p <= m (float slack)
    p_value = (1 + n_le) / (len(null) + 1)
    return {
        "test": "tail test",
        "detected": bool(p_value <= alpha),
        "alpha": alpha,
        "p_value": p_value,
        "p_floor": 1 / (len(null) + 1),
        "p_bonferroni": min(1.0, len(ranks) * m),
        "counts": {int(j): int(c) for j, c in zip(ranks, counts)},
        "expected_counts": {int(j): n_swept * j / (n_ref + 1) for j in ranks},
        "rank_p_values": {int(j): float(p) for j, p in zip(ranks, p_ranks)},
        "n_swept": n_swept,
        "n_reference": n_ref,
        "n_draws": len(null),
        "method": f"counts of swept items above the j-th highest reference score, j in {list(ranks)}; exact "
                  "negative hypergeometric p-value of each; the smallest calibrated by a Monte Carlo permutation "
                  f"law of {len(null)} draws, p = (1 + #draws <= observed) / (draws + 1): exact level under "
                  "exchangeability",
    }


def combined_scores(swept_features, reference_features, member_features) -> tuple[np.ndarray, np.ndarray, dict]:
    """One score per item from F features, fitted on members against the pooled sample.

    Args:
        swept_features: shape (N, F), the swept items' features (higher = member each).
        reference_features: shape (n, F), the reference non-members'.
        member_features: shape (m, F), known members, disjoint from both (m ≥ 2).

    Returns:
        ``(swept, reference, info)``: the combined scores, shapes (N,) and (n,), and ``info``
        (``weights`` per standardised feature, ``intercept``, ``n_members``, ``method``).
        A label-blind function of the pooled sample (see the module docstring): valid input to
        :func:`tail_test`.

    Raises:
        BlackboxMIAError: shapes that disagree, fewer than 2 members, non-finite features.
    """
    swept = np.asarray(swept_features, dtype=np.float64)
    reference = np.asarray(reference_features, dtype=np.float64)
    members = np.asarray(member_features, dtype=np.float64)
    if (swept.ndim != 2 or reference.ndim != 2 or members.ndim != 2
            or not swept.shape[1] == reference.shape[1] == members.shape[1] or len(members) < 2):
        raise BlackboxMIAError("combined features need 2-D (items, features) arrays with the same features and at "
                               "least 2 members")
    if not all(np.isfinite(x).all() for x in (swept, reference, members)):
        raise BlackboxMIAError("the features contain NaN or infinite values")
    pooled = np.concatenate([swept, reference])
    pooled = pooled[np.lexsort(pooled.T[::-1])]  # an unordered set: the fit cannot see which rows are reference
    mean, sd = pooled.mean(axis=0), pooled.std(axis=0)
    sd[sd == 0] = 1.0
    x = np.concatenate([members, pooled])
    y = np.r_[np.ones(len(members)), np.zeros(len(pooled))]
    model = LogisticRegression(C=COMBINER_C, class_weight="balanced", max_iter=1000).fit((x - mean) / sd, y)
    info = {"weights": model.coef_[0].tolist(), "intercept": float(model.intercept_[0]), "n_members": len(members),
            "method": "class-balanced L2 logistic regression (C = 1) of the members against the pooled swept + "
                      "reference items, features standardised on the pooled sample"}
    return model.decision_function((swept - mean) / sd), model.decision_function((reference - mean) / sd), info


def detection_verdict(swept_scores, reference_scores, reference: str, *, members=None, alpha: float = 0.05,
                      n_draws: int = DEFAULT_DRAWS, seed: int = 0) -> dict:
    """The sweep's headline: "contamination detected / not detected at alpha", with its p-value.

    Args:
        swept_scores: shape (N,) one score per swept item, or (N, F) F features (the first is
            the sweep's scorer).
        reference_scores: shape (n,) or (n, F), the reference non-members.
        reference: what the reference is (shown in the verdict, e.g. "calibration non-members
            of X", "--nonmembers F", "the control built from the benchmark").
        members: shape (m, F), known members' features: with F > 1 the test runs on
            :func:`combined_scores`; None (or F = 1): on the first feature.
        alpha, n_draws, seed: see :func:`tail_test`.

    Returns:
        :func:`tail_test`'s dict plus ``reference``, ``assumption``, ``combination``
        (:func:`combined_scores`'s info, or None) and ``sentence`` (the line to print first).

    Raises:
        BlackboxMIAError: see :func:`tail_test` and :func:`combined_scores`.
    """
    swept, ref = np.asarray(swept_scores, dtype=np.float64), np.asarray(reference_scores, dtype=np.float64)
    combination = None
    if swept.ndim == 2 and members is not None and swept.shape[1] > 1:
        swept, ref, combination = combined_scores(swept, ref, members)
    elif swept.ndim == 2:
        swept, ref = swept[:, 0], ref[:, 0]
    out = tail_test(swept, ref, alpha=alpha, n_draws=n_draws, seed=seed)
    if combination is not None:
        out["test"] = f"tail test on {len(combination['weights'])} combined features"
    verdict = "Contamination DETECTED" if out["detected"] else "Contamination not detected"
    p = out["p_value"]
    p_text = f"p < {out['p_floor'] * 1.0001:.2g} (Bonferroni bound {out['p_bonferroni']:.2g})" \
        if p <= out["p_floor"] else f"p = {p:.3g}"
    sentence = (f"{verdict} at alpha = {alpha:g}: {p_text}, {out['test']} of {out['n_swept']} swept items against "
                f"{out['n_reference']} {reference}; assumes {ASSUMPTION}.")
    return {**out, "reference": reference, "assumption": ASSUMPTION, "combination": combination, "sentence": sentence}
