"""The response cache's store on disk, stored as JSON only (never pickle), and its failure modes.

The store is a :class:`diskcache.Cache` (SQLite plus files for large values) with a
:class:`JsonDisk` that writes values as UTF-8 JSON bytes and refuses to read anything else: a
cache directory shared between people or machines must never be a way to run code, and
diskcache's default ``Disk`` (and even its ``JSONDisk``, through the pickle branch of
``Disk.fetch``) unpickles whatever a crafted row holds.

A bad row is moved to the ``Quarantine`` table of ``cache.db`` (:func:`quarantine_rows`); the
errors for a damaged, read-only or full cache (:func:`unusable`, :func:`read_only_error`,
:func:`disk_full`) name the directory and the fix. Used by :class:`~blackbox_mia.backends.api.http.cache.responses.ResponseCache`
and ``bbmia cache verify/repair`` (:mod:`blackbox_mia.backends.api.http.cache.check`).
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import shutil
import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import quote

import diskcache
from diskcache.core import MODE_BINARY, MODE_RAW, UNKNOWN

from .....io import NonFiniteNumber, loads_finite
from .....option_names import named
from .....types import BadRow, BlackboxMIAError

LOG = logging.getLogger(__name__)

MIN_FILE_SIZE = 2**15  # bytes: smaller JSON values live in SQLite, larger ones in files
SQLITE_FULL_SYNC = 2  # PRAGMA synchronous=FULL: a put is on disk before put() returns
CACHE_FILE = "cache.db"  # diskcache's database in the cache directory
QUARANTINE_TABLE = "Quarantine"  # bad rows kept aside in cache.db: the Cache columns plus reason, time
READ_ONLY_ERRORS = (errno.EROFS, errno.EACCES, errno.EPERM)  # errnos of a cache that cannot be written


def unusable(directory: str | os.PathLike, problem: str) -> BlackboxMIAError:
    """The error for a cache directory that cannot be used: names it and the ways out (none of
    which throws paid answers away)."""
    return BlackboxMIAError(
        f"the response cache {directory} cannot be used: {problem}; run `bbmia cache repair {directory}` "
        f"(it keeps every readable answer and moves the damaged database aside) or use another {named('cache_dir')}"
    )


def read_only_error(directory: str | os.PathLike, why: str) -> BlackboxMIAError:
    """The error for a request missing from a read-only cache: names the directory and the fix."""
    return BlackboxMIAError(
        f"the response cache {directory} is read-only ({why}): it serves the answers it holds, but a request "
        f"missing from it cannot be cached; copy the cache root to a writable place and pass that as {named('cache_dir')} "
        f"(e.g. cp -r {Path(directory).parent} NEW_DIR), or make {directory} writable"
    )


def absent_read_only(directory: str | os.PathLike, why: str) -> BlackboxMIAError:
    """The error for a cache directory that holds no cache yet (no ``cache.db``) and cannot be
    written, so none can be created there: not damaged, nothing to repair. A directory that does
    not exist cannot be made writable: the message names its nearest existing folder instead."""
    directory = Path(directory)
    folder = next((path for path in (directory, *directory.parents) if path.exists()), directory)
    read_only = "the directory is" if folder == directory else f"it does not exist and {folder} is"
    return BlackboxMIAError(
        f"the response cache {directory} holds no cache yet ({CACHE_FILE} is absent) and cannot be created "
        f"there: {read_only} read-only ({why}); pass a writable {named('cache_dir')}, or make {folder} writable"
    )


def disk_full(directory: str | os.PathLike, doing: str, needed: int | None) -> BlackboxMIAError:
    """The error for a write that found the cache's disk full: the directory, the bytes the
    write needed (``None``: not known) and the bytes free; committed answers are untouched."""
    sizes = [] if needed is None else [f"it needed about {needed:,} bytes"]
    with contextlib.suppress(OSError):
        sizes.append(f"{shutil.disk_usage(directory).free:,} bytes free")
    return BlackboxMIAError(
        f"no space left on the disk of the response cache {directory} while {doing} ({'; '.join(sizes) or '?'}): "
        f"free some space or move the cache ({named('cache_dir')}) and rerun; every answer already cached is kept"
    )


def disk_is_full(exc: BaseException) -> bool:
    """Whether ``exc`` says the disk is full (ENOSPC, SQLite's SQLITE_FULL)."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return isinstance(exc, sqlite3.Error) and (
        getattr(exc, "sqlite_errorname", None) == "SQLITE_FULL" or "disk is full" in str(exc))


def cannot_write(exc: BaseException) -> bool:
    """Whether ``exc`` says the cache cannot be written (read-only file system or files)."""
    if isinstance(exc, OSError) and exc.errno in READ_ONLY_ERRORS:
        return True
    return isinstance(exc, sqlite3.Error) and (
        getattr(exc, "sqlite_errorname", "").startswith("SQLITE_READONLY") or "readonly" in str(exc))


def open_read_only(directory: Path) -> sqlite3.Connection:
    """A read-only connection to ``directory``'s ``cache.db`` (``mode=ro``; ``immutable=1`` when
    the WAL's shared-memory file cannot be made, as on a read-only file system).

    Raises:
        sqlite3.Error: there is no readable database.
    """
    path = directory / CACHE_FILE
    if not path.is_file():
        raise sqlite3.OperationalError(f"{path} does not exist")
    last: sqlite3.Error | None = None
    for flags in ("mode=ro", "mode=ro&immutable=1"):
        connection = sqlite3.connect(f"file:{quote(str(path))}?{flags}", uri=True, check_same_thread=False)
        try:
            connection.execute("SELECT count(*) FROM Cache WHERE rowid = 0").fetchone()
            return connection
        except sqlite3.Error as exc:
            connection.close()
            last = exc
    raise last


