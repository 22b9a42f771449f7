"""Local-backend throughput and memory: batched scoring vs one text at a time.

Usage:
    python -m benchmarks.bench_local [--json] [--models gpt2-small,canary] [--canary DIR]
        [--n 64] [--rounds 2] [--device cpu|cuda] [--dtype auto] [--threads N]
        [--max-memory GIB] [--vocab-stats] [--before DIR] [--work-dir DIR]

Models: ``canary`` (a trained canary directory, ``--canary``; default: the default canary's
cache directory) and random models built here from the shipped r50k_base (GPT-2) tokenizer, no
download: ``gpt2-small`` (124M parameters: 12 layers, 768 wide, 12 heads, vocabulary 50,257,
context 1,024) and ``gpt2-1b`` (about 1.0B: 18 layers, 2,048 wide, 16 heads; for a GPU). They
are saved once under ``--work-dir``.

Every (model, setting) runs in a fresh process, so that its peak RSS is its own, and the
settings are interleaved round by round (the order alternates), so a change in the machine's
load hits both alike. Settings: ``batched`` (all texts in one ``logprobs`` call) and ``single``
(one call per text), at the backend's default memory budget unless given, and at the same
threads: ``--threads``, else the backend's default (:func:`default_threads`, which reads the load
average) read once here, so that every run gets the same.
``--before DIR`` adds the same runs of another source tree (e.g. ``git archive REV
blackbox_mia | tar -x -C DIR``), labelled ``"code": "before"``.

Output: one JSON line per run with ``model``, ``setting``, ``code``, ``tokens_per_s``,
``peak_rss_gb`` (and ``peak_gpu_gb`` on CUDA), ``forward_calls`` (passes of the model's base
network), ``texts``, ``tokens``, ``seconds``, ``threads``, ``load_avg`` (1-minute, at the start
and end), ``matmul_gflops`` (the rate of the forward pass's matrix products: tokens/s × their
FLOPs per token), ``max_abs_diff_vs_batched`` (nats, for ``single``); on CPU one ``"setting":
"peak"`` line per model: this machine's matrix-product GFLOP/s on the model's shapes (body and
output embedding, same threads and dtype) and ``ceiling_tokens_per_s``, what a pass doing
nothing but those products could reach; then one ``"setting": "summary"`` line per model and
code: median tokens/s of each setting, their ratio, the largest peak RSS, and
``ceiling_over_single`` (no batching can beat single by more than this).
Texts: the first ``--n`` GSM8K test problems in the canary's text format. Vocabulary statistics
(Min-K%++) are off unless ``--vocab-stats`` (as for every scorer but Min-K%++).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SHAPES = {
    "gpt2-small": {"n_layer": 12, "n_embd": 768, "n_head": 12, "n_positions": 1024},
    "gpt2-1b": {"n_layer": 18, "n_embd": 2048, "n_head": 16, "n_positions": 1024},
}
"""Random GPT-2-shaped models the script builds (vocabulary: r50k_base, 50,257)."""

SETTINGS = ("batched", "single")
PEAK_ROWS = 2048  # rows of the matrix products timed by the ``peak`` worker
PEAK_SECONDS = 2.0  # time spent on each product


def build_random_model(name: str, work_dir: Path) -> Path:
    """The directory of the random model ``name`` (:data:`SHAPES`), built and saved on first use
    with the shipped r50k_base tokenizer converted to a Hugging Face one (seed 0)."""
    path = work_dir / name
    if (path / "config.json").exists():
        return path
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    from blackbox_mia.canary.model import build_gpt2, save_model_dir
    from blackbox_mia.tokenizers.tiktoken_codec import TIKTOKEN_DATA, TiktokenCodec

    encoding = TiktokenCodec("r50k_base", cache_dir=work_dir / "tiktoken").encoding
    converted = TikTokenConverter(
        vocab_file=str(TIKTOKEN_DATA / "r50k_base.tiktoken"),
        pattern=encoding._pat_str,
        extra_special_tokens=encoding._special_tokens,
    ).converted()
    eot = "<|endoftext|>"
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=converted, bos_token=eot, eos_token=eot, pad_token=eot)
    model = build_gpt2(len(tokenizer), seed=0, **SHAPES[name])
    model.config.bos_token_id = model.config.eos_token_id = model.config.pad_token_id = tokenizer.eos_token_id
    return save_model_dir(path, model, tokenizer)


def matmul_flops_per_token(config) -> tuple[float, float]:
    """(body, head) FLOPs per token of a GPT-2 forward pass's matrix products: 2 × the weights of
    every block's projections (q/k/v, output, MLP up and down) and 2 × vocabulary × width for
    the output embedding (attention scores and softmax are left out: a lower bound)."""
    d, inner = config.n_embd, config.n_inner or 4 * config.n_embd
    return 2.0 * config.n_layer * (3 * d * d + d * d + 2 * d * inner), 2.0 * config.vocab_size * d


def peak_worker(args: argparse.Namespace) -> None:
    """This machine's matrix-product speed on the model's shapes, at the given threads and dtype:
    prints ``{"gemm_gflops": {"body", "head"}, "ceiling_tokens_per_s", ...}``, the tokens/s a
    forward pass could reach if it did nothing but these products at that speed."""
    import torch
    from transformers import AutoConfig

    torch.set_num_threads(args.threads)
    config = AutoConfig.from_pretrained(args.worker)
    dtype = torch.float32 if args.dtype == "auto" else getattr(torch, args.dtype)
    d, inner = config.n_embd, config.n_inner or 4 * config.n_embd
    speed = {}
    for part, cols in (("body", inner), ("head", config.vocab_size)):
        a, b = torch.randn(PEAK_ROWS, d, dtype=dtype), torch.randn(d, cols, dtype=dtype)
        a @ b  # warm-up
        start, done = time.perf_counter(), 0
        while time.perf_counter() - start < PEAK_SECONDS:
            a @ b
            done += 1
        speed[part] = 2.0 * PEAK_ROWS * d * cols * done / (time.perf_counter() - start) / 1e9
    body, head = matmul_flops_per_token(config)
    print(json.dumps({"gemm_gflops": {k: round(v, 1) for k, v in speed.items()}, "threads": torch.get_num_threads(),
                      "dtype": str(dtype).removeprefix("torch."),
                      "ceiling_tokens_per_s": round(1e9 / (body / speed["body"] + head / speed["head"]), 1)}))


def worker(args: argparse.Namespace) -> None:
    """One (model, setting) run in this process: prints its JSON line, saves its log-probs."""
    import resource

    import numpy as np
    import torch

    from blackbox_mia.backends.local import LocalBackend, LocalConfig
    from blackbox_mia.datasets import load_shipped_or_jsonl

    load_start = os.getloadavg()[0]
    texts = [item.text for item in load_shipped_or_jsonl("gsm8k:test").items[: args.n]]
    extra = {k: v for k, v in (("threads", args.threads), ("max_memory_gb", args.max_memory)) if v is not None}
    backend = LocalBackend(
        LocalConfig(args.worker, device=args.device, dtype=args.dtype, vocab_stats=args.vocab_stats, **extra)
    )
    backend.logprobs(texts[:2])  # warm-up
    calls = [0]
    backend.model.base_model.register_forward_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    if backend.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(backend.device)
        torch.cuda.synchronize(backend.device)
    start = time.perf_counter()
    if args.setting == "single":
        results = [backend.logprobs([t])[0] for t in texts]
    else:
        results = backend.logprobs(texts)
    if backend.device.type == "cuda":
        torch.cuda.synchronize(backend.device)
    seconds = time.perf_counter() - start
    tokens = sum(r.n_tokens for r in results)
    np.save(args.save, np.concatenate([r.logprobs for r in results]))
    flops = sum(matmul_flops_per_token(backend.model.config))
    row = {
        "texts": len(texts),
        "tokens": tokens,
        "seconds": round(seconds, 3),
        "tokens_per_s": round(tokens / seconds, 1),
        "matmul_gflops": round(tokens / seconds * flops / 1e9, 1),
        "peak_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 3),
        "forward_calls": calls[0],
        "device": str(backend.device),
        "dtype": str(backend.dtype).removeprefix("torch."),
        "threads": torch.get_num_threads(),
        "load_avg": [round(load_start, 2), round(os.getloadavg()[0], 2)],
    }
    if backend.device.type == "cuda":
        row["peak_gpu_gb"] = round(torch.cuda.max_memory_allocated(backend.device) / 2**30, 3)
    print(json.dumps(row))


def run_one(args, model_dir: Path, setting: str, source: Path, save: Path) -> dict:
    """Run :func:`worker` in a fresh process (``source`` first on its path) and parse its line."""
    command = [sys.executable, __file__, "--worker", str(model_dir), "--setting", setting, "--save", str(save),
               "--n", str(args.n), "--dtype", args.dtype]
    for flag, value in (("--device", args.device), ("--threads", args.threads), ("--max-memory", args.max_memory)):
        if value is not None:
            command += [flag, str(value)]
    if args.vocab_stats:
        command.append("--vocab-stats")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(source), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"worker failed ({model_dir.name}, {setting}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="JSON lines only")
    parser.add_argument("--models", default="gpt2-small,canary")
    parser.add_argument("--canary", default=None, help="trained canary directory")
    parser.add_argument("--n", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--device", default=None)
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--max-memory", type=float, default=None, help="GiB per forward pass")
    parser.add_argument("--vocab-stats", action="store_true")
    parser.add_argument("--before", type=Path, default=None, help="source tree of the code to compare with")
    parser.add_argument("--work-dir", type=Path, default=None, help="where the random models are saved")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--setting", choices=(*SETTINGS, "peak"), default="batched", help=argparse.SUPPRESS)
    parser.add_argument("--save", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        peak_worker(args) if args.setting == "peak" else worker(args)
        return

    from blackbox_mia.canary import CanaryConfig
    from blackbox_mia.canary.config import canary_dir
    from blackbox_mia.config import cache_root

    work_dir = args.work_dir or cache_root() / "bench"
    models = {}
    for name in args.models.split(","):
        if name == "canary":
            path = Path(args.canary) if args.canary else canary_dir(CanaryConfig())
            if not (path / "config.json").exists():
                raise SystemExit(f"no trained canary at {path}: pass --canary DIR (or run bbmia canary train)")
            models[name] = path
        elif name in SHAPES:
            models[name] = build_random_model(name, work_dir)
        else:
            raise SystemExit(f"unknown model {name!r}: canary, {', '.join(SHAPES)}")
    if args.threads is None and args.device != "cuda":  # the default, read once: every run gets the same
        from blackbox_mia.backends.local.resources import default_threads

        args.threads = default_threads()
    codes = {"after": Path(__file__).resolve().parents[1]} | ({"before": args.before.resolve()} if args.before else {})
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            for name, path in models.items():
                order = [(c, s) for c in codes for s in SETTINGS]
                for code, setting in order if round_ % 2 == 0 else order[::-1]:
                    save = Path(tmp) / f"{name}-{code}-{setting}-{round_}.npy"
                    row = {"model": name, "setting": setting, "code": code, "round": round_,
                           **run_one(args, path, setting, codes[code], save)}
                    if setting == "single":
                        import numpy as np

                        reference = Path(tmp) / f"{name}-{code}-batched-{round_}.npy"
                        if reference.exists():
                            row["max_abs_diff_vs_batched"] = float(np.abs(np.load(save) - np.load(reference)).max())
                    rows.append(row)
                    print(json.dumps(row) if args.json else _line(row), flush=True)
    ceilings = {}
    if args.device != "cuda":
        for name, path in models.items():
            ceilings[name] = run_one(args, path, "peak", codes["after"], Path(os.devnull))
            print(json.dumps({"model": name, "setting": "peak", **ceilings[name]}) if args.json
                  else _line({"model": name, "setting": "peak", **ceilings[name]}), flush=True)
    for name in models:
        for code in codes:
            mine = {s: [r for r in rows if r["model"] == name and r["code"] == code and r["setting"] == s] for s in SETTINGS}
            speed = {s: statistics.median(r["tokens_per_s"] for r in mine[s]) for s in SETTINGS}
            summary = {
                "model": name, "setting": "summary", "code": code,
                **{f"{s}_tokens_per_s": speed[s] for s in SETTINGS},
                "batched_over_single": round(speed["batched"] / speed["single"], 2),
                **{f"{s}_peak_rss_gb": max(r["peak_rss_gb"] for r in mine[s]) for s in SETTINGS},
                "load_avg": [min(min(r["load_avg"]) for r in rows), max(max(r["load_avg"]) for r in rows)],
            }
            if name in ceilings:  # the most any setting could reach at these threads, over single
                summary["ceiling_over_single"] = round(ceilings[name]["ceiling_tokens_per_s"] / speed["single"], 2)
            print(json.dumps(summary) if args.json else _line(summary), flush=True)


def _line(row: dict) -> str:
    return "  ".join(f"{k}={v}" for k, v in row.items())


if __name__ == "__main__":
    main()
