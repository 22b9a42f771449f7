"""Attack-level metrics: ROC, AUC, TPR at low FPR, bootstrap confidence intervals, length buckets.

Convention: scores are "higher = more likely a member"; labels are 1 = member, 0 = non-member.
Reporting AUC together with TPR at low FPR, each with a bootstrap confidence interval, follows
Carlini et al. 2022 ("Membership inference attacks from first principles") and Duan et al. 2024
("Do membership inference attacks work on large language models?").
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np

from ..types import BlackboxMIAError

DEFAULT_FPRS = (0.001, 0.01, 0.05, 0.1)
MIN_PER_CLASS_CI = 10  # texts of each class below which no bootstrap interval is given (it would look exact)
WIKIMIA_EDGES = (32, 64, 128, 256)
# Resample blocks are cut so that one block holds at most this many (resample, item) counts.
_BLOCK_CELLS = 4_000_000

Statistic = Callable[[np.ndarray, np.ndarray], float]


def check_binary(labels, scores) -> tuple[np.ndarray, np.ndarray]:
    """Validate a labelled score set and return ``(labels int64 (n,), scores float64 (n,))``.

    Raises:
        BlackboxMIAError: shapes differ or are not 1-D, labels outside {0, 1}, non-finite
            scores, or only one class present.
    """
    y = np.asarray(labels)
    s = np.asarray(scores, dtype=np.float64)
    if y.ndim != 1 or s.ndim != 1 or len(y) != len(s):
        raise BlackboxMIAError(
            f"labels and scores must be 1-D of the same length, got {y.shape} and {s.shape}"
        )
    if not np.isin(y, (0, 1)).all():
        raise BlackboxMIAError("labels must be 1 (member) or 0 (non-member)")
    bad = np.flatnonzero(~np.isfinite(s))
    if bad.size:
        raise BlackboxMIAError(
            f"{bad.size} score(s) are NaN or infinite (first at index {int(bad[0])})"
        )
    y = y.astype(np.int64)
    if y.min() == y.max():
        raise BlackboxMIAError("need both members (label 1) and non-members (label 0)")
    return y, s


def roc(labels, scores) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ROC curve of "flag when score ≥ threshold" (sklearn.metrics.roc_curve, all points kept).

    Args:
        labels: shape (n,), 1 = member, 0 = non-member.
        scores: shape (n,), higher = more likely a member.

    Returns:
        ``(fpr, tpr, thresholds)``, each shape (m,), starting at (0, 0) with threshold +inf.
        Tied scores form one threshold, so a tie between a member and a non-member is one
        diagonal step (sklearn's convention).

    Raises:
        BlackboxMIAError: see :func:`check_binary`.
    """
    from sklearn.metrics import roc_curve

    y, s = check_binary(labels, scores)
    return roc_curve(y, s, drop_intermediate=False)


def auc(labels, scores) -> float:
    """Area under the ROC curve (sklearn.metrics.roc_auc_score); ties count 1/2.

    Raises:
        BlackboxMIAError: see :func:`check_binary`.
    """
    from sklearn.metrics import roc_auc_score

    y, s = check_binary(labels, scores)
    return float(roc_auc_score(y, s))


def tpr_at_fpr(labels, scores, fpr_target: float) -> float:
    """Largest TPR among the ROC points whose FPR ≤ ``fpr_target`` (no interpolation).

    This is the "TPR at low FPR" of Carlini et al. 2022: the best detection rate an attacker
    reaches while wrongly flagging at most ``fpr_target`` of the non-members. Their published
    code selects ``fpr < target`` (strict); we use ``≤``, which differs only when a ROC point
    lies exactly on the target (e.g. 1 false positive among 100 non-members at 1%). When
    ``1 / n_nonmembers > fpr_target`` the only admissible point has FPR = 0 and the value is
    the TPR at zero false positives (see :func:`evaluate_scores`, which flags it).

    Args:
        labels: shape (n,) (see :func:`roc`).
        scores: shape (n,) (see :func:`roc`).
        fpr_target: in [0, 1].

    Raises:
        BlackboxMIAError: bad inputs or ``fpr_target`` outside [0, 1].
    """
    _check_fpr(fpr_target)
    fpr, tpr, _ = roc(labels, scores)
    return float(tpr[fpr <= fpr_target].max())


