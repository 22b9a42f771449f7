"""Processes sharing one cache directory pay for each request once (claims in ResponseCache)."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from blackbox_mia.backends.api.http.cache.responses import ResponseCache
from blackbox_mia.backends.api.http.cache.keys import request_key
from blackbox_mia.backends.api.http.cache.claims import CLAIM_TTL_S, ClaimTable

from ..helpers_client import KEY, MODEL, completion_answer

ROOT = Path(__file__).resolve().parents[2]
N_REQUESTS = 200


class CountingServer(ThreadingHTTPServer):
    """/v1/completions answers (see ``completion_answer``) after ``delay_s``, counting each
    distinct request body in ``seen``."""

    daemon_threads = True
    request_queue_size = 128  # 2 x 16 connections at once must not overflow the listen backlog

    def __init__(self, delay_s: float):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.delay_s = delay_s
        self.seen: Counter = Counter()
        self.lock = threading.Lock()
        self.base_url = f"http://127.0.0.1:{self.server_address[1]}/v1"


class _Handler(BaseHTTPRequestHandler):
    server: CountingServer

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with self.server.lock:
            self.server.seen[json.dumps(body, sort_keys=True)] += 1
        time.sleep(self.server.delay_s)
        data = json.dumps(completion_answer(body)).encode("utf-8")
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def server():
    httpd = CountingServer(delay_s=0.02)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


# Runs in a child process: waits for "go" on stdin, sends every request at concurrency 16, prints
# the client's usage as JSON.
WORKER = """
import asyncio, json, sys
from blackbox_mia.backends.api.http.cache.responses import ResponseCache
from blackbox_mia.backends.api.http.client import ApiClient, ApiConfig

base_url, cache_dir, key, model, n = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])

async def main():
    config = ApiConfig(base_url=base_url, model=model, api_key=key, concurrency=16, max_retries=2,
                       backoff_base_s=0.01)
    client = ApiClient(config, cache=ResponseCache(cache_dir))
    try:
        results = await asyncio.gather(*(client.complete([i, i + 1], logprobs=1) for i in range(n)))
    finally:
        await client.close()
    assert all(r["tokens"][0]["logprob"] == -0.5 for r in results)
    return client.usage.to_dict()

