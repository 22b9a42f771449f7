"""Regenerate every canary figure that README.md and docs/ quote, so the figures cannot drift
from the code.

Each figure is the output of a documented command run on a canary (the default dup-8 GSM8K
canary, its unlearned copy, the document canary), exactly as a user would type it. The script
runs those commands and writes:

- ``docs/generated/<name>.md``: the console block (``$ command`` lines and what they printed),
  which the docs pages include (MkDocs ``pymdownx.snippets``: ``--8<-- "generated/<name>.md"``);
- ``docs/generated/figures.json``: the numbers of every block (AUCs, rates, intervals, counts),
  read from each command's ``--json`` line;
- README.md: the blocks between ``<!-- generated: <name>.md -->`` and ``<!-- /generated -->``
  are replaced by the same files (GitHub renders no includes).

The studies and benchmarks whose tables the docs quote (:data:`STUDIES`: ``python -m studies.NAME
--json`` or ``benchmarks.NAME`` on canaries trained by ``bbmia canary train``, from minutes to an
hour each) are blocks too,
run only when named (``--only detection_power`` or ``--studies``): their JSON lines go to
``docs/generated/studies/<name>.json`` and their tables, rendered by the study's own
``markdown`` function, to ``docs/generated/<name>.md``. ``--render`` rewrites those tables from
the saved lines without running anything (a unit test checks that the committed tables are
exactly that rendering).

``--check`` runs the commands again, writes nothing, and exits 1 when a number differs from
``figures.json`` (a study: its saved lines) beyond the tolerance (:data:`ABS_TOL` absolute,
:data:`REL_TOL` relative beyond ±1: thresholds, nats, rates per token; integer counts exactly), or when a console
block's text, its numbers aside (:func:`skeleton`), differs from the committed one (a new
column, a reworded line, the strategies counted in another order). Times, request
rates of commands that answer from a cache and paths are not figures and are never compared
(a study's own volatile keys: :attr:`Study.volatile`). CI (``.ci/run``) runs ``--check --only
demo``: the README's block, on the default canary it trains first. Sampled continuations are seeded per
request, through ``bbmia serve`` too, so the ``audit_canaries*`` studies reproduce like the
others. ``--only NAME`` limits either mode to some blocks.

Run from the repository root: ``python scripts/docs_figures.py`` (about 20 min on 2 CPU cores
once the canaries are trained; the canaries are trained on first use and shared through the
cache root, ``--cache-dir`` / ``BBMIA_CACHE_DIR``). Outputs of the audited commands go to
``<cache root>/docs-figures/`` and are resumed on a rerun (``--fresh`` deletes them first).
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GENERATED = ROOT / "docs" / "generated"
FIGURES_FILE = GENERATED / "figures.json"
README = ROOT / "README.md"
STUDY_LINES = GENERATED / "studies"
ABS_TOL = 0.002
"""Largest absolute difference accepted by ``--check`` for a float of magnitude at most 1 (AUCs,
rates, shares, p-values, bounds: the docs print three decimals; one pair of 20 texts ordered
otherwise moves an AUC by 0.01)."""
REL_TOL = 0.05
"""Largest relative difference accepted by ``--check`` for a float beyond ±1 (thresholds and
scores in nats, requests or tokens per token or text), besides :data:`ABS_TOL`."""
GENERATED_BLOCK = re.compile(r"(<!-- generated: (?P<name>[\w.-]+) -->\n)(?P<body>.*?)(<!-- /generated -->)", re.S)
NUMBER = re.compile(r"-?\d+(?:[.,]\d+)*(?:e[-+]?\d+)?")
"""A number as a console block prints it (``1,985``, ``0.910``, ``5.25e-06``, ``9.3`` seconds)."""
VOLATILE_KEYS = frozenset({"seconds", "elapsed_s", "wall_seconds", "requests_per_token", "path", "model", "manifest",
                           "json_path", "md_path", "out", "usage", "train_seconds", "reused", "requests", "cache_hits",
                           "load_avg"})
"""JSON keys that are not figures (times, costs, where files went) and are never compared."""


@dataclass
class Session:
    """Where the commands run: the ``bbmia`` executable, the cache root, and the folder for the
    audits' outputs. ``shown`` maps absolute paths to what the docs print instead."""

    bbmia: str
    cache: Path
    work: Path
    transcript: list[str] = field(default_factory=list)

    def shown(self, text: str) -> str:
        """``text`` with the cache root written as ``cache`` and the work folder as ``runs``."""
        for folder, name in ((self.work, "runs"), (self.cache, "cache")):
            text = text.replace(str(folder), name)
            if folder.is_relative_to(ROOT):
                text = text.replace(os.path.relpath(folder, ROOT), name)
        return text

    def run(self, args: list[str], *, show: bool = True, cwd: Path = ROOT) -> tuple[str, dict]:
        """Run ``bbmia ARGS --json`` in the folder ``cwd``; return its stdout without the JSON
        line, and the JSON. Shown (``show``): the command, its stdout, then the warnings it
        printed on stderr (its summary's ``warnings``), as a terminal shows them.

        Raises:
            RuntimeError: the command failed (its stderr's last lines in the message).
        """
        env = dict(os.environ, BBMIA_CACHE_DIR=str(self.cache))
        proc = subprocess.run([self.bbmia, *args, "--json"], capture_output=True, text=True, env=env, cwd=cwd)
        if proc.returncode != 0:
            raise RuntimeError(f"bbmia {shlex.join(args)} exited {proc.returncode}: {proc.stderr[-2000:]}")
        lines = proc.stdout.rstrip("\n").split("\n")
        summary = json.loads(lines[-1])
        if show:
            self.transcript.append("$ " + self.shown(shlex.join(["bbmia", *args])))
            self.transcript.extend(self.shown(line).rstrip() for line in lines[:-1] if not line.startswith("report: "))
            self.transcript.extend(self.shown(f"warning: {warning}") for warning in summary.get("warnings", []))
        return "\n".join(lines[:-1]), summary

    @property
    def cache_arg(self) -> str:
        """The cache root as the studies are given it: relative to the repository root (their
        working folder) when inside it, so the paths their runs record are those the docs print."""
        return os.path.relpath(self.cache, ROOT) if self.cache.is_relative_to(ROOT) else str(self.cache)

    def canary(self, *args: str) -> str:
        """The directory of the canary ``bbmia canary train ARGS`` makes (trained once, then cached)."""
        return self.run(["canary", "train", *args, "--quiet"], show=False)[1]["path"]

    def study(self, module: str, args: list[str]) -> tuple[list[dict], str]:
        """Run ``python -m MODULE ARGS --json``; return its JSON lines (the summary last) and the
        command as the docs print it.

        Raises:
            RuntimeError: the study failed (its stderr's last lines in the message).
        """
        env = dict(os.environ, BBMIA_CACHE_DIR=self.cache_arg, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"),
                   PATH=f"{Path(self.bbmia).parent}{os.pathsep}{os.environ.get('PATH', '')}")
        command = [sys.executable, "-m", module, *args, "--json"]
        proc = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT)
        if proc.returncode != 0:
            raise RuntimeError(f"{shlex.join(command[1:])} exited {proc.returncode}: {proc.stderr[-2000:]}")
        lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
        return lines, self.shown(shlex.join(["python", *command[1:]]))

    def block(self) -> str:
        """The transcript so far as one fenced console block; the transcript is emptied."""
        text = "```console\n" + "\n".join(self.transcript) + "\n```\n"
        self.transcript.clear()
        return text


