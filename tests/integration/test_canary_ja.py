"""The Japanese canary (``--corpus ja``): split, tiny training through the CLI, hash of the default."""

import dataclasses
import json
import random

import numpy as np
import pytest
from typer.testing import CliRunner

from blackbox_mia.canary import (
    MANIFEST,
    CanaryConfig,
    build_corpus,
    canary_items,
    load_manifest,
)
from blackbox_mia.canary import train as train_mod
from blackbox_mia.canary.config import canary_dir
from blackbox_mia.cli import canary as _  # noqa: F401  (registers the sub-app)
from blackbox_mia.cli.app import app
from blackbox_mia.canary.dataset import load_items
from blackbox_mia.datasets import load_shipped_or_jsonl
from blackbox_mia.types import BlackboxMIAError

SMALL = CanaryConfig(corpus="ja", n_background=30, n_members=10, n_nonmembers=10, dup=4)
# Paragraphs run to 146 tokens with this vocabulary: longer than block_size, so they are windowed.
TINY_ARGS = {"--corpus": "ja", "--n-background": 30, "--n-members": 10, "--n-nonmembers": 10, "--dup": 4,
             "--vocab-size": 1000, "--n-layer": 1, "--n-embd": 32, "--n-head": 2, "--block-size": 64,
             "--epochs": 2, "--batch-size": 8, "--lr": 0.01}  # fmt: skip


@pytest.fixture(scope="module")
def paragraphs():
    return load_shipped_or_jsonl("ja-debian-docs")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("canary_ja") / "model"
    args = ["canary", "train", "--out", str(out), "--quiet"] + [str(a) for kv in TINY_ARGS.items() for a in kv]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return out


def test_default_gsm8k_hash_and_directory_unchanged(tmp_path):
    # the values before the corpus choice existed (the default canary and tests/integration/test_canary.py's TINY)
    assert CanaryConfig().short_hash() == "6338e872951d"
    assert CanaryConfig(corpus="gsm8k", n_background=2000) == CanaryConfig()
    tiny = CanaryConfig(n_background=60, n_members=10, n_nonmembers=10, dup=3, vocab_size=300,
                        n_layer=1, n_embd=32, n_head=2, block_size=64, epochs=1, batch_size=8)  # fmt: skip
    assert tiny.short_hash() == "d180ba61421e"
    assert canary_dir(CanaryConfig(), tmp_path) == tmp_path / "canary" / "6338e872951d"
    ja = CanaryConfig(corpus="ja")
    assert ja.n_background == 1407 and ja.n_members == ja.n_nonmembers == 200 and ja.epochs == 4
    assert CanaryConfig().epochs == 2
    assert ja.short_hash() not in ("6338e872951d", CanaryConfig(n_background=1407).short_hash())


def test_ja_split_is_the_seeded_shuffle_and_disjoint(paragraphs):
    corpus = build_corpus(SMALL)
    order = list(range(len(paragraphs.items)))
    random.Random(0).shuffle(order)
    ids = [paragraphs.items[i].id for i in order]
    assert [i.id for i in corpus.members] == ids[:10]
    assert [i.id for i in corpus.nonmembers] == ids[10:20]
    assert corpus.background_ids == ids[20:50]
    assert [i.label for i in corpus.members] == [1] * 10 and [i.label for i in corpus.nonmembers] == [0] * 10
    assert corpus.sources == {"ja-debian-docs": paragraphs.sha256}
    by_id = {i.id: i.text for i in paragraphs.items}
    docs = corpus.documents
    assert len(docs) == 30 + 4 * 10
    assert sorted(docs) == sorted([by_id[i] for i in corpus.background_ids] + [m.text for m in corpus.members] * 4)
    assert not any(n.text in docs for n in corpus.nonmembers)
    again, other = build_corpus(SMALL), build_corpus(dataclasses.replace(SMALL, seed=1))
    assert again.documents == docs and again.members == corpus.members
    assert {i.id for i in other.members} != {i.id for i in corpus.members}