print("ready", flush=True)
sys.stdin.readline()
print(json.dumps(asyncio.run(main())), flush=True)
"""


def _python(*args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-c", *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, cwd=ROOT, env=env)


def test_two_processes_on_one_cache_pay_for_each_request_once(server, tmp_path):
    cache_dir = str(tmp_path / "responses")
    workers = [_python(WORKER, server.base_url, cache_dir, KEY, MODEL, str(N_REQUESTS)) for _ in range(2)]
    try:
        for worker in workers:
            assert worker.stdout.readline().strip() == "ready"
        for worker in workers:  # start both at once: the same 200 requests race
            worker.stdin.write("go\n")
            worker.stdin.flush()
        usages = [json.loads(worker.stdout.readline()) for worker in workers]
    finally:
        for worker in workers:
            worker.kill()
            worker.wait()
    assert len(server.seen) == N_REQUESTS and set(server.seen.values()) == {1}  # each request paid once
    assert sum(u["requests"] for u in usages) == N_REQUESTS
    assert [u["requests"] + u["cache_hits"] for u in usages] == [N_REQUESTS, N_REQUESTS]
    with ResponseCache(cache_dir) as cache:
        assert len(cache) == N_REQUESTS


HOLDER = """
import sys, time
from blackbox_mia.backends.api.http.cache.responses import ResponseCache
cache = ResponseCache(sys.argv[1])
assert cache.claim(sys.argv[2])
print("held", flush=True)
time.sleep(600)
"""


def test_claim_of_a_killed_process_does_not_block_the_next_one(server, tmp_path):
    import asyncio

    from blackbox_mia.backends.api.http.client import ApiClient, ApiConfig

    cache_dir = str(tmp_path / "responses")
    payload = {"prompt": [7, 8], "max_tokens": 1, "temperature": 0.0, "logprobs": 1}
    key = request_key(server.base_url, MODEL, "completions", payload)
    holder = _python(HOLDER, cache_dir, key)
    try:
        assert holder.stdout.readline().strip() == "held"
    finally:
        holder.kill()  # SIGKILL: no chance to release the claim
        holder.wait()

    async def rerun() -> dict:
        config = ApiConfig(base_url=server.base_url, model=MODEL, api_key=KEY, backoff_base_s=0.01)
        async with ApiClient(config, cache=ResponseCache(cache_dir)) as client:
            return await client.complete([7, 8], logprobs=1)

    start = time.monotonic()
    result = asyncio.run(rerun())
    # not the claim's expiry: the rerun takes well under a second, waiting for the expiry a minute
    assert time.monotonic() - start < CLAIM_TTL_S / 4
    assert result["cached"] is False and result["tokens"][0]["logprob"] == -0.5
    assert sum(server.seen.values()) == 1


RELEASER = """
import sys, time
from blackbox_mia.backends.api.http.cache.responses import ResponseCache
cache = ResponseCache(sys.argv[1])
assert cache.claim(sys.argv[2])
print("held", flush=True)
time.sleep(0.5)
cache.release(sys.argv[2])  # gives up without an answer (its request failed)
cache.close()
"""


def test_waiter_asks_itself_when_a_live_holder_releases_without_an_answer(server, tmp_path):
    import asyncio

    from blackbox_mia.backends.api.http.client import ApiClient, ApiConfig

    cache_dir = str(tmp_path / "responses")
    payload = {"prompt": [7, 8], "max_tokens": 1, "temperature": 0.0, "logprobs": 1}
    key = request_key(server.base_url, MODEL, "completions", payload)
    holder = _python(RELEASER, cache_dir, key)

    async def ask() -> dict:
        config = ApiConfig(base_url=server.base_url, model=MODEL, api_key=KEY, backoff_base_s=0.01)
        async with ApiClient(config, cache=ResponseCache(cache_dir)) as client:
            return await client.complete([7, 8], logprobs=1)

    try:
        assert holder.stdout.readline().strip() == "held"
        start = time.monotonic()
        result = asyncio.run(ask())
        waited = time.monotonic() - start
    finally:
        holder.kill()
        holder.wait()
    # it waited for the live holder (0.5 s), then asked itself: not for the claim's expiry (a minute)
    assert 0.2 < waited < CLAIM_TTL_S / 4
    assert result["cached"] is False and sum(server.seen.values()) == 1


# -- claims, one process ------------------------------------------------------------------------

KEY_A = request_key("http://h/v1", "m", "completions", {"prompt": [1]})
KEY_B = request_key("http://h/v1", "m", "completions", {"prompt": [2]})


def _plant(directory: Path, holder: dict, ttl_s: float = 60.0) -> None:
    """A claim on KEY_A by ``holder`` ({pid, host}), written as another process would."""
    table = ClaimTable(directory)
    table.refresh("nobody")  # creates the table
    table.close()
    with sqlite3.connect(table.path) as connection:
        connection.execute("INSERT INTO claims VALUES (?, ?, ?, ?, ?)",
                           (KEY_A, holder.get("pid"), holder.get("host"), "t", time.time() + ttl_s))


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # reaped: the pid names no process now
    return child.pid


def test_claim_is_exclusive_until_released(tmp_path):
    with ResponseCache(tmp_path) as first, ResponseCache(tmp_path) as second:
        assert first.claim(KEY_A) and first.held_claims == {KEY_A}
        assert not second.claim(KEY_A)  # a live holder (this very process)
        assert len(first) == 0  # claims are not responses
        second.release(KEY_A)  # not its claim: nothing happens
        assert not second.claim(KEY_A)
        first.release(KEY_A)
        assert first.held_claims == frozenset() and second.claim(KEY_A)


def test_expired_claim_is_taken_over_and_its_old_holder_cannot_release_it(tmp_path):
    with ResponseCache(tmp_path) as first, ResponseCache(tmp_path) as second:
        assert first.claim(KEY_A, ttl_s=0.05)
        time.sleep(0.1)
        assert second.claim(KEY_A)
        assert first.refresh_claims() == 0 and first.held_claims == frozenset()  # lost it
        first.release(KEY_A)
        assert not first.claim(KEY_A)  # the new holder's claim stands


def test_refreshed_claim_outlives_its_first_expiry(tmp_path):
    with ResponseCache(tmp_path) as first, ResponseCache(tmp_path) as second:
        assert first.claim(KEY_A, ttl_s=0.3)
        time.sleep(0.2)
        assert first.refresh_claims(ttl_s=0.3) == 1
        time.sleep(0.2)  # 0.4 s after the claim: expired without the refresh
        assert not second.claim(KEY_A)


@pytest.mark.parametrize("holder, free", [
    ({"pid": "dead", "host": socket.gethostname(), "token": "t", "time": 0}, True),  # replaced below
    ({"pid": os.getpid(), "host": socket.gethostname(), "token": "t", "time": 0}, False),
    ({"pid": 1, "host": "another-host.example", "token": "t", "time": 0}, False),  # cannot check: wait
    ({"garbage": True}, True),
], ids=["dead-pid", "live-pid", "other-host", "not-a-claim"])
def test_claim_of_a_dead_process_on_this_host_is_taken_over_at_once(tmp_path, holder, free):
    if holder.get("pid") == "dead":
        holder = {**holder, "pid": _dead_pid()}
    _plant(tmp_path, holder)
    with ResponseCache(tmp_path) as cache:
        assert cache.claim(KEY_A) is free


def test_claim_of_another_host_lasts_until_it_expires(tmp_path):
    ttl_s = 1.0  # long enough for opening the cache on a loaded machine
    _plant(tmp_path, {"pid": 1, "host": "another-host.example", "token": "t", "time": 0}, ttl_s=ttl_s)
    planted = time.monotonic()
    with ResponseCache(tmp_path) as cache:
        assert not cache.claim(KEY_A)
        time.sleep(max(0.0, planted + ttl_s + 0.05 - time.monotonic()))
        assert cache.claim(KEY_A)


def test_zombie_holder_counts_as_dead(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 60  # python -c pass exits within a second or two, even under load
    while Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
        assert time.monotonic() < deadline
        time.sleep(0.01)  # exited, not yet reaped: os.kill(pid, 0) still succeeds
    try:
        _plant(tmp_path, {"pid": child.pid, "host": socket.gethostname(), "token": "t", "time": 0})
        with ResponseCache(tmp_path) as cache:
            assert cache.claim(KEY_A)
    finally:
        child.wait()


def test_claims_in_one_transaction_and_released_with_the_answer(tmp_path):
    with ResponseCache(tmp_path) as first, ResponseCache(tmp_path) as second:
        assert first.claim(KEY_A)
        assert second.claim_many([KEY_A, KEY_B]) == [False, True]  # A: a live holder's
        assert second.held_claims == {KEY_B}
        second.put_soon(KEY_B, {"answer": 1}, release=True).result(timeout=10)
        assert second.held_claims == frozenset()
        assert first.get(KEY_B) == {"answer": 1}
        with sqlite3.connect(ClaimTable(tmp_path).path) as connection:  # released by the writer, marked answered
            assert connection.execute("SELECT key FROM claims").fetchall() == [(KEY_A,)]
            assert connection.execute("SELECT key FROM answered").fetchall() == [(KEY_B,)]
        assert not first.claim(KEY_B)  # answered: read the cache, not the API
        first.delete(KEY_B)  # the answer is gone, and its mark with it
        assert first.claim(KEY_B)


def test_a_request_answered_between_a_cache_miss_and_its_claim_is_read_not_paid_again(server, tmp_path,
                                                                                       monkeypatch):
    from blackbox_mia.backends.api.http.client import ApiClient, ApiConfig

    payload = {"prompt": [1, 2], "max_tokens": 1, "temperature": 0.0, "logprobs": 1}
    answer = completion_answer(payload)
    cache, other = ResponseCache(tmp_path), ResponseCache(tmp_path)
    missed = cache.get

    def get(key):  # the client's miss; then another process answers before the client claims
        found = missed(key)
        if found is None and other.claim(key):
            other.put_soon(key, answer, release=True).result(timeout=10)
        return found

    monkeypatch.setattr(cache, "get", get)

    async def main():
        client = ApiClient(ApiConfig(base_url=server.base_url, model=MODEL, api_key=KEY), cache=cache)
        try:
            return await client.complete([1, 2], logprobs=1), client.usage
        finally:
            await client.close()

    try:
        result, usage = asyncio.run(main())
    finally:
        other.close()
    assert not server.seen and usage.requests == 0 and usage.cache_hits == 1
    assert result["cached"] and result["tokens"][0]["logprob"] == answer["choices"][0]["logprobs"]["token_logprobs"][0]


def test_claims_locked_by_another_process_too_long_give_a_clear_error(tmp_path, monkeypatch):
    from blackbox_mia.backends.api.http.cache import claims as claims_module
    from blackbox_mia.types import BlackboxMIAError

    monkeypatch.setattr(claims_module, "BUSY_TIMEOUT_S", 0.1)
    _plant(tmp_path, {"pid": 1, "host": "another-host.example"})  # the table exists
    other = sqlite3.connect(ClaimTable(tmp_path).path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process in a write transaction
    try:
        with ResponseCache(tmp_path) as cache, pytest.raises(BlackboxMIAError, match="stayed locked"):
            cache.claim(KEY_B)
    finally:
        other.execute("ROLLBACK")
        other.close()
