"""Audit throughput through a real vLLM server against vLLM's own offline engine on the same texts.

Usage:
    python -m benchmarks.bench_vllm [--texts 1000] [--concurrency 1,4,16,64,128,256] [--model-dir DIR]
        [--workdir DIR] [--engine-cpus reserve-one|all|LIST] [--offline-runs 3] [--json]

Needs vLLM in its own venv (``BBMIA_VLLM_PYTHON``, else ``.venv-vllm``: ``bash .ci/run`` makes
it; tests/realserver/vllm_server.py has the recipe); the product's venv never gets vLLM.

Model: ``--model-dir`` (a trained canary's ``model`` directory), else a random GPT-2 of the
default canary's shape (2 layers, 128 wide, 4 heads, context 128, a 4,096-token BPE trained on
GSM8K here; no download) saved under ``--workdir``. Texts: the first ``--texts`` GSM8K test
problems (question and answer: the canary's text format; some longer than the context, scored
in windows).

CPU layout (``--engine-cpus``): both engines, the server's and the offline one, bind their
OpenMP threads to the same CPUs, by default all of the first two this process may use but the
last, which stays for what runs beside an engine (the API server and this client; the offline
engine's own driver), as vLLM's CPU guide advises ("reserve CPUs for the serving framework",
``VLLM_CPU_NUM_OF_RESERVED_CPU``). ``--engine-cpus all`` puts the engines on both CPUs,
sharing them with everything else (the layout before 2026-11-28).

The auditor runs as in a ``bbmia`` process (:func:`~blackbox_mia.cli.app.apply_process_settings`:
the garbage collector's youngest generation collected every 10,000 allocations, as ``bbmia score``
does; before 2026-11-28 this benchmark ran the client with CPython's 700, which cost the client a
third of its CPU).

One vLLM server (float32, ``--max-logprobs 20``, and the offline engine's scheduler limits:
:data:`OFFLINE_SCHEDULER`; vLLM gives its API server half of them by default on CPUs) serves
the model; for each
client concurrency a fresh cache (no answer reused) and a fresh ``ApiBackend``, whose whole
probe runs first (not timed; before 2026-11-28 only its part up to ``prompt_logprobs``, the rest
then timed with the first texts), then ``logprobs`` of every text is
timed. Then vLLM's offline ``LLM.generate(..., prompt_logprobs=0)`` (the offline engine,
``local:PATH?engine=vllm``: one prompt per text or window, one ``generate`` call) scores the
same texts in the vLLM venv, its engine start-up not timed.

The offline engine runs ``--offline-runs`` times (3), each in a fresh process after the server
has stopped; their median is the reference (single runs of 1,000 texts ranged over 119-171
texts/s on the same machine on 2026-11-28).

Output: one JSON object: ``texts``, ``tokens``, ``offline_texts_per_s`` (the median),
``offline_runs_texts_per_s``, and per concurrency
(``by_concurrency``: ``"1"``, ``"4"``, ...) ``texts_per_s``, ``requests`` (sent while scoring),
``client_cpu_s`` (this process's CPU seconds while scoring, all its threads),
``ratio_to_offline`` (texts_per_s / offline_texts_per_s), ``max_abs_diff_vs_offline`` (nats);
``best_ratio_to_offline``; ``device`` (CPUs, the engines' CPUs, vLLM version).
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

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TEXTS = 1000  # 200 before 2026-11-28: runs of 2-3 s, where start-up and noise weighed
DEFAULT_CONCURRENCY = "1,4,16,64,128,256"  # 1,4,16,64 before 2026-11-28; 256 = the server's --max-num-seqs
SERVED_NAME = "canary"
OFFLINE_SCHEDULER = ("--max-num-batched-tokens", "4096", "--max-num-seqs", "256")
"""vLLM's defaults for its offline engine on CPUs (vllm/engine/arg_utils.py, per engine process;
its API server's are 2,048 and 128), given to the server so both engines batch alike."""


def canary_shaped_model(path: Path) -> Path:
    """A random GPT-2 of the default canary's shape (:class:`~blackbox_mia.canary.CanaryConfig`'s
    defaults) with a BPE tokenizer trained on GSM8K questions, saved at ``path`` (once)."""
    from blackbox_mia.canary import CanaryConfig
    from blackbox_mia.canary.model import build_gpt2, save_model_dir, train_tokenizer

    if (path / "config.json").exists():
        return path
    c = CanaryConfig()
    with open(REPO / "blackbox_mia" / "data" / "gsm8k" / "train.jsonl", encoding="utf-8") as f:
        questions = [json.loads(line)["question"] for line in f]
    tokenizer = train_tokenizer(questions, vocab_size=c.vocab_size)
    model = build_gpt2(len(tokenizer), n_layer=c.n_layer, n_embd=c.n_embd, n_head=c.n_head,
                       n_positions=c.block_size, seed=0)  # fmt: skip
    return save_model_dir(path, model, tokenizer)


def gsm8k_texts(n: int) -> list[str]:
    """The first ``n`` GSM8K test problems, question and answer."""
    with open(REPO / "blackbox_mia" / "data" / "gsm8k" / "test.jsonl", encoding="utf-8") as f:
        rows = [json.loads(line) for _, line in zip(range(n), f)]
    return [f"{r['question']}\n{r['answer']}" for r in rows]


