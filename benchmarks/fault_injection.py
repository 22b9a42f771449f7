"""Fault-injection benchmark: the black-box path against ``bbmia serve`` behind the fault proxy.

Starts its own emulator (``serve_in_background`` on a local model: by default a tiny random
GPT-2 built on the fly in a temporary directory, exactly as ``tests/conftest.py`` builds
``tiny_model_dir``; ``--model`` takes a canary directory instead) and the fault-injecting proxy
(``tests/tools/fault_proxy.py``) on loopback, then measures on the first ``--texts`` GSM8K test
texts, with the model's context (long texts in sliding windows):

a. clean run: an ApiBackend straight to the emulator (own fresh cache);
b. faulty run: an ApiBackend through the proxy at ``--rate`` with every fault class, server
   errors with the same body every time ("Internal Server Error": a client must retry them too)
   (fresh cache, client timeout shorter than the proxy's stall): texts completed in this ONE
   run, and the largest |value - clean value| over every token, lower and upper bound of the
   completed texts;
c. invalid rows in the faulty run's cache (not a JSON object, ``choices`` missing or empty,
   ``logprobs`` null, a choice without its log-prob lists, any non-finite number, a row that
   cannot be read);
d. ``bbmia score`` through a fault-free proxy killed with SIGKILL once the proxy has forwarded
   40% of the requests the clean run needed, then rerun to completion: answers the proxy had
   delivered whole that were paid for again (the proxy is paused :data:`GRACE_S` seconds before
   the kill, so every delivered answer had time to reach the cache), and the resumed JSONL;
e. two ``bbmia score`` processes started together on one ``--cache-dir`` and the same texts
   (different ``--out``): request bodies paid for more than once (answered 200 upstream more
   than once; bodies forwarded twice but refused, e.g. with a 400, are reported apart);
f. ``bbmia score`` through a fault-free proxy interrupted with SIGINT (Ctrl-C) once the proxy
   has forwarded 40% of the clean run's requests (no pause: the answers in flight must land
   during the command's own grace period), then rerun: answers delivered whole that were paid
   for again (``repaid_after_sigint``);
g. ``bbmia probe --file`` on a :data:`HUGE_TEXT_CHARS`-character text (the GSM8K texts repeated;
   the capability record already cached), interrupted with SIGINT :data:`HUGE_SIGINT_AFTER_S`
   seconds after start (tokenizing): seconds from SIGINT to exit and the peak RSS (VmHWM) in GB;
h. poisoned rows: a copy of the clean run's cache with one row of each kind in
   :data:`POISON_KINDS` (pickled, text mode, a file outside the cache, a JSON list, bytes that
   are not JSON), rerun: ``poisoned_row_kinds_survived`` counts the kinds whose row was
   quarantined while the run completed every text with the clean values;
i. read-only rerun: ``bbmia score`` rerun on the finished cache of (d) made read-only, through
   (d)'s proxy (a read-only bind mount as root, where chmod does not bite; chmod otherwise):
   ``read_only_rerun_requests`` upstream requests (0 expected).

Progress goes to stderr; the last line of stdout is one JSON object (``--json`` also keeps
everything else off stdout). A measurement that could not be made (the killed run finished
before the kill point, a ``bbmia score`` failed, no text completed) is null there, with the
reason beside it, and the exit status is 1. Expected: every text completed, max_abs_diff
<= 1e-6, 0 for invalid_rows_cached, repaid_after_kill, paid_twice_two_processes,
repaid_after_sigint and read_only_rerun_requests, poisoned_row_kinds_survived equal to the number
of kinds, huge_text_sigint_exit_s < 2 and huge_text_peak_rss_gb < 1.

Usage: python -m benchmarks.fault_injection [--json] [--model PATH] [--texts 20] [--rate 0.2] [--seed 0]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import pickle
import shutil
import sqlite3
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from blackbox_mia.datasets import DATA_DIR, Item, load_shipped_or_jsonl
from tests.tools.fault_proxy import (
    FAULT_CLASSES,
    FaultConfig,
    FaultProxy,
    proxy_in_background,
)
from blackbox_mia.types import BlackboxMIAError, TokenLogprobs

KILL_FRACTION = 0.4  # kill `bbmia score` once the proxy forwarded this share of the clean run's requests
GRACE_S = 0.5  # the proxy is paused this long before the kill: delivered answers reach the cache
CLIENT_TIMEOUT_S = 1.0  # faulty run: the client's timeout, shorter than...
STALL_S = 2.0  # ...the proxy's stall
BACKOFF_BASE_S = 0.01
MAX_RETRIES = 8
SUBPROCESS_TIMEOUT_S = 600.0
HUGE_TEXT_CHARS = 10_000_000  # g: the huge text's length (10 MB of ASCII)
HUGE_SIGINT_AFTER_S = 8.0  # g: SIGINT this long after `bbmia probe` started (past imports, while tokenizing)
RSS_POLL_S = 0.05  # g: how often the peak RSS is read


def log(message: str) -> None:
    print(f"[fault_injection] {message}", file=sys.stderr, flush=True)


def tiny_model(directory: Path) -> Path:
    """The tests' ``tiny_model_dir``: a 2-layer, 32-dim GPT-2 (context 64, vocab 300, seed 0)
    with a BPE tokenizer trained on the first 300 GSM8K train questions, saved in ``directory``."""
    from blackbox_mia.canary.model import build_gpt2, save_model_dir, train_tokenizer

    with open(DATA_DIR / "gsm8k" / "train.jsonl", encoding="utf-8") as f:
        questions = [json.loads(line)["question"] for _, line in zip(range(300), f)]
    tokenizer = train_tokenizer(questions, vocab_size=300)
    model = build_gpt2(len(tokenizer), n_layer=2, n_embd=32, n_head=2, n_positions=64, seed=0)
    return save_model_dir(directory, model, tokenizer)


@dataclass
class Run:
    """One ApiBackend run: per-text results (index -> TokenLogprobs) of the texts that finished,
    the client's usage, the error that stopped it (``None`` when none) and its wall time."""

    values: dict[int, TokenLogprobs] = field(default_factory=dict)
    usage: dict = field(default_factory=dict)
    error: str | None = None
    fault: str | None = None
    wall_s: float = 0.0


