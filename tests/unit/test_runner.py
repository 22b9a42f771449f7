"""Runner: rows saved the moment an item is scored, resume after a kill (cut last line), strict and
atomic JSON, clear errors for bad result and configuration files. Fake backends, no model."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest

from blackbox_mia.backends.base import LOGPROBS, Backend
from blackbox_mia.datasets import Item, limit_items
from blackbox_mia.io import write_json_atomic
from blackbox_mia.results import ScoredText, read_rows
from blackbox_mia.results_file import config_path_for, repair_tail
from blackbox_mia.runner import score_items, score_texts
from blackbox_mia.scorers import parse_scorers
from blackbox_mia.types import BlackboxMIAError, Provenance, TokenLogprobs

CONFIG = {"run": "test", "scorers": ["loss", "lowercase"]}


def fake_lp(text: str) -> TokenLogprobs:
    """Deterministic per-character 'log-probs': lp_i = -(1 + ord(c) % 7) / 2 (nats)."""
    values = [-(1 + ord(c) % 7) / 2 for c in text]
    return TokenLogprobs(np.arange(len(text)), list(text), values, (0,), Provenance("fake", "fake", "fixed", True))


class Killed(RuntimeError):
    """The fake backend 'dies' (like a killed process) after a number of texts."""


class StreamingFake(Backend):
    """Finishes texts in reverse order, calls ``on_done`` for each, and dies after ``kill_after``.

    After every ``on_done`` it records how many complete lines ``watch`` (the output) holds, to
    check that rows are on disk at that moment, not later.
    """

    features = frozenset({LOGPROBS})

    def __init__(self, kill_after: int | None = None, watch=None):
        super().__init__()
        self.kill_after = kill_after
        self.watch = watch
        self.processed: list[str] = []
        self.lines_on_disk: list[int] = []
        self.calls: list[list[str]] = []

    async def _alogprobs(self, texts, progress, on_done, vocab_stats=None):
        self.calls.append(list(texts))
        results = {}
        for i in reversed(range(len(texts))):
            if self.kill_after is not None and len(self.processed) == self.kill_after:
                raise Killed(f"killed after {self.kill_after} texts")
            results[i] = fake_lp(texts[i])
            self.processed.append(texts[i])
            if on_done is not None:
                on_done(i, results[i])
                if self.watch is not None:
                    self.lines_on_disk.append(self.watch.read_text().count("\n"))
        return [results[i] for i in range(len(texts))]

    def describe(self):
        return {"backend": "fake"}


class SilentFake(Backend):
    """A backend that never calls ``on_done``: everything arrives when logprobs returns."""

    features = frozenset({LOGPROBS})

    def __init__(self):
        super().__init__()
        self.calls = 0

    async def _alogprobs(self, texts, progress, on_done, vocab_stats=None):
        self.calls += 1
        return [fake_lp(t) for t in texts]

    def describe(self):
        return {"backend": "silent"}


ITEMS = [
    Item("a", "Tom has Three apples", 1),
    Item("b", "all lowercase here", 0),  # text == text.lower(): one target text only
    Item("c", "Ivy Walks To School", 1),
    Item("d", "zed sells kites", 0),
    Item("e", "A Robe takes Two bolts", None),
]
SCORERS = parse_scorers("loss,lowercase")


def expected_scores(text: str) -> dict[str, float]:
    own, low = fake_lp(text).logprobs.mean(), fake_lp(text.lower()).logprobs.mean()
    return {"loss": float(own), "lowercase": float(low / own)}


def disk_rows(path) -> dict[str, dict]:
    return {row["id"]: row for row in map(json.loads, path.read_text().splitlines())}


# The runner asks for the target texts item by item (a, a.lower(), b, c, c.lower(), d, e,
# e.lower()); the fake finishes them last first: e.lower(), e, d, c.lower(), c, b, a.lower(), a.
@pytest.mark.parametrize(
    "kill_after, finished",
    [(1, set()), (2, {"e"}), (3, {"d", "e"}), (4, {"d", "e"}), (5, {"c", "d", "e"}), (7, {"b", "c", "d", "e"})],
)
def test_killed_run_keeps_exactly_the_finished_items(tmp_path, kill_after, finished):
    out = tmp_path / "scores.jsonl"
    fake = StreamingFake(kill_after=kill_after, watch=out)
    with pytest.raises(Killed):
        score_items(ITEMS, SCORERS, {"target": fake}, out, CONFIG, progress=False)
    assert finished == {it.id for it in ITEMS if {it.text, it.text.lower()} <= set(fake.processed)}
    rows = disk_rows(out)
    assert set(rows) == finished
    for item_id, row in rows.items():
        text = next(it.text for it in ITEMS if it.id == item_id)
        assert row["scores"] == pytest.approx(expected_scores(text))
        assert row["n_tokens"] == len(text)
    # each row was on disk as soon as its last text finished (before the next text started)
    assert fake.lines_on_disk[-1] == len(finished)
    assert json.loads(config_path_for(out).read_text()) == CONFIG


def test_resume_after_kill_scores_only_the_rest_and_orders_the_file(tmp_path):
    out = tmp_path / "scores.jsonl"
    with pytest.raises(Killed):
        score_items(ITEMS, SCORERS, {"target": StreamingFake(kill_after=4)}, out, CONFIG, progress=False)
    saved = set(disk_rows(out))
    again = StreamingFake()
    rows = score_items(ITEMS, SCORERS, {"target": again}, out, CONFIG, progress=False)
    asked = set(again.calls[0])
    assert all(it.text not in asked for it in ITEMS if it.id in saved)  # finished items cost nothing
    assert [r.id for r in rows] == [it.id for it in ITEMS]
    assert [json.loads(line)["id"] for line in out.read_text().splitlines()] == [it.id for it in ITEMS]
    fresh = score_items(ITEMS, SCORERS, {"target": StreamingFake()}, None, progress=False)
    assert [r.scores for r in rows] == [r.scores for r in fresh]
    assert [r.label for r in rows] == [it.label for it in ITEMS]


def test_backend_that_reports_nothing_still_writes_every_row(tmp_path):
    out = tmp_path / "scores.jsonl"
    old = SilentFake()
    rows = score_items(ITEMS, SCORERS, {"target": old}, out, CONFIG, chunk_size=2, progress=False)
    assert old.calls == 3
    assert [r.id for r in rows] == list(disk_rows(out)) == [it.id for it in ITEMS]
    for it, r in zip(ITEMS, rows):
        assert r.scores == pytest.approx(expected_scores(it.text))


def test_score_texts_reference_first_and_on_scored_in_completion_order():
    order: list[str] = []

    class Recording(StreamingFake):
        def __init__(self, role):
            super().__init__()
            self.role = role

        async def _alogprobs(self, texts, progress, on_done, vocab_stats=None):
            order.append(self.role)
            return await super()._alogprobs(texts, progress, on_done, vocab_stats)

    texts = ["One Two", "three four", "One Two"]  # a duplicate text is scored for both items
    seen = []
    results = score_texts(texts, parse_scorers("loss,ref"), {"target": Recording("target"),
                          "reference": Recording("reference")},
                          on_scored=lambda j, scores, lp: seen.append((j, scores["loss"].value)))
    assert order == ["reference", "target"]
    assert sorted(j for j, _ in seen) == [0, 1, 2]
    assert seen[0][0] == 1  # the fake finishes the last distinct text first
    assert [s["ref"].value for s, _ in results] == [0.0, 0.0, 0.0]
    assert results[0][0] == results[2][0]


def test_cut_last_line_is_dropped_and_redone(tmp_path):
    out = tmp_path / "scores.jsonl"
    score_items(ITEMS[:3], SCORERS, {"target": StreamingFake()}, out, CONFIG, progress=False)
    full = out.read_text()
    out.write_text(full[: len(full) - 20])  # the kill cut row "c" mid-write
    again = StreamingFake()
    rows = score_items(ITEMS[:3], SCORERS, {"target": again}, out, CONFIG, progress=False)
    assert set(again.calls[0]) == {ITEMS[2].text, ITEMS[2].text.lower()}
    assert out.read_text() == full and [r.id for r in rows] == ["a", "b", "c"]


def test_complete_last_row_without_newline_is_kept(tmp_path):
    out = tmp_path / "scores.jsonl"
    score_items(ITEMS[:3], SCORERS, {"target": StreamingFake()}, out, CONFIG, progress=False)
    full = out.read_text()
    out.write_text(full.rstrip("\n"))
    assert repair_tail(out) is False and out.read_text() == full
    out.write_text(full + '{"id": "d", "n_tok')
    assert repair_tail(out) is True and out.read_text() == full
    out.write_text('{"id": "x", "sc')  # a single cut line: nothing left
    assert repair_tail(out) is True and out.read_text() == ""


def write_done(tmp_path, lines: list[str]):
    out = tmp_path / "scores.jsonl"
    out.write_text("".join(line + "\n" for line in lines))
    write_json_atomic(config_path_for(out), CONFIG)
    return out


GOOD = json.dumps({"id": "a", "n_tokens": 3, "scores": {"loss": -1.0, "lowercase": 1.0}, "label": 1})


@pytest.mark.parametrize(
    "bad, message",
    [
        ('{"id": "b", "n_tokens": 3, "sc', "scores.jsonl:2: malformed JSON"),
        ("[1, 2]", "scores.jsonl:2: expected a JSON object"),
        ('{"id": 5, "n_tokens": 3, "scores": {"loss": 1, "lowercase": 1}}', "scores.jsonl:2: malformed result row ('id'"),
        ('{"id": "b", "n_tokens": "3", "scores": {"loss": 1, "lowercase": 1}}', "scores.jsonl:2: malformed result row ('n_tokens'"),
        ('{"id": "b", "n_tokens": 3, "scores": [1, 2]}', "scores.jsonl:2: malformed result row ('scores'"),
        ('{"id": "b", "n_tokens": 3, "scores": {"loss": "x", "lowercase": 1}}', "score 'loss' must be a number"),
        ('{"id": "b", "n_tokens": 3, "scores": {"loss": 1}}', "do not match the scorers"),
        ('{"id": "b", "n_tokens": 3, "label": 2, "scores": {"loss": 1, "lowercase": 1}}', "'label' must be 0, 1"),
    ],
)
def test_malformed_middle_line_is_an_error_naming_the_line(tmp_path, bad, message):
    out = write_done(tmp_path, [GOOD, bad, GOOD.replace('"a"', '"c"')])
    with pytest.raises(BlackboxMIAError) as info:
        score_items(ITEMS[:3], SCORERS, {"target": StreamingFake()}, out, CONFIG, progress=False)
    assert message in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize(
    "config_text, message",
    [
        ("[1, 2]", "run configuration must be a JSON object, got an array"),
        ('{"run": ', "malformed JSON in run configuration"),
        ('{"run": "other"}', "written with another configuration"),
    ],
)
def test_bad_or_other_configuration_is_refused(tmp_path, config_text, message):
    out = write_done(tmp_path, [GOOD])
    config_path_for(out).write_text(config_text)
    with pytest.raises(BlackboxMIAError, match=message.replace("(", r"\(")):
        score_items(ITEMS[:2], SCORERS, {"target": StreamingFake()}, out, CONFIG, progress=False)
    assert out.read_text() == GOOD + "\n"  # rows untouched


def test_rows_without_configuration_are_refused_and_overwrite_starts_clean(tmp_path):
    out = write_done(tmp_path, [GOOD])
    config_path_for(out).unlink()
    with pytest.raises(BlackboxMIAError, match="no scores.jsonl.config.json"):
        score_items(ITEMS[:2], SCORERS, {"target": StreamingFake()}, out, CONFIG, progress=False)
    rows = score_items(ITEMS[:2], SCORERS, {"target": StreamingFake()}, out, CONFIG, resume=False, progress=False)
    assert [r.id for r in rows] == ["a", "b"] and rows[0].scores != {"loss": -1.0, "lowercase": 1.0}


def test_nonfinite_score_is_null_with_a_flag_never_bare_nan(tmp_path):
    class MinusInf(StreamingFake):
        async def _alogprobs(self, texts, progress, on_done, vocab_stats=None):
            out = [fake_lp(t) for t in texts]
            for lp in out:
                lp.logprobs[0] = -math.inf
            for i, lp in enumerate(out):
                on_done(i, lp)
            return out

    out = tmp_path / "scores.jsonl"
    rows = score_items(ITEMS[:2], parse_scorers("loss,min_k:k=100"), {"target": MinusInf()}, out, None, progress=False)
    text = out.read_text()
    assert "NaN" not in text and "Infinity" not in text
    first = json.loads(text.splitlines()[0])
    assert first["scores"] == {"loss": None, "min_k:k=100": None} and first["nonfinite"] == ["loss", "min_k:k=100"]
    assert rows[0].nonfinite == ["loss", "min_k:k=100"]
    assert read_rows(out)[0] == rows[0]  # reads back the same


def test_old_bare_nan_rows_read_back_as_null(tmp_path):
    path = tmp_path / "old.jsonl"
    path.write_text('{"id": "a", "n_tokens": 2, "scores": {"loss": NaN}}\n')
    assert read_rows(path) == [ScoredText("a", None, {"loss": None}, 2)]


def test_write_json_atomic_refuses_nan_and_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "x.config.json"
    write_json_atomic(path, {"a": 1})
    with pytest.raises(BlackboxMIAError, match="NaN or Infinity"):
        write_json_atomic(path, {"a": float("nan")})
    assert json.loads(path.read_text()) == {"a": 1}

    def fail(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(BlackboxMIAError, match="cannot write .*No space left"):
        write_json_atomic(path, {"a": 2})
    assert json.loads(path.read_text()) == {"a": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.config.json"]  # no temp file left


def test_limits_and_item_checks():
    assert [it.id for it in limit_items(ITEMS, 2)] == ["a", "b"]
    assert limit_items(ITEMS, None) == ITEMS
    for bad in (0, -1):
        with pytest.raises(BlackboxMIAError, match="limit= must be an integer >= 1"):
            limit_items(ITEMS, bad)
    with pytest.raises(BlackboxMIAError, match="duplicate item id 'a'"):
        score_items([ITEMS[0], ITEMS[0]], SCORERS, {"target": StreamingFake()}, None, progress=False)


def test_a_backend_reporting_a_bad_index_is_an_error():
    class Liar(StreamingFake):
        async def _alogprobs(self, texts, progress, on_done, vocab_stats=None):
            on_done(len(texts), fake_lp("x"))
            return []

    with pytest.raises(BlackboxMIAError, match="reported text #2 of 2"):
        score_texts(["One", "Two"], parse_scorers("loss"), {"target": Liar()})


def test_scorers_are_checked_against_declared_features():
    class NoScores(StreamingFake):
        features = frozenset()

    with pytest.raises(BlackboxMIAError, match="backend does not offer 'logprobs'"):
        score_texts(["One"], parse_scorers("loss"), {"target": NoScores()})
    with pytest.raises(BlackboxMIAError, match="'min_k_pp' needs the full next-token distribution"):
        score_texts(["One"], parse_scorers("min_k_pp"), {"target": StreamingFake()})
    with pytest.raises(BlackboxMIAError, match="'ref' needs a reference model"):
        score_texts(["One"], parse_scorers("ref"), {"target": StreamingFake()})


def test_score_texts_takes_a_spec_string_and_refuses_one_str_of_texts():
    backends = {"target": StreamingFake()}
    by_spec = score_texts(["One Two", "three four"], "loss,min_k:k=50", backends)
    by_objects = score_texts(["One Two", "three four"], parse_scorers("loss,min_k:k=50"), {"target": StreamingFake()})
    assert [{k: b.value for k, b in s.items()} for s, _ in by_spec] == \
        [{k: b.value for k, b in s.items()} for s, _ in by_objects]
    assert set(by_spec[0][0]) == {"loss", "min_k:k=50"}
    with pytest.raises(BlackboxMIAError, match=r"got one str: pass \[text\]"):
        score_texts("One Two", "loss", backends)  # not 7 one-character texts
