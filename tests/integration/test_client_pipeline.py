"""The client pipeline: every text of a command in one stream, records in input order, a clean
Ctrl-C, and a loop that leaves no pending task behind."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from blackbox_mia.backends.base import LOGPROBS, Backend
from blackbox_mia.backends.loop import LoopThread
from blackbox_mia.cli.probe import probe_texts
from blackbox_mia.datasets import Item
from blackbox_mia.emulator import ServerConfig, serve_in_background
from blackbox_mia.runner import score_items
from blackbox_mia.scorers import parse_scorers
from blackbox_mia.types import Provenance, TokenLogprobs


class Reversed(Backend):
    """Records each call's texts; finishes them last first."""

    features = frozenset({LOGPROBS})

    def __init__(self):
        super().__init__()
        self.calls: list[list[str]] = []

    async def _alogprobs(self, texts, progress, on_done, vocab_stats=None):
        self.calls.append(list(texts))
        out = [TokenLogprobs(np.arange(len(t)), list(t), [-0.5] * len(t), (0,), Provenance("f", "f", "x", True))
               for t in texts]
        for i in reversed(range(len(texts))):
            on_done(i, out[i])
        return out

    def describe(self):
        return {"backend": "reversed"}


def test_probe_sends_every_text_in_one_stream_and_prints_in_input_order(capsys):
    backend = Reversed()
    texts = [(f"t{i}", f"Text number {i}") for i in range(5)]
    try:
        probe_texts(texts, parse_scorers("loss,lowercase"), {"target": backend}, None, json_out=True)
    finally:
        backend.close()
    assert len(backend.calls) == 1  # one stream: texts and their lowercased forms together
    assert set(backend.calls[0]) == {t for _, t in texts} | {t.lower() for _, t in texts}
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["id"] for r in records] == ["t0", "t1", "t2", "t3", "t4"]  # done last first, printed in order
    assert all(r["scores"]["loss"] == -0.5 and r["usage"] == {} for r in records)


def test_score_items_sends_a_whole_dataset_in_one_stream():
    backend = Reversed()
    items = [Item(f"i{k}", f"item {k}", None) for k in range(300)]  # more than the old 64-item chunks
    try:
        rows = score_items(items, parse_scorers("loss"), {"target": backend}, None, progress=False)
    finally:
        backend.close()
    assert len(backend.calls) == 1 and len(backend.calls[0]) == 300 and len(rows) == 300


def test_close_cancels_what_is_left_on_the_loop(caplog):
    thread = LoopThread("test-loop")

    async def leave_tasks_behind() -> None:
        for _ in range(20):
            asyncio.ensure_future(asyncio.sleep(3600))

    thread.call(leave_tasks_behind())
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        thread.close()
        gc.collect()
    assert "Task was destroyed" not in caplog.text


def test_ctrl_c_in_a_call_settles_then_cancels_then_resumes():
    events = []

    async def settle() -> None:
        events.append("settle")
        await asyncio.sleep(0.05)

    async def resume() -> None:
        events.append("resume")

    thread = LoopThread("test-loop", settle=settle, resume=resume)
    started = threading.Event()

    async def work() -> None:
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            events.append("cancelled")
            raise

    def interrupt() -> None:
        # Ctrl-C once the call is under way (a fixed delay raced a loaded machine: the signal came
        # before the call began, or inside its setup, and the test failed or hung in close())
        started.wait(timeout=60)
        time.sleep(0.05)
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # Python's own: Ctrl-C raises KeyboardInterrupt
    threading.Thread(target=interrupt).start()
    try:
        with pytest.raises(KeyboardInterrupt):
            thread.call(work())
    finally:
        thread.close()
        signal.signal(signal.SIGINT, previous)
    assert events == ["settle", "cancelled", "resume"]


def test_backend_loop_is_uvloop_where_installed():
    uvloop = pytest.importorskip("uvloop")
    thread = LoopThread("test-loop")
    try:
        assert isinstance(thread.loop, uvloop.Loop)
        assert thread.call(asyncio.sleep(0, result=7)) == 7
    finally:
        thread.close()