def run_backend(url: str, model: str, texts: Sequence[str], cache_dir: Path, context: int | None,
                tokenizer: str | None = None, **api) -> Run:
    """Track every text through ``url`` with a fresh ApiBackend (probe included) caching under
    ``cache_dir``; ``tokenizer``: the model's directory when the server names it otherwise
    (default: ``model``); ``api`` goes to :class:`ApiConfig` (timeout_s, max_retries, ...).
    Errors are recorded in the result, not raised."""
    from blackbox_mia.backends.api import ApiBackend
    from blackbox_mia.backends.api.http.client import ApiConfig
    from blackbox_mia.backends.api.tracker.tracker import TrackerConfig

    run, backend = Run(), None
    began = time.perf_counter()
    try:
        backend = ApiBackend(ApiConfig(base_url=url, model=model, **api), tokenizer=tokenizer or model,
                             tracker=TrackerConfig(context=context), cache_dir=cache_dir)
        backend.logprobs(list(texts), on_done=run.values.__setitem__)
    except BlackboxMIAError as exc:
        run.error, run.fault = str(exc), getattr(exc, "fault", None)
    finally:
        if backend is not None:
            run.usage = backend.usage.to_dict()
            backend.close()
    run.wall_s = time.perf_counter() - began
    return run


def _abs_diff(a: np.ndarray, b: np.ndarray) -> float:
    """max |a - b|, equal infinities counting 0 and any other non-finite difference inf."""
    if a.shape != b.shape:
        return math.inf
    if a.size == 0:
        return 0.0
    with np.errstate(invalid="ignore"):
        diff = np.where(a == b, 0.0, np.abs(a - b))
    return float(np.nan_to_num(diff, nan=math.inf).max())


