"""Run reading's policy replayed on white-box answers: requests per token of when to run and when
to read per position (``backends/api/tracker/runs.py``), without a server.

Per window of each text (the canary's context), the local model's next-token distribution at
every position says whether the target is the greedy token (a run generates it) and whether it is
in the top-5 (the completions maximum: a run's mismatch read from its answer). A policy then costs:

* a run request from position j: 1 request for its matching targets and the first mismatch
  (or ``max_tokens`` targets), plus 1 (forced read-out) where that mismatch is not listed;
* a per-position read-out: 1 request per target.

Policies: ``odds`` (today's :class:`~blackbox_mia.backends.api.tracker.runs.Odds` rule, with the
module's constants), ``streak`` (the rule until commit a432cee: per-position read-out in chunks
of 2, a run after a target proven the argmax, back after a run that lost; runs from 4 tokens),
``always`` (a run at every position) and ``forced`` (per-position only), and ``oracle`` (knows
the answers: a run where the target is the argmax or listed, forced read-out elsewhere): what no
policy choosing between these two requests beats.

Texts (as ``benchmarks/bench_blackbox.py``'s run lines): the first ``--members`` canary members,
and as many non-members. Shared prefixes are not cache hits here (the benchmark's figures are
about 1 % lower).

Usage: python -m studies.run_policy [--canary DIR] [--members 10] [--json]
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np

from benchmarks.bench_blackbox import default_canary
from blackbox_mia.backends.api.http.wire import MAX_LOGPROBS_COMPLETIONS
from blackbox_mia.backends.api.tracker.runs import CHUNK, RUN_FIRST_TOKENS, Odds, next_run_tokens
from blackbox_mia.backends.api.tracker.strategies import Estimate
from blackbox_mia.backends.local import LocalBackend, LocalConfig
from blackbox_mia.text.windows import sliding_windows

Window = list[tuple[bool, bool, float]]  # per target: the argmax, listed in the top-n, its log-prob (nats)


def windows(local: LocalBackend, texts: list[str], n: int) -> list[Window]:
    """Every window's targets as (argmax, listed in the top-``n``, log-prob)."""
    out = []
    for text in texts:
        seq = local.full_ids(local.encode(text))
        spans = sliding_windows(len(seq), local.context) if local.context else [(0, len(seq), 1)]
        for start, end, first in spans:
            lps = local.next_token_logprobs([seq[start:j] for j in range(first, end)]).astype(np.float64)
            top = np.argsort(-lps, axis=1)[:, :n]
            out.append([(bool(t[0] == x), bool(x in t), float(lp[x])) for lp, t, x in zip(lps, top, seq[first:end])])
    return out


def run(window: Window, j: int, k: int) -> tuple[int, int, bool, bool]:
    """A run request at target ``j`` of ``k`` tokens: (requests, targets read, matched throughout,
    lost: its mismatch not listed)."""
    for i in range(j, min(len(window), j + k)):
        argmax, listed, _ = window[i]
        if not argmax:
            return 1 + (not listed), i - j + 1, False, not listed
    return 1, min(len(window), j + k) - j, True, False


def odds_policy(window: Window, n: int) -> int:
    """Requests of today's rule (:class:`Odds`)."""
    j, k, odds, requests = 0, RUN_FIRST_TOKENS, Odds(), 0
    while j < len(window):
        if odds.run_pays():
            sent, read, throughout, lost = run(window, j, k)
            odds.ran(read - (not throughout), not throughout, lost)
            k = next_run_tokens(k, throughout)
        else:
            sent = read = min(CHUNK, len(window) - j)
            for argmax, listed, lp in window[j : j + read]:
                odds.read(Estimate.exact(lp, "forced", 0 if argmax else (1 if listed else n)), n)
        requests, j = requests + sent, j + read
    return requests


def streak_policy(window: Window) -> int:
    """Requests of the rule until commit a432cee (module docstring)."""
    j, k, running, requests, last = 0, 4, False, 0, -math.inf
    while j < len(window):
        if running:
            sent, read, throughout, lost = run(window, j, k)
            running = read - (not throughout) > 0 or not lost
            k = min(64, 2 * k) if throughout else 4
        else:
            sent = read = min(2, len(window) - j)
            last = window[j + read - 1][2]
            running = last > math.log(0.5)
        requests, j = requests + sent, j + read
    return requests


def always_policy(window: Window) -> int:
    """Requests with a run at every position (run lengths as today's)."""
    j, k, requests = 0, RUN_FIRST_TOKENS, 0
    while j < len(window):
        sent, read, throughout, _ = run(window, j, k)
        k = next_run_tokens(k, throughout)
        requests, j = requests + sent, j + read
    return requests


def oracle(window: Window) -> int:
    """Requests of a policy that knows the answers: a run (as long as needed) where the target is
    the argmax or listed, forced read-out where it is neither."""
    j, requests = 0, 0
    while j < len(window):
        argmax, listed, _ = window[j]
        if not argmax and not listed:
            requests, j = requests + 1, j + 1
            continue
        sent, read, _, _ = run(window, j, len(window))
        requests, j = requests + sent, j + read
    return requests


def measure(label: str, found: list[Window], n: int) -> dict:
    """One line: requests per token of every policy on ``found``'s windows."""
    tokens = sum(len(w) for w in found)
    costs = {"odds": sum(odds_policy(w, n) for w in found), "streak": sum(streak_policy(w) for w in found),
             "always": sum(always_policy(w) for w in found), "forced": tokens, "oracle": sum(oracle(w) for w in found)}
    return {"texts": label, "tokens": tokens, "argmax_share": round(float(np.mean([t[0] for w in found for t in w])), 4),
            "listed_share": round(float(np.mean([t[1] for w in found for t in w])), 4),
            **{f"{k}_requests_per_token": round(v / tokens, 4) for k, v in costs.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--canary", type=Path, default=None, help="GSM8K canary directory (default: the dup-16 one)")
    parser.add_argument("--members", type=int, default=10, help="canary members (and as many non-members)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    canary = args.canary or default_canary()
    items = [json.loads(line) for line in (canary / "canary_items.jsonl").read_text().splitlines()]
    local = LocalBackend(LocalConfig(str(canary)))
    n = MAX_LOGPROBS_COMPLETIONS
    lines = []
    for label, member in (("members", 1), ("non-members", 0)):
        texts = [it["text"] for it in items if it["label"] == member][: args.members]
        lines.append(measure(label, windows(local, texts, n), n))
    for line in lines:
        print(json.dumps(line) if args.json else "  ".join(f"{k}={v}" for k, v in line.items()))


if __name__ == "__main__":
    main()