def interrupted_score(model_dir: Path, tmp_path: Path, second: bool) -> tuple[int, str]:
    """``bbmia score`` of 30 GSM8K questions against ``bbmia serve``, sent Ctrl-C once its scoring
    answers are being cached (and, with ``second``, again 0.3 s later); ``(exit status, stderr)``."""
    bbmia = str(Path(sys.executable).with_name("bbmia"))
    with serve_in_background(ServerConfig(str(model_dir), echo=False)) as url:
        cmd = [bbmia, "score", "gsm8k", "--limit", "30", "--scorers", "loss", "--base-url", url, "--model",
               str(model_dir), "--tokenizer", str(model_dir), "--strategy", "forced", "--concurrency", "16",
               "--context-tokens", "64", "--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path / "s.jsonl"),
               "--yes"]
        env = {**os.environ, "OPENAI_API_KEY": "none", "OMP_NUM_THREADS": "1"}
        process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        deadline = time.monotonic() + 120
        responses = tmp_path / "cache" / "responses" / "cache.db"
        while time.monotonic() < deadline and process.poll() is None and not (
            responses.exists() and responses.stat().st_size > 32_000  # answers of the scoring are being cached
        ):
            time.sleep(0.1)
        process.send_signal(signal.SIGINT)
        if second:
            time.sleep(0.3)
            process.send_signal(signal.SIGINT)  # an impatient second Ctrl-C while the first unwinds: exit at once
        _, err = process.communicate(timeout=60)
    return process.returncode, err.decode()


def test_ctrl_c_in_a_black_box_run_is_one_clean_line(tiny_model_dir, tmp_path):
    code, text = interrupted_score(tiny_model_dir, tmp_path, second=True)
    assert code == 130, text[-2000:]
    # the first line when the run had unwound before the second Ctrl-C, else the second
    assert ("interrupted: finished work is saved" in text) != ("interrupted again: exiting at once" in text), text
    assert "Task was destroyed" not in text and "Traceback" not in text and "Exception ignored" not in text


def test_ctrl_c_prints_what_the_run_spent(tiny_model_dir, tmp_path):
    code, text = interrupted_score(tiny_model_dir, tmp_path, second=False)
    assert code == 130, text[-2000:]
    spent = re.search(r"usage: (\d+) requests \(\d+ from the cache\), ([\d,]+) prompt \+ [\d,]+ completion tokens", text)
    assert spent is not None and int(spent[1]) > 0 and int(spent[2].replace(",", "")) > 0, text[-2000:]
    assert text.index("usage: ") < text.index("interrupted: finished work is saved")
    assert "Traceback" not in text


def test_transport_url_and_typed_errors():
    from blackbox_mia.backends.api.http.errors import (APIStatusError, Fault, InternalServerError, RateLimitError,
                                                       status_error)
    from blackbox_mia.backends.api.http.faults import retry_after_s
    from blackbox_mia.backends.api.http.transport import Transport

    transport = Transport("https://user:pw@api.example.com:8443/v1/?api-version=2", "k", 5.0)
    assert transport.url("prompt") == "https://api.example.com:8443/v1/completions?api-version=2"
    assert transport.url("messages") == "https://api.example.com:8443/v1/chat/completions?api-version=2"
    body = b'{"error": {"message": "slow down", "code": "rate_limit_exceeded"}}'
    error = status_error(429, {"Retry-After": "3"}, body)
    assert type(error) is RateLimitError and error.status_code == 429 and error.code == "rate_limit_exceeded"
    assert (error.fault, error.detail, error.body, retry_after_s(error)) == (Fault.TRANSIENT, "slow down", body, 3.0)
    busy = status_error(503, {}, b"busy")
    assert type(busy) is InternalServerError and busy.detail == "busy" and busy.fault is Fault.TRANSIENT
    assert status_error(501, {}, b"{}").fault is Fault.FINAL
    teapot = status_error(418, {}, b'{"detail": "short and stout"}')
    assert type(teapot) is APIStatusError and teapot.detail == "short and stout" and teapot.fault is Fault.FINAL


def test_transport_reads_the_proxy_from_the_environment_once(monkeypatch):
    from blackbox_mia.backends.api.http.transport import env_proxy

    for name in ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    assert env_proxy("https://api.example.com/v1/completions") == (None, None)
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    monkeypatch.setenv("NO_PROXY", "localhost,127.0.0.1")
    proxy, _ = env_proxy("https://api.example.com/v1/completions")
    assert str(proxy) == "http://proxy.example:3128"
    assert env_proxy("http://127.0.0.1:8000/v1/completions") == (None, None)  # NO_PROXY
    assert env_proxy("http://api.example.com/v1/completions") == (None, None)  # no HTTP_PROXY