def max_abs_diff(clean: dict[int, TokenLogprobs], other: dict[int, TokenLogprobs]) -> tuple[float, float]:
    """(largest |value - clean value|, the same over values AND lower/upper bounds) over every
    token of the texts in ``other``; inf when a text is missing from ``clean`` or its tokens differ."""
    values = everything = 0.0
    for index, got in other.items():
        want = clean.get(index)
        if want is None or got.token_ids.tolist() != want.token_ids.tolist():
            return math.inf, math.inf
        values = max(values, _abs_diff(got.logprobs, want.logprobs))
        everything = max(everything, values)
        for name in ("lower", "upper"):
            a, b = getattr(got, name), getattr(want, name)
            a = got.logprobs if a is None else a
            b = want.logprobs if b is None else b
            everything = max(everything, _abs_diff(np.asarray(a, float), np.asarray(b, float)))
    return values, everything


def _nonfinite(value: object) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(_nonfinite(v) for v in value.values())
    if isinstance(value, list):
        return any(_nonfinite(v) for v in value)
    return False


def row_problem(row: object) -> str | None:
    """Why a cached answer is not a valid log-prob answer (the tracker always asks for
    log-probs), or ``None`` when it is one."""
    if not isinstance(row, dict):
        return "not a JSON object"
    if _nonfinite(row):
        return "non-finite number"
    choices = row.get("choices")
    if not isinstance(choices, list) or not choices:
        return "choices missing or empty"
    for choice in choices:
        if not isinstance(choice, dict):
            return "choice not an object"
        logprobs = choice.get("logprobs")
        if logprobs is None:
            return "logprobs null"
        if not isinstance(logprobs, dict):
            return "logprobs not an object"
        if "content" in logprobs:  # chat
            if not isinstance(logprobs["content"], list):
                return "logprobs.content not a list"
        elif not isinstance(logprobs.get("tokens"), list) or not isinstance(logprobs.get("token_logprobs"), list):
            return "logprobs without tokens/token_logprobs"
    return None


def invalid_rows(cache_root: Path) -> tuple[int, Counter]:
    """(rows in the response cache under ``cache_root``, invalid rows counted by problem); a row
    the cache refuses to read counts as invalid (``unreadable``)."""
    import diskcache

    from blackbox_mia.backends.api.http.cache.disk import JsonDisk

    directory = Path(cache_root) / "responses"
    problems: Counter = Counter()
    if not directory.is_dir():
        return 0, problems
    rows = 0
    with diskcache.Cache(str(directory), disk=JsonDisk) as cache:
        for key in list(cache.iterkeys()):
            rows += 1
            try:
                row = cache.get(key)
            except BlackboxMIAError:
                problems["unreadable"] += 1
                continue
            problem = row_problem(row)
            if problem is not None:
                problems[problem] += 1
    return rows, problems


def write_jsonl(items: Sequence[Item], path: Path) -> Path:
    with open(path, "w", encoding="utf-8") as f:
        for item in items:
            f.write(json.dumps({"id": item.id, "text": item.text}) + "\n")
    return path


def bbmia_command() -> list[str]:
    """How to run ``bbmia`` with this interpreter."""
    script = Path(sys.executable).with_name("bbmia")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from blackbox_mia.cli import app; sys.argv[0] = 'bbmia'; app()"]


def score_command(jsonl: Path, url: str, model: str, cache_dir: Path, out: Path, context: int | None) -> list[str]:
    command = [*bbmia_command(), "score", str(jsonl), "--base-url", url, "--model", model, "--tokenizer", model,
               "--cache-dir", str(cache_dir), "--scorers", "loss", "--out", str(out), "--yes"]
    return command + ([] if context is None else ["--context-tokens", str(context)])


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "BBMIA_CACHE_DIR")}
    return {**env, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def _start(command: list[str], log_path: Path) -> subprocess.Popen:
    with open(log_path, "ab") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                cwd=log_path.parent, env=_env())


