"""Shipped datasets (counts, exact texts, ids), user JSONL parsing with its error messages, and
canary specs resolved in the cache root."""

import json

import pytest

from blackbox_mia.canary.dataset import is_canary_spec, load_any_dataset, load_items
from blackbox_mia.datasets import (
    DATA_DIR,
    Dataset,
    Item,
    file_sha256,
    gsm8k_text,
)
from blackbox_mia.types import BlackboxMIAError


@pytest.mark.parametrize(
    "spec, name, count, members",
    [
        ("gsm8k", "gsm8k:test", 1319, None),
        ("gsm8k:test", "gsm8k:test", 1319, None),
        ("gsm8k:train", "gsm8k:train", 7473, None),
        ("aqua", "aqua:test", 254, None),
        ("aqua:dev", "aqua:dev", 254, None),
        ("wikimia64", "wikimia64", 542, 284),
        ("wikimia128", "wikimia128", 200, 100),
        ("wikimia24", "wikimia24", 200, 100),
    ],
)
def test_shipped_counts_and_labels(spec, name, count, members):
    ds = load_any_dataset(spec)
    assert ds.name == name and len(ds.items) == count
    assert len({item.id for item in ds.items}) == count
    assert ds.sha256 == file_sha256(ds.source)
    if members is None:
        assert not ds.labelled and all(item.label is None for item in ds.items)
    else:
        assert ds.labelled and sum(item.label for item in ds.items) == members


def test_gsm8k_sha256_matches_provenance():
    ds = load_any_dataset("gsm8k:test")
    assert ds.sha256 == "3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14"
    assert ds.source == str(DATA_DIR / "gsm8k" / "test.jsonl")


def test_gsm8k_test_0_exact_text():
    item = load_any_dataset("gsm8k").items[0]
    with open(DATA_DIR / "gsm8k" / "test.jsonl", encoding="utf-8") as f:
        raw = json.loads(f.readline())
    assert item.id == "gsm8k-test-0"
    assert item.text == "Question: " + raw["question"] + "\nAnswer: " + raw["answer"]
    assert item.text == gsm8k_text(raw["question"], raw["answer"])
    assert item.text.startswith("Question: Janet\u2019s ducks lay 16 eggs per day.")
    assert "<<16-3-4=9>>" in item.text and item.text.endswith("\n#### 18")
    assert item.meta == {"question": raw["question"], "answer": raw["answer"]}


def test_gsm8k_train_ids_and_aqua_text():
    assert load_any_dataset("gsm8k:train").items[7472].id == "gsm8k-train-7472"
    item = load_any_dataset("aqua").items[0]
    assert item.id == "aqua-test-0"
    m = item.meta
    assert set(m) == {"question", "options", "rationale", "correct"} and len(m["options"]) == 5
    assert item.text == (
        f"Question: {m['question']}\nOptions: {' '.join(m['options'])}\nRationale: {m['rationale']}\nAnswer: {m['correct']}"
    )
    assert "\nOptions: A)5(\u221a3 + 1) B)" in item.text


def test_wikimia_ids_use_hf_index():
    ds = load_any_dataset("wikimia64")
    first = ds.items[0]
    assert first.id == "wikimia64-0" and first.label == 0
    assert first.text.startswith("The 12th Circle Chart Music Awards ceremony")
    assert first.meta["hf_index"] == 0 and "input" not in first.meta
    assert load_any_dataset("wikimia24").items[0].id.startswith("wikimia24-")


def write(tmp_path, lines, name="data.jsonl"):
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_jsonl_with_text_field_ids_and_labels(tmp_path):
    path = write(
        tmp_path,
        [
            json.dumps({"text": "first text", "label": 1, "id": "a", "source": "x"}),
            "",
            "   ",
            json.dumps({"text": "second text", "label": 0}),
            json.dumps({"text": "third text", "label": None, "id": 7}),
            json.dumps({"text": "fourth", "label": True}),
        ],
    )
    ds = load_any_dataset(str(path))
    assert isinstance(ds, Dataset) and ds.name == str(path) and ds.source == str(path)
    assert ds.items[0] == Item("a", "first text", 1, {"source": "x"})
    assert ds.items[1] == Item("data-1", "second text", 0, {})
    assert ds.items[2].id == "7" and ds.items[2].label is None
    assert ds.items[3].label == 1 and type(ds.items[3].label) is int
    assert not ds.labelled
    assert ds.sha256 == file_sha256(path)