def figures_of(summary: object, shown: Callable[[str], str] = str, volatile: frozenset[str] = VOLATILE_KEYS) -> object:
    """``summary`` without its ``volatile`` keys, recursively, its strings passed through
    ``shown`` (absolute paths written as the docs print them)."""
    if isinstance(summary, dict):
        return {k: figures_of(v, shown, volatile) for k, v in summary.items() if k not in volatile}
    if isinstance(summary, list):
        return [figures_of(v, shown, volatile) for v in summary]
    return shown(summary) if isinstance(summary, str) else summary


def demo(s: Session) -> dict:
    """``bbmia demo``: white-box AUCs of every scorer on the default canary (400 items) and the
    black-box AUCs and agreement on 20 of them through ``bbmia serve``. Run on a fresh cache root
    whose canary is a link to the trained one (not retrained), so that the block shows what a
    first run prints: every black-box answer paid once, not answered from the cache."""
    canary = Path(s.canary())
    with tempfile.TemporaryDirectory() as root:
        (Path(root) / "canary").mkdir()
        (Path(root) / "canary" / canary.name).symlink_to(canary, target_is_directory=True)
        _, summary = replace(s, cache=Path(root)).run(["demo"])
    return summary


def sweep(s: Session) -> dict:
    """``bbmia sweep gsm8k`` on the default canary, calibrated on a seeded half of its labelled
    items, the other half swept with the benchmark (the planted fraction is known)."""
    canary = s.run(["canary", "train", "--quiet"], show=False)[1]["path"]
    _, summary = s.run(["sweep", "gsm8k", "--local", canary, "--calibration", f"canary:{canary}",
                        "--calibration-fraction", "0.5", "--quiet", "--out", str(s.work / "sweep")])
    return summary


