"""Claims: which process asks the API for a request when several share one response cache.

A claim is a row ``(key, pid, host, token, expires)`` of the ``claims`` table of one SQLite
database, ``<cache directory>/claims/claims.sqlite3`` (WAL journal, ``synchronous=NORMAL``: a
claim lost in a crash only means waiting less). Each operation on many keys is one transaction of
a few statements, not one per key: claims kept as rows of a key-value store (a transaction and
several statements per key) cost the client's event loop a share of its CPU at high concurrency
(figures: records/measured-settings.md).

When a holder's answer is in the cache, its claim is dropped and the key is marked answered (a row
``(key, expires)`` of the ``answered`` table, kept :data:`ANSWERED_TTL_S` seconds) in one
transaction. A process that missed the key in the cache just before another process answered it
then finds the mark instead of a free key when it claims, and reads the cache: so a process that
wins a claim knows the answer was not written in between, and asks the API without reading the
cache a second time.

Times are wall-clock seconds (``time.time()``), comparable between processes on one host; a claim
from another host is trusted until it expires.
"""

from __future__ import annotations

import os
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from .disk import is_busy

CLAIMS_SUBDIR = "claims"  # claims live in their own database below the cache directory
CLAIMS_FILE = "claims.sqlite3"
CLAIM_TTL_S = 60.0  # seconds a claim lasts unless its holder refreshes it
CLAIM_REFRESH_S = CLAIM_TTL_S / 4  # how often a holder should refresh its claims, in seconds
ANSWERED_TTL_S = CLAIM_TTL_S  # seconds a key stays marked answered: far longer than a cache miss takes to
# become a claim (one event-loop turn), so no answer written in between goes unseen
BUSY_TIMEOUT_S = 60.0  # seconds to wait for another process's write transaction
OPEN_RETRY_S = 0.05  # seconds between tries of the switch to WAL that another process's first open holds up
KEYS_PER_QUERY = 500  # keys in one ``IN (...)`` list (SQLite builds before 3.32 allow 999 variables)


def holder_alive(pid: object, host: object) -> bool:
    """Whether the process ``pid`` on ``host`` that holds a claim may still run.

    A claim from another host cannot be checked and counts as alive (its expiry ends it). On this
    host the process must exist and not be a zombie (killed but not yet reaped). A holder that is
    not a positive int pid and a host name counts as dead.
    """
    if not isinstance(host, str) or not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    if host != socket.gethostname():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        return True
    except OSError:
        return False
    try:  # Linux: the state letter follows the parenthesised command name
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state not in ("Z", "X")


def _delete_expired(connection: sqlite3.Connection, now: float) -> None:
    """Delete the claims and answered marks that expired before ``now`` (wall-clock seconds)."""
    connection.execute("DELETE FROM claims WHERE expires <= ?", (now,))
    connection.execute("DELETE FROM answered WHERE expires <= ?", (now,))


