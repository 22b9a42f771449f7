"""Checking and repairing a response cache (``bbmia cache verify|repair``), for operators.

:func:`verify` reads every row as the cache would (never unpickling anything) and reports the
bad ones without writing a byte. :func:`repair` keeps every answer it can: bad rows are moved to
the cache's ``Quarantine`` table (:func:`~blackbox_mia.backends.api.http.cache.disk.quarantine_rows`), and a damaged
database (a corrupt SQLite page) is moved aside whole to ``damaged-<time>/`` in the cache
directory and rebuilt from every row that can still be read, row by row. Nothing is deleted.
Run :func:`repair` while no other process uses the cache.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from .disk import (
    CACHE_FILE,
    QUARANTINE_TABLE,
    SQLITE_FULL_SYNC,
    BadRow,
    JsonDisk,
    open_read_only,
    open_store,
    quarantine_rows,
)
from .claims import BUSY_TIMEOUT_S
from .....types import BlackboxMIAError

CACHE_COLUMNS = ("key", "raw", "store_time", "expire_time", "access_time", "access_count", "tag", "size", "mode",
                 "filename", "value")  # diskcache's Cache table, but its rowid
GIVE_UP_AFTER_MISSING = 10_000  # rowids tried past the last one read when the damage hides the largest


@dataclass
class CacheReport:
    """What :func:`verify` or :func:`repair` found in one response cache.

    Attributes:
        directory: the cache directory.
        rows: rows in the ``Cache`` table (readable ones, for a damaged database).
        bad: ``{key: reason}`` of the rows that cannot be trusted as answers (keys that are
            not strings are shown as ``repr``).
        integrity: ``"ok"``, or SQLite's description of the damage.
        quarantined_before: rows already in the ``Quarantine`` table.
        moved_aside: (repair) where the damaged database was moved, else ``None``.
        salvaged: (repair of a damaged database) rows copied to the rebuilt one.
    """

    directory: Path
    rows: int = 0
    bad: dict[str, str] = field(default_factory=dict)
    integrity: str = "ok"
    quarantined_before: int = 0
    moved_aside: Path | None = None
    salvaged: int = 0

    @property
    def healthy(self) -> bool:
        """No bad row and an undamaged database."""
        return not self.bad and self.integrity == "ok"

    def to_dict(self) -> dict:
        """The report as JSON-ready values (bad rows counted by reason)."""
        return {"directory": str(self.directory), "rows": self.rows, "bad_rows": len(self.bad),
                "bad_by_reason": dict(Counter(_reason_kind(r) for r in self.bad.values())),
                "integrity": self.integrity, "quarantined_before": self.quarantined_before,
                "moved_aside": None if self.moved_aside is None else str(self.moved_aside),
                "salvaged": self.salvaged, "healthy": self.healthy}


def _reason_kind(reason: str) -> str:
    """A reason without its details (what comes after the first parenthesis or ``with``)."""
    return reason.split(" (")[0].split(" with ")[0]


def response_dir(path: str | os.PathLike) -> Path:
    """The response cache at ``path``: ``path`` itself, or ``path/responses`` when ``path`` is a
    cache root (``--cache-dir``).

    Raises:
        BlackboxMIAError: neither holds a response cache.
    """
    path = Path(path)
    for candidate in (path, path / "responses"):
        if (candidate / CACHE_FILE).is_file():
            return candidate
    raise BlackboxMIAError(f"no response cache at {path}: neither {path / CACHE_FILE} nor "
                           f"{path / 'responses' / CACHE_FILE} exists")


def row_problem(disk: JsonDisk, key: object, raw: object, mode: object, filename: object, value: object) -> str | None:
    """Why a ``Cache`` row cannot be trusted as an answer (as :meth:`ResponseCache.get` would
    quarantine it), or ``None``; a value file that is missing is a problem too (a miss forever).
    Nothing is unpickled."""
    try:
        disk.get(key, bool(raw))
        stored = disk.fetch(mode, filename, value, False)
    except BadRow as exc:
        return exc.reason
    except OSError as exc:
        return f"its value file cannot be read ({exc.strerror or exc})"
    if not isinstance(stored, dict):
        return f"a JSON {type(stored).__name__} where an answer (an object) belongs"
    return None


def _integrity(connection: sqlite3.Connection) -> str:
    """``"ok"`` or SQLite's ``quick_check`` messages (or the error it stopped with)."""
    try:
        messages = [row[0] for row in connection.execute("PRAGMA quick_check")]
    except sqlite3.DatabaseError as exc:
        return str(exc)
    return "ok" if messages == ["ok"] else "; ".join(messages[:5])


