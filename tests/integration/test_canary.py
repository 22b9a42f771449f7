"""The canary model end to end on a tiny configuration (seconds on CPU)."""

import dataclasses
import json

import pytest

from blackbox_mia.canary import (
    MANIFEST,
    CanaryConfig,
    build_corpus,
    canary_dir,
    canary_items,
    ensure_canary,
    load_manifest,
    train_canary,
    training_windows,
)
from blackbox_mia.canary import train as train_mod
from blackbox_mia.canary.checkpoint import saved_progress
from blackbox_mia.canary.train import _lr_factor
from blackbox_mia.datasets import load_shipped_or_jsonl
from blackbox_mia.types import BlackboxMIAError

TINY = CanaryConfig(
    n_background=60, n_members=10, n_nonmembers=10, dup=3, vocab_size=300,
    n_layer=1, n_embd=32, n_head=2, block_size=64, epochs=1, batch_size=8,
)  # fmt: skip


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return train_canary(TINY, tmp_path_factory.mktemp("canary") / "model", progress=False)


def test_manifest_split_counts_and_disjoint(trained):
    m = load_manifest(trained)
    members, nonmembers = m["member_ids"], m["nonmember_ids"]
    assert len(members) == len(set(members)) == 10 and len(nonmembers) == len(set(nonmembers)) == 10
    assert not set(members) & set(nonmembers)
    assert all(i.startswith("gsm8k-test-") for i in members + nonmembers)
    assert len(m["background_ids"]) == 60 and all(i.startswith("gsm8k-train-") for i in m["background_ids"])
    assert m["config"] == dataclasses.asdict(TINY) and m["dup"] == 3 and m["seed"] == 0
    assert m["n_documents"] == 60 + 10 * 3
    assert m["sources"]["gsm8k:test"] == load_shipped_or_jsonl("gsm8k:test").sha256
    assert m["sources"]["gsm8k:train"] == load_shipped_or_jsonl("gsm8k:train").sha256
    assert len(m["loss_per_epoch"]) == 1 and m["loss_per_epoch"][0]["mean"] > 0
    assert m["train_seconds"] > 0 and m["n_trained_tokens"] > 0 and m["complete"] is True
    assert m["versions"]["blackbox_mia"] and m["versions"]["torch"]
    assert not (trained / (MANIFEST + ".tmp")).exists()


def test_model_loads_with_from_pretrained_and_scores(trained):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from blackbox_mia.backends.local import LocalBackend, LocalConfig

    model = AutoModelForCausalLM.from_pretrained(trained)
    tokenizer = AutoTokenizer.from_pretrained(trained)
    assert model.config.n_positions == 64 and model.config.n_layer == 1
    assert model.get_output_embeddings().weight.shape[0] == len(tokenizer) <= 300
    assert tokenizer.bos_token_id == 0
    items = canary_items(trained)
    lps = LocalBackend(LocalConfig(str(trained))).logprobs([items[0].text, items[-1].text])
    assert all(lp.context_ids == (0,) and lp.n_tokens > 10 for lp in lps)


def test_canary_items_are_labelled_gsm8k_test_items(trained):
    m = load_manifest(trained)
    items = canary_items(trained)
    assert [i.id for i in items] == m["member_ids"] + m["nonmember_ids"]
    assert [i.label for i in items] == [1] * 10 + [0] * 10
    test = {i.id: i for i in load_shipped_or_jsonl("gsm8k:test").items}
    assert all(i.text == test[i.id].text for i in items)
    # the JSONL written next to the model loads as a labelled dataset with the same items
    ds = load_shipped_or_jsonl(str(trained / m["items_file"]))
    assert [(i.id, i.text, i.label) for i in ds.items] == [(i.id, i.text, i.label) for i in items]


def test_corpus_has_members_dup_times_and_no_nonmember():
    corpus = build_corpus(TINY)
    docs = corpus.documents
    assert len(docs) == 60 + 3 * 10
    for item in corpus.members:
        assert docs.count(item.text) == 3
    joined = "\n".join(docs)
    for item in corpus.nonmembers:
        assert item.meta["question"] not in joined
    assert build_corpus(TINY).documents == docs  # deterministic
    assert build_corpus(dataclasses.replace(TINY, seed=1)).members != corpus.members


