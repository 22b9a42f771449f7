"""Client throughput through the CLI against a fixed-latency server: the issue-12 concurrency lines.

How it measures (all on loopback, nothing downloaded):

1. builds a tiny GPT-2 (random weights, BPE tokenizer trained on GSM8K questions) and serves it
   with the emulator (``bbmia serve``'s server, in this process);
2. starts a replaying proxy in front of it and runs ``bbmia score`` once through the proxy
   (the warm pass, by the client being measured): every answer the scoring needs, and the
   capability probe's, is kept in memory and on disk (``answers.json`` in the workdir, reused by
   later runs: only requests never seen before reach the model);
3. for each concurrency, runs ``bbmia score`` again as a subprocess with a fresh response cache
   (the saved capability probe only), ``--strategy forced`` (one request per token): the proxy
   answers every request from memory after exactly ``latency_s`` seconds, so the server costs
   next to no CPU and the ideal request rate is ``concurrency / latency_s``.

Per run: ``ideal_ratio`` = achieved request rate (requests / seconds from the first request's
arrival to the last answer) / ideal rate; ``cpu_ms_per_request`` = the CLI process's CPU time
(user + system, from /proc) over that same window / requests (startup and imports excluded;
``cpu_ms_per_request_total`` includes them); ``max_in_flight``, ``mean_in_flight`` as the
server saw them.

Usage: python -m benchmarks.bench_throughput [--texts 100] [--concurrency 64,256] [--latency-ms 200] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
from aiohttp import web

from blackbox_mia.emulator import ServerConfig, serve_in_background
from blackbox_mia.emulator.background import run_in_background

MODEL_NAME = "bench-tiny"
DEFAULT_LATENCY_S = 0.2  # fixed server latency (seconds) of the measured runs
DEFAULT_TEXTS = 100  # GSM8K questions per run: 16,432 requests with the bench model, about 13 s at 256 in
# flight (at 30 questions, 5 s: opening 256 connections and draining the last answers weigh on the rate)
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")  # /proc CPU times are in these units per second


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (all its threads) so far, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime


def build_model(directory: Path, n_texts: int) -> Path:
    """A tiny random GPT-2 (2 layers, 32 dims, context 1024 tokens, BPE vocabulary of 4096)
    whose tokenizer is trained on the first GSM8K questions; reused when ``directory`` holds it."""
    from blackbox_mia.canary.model import build_gpt2, save_model_dir, train_tokenizer
    from blackbox_mia.canary.dataset import load_items

    if (directory / "config.json").exists():
        return directory
    items, _ = load_items("gsm8k:train", max(2000, n_texts), None)
    tokenizer = train_tokenizer([it.text for it in items], vocab_size=4096)
    model = build_gpt2(len(tokenizer), n_layer=2, n_embd=32, n_head=2, n_positions=1024, seed=0)
    return save_model_dir(directory, model, tokenizer)


class ReplayProxy:
    """Forwards requests to ``upstream`` while recording, then answers recorded requests from
    memory after exactly ``latency_s`` seconds (unrecorded ones are forwarded and counted).

    Attributes:
        latency_s: delay of a replayed answer (seconds); 0 while recording.
        pid: the measured client process (its CPU is read at the first arrival and each answer).
    """

    def __init__(self, upstream: str):
        self.upstream = upstream.rstrip("/")
        self.answers: dict[str, tuple[int, bytes]] = {}
        self.latency_s = 0.0
        self.pid: int | None = None
        self.reset()

    def reset(self) -> None:
        self.requests = self.misses = self.in_flight = self.max_in_flight = 0
        self.first = self.last = None  # (monotonic time, client CPU seconds, this process's CPU seconds)
        self._busy_s = 0.0  # integral of in-flight requests over time (request-seconds)

    def _sample(self) -> tuple[float, float | None, float]:
        cpu = None
        if self.pid is not None:
            try:
                cpu = process_cpu_s(self.pid)
            except (OSError, IndexError):
                pass
        return time.monotonic(), cpu, time.process_time()

    async def start(self) -> str:
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600))
        app = web.Application(client_max_size=64 * 2**20)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        port = free_port()
        await web.TCPSite(self._runner, "127.0.0.1", port, backlog=4096).start()
        return f"http://127.0.0.1:{port}/v1"

    async def stop(self) -> None:
        await self._session.close()
        await self._runner.cleanup()

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        key = request.method + request.path + "\n" + _canonical(body)
        if request.method == "POST":
            self.requests += 1
            if self.first is None:
                self.first = self._sample()
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        started = time.monotonic()
        try:
            found = self.answers.get(key)
            if found is not None and self.latency_s:
                await asyncio.sleep(self.latency_s)
            if found is None:
                if self.latency_s and request.method == "POST":
                    self.misses += 1
                headers = {"Content-Type": "application/json"}
                if "Authorization" in request.headers:
                    headers["Authorization"] = request.headers["Authorization"]
                url = self.upstream + request.path.removeprefix("/v1")
                async with self._session.request(request.method, url, data=body, headers=headers) as answer:
                    found = (answer.status, await answer.read())
                self.answers[key] = found
            return web.Response(status=found[0], body=found[1], content_type="application/json")
        finally:
            if request.method == "POST":
                self.in_flight -= 1
                self._busy_s += time.monotonic() - started
                self.last = self._sample()

    def measurement(self) -> dict:
        """What the server saw since :meth:`reset`."""
        (t0, cpu0, own0), (t1, cpu1, own1) = self.first, self.last
        span = max(t1 - t0, 1e-9)
        return {"requests": self.requests, "misses": self.misses, "span_s": span,
                "cpu_s": None if cpu0 is None or cpu1 is None else cpu1 - cpu0, "server_cpu_s": own1 - own0,
                "max_in_flight": self.max_in_flight, "mean_in_flight": self._busy_s / span}


def _canonical(body: bytes) -> str:
    try:
        return json.dumps(json.loads(body), sort_keys=True, separators=(",", ":"))
    except ValueError:
        return body.decode("utf-8", "replace")


def score_command(url: str, model_dir: Path, cache: Path, out: Path, n_texts: int, concurrency: int,
                  command: str = "score") -> list[str]:
    """The ``bbmia`` command line of one run (forced read-out: one request per scored token; ``--yes``:
    past the spend guard, the server is this benchmark's own)."""
    bbmia = str(Path(sys.executable).with_name("bbmia"))
    target = ["--base-url", url, "--model", MODEL_NAME, "--tokenizer", str(model_dir), "--strategy", "forced",
              "--concurrency", str(concurrency), "--cache-dir", str(cache), "--yes"]
    if command == "probe":
        return [bbmia, "probe", "--dataset", "gsm8k", "--limit", str(n_texts), "--scorers", "loss", "--json", *target]
    return [bbmia, "score", "gsm8k", "--limit", str(n_texts), "--scorers", "loss", "--out", str(out),
            "--overwrite", *target]


def run_client(proxy: ReplayProxy, cmd: list[str], client_tree: Path | None = None) -> tuple[float, float]:
    """Run one client command to completion; (wall seconds, total CPU seconds of the process).
    With ``client_tree``, the client imports ``blackbox_mia`` from there (e.g. an older commit)."""
    env = {**os.environ, "OPENAI_API_KEY": "none", "OMP_NUM_THREADS": "1"}
    if client_tree is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(client_tree), env.get("PYTHONPATH")]))
    start = time.perf_counter()
    before = os.times()
    process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    proxy.pid = process.pid
    _, err = process.communicate()
    after = os.times()
    if process.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({process.returncode}): {err.decode()[-2000:]}")
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return time.perf_counter() - start, cpu


