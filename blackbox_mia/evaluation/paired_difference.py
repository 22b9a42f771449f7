"""Dataset-level test of paired differences: is the mean of per-item differences above 0?

Guided instruction (Golchin & Surdeanu 2024, ICLR, "Time Travel in LLMs: Tracing Data
Contamination in Large Language Models", §3.2, Algorithm 1) calls a partition contaminated when
the average overlap of the completions under the guided instruction is significantly higher than
under the general instruction, by bootstrap resampling (10,000 resamples, p <= 0.05). We report
that bootstrap p-value and, as the decision, the exact one-sided sign test of the same paired
differences: it needs no seed and no large-sample argument (the paper tests 10 instances per
partition, where a percentile bootstrap of a mean is anti-conservative), and it is exact under the
null hypothesis that each item's difference is as likely negative as positive.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..types import BlackboxMIAError

PAPER_RESAMPLES = 10_000  # Golchin & Surdeanu 2024, §3.2: 10,000 bootstrap resamples
ALPHA = 0.05  # their significance level


def paired_difference_test(differences: Sequence[float], n_boot: int = PAPER_RESAMPLES, seed: int = 0,
                           alpha: float = ALPHA) -> dict:
    """One-sided tests of mean(differences) > 0 for per-item differences d_i (guided minus general
    overlap; unitless, in [-1, 1]).

    Returns:
        ``{"n", "mean", "positive", "negative", "sign_test_p", "bootstrap_p", "n_boot",
        "significant", "alpha"}``: ``sign_test_p`` = P(Binomial(m, ½) >= k) with k positive
        among the m non-zero differences (1.0 when m = 0); ``bootstrap_p`` = the share of
        ``n_boot`` resampled means (items drawn with replacement, numpy seed ``seed``) that are
        <= 0 (None when ``n_boot`` is 0); ``significant`` = sign_test_p <= alpha.

    Raises:
        BlackboxMIAError: no difference, a non-finite one, or a negative ``n_boot``.
    """
    from scipy.stats import binomtest

    d = np.asarray(differences, dtype=np.float64)
    if d.size == 0 or not np.all(np.isfinite(d)) or n_boot < 0:
        raise BlackboxMIAError(f"a paired test needs finite differences and n_boot >= 0; got {d.size} values, n_boot {n_boot}")
    positive, negative = int((d > 0).sum()), int((d < 0).sum())
    sign_p = 1.0 if positive + negative == 0 else float(binomtest(positive, positive + negative, 0.5,
                                                                  alternative="greater").pvalue)
    boot_p = None
    if n_boot:
        draws = np.random.default_rng(seed).integers(0, d.size, size=(n_boot, d.size))
        boot_p = float((d[draws].mean(axis=1) <= 0).mean())
    return {"n": int(d.size), "mean": float(d.mean()), "positive": positive, "negative": negative,
            "sign_test_p": sign_p, "bootstrap_p": boot_p, "n_boot": n_boot, "significant": sign_p <= alpha,
            "alpha": alpha}
