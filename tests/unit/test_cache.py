"""ResponseCache: JSON-only storage, durable puts, refusal of planted pickle rows, request keys."""

from __future__ import annotations

import json
import os
import re
import pickle
import sqlite3
from pathlib import Path

import diskcache
import pytest

from blackbox_mia.backends.api.http.cache.responses import ResponseCache
from blackbox_mia.backends.api.http.cache.keys import request_key
from blackbox_mia.backends.api.http.cache.disk import MIN_FILE_SIZE, BadRow, JsonDisk, JsonText
from blackbox_mia.types import BlackboxMIAError

KEY = request_key("http://h/v1", "m", "completions", {"prompt": [1, 2], "max_tokens": 1})


def _leave_marker(path: str, padding: str = "") -> str:
    Path(path).write_text("code ran")
    return "pwned"


class Planted:
    """An object whose unpickling runs code (it writes a marker file); ``padding`` in characters."""

    def __init__(self, marker: Path, padding: int = 0):
        self.marker = marker
        self.padding = padding

    def __reduce__(self):
        return (_leave_marker, (str(self.marker), "p" * self.padding))


def test_roundtrip_len_stats_and_persistence(tmp_path):
    value = {"choices": [{"text": " A", "logprobs": None}], "usage": {"prompt_tokens": 2}, "x": 1.5}
    with ResponseCache(tmp_path) as cache:
        assert cache.get(KEY) is None
        cache.put(KEY, value)
        assert cache.get(KEY) == value
        assert (len(cache), cache.hits, cache.misses) == (1, 1, 1)
        cache.put(KEY, {"v": 2})  # overwrite
        assert cache.get(KEY) == {"v": 2} and len(cache) == 1
    with ResponseCache(tmp_path) as again:  # a rerun sees what the first run wrote
        assert again.get(KEY) == {"v": 2}
        assert again.delete(KEY) and again.get(KEY) is None and len(again) == 0


def test_values_are_json_bytes_in_sqlite_and_in_files(tmp_path):
    small, large = {"a": "é", "n": [1, 2.5, None]}, {"blob": "z" * (MIN_FILE_SIZE + 10)}
    key_large = request_key("http://h/v1", "m", "chat", {"x": 1})
    with ResponseCache(tmp_path) as cache:
        cache.put(KEY, small)
        cache.put(key_large, large)
        assert cache.get(key_large) == large
    with sqlite3.connect(tmp_path / "cache.db") as db:
        rows = dict(((k, (raw, mode, value)) for k, raw, mode, value in
                     db.execute("SELECT key, raw, mode, value FROM Cache")))
    raw, mode, value = rows[KEY]
    assert (raw, mode) == (1, 1) and json.loads(value.decode("utf-8")) == small  # raw key, raw JSON bytes
    raw, mode, value = rows[key_large]
    assert (raw, mode, value) == (1, 2, None)  # binary mode: the JSON lives in a file
    (file,) = list(tmp_path.rglob("*.val"))
    assert json.loads(file.read_bytes()) == large


def test_rejects_non_json_values_and_non_str_keys(tmp_path):
    with ResponseCache(tmp_path) as cache:
        with pytest.raises(BlackboxMIAError, match="JSON"):
            cache.put(KEY, {"s": {1, 2}})
        with pytest.raises(BlackboxMIAError, match="dict"):
            cache.put(KEY, [1, 2])
        with pytest.raises(BlackboxMIAError, match="str"):
            cache.put(("tuple", "key"), {"a": 1})
        assert len(cache) == 0


def _quarantine(directory: Path) -> list[tuple]:
    """The rows of the Quarantine table: (key, mode, filename, value, reason)."""
    with sqlite3.connect(directory / "cache.db") as db:
        return list(db.execute("SELECT key, mode, filename, value, reason FROM Quarantine"))


def _assert_quarantined(directory: Path, key: str, reason: str, caplog) -> tuple:
    """A bad row of ``key``: read as a miss (asked again), moved to the Quarantine table with a
    reason matching ``reason``, reported once; the quarantined row is returned."""
    with caplog.at_level("WARNING", logger="blackbox_mia.backends.api.http.cache.responses"), ResponseCache(directory) as cache:
        before = len(cache)
        assert cache.get(key) is None and cache.get(key) is None
        assert list(cache.quarantined) == [key] and re.search(reason, cache.quarantined[key])
        assert len(cache) == before - 1  # out of the Cache table (diskcache's count follows)
        cache.put(key, {"asked": "again"})  # the answer asked again takes its place
        assert cache.get(key) == {"asked": "again"}
    reports = [r.getMessage() for r in caplog.records if "quarantined row" in r.getMessage()]
    assert len(reports) == 1 and key in reports[0] and str(directory) in reports[0]
    (row,) = _quarantine(directory)
    assert row[0] == key and re.search(reason, row[4])
    return row


