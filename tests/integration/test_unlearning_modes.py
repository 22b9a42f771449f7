"""The unlearning audit's Q&A mode, its statistics (Wilson intervals, the flagged - unflagged
difference) and the audit through ``bbmia serve`` (black-box) against the local run."""

from __future__ import annotations

import json

import pytest

from blackbox_mia.audits.completion import cut_at
from blackbox_mia.audits.unlearning import (
    QA_SEPARATOR,
    UnlearningConfig,
    compare_groups,
    load_qa,
    mean_difference,
    prepare_unlearning,
    run_unlearning,
    split_completed,
)
from blackbox_mia.audits.unlearning.truth import closeness_auc, flag_metrics
from blackbox_mia.backends.api import ApiBackend
from blackbox_mia.backends.api.http.client import ApiConfig
from blackbox_mia.backends.api.tracker.tracker import TrackerConfig
from blackbox_mia.backends.local import LocalBackend, LocalConfig
from blackbox_mia.canary.unlearn import FORGET_FILE
from blackbox_mia.datasets import Item
from blackbox_mia.types import BlackboxMIAError

from . import test_unlearning

# the fixtures of tests/integration/test_unlearning.py: the tiny canary and its copy unlearned on 10 members
canary, unlearned = test_unlearning.canary, test_unlearning.unlearned


@pytest.fixture(scope="module")
def models(canary, unlearned):
    before = LocalBackend(LocalConfig(str(canary), device="cpu"))
    after = LocalBackend(LocalConfig(str(unlearned), device="cpu"))
    yield before, after
    before.close()
    after.close()


