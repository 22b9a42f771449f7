"""studies/audit_canaries.py: the unlearning audits of several seeds pooled into one table, and
their summary keys, against hand-computed values."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from studies import audit_canaries as audit_canaries_study
from studies import completion_settings


@pytest.fixture(scope="module")
def audit_canaries():
    return audit_canaries_study


def write_items(folder: Path, rows: list[dict]) -> str:
    folder.mkdir(parents=True)
    (folder / "unlearning_items.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return str(folder)


def row(i, flagged, still, ratio, rouge=None):
    out = {"id": i, "flagged": flagged, "still_memorized": still, "ratio": ratio}
    if rouge is not None:  # completed: both similarities (approximate = rouge / 2 here)
        out.update(rouge_l_recall=rouge, approximate=rouge / 2)
    return out


def test_pooled_audit_counts_a_member_once_per_seed(audit_canaries, tmp_path):
    folders = {
        1: write_items(tmp_path / "s1", [row("a", True, True, 1.0, 0.3), row("b", False, True, 1.5, 0.2),
                                         row("c", False, False, 1.3, 0.1)]),
        2: write_items(tmp_path / "s2", [row("a", True, False, 1.05, 0.4), row("d", False, False, 2.0)]),
    }
    pooled = audit_canaries.pooled_audit(folders, seed=0)
    keys = audit_canaries.unlearning_keys(pooled, "p_")
    # 5 audited (a under both seeds), flagged {1:a, 2:a}, still memorized {1:a, 1:b}: one true positive
    assert (keys["p_n_audited"], keys["p_n_flagged"], keys["p_n_positive"]) == (5, 2, 2)
    assert (keys["p_precision"], keys["p_recall"], keys["p_base_rate"]) == (0.5, 0.5, 0.4)
    # one-sided Fisher, margins 2 flagged / 2 positive of 5: P(tp >= 1) = 1 - C(3, 2) / C(5, 2)
    assert keys["p_fisher_p"] == pytest.approx(0.7)
    # -|ln ratio|: 1:a (0) above every negative (1.3, 1.05, 2.0), 1:b (1.5) above 2.0 only: 4 of 6 pairs
    assert keys["p_closeness_auc"] == pytest.approx(4 / 6)
    # completed texts only (2:d was not): flagged 0.3, 0.4 vs unflagged 0.2, 0.1
    assert keys["p_rouge_l_flagged"] == pytest.approx(0.35) and keys["p_rouge_l_unflagged"] == pytest.approx(0.15)
    d = keys["p_rouge_l_difference"]
    assert d["difference"] == pytest.approx(0.2)
    assert d["mann_whitney_p"] == pytest.approx(1 / 6)  # U = 4: every flagged above every unflagged, 1 / C(4, 2)
    assert keys["p_approximate_difference"]["difference"] == pytest.approx(0.1)
    # by the label: still memorized 1:a 0.3, 1:b 0.2 vs the rest 1:c 0.1, 2:a 0.4
    assert keys["p_rouge_l_still_memorized"] == pytest.approx(0.25)
    assert keys["p_rouge_l_not_still_memorized"] == pytest.approx(0.25)
    assert keys["p_rouge_l_by_label_difference"]["difference"] == pytest.approx(0.0)


@pytest.fixture(scope="module")
def settings():
    return completion_settings


class WordCodec:
    """Token id i is the word ``w<i>``."""

    def decode(self, ids):
        return " ".join(f"w{i}" for i in ids)


def test_completion_settings_measures_and_chance_correction(settings):
    from blackbox_mia.text.segment import get_segmenter

    codec, words = WordCodec(), get_segmenter("whitespace")
    # a sample cut to the reference's 2 tokens: w1 w2 vs w1 w5 -> ROUGE-L 1/2, token prefix 1
    m = settings.measure([1, 2, 3], [1, 5], codec, words)
    assert m["rouge_l_recall"] == pytest.approx(0.5) and m["token_prefix"] == 1.0
    assert m["approximate"] == pytest.approx(1 - 1 / 5)  # "w1 w2" vs "w1 w5": one substitution in 5 characters
    made = {"x": [[1, 2, 3]], "y": [[4, 5, 6]]}
    refs = {"x": [1, 2, 3], "y": [1, 5, 9]}
    values = {i: [settings.measure(g, refs[i], codec, words) for g in made[i]] for i in refs}
    assert [values[i][0]["rouge_l_recall"] for i in refs] == pytest.approx([1.0, 1 / 3])
    out = settings.excess(made, refs, values, codec, words, samples=1)
    # x: its own 1 minus y's sample against x's reference (0); y: its own 1/3 minus x's sample's (w1 of w1 w5 w9) 1/3
    assert out["mean"] == pytest.approx({"x": 1.0, "y": 0.0}) and out["max"] == pytest.approx({"x": 1.0, "y": 0.0})
