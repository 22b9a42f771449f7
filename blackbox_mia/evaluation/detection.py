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
when they overlap the tail. The statistic is m = min_j p_j, and its p-value P(min_j p_j ≤ m) is
computed exactly: min_j p_j ≤ m exactly when X_j ≥ c_j(m) for some j (c_j(m) the smallest
count with p_j ≤ m), and the probability that no X_j reaches its c_j follows from scanning the
pooled items from the top, each next one a reference item with probability (references left) /
(items left), a dynamic programme over (items seen, references seen) (:func:`min_p_value`). The
test's level is exact (≤ alpha, equality up to the discreteness of the counts), with no Monte
Carlo error and no floor on the p-value.

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

from ..types import BlackboxMIAError
from .prevalence import finite_scores

TAIL_RANKS = (1, 2, 3, 5, 8, 13, 21)  # ranks j of the reference scores the tail test counts above
COMBINER_C = 1.0  # inverse L2 strength of the feature combination (features standardised on the pooled sample)
P_SLACK = 1e-9  # relative slack when comparing p-values computed by the same formula
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
    counts = np.asarray(counts)
    out = np.empty(counts.shape, dtype=np.float64)
    for index, j in enumerate(ranks):
        drawn = counts[..., index, None] + j - 1  # the top x_j + j − 1 pooled items, of which i < j reference
        i = np.arange(j)
        log_pmf = _log_comb(n_reference, i) + _log_comb(n_swept, drawn - i) - _log_comb(n_swept + n_reference, drawn)
        out[..., index] = np.minimum(1.0, np.exp(log_pmf).sum(axis=-1))
    return out


def _log_comb(a, b) -> np.ndarray:
    """log C(a, b) elementwise (−inf where b < 0 or b > a)."""
    a, b = np.broadcast_arrays(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64))
    valid = (b >= 0) & (b <= a)
    safe_b = np.where(valid, b, 0.0)
    from scipy import special  # imported where used: the CLI starts without scipy

    value = special.gammaln(a + 1) - special.gammaln(safe_b + 1) - special.gammaln(a - safe_b + 1)
    return np.where(valid, value, -np.inf)


def min_p_value(m: float, n_swept: int, n_reference: int, ranks: tuple[int, ...]) -> float:
    """Exact P(min_j p_j ≤ m) under exchangeability: the tail test's p-value for statistic m.

    The event is {X_j ≥ c_j for some j of ``ranks``}, c_j the smallest count with p_j ≤ m.
    Scanning the pooled order from the top, with r reference and x swept items seen, the next
    item is a reference item with probability (n − r)/(N + n − r − x); the (r + 1)-th reference
    then has x swept items above it. The mass of the paths on which some rank j meets
    x ≥ c_j is summed directly (accurate for tiny p-values).

    Raises:
        BlackboxMIAError: ranks outside [1, n] or N < 1.
    """
    if n_swept < 1 or not ranks or min(ranks) < 1 or max(ranks) > n_reference:
        raise BlackboxMIAError(f"the tail test needs N >= 1 and ranks in [1, n]; got N={n_swept}, n={n_reference}, "
                               f"ranks={ranks}")
    grid = np.repeat(np.arange(n_swept + 1)[:, None], len(ranks), axis=1)
    table = rank_pvalues(grid, n_swept, n_reference, ranks)  # (N + 1, J)
    below = table <= m * (1 + P_SLACK)
    crit = np.where(below.any(axis=0), below.argmax(axis=0), n_swept + 1)  # c_j; N + 1: never
    top = max(ranks)
    limit = [n_swept + 1] * top  # limit[r]: the (r + 1)-th reference item rejects when x >= limit[r]
    for j, c in zip(ranks, crit.tolist()):
        limit[j - 1] = c
    alive = [1.0] + [0.0] * (top - 1)  # alive[r]: P(r reference and t − r swept items seen, none rejecting)
    hit = 0.0
    for t in range(n_swept + top):  # plain floats: a few dozen states per step, numpy calls would dominate
        left = n_swept + n_reference - t
        step = [0.0] * top
        for r in range(max(0, t - n_swept), min(t, top - 1) + 1):
            mass, x = alive[r], t - r
            if mass == 0.0:
                continue
            to_ref = mass * (n_reference - r) / left
            if x >= limit[r]:
                hit += to_ref
            elif r + 1 < top:  # the top-th reference item ends the scan
                step[r + 1] += to_ref
            step[r] += mass * (n_swept - x) / left
        alive = step
    return min(1.0, hit)


def _counts_above(reference_positions: np.ndarray, ranks: tuple[int, ...]) -> np.ndarray:
    """x_j from the sorted positions (0 = highest pooled score) of the reference items, shape
    (n,): the j-th reference has position p_j, so p_j − (j − 1) swept items are above it."""
    j = np.asarray(ranks)
    return reference_positions[j - 1] - (j - 1)


