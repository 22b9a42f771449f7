"""Requests and billed tokens per scored token of the black-box tracker, and its honesty, per strategy.

How it measures (all on loopback): the emulator (``bbmia serve``'s server, in this process) serves
a GSM8K canary; an :class:`ApiBackend` with a fresh response cache probes it (the probe's
requests are not counted), then tracks the texts with one strategy; the white-box log-probs of
the same windows (:class:`LocalBackend`) are the truth.

Lines (one JSON object each, ``--json``): ``forced`` (raw log-probs), ``postbias`` (processed
log-probs), ``bisect`` (raw, ε = 0.01, every value to ε), and bisection refined to what
the scores need (``bisect-loss``: the mean width ε; ``bisect-min_k``: Min-K% (k = 20)'s interval
ε wide; ``bisect-loss+min_k``: both; ``score_widths`` on these lines gives each text's largest
score interval, nats) on GSM8K test questions (the issue's setting); ``run``
(run reading, raw) and ``run-forced`` (forced read-out, to compare) on canary items (members
and non-members alternating); ``run-memorized`` and ``run-memorized-forced`` on members only
(``ratio_to_forced`` on the run lines), each with ``requests``,
``requests_per_token``, ``billed_tokens_per_token`` (prompt + completion tokens the server
reported, per scored token), ``max_abs_diff`` (nats, over tokens with finite bounds),
``within_bounds`` (share of tokens whose white-box value lies in [lower, upper] ± 1e-4 nats) and
the strategies used; then ``concurrency-64`` / ``concurrency-256`` from
``benchmarks/bench_throughput.py``'s ``concurrency_lines`` (the client's throughput through the CLI).

``--before REV`` measures REV's package first (``git archive`` into a temporary directory, the
same script run on it), every line tagged ``"version": "before"`` / ``"after"``.

``--smoke``: the smallest setting (1 question, 2 canary texts, 1 member, one concurrency line at 2
in flight on 2 texts), seconds instead of minutes: a check that every line still runs
(``tests/integration/test_benchmarks_smoke.py``), not a measurement.

Usage: python -m benchmarks.bench_blackbox [--canary DIR] [--questions 10] [--canary-texts 20] [--members 10]
       [--only forced,bisect,...] [--before 753b155] [--no-concurrency] [--smoke] [--json]
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

import numpy as np

from blackbox_mia.backends.api import ApiBackend
from blackbox_mia.backends.api.http.client import ApiConfig
from blackbox_mia.backends.api.tracker.refine import score_widths
from blackbox_mia.backends.api.tracker.tracker import TrackerConfig
from blackbox_mia.backends.local import LocalBackend, LocalConfig
from blackbox_mia.canary.config import CanaryConfig, canary_dir
from blackbox_mia.canary.dataset import load_items
from blackbox_mia.emulator import ServerConfig, serve_in_background
from blackbox_mia.scorers import parse_scorers, refine_for
from blackbox_mia.types import BlackboxMIAError

ROOT = Path(__file__).resolve().parents[1]
EPSILON = 0.01  # nats: the bisection width measured
SLACK = 1e-4  # nats: reported values are rounded by the server's JSON floats
MEASURES = (  # (line's strategy, tracker strategy, emulator log-probs mode, texts: questions / canary / members)
    ("forced", "forced", "raw", "questions"),
    ("postbias", "postbias", "processed", "questions"),
    ("bisect", "bisect", "raw", "questions"),
    ("bisect-loss", "bisect", "raw", "questions"),
    ("bisect-min_k", "bisect", "raw", "questions"),
    ("bisect-loss+min_k", "bisect", "raw", "questions"),
    ("run", "run", "raw", "canary"),
    ("run-forced", "forced", "raw", "canary"),
    ("run-memorized", "run", "raw", "members"),
    ("run-memorized-forced", "forced", "raw", "members"),
)
CONCURRENCIES = (64, 256)
SMOKE = {"questions": 1, "canary_texts": 2, "members": 1}  # --smoke: the smallest setting of every line
SMOKE_CONCURRENCY = {"concurrencies": (2,), "n_texts": 2, "latency_s": 0.01}  # ... and of the concurrency lines


def default_canary() -> Path:
    """The canary ``bbmia canary train --dup 16`` makes (``cache/canary/<its config hash>``), else
    the first complete dup-16 GSM8K canary under ``cache/canary`` with the same model shape
    (layers, width, vocabulary: a canary of an older recipe version), so that another model
    shape trained there for an experiment is never measured by default."""
    wanted = CanaryConfig(dup=16)
    made = canary_dir(wanted, ROOT / "cache")
    if (made / "manifest.json").exists() and json.loads((made / "manifest.json").read_text()).get("complete"):
        return made
    shape = {"n_layer": wanted.n_layer, "n_embd": wanted.n_embd, "n_head": wanted.n_head, "vocab_size": wanted.vocab_size}
    for manifest in sorted((ROOT / "cache" / "canary").glob("*/manifest.json")):
        m = json.loads(manifest.read_text())
        config = m.get("config", {})
        if (m.get("corpus", "gsm8k") == "gsm8k" and m.get("dup") == 16 and m.get("complete")
                and all(config.get(k) == v for k, v in shape.items())):
            return manifest.parent
    raise SystemExit("no dup-16 GSM8K canary of the default shape in cache/canary: train one with "
                     "`nice -n 10 bbmia canary train --dup 16` or pass --canary")


def texts_of(kind: str, canary: Path, args: argparse.Namespace) -> list[str]:
    """The first ``--questions`` GSM8K test questions (``questions``), or canary items: members
    and non-members alternating (``canary``, ``--canary-texts``), members only (``members``,
    ``--members``)."""
    if kind == "questions":
        return [it.text for it in load_items("gsm8k:test", args.questions)[0]]
    items = [json.loads(line) for line in (canary / "canary_items.jsonl").read_text().splitlines()]
    members = [it["text"] for it in items if it["label"] == 1]
    if kind == "members":
        return members[: args.members]
    others = [it["text"] for it in items if it["label"] == 0]
    return [t for pair in zip(members, others) for t in pair][: args.canary_texts]


def measure(name: str, strategy: str, mode: str, texts: list[str], local: LocalBackend, canary: Path,
            white: list, cache: Path) -> dict:
    """One line: track ``texts`` with ``strategy`` through the emulator in ``mode``."""
    server = ServerConfig(str(canary), logprobs_mode=mode, echo=False)
    with serve_in_background(server, backend=local) as url:
        api = ApiConfig(base_url=url, model=str(canary), api_key="none", max_retries=2, concurrency=32)
        try:  # bisect-<scorers>: refined to what those scores need (not in --before versions)
            extra = {"refine_for": refine_for(parse_scorers(scored(name)))} if scored(name) else {}
            tracker = TrackerConfig(strategy=strategy, epsilon=EPSILON, context=local.context, **extra)
        except (TypeError, BlackboxMIAError) as exc:  # an older version without this strategy or option
            return {"strategy": name, "skipped": str(exc)}
        backend = ApiBackend(api, tokenizer=str(canary), tracker=tracker, cache_dir=cache / name)
        try:
            backend.probe()
            estimate = backend.estimate_cost(texts) if has_estimate(backend) else None
            before = dict(backend.usage.to_dict())
            start = time.perf_counter()
            black = backend.logprobs(texts)
            wall = time.perf_counter() - start
            after = backend.usage.to_dict()
        except BlackboxMIAError as exc:
            return {"strategy": name, "skipped": str(exc)}
        finally:
            backend.close()
    tokens = sum(w.n_tokens for w in white)
    requests = after["requests"] - before["requests"]
    billed = sum(after[k] - before[k] for k in ("prompt_tokens", "completion_tokens"))
    inside, worst, used = 0, 0.0, {}
    for b, w in zip(black, white):
        assert b.token_ids.tolist() == w.token_ids.tolist()
        inside += int(np.sum((b.lower - SLACK <= w.logprobs) & (w.logprobs <= b.upper + SLACK)))
        finite = np.isfinite(b.lower)
        if finite.any():
            worst = max(worst, float(np.max(np.abs(b.logprobs - w.logprobs)[finite])))
        for s in b.strategies:
            used[s] = used.get(s, 0) + 1
    line = {"strategy": name, "tracker_strategy": strategy, "logprobs_mode": mode, "texts": len(texts),
            "tokens": tokens, "requests": requests, "requests_per_token": round(requests / tokens, 4),
            "billed_tokens_per_token": round(billed / tokens, 2), "max_abs_diff": worst,
            "within_bounds": inside / tokens, "strategies": used, "wall_s": round(wall, 1),
            **score_widths_of(name, black)}
    if estimate is not None:  # the dry-run figure, against what was really sent and billed
        guess = estimate.prompt_tokens + estimate.completion_tokens
        line.update(estimated_requests=estimate.requests, estimated_billed_tokens=guess,
                    estimate_uncertainty=estimate.relative_uncertainty,
                    estimate_error_requests=round(estimate.requests / requests - 1, 4),
                    estimate_error_billed=round(guess / billed - 1, 4))
    return line


def scored(name: str) -> str | None:
    """The scorers (spec) a ``bisect-<scorer>+<scorer>...`` line refines for; None for the other lines."""
    return name.removeprefix("bisect-").replace("+", ",") if name.startswith("bisect-") else None


def score_widths_of(name: str, black: list) -> dict:
    """``score_widths``: per scorer of a ``bisect-<scorers>`` line, the largest interval (nats)
    of its score over the texts, from the values' bounds (:mod:`blackbox_mia.backends.api.tracker.refine`)."""
    if not scored(name):
        return {}
    scorers = parse_scorers(scored(name))
    widest = {s.label: max(score_widths(b.lower, b.upper, [s.lowest_percent()])[0] for b in black) for s in scorers}
    return {"score_widths": {k: round(v, 6) for k, v in widest.items()}}


