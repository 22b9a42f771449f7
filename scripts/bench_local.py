"""Local-backend throughput: tokens/s batched (token-budget packing) vs one text at a time.

Usage: python scripts/bench_local.py MODEL_DIR [--n 200] [--batch-tokens 8192] [--device cpu]

Scores the first N GSM8K test problems (canary text format) once per setting after a warm-up,
and prints one JSON line per setting. Vocabulary statistics (Min-K%++) are on, as in scoring.
"""

from __future__ import annotations

import argparse
import json
import time

from blackbox_mia.backends.local import LocalBackend, LocalConfig
from blackbox_mia.datasets import load_dataset


def run(backend: LocalBackend, texts: list[str], one_at_a_time: bool) -> dict:
    backend.logprobs(texts[:4])  # warm-up
    start = time.perf_counter()
    if one_at_a_time:
        results = [backend.logprobs([t])[0] for t in texts]
    else:
        results = backend.logprobs(texts)
    seconds = time.perf_counter() - start
    tokens = sum(r.n_tokens for r in results)
    return {"texts": len(texts), "tokens": tokens, "seconds": round(seconds, 3), "tokens_per_s": round(tokens / seconds, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--batch-tokens", type=int, default=8192)
    parser.add_argument("--device", default=None)
    parser.add_argument("--dtype", default="auto")
    args = parser.parse_args()
    texts = [item.text for item in load_dataset("gsm8k:test").items[: args.n]]
    backend = LocalBackend(LocalConfig(args.model, device=args.device, dtype=args.dtype, max_batch_tokens=args.batch_tokens))
    for mode, single in (("batched", False), ("one_at_a_time", True)):
        print(json.dumps({"mode": mode, "device": str(backend.device), "dtype": str(backend.dtype), **run(backend, texts, single)}))


if __name__ == "__main__":
    main()
