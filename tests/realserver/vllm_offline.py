"""Run the offline engine (`local:PATH?engine=vllm`, :class:`~blackbox_mia.backends.vllm_engine.VllmBackend`)
in the vLLM venv, where vLLM lives (never in the product's): the test suite and the benchmark
call it as a subprocess and read its JSON.

`python -m tests.realserver.vllm_offline MODEL_DIR TEXTS_JSON OUT_JSON` (run by the vLLM venv's
python with the repository on PYTHONPATH; vLLM logs to stdout, so the answer goes to a file)
writes one JSON object: `{"vllm_version", "logprobs": [[...] per text], "token_ids": [[...] per
text], "seconds"}` (log-probs in nats; seconds: the scoring only, not the engine's start-up).
"""

from __future__ import annotations

import json
import os
import sys
import time


def main(argv: list[str] | None = None) -> int:
    """Score the texts of TEXTS_JSON (a JSON list of strings) with the offline engine; write OUT_JSON."""
    model_dir, texts_path, out_path = (argv if argv is not None else sys.argv[1:])[:3]
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from tests.realserver.vllm_server import cpu_list

    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", cpu_list())
    from blackbox_mia.backends import build_backend

    with open(texts_path, encoding="utf-8") as f:
        texts = json.load(f)
    with build_backend(f"local:{model_dir}?engine=vllm&dtype=float32") as backend:  # closed: the engine shut down
        start = time.perf_counter()
        scored = backend.logprobs(texts)
        seconds = time.perf_counter() - start
        version = backend.describe()["vllm_version"]
    answer = {
        "vllm_version": version,
        "logprobs": [[float(v) for v in lp.logprobs] for lp in scored],
        "token_ids": [[int(i) for i in lp.token_ids] for lp in scored],
        "seconds": seconds,
    }
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(answer, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