def through_server(server, model_dir: Path, texts: list[str], concurrency: int, cache: Path):
    """(seconds, this process's CPU seconds, requests, log-probs) of scoring ``texts`` through
    ``server`` at ``concurrency`` with a fresh cache; the whole probe runs first, untimed (:meth:`ApiBackend.probe` with
    ``full``: the checks a stopped probe defers to the first text longer than the context, about
    a hundred requests, one at a time, once per server and cache)."""
    from blackbox_mia.backends.api import ApiBackend
    from blackbox_mia.backends.api.http.client import ApiConfig

    backend = ApiBackend(ApiConfig(base_url=server.url, model=server.model, concurrency=concurrency, timeout_s=600),
                         tokenizer=str(model_dir), cache_dir=cache)  # fmt: skip
    try:
        backend.probe(full=True)
        before = server.requests("/v1/completions")
        start, cpu = time.perf_counter(), time.process_time()
        scored = backend.logprobs(texts)
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        return seconds, cpu, server.requests("/v1/completions") - before, scored
    finally:
        backend.close()


def offline(python: str, model_dir: Path, texts: list[str], work: Path) -> dict:
    """vLLM's offline engine on ``texts`` in the vLLM venv (tests/realserver/vllm_offline.py)."""
    (work / "texts.json").write_text(json.dumps(texts), encoding="utf-8")
    run = subprocess.run([python, "-m", "tests.realserver.vllm_offline", str(model_dir), str(work / "texts.json"),
                          str(work / "offline.json")], cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)),
                         capture_output=True, text=True)  # fmt: skip
    if run.returncode != 0:
        raise SystemExit(f"offline engine failed:\n{(run.stdout + run.stderr)[-3000:]}")
    return json.loads((work / "offline.json").read_text(encoding="utf-8"))


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its JSON (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=DEFAULT_TEXTS)
    parser.add_argument("--concurrency", default=DEFAULT_CONCURRENCY, help="comma-separated client concurrencies")
    parser.add_argument("--model-dir", type=Path, help="a trained canary's model directory")
    parser.add_argument("--workdir", type=Path, help="keep the built model here for later runs")
    parser.add_argument("--engine-cpus", default="reserve-one",
                        help="the engines' OpenMP CPUs (VLLM_CPU_OMP_THREADS_BIND): a CPU list, 'all' (the first "
                             "two), or 'reserve-one' (those but the last; the default)")  # fmt: skip
    parser.add_argument("--offline-runs", type=int, default=3,
                        help="offline engine runs (fresh processes); their median is the reference")
    parser.add_argument("--json", action="store_true", help="the JSON only (no progress lines)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO))
    from tests.realserver.vllm_server import VllmServer, cpu_list, find_vllm_python

    from blackbox_mia.cli.app import apply_process_settings

    apply_process_settings()
    engine_cpus = {"all": cpu_list(), "reserve-one": cpu_list(1)}.get(args.engine_cpus, args.engine_cpus)
    os.environ["VLLM_CPU_OMP_THREADS_BIND"] = engine_cpus  # the server's and the offline engine's

    python, why = find_vllm_python()
    if python is None:
        raise SystemExit(why)
    with tempfile.TemporaryDirectory(prefix="bbmia-bench-vllm-") as tmp:
        work = args.workdir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        model_dir = args.model_dir or canary_shaped_model(work / "canary-shaped")
        texts = gsm8k_texts(args.texts)
        say = (lambda *a: None) if args.json else (lambda *a: print(*a, file=sys.stderr, flush=True))
        by_concurrency, runs = {}, {}
        server = VllmServer(model_dir, python, model=SERVED_NAME, log_path=Path(tmp) / "server.log",
                            extra_args=OFFLINE_SCHEDULER)  # fmt: skip
        started = time.perf_counter()
        with server:
            say(f"vLLM up in {time.perf_counter() - started:.0f} s at {server.url}")
            for c in [int(x) for x in args.concurrency.split(",")]:
                seconds, cpu, requests, scored = through_server(server, model_dir, texts, c, Path(tmp) / f"cache-{c}")
                runs[c] = scored
                by_concurrency[str(c)] = {"texts_per_s": len(texts) / seconds, "requests": requests, "seconds": seconds,
                                          "client_cpu_s": cpu}  # fmt: skip
                say(f"concurrency {c}: {len(texts) / seconds:.1f} texts/s, {requests} requests")
        answers = [offline(python, model_dir, texts, Path(tmp)) for _ in range(args.offline_runs)]
        rates = [len(texts) / a["seconds"] for a in answers]
        offline_rate, answer = float(np.median(rates)), answers[0]
        say(f"offline: {', '.join(f'{r:.1f}' for r in rates)} texts/s (median {offline_rate:.1f})")
        for c, scored in runs.items():
            row = by_concurrency[str(c)]
            row["ratio_to_offline"] = row["texts_per_s"] / offline_rate
            row["max_abs_diff_vs_offline"] = max(
                float(np.max(np.abs(np.asarray(lp.logprobs) - np.asarray(values))))
                for lp, values in zip(scored, answer["logprobs"], strict=True))  # fmt: skip
        result = {
            "texts": len(texts),
            "tokens": sum(len(ids) for ids in answer["token_ids"]),
            "offline_texts_per_s": offline_rate,
            "offline_runs_texts_per_s": rates,
            "by_concurrency": by_concurrency,
            "best_ratio_to_offline": max(r["ratio_to_offline"] for r in by_concurrency.values()),
            "device": {"cpus": cpu_list(), "engine_cpus": engine_cpus, "vllm": answer["vllm_version"]},
        }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
