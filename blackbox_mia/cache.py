"""Disk cache of raw API responses, stored as JSON only (never pickle).

Every paid answer is written to disk as soon as it arrives, keyed by :func:`request_key`, so a
rerun of the same audit makes zero requests. The store is a :class:`diskcache.Cache` (SQLite plus
files for large values) with a :class:`JsonDisk` that writes values as UTF-8 JSON bytes and
refuses to read anything else: a cache directory shared between people or machines must never be
a way to run code, and diskcache's default ``Disk`` (and even its ``JSONDisk``, through the
pickle branch of ``Disk.fetch``) unpickles whatever a crafted row holds.

The API key is never part of a key or a value.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType

import diskcache
from diskcache.core import MODE_BINARY, MODE_RAW, UNKNOWN

from .config import cache_root
from .types import BlackboxMIAError

LOG = logging.getLogger(__name__)

MIN_FILE_SIZE = 2**15  # bytes: smaller JSON values live in SQLite, larger ones in files
SQLITE_FULL_SYNC = 2  # PRAGMA synchronous=FULL: a put is on disk before put() returns


def unusable(directory: str | os.PathLike, problem: str) -> BlackboxMIAError:
    """The error for a cache directory that cannot be used: names it and the way out."""
    return BlackboxMIAError(
        f"the response cache {directory} cannot be used: {problem}; delete {directory} or use another --cache-dir"
    )


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


def request_key(base_url: str, model: str, endpoint: str, payload: dict) -> str:
    """Cache key of one request: sha256 hex digest (64 characters) of its canonical JSON.

    The digest covers ``{"base_url", "model", "endpoint", "payload"}`` serialised with sorted
    keys and no whitespace, so dict order never matters.

    Args:
        base_url: the API base URL; a trailing ``/`` is ignored.
        model: the model name sent to the API.
        endpoint: ``"completions"`` or ``"chat"``.
        payload: every request parameter that can change the answer: the prompt (token ids or
            text) or messages, ``max_tokens``, ``temperature``, ``logprobs`` / ``top_logprobs``,
            ``logit_bias``, ``echo``, ``seed`` and any extra body field. It must not hold
            credentials: the API key is sent as a header and is deliberately NOT part of the key
            (the same request with another key has the same answer, and the key must never reach
            the cache directory).

    Raises:
        BlackboxMIAError: the payload is not JSON-serialisable.
    """
    record = {"base_url": base_url.rstrip("/"), "model": model, "endpoint": endpoint, "payload": payload}
    try:
        canonical = json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise BlackboxMIAError(f"request payload is not JSON-serialisable: {exc}") from exc
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


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


class ResponseCache:
    """Raw API responses (JSON dicts) on disk, keyed by :func:`request_key`.

    Args:
        directory: where the cache lives; default ``cache_root() / "responses"``.

    Nothing is ever evicted (no size limit), and every :meth:`put` is committed with SQLite
    ``synchronous=FULL`` before it returns. Several processes may share one directory.

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
        try:
            self._cache = diskcache.Cache(
                str(self.directory),
                disk=JsonDisk,
                disk_min_file_size=MIN_FILE_SIZE,
                eviction_policy="none",
                sqlite_synchronous=SQLITE_FULL_SYNC,
            )
        except (OSError, sqlite3.Error) as exc:
            raise unusable(self.directory, f"opening it failed ({type(exc).__name__}: {exc})") from exc

    @contextmanager
    def _guard(self, doing: str) -> Iterator[None]:
        """Turn a storage failure while ``doing`` something into a clear :class:`BlackboxMIAError`."""
        try:
            yield
        except diskcache.Timeout as exc:
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

    def delete(self, key: str) -> bool:
        """Remove ``key``; whether it was present."""
        with self._guard("deleting a row"):
            return bool(self._cache.delete(key))

    def __len__(self) -> int:
        """Number of cached responses."""
        with self._guard("counting rows"):
            return len(self._cache)

    def close(self) -> None:
        """Close the database connection (idempotent)."""
        with self._guard("closing"):
            self._cache.close()

    def __enter__(self) -> ResponseCache:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"ResponseCache({str(self.directory)!r}, hits={self.hits}, misses={self.misses})"