def test_jsonl_with_input_field(tmp_path):
    path = write(tmp_path, [json.dumps({"input": "an input text", "label": 0}), json.dumps({"input": "b", "label": 1.0})])
    ds = load_any_dataset(str(path))
    assert [(i.id, i.text, i.label) for i in ds.items] == [("data-0", "an input text", 0), ("data-1", "b", 1)]
    assert ds.labelled


def test_missing_file(tmp_path):
    with pytest.raises(BlackboxMIAError, match=r"not found: .*nope\.jsonl"):
        load_any_dataset(str(tmp_path / "nope.jsonl"))


def test_malformed_line_names_file_and_line(tmp_path):
    path = write(tmp_path, [json.dumps({"text": "ok"}), "", '{"text": "broken'])
    with pytest.raises(BlackboxMIAError, match=rf"{path}:3: malformed JSON"):
        load_any_dataset(str(path))


def test_not_an_object(tmp_path):
    path = write(tmp_path, ['["text"]'])
    with pytest.raises(BlackboxMIAError, match=r":1: expected a JSON object"):
        load_any_dataset(str(path))


def test_missing_text_field(tmp_path):
    path = write(tmp_path, [json.dumps({"text": "ok"}), json.dumps({"body": "no text key"})])
    with pytest.raises(BlackboxMIAError, match=r":2: no 'text' or 'input' field"):
        load_any_dataset(str(path))


@pytest.mark.parametrize("text", ["", "   \n"])
def test_empty_text(tmp_path, text):
    path = write(tmp_path, [json.dumps({"text": "ok"}), json.dumps({"text": "fine"}), json.dumps({"text": text})])
    with pytest.raises(BlackboxMIAError, match=r":3: empty text"):
        load_any_dataset(str(path))


def test_non_string_text(tmp_path):
    path = write(tmp_path, [json.dumps({"text": 42})])
    with pytest.raises(BlackboxMIAError, match=r":1: text must be a string"):
        load_any_dataset(str(path))


@pytest.mark.parametrize("label", [2, -1, "1", 0.5])
def test_bad_label(tmp_path, label):
    path = write(tmp_path, [json.dumps({"text": "ok", "label": 1}), json.dumps({"text": "t", "label": label})])
    with pytest.raises(BlackboxMIAError, match=r":2: label must be 0, 1 or null"):
        load_any_dataset(str(path))


def test_duplicate_id(tmp_path):
    path = write(tmp_path, [json.dumps({"text": "a", "id": "x"}), json.dumps({"text": "b", "id": "x"})])
    with pytest.raises(BlackboxMIAError, match=r":2: duplicate id 'x' \(first at .*data.jsonl:1\)"):
        load_any_dataset(str(path))


def test_empty_dataset(tmp_path):
    path = write(tmp_path, ["", "  "])
    with pytest.raises(BlackboxMIAError, match="empty dataset"):
        load_any_dataset(str(path))


def write_canary(model_dir, members, nonmembers):
    """A complete canary manifest (no model: the items come from the manifest alone)."""
    model_dir.mkdir(parents=True)
    manifest = {"config": {}, "member_ids": members, "nonmember_ids": nonmembers, "loss_per_epoch": [],
                "train_seconds": 0.0, "complete": True}
    (model_dir / "manifest.json").write_text(json.dumps(manifest))
    return model_dir