def rows_of(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def qa_file(unlearned, path, words=5):
    """The forget set as Q&A pairs: the first ``words`` words as the question, the rest as the
    answer (the tiny canary's 64-token context holds no whole GSM8K question), so that question
    + " " + answer is the canary's own text."""
    rows = []
    for line in (unlearned / FORGET_FILE).read_text(encoding="utf-8").splitlines():
        item = json.loads(line)
        question, _, answer = item["text"].partition(" ")
        for _ in range(words - 1):
            more, _, answer = answer.partition(" ")
            question += " " + more
        assert question + QA_SEPARATOR + answer == item["text"]
        rows.append({"id": item["id"], "question": question, "answer": answer})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return rows


def test_flag_metrics_wilson_intervals():
    # 3 of 4 flagged are positive, 3 of 5 positives flagged, 5 positives among 10 audited
    m = flag_metrics({"a", "b", "c", "x"}, {"a", "b", "c", "d", "e"}, list("abcdefghix"))
    assert (m["precision"], m["recall"], m["base_rate"]) == (0.75, 0.6, 0.5)
    # Wilson 95% (z = 1.959964): 3/4 -> [0.3006, 0.9544]; 3/5 -> [0.2307, 0.8824]; 5/10 -> [0.2366, 0.7634]
    assert m["precision_ci"] == pytest.approx([0.30064, 0.95440], abs=1e-4)
    assert m["recall_ci"] == pytest.approx([0.23072, 0.88236], abs=1e-4)
    assert m["base_rate_ci"] == pytest.approx([0.23659, 0.76341], abs=1e-4)
    # Fisher one-sided, margins 4 flagged / 5 positive of 10: P(tp >= 3) = (C(5,3)C(5,1) + C(5,4)C(5,0)) / C(10,4)
    assert m["fisher_p"] == pytest.approx((10 * 5 + 5 * 1) / 210)
    none = flag_metrics(set(), set(), ["a"])
    assert none["precision"] is None and none["precision_ci"] is None and none["base_rate_ci"] == [0.0, pytest.approx(0.79346, abs=1e-4)]


def test_mean_difference_hand_values():
    d = mean_difference([0.5, 0.7], [0.1, 0.2, 0.3])
    assert d["difference"] == pytest.approx(0.6 - 0.2)
    # every resample keeps 2 flagged and 3 unflagged texts: the difference lies in [0.5 - 0.3, 0.7 - 0.1]
    assert 0.2 <= d["ci"][0] <= d["difference"] <= d["ci"][1] <= 0.6
    # Mann-Whitney U = 6 (every flagged above every unflagged): one-sided exact p = 1 / C(5, 2) = 0.1
    assert d["mann_whitney_p"] == pytest.approx(0.1)
    assert mean_difference([], [0.1]) is None and mean_difference([0.1], []) is None


def test_split_and_compare_groups_hand_values():
    rows = [{"id": "a", "flagged": True, "still_memorized": False, "rouge_l_recall": 0.5, "approximate": 0.4},
            {"id": "b", "flagged": True, "still_memorized": True, "rouge_l_recall": 0.3, "approximate": 0.2},
            {"id": "c", "flagged": False, "still_memorized": True, "rouge_l_recall": 0.1, "approximate": 0.2},
            {"id": "d", "flagged": False, "still_memorized": True}]  # not completed (too short): left out
    groups = split_completed(rows, "flagged", ("flagged", "unflagged"))
    assert {g: [r["id"] for r in members] for g, members in groups.items()} == {"flagged": ["a", "b"],
                                                                                "unflagged": ["c"]}
    summary, difference = compare_groups(groups, seed=0)
    assert summary["flagged"]["rouge_l_recall"] == {"n": 2, "mean": pytest.approx(0.4), "median": pytest.approx(0.4)}
    assert summary["unflagged"]["approximate"] == {"n": 1, "mean": 0.2, "median": 0.2}
    d = difference["rouge_l_recall"]
    assert d["difference"] == pytest.approx(0.3)
    # one unflagged text: every resample's difference is a mean of two of {0.5, 0.3} minus 0.1: 0.2, 0.3 or 0.4
    assert d["ci"] == pytest.approx([0.2, 0.4])
    # U = 2 (both flagged above the unflagged one): one-sided exact p = 1 / C(3, 1)
    assert d["mann_whitney_p"] == pytest.approx(1 / 3)
    assert difference["approximate"]["difference"] == pytest.approx(0.1)
    by_label = split_completed(rows, "still_memorized", ("still_memorized", "not_still_memorized"))
    assert [r["id"] for r in by_label["still_memorized"]] == ["b", "c"]
    assert compare_groups(by_label, seed=0)[1]["rouge_l_recall"]["difference"] == pytest.approx(0.2 - 0.5)
    empty = compare_groups(split_completed(rows[:2], "flagged", ("flagged", "unflagged")), seed=0)
    assert empty[0]["unflagged"]["rouge_l_recall"] == {"n": 0, "mean": None, "median": None}
    assert empty[1] == {"rouge_l_recall": None, "approximate": None}


def test_closeness_auc_hand_values():
    rows = [{"ratio": 1.01, "still_memorized": True}, {"ratio": 1 / 1.05, "still_memorized": True},
            {"ratio": 1.08, "still_memorized": False}, {"ratio": 1.3, "still_memorized": False},
            {"ratio": None, "still_memorized": True}]
    # |ln r|: 0.00995, 0.04879 (memorized) vs 0.07696, 0.26236: every memorized text closer to 1
    assert closeness_auc(rows) == 1.0
    rows[0]["ratio"] = 1 / 1.2  # |ln| 0.1823: above 0.07696, below 0.26236 -> 3 of 4 pairs
    assert closeness_auc(rows) == pytest.approx(0.75)
    assert closeness_auc(rows[:2]) is None


def test_load_qa_and_errors(tmp_path):
    path = tmp_path / "qa.jsonl"
    path.write_text('{"question": "Who?", "answer": "Tom.", "label": 1}\n\n{"id": "q2", "question": "Q", "answer": "A"}\n',
                    encoding="utf-8")
    items, ends, meta = load_qa(path)
    assert [it.id for it in items] == ["qa-1", "q2"] and [it.label for it in items] == [1, None]
    assert items[0].text == "Who? Tom." and ends == {"qa-1": 4, "q2": 1}
    assert meta["name"] == "qa:qa.jsonl" and len(meta["sha256"]) == 64
    assert [it.id for it in load_qa(path, limit=1)[0]] == ["qa-1"]
    for bad, match in (('{"question": "Q"}\n', "non-empty strings"), ('{"question": "Q", "answer": " "}\n', "non-empty"),
                       ('{"id": 1, "question": "Q", "answer": "A"}\n{"id": "1", "question": "Q", "answer": "A"}\n',
                        "duplicate id"), ("\n", "no question")):
        path.write_text(bad, encoding="utf-8")
        with pytest.raises(BlackboxMIAError, match=match):
            load_qa(path)
    with pytest.raises(BlackboxMIAError, match="not found"):
        load_qa(tmp_path / "missing.jsonl")


def test_cut_at_question(models):
    _, after = models
    item = Item(id="x", text="Question: Tom has 3 apples.\nAnswer: 3 apples", label=None)
    end = item.text.rindex(" 3 apples")
    cut = cut_at(item, end, 100, after)
    assert cut.prompt == "Question: Tom has 3 apples.\nAnswer:" and cut.reference == " 3 apples"
    assert cut.max_new_tokens == len(after.codec.encode(" 3 apples"))
    short = cut_at(item, end, 2, after)
    assert short.max_new_tokens == 2 and short.reference == after.codec.decode(after.codec.encode(" 3 apples")[:2])
    assert cut_at(item, len(item.text), 100, after) is None  # nothing follows


def test_qa_mode_scores_the_same_texts_and_completes_the_answers(canary, unlearned, models, tmp_path):
    before, after = models
    rows = qa_file(unlearned, tmp_path / "qa.jsonl")
    common = {"samples": 2, "max_new_tokens": 12, "segmenter": "whitespace", "prompt_words": 8}
    qa = run_unlearning(prepare_unlearning(UnlearningConfig(dataset=str(tmp_path / "qa.jsonl"), qa=True, **common)),
                        before, after, tmp_path / "qa", truth=(unlearned, after), progress=False)
    story = run_unlearning(prepare_unlearning(UnlearningConfig(dataset=str(unlearned / FORGET_FILE), **common)),
                           before, after, tmp_path / "story", truth=(unlearned, after), progress=False)
    # question + " " + answer is the canary's own text: the same scores, ratios, flags and labels
    assert qa.summary["flagged_ids"] == story.summary["flagged_ids"]
    def label(summary):  # the truth without its similarities (those differ: other prompts and references)
        return {k: v for k, v in summary["truth"].items() if k not in ("completion", "completion_difference")}

    assert label(qa.summary) == label(story.summary) and qa.summary["truth"]["base_rate"] is not None
    qa_items = {r["id"]: r for r in rows_of(tmp_path / "qa" / "unlearning_items.jsonl")}
    for row in rows_of(tmp_path / "story" / "unlearning_items.jsonl"):
        assert qa_items[row["id"]]["ratio"] == pytest.approx(row["ratio"], abs=1e-9)
    # the reference is the answer (cut to the token budget), not the text after 8 words
    # (questions too long for the 64-token context are skipped, not cut)
    codec, skipped = after.codec, set(qa.summary["skipped_completion"])
    assert skipped == {r["id"] for r in rows if len(codec.encode(r["question"])) + 2 > 64}
    assert len(skipped) < len(rows)
    for r in rows:
        if r["id"] not in skipped:
            budget = min(12, 64 - 1 - len(codec.encode(r["question"])))
            assert qa_items[r["id"]]["reference"] == codec.decode(codec.encode(QA_SEPARATOR + r["answer"])[:budget])
    report = json.loads((tmp_path / "qa" / "unlearning.json").read_text())
    assert report["config"]["unlearning"]["qa"] is True and report["notes"][1].startswith("Q&A")


def test_audit_through_serve_equals_local(canary, unlearned, models, tmp_path):
    from blackbox_mia.emulator import ServerConfig, serve_in_background

    before, after = models
    # at a temperature near 0 both sample the argmax: the same continuations whatever the RNG (the
    # emulator draws with numpy, the local backend with torch, so at T = 1 the samples differ and
    # only their distribution agrees). 1e-3 was not near enough with transformers 5.24 / numpy 2.4: one
    # step's top two tokens lie within a few thousandths of a nat, and the two RNGs split there
    # (item 18 of the session-start commit 3afb835 failed the same way)
    config = UnlearningConfig(dataset=str(unlearned / FORGET_FILE), samples=2, max_new_tokens=12,
                              segmenter="whitespace", prompt_words=8, temperature=1e-6)
    plan = prepare_unlearning(config)
    local = run_unlearning(plan, before, after, tmp_path / "local", progress=False)
    tracker = TrackerConfig(context=64)  # the tiny canary's block_size
    with serve_in_background(ServerConfig(str(canary)), backend=before) as url_before, \
            serve_in_background(ServerConfig(str(unlearned)), backend=after) as url_after:
        apis = [ApiBackend(ApiConfig(base_url=url, model=str(path), max_retries=0), tokenizer=str(path), tracker=tracker,
                           cache_dir=tmp_path / "cache")
                for url, path in ((url_before, canary), (url_after, unlearned))]
        try:
            remote = run_unlearning(plan, *apis, tmp_path / "api", progress=False)
        finally:
            for api in apis:
                api.close()
    got, want = rows_of(tmp_path / "api" / "unlearning_items.jsonl"), rows_of(tmp_path / "local" / "unlearning_items.jsonl")
    assert [r["id"] for r in got] == [r["id"] for r in want] and len(want) == 10
    diff = max(abs(g[k] - w[k]) for g, w in zip(got, want) for k in ("min_k_before", "min_k_after", "loss_before",
                                                                     "loss_after"))
    assert diff < 1e-4  # nats/token: exact read-out through the server
    assert remote.summary["flagged_ids"] == local.summary["flagged_ids"]
    # the same prompts and budgets: the same continuations and similarities
    generations = [[r["generation"] for r in rows_of(tmp_path / d / "completions.jsonl")] for d in ("api", "local")]
    assert generations[0] == generations[1] and len(generations[0]) == 2 * (10 - len(local.summary["skipped_completion"]))
    assert remote.summary["completion"] == local.summary["completion"]
