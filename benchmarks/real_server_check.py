"""The tracker against a real llama.cpp server on a canary, the measurement of issue 26's "Done when".

Serves a canary (``bbmia canary train``'s, or ``--canary DIR``) as an f32 GGUF with
llama-cpp-python 0.3.36 (tests/realserver: ``BBMIA_LLAMA_PYTHON`` or ``.venv-llama``) and runs
``bbmia``'s black-box backend on 10 ASCII (GSM8K test), 10 accented, 10 Japanese (ja-debian-docs,
GPL-2) and 10 punctuation-heavy texts under each strategy, against white-box log-probs (no BOS:
the server's convention). Prints one JSON line per (strategy, group) with the keys

``strategy, group, texts, tokens, outside_bounds, exact_share, bound_only, scores,
scores_outside_interval, scores_null, server_aborts, server_5xx, requests, error``

(``exact_share``: tokens whose bounds are within ε + 5e-3 nats; ``server_5xx`` leaves out the
probe's token-id check; ``server_aborts``: restarts the server needed), then a last line
``{"summary": ...}`` with the totals.

Usage: python -m benchmarks.real_server_check [--canary DIR] [--n 10] [--strategies auto,forced,bisect] [--json]
(JSON lines either way). The docs' figures: docs/generated/real_server_check.md, by
``BBMIA_LLAMA_PYTHON=... python scripts/docs_figures.py --only real_server_check``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

from blackbox_mia.backends.api import ApiBackend
from blackbox_mia.backends.api.http.client import ApiConfig
from blackbox_mia.backends.api.tracker.tracker import TrackerConfig
from blackbox_mia.backends.local import LocalBackend, LocalConfig
from blackbox_mia.datasets import load_shipped_or_jsonl
from blackbox_mia.runner import score_texts
from blackbox_mia.scorers import parse_scorers
from blackbox_mia.types import BlackboxMIAError
from tests.realserver.server import find_llama_python, n_positions, serve_model_dir

EPSILON = 0.01
AGREE = 5e-3  # nats: f32 GGUF vs transformers fp32
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


def groups(n: int) -> dict[str, list[str]]:
    ascii_ = [it.text for it in load_shipped_or_jsonl("gsm8k:test").items[:n]]
    japanese = [it.text[:40] for it in load_shipped_or_jsonl("ja-debian-docs").items[:n]]
    return {"ascii": ascii_, "accented": ACCENTED[:n], "japanese": japanese, "punctuation": PUNCTUATION[:n]}


def measure(server, model_dir: Path, strategy: str, texts: list[str], truth, cache: Path) -> dict:
    """One strategy on one group: bounds, scores and the server's health."""
    config = ApiConfig(base_url=server.url, model=server.model, max_retries=2, backoff_base_s=0.05)
    tracker = TrackerConfig(strategy=strategy, epsilon=EPSILON, context=n_positions(model_dir))
    errors_before, restarts_before = server.server_errors(), server.restarts
    backend = ApiBackend(config, tokenizer=str(model_dir), tracker=tracker, cache_dir=cache)
    out = {"texts": len(texts), "error": None}
    try:
        backend.capabilities  # noqa: B018  (the probe)
        probe_errors = server.server_errors() - errors_before
        black = score_texts(texts, parse_scorers(SCORERS), {"target": backend})
    except BlackboxMIAError as exc:
        out["error"] = str(exc)[:300]
        black, probe_errors = None, 0
    finally:
        out["requests"] = backend.usage.requests
        backend.close()
    out["server_aborts"] = server.restarts - restarts_before + (0 if server.alive() else 1)
    out["server_5xx"] = server.server_errors() - errors_before - probe_errors
    server.ensure_alive()
    if black is None:
        return out
    tokens = outside = exact = bound_only = scores = outside_scores = null_scores = 0
    for (s, lp), (ts, w) in zip(black, truth):
        inside = (lp.lower - AGREE <= w.logprobs) & (w.logprobs <= lp.upper + AGREE)
        tokens += lp.n_tokens
        outside += int((~inside).sum())
        exact += int(((lp.upper - lp.lower) <= EPSILON + AGREE).sum())
        bound_only += int((~np.isfinite(lp.lower)).sum())
        for label, b in s.items():
            scores += 1
            outside_scores += not (b.lower - AGREE <= ts[label].value <= b.upper + AGREE)
            null_scores += b.spread > 0.05
    return {**out, "tokens": tokens, "outside_bounds": outside, "exact_share": exact / max(tokens, 1),
            "bound_only": bound_only, "scores": scores, "scores_outside_interval": outside_scores,
            "scores_null": null_scores}


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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--canary", help="canary directory (default: the one `bbmia canary train` makes)")
    ap.add_argument("--n", type=int, default=10, help="texts per group")
    ap.add_argument("--strategies", default="auto,forced,bisect")
    ap.add_argument("--json", action="store_true", help="accepted for uniformity: the output is JSON lines either way")
    args = ap.parse_args(argv)
    python, why = find_llama_python()
    if python is None:
        print(why, file=sys.stderr)
        return 2
    if args.canary:
        canary = Path(args.canary)
    else:
        from blackbox_mia.canary import CanaryConfig, ensure_canary

        canary = ensure_canary(CanaryConfig(), progress=False)
    model_dir = canary / "model" if (canary / "model" / "config.json").exists() else canary
    white = LocalBackend(LocalConfig(str(model_dir), bos=False))
    texts = groups(args.n)
    totals: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as tmp, serve_model_dir(model_dir, python=python, workdir=Path(tmp) / "srv") as server:
        for strategy in args.strategies.split(","):
            for name, group in texts.items():
                truth = score_texts(group, parse_scorers(SCORERS), {"target": white})
                row = measure(server, model_dir, strategy, group, truth, Path(tmp) / f"{strategy}-{name}")
                print(json.dumps({"strategy": strategy, "group": name, **row}), flush=True)
                for key in ("tokens", "outside_bounds", "bound_only", "scores_outside_interval", "server_aborts",
                            "server_5xx"):
                    totals[key] = totals.get(key, 0) + int(row.get(key, 0))
                totals["errors"] = totals.get("errors", 0) + (row["error"] is not None)
    print(json.dumps({"summary": totals}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