def _wait(process: subprocess.Popen) -> int:
    """The exit status of ``process``, killed first when it runs past :data:`SUBPROCESS_TIMEOUT_S`."""
    try:
        return process.wait(timeout=SUBPROCESS_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait()


def _tail(log_path: Path, lines: int = 5) -> str:
    try:
        return " | ".join(log_path.read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return ""


def jsonl_ids(path: Path) -> list[str]:
    """The ``id`` of every complete JSONL row in ``path`` (a cut last line is skipped)."""
    if not path.exists():
        return []
    ids = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            ids.append(json.loads(line)["id"])
        except (ValueError, KeyError, TypeError):
            continue
    return ids


def kill_and_rerun(proxy: FaultProxy, command: list[str], out: Path, kill_after: int, work: Path,
                   grace_s: float = GRACE_S, signum: int = signal.SIGKILL) -> dict:
    """Run ``command`` (a ``bbmia score`` writing ``out``) through ``proxy``, send it ``signum``
    once the proxy has forwarded ``kill_after`` more requests (SIGKILL: after pausing the proxy
    ``grace_s`` seconds; SIGINT: at once, the command lands its answers in flight itself), resume
    the proxy and rerun the command to completion.

    Returns:
        ``repaid_after_kill``: upstream payments of bodies whose answer had been delivered
        whole (before the kill or in the rerun), plus what happened (``killed``, upstream
        requests before the kill and in the rerun, rows before the kill and after the rerun,
        the rerun's exit status and its ids, each of which must appear once).
    """
    log_path = work / f"signal-{signum}.log"
    start = proxy.stats.upstream_requests
    process = _start(command, log_path)
    deadline = time.monotonic() + SUBPROCESS_TIMEOUT_S
    while process.poll() is None and proxy.stats.upstream_requests - start < kill_after:
        if time.monotonic() > deadline:
            break
        time.sleep(0.005)
    killed = process.poll() is None
    at_kill = proxy.stats.upstream_requests - start
    if killed and signum == signal.SIGKILL:
        proxy.pause()
        time.sleep(grace_s)
    if killed:
        process.send_signal(signum)
    first_rc = _wait(process)
    delivered_before = sum(proxy.stats.delivered.values())
    time.sleep(0.1)  # requests the killed process left in the proxy give up (their client is gone)
    proxy.resume()
    rows_before = len(jsonl_ids(out))
    middle = proxy.stats.upstream_requests
    rerun_log = work / f"rerun-{signum}.log"
    rerun_rc = _wait(_start(command, rerun_log))
    ids = jsonl_ids(out)
    result = {
        "killed": killed,
        "first_exit": first_rc,
        "upstream_requests_before_kill": at_kill,
        "delivered_before_kill": delivered_before,
        "rows_before_kill": rows_before,
        "rerun_exit": rerun_rc,
        "rerun_upstream_requests": proxy.stats.upstream_requests - middle,
        "rerun_rows": len(ids),
        "rerun_unique_ids": len(set(ids)),
        "repaid_after_kill": sum(proxy.stats.repaid.values()),
    }
    if not killed:
        result["first_log_tail"] = _tail(log_path)
    if rerun_rc != 0:
        result["rerun_log_tail"] = _tail(rerun_log)
    return result


def peak_rss_gb(pid: int) -> float | None:
    """The peak resident set size (VmHWM) of a live process in GB, ``None`` once it is gone."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024 / 1e9
    except OSError:
        return None
    return None


def huge_text_sigint(command: list[str], work: Path, after_s: float = HUGE_SIGINT_AFTER_S) -> dict:
    """Run ``command`` (``bbmia probe --file`` on a huge text), SIGINT it ``after_s`` seconds
    after start, and measure.

    Returns:
        ``exit_s``: seconds from SIGINT to exit (``None`` when it had ended before); ``peak_rss_gb``:
        the largest VmHWM read while it ran; its exit status and, unless 130, its log's tail.
    """
    log_path = work / "huge.log"
    process = _start(command, log_path)
    peak, began, sent = 0.0, time.monotonic(), None
    while process.poll() is None:
        peak = max(peak, peak_rss_gb(process.pid) or 0.0)
        if sent is None and time.monotonic() - began >= after_s:
            process.send_signal(signal.SIGINT)
            sent = time.monotonic()
        if time.monotonic() - began > SUBPROCESS_TIMEOUT_S:
            process.kill()
        time.sleep(RSS_POLL_S)
    result = {"exit_s": None if sent is None else round(time.monotonic() - sent, 2), "peak_rss_gb": round(peak, 3),
              "exit": process.returncode}
    if process.returncode != 130:
        result["log_tail"] = _tail(log_path)
    return result


def two_processes(proxy: FaultProxy, commands: Sequence[list[str]], outs: Sequence[Path], work: Path) -> dict:
    """Start ``commands`` together (``bbmia score`` on one cache directory) and wait for them.

    Returns:
        ``paid_twice``: request bodies upstream answered with a 200 (what a provider bills) more
        than once, and ``extra_payments`` (those answers beyond the first); ``forwarded_twice``:
        bodies forwarded upstream more than once whatever the answer, and how many of those were
        refused every time (``forwarded_twice_refused``: e.g. a 400, never cached, so each process
        hears it for itself); each process's exit status and rows; upstream requests.
    """
    logs = [work / f"process-{i}.log" for i in range(len(commands))]
    processes = [_start(command, path) for command, path in zip(commands, logs)]
    codes = [_wait(process) for process in processes]
    answered, forwarded = Counter(proxy.stats.answered), Counter(proxy.stats.by_body)
    result = {
        "paid_twice": sum(1 for n in answered.values() if n > 1),
        "extra_payments": sum(n - 1 for n in answered.values()),
        "forwarded_twice": sum(1 for n in forwarded.values() if n > 1),
        "forwarded_twice_refused": sum(1 for h, n in forwarded.items() if n > 1 and answered[h] == 0),
        "exits": codes,
        "rows": [len(jsonl_ids(out)) for out in outs],
        "unique_ids": [len(set(jsonl_ids(out))) for out in outs],
        "upstream_requests": proxy.stats.upstream_requests,
    }
    failed = [_tail(path) for path, code in zip(logs, codes) if code != 0]
    if failed:
        result["log_tails"] = failed
    return result


POISON_KINDS = {  # kind -> (SQL altering one row of the Cache table, its arguments before the key)
    "pickle": ("UPDATE Cache SET mode = 4, value = ? WHERE key = ?", (pickle.dumps({"choices": []}),)),
    "text_mode": ("UPDATE Cache SET mode = 3 WHERE key = ?", ()),
    "file_outside": ("UPDATE Cache SET mode = 2, value = NULL, filename = '../../outside.val' WHERE key = ?", ()),
    "json_list": ("UPDATE Cache SET value = ? WHERE key = ?", (b"[1, 2, 3]",)),
    "not_json": ("UPDATE Cache SET value = ? WHERE key = ?", (b'{"choices": \xff',)),
}


def poisoned_rows(url: str, model: str, texts: Sequence[str], clean: Run, clean_cache: Path, work: Path,
                  context: int | None) -> dict:
    """Rerun on a copy of ``clean_cache`` (the clean run's cache root) with one row of each
    :data:`POISON_KINDS` kind (distinct rows, the last ones stored: tracker answers, which a
    rerun reads, not the probe's, whose record is cached apart) through ``url``.

    Returns:
        ``poisoned_row_kinds`` (the kinds), ``poisoned_row_kinds_survived`` (kinds whose row was
        quarantined while every text completed with the clean values), the rerun's error and
        requests (one per poisoned row expected: each is asked again).
    """
    from blackbox_mia.backends.api import ApiBackend
    from blackbox_mia.backends.api.http.client import ApiConfig
    from blackbox_mia.backends.api.tracker.tracker import TrackerConfig

    root = work / "poisoned-cache"
    shutil.copytree(clean_cache, root)
    with contextlib.closing(sqlite3.connect(root / "responses" / "cache.db")) as db, db:
        keys = [key for (key,) in db.execute("SELECT key FROM Cache WHERE raw = 1 AND mode = 1 ORDER BY rowid DESC")]
        poisoned = dict(zip(POISON_KINDS, keys))
        for kind, key in poisoned.items():
            sql, args = POISON_KINDS[kind]
            db.execute(sql, (*args, key))
    run, backend = Run(), None
    try:
        backend = ApiBackend(ApiConfig(base_url=url, model=model), tokenizer=model,
                             tracker=TrackerConfig(context=context), cache_dir=root)
        backend.logprobs(list(texts), on_done=run.values.__setitem__)
    except BlackboxMIAError as exc:
        run.error = str(exc)
    finally:
        quarantined = {} if backend is None else dict(backend.client.cache.quarantined)
        if backend is not None:
            run.usage = backend.usage.to_dict()
            backend.close()
    complete = len(run.values) == len(texts) and max_abs_diff(clean.values, run.values)[1] <= 1e-6
    return {"poisoned_row_kinds": list(poisoned),
            "poisoned_row_kinds_survived": sum(complete and key in quarantined for key in poisoned.values()),
            "quarantined": {kind: quarantined.get(key) for kind, key in poisoned.items()},
            "requests": run.usage.get("requests"), "error": run.error}


def read_only_command(command: list[str], cache_dir: Path) -> list[str]:
    """``command`` run with ``cache_dir`` read-only: under a private read-only bind mount as root
    (chmod does not stop root), else after ``chmod -R a-w`` (see :func:`read_only_rerun`)."""
    if os.geteuid() != 0:
        return command
    script = 'mount --bind -o ro "$0" "$0" && exec "$@"'
    return ["unshare", "-m", "sh", "-c", script, str(cache_dir), *command]


def read_only_rerun(proxy: FaultProxy, command: list[str], cache_dir: Path, work: Path) -> dict:
    """Rerun ``command`` (a ``bbmia score`` whose answers are all in ``cache_dir``) with the
    cache read-only, through ``proxy``.

    Returns:
        ``read_only_rerun_requests``: upstream requests of the rerun (``None`` when it failed,
        with its exit status and log tail).
    """
    if os.geteuid() != 0:
        subprocess.run(["chmod", "-R", "a-w", str(cache_dir)], check=True)
    log_path = work / "read-only.log"
    start = proxy.stats.upstream_requests
    try:
        code = _wait(_start(read_only_command(command, cache_dir), log_path))
    finally:
        if os.geteuid() != 0:
            subprocess.run(["chmod", "-R", "u+w", str(cache_dir)], check=True)
    requests = proxy.stats.upstream_requests - start
    result = {"read_only_rerun_requests": requests if code == 0 else None, "exit": code,
              "upstream_requests": requests, "mode": "bind mount" if os.geteuid() == 0 else "chmod"}
    if code != 0:
        result["log_tail"] = _tail(log_path)
    return result


def main(argv: Sequence[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="keep stdout to the final JSON line")
    parser.add_argument("--model", help="local model directory (default: a tiny random GPT-2 built on the fly)")
    parser.add_argument("--texts", type=int, default=20, help="first N GSM8K test texts")
    parser.add_argument("--rate", type=float, default=0.2, help="fault probability per request (faulty run)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the proxy's fault draws")
    args = parser.parse_args(argv)
    if args.texts < 1 or not 0.0 <= args.rate <= 1.0:
        parser.error("--texts must be >= 1 and --rate in [0, 1]")

    from blackbox_mia.backends.local import LocalBackend, LocalConfig
    from blackbox_mia.emulator import ServerConfig, serve_in_background

    walls: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="bbmia-faults-") as tmp, ExitStack() as stack:
        work = Path(tmp)
        began = time.perf_counter()
        if args.model is None:
            log("building the tiny random GPT-2")
            model = str(tiny_model(work / "tiny"))
        else:
            model = str(Path(args.model).expanduser().resolve())  # the subprocesses run elsewhere
        local = LocalBackend(LocalConfig(model, device="cpu"))
        context = local.context
        items = load_shipped_or_jsonl("gsm8k").items[: args.texts]
        texts = [item.text for item in items]
        url = stack.enter_context(serve_in_background(ServerConfig(model=model), local))
        walls["setup"] = time.perf_counter() - began
        log(f"emulator at {url}: {model} (context {context}), {len(texts)} texts")

        log("a. clean run")
        clean = run_backend(url, model, texts, work / "clean", context)
        walls["clean"] = clean.wall_s
        if clean.error is not None:
            raise SystemExit(f"the clean run failed: {clean.error}")
        clean_requests = clean.usage["requests"]
        log(f"   {clean_requests} requests, {clean.wall_s:.1f} s")

        log(f"b. faulty run: rate {args.rate}, every class, seed {args.seed}")
        config = FaultConfig(upstream=url, rate=args.rate, seed=args.seed, stall_s=STALL_S, same_5xx_body=True)
        with proxy_in_background(config) as proxy:
            faulty = run_backend(proxy.base_url, model, texts, work / "faulty", context, timeout_s=CLIENT_TIMEOUT_S,
                                 max_retries=MAX_RETRIES, backoff_base_s=BACKOFF_BASE_S)
            faulty_stats = {"proxy_requests": proxy.stats.requests, "upstream_requests": proxy.stats.upstream_requests,
                            "injected": dict(sorted(proxy.stats.injected.items()))}
        walls["faulty"] = faulty.wall_s
        diff_values, diff_all = max_abs_diff(clean.values, faulty.values)
        log(f"   {len(faulty.values)}/{len(texts)} texts, max |diff| {diff_all:.3g}, injected "
            f"{sum(faulty_stats['injected'].values())}, {faulty.wall_s:.1f} s"
            + (f"; error: {faulty.error}" if faulty.error else ""))

        log("c. invalid rows cached")
        began = time.perf_counter()
        rows, problems = invalid_rows(work / "faulty")
        clean_rows, clean_problems = invalid_rows(work / "clean")
        walls["invalid_rows"] = time.perf_counter() - began
        log(f"   faulty cache: {sum(problems.values())} of {rows} rows invalid {dict(problems)}; "
            f"clean cache: {sum(clean_problems.values())} of {clean_rows}")

        jsonl = write_jsonl(items, work / "texts.jsonl")
        kill_after = max(1, int(KILL_FRACTION * clean_requests))
        log(f"d. bbmia score killed (SIGKILL) after {kill_after} upstream requests, then rerun")
        began = time.perf_counter()
        with proxy_in_background(FaultConfig(upstream=url, rate=0.0)) as proxy:
            out = work / "kill.jsonl"
            kill = kill_and_rerun(proxy, score_command(jsonl, proxy.base_url, model, work / "kill-cache", out, context),
                                  out, kill_after, work)
            walls["kill_rerun"] = time.perf_counter() - began
            log(f"   {kill}")
            # (i) through the same proxy: the capability record is kept per base URL, so another
            # URL would be probed again (requests the finished run never made)
            log("i. the finished run of (d) rerun on its cache made read-only")
            began = time.perf_counter()
            read_only = read_only_rerun(proxy, score_command(jsonl, proxy.base_url, model, work / "kill-cache",
                                                             work / "read-only.jsonl", context),
                                        work / "kill-cache", work)
            walls["read_only_rerun"] = time.perf_counter() - began
            log(f"   {read_only}")

        log("e. two bbmia score processes on one cache directory")
        began = time.perf_counter()
        with proxy_in_background(FaultConfig(upstream=url, rate=0.0)) as proxy:
            outs = [work / f"two-{i}.jsonl" for i in range(2)]
            commands = [score_command(jsonl, proxy.base_url, model, work / "shared-cache", o, context) for o in outs]
            two = two_processes(proxy, commands, outs, work)
        walls["two_processes"] = time.perf_counter() - began
        log(f"   {two}")

        log(f"f. bbmia score interrupted (SIGINT) after {kill_after} upstream requests, then rerun")
        began = time.perf_counter()
        with proxy_in_background(FaultConfig(upstream=url, rate=0.0)) as proxy:
            out = work / "sigint.jsonl"
            sigint = kill_and_rerun(proxy, score_command(jsonl, proxy.base_url, model, work / "sigint-cache", out,
                                                         context), out, kill_after, work, signum=signal.SIGINT)
        walls["sigint_rerun"] = time.perf_counter() - began
        log(f"   {sigint}")

        log(f"g. bbmia probe on a {HUGE_TEXT_CHARS:,}-character text, SIGINT after {HUGE_SIGINT_AFTER_S:g} s")
        began = time.perf_counter()
        one = "\n\n".join(item.text for item in load_shipped_or_jsonl("gsm8k").items)
        huge = work / "huge.txt"
        huge.write_text((one * (HUGE_TEXT_CHARS // len(one) + 1))[:HUGE_TEXT_CHARS], encoding="ascii", errors="replace")
        probe = [*bbmia_command(), "probe", "--file", str(huge), "--base-url", url, "--model", model, "--tokenizer",
                 model, "--cache-dir", str(work / "clean"), "--scorers", "loss", "--json", "--yes"]
        huge_run = huge_text_sigint(probe + ([] if context is None else ["--context-tokens", str(context)]), work)
        walls["huge_text"] = time.perf_counter() - began
        log(f"   {huge_run}")

        log("h. a poisoned cache row of each kind")
        began = time.perf_counter()
        poisoned = poisoned_rows(url, model, texts, clean, work / "clean", work, context)
        walls["poisoned_rows"] = time.perf_counter() - began
        log(f"   {poisoned}")

    # A phase that could not measure gives null, never a reassuring 0.
    kill_ok = kill["killed"] and kill["rerun_exit"] == 0
    two_ok = not any(two["exits"])
    sigint_ok = sigint["killed"] and sigint["first_exit"] == 130 and sigint["rerun_exit"] == 0
    huge_ok = huge_run["exit_s"] is not None and huge_run["exit"] == 130
    result = {
        "texts_total": len(texts),
        "texts_completed": len(faulty.values),
        "texts_completed_one_run": len(faulty.values),
        "max_abs_diff": diff_all if faulty.values else None,
        "invalid_rows_cached": sum(problems.values()),
        "repaid_after_kill": kill["repaid_after_kill"] if kill_ok else None,
        "paid_twice_two_processes": two["paid_twice"] if two_ok else None,
        "repaid_after_sigint": sigint["repaid_after_kill"] if sigint_ok else None,
        "huge_text_sigint_exit_s": huge_run["exit_s"] if huge_ok else None,
        "huge_text_peak_rss_gb": huge_run["peak_rss_gb"] if huge_ok else None,
        "resumed_rows_complete": kill["rerun_rows"] == kill["rerun_unique_ids"] == len(items),
        "poisoned_row_kinds": poisoned["poisoned_row_kinds"],
        "poisoned_row_kinds_survived": poisoned["poisoned_row_kinds_survived"],
        "read_only_rerun_requests": read_only["read_only_rerun_requests"] if kill_ok else None,
        "model": "tiny-random-gpt2" if args.model is None else model,
        "context": context,
        "rate": args.rate,
        "seed": args.seed,
        "max_abs_diff_values": diff_values,
        "faulty_error": faulty.error,
        "faulty_error_fault": faulty.fault,
        "requests": {"clean": clean_requests, "faulty_client": faulty.usage.get("requests"),
                     "faulty_proxy": faulty_stats["proxy_requests"],
                     "faulty_upstream": faulty_stats["upstream_requests"]},
        "faulty_usage": faulty.usage,
        "injected": faulty_stats["injected"],
        "fault_classes": list(FAULT_CLASSES),
        "cache_rows": {"faulty": rows, "clean": clean_rows},
        "invalid_rows_by_problem": dict(problems),
        "invalid_rows_cached_clean": sum(clean_problems.values()),
        "kill": kill,
        "two_processes": two,
        "poisoned": poisoned,
        "read_only": read_only,
        "sigint": sigint,
        "huge_text": huge_run,
        "wall_s": {k: round(v, 2) for k, v in walls.items()},
    }
    return result


def finite(value: object) -> object:
    """``value`` with every NaN or infinity replaced by its name as a string (strict JSON)."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


SUMMARY = [("texts completed", "texts_completed"), ("max |diff| (values and bounds)", "max_abs_diff"),
           ("invalid rows cached", "invalid_rows_cached"), ("delivered answers paid again after kill -9",
                                                            "repaid_after_kill"),
           ("requests paid twice by two processes", "paid_twice_two_processes"),
           ("delivered answers paid again after Ctrl-C", "repaid_after_sigint"),
           ("10 MB text: seconds from Ctrl-C to exit", "huge_text_sigint_exit_s"),
           ("10 MB text: peak RSS (GB)", "huge_text_peak_rss_gb"),
           ("poisoned row kinds survived", "poisoned_row_kinds_survived"),
           ("requests of a cached rerun on a read-only cache", "read_only_rerun_requests")]


if __name__ == "__main__":
    arguments = sys.argv[1:]
    summary = finite(main(arguments))
    if "--json" not in arguments:
        for label, key in SUMMARY:
            print(f"{label:45s} {summary[key]}" + (f" / {summary['texts_total']}" if key == "texts_completed" else ""))
    print(json.dumps(summary, allow_nan=False))
    unmeasured = [key for _, key in SUMMARY if summary[key] is None]
    if unmeasured:
        log(f"not measured (see the JSON for why): {', '.join(unmeasured)}")
        sys.exit(1)