@pytest.mark.parametrize("padding", [0, MIN_FILE_SIZE + 100], ids=["pickle-in-sqlite", "pickle-in-file"])
def test_planted_pickle_row_is_quarantined_not_unpickled(tmp_path, padding, caplog):
    marker = tmp_path / "marker"
    directory = tmp_path / "responses"
    with diskcache.Cache(str(directory)) as plain:  # diskcache's default Disk pickles the value
        plain.set(KEY, Planted(marker, padding))
    _, mode, filename, value, _ = _assert_quarantined(directory, KEY, "mode 4", caplog)
    assert not marker.exists()
    # Control: the quarantined row is a real pickle that runs code when unpickled.
    data = value if filename is None else (directory / filename).read_bytes()
    assert pickle.loads(data) == "pwned" and marker.read_text() == "code ran"


def test_pickled_key_is_refused(tmp_path):
    marker = tmp_path / "marker"
    disk = JsonDisk(str(tmp_path))
    with pytest.raises(BadRow, match="not a raw string"):
        disk.get(sqlite3.Binary(pickle.dumps(Planted(marker))), raw=False)
    assert not marker.exists()
    assert disk.get(KEY, raw=True) == KEY


def _plant(directory: Path, sql: str, *args) -> None:
    """Write good rows and KEY, then alter KEY's row with ``sql`` (``?`` placeholders, KEY last)."""
    with ResponseCache(directory) as cache:
        cache.put_many([(k, {"n": i}) for i, k in enumerate(_keys(5))] + [(KEY, {"a": 1})])
    with sqlite3.connect(directory / "cache.db") as db:
        db.execute(sql, (*args, KEY))


def test_file_name_outside_the_cache_is_quarantined_neither_read_nor_removed(tmp_path, caplog):
    directory = tmp_path / "responses"
    victim = tmp_path / "victim.json"
    victim.write_text('{"secret": 1}')
    _plant(directory, "UPDATE Cache SET mode = 2, value = NULL, filename = '../victim.json' WHERE key = ?")
    row = _assert_quarantined(directory, KEY, "file '../victim.json'", caplog)
    assert row[2] == "../victim.json"
    assert victim.read_text() == '{"secret": 1}'
    with ResponseCache(directory) as cache:
        assert [cache.get(k) for k in _keys(5)] == [{"n": i} for i in range(5)]


@pytest.mark.parametrize(("sql", "args", "reason"), [
    ("UPDATE Cache SET mode = 3, value = ? WHERE key = ?", ('{"a": 1}',), "mode 3"),  # diskcache's text mode
    ("UPDATE Cache SET value = ? WHERE key = ?", (b"[1, 2, 3]",), "JSON list"),
    ("UPDATE Cache SET value = ? WHERE key = ?", (b'{"a": \xff',), "not UTF-8 JSON"),
    ("UPDATE Cache SET value = ? WHERE key = ?", (b"7",), "JSON int"),
], ids=["text-mode", "json-list", "not-json", "json-number"])
def test_a_bad_row_among_good_ones_is_quarantined_and_asked_again(tmp_path, sql, args, reason, caplog):
    directory = tmp_path / "responses"
    _plant(directory, sql, *args)
    _assert_quarantined(directory, KEY, reason, caplog)
    with ResponseCache(directory) as cache:
        assert [cache.get(k) for k in _keys(5)] == [{"n": i} for i in range(5)] and cache.quarantined == {}


def test_default_directory_is_under_cache_root(tmp_path, monkeypatch):
    monkeypatch.setenv("BBMIA_CACHE_DIR", str(tmp_path / "root"))
    with ResponseCache() as cache:
        assert cache.directory == tmp_path / "root" / "responses"
        cache.put(KEY, {"a": 1})
    assert (tmp_path / "root" / "responses" / "cache.db").exists()


def test_request_key_is_canonical_and_covers_every_parameter():
    base = {"prompt": [1, 2, 3], "max_tokens": 1, "temperature": 0.0, "logprobs": 5, "logit_bias": {"7": 100}}
    key = request_key("http://h:8000/v1", "m", "completions", base)
    assert len(key) == 64 and int(key, 16) >= 0
    reordered = dict(reversed(list(base.items())))
    assert request_key("http://h:8000/v1/", "m", "completions", reordered) == key
    variants = [
        ("http://h:8001/v1", "m", "completions", base),
        ("http://h:8000/v1", "m2", "completions", base),
        ("http://h:8000/v1", "m", "chat", base),
        ("http://h:8000/v1", "m", "completions", {**base, "logit_bias": {"7": 99}}),
        ("http://h:8000/v1", "m", "completions", {**base, "logit_bias": {"8": 100}}),
        ("http://h:8000/v1", "m", "completions", {**base, "prompt": [1, 2]}),
        ("http://h:8000/v1", "m", "completions", {**base, "temperature": 1.0}),
        ("http://h:8000/v1", "m", "completions", {**base, "echo": True}),
        ("http://h:8000/v1", "m", "completions", {**base, "seed": 1}),
    ]
    keys = {request_key(*v) for v in variants}
    assert len(keys) == len(variants) and key not in keys
    with pytest.raises(BlackboxMIAError, match="JSON"):
        request_key("http://h/v1", "m", "completions", {"prompt": object()})


# -- corruption and durability -------------------------------------------------------------------

def _keys(n: int) -> list[str]:
    return [request_key("http://h/v1", "m", "completions", {"prompt": [i]}) for i in range(n)]


