"""Disk cache of raw API responses, stored as JSON only (never pickle).

Every paid answer is written to disk as soon as it arrives, keyed by :func:`request_key`, so a
rerun of the same audit makes zero requests. Processes sharing one directory coordinate through
claims (:meth:`ResponseCache.claim`): the one holding a request's claim asks the API, the others
wait for its answer, so no request is paid for twice.

The store is a :class:`diskcache.Cache` (SQLite plus files for large values) with a
:class:`JsonDisk` that writes values as UTF-8 JSON bytes and refuses to read anything else: a
cache directory shared between people or machines must never be a way to run code, and
diskcache's default ``Disk`` (and even its ``JSONDisk``, through the pickle branch of
``Disk.fetch``) unpickles whatever a crafted row holds. Any corruption (a damaged SQLite page, a
row that is not JSON, a truncated value file) is a :class:`BlackboxMIAError` naming the directory
and the way out, never a traceback.

The API key is never part of a key or a value.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import hashlib
import json
import logging
import os
import queue
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Self

import diskcache
from diskcache.core import MODE_BINARY, MODE_RAW, UNKNOWN

from .claims import CLAIM_TTL_S, ClaimTable
from .config import cache_root
from .io import dumps_strict
from .types import BlackboxMIAError

LOG = logging.getLogger(__name__)

MIN_FILE_SIZE = 2**15  # bytes: smaller JSON values live in SQLite, larger ones in files
SQLITE_FULL_SYNC = 2  # PRAGMA synchronous=FULL: a put is on disk before put() returns
GROUP_COMMIT_S = 0.01  # seconds the writer thread waits after a queued row for more to commit with it: a
# commit of one row cost ~0.4 ms of CPU (fsync), of ten ~0.07 ms a row; the API client's senders never wait
# for it (only the request's caller does), so at 64 in flight it saved 0.1-0.15 ms of CPU per request


def unusable(directory: str | os.PathLike, problem: str) -> BlackboxMIAError:
    """The error for a cache directory that cannot be used: names it and the way out."""
    return BlackboxMIAError(
        f"the response cache {directory} cannot be used: {problem}; delete {directory} or use another --cache-dir"
    )


def _open(directory: Path, synchronous: int) -> diskcache.Cache:
    """A :class:`diskcache.Cache` storing JSON only (:class:`JsonDisk`) that never evicts.

    Raises:
        OSError, sqlite3.Error: it cannot be opened.
    """
    return diskcache.Cache(
        str(directory),
        disk=JsonDisk,
        disk_min_file_size=MIN_FILE_SIZE,
        eviction_policy="none",
        cull_limit=0,  # nothing to evict: no expiry query on every write
        sqlite_synchronous=synchronous,
    )


def _busy(exc: sqlite3.OperationalError) -> bool:
    """Whether ``exc`` says the database stayed locked by another connection."""
    return getattr(exc, "sqlite_errorname", None) in ("SQLITE_BUSY", "SQLITE_LOCKED") or "locked" in str(exc)


def _fsync(path: str) -> None:
    """Flush ``path`` (a file or a directory) to disk.

    Raises:
        OSError: it cannot be opened or flushed.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def canonical_json(value: object) -> str:
    """``value`` as canonical JSON text: keys sorted, no whitespace, non-ASCII characters as
    themselves (not ``\\u`` escapes), NaN and infinities refused.

    Raises:
        BlackboxMIAError: ``value`` is not JSON-serialisable.
    """
    try:
        return dumps_strict(value, "request payload", sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except TypeError as exc:
        raise BlackboxMIAError(f"request payload is not JSON-serialisable: {exc}") from exc


def request_key(base_url: str, model: str, endpoint: str, payload: dict | str) -> str:
    """Cache key of one request: sha256 hex digest (64 characters) of its canonical JSON.

    The digest covers ``{"base_url", "model", "endpoint", "payload"}`` serialised by
    :func:`canonical_json`, so dict order never matters.

    Args:
        base_url: the API base URL; a trailing ``/`` is ignored.
        model: the model name sent to the API.
        endpoint: ``"completions"`` or ``"chat"``.
        payload: every request parameter that can change the answer: the prompt (token ids or
            text) or messages, ``max_tokens``, ``temperature``, ``logprobs`` / ``top_logprobs``,
            ``logit_bias``, ``echo``, ``seed`` and any extra body field; or its
            :func:`canonical_json` text (the client serialises a payload once, for the key and
            the request body). It must not hold credentials: the API key is sent as a header and
            is deliberately NOT part of the key (the same request with another key has the same
            answer, and the key must never reach the cache directory).

    Raises:
        BlackboxMIAError: the payload is not JSON-serialisable.
    """
    text = payload if isinstance(payload, str) else canonical_json(payload)
    return hashlib.sha256(f"{_record_head(base_url, endpoint, model)}{text}}}".encode("utf-8")).hexdigest()


@functools.lru_cache(maxsize=64)
def _record_head(base_url: str, endpoint: str, model: str) -> str:
    """The start of :func:`request_key`'s record: canonical JSON of the whole record has its four
    keys in sorted order, so the payload comes last."""
    return (f'{{"base_url":{canonical_json(base_url.rstrip("/"))},"endpoint":{canonical_json(endpoint)},'
            f'"model":{canonical_json(model)},"payload":')


class JsonDisk(diskcache.Disk):
    """A :class:`diskcache.Disk` that stores keys as raw strings and values as UTF-8 JSON bytes.

    Reading refuses every row that was not written this way (pickled keys or values, text mode,
    file names pointing outside the cache directory) with a :class:`BlackboxMIAError` naming the
    directory, so a planted row can never be unpickled.
    """

    def put(self, key):
        if type(key) is not str:
            raise BlackboxMIAError(f"cache keys must be str, got {type(key).__name__} ({self._directory})")
        return key, True

    def get(self, key, raw):
        if not raw or type(key) is not str:
            raise self._refused("a key that is not a raw string (possibly pickled)")
        return key

    def store(self, value, read, key=UNKNOWN):
        """``(size, mode, filename, value)`` columns for ``value`` as compact UTF-8 JSON; a value of
        :data:`MIN_FILE_SIZE` bytes or more goes to a file, fsynced (with the directories that
        name it) before this returns, so its row is never committed ahead of its data.

        Raises:
            BlackboxMIAError: ``value`` is not JSON-serialisable (NaN and infinities included),
                or ``read`` is set (file-like values are not accepted).
            OSError: the file cannot be written.
        """
        if read:
            raise BlackboxMIAError(f"the response cache stores JSON values only, not files ({self._directory})")
        try:
            data = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")
        except (TypeError, ValueError) as exc:
            raise BlackboxMIAError(f"cache value is not JSON-serialisable: {exc} ({self._directory})") from exc
        stored = super().store(data, False, key=key)
        filename = stored[2]
        if filename is not None:  # a large value lives in a file: on disk before its row is committed
            path = os.path.join(self._directory, filename)
            while path != self._directory and path.startswith(self._directory):
                _fsync(path)  # the file, then each directory that names it
                path = os.path.dirname(path)
            _fsync(self._directory)
        return stored

    def fetch(self, mode, filename, value, read):
        """The JSON value of a row written by :meth:`store` (NaN is let through, so that the
        client's validation can drop rows an older version cached).

        Raises:
            BlackboxMIAError: a row not written by :meth:`store` (pickled, text mode, a file
                outside the directory) or a value that is not UTF-8 JSON (corrupt, truncated).
        """
        if read:
            raise BlackboxMIAError(f"the response cache returns JSON values only, not files ({self._directory})")
        if mode == MODE_RAW and isinstance(value, bytes):
            data = value
        elif mode == MODE_BINARY and value is None and self._inside(filename):
            with open(os.path.join(self._directory, filename), "rb") as reader:
                data = reader.read()
        else:
            raise self._refused(f"a row stored in mode {mode!r}, not raw or binary JSON (possibly pickled)")
        try:
            return json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise self._refused(f"a value that is not UTF-8 JSON ({exc})") from exc

    def remove(self, file_path):
        if self._inside(file_path):
            super().remove(file_path)
        else:
            LOG.warning("not removing %r: outside the cache directory %s", file_path, self._directory)

    def _inside(self, filename) -> bool:
        """Whether ``filename`` is a relative path that stays inside the cache directory."""
        if not isinstance(filename, str) or os.path.isabs(filename):
            return False
        root = os.path.realpath(self._directory)
        return os.path.commonpath([root, os.path.realpath(os.path.join(root, filename))]) == root

    def _refused(self, what: str) -> BlackboxMIAError:
        return unusable(self._directory, f"refusing {what} (the cache is corrupt, or was not written by bbmia)")


def _settle(future: concurrent.futures.Future, error: BaseException | None) -> None:
    """Complete a :meth:`ResponseCache.put_soon` future (the row is written either way; a waiter
    cancelled by Ctrl-C has left, and its cancelled future takes no result)."""
    with contextlib.suppress(concurrent.futures.InvalidStateError):
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(error)


class ResponseCache:
    """Raw API responses (JSON dicts) on disk, keyed by :func:`request_key`.

    Args:
        directory: where the cache lives; default ``cache_root() / "responses"``.

    Nothing is ever evicted (no size limit), and every :meth:`put` is committed with SQLite
    ``synchronous=FULL`` before it returns (a value stored in a file is fsynced first).
    :meth:`put_soon` hands the row to a writer thread instead, which commits every row waiting
    in one transaction (one fsync for many answers) and completes the returned future once the
    row is on disk: an event loop awaits it without blocking, and reports the answer only
    then. Several processes may share one directory; :meth:`claim_many` and :meth:`release` let
    them agree on who asks the API for each request (claims live in ``<directory>/claims``).

    Attributes:
        directory: the cache directory.
        hits, misses: :meth:`get` calls that found / did not find a value (this instance only).

    Raises:
        BlackboxMIAError: (from every method) the directory cannot be opened or is corrupt (a
            damaged SQLite page, a row that is not JSON written by this class, a truncated value
            file), or it stayed locked by another process; the message names the directory and
            the way out.
    """

    def __init__(self, directory: str | os.PathLike | None = None):
        self.directory = Path(directory) if directory is not None else cache_root() / "responses"
        self.hits = 0
        self.misses = 0
        self._held: set[str] = set()  # request keys whose claim this instance holds
        self._token = uuid.uuid4().hex  # this instance's claims carry it
        self._claim_table = ClaimTable(self.directory)  # opened on the first claim
        self._writer: threading.Thread | None = None  # started by the first put_soon
        self._pending: queue.SimpleQueue = queue.SimpleQueue()  # (key, value, future, release, claimed) rows, or None: stop
        self._writer_lock = threading.Lock()
        with self._guard("opening it"):
            self._cache = _open(self.directory, SQLITE_FULL_SYNC)

    @contextmanager
    def _guard(self, doing: str) -> Iterator[None]:
        """Turn a storage failure while ``doing`` something into a clear :class:`BlackboxMIAError`."""
        try:
            yield
        except (diskcache.Timeout, sqlite3.OperationalError) as exc:
            if isinstance(exc, sqlite3.OperationalError) and not _busy(exc):
                raise unusable(self.directory, f"{doing} failed ({type(exc).__name__}: {exc})") from exc
            raise BlackboxMIAError(
                f"the response cache {self.directory} stayed locked by another process while {doing}; try again"
            ) from exc
        except (OSError, sqlite3.Error) as exc:
            raise unusable(self.directory, f"{doing} failed ({type(exc).__name__}: {exc})") from exc

    def get(self, key: str) -> dict | None:
        """The cached response for ``key``, or ``None`` when there is none."""
        with self._guard("reading a row"):
            value = self._cache.get(key)
        if value is None:
            self.misses += 1
            return None
        if not isinstance(value, dict):
            raise unusable(self.directory, f"row {key} is not a JSON object")
        self.hits += 1
        return value

    def put(self, key: str, value: dict) -> None:
        """Store ``value`` under ``key`` (overwriting); on disk when this returns.

        Raises:
            BlackboxMIAError: ``value`` is not a JSON-serialisable dict (NaN and infinities are
                refused), or the cache is unusable.
        """
        if not isinstance(value, dict):
            raise BlackboxMIAError(f"cache values must be dicts, got {type(value).__name__}")
        with self._guard("writing a row"):
            self._cache.set(key, value)

    def put_many(self, rows: Sequence[tuple[str, dict]]) -> None:
        """Store every ``(key, value)`` of ``rows`` in one transaction (one commit, so one fsync);
        all on disk when this returns, or none.

        Raises:
            BlackboxMIAError: a value is not a JSON-serialisable dict, or the cache is unusable.
        """
        for _, value in rows:
            if not isinstance(value, dict):
                raise BlackboxMIAError(f"cache values must be dicts, got {type(value).__name__}")
        with self._guard("writing rows"), self._cache.transact():
            for key, value in rows:
                self._cache.set(key, value)

    def put_soon(self, key: str, value: dict, release: bool = False) -> concurrent.futures.Future:
        """Queue ``value`` under ``key`` for the writer thread; the future completes (``None``)
        once the row is committed to disk, or with the :class:`BlackboxMIAError` :meth:`put`
        would raise. Rows queued together are committed in one transaction; a row that makes
        its batch fail is retried alone, so one bad value fails only its own future.
        ``release``: the answer was obtained under a claim: once the row is committed, give up
        this instance's claim on ``key`` and mark ``key`` answered (a batch's claims and marks in
        one transaction; see :mod:`~blackbox_mia.claims`). Await it from asyncio with
        ``asyncio.wrap_future`` (many of them: :class:`~blackbox_mia.backends.loop.ThreadResults`,
        one loop wakeup per commit); rows queued before :meth:`close` are all written before it
        returns.
        """
        future: concurrent.futures.Future = concurrent.futures.Future()
        with self._writer_lock:
            if self._writer is None:
                self._writer = threading.Thread(target=self._write_rows, name="bbmia-cache-writer", daemon=True)
                self._writer.start()
            claimed = release and key in self._held
            if claimed:
                self._held.discard(key)
            self._pending.put((key, value, future, release, claimed))
        return future

    def _write_rows(self) -> None:
        """The writer thread: commit whatever is queued, batch by batch, until told to stop (after
        a row arrives it waits :data:`GROUP_COMMIT_S` for more: one commit, so one fsync, for
        the rows of many requests even when they come one by one)."""
        stop = False
        while not stop:
            batch = [self._pending.get()]
            if batch[0] is not None:
                time.sleep(GROUP_COMMIT_S)
            while True:
                try:
                    batch.append(self._pending.get_nowait())
                except queue.Empty:
                    break
            stop = None in batch
            rows = [row for row in batch if row is not None]
            errors: list[BaseException | None] = [None] * len(rows)
            try:
                self.put_many([(key, value) for key, value, *_ in rows])
            except BaseException:  # noqa: BLE001 - each row's own outcome goes to its future below
                for i, (key, value, *_) in enumerate(rows):
                    try:
                        self.put(key, value)
                    except BaseException as exc:  # noqa: BLE001 - handed to the caller
                        errors[i] = exc
            held = [key for key, _, _, _, claimed in rows if claimed]
            answered = [key for (key, _, _, release, _), error in zip(rows, errors) if release and error is None]
            if held or answered:  # once the answers are durable; a failure only lets the claims expire
                with contextlib.suppress(BlackboxMIAError), self._guard("releasing claims"):
                    self._claim_table.drop(held, self._token, answered)
            for (_, _, future, *_), error in zip(rows, errors):
                _settle(future, error)
        with self._guard("closing"):
            self._cache.close()  # this thread's own SQLite connections

    def _stop_writer(self) -> None:
        """Write every queued row, then stop the writer thread (nothing when none started)."""
        with self._writer_lock:
            writer, self._writer = self._writer, None
        if writer is not None:
            self._pending.put(None)
            writer.join()

    def delete(self, key: str) -> bool:
        """Remove ``key`` (and its answered mark, so that a claim on it can be won again); whether
        it was present."""
        with self._guard("deleting a row"):
            present = bool(self._cache.delete(key))
            self._claim_table.forget([key])
        return present

    def __len__(self) -> int:
        """Number of cached responses."""
        with self._guard("counting rows"):
            return len(self._cache)

    # -- claims: which process asks the API for a request ---------------------------------------

    def claim(self, key: str, ttl_s: float = CLAIM_TTL_S) -> bool:
        """:meth:`claim_many` of one key: whether this process now asks the API for ``key``."""
        return self.claim_many([key], ttl_s)[0]

    def claim_many(self, keys: Sequence[str], ttl_s: float = CLAIM_TTL_S) -> list[bool]:
        """Try to become the one process that asks the API for each of ``keys``, in one SQLite
        write transaction; per key, whether it worked.

        Atomic across processes (:class:`~blackbox_mia.claims.ClaimTable`). A claim expires after
        ``ttl_s`` seconds unless :meth:`refresh_claims` extends it. A claim whose holder is dead
        (same host, the process is gone: :func:`~blackbox_mia.claims.holder_alive`) or that
        expired is taken over at once; a live holder's (this instance's own included) is not,
        nor is a key whose answer was just written under a claim (False: read the cache, or wait
        for the answer or for the claim to go). So a key won here was not answered since the
        caller last missed it in the cache (less than
        :data:`~blackbox_mia.claims.ANSWERED_TTL_S` ago). Release it with :meth:`release` (or
        with the answer: :meth:`put_soon`).

        Raises:
            BlackboxMIAError: the claims database is unusable.
        """
        with self._guard("claiming requests"):
            won = self._claim_table.claim_many(keys, self._token, ttl_s)
        self._held.update(key for key, claimed in zip(keys, won) if claimed)
        return won

    def release(self, key: str) -> None:
        """Give up this instance's claim on ``key`` (nothing when it holds none, or when the claim
        has expired and another process took it over).

        Raises:
            BlackboxMIAError: the claims database is unusable.
        """
        if key in self._held:
            self._held.discard(key)
            with self._guard("releasing claims"):
                self._claim_table.drop([key], self._token)

    def refresh_claims(self, ttl_s: float = CLAIM_TTL_S) -> int:
        """Extend every claim this instance holds to expire ``ttl_s`` seconds from now; how many
        were extended (an expired one, which another process may have taken over, is dropped).
        Call it every :data:`~blackbox_mia.claims.CLAIM_REFRESH_S` seconds while claims are held.

        Raises:
            BlackboxMIAError: the claims database is unusable.
        """
        if not self._held:
            return 0
        with self._guard("refreshing claims"):
            still = self._claim_table.refresh(self._token, ttl_s)
        self._held &= still
        return len(self._held)

    @property
    def held_claims(self) -> frozenset[str]:
        """Keys whose claim this instance holds."""
        return frozenset(self._held)

    def close(self) -> None:
        """Write the rows queued by :meth:`put_soon`, release the claims this instance holds and
        close the databases (idempotent)."""
        self._stop_writer()
        with self._guard("closing"):
            if self._held:
                self._claim_table.drop(list(self._held), self._token)
                self._held.clear()
            self._claim_table.close()
            self._cache.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"ResponseCache({str(self.directory)!r}, hits={self.hits}, misses={self.misses})"