def concurrency_lines(
    concurrencies: tuple[int, ...] = (64, 256),
    n_texts: int = DEFAULT_TEXTS,
    latency_s: float = DEFAULT_LATENCY_S,
    command: str = "score",
    workdir: Path | None = None,
    client_tree: Path | None = None,
    profile_dir: Path | None = None,
) -> list[dict]:
    """One measurement per concurrency of ``bbmia score`` (or ``probe``) through the CLI.

    Args:
        concurrencies: client ``--concurrency`` values; the line's ``strategy`` is
            ``concurrency-<c>`` (``probe-concurrency-<c>`` for ``command="probe"``).
        n_texts: GSM8K questions per run (forced read-out: one request per scored token).
        latency_s: fixed latency of every answer (seconds).
        command: ``"score"`` or ``"probe"`` (``probe --dataset``).
        workdir: where the model, the recorded answers and the caches go, reused by later calls
            with the same ``command`` and ``n_texts`` (default: a temporary directory). The
            recording replays only requests identical to the recorded ones.
        client_tree: a directory holding another ``blackbox_mia`` package (e.g. ``git archive``
            of an older commit) that the measured runs import instead of the installed one.
        profile_dir: run the measured clients under cProfile, saving ``<command>-<c>.prof``
            there (the profiler's overhead inflates the CPU figures of those lines).

    Returns:
        Per concurrency: ``{"strategy", "command", "concurrency", "latency_ms", "texts",
        "requests", "wall_s", "span_s", "ideal_ratio", "achieved_rps", "ideal_rps",
        "cpu_ms_per_request", "cpu_ms_per_request_total", "server_cpu_share" (CPU seconds of the
        replaying server's process per second of the span: near 1, the server, not the client,
        limits the rate), "max_in_flight", "mean_in_flight",
        "replay_misses"}`` (seconds, requests per second, CPU milliseconds per request).

    Raises:
        RuntimeError: a client run failed.
    """
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(workdir or tmp) / f"{command}-{n_texts}"
        model_dir = build_model(root / "model", n_texts)
        server = ServerConfig(model=str(model_dir), served_name=MODEL_NAME, port=0)
        with serve_in_background(server) as upstream:
            proxy = ReplayProxy(upstream)
            with run_in_background(proxy, "bench-replay") as url:
                lines = _measure(proxy, url, root, model_dir, concurrencies, n_texts, latency_s, command,
                                 client_tree, profile_dir)
    return lines