def unlearning(s: Session) -> dict:
    """``bbmia canary unlearn`` (forget set among the memorized members, seed 1) and the command it
    prints next, ``bbmia unlearning``, with the ground truth of the unlearned canary."""
    canary = s.run(["canary", "train", "--quiet"], show=False)[1]["path"]
    made = s.run(["canary", "unlearn", canary, "--forget", "50", "--forget-from", "memorized", "--seed", "1",
                  "--steps", "6", "--lr", "3e-3", "--retain-weight", "10"])[1]
    after = made["path"]
    _, summary = s.run(["unlearning", f"{after}/forget_items.jsonl", "--before", f"local:{canary}",
                        "--after", f"local:{after}", "--prompt-words", "24", "--samples", "20",
                        "--max-new-tokens", "48", "--seed", "1", "--quiet", "--out", str(s.work / "unlearning")])
    return {"unlearn": made, "audit": summary}


def documents(s: Session) -> dict:
    """``bbmia documents`` on the document canary (64-word chunks, Min-K%, threshold at 5% FPR on
    the validation documents)."""
    made = s.run(["canary", "train", "--corpus", "documents", "--quiet"], show=False)[1]
    _, summary = s.run(["documents", made["documents"], "--calibration", made["validation"], "--local", made["path"],
                        "--chunk-words", "64", "--rule", "fpr", "--quiet",
                        "--out", str(s.work / "documents")])
    return summary


def memorize(s: Session) -> dict:
    """``bbmia memorize`` on the default canary (400 items), at the prompt lengths and reference
    length of docs/memorization.md (L + R within the canary's 128-token context)."""
    canary = s.run(["canary", "train", "--quiet"], show=False)[1]["path"]
    _, summary = s.run(["memorize", "canary", "--local", canary, "--prompt-lengths", "16,32,64",
                        "--reference-tokens", "32", "--quiet", "--out", str(s.work / "memorize")])
    return summary


def japanese(s: Session) -> dict:
    """The Japanese canary (``--corpus ja``, ja-debian-docs): ``bbmia eval`` with Min-K% k = 10,
    loss and PAC on MeCab words, and ``bbmia memorize`` at L = 32, 64, R = 32 (docs/memorization.md)."""
    canary = s.run(["canary", "train", "--corpus", "ja", "--quiet"])[1]["path"]
    _, evaluated = s.run(["eval", f"canary:{canary}", "--local", canary, "--scorers",
                          "min_k:k=10,loss,pac:segmenter=japanese", "--quiet", "--out", str(s.work / "ja-eval")])
    _, memorized = s.run(["memorize", f"canary:{canary}", "--local", canary, "--prompt-lengths", "32,64",
                          "--reference-tokens", "32", "--quiet", "--out", str(s.work / "ja-memorize")])
    return {"eval": evaluated, "memorize": memorized}


