"""``bbmia cache verify|repair``: bad rows found without writing, quarantined by repair, a damaged
database rebuilt from its readable rows; nothing deleted, nothing unpickled."""

from __future__ import annotations

import contextlib
import hashlib
import json
import pickle
import sqlite3
from pathlib import Path

import diskcache
from typer.testing import CliRunner

from blackbox_mia.backends.api.http.cache.responses import ResponseCache
from blackbox_mia.backends.api.http.cache.keys import request_key
from blackbox_mia.backends.api.http.cache.disk import MIN_FILE_SIZE
from blackbox_mia.cli import app

KEYS = [request_key("http://h/v1", "m", "completions", {"prompt": [i]}) for i in range(60)]
runner = CliRunner()


class Planted:
    """Unpickling it writes a marker file."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (self.marker, "code ran"))


def _poisoned(directory: Path, marker: Path) -> None:
    """A cache of 10 good rows (one in a file) and one bad row of each kind."""
    with ResponseCache(directory) as cache:
        cache.put_many([(k, {"n": i}) for i, k in enumerate(KEYS[:10])])
        cache.put(KEYS[10], {"blob": "z" * (MIN_FILE_SIZE + 10)})
        cache.put_many([(k, {"bad": i}) for i, k in enumerate(KEYS[11:14])])
    with diskcache.Cache(str(directory)) as plain:
        plain.set(KEYS[14], Planted(marker))  # pickled value
    with contextlib.closing(sqlite3.connect(directory / "cache.db")) as db, db:  # closed: the WAL checkpointed
        db.execute("UPDATE Cache SET mode = 3 WHERE key = ?", (KEYS[11],))  # text mode
        db.execute("UPDATE Cache SET mode = 2, value = NULL, filename = '../../etc/passwd' WHERE key = ?",
                   (KEYS[12],))
        db.execute("UPDATE Cache SET value = ? WHERE key = ?", (b"[1, 2]", KEYS[13]))  # a JSON list


def _invoke(*args):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_verify_reports_each_bad_row_writes_nothing_and_repair_quarantines_them(tmp_path):
    root, marker = tmp_path / "cache", tmp_path / "marker"
    directory = root / "responses"
    _poisoned(directory, marker)
    before = _digest(directory / "cache.db")
    result = _invoke("cache", "verify", "--cache-dir", root)
    assert result.exit_code == 1 and f"bbmia cache repair {directory}" in result.stderr
    report = json.loads(result.stdout.splitlines()[-1])
    assert (report["rows"], report["bad_rows"], report["integrity"], report["healthy"]) == (15, 4, "ok", False)
    assert report["bad_by_reason"] == {"a row stored in mode 3": 1, "a row stored in mode 2": 1,
                                       "a JSON list where an answer": 1, "a row stored in mode 4": 1}
    assert _digest(directory / "cache.db") == before and not marker.exists()

    result = _invoke("cache", "repair", directory)
    assert result.exit_code == 0 and json.loads(result.stdout.splitlines()[-1])["bad_rows"] == 4
    result = _invoke("cache", "verify", directory)
    assert result.exit_code == 0
    report = json.loads(result.stdout.splitlines()[-1])
    assert (report["rows"], report["bad_rows"], report["quarantined_before"]) == (11, 0, 4)
    with ResponseCache(directory) as cache:
        assert [cache.get(k) for k in KEYS[:10]] == [{"n": i} for i in range(10)] and cache.quarantined == {}
    assert not marker.exists() and Path("/etc/passwd").exists()


def test_repair_rebuilds_a_damaged_database_from_its_readable_rows(tmp_path):
    directory = tmp_path / "responses"
    with ResponseCache(directory) as cache:
        cache.put_many([(k, {"text": f"answer {i} " + "z" * 2000}) for i, k in enumerate(KEYS)])
    db = directory / "cache.db"
    damaged = db.read_bytes()
    page = 4096
    middle = len(damaged) // 2 // page * page
    db.write_bytes(damaged[:middle] + b"\xa5" * page + damaged[middle + page:])  # one page destroyed
    result = _invoke("cache", "verify", directory)
    assert result.exit_code == 1 and json.loads(result.stdout.splitlines()[-1])["integrity"] != "ok"

    result = _invoke("cache", "repair", directory)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout.splitlines()[-1])
    (aside,) = directory.glob("damaged-*")
    assert report["moved_aside"] == str(aside) and (aside / "cache.db").exists()  # kept, not deleted
    assert 40 <= report["salvaged"] < 60  # one page of ~2 kB rows lost, the rest kept
    with ResponseCache(directory) as cache:
        found = {i for i, k in enumerate(KEYS) if cache.get(k) == {"text": f"answer {i} " + "z" * 2000}}
        assert len(cache) == len(found) == report["salvaged"] and cache.quarantined == {}
    assert _invoke("cache", "verify", directory).exit_code == 0


def test_verify_of_a_directory_without_a_cache_is_a_clear_error(tmp_path):
    result = _invoke("cache", "verify", tmp_path / "nothing")
    assert result.exit_code == 2 and "no response cache at" in result.stderr and "Traceback" not in result.output


def test_the_quarantined_pickle_is_kept_byte_for_byte(tmp_path):
    marker = tmp_path / "marker"
    _poisoned(tmp_path, marker)
    assert _invoke("cache", "repair", tmp_path).exit_code == 0
    with sqlite3.connect(tmp_path / "cache.db") as db:
        (value,) = db.execute("SELECT value FROM Quarantine WHERE key = ?", (KEYS[14],)).fetchone()
    assert not marker.exists()
    pickle.loads(value)  # control: it was a real planted pickle
    assert marker.read_text() == "code ran"