def reference_positions(swept, reference) -> np.ndarray:
    """Sorted positions of the reference items in the pooled sample ordered by decreasing score
    (0 = the highest), shape (n,). A reference item tied with swept items is placed above them:
    a tie never counts as a swept item above a reference one, so the test is conservative where
    scores tie (level ≤ alpha; exact without ties), and scores that are all equal (a text-only
    test that matched nothing) give p = 1, never a verdict drawn by lot."""
    pooled = np.concatenate([swept, reference])
    is_swept = np.arange(len(pooled)) < len(swept)
    order = np.lexsort((is_swept, -pooled))
    return np.flatnonzero(order >= len(swept))


def tail_test(swept_scores, reference_scores, *, alpha: float = 0.05, ranks: tuple[int, ...] | None = None) -> dict:
    """The tail test: do more swept items rise above the top reference scores than chance allows?

    Args:
        swept_scores: shape (N,), the swept benchmark items (higher = member).
        reference_scores: shape (n,), known non-members, exchangeable with the swept
            non-members under H0.
        alpha: the level of the verdict (fraction).
        ranks: the reference ranks j counted above (default :func:`tail_ranks`); ties count
            against the swept items (:func:`reference_positions`).

    Returns:
        ``{"test", "detected" (p ≤ alpha), "alpha", "p_value" (exact, :func:`min_p_value`),
        "statistic" (min_j p_j), "counts" ({j: x_j}), "expected_counts" ({j: N·j/(n + 1)},
        the null mean of x_j), "rank_p_values" ({j: p_j}), "n_swept", "n_reference",
        "method"}``.

    Raises:
        BlackboxMIAError: empty or non-finite scores, alpha outside (0, 1), ranks outside [1, n].
    """
    swept = finite_scores(swept_scores, "swept")
    reference = finite_scores(reference_scores, "reference non-member")
    if not 0 < alpha < 1:
        raise BlackboxMIAError(f"alpha must be in (0, 1), got {alpha}")
    n_swept, n_ref = len(swept), len(reference)
    ranks = tail_ranks(n_ref) if ranks is None else tuple(ranks)
    counts = _counts_above(reference_positions(swept, reference), ranks)
    p_ranks = rank_pvalues(counts, n_swept, n_ref, ranks)
    m = float(p_ranks.min())
    p_value = min_p_value(m, n_swept, n_ref, ranks)
    return {
        "test": "tail test",
        "detected": bool(p_value <= alpha),
        "alpha": alpha,
        "p_value": p_value,
        "statistic": m,
        "counts": {int(j): int(c) for j, c in zip(ranks, counts)},
        "expected_counts": {int(j): n_swept * j / (n_ref + 1) for j in ranks},
        "rank_p_values": {int(j): float(p) for j, p in zip(ranks, p_ranks)},
        "n_swept": n_swept,
        "n_reference": n_ref,
        "method": f"counts of swept items above the j-th highest reference score, j in {list(ranks)}; exact "
                  "negative hypergeometric p-value of each; the p-value of the smallest is its exact law under "
                  "exchangeability (dynamic programme over the pooled order)",
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
    from sklearn.linear_model import LogisticRegression  # imported where used: the CLI starts without it

    model = LogisticRegression(C=COMBINER_C, class_weight="balanced", max_iter=1000).fit((x - mean) / sd, y)
    info = {"weights": model.coef_[0].tolist(), "intercept": float(model.intercept_[0]), "n_members": len(members),
            "method": "class-balanced L2 logistic regression (C = 1) of the members against the pooled swept + "
                      "reference items, features standardised on the pooled sample"}
    return model.decision_function((swept - mean) / sd), model.decision_function((reference - mean) / sd), info


def detection_verdict(swept_scores, reference_scores, reference: str, *, members=None, alpha: float = 0.05) -> dict:
    """The sweep's headline: "contamination detected / not detected at alpha", with its p-value.

    Args:
        swept_scores: shape (N,) one score per swept item, or (N, F) F features (the first is
            the sweep's scorer).
        reference_scores: shape (n,) or (n, F), the reference non-members.
        reference: what the reference is (shown in the verdict, e.g. "calibration non-members
            of X", "--nonmembers F", "the control built from the benchmark").
        members: shape (m, F), known members' features: with F > 1 the test runs on
            :func:`combined_scores`; None (or F = 1): on the first feature.
        alpha: see :func:`tail_test`.

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
    out = tail_test(swept, ref, alpha=alpha)
    if combination is not None:
        out["test"] = f"tail test on {len(combination['weights'])} combined features"
    verdict = "Contamination DETECTED" if out["detected"] else "Contamination not detected"
    sentence = (f"{verdict} at alpha = {alpha:g}: p = {out['p_value']:.3g}, {out['test']} of {out['n_swept']} swept items against "
                f"{out['n_reference']} {reference}; assumes {ASSUMPTION}.")
    return {**out, "reference": reference, "assumption": ASSUMPTION, "combination": combination, "sentence": sentence}