def test_corrupted_database_page_gives_a_clear_error_pointing_at_repair(tmp_path):
    directory = tmp_path / "responses"
    keys = _keys(40)
    with ResponseCache(directory) as cache:
        for i, key in enumerate(keys):
            cache.put(key, {"choices": [{"text": f"answer {i} " + "z" * 2000}]})
    db = directory / "cache.db"
    size = db.stat().st_size
    assert size > 64 * 1024  # many pages: the middle holds rows, not the header
    page = 4096
    with open(db, "r+b") as f:
        f.seek(size // 2 // page * page)
        f.write(b"\xa5" * page)  # one damaged page in the middle
    with pytest.raises(BlackboxMIAError) as err:
        with ResponseCache(directory) as cache:
            for key in keys:
                cache.get(key)
            cache.put(keys[0], {"a": 1})
            len(cache)
    message = str(err.value)
    assert str(directory) in message and f"`bbmia cache repair {directory}`" in message and "delete" not in message
    assert isinstance(err.value.__cause__, sqlite3.DatabaseError) and "malformed" in message


def test_truncated_file_value_is_quarantined(tmp_path, caplog):
    with ResponseCache(tmp_path) as cache:
        cache.put(KEY, {"blob": "z" * (MIN_FILE_SIZE + 10)})
    (file,) = list(tmp_path.rglob("*.val"))
    data = file.read_bytes()
    file.write_bytes(data[: len(data) // 2])  # a value cut short, as by a crash
    _assert_quarantined(tmp_path, KEY, "not UTF-8 JSON", caplog)
    assert file.read_bytes() == data[: len(data) // 2]  # kept aside with its row, not removed


def test_puts_are_on_disk_before_put_returns(tmp_path, monkeypatch):
    synced = []
    real_fsync = os.fsync

    def fsync(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    with ResponseCache(tmp_path) as cache:
        assert cache._cache._sql("PRAGMA synchronous").fetchone()[0] == 2  # FULL: commits are fsynced
        cache.put(KEY, {"blob": "z" * (MIN_FILE_SIZE + 10)})
        (file,) = list(tmp_path.rglob("*.val"))
        # the value file and the directories that name it are fsynced before the row is committed
        assert str(file) in synced and str(file.parent) in synced and str(tmp_path) in synced


# -- put_soon: the writer thread commits queued rows in batches ---------------------------------


def test_put_soon_commits_waiting_rows_in_one_transaction_and_fails_only_a_bad_row(tmp_path, monkeypatch):
    import threading
    import time

    batches, gate = [], threading.Event()
    cache = ResponseCache(tmp_path)
    original = cache.put_many

    def recording(rows):
        batches.append([k for k, _ in rows])
        gate.wait(10)  # hold the first batch so the next rows queue up behind it
        original(rows)

    monkeypatch.setattr(cache, "put_many", recording)
    keys = [request_key("http://h/v1", "m", "completions", {"prompt": [i]}) for i in range(5)]
    first = cache.put_soon(keys[0], {"i": 0})
    deadline = time.monotonic() + 10
    while not batches and time.monotonic() < deadline:  # the writer took the first row
        time.sleep(0.001)
    later = [cache.put_soon(k, {"i": i}) for i, k in enumerate(keys[1:4], 1)]
    bad = cache.put_soon(keys[4], {"x": float("nan")})
    gate.set()
    assert first.result(10) is None and [f.result(10) for f in later] == [None] * 3
    with pytest.raises(BlackboxMIAError, match="not JSON-serialisable"):
        bad.result(10)
    assert batches == [keys[:1], keys[1:]]  # the four waiting rows went as one batch (then one by one)
    with ResponseCache(tmp_path) as other:  # another connection: the rows are committed
        assert [other.get(k) for k in keys] == [{"i": 0}, {"i": 1}, {"i": 2}, {"i": 3}, None]
    cache.close()


def test_close_writes_every_queued_row_first(tmp_path):
    cache = ResponseCache(tmp_path)
    futures = [cache.put_soon(request_key("http://h/v1", "m", "chat", {"n": i}), {"n": i}) for i in range(50)]
    cache.close()
    assert all(f.done() and f.exception() is None for f in futures)
    with ResponseCache(tmp_path) as again:
        assert len(again) == 50


def test_an_answer_body_is_stored_byte_for_byte_as_raw_json_never_pickled(tmp_path):
    body = '\ufeff{"choices": [{"text": "caf\u00e9", "logprobs": [-0.25, -1e-5]}]}'.encode("utf-8")  # BOM, spaces
    key = request_key("http://h/v1", "m", "completions", {"prompt": [1]})
    with ResponseCache(tmp_path) as cache:
        cache.put(key, JsonText(body))
        assert cache.get(key) == {"choices": [{"text": "café", "logprobs": [-0.25, -1e-05]}]}
    with sqlite3.connect(tmp_path / "cache.db") as db:
        mode, value = db.execute("SELECT mode, value FROM Cache WHERE key = ?", (key,)).fetchone()
    assert mode == diskcache.core.MODE_RAW and bytes(value) == body  # not encoded again, not pickled