def bootstrap_ci(
    labels,
    scores,
    statistic: str | Statistic = "auc",
    n_boot: int = 1000,
    alpha: float = 0.05,
    seed: int = 0,
    stratified: bool = True,
) -> tuple[float, float]:
    """Percentile bootstrap confidence interval of a statistic of (labels, scores).

    Stratified (default): each resample draws ``n_members`` members and ``n_nonmembers``
    non-members with replacement, so every resample has both classes and the class balance
    is fixed. Unstratified: ``n`` items with replacement from the pooled set; resamples with
    one class only are dropped.

    Args:
        labels: shape (n,).
        scores: shape (n,).
        statistic: ``"auc"``, ``"tpr@<fpr>"`` (e.g. ``"tpr@0.01"``), or a callable
            ``f(labels, scores) -> float``. The named statistics run vectorised over all
            resamples (same values as sklearn on each resample); a callable runs once per
            resample. Both see the same resamples for the same ``seed``.
        n_boot: number of resamples (≥ 1).
        alpha: the interval covers 1 − alpha (0.05 → 95%).
        seed: seed of the numpy Generator drawing the resamples.
        stratified: resample members and non-members separately.

    Returns:
        ``(lo, hi)``: the alpha/2 and 1 − alpha/2 percentiles of the resampled statistic.

    Raises:
        BlackboxMIAError: bad inputs, unknown statistic name, ``n_boot < 1``, alpha outside
            (0, 1), or no valid resample.
    """
    y, s = check_binary(labels, scores)
    _check_boot(n_boot, alpha)
    if callable(statistic):
        values = np.full(n_boot, np.nan)
        row = 0
        for block in _resample_blocks(y, n_boot, seed, stratified):
            for idx in block:
                if y[idx].min() != y[idx].max():
                    values[row] = statistic(y[idx], s[idx])
                row += 1
    elif statistic == "auc":
        values = bootstrap_roc_stats(y, s, (), n_boot, seed, stratified)[0]
    elif isinstance(statistic, str) and statistic.startswith("tpr@"):
        try:
            target = float(statistic[4:])
        except ValueError:
            raise BlackboxMIAError(f"bad statistic {statistic!r}; use e.g. 'tpr@0.01'") from None
        _check_fpr(target)
        values = bootstrap_roc_stats(y, s, (target,), n_boot, seed, stratified)[1][:, 0]
    else:
        raise BlackboxMIAError(
            f"unknown statistic {statistic!r}: use 'auc', 'tpr@<fpr>' or a callable"
        )
    return _percentile_ci(values, alpha)