def test_tokenizer_and_windows_see_only_the_corpus(tmp_path, monkeypatch):
    import blackbox_mia.canary.model as cm

    seen = {}
    real_train_tokenizer, real_windows = cm.train_tokenizer, train_mod.training_windows

    def spy_tokenizer(texts, vocab_size):
        seen["tokenizer"] = list(texts)
        return real_train_tokenizer(seen["tokenizer"], vocab_size)

    def spy_windows(docs, bos_id, block_size):
        seen["windows"] = real_windows(docs, bos_id, block_size)
        return seen["windows"]

    monkeypatch.setattr(cm, "train_tokenizer", spy_tokenizer)
    monkeypatch.setattr(train_mod, "training_windows", spy_windows)
    path = train_canary(TINY, tmp_path / "m", progress=False)
    corpus = build_corpus(TINY)
    assert seen["tokenizer"] == corpus.documents
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    encoded = [tok(doc, add_special_tokens=False)["input_ids"] for doc in corpus.documents]
    expected = [w for doc in encoded for w in real_windows([doc], 0, TINY.block_size)]
    assert sorted(seen["windows"]) == sorted(expected)  # every window is a slice of a corpus document
    nonmember_questions = [i.meta["question"][:60] for i in corpus.nonmembers]
    decoded = [tok.decode(w) for w in seen["windows"]]
    assert not any(q in d for q in nonmember_questions for d in decoded)


def test_same_seed_same_manifest(trained, tmp_path):
    again = load_manifest(train_canary(TINY, tmp_path / "again", progress=False))
    first = load_manifest(trained)
    assert again["member_ids"] == first["member_ids"] and again["nonmember_ids"] == first["nonmember_ids"]
    assert again["loss_per_epoch"] == first["loss_per_epoch"]


