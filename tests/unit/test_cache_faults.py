"""ResponseCache under operator faults: read-only caches (shared, archived audits) and full disks.

Running as root, chmod does not stop writes: the read-only cases open the cache read-only
(SQLite ``mode=ro``), or simulate the error a read-only database gives; the chmod case runs only
as another user.
"""

from __future__ import annotations

import errno
import json
import hashlib
import os
import sqlite3
from pathlib import Path

import diskcache
import pytest

from blackbox_mia.backends.api.http.client import ApiClient
from blackbox_mia.backends.api.http.cache.responses import ResponseCache
from blackbox_mia.backends.api.http.cache.keys import request_key
from blackbox_mia.backends.api.http.cache.disk import MIN_FILE_SIZE, JsonDisk
from blackbox_mia.option_names import for_command_line
from blackbox_mia.types import BlackboxMIAError

from ..helpers_client import MODEL, config

KEYS = [request_key("http://h/v1", "m", "completions", {"prompt": [i]}) for i in range(6)]


def _fill(directory: Path) -> None:
    with ResponseCache(directory) as cache:
        cache.put_many([(k, {"n": i}) for i, k in enumerate(KEYS[:4])])
        cache.put(KEYS[4], {"blob": "z" * (MIN_FILE_SIZE + 10)})  # one value in a file


def _snapshot(directory: Path) -> dict[str, str]:
    """Every file under ``directory`` with the sha256 of its bytes, but SQLite's WAL files (a
    ``mode=ro`` reader of a writable directory makes them, as any reader of a WAL database)."""
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file() and not p.name.endswith(("-wal", "-shm"))}


def test_read_only_cache_serves_hits_writes_nothing_and_names_the_fix_on_a_miss(tmp_path):
    directory = tmp_path / "root" / "responses"
    _fill(directory)
    before = _snapshot(directory)
    with ResponseCache(directory, read_only=True) as cache:
        assert cache.read_only == "opened read-only" and len(cache) == 5
        assert [cache.get(k) for k in KEYS[:4]] == [{"n": i} for i in range(4)]
        assert cache.get(KEYS[4]) == {"blob": "z" * (MIN_FILE_SIZE + 10)}
        assert cache.get(KEYS[5]) is None and (cache.hits, cache.misses) == (5, 1)
        with pytest.raises(BlackboxMIAError) as err:
            cache.claim_many([KEYS[5]])  # a miss the client would ask for
        message = str(err.value)
        assert f"{directory} is read-only" in message and "1 request(s) not in it" in message
        assert "as cache_dir= (" in message and "as --cache-dir (" in for_command_line(err.value)
        assert f"cp -r {directory.parent} NEW_DIR" in message
        with pytest.raises(BlackboxMIAError, match="is read-only"):
            cache.put(KEYS[5], {"n": 5})
        with pytest.raises(BlackboxMIAError, match="is read-only"):
            cache.put_soon(KEYS[5], {"n": 5}).result(1)
        assert cache.delete(KEYS[0]) is False and cache.claim_many([]) == []
    assert _snapshot(directory) == before  # not a byte written: no journal, no claims database


def test_a_bad_row_in_a_read_only_cache_is_reported_and_left_in_place(tmp_path, caplog):
    directory = tmp_path / "responses"
    _fill(directory)
    with sqlite3.connect(directory / "cache.db") as db:
        db.execute("UPDATE Cache SET value = ? WHERE key = ?", (b"[1]", KEYS[0]))
    before = _snapshot(directory)
    with caplog.at_level("WARNING", logger="blackbox_mia.backends.api.http.cache.responses"), ResponseCache(directory, read_only=True) as cache:
        assert cache.get(KEYS[0]) is None and cache.get(KEYS[0]) is None and cache.get(KEYS[1]) == {"n": 1}
        assert list(cache.quarantined) == [KEYS[0]] and "JSON list" in cache.quarantined[KEYS[0]]
    reports = [r.getMessage() for r in caplog.records if "quarantined row" in r.getMessage()]
    assert len(reports) == 1 and "left in place: the cache is read-only" in reports[0]
    assert _snapshot(directory) == before


def test_a_cache_that_cannot_be_written_is_opened_read_only(tmp_path, monkeypatch, caplog):
    directory = tmp_path / "responses"
    _fill(directory)

    def refuse(*args, **kwargs):  # what diskcache raises opening a database it may not write
        raise sqlite3.OperationalError("attempt to write a readonly database")

    monkeypatch.setattr("blackbox_mia.backends.api.http.cache.responses.open_store", refuse)
    with caplog.at_level("WARNING", logger="blackbox_mia.backends.api.http.cache.responses"), ResponseCache(directory) as cache:
        assert "readonly database" in cache.read_only and cache.get(KEYS[1]) == {"n": 1}
    assert any("using it read-only" in r.getMessage() for r in caplog.records)


