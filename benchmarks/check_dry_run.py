"""The sweep's cost estimate (``--dry-run``) against its real bill, through ``bbmia serve``.

Starts ``bbmia serve`` on a canary (served as a priced model name, so USD are computed), builds a
GSM8K sweep of ``--limit`` items (benchmark + its number-perturbed control, the texts the sweep
scores), asks the black-box backend for the estimate of every group (:func:`cost.estimate_groups`,
what ``--dry-run`` prints), then runs the sweep and compares with what the client was billed
(the capability probe, made by the estimate, is excluded from both). One JSON line per strategy:
``estimated_*``, ``billed_*``, ``*_ratio`` (billed / estimated), ``within_10pct``, and
``sweep_refused`` (null, or the sweep's error) with ``groups_compared``.

The sweep refuses to compute a metric from a group whose scores are known only by bounds (on
``bbmia serve`` a few GSM8K texts hold tokens inside a character, ``÷`` or ``×``, that the
tracker may not bias when the probe could not show the server stops at ``max_tokens`` there).
That refusal is part of the result, not worked around: the bill of every group scored before it
(its scores file complete) is compared with the estimate of those groups only
(``groups_compared``), so the check still measures the estimate on everything that was paid for.

Usage: python -m benchmarks.check_dry_run CANARY_DIR [--limit 100] [--strategies forced,auto] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.validate_blackbox import free_port, wait_ready
from blackbox_mia.audits import SweepConfig, prepare_sweep, run_sweep
from blackbox_mia.cli.common import TargetOptions, build_backends, close_all
from blackbox_mia.cost.estimate import CostEstimate, add_estimates
from blackbox_mia.spend.plan import TOTAL, estimate_groups, usage_report
from blackbox_mia.types import BlackboxMIAError

PRICED_NAME = "gpt-4o-mini"  # served under a name the price table knows
TOLERANCE = 0.10  # the target: billed within 10% of the estimate


def check(url: str, canary: str, limit: int, strategy: str, context: int, work: Path) -> dict:
    """Estimate, then run, one sweep; the comparison line (of the groups scored before a refusal)."""
    plan = prepare_sweep(SweepConfig(dataset="gsm8k", limit=limit))
    options = TargetOptions(base_url=url, model=PRICED_NAME, tokenizer=canary, strategy=strategy, context=context,
                            cache_dir=work / "cache", concurrency=32)
    backends = build_backends(options, [plan.scorer])
    refused = None
    try:
        groups = plan.scored_groups()
        per_group = estimate_groups(groups, [plan.scorer], backends)
        before = usage_report(backends)[TOTAL]  # the probe's requests: not part of the sweep
        started = time.perf_counter()
        try:
            run_sweep(plan, backends, work / "sweep", progress=False, yes=True)  # its own server
        except BlackboxMIAError as exc:  # the sweep's refusal is a result: the groups scored before it are compared
            refused = str(exc)
        wall = time.perf_counter() - started
        after = usage_report(backends)[TOTAL]
    finally:
        close_all(backends)
    compared = [name for name in groups if refused is None or _scored(work / "sweep", groups[name])]
    estimate = add_estimates([CostEstimate(**{**role, "notes": tuple(role["notes"])})
                              for name in compared for role in per_group[name].values()]).to_dict()
    billed = {k: after[k] - before[k] for k in ("requests", "cache_hits", "prompt_tokens", "completion_tokens", "cost_usd")}
    ratios = {k: billed[k] / estimate[k] if estimate[k] else None
              for k in ("requests", "prompt_tokens", "completion_tokens")}
    return {
        "strategy": strategy, "estimated_strategy": estimate["strategy"], "texts": {k: len(v) for k, v in groups.items()},
        "estimated_requests": estimate["requests"], "billed_requests": billed["requests"],
        "duplicate_requests": billed["cache_hits"],
        "estimated_prompt_tokens": estimate["prompt_tokens"], "billed_prompt_tokens": billed["prompt_tokens"],
        "estimated_completion_tokens": estimate["completion_tokens"], "billed_completion_tokens": billed["completion_tokens"],
        "estimated_usd": round(estimate["usd"], 6), "billed_usd": round(billed["cost_usd"], 6),
        "stated_uncertainty": estimate["relative_uncertainty"],
        "requests_ratio": ratios["requests"], "prompt_tokens_ratio": ratios["prompt_tokens"],
        "within_10pct": all(r is not None and abs(r - 1) <= TOLERANCE for r in (ratios["requests"], ratios["prompt_tokens"])),
        "sweep_wall_s": round(wall, 1),
        "sweep_refused": refused, "groups_compared": compared,
    }


def _scored(folder: Path, items) -> bool:
    """Whether one scores file in ``folder`` holds a row for every one of ``items`` (the group was
    scored, and paid for, before the sweep stopped)."""
    wanted = {it.id for it in items}
    for path in folder.glob("*.jsonl"):
        ids = {json.loads(line)["id"] for line in path.read_text(encoding="utf-8").splitlines() if line.strip()}
        if wanted <= ids:
            return True
    return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("canary")
    parser.add_argument("--limit", type=int, default=100)
    parser.add_argument("--strategies", default="forced")
    parser.add_argument("--echo", action="store_true", help="let the server echo (the prompt strategy: 1 request a text)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    canary = str(Path(args.canary).resolve())
    context = json.loads((Path(canary) / "config.json").read_text())["n_positions"]
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1"
    bbmia = str(Path(sys.executable).with_name("bbmia"))
    serve = [bbmia, "serve", canary, "--served-name", PRICED_NAME, "--port", str(port), "--cpu-threads", "1"]
    server = subprocess.Popen(serve + ([] if args.echo else ["--no-echo"]), stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, env={**os.environ, "OMP_NUM_THREADS": "1"})
    os.environ.setdefault("OPENAI_API_KEY", "none")
    try:
        wait_ready(url)
        for strategy in args.strategies.split(","):
            with tempfile.TemporaryDirectory() as tmp:
                line = check(url, canary, args.limit, strategy, context, Path(tmp))
            print(json.dumps(line) if args.json else line, flush=True)
    finally:
        server.terminate()
        server.wait(30)


if __name__ == "__main__":
    main()
