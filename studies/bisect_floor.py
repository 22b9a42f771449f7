"""How few requests per token any search asking one flip per request can need: the floor under
``bisect`` without chains.

Such a search learns one bit per request (did the biased target become the greedy token?), so a
target that is not in the unbiased top-n costs its unbiased request plus at least as many
flips as it takes to tell its ε-wide bin of b* (the flipping bias) apart from the others.
(Chained requests, ``backends/api/tracker/chains.py``, ask several positions' flips at once, and runs,
``runs.read_unbiased``, several positions' unbiased answers: the floor bounds the questions of a
search asking one per request, not searches that ask several.) This
script computes that floor from white-box answers, without a server:

* per position of the texts, the canary's full next-token distribution gives the unbiased top-n
  (n = 5, the completions maximum), whether the target is listed (1 request), else the top-n
  bound lo (:func:`topn_upper_bound`) and the gap g = b* − lo, in nats;
* ``entropy_bits``: entropy of g in ε-wide bins, from a 0.25-nat histogram (Shannon: no search
  asking yes/no questions needs fewer on average);
* ``oracle_questions``: the mean number of threshold questions of the best search tree over the
  ε-bins of these very gaps (Knuth's optimal alphabetic tree, which knows the sample: an
  optimistic floor);
* ``floor_requests_per_token`` = listed share + (1 − listed share) × (1 + oracle_questions),
  to compare with the ``bisect`` line of ``benchmarks/bench_blackbox.py`` (every value to ε).

Usage: python -m studies.bisect_floor [--canary DIR] [--questions 10] [--epsilon 0.01] [--json]
(the default canary: bench_blackbox's, the dup-16 GSM8K canary; the docs' figures:
docs/generated/bisect_floor.md, by ``python scripts/docs_figures.py --only bisect_floor``)
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np

from benchmarks.bench_blackbox import default_canary
from blackbox_mia.backends.api.endpoint import Listed, NextToken
from blackbox_mia.backends.api.tracker.strategies import topn_upper_bound
from blackbox_mia.backends.api.http.wire import MAX_LOGPROBS_COMPLETIONS
from blackbox_mia.backends.local import LocalBackend, LocalConfig
from blackbox_mia.canary.dataset import load_items

HISTOGRAM_NATS = 0.25  # bin width of the smoothed density behind entropy_bits


def positions(local: LocalBackend, texts: list[str], n: int) -> tuple[int, list[float]]:
    """(listed targets, gaps g = b* − lo of the unlisted ones in nats) over every position."""
    listed, gaps = 0, []
    for text in texts:
        seq = local.full_ids(local.encode(text))
        lps = local.next_token_logprobs([seq[:j] for j in range(1, len(seq))]).astype(np.float64)
        for lp, target in zip(lps, seq[1:]):
            top = np.argsort(-lp)[:n]
            if target in top:
                listed += 1
                continue
            answer = NextToken(frozenset({int(top[0])}), float(lp[top[0]]),
                               tuple(Listed(frozenset({int(i)}), float(lp[i])) for i in top))
            lo = max(0.0, answer.top_logprob - topn_upper_bound(answer, int(target)))
            gaps.append(answer.top_logprob - float(lp[target]) - lo)
    return listed, gaps


def entropy_bits(gaps: np.ndarray, epsilon: float) -> float:
    """Entropy (bits) of the gaps in ε-wide bins, the density taken from a histogram."""
    counts, _ = np.histogram(gaps, bins=np.arange(0.0, gaps.max() + HISTOGRAM_NATS, HISTOGRAM_NATS))
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log2(p)).sum() + math.log2(HISTOGRAM_NATS / epsilon))


def oracle_questions(gaps: np.ndarray, epsilon: float) -> float:
    """Mean depth of the optimal alphabetic search tree over the ε-bins of ``gaps`` (Knuth 1971,
    "Optimum binary search trees", with his O(n²) root bound)."""
    _, counts = np.unique(np.floor(gaps / epsilon).astype(np.int64), return_counts=True)
    w = np.concatenate([[0.0], np.cumsum(counts / counts.sum())])
    n = len(counts)
    cost = np.zeros((n + 1, n + 1))
    root = np.zeros((n + 1, n + 1), dtype=np.int64)
    for i in range(n):
        root[i, i + 1] = i + 1
    for span in range(2, n + 1):
        for i in range(n - span + 1):
            j = i + span
            ks = np.arange(max(root[i, j - 1], i + 1), min(root[i + 1, j], j - 1) + 1)
            totals = cost[i, ks] + cost[ks, j]
            best = int(np.argmin(totals))
            cost[i, j] = totals[best] + w[j] - w[i]
            root[i, j] = ks[best]
    return float(cost[0, n])


def markdown(lines: list[dict]) -> str:
    """The docs' table (docs/requests-per-token.md, "The floor") from this study's ``--json`` line.

    Raises:
        ValueError: no line with ``floor_requests_per_token``.
    """
    if not lines or "floor_requests_per_token" not in lines[-1]:
        raise ValueError("the last line is not the study's result")
    line = lines[-1]
    q = line["gap_quantiles_nats"]
    return ("| tokens | top-n | listed share | gap b* − bound, nats: 10% / 50% / 90% | entropy of the gap in ε bins "
            "(bits) | optimal search tree (questions) | floor (requests / token, ε = " + f"{line['epsilon']:g}) |\n"
            "| --- | --- | --- | --- | --- | --- | --- |\n"
            f"| {line['tokens']:,} | {line['top_n']} | {line['listed_share']:.3f} | {q['0.1']:.2f} / {q['0.5']:.2f} / "
            f"{q['0.9']:.2f} | {line['entropy_bits']:.2f} | {line['oracle_questions']:.2f} | "
            f"{line['floor_requests_per_token']:.2f} |\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--canary", type=Path, default=None, help="GSM8K canary (default: bench_blackbox's, a dup-16 one)")
    parser.add_argument("--questions", type=int, default=10, help="GSM8K test questions (bench_blackbox's bisect texts)")
    parser.add_argument("--epsilon", type=float, default=0.01)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    local = LocalBackend(LocalConfig(str(args.canary or default_canary())))
    texts = [it.text for it in load_items("gsm8k:test", args.questions)[0]]
    listed, gaps = positions(local, texts, MAX_LOGPROBS_COMPLETIONS)
    g = np.asarray(gaps)
    share = listed / (listed + len(g))
    oracle = oracle_questions(g, args.epsilon)
    line = {
        "tokens": listed + len(g), "epsilon": args.epsilon, "top_n": MAX_LOGPROBS_COMPLETIONS,
        "listed_share": round(share, 4),
        "gap_quantiles_nats": {q: round(float(np.quantile(g, q)), 3) for q in (0.1, 0.5, 0.9)},
        "entropy_bits": round(entropy_bits(g, args.epsilon), 3),
        "oracle_questions": round(oracle, 3),
        "floor_requests_per_token": round(share + (1 - share) * (1 + oracle), 3),
    }
    print(json.dumps(line) if args.json else "\n".join(f"{k}: {v}" for k, v in line.items()))


if __name__ == "__main__":
    main()