def has_estimate(backend: ApiBackend) -> bool:
    """Whether this version of the backend has the cost estimate (the ``--before`` one may not)."""
    return "estimate_cost" in dir(backend)


def concurrency(client_tree: Path | None, smoke: bool = False) -> list[dict]:
    """The ``concurrency-64/256`` lines from ``benchmarks/bench_throughput.py`` (with ``smoke``,
    :data:`SMOKE_CONCURRENCY`'s one line), or a note when it (or its ``concurrency_lines``) is not
    there yet."""
    try:
        from benchmarks.bench_throughput import concurrency_lines
    except ImportError as exc:
        return [{"strategy": f"concurrency-{c}", "skipped": f"benchmarks/bench_throughput.py: {exc}"} for c in CONCURRENCIES]
    if smoke:
        return concurrency_lines(client_tree=client_tree, **SMOKE_CONCURRENCY)
    return concurrency_lines(CONCURRENCIES, client_tree=client_tree)


def run_before(rev: str, args: argparse.Namespace) -> None:
    """This script on ``rev``'s package (lines tagged ``before``), printed as they come."""
    with tempfile.TemporaryDirectory() as tree:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "blackbox_mia"], check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tree], input=archive, check=True)
        cmd = [sys.executable, __file__, "--canary", str(args.canary), "--questions", str(args.questions),
               "--canary-texts", str(args.canary_texts), "--members", str(args.members),
               "--label", "before", "--tree", tree] + (["--json"] if args.json else [])
        cmd += ["--only", args.only] if args.only else []
        cmd += ["--no-concurrency"] if args.no_concurrency else []
        cmd += ["--smoke"] if args.smoke else []
        # blackbox_mia from the tree, benchmarks (bench_throughput) from this checkout
        subprocess.run(cmd, check=True, env={**os.environ, "PYTHONPATH": os.pathsep.join([tree, str(ROOT)])})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--canary", type=Path, default=None, help="GSM8K canary directory (default: a dup-16 one)")
    parser.add_argument("--questions", type=int, default=10, help="GSM8K test questions (forced, postbias, bisect)")
    parser.add_argument("--canary-texts", type=int, default=20, help="canary items, both labels (run)")
    parser.add_argument("--members", type=int, default=10, help="canary members (run-memorized)")
    parser.add_argument("--only", default=None, help="comma-separated line names (default: all)")
    parser.add_argument("--before", default=None, help="also measure this git revision first")
    parser.add_argument("--no-concurrency", action="store_true", help="skip the concurrency lines")
    parser.add_argument("--smoke", action="store_true", help="the smallest setting: checks that every line runs")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--label", default="after", help=argparse.SUPPRESS)
    parser.add_argument("--tree", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.smoke:
        vars(args).update(SMOKE)
    args.canary = args.canary or default_canary()
    if args.before:
        run_before(args.before, args)
    local = LocalBackend(LocalConfig(str(args.canary)))
    only = set(args.only.split(",")) if args.only else None
    lines = []
    with tempfile.TemporaryDirectory() as cache:
        for name, strategy, mode, kind in MEASURES:
            if only and name not in only:
                continue
            texts = texts_of(kind, args.canary, args)
            white = local.logprobs(texts)
            lines.append(measure(name, strategy, mode, texts, local, args.canary, white, Path(cache)))
            if name.endswith("-forced"):  # the run line before it, against forced read-out on the same texts
                run, forced = lines[-2], lines[-1]
                ok = "requests" in run and "requests" in forced
                emit({**run, "ratio_to_forced": round(run["requests"] / forced["requests"], 4)} if ok else run, args)
            elif not name.startswith("run"):
                emit(lines[-1], args)
    if not args.no_concurrency and not only:
        for line in concurrency(args.tree, args.smoke):
            emit(line, args)


LINE_NAMES = {  # how the docs' table names each line
    "forced": "forced", "postbias": "postbias", "bisect": "bisect, every value to ε",
    "bisect-loss": "bisect refined for the loss", "bisect-min_k": "bisect refined for Min-K% (k = 20)",
    "bisect-loss+min_k": "bisect refined for both", "run": "run (members and non-members)",
    "run-memorized": "run (members only)"}


def markdown(lines: list[dict]) -> str:
    """The docs' table (docs/requests-per-token.md, "Measured") from this benchmark's ``--json``
    lines: per line, texts and tokens, requests and billed tokens per token, the share of tokens
    whose white-box value lies within the reported bounds, the largest difference from it (nats),
    the widest score interval of the refined lines (nats), and the cost estimate's error against the
    real bill (requests / billed tokens; run lines: against the run, forced read-out's figure).
    The ``*-forced`` comparison lines are folded into ``ratio_to_forced``; the concurrency lines
    (client timings) are left out.

    Raises:
        ValueError: no tracker line in ``lines``.
    """
    rows = [line for line in lines if line.get("strategy") in LINE_NAMES and "requests_per_token" in line]
    if not rows:
        raise ValueError("no tracker line (forced, postbias, bisect*, run*) in the benchmark's output")
    out = ["| line | texts / tokens | requests / token | billed tokens / token | within bounds | max abs diff (nats) "
           "| widest score interval (nats) | estimate error: requests / billed |",
           "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for row in rows:
        per_token = f"{row['requests_per_token']:.3f}"
        if "ratio_to_forced" in row:
            per_token += f" ({row['ratio_to_forced']:.3f} × forced)"
        widths = ", ".join(f"{k} {v:.4f}" for k, v in row.get("score_widths", {}).items()) or "-"
        error = "-" if "estimate_error_requests" not in row else \
            f"{100 * row['estimate_error_requests']:+.1f}% / {100 * row['estimate_error_billed']:+.1f}%"
        out.append(f"| {LINE_NAMES[row['strategy']]} | {row['texts']} / {row['tokens']:,} | {per_token} | "
                   f"{row['billed_tokens_per_token']:.1f} | {row['within_bounds']:.3f} | {row['max_abs_diff']:.2g} | "
                   f"{widths} | {error} |")
    return "\n".join(out) + "\n"


def emit(line: dict, args: argparse.Namespace) -> None:
    line = {**line, "version": args.label}
    print(json.dumps(line) if args.json else "  ".join(f"{k}={v}" for k, v in line.items()), flush=True)


if __name__ == "__main__":
    main()