def sweep_control(s: Session) -> dict:
    """``bbmia sweep gsm8k`` on the default canary with no known member or non-member: the control
    built from the benchmark is the reference (docs/contamination.md)."""
    canary = s.canary()
    _, summary = s.run(["sweep", "gsm8k", "--local", canary, "--quiet", "--out", str(s.work / "sweep-control")])
    return summary


def exchangeability(s: Session) -> dict:
    """``bbmia exchangeability`` (50 shards x 250 orders) on the canonical-order dup-4 canary, its
    ``--dry-run`` first, and on the default-order (shuffled) dup-4 canary (docs/contamination.md)."""
    canonical = s.canary("--dup", "4", "--planted-order", "canonical")
    shuffled = s.canary("--dup", "4")
    s.run(["exchangeability", f"canary:{canonical}", "--local", canonical, "--dry-run"])
    _, preferred = s.run(["exchangeability", f"canary:{canonical}", "--local", canonical, "--quiet",
                          "--out", str(s.work / "exchangeability-canonical")])
    _, not_preferred = s.run(["exchangeability", f"canary:{shuffled}", "--local", shuffled, "--quiet",
                              "--out", str(s.work / "exchangeability-dup4")])
    return {"canonical": preferred, "shuffled": not_preferred}


def eval_wikimia64(s: Session) -> dict:
    """``bbmia eval wikimia64`` on the default canary with its default scorers (docs/evaluation.md):
    the blind baseline on a distribution-shifted split."""
    canary = s.canary()
    _, summary = s.run(["eval", "wikimia64", "--local", canary, "--quiet", "--out", str(s.work / "eval-wikimia64")])
    return summary


def eval_recall(s: Session) -> dict:
    """``bbmia eval`` of ReCaLL and Con-ReCall beside loss and Min-K% on the default canary
    (docs/contamination.md): one shot each, the canary's shortest non-member (P, and P_non-member)
    and shortest member (P_member; ties: the first), both left out of the evaluated items and
    written with them to ``runs/eval-recall/``, where the command runs (short scorer labels)."""
    canary = Path(s.canary())
    items = [json.loads(line) for line in (canary / "canary_items.jsonl").read_text().splitlines()]
    shots = {label: min((it for it in items if it["label"] == label), key=lambda it: len(it["text"])) for label in (0, 1)}
    folder = s.work / "eval-recall"
    folder.mkdir(parents=True, exist_ok=True)
    for name, rows in (("nonmembers.jsonl", [shots[0]]), ("members.jsonl", [shots[1]]),
                       ("items.jsonl", [it for it in items if it not in shots.values()])):
        (folder / name).write_text("".join(json.dumps(row) + "\n" for row in rows))
    s.transcript.append(f"$ cd {s.shown(str(folder))}")
    _, summary = s.run(["eval", "items.jsonl", "--local", str(canary), "--scorers",
                        "loss,min_k,recall:prefix=nonmembers.jsonl,"
                        "con_recall:prefix=nonmembers.jsonl,member_prefix=members.jsonl", "--quiet", "--out", "eval"],
                       cwd=folder)
    return summary


BLOCKS: dict[str, Callable[[Session], dict]] = {"demo": demo, "sweep": sweep, "unlearning": unlearning,
                                                 "documents": documents, "memorize": memorize, "japanese": japanese,
                                                 "sweep_control": sweep_control, "exchangeability": exchangeability,
                                                 "eval_wikimia64": eval_wikimia64, "eval_recall": eval_recall}


@dataclass(frozen=True)
class Study:
    """A study whose tables a docs page includes: its module (``studies.NAME`` or
    ``benchmarks.NAME``, with a ``markdown(lines) -> str`` function), its arguments on a
    :class:`Session` (which trains or finds the canaries it needs), and the keys of its lines
    that are not figures (a benchmark's request counts are its figures; its times are not)."""

    module: str
    args: Callable[[Session], list[str]]
    volatile: frozenset[str] = VOLATILE_KEYS