def _measure(proxy: ReplayProxy, url: str, root: Path, model_dir: Path, concurrencies: tuple[int, ...],
             n_texts: int, latency_s: float, command: str, client_tree: Path | None,
             profile_dir: Path | None) -> list[dict]:
    """Record once, then time one run per concurrency (see :func:`concurrency_lines`)."""
    recorded, tape = root / "recorded", root / "answers.json"
    if tape.exists():  # answers recorded by earlier runs of this workdir
        proxy.answers = {k: (status, body.encode()) for k, (status, body) in json.loads(tape.read_text()).items()}
    known = len(proxy.answers)
    # the warm pass, by the measured client itself: every request it makes gets recorded (answers
    # from the tape come back at once, the others from the model), and its probe is saved
    shutil.rmtree(recorded, ignore_errors=True)
    run_client(proxy, score_command(url, model_dir, recorded, root / "out.jsonl", n_texts, 64, command), client_tree)
    if len(proxy.answers) > known:
        tape.write_text(json.dumps({k: (status, body.decode()) for k, (status, body) in proxy.answers.items()}))
    lines = []
    for concurrency in concurrencies:
        cache = root / f"cache-{concurrency}"
        shutil.rmtree(cache, ignore_errors=True)
        shutil.copytree(recorded / "capabilities", cache / "capabilities")  # no probe in the timed run
        proxy.reset()
        proxy.latency_s = latency_s
        cmd = score_command(url, model_dir, cache, root / "out.jsonl", n_texts, concurrency, command)
        if profile_dir is not None:
            profile_dir.mkdir(parents=True, exist_ok=True)
            cmd = [sys.executable, "-m", "cProfile", "-o", str(profile_dir / f"{command}-{concurrency}.prof"), *cmd]
        wall, cpu = run_client(proxy, cmd, client_tree)
        proxy.latency_s = 0.0
        seen = proxy.measurement()
        ideal_rps = concurrency / latency_s
        achieved = seen["requests"] / seen["span_s"]
        prefix = "probe-" if command == "probe" else ""
        lines.append({
            "strategy": f"{prefix}concurrency-{concurrency}", "command": command,
            "concurrency": concurrency, "latency_ms": latency_s * 1000, "texts": n_texts,
            "requests": seen["requests"], "wall_s": round(wall, 3), "span_s": round(seen["span_s"], 3),
            "ideal_ratio": round(achieved / ideal_rps, 4), "achieved_rps": round(achieved, 1),
            "ideal_rps": ideal_rps,
            "cpu_ms_per_request": None if seen["cpu_s"] is None
            else round(1000 * seen["cpu_s"] / seen["requests"], 3),
            "cpu_ms_per_request_total": round(1000 * cpu / seen["requests"], 3),
            "server_cpu_share": round(seen["server_cpu_s"] / seen["span_s"], 3),
            "max_in_flight": seen["max_in_flight"], "mean_in_flight": round(seen["mean_in_flight"], 1),
            "replay_misses": seen["misses"], "client": str(client_tree) if client_tree else "installed",
        })
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=DEFAULT_TEXTS)
    parser.add_argument("--concurrency", default="64,256", help="comma-separated client concurrencies")
    parser.add_argument("--latency-ms", type=float, default=DEFAULT_LATENCY_S * 1000)
    parser.add_argument("--command", choices=("score", "probe"), default="score")
    parser.add_argument("--workdir", type=Path, help="keep the model and recorded answers here for later runs")
    parser.add_argument("--client-tree", type=Path, help="measure the blackbox_mia package in this directory")
    parser.add_argument("--profile", type=Path, help="run the measured clients under cProfile, stats saved here")
    parser.add_argument("--json", action="store_true", help="one JSON line per measurement")
    args = parser.parse_args()
    lines = concurrency_lines(tuple(int(c) for c in args.concurrency.split(",")), args.texts,
                              args.latency_ms / 1000, args.command, args.workdir, args.client_tree, args.profile)
    for line in lines:
        if args.json:
            print(json.dumps(line), flush=True)
        else:
            print(f"{line['strategy']}: ideal_ratio {line['ideal_ratio']:.3f}, {line['cpu_ms_per_request']} ms CPU "
                  f"per request ({line['requests']} requests, {line['mean_in_flight']} in flight on average)")


if __name__ == "__main__":
    main()
