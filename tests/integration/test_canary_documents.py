"""The document canary (``--corpus documents``): the seeded split, the truth in the manifest, tiny training."""

import dataclasses
import json

import numpy as np
import pytest
from typer.testing import CliRunner

from blackbox_mia.canary import (
    DOCUMENTS_FILE,
    VALIDATION_FILE,
    CanaryConfig,
    build_corpus,
    canary_items,
    dup_levels,
    ensure_canary,
    load_manifest,
)
from blackbox_mia.canary.documents import ITEM_SEPARATOR, partial_run
from blackbox_mia.cli import canary as _  # noqa: F401  (registers the sub-app)
from blackbox_mia.cli.app import app
from blackbox_mia.config import NOT_AN_OPTION
from blackbox_mia.datasets import load_shipped_or_jsonl
from blackbox_mia.types import BlackboxMIAError

SMALL = CanaryConfig(corpus="documents", n_background=40, n_members=8, n_nonmembers=8, dup=8,
                     doc_items=4, doc_partial=6, doc_validation=4)  # fmt: skip
# SMALL's documents on a one-layer model, trained through the command line (one option per field)
TINY = dataclasses.replace(SMALL, vocab_size=500, n_layer=1, n_embd=32, n_head=2, block_size=64, epochs=3,
                           batch_size=8, lr=0.01)  # fmt: skip