def detection_power_args(s: Session) -> list[str]:
    """The GSM8K canaries at dup 2, 4, 8, 16 and the canonical-order dup-4 one (docs/contamination.md)."""
    canaries = [a for dup in (2, 4, 8, 16) for a in ("--canary", s.canary("--dup", str(dup)))]
    canonical = s.canary("--dup", "4", "--planted-order", "canonical")
    return [*canaries, "--canonical-canary", canonical, "--cache", s.cache_arg]


REF_DUPS, REF_SEEDS = (1, 2, 4, 8), (0, 1)
CONFIRM_DUPS, CONFIRM_SEED = (2, 4), 2
MORE_REFERENCE_SEEDS, LARGE_REFERENCE_SIZE = (3, 4), 3500
REF_SPLITS = 200
"""Issue 43's feature-set run: its dups and training seeds; the canaries of a seed trained after the
reference set and feature sets were chosen on the others (the choice confirmed on models it never
saw); the references beyond one per canary seed (``--reference-seed``; one larger,
``--reference-size``); and its power and clean splits per canary (fewer than the headline run's
300 and 1,000: ten canaries x six feature sets on 2 loaded cores)."""


def detection_power_ref_args(s: Session) -> list[str]:
    """The GSM8K canaries at dups 1, 2, 4, 8 of training seeds 0 and 1 and at dups 2, 4 of seed 2;
    the reference canaries (``--reference-of``) of seeds 0 to 4 and one of seed 0 on
    :data:`LARGE_REFERENCE_SIZE` items (the study finds them in the cache and averages them);
    without the exchangeability test (docs/contamination.md, issue 43)."""
    canaries = {(dup, seed): s.canary("--dup", str(dup), "--seed", str(seed)) for dup in REF_DUPS for seed in REF_SEEDS}
    canaries.update({(dup, CONFIRM_SEED): s.canary("--dup", str(dup), "--seed", str(CONFIRM_SEED)) for dup in CONFIRM_DUPS})
    for seed in (*REF_SEEDS, CONFIRM_SEED):
        s.canary("--reference-of", next(path for (_, other), path in canaries.items() if other == seed))
    first = canaries[REF_DUPS[0], REF_SEEDS[0]]
    for seed in MORE_REFERENCE_SEEDS:
        s.canary("--reference-of", first, "--reference-seed", str(seed))
    s.canary("--reference-of", first, "--reference-size", str(LARGE_REFERENCE_SIZE))
    return [*(a for path in canaries.values() for a in ("--canary", path)), "--splits", str(REF_SPLITS),
            "--clean-splits", str(REF_SPLITS), "--no-xchg", "--cache", s.cache_arg]


def prevalence_coverage_args(s: Session) -> list[str]:
    """The GSM8K canaries at dup 2, 4, 8, 16 (docs/design.md §5; scores cached with detection_power's)."""
    return [*(a for dup in (2, 4, 8, 16) for a in ("--canary", s.canary("--dup", str(dup)))), "--cache", s.cache_arg]


def text_only_args(s: Session) -> list[str]:
    """The study's defaults (GSM8K dup 8 and 16, AQuA dup 8; docs/text_only.md; its runs in
    ``runs/text_only_study``, resumed)."""
    return ["--cache-dir", s.cache_arg]


def memorization_args(s: Session) -> list[str]:
    """Dups 1, 4, 16 at both sizes (six canaries of 100 + 100 items among 1,000 background
    problems, trained by the study; docs/memorization.md)."""
    return ["--dups", "1,4,16", "--sizes", "small,large", "--cache-dir", s.cache_arg]


def audit_canaries_window_args(s: Session) -> list[str]:
    """The document canary and the default dup-8 canary with the paper's window, also through
    ``bbmia serve`` (docs/documents-unlearning.md)."""
    return ["--setup", "paper-window", "--serve", "--cache-dir", s.cache_arg,
            "--out-dir", os.path.relpath(s.work / "audit_canaries", ROOT)]


