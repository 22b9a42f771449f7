"""Peak memory of the tracker on one long text: it must grow linearly with the text's length.

Each size runs in a fresh child process against an instant in-process endpoint (every position
answered by forced read-out, no HTTP), so the figure is the tracker's own bookkeeping: the
token sequence, one estimate per token and the prefixes of the positions in flight. Before the
positions were generated lazily, every prefix existed at once (memory ∝ N²).

Usage: python -m benchmarks.bench_tracker_memory [--tokens 10000,50000] [--json]
The last line of stdout (with --json) is one JSON object: {"runs": [{"tokens", "peak_rss_mb",
"seconds"}...], "marginal_kb_per_token"}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import subprocess
import sys
import time

VOCAB = 50


class Codec:
    """Text → ids: one token per character."""

    bos_id = 0
    name = "chars"

    def encode(self, text: str) -> list[int]:
        return [1 + ord(c) % (VOCAB - 1) for c in text]

    def token_string(self, token_id: int) -> str:
        return str(token_id)


class InstantEndpoint:
    """Answers at once: token 0 is the argmax; a biased token is sampled with log-prob −3."""

    token_id_prompts = True
    kind = "completions"

    def __init__(self):
        self.codec = Codec()
        self.client = type("Client", (), {"config": type("Config", (), {"model": "instant", "concurrency": 16})()})()

    def sendable(self, prefix) -> bool:
        return True

    def may_bias(self, token_id) -> bool:
        return True  # one-byte ASCII tokens: none ends inside a character

    async def next_token(self, prefix, top_n, bias=None):
        from blackbox_mia.backends.api.endpoint import Listed, NextToken

        await asyncio.sleep(0)
        token = next(iter(bias)) if bias else 0
        value = -3.0 if bias else -0.1
        return NextToken(frozenset({token}), value, (Listed(frozenset({0}), -0.1),))


def child(tokens: int) -> dict:
    from blackbox_mia.backends.api.capabilities import Capabilities
    from blackbox_mia.backends.api.tracker.tracker import Tracker

    caps = Capabilities("completions", 1, True, False, True, "pre-bias", True, False, False)
    text = "".join(chr(97 + (i * 7) % 26) for i in range(tokens))
    start = time.perf_counter()
    [result] = asyncio.run(Tracker(InstantEndpoint(), caps).track([text]))
    assert result.n_tokens == tokens
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"tokens": tokens, "peak_rss_mb": round(peak_kb / 1024, 1), "seconds": round(time.perf_counter() - start, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", default="10000,50000", help="comma-separated text lengths (tokens)")
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child)))
        return
    runs = []
    for n in (int(t) for t in args.tokens.split(",")):
        out = subprocess.run([sys.executable, __file__, "--child", str(n)], capture_output=True, text=True, check=True)
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(f"{n} tokens: peak RSS {runs[-1]['peak_rss_mb']} MB, {runs[-1]['seconds']} s", file=sys.stderr)
    small, large = runs[0], runs[-1]
    summary = {
        "runs": runs,
        # marginal memory per extra token between the smallest and largest run (KB)
        "marginal_kb_per_token": round(
            (large["peak_rss_mb"] - small["peak_rss_mb"]) * 1024 / max(1, large["tokens"] - small["tokens"]), 3
        ),
    }
    if args.json:
        print(json.dumps(summary))


if __name__ == "__main__":
    main()