def test_any_other_failure_to_open_is_not_mistaken_for_read_only(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise sqlite3.DatabaseError("file is not a database")

    monkeypatch.setattr("blackbox_mia.backends.api.http.cache.responses.open_store", broken)
    with pytest.raises(BlackboxMIAError, match="not a database.*bbmia cache repair"):
        ResponseCache(tmp_path)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through chmod; see the mode=ro tests above")
def test_a_chmod_read_only_cache_is_used_read_only(tmp_path):
    directory = tmp_path / "responses"
    _fill(directory)
    paths = [directory, *directory.rglob("*")]
    for path in paths:
        path.chmod(path.stat().st_mode & ~0o222)
    try:
        with ResponseCache(directory) as cache:
            assert cache.read_only is not None and cache.get(KEYS[2]) == {"n": 2}
            with pytest.raises(BlackboxMIAError, match="is read-only"):
                cache.claim_many([KEYS[5]])
    finally:
        for path in paths:
            path.chmod(path.stat().st_mode | 0o200)


# -- a full disk ----------------------------------------------------------------------------------


def _no_space(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize("where", ["sqlite", "file"])
def test_a_full_disk_names_the_directory_and_the_space_and_keeps_every_answer(tmp_path, monkeypatch, where):
    directory = tmp_path / "responses"
    _fill(directory)
    value = {"x": "y" * 100} if where == "sqlite" else {"blob": "w" * (MIN_FILE_SIZE + 10)}
    if where == "sqlite":  # SQLite's own error for a full disk
        def full(self, *args, **kwargs):
            raise sqlite3.OperationalError("database or disk is full")
        monkeypatch.setattr(diskcache.Cache, "set", full)
    else:
        monkeypatch.setattr(JsonDisk, "store", _no_space)
    with ResponseCache(directory) as cache:
        for write in (lambda: cache.put(KEYS[5], value), lambda: cache.put_soon(KEYS[5], value).result(10)):
            with pytest.raises(BlackboxMIAError) as err:
                write()
            message = str(err.value)
            assert f"no space left on the disk of the response cache {directory} while writing rows" in message
            needed = len(KEYS[5]) + len(str(value).replace(" ", "").replace("'", '"'))
            assert f"it needed about {needed:,} bytes" in message and "bytes free" in message
            assert "every answer already cached is kept" in message and "delete" not in message
    monkeypatch.undo()
    with ResponseCache(directory) as cache:  # finished work intact
        assert [cache.get(k) for k in KEYS[:4]] == [{"n": i} for i in range(4)] and cache.get(KEYS[5]) is None
        assert len(cache) == 5


def test_a_full_disk_while_claiming_stops_before_anything_is_paid(tmp_path, monkeypatch):
    monkeypatch.setattr("blackbox_mia.backends.api.http.cache.claims.ClaimTable.claim_many", _no_space)
    with ResponseCache(tmp_path) as cache, pytest.raises(BlackboxMIAError, match="no space left.*while claiming"):
        cache.claim_many([KEYS[0]])


# -- through the client -----------------------------------------------------------------------------


async def test_a_fully_cached_rerun_on_a_read_only_cache_sends_nothing(fake, tmp_path):
    directory = tmp_path / "responses"
    first = ApiClient(config(fake.base_url), cache=ResponseCache(directory))
    answers = [await first.complete([i, 2], logprobs=1) for i in range(3)]
    await first.close()
    assert fake.hits == 3
    before = _snapshot(directory)
    rerun = ApiClient(config(fake.base_url), cache=ResponseCache(directory, read_only=True))
    again = [await rerun.complete([i, 2], logprobs=1) for i in range(3)]
    assert again == [{**a, "cached": True} for a in answers] and fake.hits == 3 and rerun.usage.requests == 0
    with pytest.raises(BlackboxMIAError, match="is read-only"):
        await rerun.complete([9, 2], logprobs=1)  # a miss: refused before it is sent (never paid, then lost)
    await rerun.close()
    assert fake.hits == 3 and _snapshot(directory) == before


async def test_a_poisoned_row_is_asked_again_by_the_client(fake, tmp_path):
    directory = tmp_path / "responses"
    client = ApiClient(config(fake.base_url), cache=ResponseCache(directory))
    answer = await client.complete([1, 2], logprobs=1)
    await client.close()
    key = request_key(fake.base_url, MODEL, "completions",
                      {"prompt": [1, 2], "max_tokens": 1, "temperature": 0.0, "logprobs": 1})
    with sqlite3.connect(directory / "cache.db") as db:
        db.execute("UPDATE Cache SET mode = 3 WHERE key = ?", (key,))  # text mode
    rerun = ApiClient(config(fake.base_url), cache=ResponseCache(directory))
    assert await rerun.complete([1, 2], logprobs=1) == answer and fake.hits == 2
    assert "mode 3" in rerun.cache.quarantined[key]
    assert await rerun.complete([1, 2], logprobs=1) == {**answer, "cached": True} and fake.hits == 2
    await rerun.close()


# -- --out on a full disk -------------------------------------------------------------------------


def test_out_on_a_full_disk_names_the_path_and_keeps_the_rows_written(tiny_model_dir, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from blackbox_mia.cli import app

    items, out = tmp_path / "items.jsonl", tmp_path / "out" / "scores.jsonl"
    items.write_text("".join(json.dumps({"id": f"t{i}", "text": f"Tom has {i} apples."}) + "\n" for i in range(3)))
    real_fsync, synced = os.fsync, []

    def fsync(fd):  # the second row of --out finds the disk full
        if os.readlink(f"/proc/self/fd/{fd}") == str(out):
            synced.append(fd)
            if len(synced) == 2:
                _no_space()
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    args = ["score", str(items), "--local", str(tiny_model_dir), "--scorers", "loss", "--out", str(out)]
    result = CliRunner().invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 2 and f"error: cannot write {out}: No space left on device" in result.output
    assert "Traceback" not in result.output and "[Errno" not in result.output
    assert [json.loads(line)["id"] for line in out.read_text().splitlines()][:1] == ["t0"]
    monkeypatch.undo()
    assert CliRunner().invoke(app, args, catch_exceptions=False).exit_code == 0  # resumes
    assert sorted(json.loads(line)["id"] for line in out.read_text().splitlines()) == ["t0", "t1", "t2"]