def audit_canaries_least_changed_args(s: Session) -> list[str]:
    """The study's default setup: the dup-32 canary and the least-changed flag rule (unlearning only)."""
    return ["--skip-documents", "--cache-dir", s.cache_arg, "--out-dir", os.path.relpath(s.work / "audit_canaries", ROOT)]


def bench_blackbox_args(s: Session) -> list[str]:
    """The benchmark's tracker lines on the dup-16 canary (docs/requests-per-token.md; the
    concurrency lines are client timings, left out)."""
    return ["--no-concurrency", "--canary", s.canary("--dup", "16")]


def bisect_floor_args(s: Session) -> list[str]:
    """The floor under one-flip-per-request bisection, on bench_blackbox's texts and canary."""
    return ["--canary", s.canary("--dup", "16")]


def real_server_args(s: Session) -> list[str]:
    """The tracker (``auto``) against llama.cpp serving the default canary, ASCII and non-ASCII
    texts (docs/blackbox.md; needs llama-cpp-python: ``BBMIA_LLAMA_PYTHON`` or ``.venv-llama``)."""
    return ["--strategies", "auto", "--canary", s.canary()]


def chat_audit_args(s: Session) -> list[str]:
    """The default chat canary (``--chat-share 6``) behind ``bbmia serve --chat-template model``,
    swept through the chat endpoint (docs/blackbox-overview.md)."""
    return ["--canary", s.canary("--chat-share", "6"), "--work", os.path.relpath(s.work / "chat_audit", ROOT)]


def real_model_args(s: Session) -> list[str]:
    """The SmolLM2 case study (docs/real-model.md): white-box and through llama.cpp, its outputs and
    response cache resumed from the session's folder (needs the GGUF in ``.venv-llama/models`` and
    llama-cpp-python: ``BBMIA_LLAMA_PYTHON`` or ``.venv-llama``)."""
    return ["--work", os.path.relpath(s.work / "real_model_audit", ROOT)]


REAL_MODEL_VOLATILE = (VOLATILE_KEYS - {"requests", "requests_per_token"}) | {"white_seconds", "black_seconds", "machine",
                                                                              "version"}
"""The case study's keys that are not figures: its times, the machine and the package version
(its request counts, from an empty response cache, are figures)."""


def bench_local_gpu_args(model: str, n: int, texts: str = "gsm8k") -> Callable[[Session], list[str]]:
    """The local backend's GPU figures (docs/local-models.md): ``model`` on ``n`` texts of the
    ``texts`` set, Min-K%++ statistics on, one round (needs a CUDA GPU)."""
    return lambda s: ["--device", "cuda", "--rounds", "1", "--vocab-stats", "--models", model, "--n", str(n),
                      "--texts", texts]


BENCH_LOCAL_VOLATILE = frozenset({"seconds", "warm_seconds", "load_avg", "round", "code", "machine"})
"""A speed benchmark's keys that are not figures: its times and the machine (its speeds are its figures; no CPU
reproduces them, and ``--check`` on the same GPU compares them within :data:`REL_TOL`)."""

BENCHMARK_VOLATILE = (VOLATILE_KEYS - {"requests_per_token"}) | {"wall_s", "version", "probe_s", "texts_per_s",
                                                                  "tokens_per_s", "machine"}
"""A tracker benchmark's keys that are not figures: its times, rates, the machine and raw request counts (which
concurrent requests may move by one). Its requests per token, from a fresh response cache, are
figures (compared within :data:`ABS_TOL` or :data:`REL_TOL`)."""