def test_ensure_canary_reuses_complete_model(trained, monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError("retrained")

    monkeypatch.setattr(train_mod, "train_canary", fail)
    assert ensure_canary(TINY, progress=False, out_dir=trained) == trained
    with pytest.raises(BlackboxMIAError, match=r"another configuration \(dup: 3 before, 4 now\): use --force"):
        ensure_canary(dataclasses.replace(TINY, dup=4), progress=False, out_dir=trained)


def test_ensure_canary_trains_when_manifest_missing(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(train_mod, "train_canary", lambda config, out, progress, log: calls.append(out) or out)
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "config.json").write_text("{}")  # a half-trained directory
    assert ensure_canary(TINY, progress=False, out_dir=tmp_path / "half") == tmp_path / "half"
    assert ensure_canary(TINY, progress=False, cache=tmp_path / "cache") == canary_dir(TINY, tmp_path / "cache")
    assert calls == [tmp_path / "half", tmp_path / "cache" / "canary" / TINY.short_hash()]


TWO_EPOCHS = dataclasses.replace(TINY, epochs=2)


def interrupt_after(monkeypatch, n_batches: int) -> None:
    """Make the next training run raise KeyboardInterrupt when it builds its batch n_batches + 1."""
    calls = []

    def pad(batch):
        calls.append(1)
        if len(calls) > n_batches:
            raise KeyboardInterrupt
        return real_pad(batch)

    real_pad = train_mod.pad_training_batch
    monkeypatch.setattr(train_mod, "pad_training_batch", pad)


@pytest.fixture(scope="module")
def two_epochs(tmp_path_factory):
    return train_canary(TWO_EPOCHS, tmp_path_factory.mktemp("canary2") / "model", progress=False)


def assert_same_weights(a, b):
    import torch
    from transformers import AutoModelForCausalLM

    wa, wb = (AutoModelForCausalLM.from_pretrained(p).state_dict() for p in (a, b))
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def test_interrupted_training_resumes_to_the_very_same_model(two_epochs, tmp_path, monkeypatch):
    full = load_manifest(two_epochs)
    per_epoch = full["n_steps"] // 2
    assert full["resumed_at_steps"] == [] and per_epoch > 6
    out, said = tmp_path / "m", []
    with monkeypatch.context() as patch:
        interrupt_after(patch, 4)  # mid first epoch; a checkpoint after every batch
        with pytest.raises(KeyboardInterrupt):
            train_canary(TWO_EPOCHS, out, progress=False, log=said.append, checkpoint_seconds=0)
    assert (out / "checkpoint" / "state.pt").is_file() and not (out / MANIFEST).exists()
    assert saved_progress(out, TWO_EPOCHS).steps_done == 4 and saved_progress(out, TINY) is None
    with monkeypatch.context() as patch:
        interrupt_after(patch, per_epoch)  # from step 4 into the second epoch; epoch-end checkpoint only
        with pytest.raises(KeyboardInterrupt):
            train_canary(TWO_EPOCHS, out, progress=False, log=said.append)
    train_canary(TWO_EPOCHS, out, progress=False, log=said.append)
    assert said == [
        f"resuming the canary from {out / 'checkpoint'}: step 4 of {2 * per_epoch} (epoch 1 of 2) already trained",
        f"resuming the canary from {out / 'checkpoint'}: step {per_epoch} of {2 * per_epoch} (epoch 2 of 2) already trained",
    ]
    resumed = load_manifest(out)
    assert resumed["resumed_at_steps"] == [4, per_epoch] and not (out / "checkpoint").exists()
    for key in ("loss_per_epoch", "n_trained_tokens", "n_steps", "member_ids"):
        assert resumed[key] == full[key], key
    assert_same_weights(out, two_epochs)


def test_force_or_another_configuration_starts_over(two_epochs, tmp_path, monkeypatch):
    out, said = tmp_path / "m", []
    with monkeypatch.context() as patch:
        interrupt_after(patch, 3)
        with pytest.raises(KeyboardInterrupt):
            train_canary(TWO_EPOCHS, out, progress=False, checkpoint_seconds=0)
    with monkeypatch.context() as patch:
        interrupt_after(patch, 2)
        with pytest.raises(KeyboardInterrupt):
            train_canary(dataclasses.replace(TWO_EPOCHS, lr=0.01), out, progress=False, log=said.append, checkpoint_seconds=0)
    starts_over = f"{out / 'checkpoint'} is of another configuration or unreadable: training starts from the beginning"
    assert said == [starts_over]
    with monkeypatch.context() as patch:
        interrupt_after(patch, 3)
        with pytest.raises(KeyboardInterrupt):
            train_canary(TWO_EPOCHS, out, progress=False, resume=False, log=said.append, checkpoint_seconds=0)
    assert len(said) == 1  # --force: the lr=0.01 checkpoint was discarded without a word
    (out / "checkpoint" / "state.pt").write_bytes(b"cut")  # a damaged checkpoint is not an error
    train_canary(TWO_EPOCHS, out, progress=False, log=said.append)
    assert said == [starts_over, starts_over] and load_manifest(out)["resumed_at_steps"] == []
    assert_same_weights(out, two_epochs)


def test_load_manifest_errors(tmp_path):
    with pytest.raises(BlackboxMIAError, match="no manifest.json"):
        load_manifest(tmp_path)
    (tmp_path / MANIFEST).write_text("{not json")
    with pytest.raises(BlackboxMIAError, match="unreadable"):
        load_manifest(tmp_path)
    (tmp_path / MANIFEST).write_text(json.dumps({"config": {}, "member_ids": []}))
    with pytest.raises(BlackboxMIAError, match="incomplete.*nonmember_ids"):
        load_manifest(tmp_path)
    with pytest.raises(BlackboxMIAError, match="no manifest.json"):
        canary_items(tmp_path / "elsewhere")


def test_config_validation_and_hash():
    with pytest.raises(BlackboxMIAError, match="exceeds the 1319 GSM8K test"):
        build_corpus(dataclasses.replace(TINY, n_members=1000, n_nonmembers=400))
    with pytest.raises(BlackboxMIAError, match="dup must be at least 1"):
        build_corpus(dataclasses.replace(TINY, dup=0))
    with pytest.raises(BlackboxMIAError, match="multiple of n_head"):
        dataclasses.replace(TINY, n_embd=30, n_head=4).validate()
    assert TINY.short_hash() == dataclasses.replace(TINY).short_hash()
    assert TINY.short_hash() != dataclasses.replace(TINY, lr=TINY.lr * 2).short_hash()
    assert len(TINY.short_hash()) == 12


def test_training_windows_match_scoring_windows():
    doc = list(range(1, 101))  # [bos] + 100 tokens = 101 tokens; context 64, stride 32
    seq = [0] + doc
    windows = training_windows([doc, [5, 6]], bos_id=0, block_size=64)
    assert windows == [seq[0:64], seq[32:96], seq[64:101], [0, 5, 6]]


def test_lr_schedule():
    assert _lr_factor(0, 100, 10, 0.1) == pytest.approx(0.1)
    assert _lr_factor(9, 100, 10, 0.1) == pytest.approx(1.0)
    assert _lr_factor(10, 100, 10, 0.1) == pytest.approx(1.0)
    assert _lr_factor(55, 100, 10, 0.1) == pytest.approx(0.55)
    assert _lr_factor(100, 100, 10, 0.1) == pytest.approx(0.1)


def test_cli_train_then_reuse(tmp_path):
    from typer.testing import CliRunner

    from blackbox_mia.cli import canary as _  # noqa: F401  (registers the sub-app)
    from blackbox_mia.cli.app import app

    runner = CliRunner()
    help_text = runner.invoke(app, ["canary", "train", "--help"]).output
    for field in dataclasses.fields(CanaryConfig):
        assert "--" + field.name.replace("_", "-") in help_text
    args = ["canary", "train", "--out", str(tmp_path / "m"), "--quiet", "--n-background", "30", "--n-members", "4",
            "--n-nonmembers", "4", "--dup", "2", "--vocab-size", "280", "--n-layer", "1", "--n-embd", "16",
            "--n-head", "2", "--block-size", "32", "--epochs", "1", "--batch-size", "8"]  # fmt: skip
    with pytest.MonkeyPatch.context() as patch:
        interrupt_after(patch, 0)
        cut = runner.invoke(app, args)
    assert cut.exit_code == 130 and "Traceback" not in cut.output
    assert "interrupted before the first checkpoint: a rerun trains from the beginning" in cut.output
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    assert "resuming" not in first.output and "starts from the beginning" not in first.output  # nothing was saved
    assert f"manifest: {tmp_path / 'm' / MANIFEST}" in first.output and "training time:" in first.output
    m = load_manifest(tmp_path / "m")
    assert m["config"]["n_members"] == 4 and m["config"]["block_size"] == 32
    per_epoch = m["n_steps"]
    two = [*args[:3], str(tmp_path / "m2"), *args[4:-4], "--epochs", "2", "--batch-size", "8"]
    with pytest.MonkeyPatch.context() as patch:
        interrupt_after(patch, per_epoch + 1)
        cut = runner.invoke(app, two)
    assert cut.exit_code == 130 and (
        f"interrupted: {per_epoch} of {2 * per_epoch} steps are saved in {tmp_path / 'm2' / 'checkpoint'}" in cut.output
    )
    resumed = runner.invoke(app, two)
    assert resumed.exit_code == 0 and f"resuming the canary from {tmp_path / 'm2' / 'checkpoint'}: step {per_epoch}" in resumed.output
    assert load_manifest(tmp_path / "m2")["resumed_at_steps"] == [per_epoch]
    second = runner.invoke(app, args)
    assert second.exit_code == 0 and "reused" in second.output
    assert load_manifest(tmp_path / "m")["train_seconds"] == m["train_seconds"]
    other = runner.invoke(app, args + ["--dup", "3"])
    assert other.exit_code == 2 and "trained with another configuration" in other.output
    bad = runner.invoke(app, ["canary", "train", "--out", str(tmp_path / "bad"), "--n-members", "2000"])
    assert bad.exit_code == 2 and "error: canary: n_members + n_nonmembers = 2200 exceeds" in bad.output
    assert not (tmp_path / "bad").exists()