def open_store(directory: Path, synchronous: int) -> diskcache.Cache:
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


def is_busy(exc: sqlite3.OperationalError) -> bool:
    """Whether ``exc`` says the database stayed locked by another connection."""
    return getattr(exc, "sqlite_errorname", None) in ("SQLITE_BUSY", "SQLITE_LOCKED") or "locked" in str(exc)


def fsync_path(path: str) -> None:
    """Flush ``path`` (a file or a directory) to disk.

    Raises:
        OSError: it cannot be opened or flushed.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)



class JsonText(bytes):
    """The UTF-8 JSON text of an object, as an answer arrived (a cache value stored as is): the
    client decodes and validates it first, so writing it costs no second encoding (the C encoder
    took about 0.13 ms per 127-token ``prompt_logprobs`` answer, a fifth of the client's CPU)."""


def json_bytes(value: dict | JsonText) -> bytes:
    """A cache value as compact UTF-8 JSON: a :class:`JsonText` as it is, a dict encoded.

    Raises:
        ValueError: the dict holds NaN or an infinity.
        TypeError: the dict holds something JSON cannot represent.
    """
    if isinstance(value, JsonText):
        return bytes(value)  # plain bytes: diskcache pickles anything else, and reading refuses pickles
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")


def stored_bytes(rows: Sequence[tuple[str, dict | JsonText]]) -> int:
    """About how many bytes ``rows`` take in the cache (their keys and JSON values)."""
    return sum(len(key) + len(json_bytes(value)) for key, value in rows)



def quarantine_rows(connection: sqlite3.Connection, keys: Sequence[str], reason: str) -> int:
    """Move the rows of ``keys`` (raw or not) from ``Cache`` to :data:`QUARANTINE_TABLE` (made on
    first use) with ``reason`` and the time, inside the caller's transaction; how many moved.
    Value files are not touched (a quarantined row may name a file outside the cache)."""
    connection.execute(f"CREATE TABLE IF NOT EXISTS {QUARANTINE_TABLE} (key BLOB, raw INTEGER, mode INTEGER, "
                       "filename TEXT, value BLOB, reason TEXT, quarantined REAL)")
    moved = 0
    for key in keys:
        connection.execute(f"INSERT INTO {QUARANTINE_TABLE} SELECT key, raw, mode, filename, value, ?, ? "
                           "FROM Cache WHERE key = ?", (reason, time.time(), key))
        moved += connection.execute("DELETE FROM Cache WHERE key = ?", (key,)).rowcount
    return moved



class JsonDisk(diskcache.Disk):
    """A :class:`diskcache.Disk` that stores keys as raw strings and values as UTF-8 JSON bytes.

    Reading refuses every row that was not written this way (pickled keys or values, text mode,
    file names pointing outside the cache directory) with a :class:`BadRow`, so a planted row can
    never be unpickled.
    """

    def put(self, key):
        if type(key) is not str:
            raise BlackboxMIAError(f"cache keys must be str, got {type(key).__name__} ({self._directory})")
        return key, True

    def get(self, key, raw):
        if not raw or type(key) is not str:
            raise BadRow(self._directory, "a key that is not a raw string (possibly pickled)")
        return key

    def store(self, value, read, key=UNKNOWN):
        """``(size, mode, filename, value)`` columns for ``value`` as compact UTF-8 JSON (a
        :class:`JsonText` as it is); a value of
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
            data = json_bytes(value)
        except (TypeError, ValueError) as exc:
            raise BlackboxMIAError(f"cache value is not JSON-serialisable: {exc} ({self._directory})") from exc
        stored = super().store(data, False, key=key)
        filename = stored[2]
        if filename is not None:  # a large value lives in a file: on disk before its row is committed
            path = os.path.join(self._directory, filename)
            while path != self._directory and path.startswith(self._directory):
                fsync_path(path)  # the file, then each directory that names it
                path = os.path.dirname(path)
            fsync_path(self._directory)
        return stored

    def fetch(self, mode, filename, value, read):
        """The JSON value of a row written by :meth:`store`, every number finite
        (:func:`~blackbox_mia.io.loads_finite`).

        Raises:
            BadRow: a row not written by :meth:`store` (pickled, text mode, a file outside the
                directory), a value that is not UTF-8 JSON (corrupt, truncated), or one holding
                NaN or an infinity (an older version could cache such a row).
            OSError: a value file inside the directory cannot be read (missing: a miss).
        """
        if read:
            raise BlackboxMIAError(f"the response cache returns JSON values only, not files ({self._directory})")
        if mode == MODE_RAW and isinstance(value, bytes):
            data = value
        elif mode == MODE_BINARY and value is None and self._inside(filename):
            with open(os.path.join(self._directory, filename), "rb") as reader:
                data = reader.read()
        else:
            raise BadRow(self._directory, f"a row stored in mode {mode!r} with file {filename!r}, not raw or binary "
                                          f"JSON inside the cache (possibly pickled, or planted)")
        try:
            return loads_finite(data)  # a body kept as it came may start with a BOM
        except NonFiniteNumber as exc:
            raise BadRow(self._directory, f"a value holding {exc}") from exc
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise BadRow(self._directory, f"a value that is not UTF-8 JSON ({exc})") from exc

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