def test_default_ja_split_uses_every_paragraph_once(paragraphs):
    corpus = build_corpus(CanaryConfig(corpus="ja"))
    members, nonmembers = [i.id for i in corpus.members], [i.id for i in corpus.nonmembers]
    assert (len(members), len(nonmembers), len(corpus.background_ids)) == (200, 200, 1407)
    assert sorted(members + nonmembers + corpus.background_ids) == sorted(i.id for i in paragraphs.items)
    assert len(corpus.documents) == 1407 + 8 * 200


def test_ja_sizes_and_corpus_errors():
    with pytest.raises(BlackboxMIAError, match=r"n_members \+ n_nonmembers \+ n_background = 1900 exceeds the 1807 ja-debian-docs paragraphs"):
        build_corpus(CanaryConfig(corpus="ja", n_background=1500))
    with pytest.raises(BlackboxMIAError, match="unknown corpus 'fr'; corpora: gsm8k, ja"):
        CanaryConfig(corpus="fr")


def test_tiny_ja_canary_members_have_lower_loss(trained, paragraphs):
    from blackbox_mia.backends.local import LocalBackend, LocalConfig

    m = load_manifest(trained)
    assert m["corpus"] == m["config"]["corpus"] == "ja" and m["config"]["n_background"] == 30
    assert m["sources"] == {"ja-debian-docs": paragraphs.sha256}
    assert m["n_documents"] == 30 + 4 * 10 and m["n_windows"] > m["n_documents"]  # long paragraphs are windowed
    items, meta = load_items(f"canary:{trained}")
    assert meta["name"] == f"canary:{trained}"
    assert [i.id for i in items] == m["member_ids"] + m["nonmember_ids"]
    assert [i.label for i in items] == [1] * 10 + [0] * 10
    by_id = {i.id: i.text for i in paragraphs.items}
    assert all(i.text == by_id[i.id] for i in items)
    lps = LocalBackend(LocalConfig(str(trained))).logprobs([i.text for i in items])
    assert max(lp.n_tokens for lp in lps) > 64  # scored in windows too
    loss = np.array([-lp.logprobs.mean() for lp in lps])  # nats/token
    assert loss[:10].mean() < loss[10:].mean() - 0.3


def test_cli_reuses_ja_canary_and_rejects_other_corpus(trained):
    runner = CliRunner()
    base = ["canary", "train", "--out", str(trained), "--quiet"] + [str(a) for kv in TINY_ARGS.items() for a in kv]
    again = runner.invoke(app, base)
    assert again.exit_code == 0 and "reused" in again.output
    other = runner.invoke(app, base + ["--corpus", "gsm8k"])
    assert other.exit_code == 2 and "trained with another configuration" in other.output
    bad = runner.invoke(app, ["canary", "train", "--corpus", "fr"])
    assert bad.exit_code == 2 and "unknown corpus 'fr'" in bad.output


def test_manifest_without_corpus_is_a_gsm8k_canary(tmp_path, monkeypatch):
    """Canaries trained before the corpus choice: reused as they are, items from GSM8K test."""
    monkeypatch.setattr(train_mod, "train_canary", lambda *a, **k: pytest.fail("retrained"))
    config = dataclasses.asdict(CanaryConfig())
    del config["corpus"]
    manifest = {"config": config, "member_ids": ["gsm8k-test-3"], "nonmember_ids": ["gsm8k-test-4"],
                "loss_per_epoch": [], "train_seconds": 0.0, "complete": True}  # fmt: skip
    (tmp_path / MANIFEST).write_text(json.dumps(manifest))
    assert train_mod.ensure_canary(CanaryConfig(), progress=False, out_dir=tmp_path) == tmp_path
    with pytest.raises(BlackboxMIAError, match="another configuration"):
        train_mod.ensure_canary(CanaryConfig(corpus="ja"), progress=False, out_dir=tmp_path)
    test = {i.id: i.text for i in load_shipped_or_jsonl("gsm8k:test").items}
    assert [(i.id, i.label, i.text) for i in canary_items(tmp_path)] == [
        ("gsm8k-test-3", 1, test["gsm8k-test-3"]), ("gsm8k-test-4", 0, test["gsm8k-test-4"])
    ]  # fmt: skip
    (tmp_path / MANIFEST).write_text(json.dumps({**manifest, "corpus": "fr"}))
    with pytest.raises(BlackboxMIAError, match="unknown corpus 'fr' in its manifest"):
        canary_items(tmp_path)
