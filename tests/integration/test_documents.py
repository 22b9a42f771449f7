"""``bbmia documents``: chunking (exact substrings, counts, merged tails, seeded samples, Japanese),
the Wilson interval against hand values, document loading errors, and on a tiny canary: documents
made of member items rate above documents of non-member items, resume rescoring nothing, the CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from blackbox_mia.audits.documents import (
    DocumentsConfig,
    load_documents,
    prepare_documents,
    run_documents,
)
from blackbox_mia.backends.local import LocalBackend, LocalConfig
from blackbox_mia.cli import app
from blackbox_mia.canary.dataset import load_items
from blackbox_mia.evaluation import Threshold
from blackbox_mia.evaluation.documents import (
    CalibrationBootstrap,
    document_rate,
    wilson_interval,
)
from blackbox_mia.text import get_segmenter
from blackbox_mia.text.chunk import (
    chunk_tokens,
    chunk_words,
    min_chunk_units,
    sample_chunks,
)
from blackbox_mia.types import BlackboxMIAError

PER_DOC = 4  # canary items per document

runner = CliRunner()


def test_chunk_words_exact_substrings_counts_and_merged_tail():
    text = "  one two\tthree\n\nfour five six seven eight nine ten  "
    ws = get_segmenter("whitespace")
    chunks = chunk_words(text, 3, ws)
    assert [c.text for c in chunks] == ["one two\tthree", "four five six", "seven eight nine", "ten"]  # 1 >= ⌈3/4⌉
    assert [c.n_units for c in chunks] == [3, 3, 3, 1] and [c.index for c in chunks] == [0, 1, 2, 3]
    assert all(text[c.start : c.end] == c.text for c in chunks)
    assert min_chunk_units(3) == 1 and min_chunk_units(512) == 128 and min_chunk_units(8) == 2
    # 10 words in chunks of 8: the tail of 2 is kept (2 >= ⌈8/4⌉); in chunks of 9 the tail of 1 is merged
    assert [c.n_units for c in chunk_words(text, 8, ws)] == [8, 2]
    assert [c.n_units for c in chunk_words(text, 9, ws)] == [10]
    assert [c.text for c in chunk_words("only three words", 512, ws)] == ["only three words"]
    assert chunk_words("  \n ", 4, ws) == []
    with pytest.raises(BlackboxMIAError, match="chunk size"):
        chunk_words(text, 0, ws)


def test_chunk_japanese_in_characters_and_mecab_words():
    text = "東京は日本の首都です。大阪は西にあります。"
    chars = chunk_words(text, 5, get_segmenter("chars"))
    assert [c.text for c in chars] == ["東京は日本", "の首都です", "。大阪は西", "にあります。"]  # 21 chars: tail of 1 merged
    # MeCab: 東京/は/日本/の/首都/です/。/大阪/は/西/に/あり/ます/。 (14 words)
    words = chunk_words(text, 4, get_segmenter("japanese"))
    assert [c.text for c in words] == ["東京は日本の", "首都です。大阪", "は西にあり", "ます。"]
    assert [c.text for c in chunk_words(text, 12, get_segmenter("japanese"))] == [text]  # tail of 2 < ⌈12/4⌉ merged
    assert all(text[c.start : c.end] == c.text for c in chars + words)


def test_chunk_tokens_are_substrings_cut_at_characters(local):
    codec = local.codec
    text = "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May."
    ids = codec.encode(text)
    chunks = chunk_tokens(text, 5, codec)
    assert sum(c.n_units for c in chunks) == len(ids)
    assert "".join(c.text for c in chunks) == text  # token chunks tile the text
    assert chunks[0].text == codec.decode(ids[:5])
    assert all(text[c.start : c.end] == c.text for c in chunks)


def test_seeded_sample_is_stable_and_in_order():
    chunks = chunk_words(" ".join(f"w{i}" for i in range(40)), 2, get_segmenter())
    a = sample_chunks(chunks, 5, seed=3, key="doc")
    assert [c.index for c in a] == sorted(c.index for c in a) and len(a) == 5
    assert a == sample_chunks(chunks, 5, seed=3, key="doc")
    assert a != sample_chunks(chunks, 5, seed=4, key="doc")
    assert sample_chunks(chunks, 50, seed=3, key="doc") == chunks and sample_chunks(chunks, None, 0, "d") == chunks


def test_wilson_interval_hand_values():
    # z = 1.959964, z² = 3.841459. 5 of 10: centre (0.5 + z²/20) / (1 + z²/10) = 0.5,
    # half = z sqrt(0.025 + z²/400) / 1.384146 = 1.959964 * 0.186020 / 1.384146 = 0.263407
    assert wilson_interval(5, 10) == pytest.approx((0.236593, 0.763407), abs=2e-6)
    # 0 of 10: (z²/20 ± z sqrt(z²/400)) / 1.384146 = (0.192073 ± 0.192073) / 1.384146
    assert wilson_interval(0, 10) == pytest.approx((0.0, 0.277533), abs=2e-6)
    # the bounds at 0 and n are exact, so a document with no flagged chunk covers a truth of 0
    assert wilson_interval(0, 14)[0] == 0.0 and wilson_interval(14, 14)[1] == 1.0
    # 8 of 20: centre 0.4 + z²/40 = 0.496037, half z sqrt(0.012 + z²/1600) = 0.235203, over 1.192073
    assert wilson_interval(8, 20) == pytest.approx((0.218806, 0.613420), abs=2e-6)
    with pytest.raises(BlackboxMIAError):
        wilson_interval(3, 2)


def test_document_rate_and_correction():
    threshold = Threshold(value=0.5, rule="fpr", target_fpr=0.1, realised_fpr=0.1, tpr=0.6,
                          n_calibration_nonmembers=10, n_calibration_members=10)
    row = document_rate("d", 6, [0.9, 0.2, 0.7, 0.5, 0.1], threshold, label=1)
    assert (row["n_chunks"], row["n_scored"], row["n_flagged"], row["rate"]) == (6, 5, 2, 0.4)
    assert row["corrected"] == pytest.approx((0.4 - 0.1) / (0.6 - 0.1))
    assert row["rate_ci"] == pytest.approx(list(wilson_interval(2, 5))) and row["label"] == 1
    assert row["corrected_ci"] is None  # no calibration bootstrap given
    # one validation document per label: FPR 1/10 and TPR 9/10 in every resample, so the CI is the
    # Jeffreys one mapped through the correction: Beta(2.5, 3.5) has 97.5% quantile 0.790583, so
    # ((q025 - 0.1)/0.8 clipped to 0, (0.790583 - 0.1)/0.8 = 0.863229)
    exact = Threshold(value=0.5, rule="fpr", target_fpr=0.1, realised_fpr=0.1, tpr=0.9,
                      n_calibration_nonmembers=10, n_calibration_members=10)
    boot = CalibrationBootstrap([1, 9], [10, 10], [0, 1], 20000)
    row = document_rate("d", 6, [0.9, 0.2, 0.7, 0.5, 0.1], exact, bootstrap=boot)
    assert row["corrected"] == pytest.approx(0.375) and row["corrected_ci"] == pytest.approx([0.0, 0.863229], abs=0.01)


def test_calibration_bootstrap_hand_values():
    fixed = CalibrationBootstrap([1, 9], [10, 10], [0, 1], n_boot=20000, seed=1)
    assert set(fixed.fpr) == {0.1} and set(fixed.tpr) == {0.9}
    # Jeffreys Beta(5.5, 5.5): 2.5% / 97.5% quantiles 0.223529 / 0.776471, corrected (q - 0.1)/0.8
    assert fixed.corrected_ci(5, 10) == pytest.approx([0.154411, 0.845589], abs=0.01)
    # none flagged: Beta(0.5, 10.5) 97.5% quantile 0.217196, so not [0, 0] as a binomial bootstrap gives
    assert fixed.corrected_ci(0, 10) == pytest.approx([0.0, 0.146495], abs=0.01)
    # all flagged: Beta(10.5, 0.5) 2.5% quantile 0.782804
    assert fixed.corrected_ci(10, 10) == pytest.approx([0.853505, 1.0], abs=0.01)
    # documents, not chunks, are resampled, and a resample pools its chunks: non-members 0 of 10 and
    # 10 of 30 flagged give FPR 0/20, 10/40 or 20/60, with probabilities 1/4, 1/2, 1/4
    boot = CalibrationBootstrap([0, 10, 10], [10, 30, 10], [0, 0, 1], n_boot=20000, seed=2)
    values, counts = np.unique(boot.fpr, return_counts=True)
    assert values == pytest.approx([0.0, 0.25, 1 / 3]) and counts / 20000 == pytest.approx([0.25, 0.5, 0.25], abs=0.015)
    assert set(boot.tpr) == {1.0}
    # TPR <= FPR in every resample: no interval
    assert CalibrationBootstrap([5, 0], [10, 10], [0, 1], n_boot=50).corrected_ci(3, 10) is None
    for bad in (([1], [10, 10], [0, 1]), ([1, 11], [10, 10], [0, 1]), ([1, 1], [10, 10], [1, 1]), ([0, 0], [0, 1], [0, 1])):
        with pytest.raises(BlackboxMIAError):
            CalibrationBootstrap(*bad, n_boot=10)
    with pytest.raises(BlackboxMIAError):
        fixed.corrected_ci(3, 2)


def test_load_documents_folder_jsonl_and_errors(tmp_path):
    folder = tmp_path / "books"
    folder.mkdir()
    (folder / "b.txt").write_text("beta text", encoding="utf-8")
    (folder / "a.txt").write_text("alpha text", encoding="utf-8")
    (folder / "notes.md").write_text("ignored", encoding="utf-8")
    docs, meta = load_documents(str(folder))
    assert [(d.doc_id, d.text, d.label) for d in docs] == [("a", "alpha text", None), ("b", "beta text", None)]
    assert len(meta["sha256"]) == 64
    jsonl = tmp_path / "docs.jsonl"
    jsonl.write_text('{"doc_id": "x", "text": "some text", "label": 1}\n\n{"doc_id": "y", "text": "more"}\n')
    assert [(d.doc_id, d.label) for d in load_documents(str(jsonl))[0]] == [("x", 1), ("y", None)]
    cases = {
        '{"doc_id": "x", "text": "t"}\n{"doc_id": "x", "text": "u"}\n': "repeats",
        '{"text": "t"}\n': "doc_id",
        '{"doc_id": "x", "text": 3}\n': "'text' must be a string",
        '{"doc_id": "x", "text": "t", "label": 2}\n': "label must be 0, 1",
        '{"doc_id": "x", "text": "  "}\n': "empty",
    }
    for content, message in cases.items():
        jsonl.write_text(content)
        with pytest.raises(BlackboxMIAError, match=message):
            load_documents(str(jsonl))
    with pytest.raises(BlackboxMIAError, match="no such"):
        load_documents(str(tmp_path / "missing"))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(BlackboxMIAError, match=r"\.txt files"):
        load_documents(str(empty))
    jsonl.write_text('{"doc_id": "x", "text": "t"}\n')
    with pytest.raises(BlackboxMIAError, match="no label"):
        prepare_documents(DocumentsConfig(docs=str(folder), calibration=str(jsonl)))
    with pytest.raises(BlackboxMIAError, match="one chunk size"):
        prepare_documents(DocumentsConfig(docs=str(folder), calibration=str(jsonl), chunk_tokens=8))


@pytest.fixture(scope="module")
def canary(memorizing_canary):
    return memorizing_canary


@pytest.fixture(scope="module")
def local(canary):
    backend = LocalBackend(LocalConfig(str(canary)))
    yield backend
    backend.close()


def _write_docs(path, items, label_of, prefix):
    """Documents of PER_DOC consecutive items each, labelled by their items' label."""
    lines = []
    for start in range(0, len(items), PER_DOC):
        group = items[start : start + PER_DOC]
        lines.append(json.dumps({"doc_id": f"{prefix}{start // PER_DOC}", "text": "\n\n".join(it.text for it in group),
                                 "label": label_of(group)}))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def doc_files(canary, tmp_path_factory):
    folder = tmp_path_factory.mktemp("docs")
    items, _ = load_items(f"canary:{canary}")
    members = [it for it in items if it.label == 1]
    nonmembers = [it for it in items if it.label == 0]
    cal = _write_docs(folder / "validation.jsonl", members[:8] + nonmembers[:8], lambda g: g[0].label, "val")
    docs = _write_docs(folder / "docs.jsonl", members[8:] + nonmembers[8:], lambda g: g[0].label, "doc")
    return docs, cal