def test_canary_spec_is_resolved_in_the_cache_root(tmp_path, monkeypatch):
    from blackbox_mia.canary import CanaryConfig

    monkeypatch.chdir(tmp_path)  # the fallback cache root ./cache must not be the one found
    monkeypatch.delenv("BBMIA_CACHE_DIR", raising=False)
    default = write_canary(tmp_path / "root" / "canary" / CanaryConfig().short_hash(),
                           ["gsm8k-test-5", "gsm8k-test-2"], ["gsm8k-test-7"])
    items, meta = load_items("canary", cache_dir=tmp_path / "root")
    test = {it.id: it for it in load_any_dataset("gsm8k:test").items}
    assert [(it.id, it.label) for it in items] == [("gsm8k-test-5", 1), ("gsm8k-test-2", 1), ("gsm8k-test-7", 0)]
    assert items[0].text == test["gsm8k-test-5"].text
    assert meta == {"name": f"canary:{default}", "source": str(default / "manifest.json"),
                    "sha256": file_sha256(default / "manifest.json")}
    # --limit keeps each label's share: one member and the non-member, not the two members
    assert load_items("canary", limit=2, cache_dir=tmp_path / "root") == ([items[0], items[2]], meta)
    monkeypatch.setenv("BBMIA_CACHE_DIR", str(tmp_path / "root"))  # the environment, without cache_dir
    assert load_items("canary") == (items, meta)
    assert load_any_dataset("canary").items == items
    with pytest.raises(BlackboxMIAError, match=r"no trained canary at .*other.*; train one with: bbmia canary train$"):
        load_items("canary", cache_dir=tmp_path / "other")  # cache_dir wins over the environment


def test_canary_path_spec_ignores_the_cache_root(tmp_path):
    path = write_canary(tmp_path / "model", ["gsm8k-test-0"], ["gsm8k-test-1"])
    items, meta = load_items(f"canary:{path}", cache_dir=tmp_path / "unused")
    assert [(it.id, it.label) for it in items] == [("gsm8k-test-0", 1), ("gsm8k-test-1", 0)]
    assert meta["name"] == f"canary:{path}"
    with pytest.raises(BlackboxMIAError, match=r"no trained canary at .*nothing.*bbmia canary train --out"):
        load_items(f"canary:{tmp_path / 'nothing'}")
    with pytest.raises(BlackboxMIAError, match="not a canary spec"):
        load_items("canary:")
    assert is_canary_spec("canary") and is_canary_spec("canary:x") and not is_canary_spec("canary.jsonl")


def item(i: int, label: int | None) -> Item:
    return Item(id=f"i{i}", text=f"text {i}", label=label)


@pytest.mark.parametrize("labels, limit, kept", [
    ([1] * 200 + [0] * 200, 40, [*range(20), *range(200, 220)]),  # a canary: members first, 20 of each
    ([1] * 6 + [0] * 3, 3, [0, 1, 6]),  # 3 * 6/9 = 2 members, 1 non-member
    ([1] * 9 + [0], 4, [0, 1, 2, 9]),  # 3.6 / 0.4: the rare label still gets its one
    ([1, 0, 1, 0, 1, 0], 4, [0, 1, 2, 3]),  # interleaved: the first items, in order
    ([None] * 5, 2, [0, 1]),  # unlabelled: the first items
    ([1] * 4, 2, [0, 1]),  # one label: the first items
    ([1, 1, 0], 1, [0]),  # one item cannot hold both labels: the larger share's first
    ([1, 1, 0], 5, [0, 1, 2]),  # more than there are: all
])
def test_limit_is_stratified_by_label_in_the_datasets_order(labels, limit, kept):
    from blackbox_mia.datasets import limit_items

    items = [item(i, label) for i, label in enumerate(labels)]
    assert limit_items(items, limit) == [items[i] for i in kept]


def test_an_unknown_dataset_lists_every_name_canary_first(tmp_path):
    with pytest.raises(BlackboxMIAError) as err:
        load_any_dataset(str(tmp_path / "nothing.jsonl"))
    assert "(named datasets: canary, canary:PATH, gsm8k, gsm8k:test" in str(err.value)
