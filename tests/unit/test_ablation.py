"""The prompt-length ablation's pieces: cutting a text at a token count on a character boundary,
the scorer × L heat map and the report's tables (end to end on a canary: tests/integration/test_audit.py)."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from blackbox_mia.audits.ablation import Truncated, truncate_tokens
from blackbox_mia.evaluation import render_markdown
from blackbox_mia.evaluation.plots import plot_heatmap
from blackbox_mia.tokenizers import HFTokenCodec
from blackbox_mia.types import BlackboxMIAError


@pytest.fixture(scope="module")
def codec(tiny_model_dir):
    """The tiny GPT-2's byte-level BPE (300 ids, trained on English): a kanji is 3 byte tokens."""
    return HFTokenCodec(AutoTokenizer.from_pretrained(tiny_model_dir), name="tiny")


def test_a_cut_inside_a_character_keeps_whole_characters_only(codec):
    text = "日本語"
    ids = codec.encode(text)
    assert [len(codec.token_bytes(i)) for i in ids] == [1] * 9  # one token per byte: 3 per kanji
    assert truncate_tokens(codec, text, 3) == Truncated("日", 3, False)
    assert truncate_tokens(codec, text, 4) == Truncated("日", 4, False)  # 1 byte of 本 dropped
    assert truncate_tokens(codec, text, 5) == Truncated("日", 5, False)
    assert truncate_tokens(codec, text, 6) == Truncated("日本", 6, False)
    assert truncate_tokens(codec, text, 8) == Truncated("日本", 8, False)
    assert truncate_tokens(codec, text, 9) == Truncated(text, 9, True)
    assert truncate_tokens(codec, text, 100) == Truncated(text, 9, True)
    for length in (1, 2):
        with pytest.raises(BlackboxMIAError, match=f"first {length} tokens .* no complete non-space character"):
            truncate_tokens(codec, text, length)


def test_every_cut_of_a_mixed_text_is_a_prefix_without_replacement_characters(codec):
    text = "Ein Café für 3 € — 日本語のテキスト and more words"
    n = len(codec.encode(text))
    assert n > len(text.encode("utf-8")) // 3  # mostly short tokens: many cuts fall inside characters
    previous = ""
    for length in range(3, n + 1):
        cut = truncate_tokens(codec, text, length)
        assert "\ufffd" not in cut.text and text.startswith(cut.text), length
        assert len(cut.text) >= len(previous)  # cuts grow with L
        # the cut's bytes are the first L tokens' bytes, less at most 3 of an unfinished character
        first = b"".join(codec.token_bytes(i) for i in codec.encode(text)[:length])
        assert 0 <= len(first) - len(cut.text.encode("utf-8")) <= 3
        assert cut.n_tokens == length and cut.whole == (length == n)
        previous = cut.text
    assert previous == text
    with pytest.raises(BlackboxMIAError, match="integer >= 1"):
        truncate_tokens(codec, text, 0)


def test_eval_plan_lists_the_cut_texts_it_scores_for_the_dry_run(codec, tmp_path):
    """--dry-run estimates what run_eval scores: the dataset, then each L's cut texts."""
    import json

    from blackbox_mia.audits import EvalConfig, prepare_eval

    texts = ["日本語 and more", "Tom has 3 apples.", "short", "Ivy walks 4 miles to school."]
    path = tmp_path / "items.jsonl"
    path.write_text("".join(json.dumps({"id": f"t{i}", "text": t, "label": i % 2}) + "\n" for i, t in enumerate(texts)))
    plan = prepare_eval(EvalConfig(dataset=str(path), scorers=("loss",), truncate_tokens=(4, 6)))
    groups = plan.scored_groups(codec)
    assert list(groups) == ["eval", "L4", "L6"] and [it.text for it in groups["eval"]] == texts
    for length in (4, 6):
        assert [it.text for it in groups[f"L{length}"]] == [truncate_tokens(codec, t, length).text for t in texts]
        assert [it.id for it in groups[f"L{length}"]] == ["t0", "t1", "t2", "t3"]
    assert groups["L4"][0].text == "日" and groups["L6"][2].text == "short"  # 3 byte tokens a kanji; kept whole
    assert list(prepare_eval(EvalConfig(dataset=str(path), scorers=("loss",))).scored_groups(codec)) == ["eval"]


def test_heatmap_is_written_and_checks_its_shape(tmp_path):
    path = plot_heatmap([[0.5, 0.75], [0.6, float("nan")]], ["loss", "min_k"], ["8", "16"], tmp_path / "h" / "a.png",
                        title="AUC", xlabel="L", colorbar="AUC")
    assert path == tmp_path / "h" / "a.png" and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(BlackboxMIAError, match="2 row and 3 column labels"):
        plot_heatmap([[0.5, 0.75]], ["loss", "min_k"], ["8", "16", "32"], tmp_path / "b.png")
    with pytest.raises(BlackboxMIAError, match="non-empty 2-D"):
        plot_heatmap([0.5], ["loss"], ["8"], tmp_path / "c.png")


def test_report_renders_the_scorer_by_length_tables():
    def metrics(auc, tpr):
        return {"auc": auc, "auc_ci": [auc - 0.1, auc + 0.1], "tpr_at_fpr": {"0.1": tpr}, "tpr_at_fpr_ci": {"0.1": [0.0, 0.5]}}

    section = {
        "unit": "tokens", "tokenizer": "tiny", "lengths": [8, 16], "fpr": 0.1,
        "counts": {"8": {"n": 10, "truncated": 9, "whole": 1}, "16": {"n": 10, "truncated": 4, "whole": 6}},
        "scorers": {"loss": {"8": metrics(0.6, 0.2), "16": metrics(0.7, 0.3)}},
    }
    md = render_markdown({"title": "t", "prompt_length": section, "length_unit": "characters",
                          "length_buckets": {"loss": {"32": {"auc": 0.5, "n_members": 1, "n_nonmembers": 1}}}})
    assert "| scorer | L = 8 | L = 16 |" in md
    assert "| loss | 0.600 [0.500, 0.700] | 0.700 [0.600, 0.800] |" in md
    assert "| loss | 0.200 [0.000, 0.500] | 0.300 [0.000, 0.500] |" in md
    assert "**TPR@10% FPR [95% CI]**" in md
    assert "| cut to L | 9 | 4 |" in md and "| kept whole (at most L tokens) | 1 | 6 |" in md
    assert "| scorer | length (characters) |" in md and "## prompt_length" not in md
