"""A fault-injecting reverse proxy for OpenAI-compatible endpoints (loopback only).

It sits between a client and an upstream server (typically ``bbmia serve``) and, with
probability ``rate`` per POST request, answers with one of the failures real providers produce
instead of (or on top of) the upstream answer:

===============  =========================================================================  =====
class            what the client gets                                                       paid
===============  =========================================================================  =====
``429``          429 + ``Retry-After: retry_after_s`` + OpenAI rate-limit error JSON         no
``500``          500 + OpenAI error JSON whose message carries a unique error id (the same  no
                 body every time with ``same_5xx_body``)
``502``/``503``  502 / 503 + OpenAI error JSON (the same: unique id unless ``same_5xx_body``) no
``stall``        nothing for ``stall_s`` seconds, then the connection is closed (sooner    no
                 once the client has left)
``drop``         the connection is closed at once, without an answer                       no
``truncated``    the upstream answer, status 200, its JSON body cut in half                 yes
``no_logprobs``  the upstream answer with ``choices[0].logprobs`` set to null               yes
``nan``/``inf``  the upstream answer with ONE log-prob (chosen uniformly among all of them:
                 ``token_logprobs``, ``top_logprobs`` values, chat ``logprob`` fields)
                 written as the bare JSON tokens ``NaN`` / ``-Infinity``                    yes
===============  =========================================================================  =====

"Paid" faults are forwarded upstream (a provider bills them); the others never reach it. A
server error's body carries a unique error id, as OpenAI's do, or (``same_5xx_body``) is the same
every time, as many servers' "Internal Server Error" is: a client must retry both. Which fault a request gets is drawn from an RNG seeded by
(``seed``, the request's arrival index), so a given seed yields the same fault sequence in
every run. Response-altering faults (``truncated``, ``no_logprobs``, ``nan``, ``inf``) only
alter a 200 JSON answer that has what they change; otherwise the upstream answer passes through
unchanged and the fault is not counted as injected. GET requests (``/v1/models``) always pass
through, uncounted.

For resumption and cache-sharing audits the proxy also records which upstream answers reached
the client whole (:attr:`FaultStats.delivered`) and which request bodies were paid for again
after that (:attr:`FaultStats.repaid`), and it can be paused (:meth:`FaultProxy.pause`): nothing
goes upstream and no answer is written back until :meth:`FaultProxy.resume`, so a client can be
killed at a moment when every answer it was given has had time to reach its cache.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import math
import random
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web

from blackbox_mia.emulator.background import run_in_background
from blackbox_mia.emulator.listen import listen
from blackbox_mia.types import BlackboxMIAError

FAULT_CLASSES = ("429", "500", "502", "503", "stall", "drop", "truncated", "no_logprobs", "nan", "inf")
UNPAID_FAULTS = frozenset({"429", "500", "502", "503", "stall", "drop"})  # answered without upstream
LOOPBACK = "127.0.0.1"
UPSTREAM_TIMEOUT_S = 600.0  # longest wait for one upstream answer (s)
PROXY_MAX_BODY_BYTES = 64 * 2**20  # largest request body the proxy reads (the upstream has its own limit)
SHUTDOWN_GRACE_S = 0.5  # how long stop() lets in-flight (e.g. stalled) requests finish (s)
PAUSE_POLL_S = 0.01  # how often a request held by pause() looks whether the proxy was resumed (s)
STALL_POLL_S = 0.05  # how often a stalled request looks whether its client is still there (s)
# Request headers not forwarded (hop-by-hop, or recomputed by the proxy's own client).
HOP_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection", "keep-alive", "upgrade",
                         "te", "trailer", "proxy-authorization", "proxy-connection", "accept-encoding"})
# Response headers not passed back (hop-by-hop, or no longer true once the proxy re-encodes).
DROPPED_RESPONSE_HEADERS = HOP_HEADERS | {"content-encoding", "date", "server"}
SERVER_ERRORS = {
    "500": "The server had an error while processing your request. Sorry about that!",
    "502": "Bad gateway.",
    "503": "The engine is currently overloaded, please try again later.",
}


@dataclass(frozen=True)
class FaultConfig:
    """Configuration of :class:`FaultProxy`.

    Attributes:
        upstream: base URL of the real server, ending in ``/v1`` (``http://127.0.0.1:8000/v1``);
            a request to the proxy's ``/v1/x`` goes to ``upstream``'s ``/v1/x``.
        rate: probability in [0, 1] that a POST request gets a fault.
        classes: the faults to choose from, uniformly, when one is injected (a non-empty subset
            of :data:`FAULT_CLASSES`; repeating a class weights it).
        seed: seed of the per-request fault draws.
        stall_s: how long a ``stall`` holds the request before closing it (s, >= 0).
        retry_after_s: the ``Retry-After`` of a ``429`` (s, >= 0).
        same_5xx_body: every ``500`` / ``502`` / ``503`` of a class answers the same body
            (no error id).
        port: TCP port to bind on 127.0.0.1; 0 picks a free one.

    Raises:
        BlackboxMIAError: an invalid value.
    """

    upstream: str
    rate: float = 0.2
    classes: tuple[str, ...] = FAULT_CLASSES
    seed: int = 0
    stall_s: float = 5.0
    retry_after_s: float = 0.05
    same_5xx_body: bool = False
    port: int = 0

    def __post_init__(self) -> None:
        if not self.upstream.startswith(("http://", "https://")) or not self.upstream.rstrip("/").endswith("/v1"):
            raise BlackboxMIAError(f"upstream must be an http(s) base URL ending in /v1, got {self.upstream!r}")
        if not 0.0 <= self.rate <= 1.0:
            raise BlackboxMIAError(f"rate must be a probability in [0, 1], got {self.rate}")
        unknown = sorted(set(self.classes) - set(FAULT_CLASSES))
        if not self.classes or unknown:
            raise BlackboxMIAError(f"classes must be a non-empty subset of {FAULT_CLASSES}; unknown: {unknown}")
        if self.stall_s < 0 or self.retry_after_s < 0:
            raise BlackboxMIAError("stall_s and retry_after_s must be >= 0")


@dataclass
class FaultStats:
    """What the proxy did (all counts since start; read them from any thread).

    Attributes:
        requests: POST requests received.
        upstream_requests: POST requests forwarded upstream and answered there (= paid).
        by_body: sha256 hex of a request body -> times it was forwarded upstream.
        injected: fault class -> times it was applied.
        outcomes: per POST request, in arrival order, the class drawn or ``"ok"``.
        upstream_failures: forwards that got no answer from upstream (answered 502, not counted
            in ``upstream_requests`` nor ``injected``).
        answered: body hash -> times upstream answered it with a 200 (what a provider bills; a
            refusal such as a 400 is forwarded and counted in ``by_body``, but not here).
        delivered: body hash -> times its upstream 200 answer, unaltered, was completely written
            back to the client (an answer the client gave up on, e.g. after its timeout, or
            one a fault altered, is not delivered).
        repaid: body hash -> times it was sent upstream (and paid) again after its answer had
            been delivered at least once.
    """

    requests: int = 0
    upstream_requests: int = 0
    by_body: Counter = field(default_factory=Counter)
    injected: Counter = field(default_factory=Counter)
    outcomes: list[str] = field(default_factory=list)
    upstream_failures: int = 0
    answered: Counter = field(default_factory=Counter)
    delivered: Counter = field(default_factory=Counter)
    repaid: Counter = field(default_factory=Counter)


def body_hash(body: bytes) -> str:
    """The key of :attr:`FaultStats.by_body`: sha256 hex digest of a raw request body."""
    return hashlib.sha256(body).hexdigest()


def _request_rng(config: FaultConfig, index: int) -> random.Random:
    """The RNG of the ``index``-th POST request (a string seed is hashed with sha512: stable
    across runs and Python processes)."""
    return random.Random(f"bbmia-fault:{config.seed}:{index}")


def _draw(config: FaultConfig, rng: random.Random) -> str | None:
    if rng.random() >= config.rate:
        return None
    return config.classes[rng.randrange(len(config.classes))]


def draw_fault(config: FaultConfig, index: int) -> str | None:
    """The fault the ``index``-th POST request (0-based, arrival order) gets, or ``None``."""
    return _draw(config, _request_rng(config, index))


def error_body(fault: str, rng: random.Random, retry_after_s: float, same_5xx_body: bool = False) -> dict:
    """OpenAI-style error JSON for an unpaid HTTP-status fault; 5xx ones carry a random error id,
    so no two bodies repeat, unless ``same_5xx_body`` (then one body per class)."""
    if fault == "429":
        return {"error": {"message": f"Rate limit reached for requests. Please try again in {retry_after_s:g}s.",
                          "type": "requests", "param": None, "code": "rate_limit_exceeded"}}
    error_id = "" if same_5xx_body else f" (error id {rng.getrandbits(128):032x})"
    return {"error": {"message": SERVER_ERRORS[fault] + error_id, "type": "server_error", "param": None, "code": None}}


def _logprob_slots(choice: dict) -> list[tuple[object, object]]:
    """(container, key) of every numeric log-prob in one choice (completions or chat)."""
    logprobs = choice.get("logprobs")
    slots: list[tuple[object, object]] = []
    if not isinstance(logprobs, dict):
        return slots
    values = logprobs.get("token_logprobs")
    if isinstance(values, list):  # completions
        slots += [(values, j) for j, v in enumerate(values) if isinstance(v, (int, float))]
        for entry in logprobs.get("top_logprobs") or []:
            if isinstance(entry, dict):
                slots += [(entry, k) for k, v in entry.items() if isinstance(v, (int, float))]
    for entry in logprobs.get("content") or []:  # chat
        if isinstance(entry, dict):
            items = [entry] + [t for t in entry.get("top_logprobs") or [] if isinstance(t, dict)]
            slots += [(item, "logprob") for item in items if isinstance(item.get("logprob"), (int, float))]
    return slots


def alter_response(fault: str, raw: bytes, rng: random.Random) -> bytes | None:
    """The body a paid fault turns a 200 upstream body ``raw`` into, or ``None`` when it does
    not apply (not JSON, no choices, no log-prob to replace)."""
    if fault == "truncated":
        return raw[: len(raw) // 2]
    try:
        payload = json.loads(raw)
        choice = payload["choices"][0]
    except (ValueError, KeyError, IndexError, TypeError):
        return None
    if not isinstance(choice, dict):
        return None
    if fault == "no_logprobs":
        choice["logprobs"] = None
    else:
        slots = _logprob_slots(choice)
        if not slots:
            return None
        container, key = slots[rng.randrange(len(slots))]
        container[key] = math.nan if fault == "nan" else -math.inf
    return json.dumps(payload).encode()  # allow_nan: bare NaN / -Infinity tokens


class FaultProxy:
    """An aiohttp reverse proxy on 127.0.0.1 that injects faults (see the module docstring).

    Args:
        config: a :class:`FaultConfig`.

    Attributes:
        config: the configuration.
        stats: a :class:`FaultStats`, updated as requests arrive.
        base_url: ``http://127.0.0.1:PORT/v1`` once started, else ``None``.
    """

    def __init__(self, config: FaultConfig):
        self.config = config
        self.stats = FaultStats()
        self.base_url: str | None = None
        self._root = config.upstream.rstrip("/").removesuffix("/v1")
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self._open = threading.Event()  # cleared while paused
        self._open.set()

    def pause(self) -> None:
        """Hold every request: none is forwarded upstream or answered, and no upstream answer is
        written back, until :meth:`resume` (callable from any thread). A request whose client
        has gone when the proxy resumes is dropped without being forwarded (not paid)."""
        self._open.clear()

    def resume(self) -> None:
        """End :meth:`pause` (callable from any thread)."""
        self._open.set()

    async def _wait_open(self) -> None:
        while not self._open.is_set():
            await asyncio.sleep(PAUSE_POLL_S)

    async def start(self) -> str:
        """Bind and return the base URL ``http://127.0.0.1:PORT/v1``.

        Raises:
            BlackboxMIAError: the port cannot be bound.
        """
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=UPSTREAM_TIMEOUT_S),
            connector=aiohttp.TCPConnector(limit=0), auto_decompress=True)
        app = web.Application(client_max_size=PROXY_MAX_BODY_BYTES)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner, self.base_url = await listen(app, LOOPBACK, self.config.port, shutdown_timeout=SHUTDOWN_GRACE_S)
        return self.base_url

    async def stop(self) -> None:
        """Stop serving (stalled requests are cut after :data:`SHUTDOWN_GRACE_S`). Idempotent."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        if request.method != "POST":
            return await self._forward(request, body, paid=False)
        index = self.stats.requests
        self.stats.requests += 1
        rng = _request_rng(self.config, index)
        fault = _draw(self.config, rng)
        self.stats.outcomes.append(fault or "ok")
        await self._wait_open()
        if _gone(request):  # the client left while the proxy was paused
            return web.Response(status=204)  # never sent
        if fault in UNPAID_FAULTS:
            self.stats.injected[fault] += 1
            return await self._unpaid(request, fault, rng)
        response = await self._forward(request, body, paid=True)
        altered = None if fault is None or response.status != 200 else alter_response(fault, response.body, rng)
        if altered is not None:
            self.stats.injected[fault] += 1
            response = web.Response(status=200, body=altered, content_type="application/json")
        if await self._write(request, response) and altered is None and response.status == 200:
            self.stats.delivered[body_hash(body)] += 1
        return response

    async def _write(self, request: web.Request, response: web.StreamResponse) -> bool:
        """Send ``response`` now (once the proxy is not paused); whether all of it was written to
        the client's connection."""
        await self._wait_open()
        if _gone(request):
            return False
        try:
            await response.prepare(request)
            await response.write_eof()
        except ConnectionError:
            return False
        return True

    async def _unpaid(self, request: web.Request, fault: str, rng: random.Random) -> web.StreamResponse:
        if fault == "stall":  # held for stall_s, or until the client gives up
            end = asyncio.get_running_loop().time() + self.config.stall_s
            while not _gone(request) and (left := end - asyncio.get_running_loop().time()) > 0:
                await asyncio.sleep(min(left, STALL_POLL_S))
        if fault in ("stall", "drop"):
            return _drop(request)
        headers = {"Retry-After": f"{self.config.retry_after_s:g}"} if fault == "429" else None
        return web.json_response(error_body(fault, rng, self.config.retry_after_s, self.config.same_5xx_body),
                                 status=int(fault),
                                 headers=headers)

    async def _forward(self, request: web.Request, body: bytes, paid: bool) -> web.Response:
        """Send the request upstream; the answer as a response (502 JSON when none came)."""
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_HEADERS}
        digest = body_hash(body)
        after_delivery = self.stats.delivered[digest] > 0  # as it stands when the request goes upstream
        try:
            async with self._session.request(request.method, self._root + request.path_qs, data=body,
                                             headers=headers) as upstream:
                raw = await upstream.read()
                status = upstream.status
                kept = {k: v for k, v in upstream.headers.items() if k.lower() not in DROPPED_RESPONSE_HEADERS}
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            self.stats.upstream_failures += 1
            return web.json_response({"error": {"message": f"upstream unreachable: {type(exc).__name__}",
                                                "type": "server_error", "param": None, "code": None}}, status=502)
        if paid:
            self.stats.upstream_requests += 1
            self.stats.by_body[digest] += 1
            if status == 200:
                self.stats.answered[digest] += 1
            if after_delivery:
                self.stats.repaid[digest] += 1
        return web.Response(status=status, body=raw, headers=kept)


def _gone(request: web.Request) -> bool:
    """Whether the client has closed its connection."""
    return request.transport is None or request.transport.is_closing()


def _drop(request: web.Request) -> web.Response:
    """Close the client's connection without an answer (the response returned is never sent)."""
    if request.transport is not None:
        request.transport.abort()
    return web.Response(status=204)


@contextlib.contextmanager
def proxy_in_background(config: FaultConfig) -> Iterator[FaultProxy]:
    """Run a :class:`FaultProxy` in a daemon thread with its own event loop.

    Yields the started proxy (``proxy.base_url``, ``proxy.stats``) and stops it on exit.

    Raises:
        BlackboxMIAError: the port cannot be bound.
    """
    proxy = FaultProxy(config)
    with run_in_background(proxy, "bbmia-fault-proxy"):
        yield proxy
