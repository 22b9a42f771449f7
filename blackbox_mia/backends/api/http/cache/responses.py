"""Disk cache of raw API responses, stored as JSON only (never pickle).

Every paid answer is written to disk as soon as it arrives, keyed by
:func:`~blackbox_mia.backends.api.http.cache.keys.request_key`, so a rerun of the same audit makes zero requests. Processes sharing one directory coordinate through
claims (:meth:`ResponseCache.claim`): the one holding a request's claim asks the API, the others
wait for its answer, so no request is paid for twice.

The store on disk (JSON only, never pickle: a shared cache directory must never be a way to run
code) and its failure modes are :mod:`blackbox_mia.backends.api.http.cache.disk`; keys are
:mod:`blackbox_mia.backends.api.http.cache.keys`.

The cache never asks to be deleted (it holds paid answers):

* a bad row (pickled, text mode, a file name pointing outside the directory, a value that is not
  a UTF-8 JSON object, a truncated value file) is quarantined: moved, with its reason, to the
  ``Quarantine`` table of ``cache.db`` (never read back as an answer), reported once in the log,
  and counted as a miss, so the request is asked again;
* a read-only cache (a shared, archived audit: a read-only file system or files) is opened
  read-only: hits are served, and a miss is a :class:`BlackboxMIAError` naming the fix;
* a full disk is a :class:`BlackboxMIAError` naming the directory, the bytes the write needed and
  the bytes free; every committed answer stays;
* a damaged database (a corrupt SQLite page) is a :class:`BlackboxMIAError` pointing at
  ``bbmia cache repair`` (:mod:`blackbox_mia.backends.api.http.cache.check`), which keeps every readable row.

The API key is never part of a key or a value.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
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

from .disk import (
    CACHE_FILE,
    QUARANTINE_TABLE,
    SQLITE_FULL_SYNC,
    BadRow,
    JsonDisk,
    JsonText,
    absent_read_only,
    cannot_write,
    disk_full,
    disk_is_full,
    is_busy,
    open_read_only,
    open_store,
    quarantine_rows,
    read_only_error,
    stored_bytes,
    unusable,
)
from .claims import BUSY_TIMEOUT_S, CLAIM_TTL_S, ClaimTable
from .....config import cache_root
from .....types import BlackboxMIAError

LOG = logging.getLogger(__name__)

GROUP_COMMIT_S = 0.01  # seconds the writer thread waits after a queued row for more to commit with it: one
# fsync per group of rows instead of per row; the API client's senders never wait for it (only the request's
# caller does). Figures: records/measured-settings.md


def _settle(future: concurrent.futures.Future, error: BaseException | None) -> None:
    """Complete a :meth:`ResponseCache.put_soon` future (the row is written either way; a waiter
    cancelled by Ctrl-C has left, and its cancelled future takes no result)."""
    with contextlib.suppress(concurrent.futures.InvalidStateError):
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(error)


class ResponseCache:
    """Raw API responses (JSON dicts) on disk, keyed by :func:`~blackbox_mia.backends.api.http.cache.keys.request_key`.

    Args:
        directory: where the cache lives; default ``cache_root() / "responses"``.
        read_only: ``True``: open it read-only (``mode=ro``; nothing is ever written, a miss
            that would be asked is an error). ``None`` (default): writable, but read-only when
            it cannot be written (a read-only file system or files), with a warning.

    Nothing is ever evicted (no size limit), and every :meth:`put` is committed with SQLite
    ``synchronous=FULL`` before it returns (a value stored in a file is fsynced first).
    :meth:`put_soon` hands the row to a writer thread instead, which commits every row waiting
    in one transaction (one fsync for many answers) and completes the returned future once the
    row is on disk: an event loop awaits it without blocking, and reports the answer only
    then. Several processes may share one directory; :meth:`claim_many` and :meth:`release` let
    them agree on who asks the API for each request (claims live in ``<directory>/claims``).

    A bad row met by :meth:`get` is quarantined (see the module docstring) and read as a miss.

    Attributes:
        directory: the cache directory.
        read_only: why the cache is read-only (``None``: it is writable).
        hits, misses: :meth:`get` calls that found / did not find a value (this instance only).
        quarantined: ``{key: reason}`` of the bad rows this instance met (each is logged once).

    Raises:
        BlackboxMIAError: (from every method) the directory cannot be opened, its database is
            damaged (a corrupt SQLite page), it stayed locked by another process, its disk is
            full, or a request must be asked but the cache is read-only; the message names the
            directory and the way out.
    """

    def __init__(self, directory: str | os.PathLike | None = None, read_only: bool | None = None):
        self.directory = Path(directory) if directory is not None else cache_root() / "responses"
        self.hits = 0
        self.misses = 0
        self.quarantined: dict[str, str] = {}
        self.read_only: str | None = None
        self._held: set[str] = set()  # request keys whose claim this instance holds
        self._token = uuid.uuid4().hex  # this instance's claims carry it
        self._claim_table = ClaimTable(self.directory)  # opened on the first claim
        self._writer: threading.Thread | None = None  # started by the first put_soon
        self._pending: queue.SimpleQueue = queue.SimpleQueue()  # (key, value, future, release, claimed) rows, or None: stop
        self._writer_lock = threading.Lock()
        self._cache: diskcache.Cache | None = None  # writable
        self._reader: sqlite3.Connection | None = None  # read-only
        self._reader_lock = threading.Lock()
        self._disk = JsonDisk(str(self.directory))
        if not read_only:
            try:
                self._cache = open_store(self.directory, SQLITE_FULL_SYNC)
                return
            except (diskcache.Timeout, sqlite3.Error, OSError) as exc:
                if not (cannot_write(exc) or self.directory.is_dir() and not os.access(self.directory, os.W_OK)):
                    with self._guard("opening it"):  # (a read-only file system: SQLite cannot open)
                        raise
                self.read_only = f"{type(exc).__name__}: {exc}"
                LOG.warning("the response cache %s cannot be written (%s): using it read-only", self.directory,
                            self.read_only)
        self.read_only = self.read_only or "opened read-only"
        if not (self.directory / CACHE_FILE).is_file():  # absent, not damaged: nothing to repair
            raise absent_read_only(self.directory, self.read_only)
        with self._guard("opening it read-only"):
            self._reader = open_read_only(self.directory)

    @contextmanager
    def _guard(self, doing: str, needed: functools.partial | None = None) -> Iterator[None]:
        """Turn a storage failure while ``doing`` something into a clear :class:`BlackboxMIAError`
        (``needed()``: the bytes the write needed, for a full disk)."""
        try:
            yield
        except (diskcache.Timeout, sqlite3.Error, OSError) as exc:
            if disk_is_full(exc):
                raise disk_full(self.directory, doing, None if needed is None else needed()) from exc
            if self.read_only is None and cannot_write(exc):
                raise read_only_error(self.directory, f"{type(exc).__name__}: {exc}") from exc
            if isinstance(exc, diskcache.Timeout) or isinstance(exc, sqlite3.OperationalError) and is_busy(exc):
                raise BlackboxMIAError(
                    f"the response cache {self.directory} stayed locked by another process while {doing}; try again"
                ) from exc
            raise unusable(self.directory, f"{doing} failed ({type(exc).__name__}: {exc})") from exc

    def get(self, key: str) -> dict | None:
        """The cached response for ``key``, or ``None`` when there is none (a bad row is
        quarantined and counts as none)."""
        try:
            with self._guard("reading a row"):
                value = self._read(key)
            if value is not None and not isinstance(value, dict):
                raise BadRow(self.directory, f"a JSON {type(value).__name__} where an answer (an object) belongs")
        except BadRow as exc:
            self._quarantine(key, exc.reason)
            value = None
        if value is None:
            self.misses += 1
            return None
        self.hits += 1
        return value

    def _read(self, key: str) -> object:
        """The stored value of ``key`` (``None``: no row, or its value file is missing).

        Raises:
            BadRow: the row was not written by :class:`JsonDisk` or its value is not JSON.
        """
        if self._cache is not None:
            return self._cache.get(key)
        with self._reader_lock:
            row = self._reader.execute("SELECT mode, filename, value FROM Cache WHERE key = ? AND raw = 1",
                                       (key,)).fetchone()
        if row is None:
            return None
        try:
            return self._disk.fetch(*row, False)
        except FileNotFoundError:
            return None

    def _quarantine(self, key: str, reason: str) -> None:
        """Move the row of ``key`` to the :data:`QUARANTINE_TABLE` with ``reason`` (one
        transaction; a value file stays where it is, never removed), unmark it as answered (see
        :meth:`delete`) and log it once; a read-only cache only logs it."""
        if key in self.quarantined:
            return
        self.quarantined[key] = reason
        where = "left in place: the cache is read-only"
        if self.read_only is None:
            with self._guard("quarantining a bad row"), contextlib.closing(
                    sqlite3.connect(self.directory / CACHE_FILE, timeout=BUSY_TIMEOUT_S)) as connection, connection:
                quarantine_rows(connection, [key], reason)
            with self._guard("quarantining a bad row"):
                self._claim_table.forget([key])  # a fresh answer mark would make the rerun wait for it
            where = f"moved to table {QUARANTINE_TABLE} of {self.directory / CACHE_FILE}"
        LOG.warning("the response cache %s: quarantined row %s (%s; %s); asking for it again. "
                    "`bbmia cache verify %s` lists quarantined rows", self.directory, key, reason, where,
                    self.directory)

    def _writable(self) -> diskcache.Cache:
        """The writable store.

        Raises:
            BlackboxMIAError: the cache is read-only (the message names the fix).
        """
        if self._cache is None:
            raise read_only_error(self.directory, self.read_only)
        return self._cache

    def put(self, key: str, value: dict | JsonText) -> None:
        """Store ``value`` under ``key`` (overwriting); on disk when this returns. A
        :class:`~.disk.JsonText` (an object's JSON text, as an answer arrived) is stored as is.

        Raises:
            BlackboxMIAError: ``value`` is not a JSON-serialisable dict (NaN and infinities are
                refused), the cache is read-only, its disk is full, or it is unusable.
        """
        self._store([(key, value)])

    def put_many(self, rows: Sequence[tuple[str, dict | JsonText]]) -> None:
        """Store every ``(key, value)`` of ``rows`` in one transaction (one commit, so one fsync);
        all on disk when this returns, or none.

        Raises:
            BlackboxMIAError: a value is not a JSON-serialisable dict, the cache is read-only,
                its disk is full (the message says how many bytes the rows needed), or it is
                unusable.
        """
        self._store(rows)

    def _store(self, rows: Sequence[tuple[str, dict | JsonText]]) -> None:
        """:meth:`put_many` (also what :meth:`put` and the writer thread's retries use)."""
        for _, value in rows:
            if not isinstance(value, dict | JsonText):
                raise BlackboxMIAError(f"cache values must be dicts, got {type(value).__name__}")
        cache = self._writable()
        with self._guard("writing rows", functools.partial(stored_bytes, rows)), cache.transact():
            for key, value in rows:
                cache.set(key, value)

    def put_soon(self, key: str, value: dict | JsonText, release: bool = False) -> concurrent.futures.Future:
        """Queue ``value`` under ``key`` for the writer thread; the future completes (``None``)
        once the row is committed to disk, or with the :class:`BlackboxMIAError` :meth:`put`
        would raise. Rows queued together are committed in one transaction; a row that makes
        its batch fail is retried alone, so one bad value fails only its own future.
        ``release``: the answer was obtained under a claim: once the row is committed, give up
        this instance's claim on ``key`` and mark ``key`` answered (a batch's claims and marks in
        one transaction; see :mod:`~blackbox_mia.backends.api.http.cache.claims`). Await it from asyncio with
        ``asyncio.wrap_future`` (many of them: :class:`~blackbox_mia.backends.loop.ThreadResults`,
        one loop wakeup per commit); rows queued before :meth:`close` are all written before it
        returns.
        """
        future: concurrent.futures.Future = concurrent.futures.Future()
        if self._cache is None:
            future.set_exception(read_only_error(self.directory, self.read_only))
            return future
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
        it was present (a read-only cache removes nothing: ``False``)."""
        if self._cache is None:
            return False  # read-only: the row stays (its request cannot be asked again here anyway)
        with self._guard("deleting a row"):
            present = bool(self._cache.delete(key))
            self._claim_table.forget([key])
        return present

    def __len__(self) -> int:
        """Number of cached responses."""
        with self._guard("counting rows"):
            if self._cache is not None:
                return len(self._cache)
            with self._reader_lock:
                return self._reader.execute("SELECT count(*) FROM Cache").fetchone()[0]

    # -- claims: which process asks the API for a request ---------------------------------------

    def claim(self, key: str, ttl_s: float = CLAIM_TTL_S) -> bool:
        """:meth:`claim_many` of one key: whether this process now asks the API for ``key``."""
        return self.claim_many([key], ttl_s)[0]

    def claim_many(self, keys: Sequence[str], ttl_s: float = CLAIM_TTL_S) -> list[bool]:
        """Try to become the one process that asks the API for each of ``keys``, in one SQLite
        write transaction; per key, whether it worked.

        Atomic across processes (:class:`~blackbox_mia.backends.api.http.cache.claims.ClaimTable`). A claim expires after
        ``ttl_s`` seconds unless :meth:`refresh_claims` extends it. A claim whose holder is dead
        (same host, the process is gone: :func:`~blackbox_mia.backends.api.http.cache.claims.holder_alive`) or that
        expired is taken over at once; a live holder's (this instance's own included) is not,
        nor is a key whose answer was just written under a claim (False: read the cache, or wait
        for the answer or for the claim to go). So a key won here was not answered since the
        caller last missed it in the cache (less than
        :data:`~blackbox_mia.backends.api.http.cache.claims.ANSWERED_TTL_S` ago). Release it with :meth:`release` (or
        with the answer: :meth:`put_soon`).

        Raises:
            BlackboxMIAError: the claims database is unusable, or the cache is read-only (a key
                to claim is a request missing from it: the message names the fix).
        """
        if self._cache is None:
            if keys:
                raise read_only_error(self.directory, f"{self.read_only}; {len(set(keys))} request(s) not in it")
            return []
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
        Call it every :data:`~blackbox_mia.backends.api.http.cache.claims.CLAIM_REFRESH_S` seconds while claims are held.

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
            if self._cache is not None:
                self._cache.close()
            if self._reader is not None:
                self._reader.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        mode = "" if self.read_only is None else ", read-only"
        return f"ResponseCache({str(self.directory)!r}{mode}, hits={self.hits}, misses={self.misses})"