def test_member_documents_rate_above_nonmember_documents_and_resume(local, doc_files, tmp_path, monkeypatch):
    docs, cal = doc_files
    plan = prepare_documents(DocumentsConfig(docs=docs, calibration=cal, chunk_words=24, rule="max_accuracy", n_boot=200))
    result = run_documents(plan, {"target": local}, tmp_path, progress=False)
    s = result.summary
    rows = s["documents"]
    assert len(rows) == 6 and {r["label"] for r in rows} == {0, 1}
    members = [r["rate"] for r in rows if r["label"] == 1]
    nonmembers = [r["rate"] for r in rows if r["label"] == 0]
    assert min(members) > max(nonmembers)  # every member document above every non-member document
    assert [r["label"] for r in rows] == [1, 1, 1, 0, 0, 0] and s["auc_documents"] == 1.0
    assert s["threshold_tpr"] > s["threshold_realised_fpr"] and s["threshold_fpr"] == s["threshold_realised_fpr"]
    for row in rows:
        lo, hi = row["corrected_ci"]
        assert 0 <= lo <= hi <= 1
    chunks = [json.loads(line) for line in (tmp_path / "chunks.jsonl").read_text().splitlines()]
    texts = {d.doc_id: d.text for d in load_documents(docs)[0]}
    for row in rows:
        mine = [c for c in chunks if c["doc_id"] == row["doc_id"]]
        assert len(mine) == row["n_scored"] == row["n_chunks"] and sum(c["flagged"] for c in mine) == row["n_flagged"]
        assert all(c["flagged"] == (c["score"] > s["threshold"]) for c in mine)
        scored = {json.loads(line)["id"]: json.loads(line) for line in (tmp_path / "scores.jsonl").read_text().splitlines()}
        text = texts[row["doc_id"]]
        first = mine[0]
        assert local.logprobs([text[first["start"] : first["end"]]])[0].n_tokens == scored[f"{row['doc_id']}#0"]["n_tokens"]
    calls = []
    monkeypatch.setattr(local, "logprobs", lambda *a, **k: calls.append(a) or [])
    again = run_documents(plan, {"target": local}, tmp_path, progress=False)
    assert calls == [] and again.summary == s
    for name in ("documents.json", "documents.md", "rates.png", "calibration_scores.jsonl"):
        assert (tmp_path / name).stat().st_size > 0
    assert "| 1 | " in (tmp_path / "documents.md").read_text()


