"""Validate the black-box path against the white-box canary in the four emulated provider modes.

For each mode (raw/processed log-probs × echo/no-echo) this starts ``bbmia serve`` on the canary,
runs ``bbmia probe --json`` on the first N GSM8K test problems, and checks every token's
white-box log-prob (LocalBackend, same windows) against the reported [lower, upper] bounds, and
the Min-K% and PAC scores against the local backend's. One JSON line per mode.

Usage: python -m benchmarks.validate_blackbox CANARY_DIR [--n 20] [--scorers min_k,pac] [--modes raw-noecho,...]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import numpy as np

from blackbox_mia.backends.local import LocalBackend, LocalConfig
from blackbox_mia.datasets import load_shipped_or_jsonl
from blackbox_mia.runner import score_texts
from blackbox_mia.scorers import parse_scorers

MODES = [("raw", True), ("processed", True), ("raw", False), ("processed", False)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url: str, seconds: float = 120) -> None:
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            urllib.request.urlopen(url + "/models", timeout=2)
            return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"server at {url} did not start")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("canary")
    parser.add_argument("--n", type=int, default=20)
    parser.add_argument("--scorers", default="min_k,pac")
    parser.add_argument("--modes", default="raw-echo,processed-echo,raw-noecho,processed-noecho")
    args = parser.parse_args()
    modes = [m for m in MODES if f"{m[0]}-{'echo' if m[1] else 'noecho'}" in args.modes.split(",")]
    bbmia = os.path.join(os.path.dirname(sys.executable), "bbmia")
    local = LocalBackend(LocalConfig(args.canary))
    items = load_shipped_or_jsonl("gsm8k:test").items[: args.n]
    scorers = parse_scorers(args.scorers)
    white = score_texts([it.text for it in items], scorers, {"target": local})
    for mode, echo in modes:
        port = free_port()
        url = f"http://127.0.0.1:{port}/v1"
        serve = [bbmia, "serve", args.canary, "--port", str(port), "--logprobs-mode", mode]
        server = subprocess.Popen(serve + ([] if echo else ["--no-echo"]), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_ready(url)
            with tempfile.TemporaryDirectory() as cache:
                probe = [bbmia, "probe", "--dataset", "gsm8k", "--limit", str(args.n), "--json", "--base-url", url,
                         "--model", args.canary, "--tokenizer", args.canary, "--context-tokens", str(local.context),
                         "--scorers", args.scorers, "--cache-dir", cache, "--yes"]
                start = time.perf_counter()
                out = subprocess.run(probe, capture_output=True, text=True, check=True, env={**os.environ, "OPENAI_API_KEY": "none"})
                wall = time.perf_counter() - start
        finally:
            server.terminate()
            server.wait(30)
        records = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
        inside = n_tokens = requests = 0
        strategies: dict[str, int] = {}
        score_diff = {s.label: 0.0 for s in scorers}
        for record, (scores, lp) in zip(records, white):
            lower = np.array([-np.inf if t["lower"] is None else t["lower"] for t in record["tokens"]])
            upper = np.array([t["upper"] for t in record["tokens"]])
            assert [t["id"] for t in record["tokens"]] == lp.token_ids.tolist()
            inside += int(np.sum((lower - 1e-4 <= lp.logprobs) & (lp.logprobs <= upper + 1e-4)))
            n_tokens += lp.n_tokens
            requests += record["usage"]["requests"]
            for t in record["tokens"]:
                strategies[t["strategy"]] = strategies.get(t["strategy"], 0) + 1
            for label in score_diff:
                score_diff[label] = max(score_diff[label], abs(record["scores"][label] - scores[label].value))
        print(json.dumps({
            "mode": mode, "echo": echo, "texts": len(records), "tokens": n_tokens,
            "within_bounds": inside / n_tokens, "requests": requests,
            "requests_per_token": requests / n_tokens, "wall_s": round(wall, 1),
            "strategies": strategies, "max_abs_score_diff": score_diff,
        }), flush=True)


if __name__ == "__main__":
    main()