def _quarantined(connection: sqlite3.Connection) -> int:
    try:
        return connection.execute(f"SELECT count(*) FROM {QUARANTINE_TABLE}").fetchone()[0]
    except sqlite3.OperationalError:  # no table: nothing quarantined yet
        return 0


def _rows(connection: sqlite3.Connection, damaged: bool) -> Iterator[tuple]:
    """Every readable ``Cache`` row ``(key, raw, ..., value)`` (:data:`CACHE_COLUMNS`): in one
    scan, or for a damaged database one rowid at a time, skipping what cannot be read."""
    select = f"SELECT {', '.join(CACHE_COLUMNS)} FROM Cache"
    if not damaged:
        yield from connection.execute(select)
        return
    try:
        last = connection.execute("SELECT max(rowid) FROM Cache").fetchone()[0] or 0
    except sqlite3.DatabaseError:
        last = None
    rowid, missing = 0, 0
    while (rowid < last) if last is not None else (missing < GIVE_UP_AFTER_MISSING):
        rowid += 1
        try:
            row = connection.execute(f"{select} WHERE rowid = ?", (rowid,)).fetchone()
        except sqlite3.DatabaseError:
            row = None
        missing = 0 if row is not None else missing + 1
        if row is not None:
            yield row


def verify(directory: str | os.PathLike) -> CacheReport:
    """Check every row of the response cache at ``directory`` (or its ``responses``), read-only.

    Raises:
        BlackboxMIAError: there is no readable cache database there.
    """
    directory = response_dir(directory)
    disk = JsonDisk(str(directory))
    report = CacheReport(directory)
    try:
        connection = open_read_only(directory)
    except sqlite3.Error as exc:
        raise BlackboxMIAError(f"cannot read the response cache {directory}: {exc}") from exc
    with contextlib.closing(connection):
        report.integrity = _integrity(connection)
        report.quarantined_before = _quarantined(connection)
        try:
            for row in _rows(connection, report.integrity != "ok"):
                report.rows += 1
                problem = row_problem(disk, row[0], row[1], row[8], row[9], row[10])
                if problem is not None:
                    report.bad[row[0] if isinstance(row[0], str) else repr(row[0])] = problem
        except sqlite3.DatabaseError as exc:  # damage quick_check did not see
            report.integrity = str(exc)
    return report


def repair(directory: str | os.PathLike) -> CacheReport:
    """Repair the response cache at ``directory`` (or its ``responses``) keeping every answer it
    can: bad rows go to the ``Quarantine`` table; a damaged database is moved to
    ``damaged-<time>/`` and rebuilt from its readable rows (bad ones quarantined). Run it while
    no other process uses the cache.

    Returns:
        the report of what was found (as :func:`verify`) and done.

    Raises:
        BlackboxMIAError: there is no readable cache database there, or it cannot be written.
    """
    report = verify(directory)
    directory = report.directory
    try:
        if report.integrity != "ok":
            _rebuild(report)
        elif report.bad:
            with contextlib.closing(sqlite3.connect(directory / CACHE_FILE, timeout=BUSY_TIMEOUT_S)) as c, c:
                for key, reason in report.bad.items():
                    quarantine_rows(c, [key], reason)
    except (OSError, sqlite3.Error) as exc:
        raise BlackboxMIAError(f"cannot repair the response cache {directory}: {exc}") from exc
    return report


def _rebuild(report: CacheReport) -> None:
    """Move the damaged ``cache.db`` (and its WAL files) aside and rebuild it from its rows."""
    directory = report.directory
    aside = directory / f"damaged-{time.strftime('%Y%m%d-%H%M%S')}"
    aside.mkdir()
    for name in (CACHE_FILE, f"{CACHE_FILE}-wal", f"{CACHE_FILE}-shm"):
        if (directory / name).exists():
            os.replace(directory / name, aside / name)
    report.moved_aside = aside
    open_store(directory, SQLITE_FULL_SYNC).close()  # a fresh database, diskcache's schema and settings
    damaged = open_read_only(aside)
    with contextlib.closing(damaged), contextlib.closing(sqlite3.connect(directory / CACHE_FILE)) as fresh, fresh:
        insert = f"INSERT INTO Cache ({', '.join(CACHE_COLUMNS)}) VALUES ({', '.join('?' * len(CACHE_COLUMNS))})"
        for row in _rows(damaged, True):
            fresh.execute(insert, row)
            report.salvaged += 1
            key = row[0] if isinstance(row[0], str) else repr(row[0])
            if key in report.bad:
                quarantine_rows(fresh, [row[0]], report.bad[key])
                report.salvaged -= 1