def test_cli_json_last_line_and_sampled_chunks(canary, doc_files, tmp_path):
    docs, cal = doc_files
    result = runner.invoke(app, ["documents", docs, "--calibration", cal, "--local", str(canary), "--chunk-tokens", "32",
                                 "--chunks-per-doc", "2", "--out", str(tmp_path), "--quiet", "--json",
                                 "--device", "cpu", "--n-boot", "50"])
    assert result.exit_code == 0, result.output
    s = json.loads(result.output.strip().splitlines()[-1])
    assert {"documents", "threshold", "auc_documents"} <= set(s)
    assert all(r["n_scored"] == 2 < r["n_chunks"] for r in s["documents"])
    bad = runner.invoke(app, ["documents", docs, "--calibration", docs, "--local", str(canary), "--chunk-words", "8",
                              "--chunk-tokens", "8"])
    assert bad.exit_code == 2 and "one chunk size" in bad.output


def test_documents_through_serve_equal_local(canary, local, doc_files, tmp_path):
    from blackbox_mia.backends.api import ApiBackend
    from blackbox_mia.backends.api.http.client import ApiConfig
    from blackbox_mia.backends.api.tracker.tracker import TrackerConfig
    from blackbox_mia.emulator import ServerConfig, serve_in_background

    docs, cal = doc_files
    plan = prepare_documents(DocumentsConfig(docs=docs, calibration=cal, chunk_words=24, rule="max_accuracy", n_boot=50))
    want = run_documents(plan, {"target": local}, tmp_path / "local", progress=False).summary
    with serve_in_background(ServerConfig(str(canary)), backend=local) as url:
        api = ApiBackend(ApiConfig(base_url=url, model=str(canary), max_retries=0), tokenizer=str(canary),
                         tracker=TrackerConfig(context=64), cache_dir=tmp_path / "cache")  # the canary's block_size
        try:
            got = run_documents(plan, {"target": api}, tmp_path / "api", progress=False).summary
        finally:
            api.close()
    chunks = {d: [json.loads(line) for line in (tmp_path / d / "chunks.jsonl").read_text().splitlines()]
              for d in ("local", "api")}
    assert len(chunks["api"]) == len(chunks["local"]) > 10
    assert max(abs(a["score"] - b["score"]) for a, b in zip(chunks["api"], chunks["local"])) < 1e-4  # nats/token
    assert [c["flagged"] for c in chunks["api"]] == [c["flagged"] for c in chunks["local"]]
    assert got["threshold"] == pytest.approx(want["threshold"], abs=1e-4)
    assert [(r["doc_id"], r["rate"]) for r in got["documents"]] == [(r["doc_id"], r["rate"]) for r in want["documents"]]
    assert got["auc_documents"] == want["auc_documents"]