STUDIES: dict[str, Study] = {"detection_power": Study("studies.detection_power", detection_power_args),
                             "detection_power_ref": Study("studies.detection_power", detection_power_ref_args),
                             "prevalence_coverage": Study("studies.prevalence_coverage", prevalence_coverage_args),
                             "text_only_study": Study("studies.text_only_study", text_only_args),
                             "memorization_study": Study("studies.memorization_study", memorization_args),
                             "audit_canaries_window": Study("studies.audit_canaries", audit_canaries_window_args),
                             "audit_canaries": Study("studies.audit_canaries", audit_canaries_least_changed_args),
                             "bisect_floor": Study("studies.bisect_floor", bisect_floor_args),
                             "chat_audit": Study("studies.chat_audit", chat_audit_args),
                             "real_model_audit": Study("studies.real_model_audit", real_model_args,
                                                       REAL_MODEL_VOLATILE),
                             "real_server_check": Study("benchmarks.real_server_check", real_server_args,
                                                        BENCHMARK_VOLATILE),
                             "bench_blackbox": Study("benchmarks.bench_blackbox", bench_blackbox_args, BENCHMARK_VOLATILE),
                             "bench_local_gpu": Study("benchmarks.bench_local", bench_local_gpu_args("gpt2-1b", 1024),
                                                      BENCH_LOCAL_VOLATILE),
                             "bench_local_gpu_long": Study("benchmarks.bench_local",
                                                           bench_local_gpu_args("gpt2-1b", 119, "long"),
                                                           BENCH_LOCAL_VOLATILE),
                             "bench_local_gpu_7b": Study("benchmarks.bench_local", bench_local_gpu_args("gpt2-7b", 256),
                                                         BENCH_LOCAL_VOLATILE)}


def study_table(name: str, lines: list[dict], command: str) -> str:
    """The generated page block of a study: the command that made it, then its tables."""
    if str(ROOT) not in sys.path:  # run as a script: the studies package sits at the repository root
        sys.path.insert(0, str(ROOT))
    render = importlib.import_module(STUDIES[name].module).markdown
    return f"Generated by `{command}` (`python scripts/docs_figures.py --only {name}`):\n\n" + render(lines)


def saved_study(name: str) -> dict:
    """A study's saved run: ``{"command": ..., "lines": [...]}`` (its JSON lines, the summary last).

    Raises:
        FileNotFoundError: the study was never run by this script.
    """
    return json.loads((STUDY_LINES / f"{name}.json").read_text())