class ClaimTable:
    """The claims of one cache directory, held under one ``token`` per holder.

    Args:
        directory: the cache directory (the table lives in :data:`CLAIMS_SUBDIR` below it).

    Nothing is opened before the first call. One connection serves every thread (calls are
    serialised by a lock); processes are serialised by SQLite (``BEGIN IMMEDIATE``, waiting up
    to :data:`BUSY_TIMEOUT_S`).

    Raises:
        OSError, sqlite3.Error: (from every method) the database cannot be opened or used
            (``sqlite3.OperationalError`` "database is locked" when another process held it
            longer than :data:`BUSY_TIMEOUT_S`).
    """

    def __init__(self, directory: Path):
        self.path = directory / CLAIMS_SUBDIR / CLAIMS_FILE
        self._connection: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction (committed on success, rolled back on an error)."""
        with self._lock:
            if self._connection is None:
                self._connection = self._open()
            connection = self._connection
            connection.execute("BEGIN IMMEDIATE")
            try:
                yield connection
            except BaseException:
                connection.rollback()
                raise
            connection.commit()

    def _open(self) -> sqlite3.Connection:
        """The connection, with the tables created and expired rows deleted.

        Two processes opening a new claims database at once race on its switch to WAL, which
        SQLite refuses (``database is locked``) at once, without its busy wait (17 of 20 trials of
        two processes started together): the switch is retried every :data:`OPEN_RETRY_S` seconds
        for up to :data:`BUSY_TIMEOUT_S`.
        """
        self.path.parent.mkdir(parents=True, exist_ok=True)
        connection = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None,
                                     check_same_thread=False)
        try:
            deadline = time.monotonic() + BUSY_TIMEOUT_S
            while True:
                try:
                    connection.execute("PRAGMA journal_mode=WAL")
                    break
                except sqlite3.OperationalError as exc:
                    if not is_busy(exc) or time.monotonic() > deadline:
                        raise
                    time.sleep(OPEN_RETRY_S)
            connection.execute("PRAGMA synchronous=NORMAL")
            connection.execute("CREATE TABLE IF NOT EXISTS claims (key TEXT PRIMARY KEY, pid INTEGER, host TEXT, "
                               "token TEXT, expires REAL) WITHOUT ROWID")
            connection.execute("CREATE TABLE IF NOT EXISTS answered (key TEXT PRIMARY KEY, expires REAL) WITHOUT ROWID")
            _delete_expired(connection, time.time())
        except BaseException:
            connection.close()
            raise
        return connection

    def claim_many(self, keys: Sequence[str], token: str, ttl_s: float = CLAIM_TTL_S) -> list[bool]:
        """Claim each of ``keys`` for ``token`` (this process), in one transaction; per key,
        whether it is now held (a key repeated in ``keys`` is won at most once).

        A key is taken when it is not marked answered (:meth:`drop`) and nobody holds it, or its
        claim expired, or its holder is dead (:func:`holder_alive`); a live holder's claim (this
        process's own included) is kept. The claim expires ``ttl_s`` seconds from now unless
        :meth:`refresh` extends it.
        """
        pid, host, now = os.getpid(), socket.gethostname(), time.time()
        unique = list(dict.fromkeys(keys))
        alive: dict[tuple[object, object], bool] = {}
        with self._transaction() as connection:
            taken = set()
            for start in range(0, len(unique), KEYS_PER_QUERY):
                chunk = unique[start:start + KEYS_PER_QUERY]
                rows = connection.execute(
                    f"SELECT key, pid, host FROM claims WHERE expires > ? AND key IN ({','.join('?' * len(chunk))})",
                    (now, *chunk))
                for key, holder_pid, holder_host in rows:
                    if (holder_pid, holder_host) not in alive:
                        alive[holder_pid, holder_host] = holder_alive(holder_pid, holder_host)
                    if alive[holder_pid, holder_host]:
                        taken.add(key)
                taken.update(key for (key,) in connection.execute(
                    f"SELECT key FROM answered WHERE expires > ? AND key IN ({','.join('?' * len(chunk))})",
                    (now, *chunk)))
            won = [key for key in unique if key not in taken]
            connection.executemany("INSERT OR REPLACE INTO claims VALUES (?, ?, ?, ?, ?)",
                                   [(key, pid, host, token, now + ttl_s) for key in won])
        first = set(won)
        result = []
        for key in keys:
            result.append(key in first)
            first.discard(key)
        return result

    def drop(self, keys: Sequence[str], token: str, answered: Sequence[str] = ()) -> None:
        """Delete the claims on ``keys`` that ``token`` still holds, and mark the ``answered``
        keys (their answers are in the cache) for :data:`ANSWERED_TTL_S` seconds, in one
        transaction."""
        expires = time.time() + ANSWERED_TTL_S
        with self._transaction() as connection:
            connection.executemany("DELETE FROM claims WHERE key = ? AND token = ?", [(key, token) for key in keys])
            connection.executemany("INSERT OR REPLACE INTO answered VALUES (?, ?)", [(key, expires) for key in answered])

    def forget(self, keys: Sequence[str]) -> None:
        """Unmark ``keys`` as answered (their cached answers were deleted), in one transaction."""
        with self._transaction() as connection:
            connection.executemany("DELETE FROM answered WHERE key = ?", [(key,) for key in keys])

    def refresh(self, token: str, ttl_s: float = CLAIM_TTL_S) -> set[str]:
        """Extend every unexpired claim of ``token`` to ``ttl_s`` seconds from now; the keys it
        still holds (a claim that expired, and may have been taken over, is not extended).
        Expired rows are deleted in the same transaction."""
        now = time.time()
        with self._transaction() as connection:
            _delete_expired(connection, now)
            held = {key for (key,) in connection.execute(
                "SELECT key FROM claims WHERE token = ? AND expires > ?", (token, now))}
            connection.execute("UPDATE claims SET expires = ? WHERE token = ? AND expires > ?",
                               (now + ttl_s, token, now))
        return held

    def close(self) -> None:
        """Close the connection (idempotent; a later call opens it again)."""
        with self._lock:
            if self._connection is not None:
                connection, self._connection = self._connection, None
                connection.close()