def bootstrap_roc_stats(
    labels,
    scores,
    fprs: Sequence[float],
    n_boot: int = 1000,
    seed: int = 0,
    stratified: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """AUC and TPR at each FPR target on every bootstrap resample, vectorised.

    Each resample is represented by the multiplicity of every original item; the ROC of a
    resample is then a cumulative sum over the distinct score values (in descending order) of
    member and non-member multiplicities — the same points as sklearn's ``roc_curve`` on the
    resampled data, plus repeated points for absent values, which change neither the
    trapezoidal area nor the TPR at an FPR.

    Args:
        labels: shape (n,).
        scores: shape (n,).
        fprs: FPR targets in [0, 1], shape (f,).
        n_boot: as in :func:`bootstrap_ci`.
        seed: as in :func:`bootstrap_ci`.
        stratified: as in :func:`bootstrap_ci`.

    Returns:
        ``(aucs, tprs)`` of shapes (n_boot,) and (n_boot, f); NaN for a resample with one
        class only (possible only when ``stratified`` is False).

    Raises:
        BlackboxMIAError: bad inputs.
    """
    y, s = check_binary(labels, scores)
    _check_boot(n_boot, 0.05)
    for f in fprs:
        _check_fpr(f)
    order = np.argsort(-s, kind="stable")
    s_desc, member = s[order], y[order].astype(bool)
    starts = np.r_[0, np.flatnonzero(np.diff(s_desc)) + 1]
    n = len(y)
    aucs, tprs = [], []
    for block in _resample_blocks(y, n_boot, seed, stratified):
        b = len(block)
        counts = np.bincount(
            (np.arange(b)[:, None] * n + block).ravel(), minlength=b * n
        ).reshape(b, n)[:, order]
        tp = np.cumsum(np.add.reduceat(counts * member, starts, axis=1), axis=1)
        fp = np.cumsum(np.add.reduceat(counts * ~member, starts, axis=1), axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            tpr = np.hstack([np.zeros((b, 1)), tp / tp[:, -1:]])
            fpr = np.hstack([np.zeros((b, 1)), fp / fp[:, -1:]])
        area = np.sum(np.diff(fpr, axis=1) * (tpr[:, 1:] + tpr[:, :-1]) / 2, axis=1)
        cols = [np.where(fpr <= f, tpr, -np.inf).max(axis=1) for f in fprs]
        tpr_at = np.stack(cols, axis=1) if cols else np.empty((b, 0))
        one_class = (tp[:, -1] == 0) | (fp[:, -1] == 0)
        area[one_class] = np.nan
        tpr_at[one_class] = np.nan
        aucs.append(area)
        tprs.append(tpr_at)
    return np.concatenate(aucs), np.concatenate(tprs)


def small_sample(n_members: int, n_nonmembers: int) -> str | None:
    """A warning when either class has fewer than :data:`MIN_PER_CLASS_CI` texts, else None.

    A bootstrap of 2 members and 1 non-member resamples a handful of orderings: its interval can
    be ``[1.000, 1.000]``, which reads as certainty. Such intervals are not given at all.
    """
    if min(n_members, n_nonmembers) >= MIN_PER_CLASS_CI:
        return None
    return (f"only {n_members} members and {n_nonmembers} non-members (fewer than {MIN_PER_CLASS_CI} of a class): "
            "no confidence interval is given, and an AUC on so few texts says little")


def evaluate_scores(
    labels,
    scores,
    fprs: Sequence[float] = DEFAULT_FPRS,
    n_boot: int = 1000,
    seed: int = 0,
    alpha: float = 0.05,
) -> dict:
    """AUC and TPR at each low FPR, with stratified percentile-bootstrap CIs.

    Args:
        labels: shape (n,).
        scores: shape (n,).
        fprs: FPR targets (fractions: 0.01 = 1%).
        n_boot: bootstrap resamples; 0 skips the CIs (they are then None).
        seed: bootstrap seed.
        alpha: CIs cover 1 − alpha.

    Returns:
        ``{"n_members", "n_nonmembers", "auc", "auc_ci": [lo, hi], "tpr_at_fpr": {"0.001": v,
        ...}, "tpr_at_fpr_ci": {"0.001": [lo, hi], ...}, "ci_level", "n_boot", "notes": {...}}``,
        plus ``"small_sample"`` (:func:`small_sample`'s warning) when a class has fewer than
        :data:`MIN_PER_CLASS_CI` texts: the CIs are then None.
        When ``1 / n_nonmembers > fpr`` no ROC point can have a non-zero FPR ≤ ``fpr``: the
        value and CI are None and ``notes[key]`` says so (with the TPR at zero false
        positives). Keys are ``f"{fpr:g}"``.

    Raises:
        BlackboxMIAError: see :func:`check_binary`, :func:`bootstrap_ci`.
    """
    y, s = check_binary(labels, scores)
    for f in fprs:
        _check_fpr(f)
    n0 = int((y == 0).sum())
    keys = [f"{f:g}" for f in fprs]
    fpr, tpr, _ = roc(y, s)
    out: dict = {
        "n_members": int(len(y) - n0),
        "n_nonmembers": n0,
        "auc": auc(y, s),
        "auc_ci": None,
        "tpr_at_fpr": {},
        "tpr_at_fpr_ci": {},
        "ci_level": 1 - alpha,
        "n_boot": int(n_boot),
        "notes": {},
    }
    measurable = [1.0 / n0 <= f for f in fprs]
    if n_boot < 0:
        raise BlackboxMIAError(f"n_boot must be ≥ 0, got {n_boot}")
    warning = small_sample(out["n_members"], n0)
    if warning is not None:
        out["small_sample"] = warning
        n_boot = 0  # no interval: it would look exact
    if n_boot > 0:
        _check_boot(n_boot, alpha)
        aucs, tprs = bootstrap_roc_stats(y, s, tuple(fprs), n_boot, seed, True)
        out["auc_ci"] = list(_percentile_ci(aucs, alpha))
    for j, (key, f) in enumerate(zip(keys, fprs)):
        if measurable[j]:
            out["tpr_at_fpr"][key] = float(tpr[fpr <= f].max())
            out["tpr_at_fpr_ci"][key] = list(_percentile_ci(tprs[:, j], alpha)) if n_boot else None
        else:
            out["tpr_at_fpr"][key] = None
            out["tpr_at_fpr_ci"][key] = None
            out["notes"][key] = (
                f"not measurable: with {n0} non-members the smallest non-zero FPR is "
                f"1/{n0} = {1 / n0:.3g} > {f:g}; TPR at zero false positives is "
                f"{float(tpr[fpr == 0].max()):.3f}. Need ≥ {int(np.ceil(1 / f))} non-members."
            )
    return out


def length_buckets(word_counts, edges: Sequence[int] = WIKIMIA_EDGES) -> list[str]:
    """Bucket label of each text: the smallest edge ≥ its word count, else ``">{last edge}"``.

    WikiMIA (Shi et al. 2024) reports results per length 32/64/128/256 words.

    Args:
        word_counts: shape (n,), non-negative integers (words, as counted by the caller).
        edges: strictly increasing positive integers.

    Returns:
        n labels such as ``"32"``, ``"256"``, ``">256"``.

    Raises:
        BlackboxMIAError: negative counts or edges not strictly increasing.
    """
    counts = np.asarray(word_counts)
    edges_arr = np.asarray(edges)
    if edges_arr.ndim != 1 or edges_arr.size == 0 or (np.diff(edges_arr) <= 0).any():
        raise BlackboxMIAError(f"edges must be strictly increasing, got {tuple(edges)}")
    if counts.ndim != 1 or (counts < 0).any():
        raise BlackboxMIAError("word counts must be a 1-D array of non-negative integers")
    labels = [str(e) for e in edges] + [f">{edges[-1]}"]
    return [labels[i] for i in np.searchsorted(edges_arr, counts, side="left")]


def evaluate_by_length(
    labels,
    scores,
    word_counts,
    edges: Sequence[int] = WIKIMIA_EDGES,
    fprs: Sequence[float] = DEFAULT_FPRS,
    n_boot: int = 1000,
    seed: int = 0,
) -> dict[str, dict]:
    """:func:`evaluate_scores` within each length bucket (see :func:`length_buckets`).

    Args:
        labels: shape (n,).
        scores: shape (n,).
        word_counts: shape (n,).
        edges: as in :func:`length_buckets` and :func:`evaluate_scores`.
        fprs: as in :func:`length_buckets` and :func:`evaluate_scores`.
        n_boot: as in :func:`length_buckets` and :func:`evaluate_scores`.
        seed: as in :func:`length_buckets` and :func:`evaluate_scores`.

    Returns:
        ``{bucket: metrics}`` in increasing length order, non-empty buckets only. A bucket
        with a single class holds ``{"n_members", "n_nonmembers", "note"}`` instead.

    Raises:
        BlackboxMIAError: bad inputs, or ``word_counts`` of another length.
    """
    y, s = check_binary(labels, scores)
    if len(word_counts) != len(y):
        raise BlackboxMIAError(f"{len(word_counts)} word counts for {len(y)} scores")
    buckets = np.asarray(length_buckets(word_counts, edges))
    out: dict[str, dict] = {}
    for name in [str(e) for e in edges] + [f">{edges[-1]}"]:
        mask = buckets == name
        if not mask.any():
            continue
        n1 = int(y[mask].sum())
        n0 = int(mask.sum()) - n1
        if n1 == 0 or n0 == 0:
            out[name] = {"n_members": n1, "n_nonmembers": n0, "note": "one class only: no metric"}
        else:
            out[name] = evaluate_scores(y[mask], s[mask], fprs, n_boot, seed)
    return out


def _resample_blocks(
    y: np.ndarray, n_boot: int, seed: int, stratified: bool
) -> Iterator[np.ndarray]:
    """Bootstrap index arrays, in blocks of shape (b, n) that together hold n_boot rows."""
    rng = np.random.default_rng(seed)
    n = len(y)
    members, nonmembers = np.flatnonzero(y == 1), np.flatnonzero(y == 0)
    per_block = max(1, _BLOCK_CELLS // n)
    done = 0
    while done < n_boot:
        b = min(per_block, n_boot - done)
        if stratified:
            idx = np.hstack([
                members[rng.integers(0, len(members), (b, len(members)))],
                nonmembers[rng.integers(0, len(nonmembers), (b, len(nonmembers)))],
            ])
        else:
            idx = rng.integers(0, n, (b, n))
        yield idx
        done += b


def _percentile_ci(values: np.ndarray, alpha: float) -> tuple[float, float]:
    values = np.asarray(values, dtype=np.float64)
    values = values[np.isfinite(values)]
    if values.size == 0:
        raise BlackboxMIAError("no bootstrap resample gave a finite statistic")
    lo, hi = np.percentile(values, [100 * alpha / 2, 100 * (1 - alpha / 2)])
    return float(lo), float(hi)


def _check_boot(n_boot: int, alpha: float) -> None:
    if int(n_boot) < 1:
        raise BlackboxMIAError(f"n_boot must be ≥ 1, got {n_boot}")
    if not 0 < alpha < 1:
        raise BlackboxMIAError(f"alpha must be in (0, 1), got {alpha}")


def _check_fpr(fpr: float) -> None:
    if not 0 <= fpr <= 1:
        raise BlackboxMIAError(f"FPR target must be in [0, 1], got {fpr}")