def differences(old: object, new: object, where: str = "") -> list[str]:
    """Every place where ``new`` differs from ``old`` beyond the tolerance, as ``path: old -> new``."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [d for k in sorted(set(old) | set(new)) for d in differences(old.get(k), new.get(k), f"{where}.{k}")]
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [d for i, (a, b) in enumerate(zip(old, new)) for d in differences(a, b, f"{where}[{i}]")]
    both_float = isinstance(old, float) and isinstance(new, (int, float)) or isinstance(new, float) and isinstance(old, int)
    if both_float and not isinstance(old, bool) and not isinstance(new, bool):
        if abs(new - old) <= ABS_TOL * (1 + 1e-9) or max(abs(old), abs(new)) > 1 and math.isclose(
                old, new, rel_tol=REL_TOL):
            return []
    elif old == new:
        return []
    return [f"{where or '.'}: {old!r} -> {new!r}"]


def skeleton(text: str) -> str:
    """``text`` with every number written ``#``: what ``--check`` compares of a console block
    exactly (its figures are compared within the tolerance through ``figures.json``; its times,
    printed only there, never)."""
    return NUMBER.sub("#", text)


def block_drift(name: str, committed: str, printed: str) -> list[str]:
    """The lines of the console block ``name`` as ``printed`` that differ, numbers aside, from
    the ``committed`` one (``docs/generated/<name>.md``), as ``name.md: committed -> printed``."""
    return [f"{name}.md: {a!r} -> {b!r}"
            for a, b in itertools.zip_longest(committed.splitlines(), printed.splitlines(), fillvalue="")
            if skeleton(a) != skeleton(b)]


def sync_readme() -> list[str]:
    """Replace README.md's generated blocks by ``docs/generated/<name>``; return the names whose
    file is missing."""
    missing = []

    def replace(match: re.Match) -> str:
        path = GENERATED / match["name"]
        if not path.is_file():
            missing.append(match["name"])
            return match[0]
        return match[1] + path.read_text() + match[4]

    text = README.read_text()
    README.write_text(GENERATED_BLOCK.sub(replace, text))
    return missing


def main(argv: list[str] | None = None) -> int:
    """Run the blocks; write (or ``--check``) the generated files. Returns the exit status."""
    every = [*BLOCKS, *STUDIES]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare with the saved figures, write nothing")
    parser.add_argument("--only", default=",".join(BLOCKS),
                        help=f"comma-separated blocks ({', '.join(every)}; default: {', '.join(BLOCKS)})")
    parser.add_argument("--studies", action="store_true", help=f"also the studies ({', '.join(STUDIES)}): hours")
    parser.add_argument("--render", action="store_true", help="rewrite the studies' tables from their saved lines")
    parser.add_argument("--cache-dir", type=Path, default=Path(os.environ.get("BBMIA_CACHE_DIR", ROOT / "cache")))
    parser.add_argument("--fresh", action="store_true", help="delete the audits' earlier outputs first")
    args = parser.parse_args(argv)
    if args.render:
        never_run = [name for name in STUDIES if not (STUDY_LINES / f"{name}.json").is_file()]
        for name in (name for name in STUDIES if name not in never_run):
            saved = saved_study(name)
            (GENERATED / f"{name}.md").write_text(study_table(name, saved["lines"], saved["command"]))
        if never_run:
            print(f"never run, nothing to render: {', '.join(never_run)} (--only NAME runs one)", file=sys.stderr)
        return 1 if never_run else 0
    names = [n.strip() for n in args.only.split(",") if n.strip()] + (list(STUDIES) if args.studies else [])
    unknown = [n for n in names if n not in every]
    if unknown:
        parser.error(f"unknown block {', '.join(unknown)}; choose from {', '.join(every)}")
    bbmia = shutil.which("bbmia", path=str(Path(sys.executable).parent)) or shutil.which("bbmia")
    if bbmia is None:
        parser.error("no bbmia executable: install the package (pip install -e \".[local]\")")
    cache = args.cache_dir.resolve()
    work = cache / "docs-figures"
    if args.fresh:
        shutil.rmtree(work, ignore_errors=True)
    session = Session(bbmia, cache, work)
    recorded = json.loads(FIGURES_FILE.read_text()) if FIGURES_FILE.is_file() else {}
    figures, drift = {}, []
    for name in names:
        print(f"{name} ...", file=sys.stderr, flush=True)
        if name in STUDIES:
            study = STUDIES[name]
            lines, command = session.study(study.module, study.args(session))
            if args.check:
                old = saved_study(name)["lines"] if (STUDY_LINES / f"{name}.json").is_file() else None
                drift += differences(figures_of(old, volatile=study.volatile),
                                     figures_of(lines, session.shown, study.volatile), name)
            else:
                STUDY_LINES.mkdir(parents=True, exist_ok=True)
                saved = {"command": command, "lines": figures_of(lines, session.shown, study.volatile)}
                (STUDY_LINES / f"{name}.json").write_text(json.dumps(saved, indent=1) + "\n")
                (GENERATED / f"{name}.md").write_text(study_table(name, saved["lines"], command))
            continue
        value = figures_of(BLOCKS[name](session), session.shown)
        block = session.block()
        if args.check:
            committed = GENERATED / f"{name}.md"
            drift += differences(recorded.get(name), value, name) + block_drift(
                name, committed.read_text() if committed.is_file() else "", block)
        else:
            figures[name] = value
            GENERATED.mkdir(parents=True, exist_ok=True)
            (GENERATED / f"{name}.md").write_text(block)
    if args.check:
        for line in drift:
            print(f"drift: {line}")
        print(f"{len(drift)} figures differ beyond the tolerance" if drift else "every figure reproduces")
        return 1 if drift else 0
    if figures:  # re-read: another run may have written other blocks meanwhile
        current = json.loads(FIGURES_FILE.read_text()) if FIGURES_FILE.is_file() else {}
        FIGURES_FILE.write_text(json.dumps({**current, **figures}, indent=1, sort_keys=True) + "\n")
    missing = sync_readme()
    if missing:
        print(f"README.md includes missing generated files: {', '.join(missing)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