TINY_ARGS = [arg for f in dataclasses.fields(TINY) if not NOT_AN_OPTION.items() <= f.metadata.items()
             for arg in ("--" + f.name.replace("_", "-"), str(getattr(TINY, f.name)))]  # every command-line field


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("canary_docs") / "model"
    result = CliRunner().invoke(app, ["canary", "train", *TINY_ARGS, "--out", str(out), "--quiet", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["documents"] == str(out / DOCUMENTS_FILE) and summary["validation"] == str(out / VALIDATION_FILE)
    return out


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_default_hashes_unchanged_and_document_fields_only_for_documents():
    assert CanaryConfig().short_hash() == "6338e872951d"
    assert CanaryConfig(corpus="ja").short_hash() == "818807dddf49"  # the hash before documents existed
    assert CanaryConfig().doc_items is None and CanaryConfig().n_members == 200
    docs = CanaryConfig(corpus="documents")
    assert (docs.n_members, docs.n_nonmembers, docs.doc_items, docs.doc_partial, docs.doc_validation) == (16, 16, 8, 12, 8)
    assert docs.short_hash() != dataclasses.replace(docs, doc_items=6).short_hash()
    with pytest.raises(BlackboxMIAError, match="doc_items applies only to corpus='documents'"):
        CanaryConfig(doc_items=4).validate()
    with pytest.raises(BlackboxMIAError, match="doc_items >= 2"):
        dataclasses.replace(SMALL, doc_items=1).validate()
    with pytest.raises(BlackboxMIAError, match="342 documents of 4 problems exceed the 329 blocks of 1319"):
        build_corpus(dataclasses.replace(SMALL, n_members=320))
    assert dup_levels(8) == [1, 2, 4, 8] and dup_levels(6) == [1, 2, 4, 6] and dup_levels(1) == [1]
    assert [partial_run(4, f) for f in (0.25, 0.5, 0.75)] == [1, 2, 3] and partial_run(2, 0.25) == 1


def test_split_is_seeded_disjoint_and_made_of_consecutive_blocks():
    gsm8k_test = load_shipped_or_jsonl("gsm8k:test")
    corpus = build_corpus(SMALL)
    docs = corpus.canary_documents
    kinds = [(d.split, d.kind) for d in docs]
    assert kinds.count(("test", "member")) == 8 and kinds.count(("test", "heldout")) == 8
    assert kinds.count(("test", "partial")) == 6
    assert kinds.count(("validation", "member")) == kinds.count(("validation", "heldout")) == 4
    index = {item.id: i for i, item in enumerate(gsm8k_test.items)}
    for d in docs:  # 4 consecutive problems starting at a multiple of 4
        positions = [index[item.id] for item in d.items]
        assert positions == list(range(positions[0], positions[0] + 4)) and positions[0] % 4 == 0
    ids = [item.id for d in docs for item in d.items]
    assert len(ids) == len(set(ids)) == 30 * 4  # no problem in two documents: test and validation disjoint
    assert [d.doc_id for d in docs] == [f"doc-{i:03d}" for i in range(22)] + [f"val-{i:03d}" for i in range(8)]
    again = build_corpus(SMALL)
    assert again.canary_documents == docs and again.documents == corpus.documents
    other = build_corpus(dataclasses.replace(SMALL, seed=1)).canary_documents
    assert [d.items for d in other] != [d.items for d in docs]
    # dup levels cycle over the planted documents; every (fraction, dup) pair of the partials is distinct
    members = [d.dup for d in docs if d.kind == "member" and d.split == "test"]
    assert sorted(members) == [1, 1, 2, 2, 4, 4, 8, 8]
    partials = sorted((sum(d.planted), d.dup) for d in docs if d.kind == "partial")
    assert partials == [(1, 1), (1, 2), (2, 1), (2, 2), (3, 1), (3, 2)]
    assert all(d.dup == 0 and not any(d.planted) for d in docs if d.kind == "heldout")


def test_planted_fractions_equal_what_was_planted():
    corpus = build_corpus(SMALL)
    texts = corpus.documents
    background = {item.text for item in load_shipped_or_jsonl("gsm8k:train").items if item.id in set(corpus.background_ids)}
    planted_texts = [t for t in texts if t not in background]
    for d in corpus.canary_documents:
        record = d.record()
        copies = [t for t in planted_texts if t in d.text]
        run = [item for item, p in zip(d.items, d.planted) if p]
        assert record["planted_fraction"] == len(run) / 4 == len(record["planted_items"]) / 4
        if not run:
            assert copies == [] and record["dup"] == 0
            assert not any(item.text in t for item in d.items for t in texts)  # never trained on, in part either
            continue
        # the planted run is contiguous, planted `dup` times verbatim, and nothing else of the document is
        assert copies == [ITEM_SEPARATOR.join(item.text for item in run)] * d.dup
        assert "".join("1" if p else "0" for p in d.planted).strip("0") == "1" * len(run)
        unplanted = [item for item, p in zip(d.items, d.planted) if not p]
        assert not any(item.text in t for item in unplanted for t in texts)
        words = [len(item.text.split()) for item in d.items]
        assert record["planted_word_fraction"] == sum(len(i.text.split()) for i in run) / sum(words)
    assert len(texts) == 40 + sum(d.dup for d in corpus.canary_documents)
    assert {i.id for i in corpus.members} == {i.id for d in corpus.canary_documents for i, p in zip(d.items, d.planted) if p}


def test_trained_manifest_and_files(trained):
    gsm8k_test = load_shipped_or_jsonl("gsm8k:test")
    m = load_manifest(trained)
    assert m["corpus"] == "documents" and m["config"]["doc_items"] == 4
    assert (m["documents_file"], m["validation_file"]) == (DOCUMENTS_FILE, VALIDATION_FILE)
    records = {r["doc_id"]: r for r in m["documents"]}
    by_id = {item.id: item.text for item in gsm8k_test.items}
    for name, split in ((DOCUMENTS_FILE, "test"), (VALIDATION_FILE, "validation")):
        rows = read_jsonl(trained / name)
        assert len(rows) == (22 if split == "test" else 8)
        for row in rows:
            r = records[row["doc_id"]]
            assert set(row) == {"doc_id", "text", "label"} and r["split"] == split
            assert row["text"] == ITEM_SEPARATOR.join(by_id[i] for i in r["items"])
            assert row["label"] == int(r["planted_fraction"] > 0)
    assert sorted(r["planted_fraction"] for r in m["documents"] if r["kind"] == "partial") == [0.25] * 2 + [0.5] * 2 + [0.75] * 2
    # the item-level split: planted problems are the members, the other problems of the documents the non-members
    planted = [i for r in m["documents"] for i in r["planted_items"]]
    assert sorted(m["member_ids"]) == sorted(planted) and len(m["nonmember_ids"]) == 30 * 4 - len(planted)
    items = canary_items(trained)
    assert [i.label for i in items] == [1] * len(planted) + [0] * (120 - len(planted))
    # reused, not retrained, by the configuration it was trained with
    assert ensure_canary(TINY, progress=False, out_dir=trained) == trained


def test_planted_documents_items_have_lower_loss_than_held_out(trained):
    from blackbox_mia.backends.local import LocalBackend, LocalConfig

    m = load_manifest(trained)
    by_kind = {  # whole documents planted 4 or 8 times, and the held-out documents (test and validation)
        "member": [i for r in m["documents"] if r["kind"] == "member" and r["dup"] >= 4 for i in r["items"]],
        "heldout": [i for r in m["documents"] if r["kind"] == "heldout" for i in r["items"]],
    }
    texts = {i.id: i.text for i in canary_items(trained)}
    backend = LocalBackend(LocalConfig(str(trained)))
    loss = {kind: np.mean([-lp.logprobs.mean() for lp in backend.logprobs([texts[i] for i in ids])])
            for kind, ids in by_kind.items()}  # fmt: skip
    assert len(by_kind["member"]) == 6 * 4 and len(by_kind["heldout"]) == 12 * 4
    assert loss["member"] < loss["heldout"] - 0.3, loss


def test_cli_help_names_the_document_options():
    text = CliRunner().invoke(app, ["canary", "train", "--help"]).output
    for flag in ("--doc-items", "--doc-partial", "--doc-validation", "documents"):
        assert flag in text
    bad = CliRunner().invoke(app, ["canary", "train", "--doc-items", "4"])
    assert bad.exit_code == 2 and "doc_items applies only to --corpus documents" in bad.output
