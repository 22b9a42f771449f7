"""Data files by suffix (JSON Lines, JSON, CSV, Parquet, each also gzip), field names, Hugging
Face data sets from a local directory, MIMIR and WikiMIA look-alikes, and the one-line errors."""

from __future__ import annotations

import csv
import gzip
import json

import pytest

from blackbox_mia.canary.dataset import load_any_dataset, load_items
from blackbox_mia.datasets import DATA_DIR
from blackbox_mia.datasets.fields import Fields, split_fields, with_fields
from blackbox_mia.types import BlackboxMIAError

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

ROWS = [  # commas, quotes, a newline, non-ASCII, a null label, an integer id
    {"id": "a", "text": "Tom has 3 apples, and eats \"one\".", "label": 1},
    {"id": "b", "text": "Zoë walks\n4 miles — to school.", "label": 0},
    {"id": 7, "text": "007 is not a number here", "label": None},
]
EXPECTED = [("a", ROWS[0]["text"], 1), ("b", ROWS[1]["text"], 0), ("7", ROWS[2]["text"], None)]


def write(path, rows, form):
    """``rows`` written as ``form`` (jsonl, json, json-columns, csv, parquet) at ``path`` (gzip for .gz)."""
    columns = {key: [row[key] for row in rows] for key in rows[0]}
    if form == "jsonl":
        data = "".join(json.dumps(row) + "\n" for row in rows).encode()
    elif form == "json":
        data = json.dumps(rows).encode()
    elif form == "json-columns":
        data = json.dumps(columns).encode()
    elif form == "csv":
        lines = [list(columns)] + [["" if row[k] is None else row[k] for k in columns] for row in rows]
        with open(path.with_suffix(".tmp"), "w", newline="", encoding="utf-8") as f:
            csv.writer(f).writerows(lines)
        data = path.with_suffix(".tmp").read_bytes()
    else:
        sink = pa.BufferOutputStream()
        pq.write_table(pa.table({k: [None if v is None else str(v) if k == "id" else v for v in vs]
                                 for k, vs in columns.items()}), sink)
        data = sink.getvalue().to_pybytes()
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    return path


FILES = [("data.jsonl", "jsonl"), ("data.json", "json"), ("data.json", "json-columns"), ("data.csv", "csv"),
         ("data.parquet", "parquet")]


@pytest.mark.parametrize("compressed", [False, True])
@pytest.mark.parametrize("name, form", FILES)
def test_every_format_gives_the_items_of_the_same_rows_in_jsonl(tmp_path, name, form, compressed):
    path = write(tmp_path / (name + (".gz" if compressed else "")), ROWS, form)
    dataset = load_any_dataset(str(path))
    assert [(it.id, it.text, it.label) for it in dataset.items] == EXPECTED
    assert dataset.format == name.split(".")[1] + (" (gzip)" if compressed else "")
    assert dataset.metadata()["format"] == dataset.format


def test_a_gzipped_jsonl_file_is_read_not_told_not_utf8(tmp_path):
    """Issue 51 item 9: ``.jsonl.gz`` was refused as "not UTF-8"; its default ids use the stem without both suffixes."""
    path = tmp_path / "items.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"text": "first"}\n{"text": "second", "label": 1}\n'))
    items, meta = load_items(str(path))
    assert [(it.id, it.text, it.label) for it in items] == [("items-0", "first", None), ("items-1", "second", 1)]
    assert meta["format"] == "jsonl (gzip)"


def test_field_names_by_option_or_in_the_spec(tmp_path):
    path = tmp_path / "posts.csv"
    path.write_text("uid,body,is_member,lang\nu1,Hello there,1,en\nu2,Bonjour,0,fr\n", encoding="utf-8")
    fields = Fields(text_field="body", label_field="is_member", id_field="uid")
    by_option = load_any_dataset(str(path), fields=fields)
    in_spec = load_any_dataset(f"{path}?text_field=body&label_field=is_member&id_field=uid")
    assert by_option == in_spec
    assert [(it.id, it.text, it.label, it.meta) for it in by_option.items] == [
        ("u1", "Hello there", 1, {"lang": "en"}), ("u2", "Bonjour", 0, {"lang": "fr"})]
    assert by_option.name == f"{path}?text_field=body&label_field=is_member&id_field=uid"


def test_fields_in_spec_and_option_must_agree():
    assert with_fields("d.csv?text_field=a", Fields(text_field="a", id_field="k")) == "d.csv?text_field=a&id_field=k"
    assert split_fields("d.csv?label_field=y") == ("d.csv", Fields(label_field="y"))
    with pytest.raises(BlackboxMIAError, match="differ"):
        with_fields("d.csv?text_field=a", Fields(text_field="b"))
    with pytest.raises(BlackboxMIAError, match="unknown dataset field 'txt'.*known: text_field, label_field, id_field"):
        split_fields("d.csv?txt=a")


def test_a_file_without_the_text_column_names_its_columns(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text("body,label\nhello,1\n", encoding="utf-8")
    with pytest.raises(BlackboxMIAError, match=r"d.csv:2: no 'text' or 'input' field \(fields: body, label\); "
                                               r"name the text field with text_field="):
        load_any_dataset(str(path))
    with pytest.raises(BlackboxMIAError, match=r"no 'content' field \(fields: body, label\)"):
        load_any_dataset(str(path), fields=Fields(text_field="content"))
    with pytest.raises(BlackboxMIAError, match=r"no 'member' field for the label"):
        load_any_dataset(str(path), fields=Fields(text_field="body", label_field="member"))


@pytest.mark.parametrize("cell", ["2", "yes", "1.5"])
def test_a_csv_label_outside_0_1_null(tmp_path, cell):
    path = tmp_path / "d.csv"
    path.write_text(f"text,label\nok,1\nbad,{cell}\n", encoding="utf-8")
    with pytest.raises(BlackboxMIAError, match=rf"d.csv:3: label must be 0, 1 or null, got '{cell}'"):
        load_any_dataset(str(path))


def test_a_parquet_label_outside_0_1_null(tmp_path):
    path = write(tmp_path / "d.parquet", [{"text": "a", "label": 1}, {"text": "b", "label": 3}], "parquet")
    with pytest.raises(BlackboxMIAError, match=r"d.parquet: row 1: label must be 0, 1 or null, got 3"):
        load_any_dataset(str(path))


def test_a_parquet_file_that_is_not_parquet(tmp_path):
    path = tmp_path / "d.parquet"
    path.write_text('{"text": "I am JSON"}\n', encoding="utf-8")
    with pytest.raises(BlackboxMIAError, match=r"d.parquet: not a Parquet file"):
        load_any_dataset(str(path))


@pytest.mark.parametrize("name", ["d.jsonl.gz", "d.csv.gz", "d.json.gz", "d.parquet.gz"])
def test_a_truncated_gzip_file(tmp_path, name):
    whole = gzip.compress(("".join(json.dumps({"text": f"row {i}"}) + "\n" for i in range(200))).encode())
    path = tmp_path / name
    path.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(BlackboxMIAError, match=r"d\..*\.gz: truncated or corrupt gzip file"):
        load_any_dataset(str(path))


def test_json_columns_of_different_lengths(tmp_path):
    path = tmp_path / "d.json"
    path.write_text(json.dumps({"text": ["a", "b"], "label": [1]}), encoding="utf-8")
    with pytest.raises(BlackboxMIAError, match=r"arrays of one length \(text: 2, label: 1\)"):
        load_any_dataset(str(path))


def test_a_csv_row_with_too_many_cells(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text("text,label\na,1\nb,0,extra\n", encoding="utf-8")
    with pytest.raises(BlackboxMIAError, match=r"d.csv:3: not as many cells as the header's 2 columns"):
        load_any_dataset(str(path))


# -- Hugging Face data sets from disk ----------------------------------------------------------

datasets = pytest.importorskip("datasets")


@pytest.fixture()
def hf_cache(tmp_path, monkeypatch):
    """The Datasets library's cache in the test's folder (a folder of files is prepared there)."""
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")
    return tmp_path / "hf-cache"


def test_hf_save_to_disk_and_a_folder_of_parquet_files(tmp_path, hf_cache):
    rows = [{"text": t, "label": lab} for _, t, lab in EXPECTED[:2]]
    datasets.DatasetDict({"train": datasets.Dataset.from_list(rows),
                          "test": datasets.Dataset.from_list(rows[::-1])}).save_to_disk(str(tmp_path / "saved"))
    (tmp_path / "folder" / "data").mkdir(parents=True)
    write(tmp_path / "folder" / "data" / "test-00000-of-00001.parquet", rows[::-1], "parquet")
    saved = load_any_dataset(f"hf:{tmp_path / 'saved'}:test")
    folder = load_any_dataset(f"hf:{tmp_path / 'folder'}")  # its one split
    expected = [("saved-0", EXPECTED[1][1], 0), ("saved-1", EXPECTED[0][1], 1)]
    assert [(it.id, it.text, it.label) for it in saved.items] == expected
    assert [(it.text, it.label) for it in folder.items] == [(t, lab) for _, t, lab in expected]
    assert saved.sha256 != folder.sha256 and saved.format == "hf"  # the ids differ (saved-, folder-)
    assert load_any_dataset(f"hf:{tmp_path / 'saved'}:test").sha256 == saved.sha256
    assert hf_cache.is_dir()


def test_hf_a_folder_of_json_lines_files_by_split(tmp_path, hf_cache):
    (tmp_path / "jf").mkdir()
    (tmp_path / "jf" / "train.jsonl").write_text('{"text": "a", "label": 1}\n{"text": "b", "label": 0}\n')
    (tmp_path / "jf" / "test.jsonl").write_text('{"text": "c", "label": 1}\n')
    test = load_any_dataset(f"hf:{tmp_path / 'jf'}:test")
    assert [(it.id, it.text, it.label) for it in test.items] == [("jf-0", "c", 1)]
    with pytest.raises(BlackboxMIAError, match=r"hf:.*jf: no split given; the splits are train, test$"):
        load_any_dataset(f"hf:{tmp_path / 'jf'}")


def test_hf_fields_and_a_missing_split(tmp_path):
    datasets.DatasetDict({"member": datasets.Dataset.from_dict({"body": ["x", "y"], "key": ["k1", "k2"]})}).save_to_disk(
        str(tmp_path / "d"))
    ds = load_any_dataset(f"hf:{tmp_path / 'd'}:member", fields=Fields(text_field="body", id_field="key"))
    assert [(it.id, it.text) for it in ds.items] == [("k1", "x"), ("k2", "y")]
    with pytest.raises(BlackboxMIAError, match=r"no split 'train'; the splits are member$"):
        load_any_dataset(f"hf:{tmp_path / 'd'}:train")
    with pytest.raises(BlackboxMIAError, match=r"no 'text' or 'input' field \(fields: body, key\)"):
        load_any_dataset(f"hf:{tmp_path / 'd'}")


def test_hf_offline_without_the_data_names_the_setting_and_the_cache(monkeypatch, hf_cache):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    with pytest.raises(BlackboxMIAError) as info:
        load_any_dataset("hf:no-such-owner/no-such-data:default:train")
    message = str(info.value)
    assert "HF_DATASETS_OFFLINE=1" in message and str(hf_cache) in message
    assert "\n" not in message


def test_mimir_look_alike_members_then_nonmembers(tmp_path):
    split = {"member": ["m0 text", "m1 text"], "nonmember": ["n0 text", "n1 text"],
             "member_neighbors": [["x"], ["y"]], "nonmember_neighbors": [["z"], ["w"]]}
    datasets.DatasetDict({"ngram_13_0.8": datasets.Dataset.from_dict(split),
                          "ngram_7_0.2": datasets.Dataset.from_dict(split)}).save_to_disk(str(tmp_path / "arxiv"))
    ds = load_any_dataset(f"mimir:{tmp_path / 'arxiv'}:ngram_13_0.8")
    assert [(it.id, it.text, it.label) for it in ds.items] == [
        ("mimir-arxiv-ngram_13_0.8-member-0", "m0 text", 1), ("mimir-arxiv-ngram_13_0.8-member-1", "m1 text", 1),
        ("mimir-arxiv-ngram_13_0.8-nonmember-0", "n0 text", 0), ("mimir-arxiv-ngram_13_0.8-nonmember-1", "n1 text", 0)]
    assert ds.name == f"mimir:{tmp_path / 'arxiv'}:ngram_13_0.8"
    assert load_any_dataset(f"mimir:{tmp_path / 'arxiv'}").items == ds.items  # the paper's default split
    with pytest.raises(BlackboxMIAError, match=r"no split 'ngram_13_0.2'; the splits are ngram_13_0.8, ngram_7_0.2"):
        load_any_dataset(f"mimir:{tmp_path / 'arxiv'}:ngram_13_0.2")
    with pytest.raises(BlackboxMIAError, match=r"unknown MIMIR domain 'arxive' \(domains: arxiv, dm_mathematics"):
        load_any_dataset("mimir:arxive:ngram_13_0.8")


def test_wikimia_look_alike_has_the_shipped_ids(tmp_path):
    shipped = load_any_dataset("wikimia64")
    with open(DATA_DIR / "wikimia" / "WikiMIA_length64.jsonl", encoding="utf-8") as f:
        rows = [json.loads(line) for _, line in zip(range(6), f)]
    assert [row["hf_index"] for row in rows] == list(range(6))
    datasets.DatasetDict({f"WikiMIA_length{n}": datasets.Dataset.from_list(
        [{"input": r["input"], "label": r["label"]} for r in rows]) for n in (32, 64)}).save_to_disk(str(tmp_path / "w"))
    ds = load_any_dataset(f"wikimia:{tmp_path / 'w'}:64")
    assert [(it.id, it.text, it.label) for it in ds.items] == [(it.id, it.text, it.label) for it in shipped.items[:6]]
    with pytest.raises(BlackboxMIAError, match=r"WikiMIA's lengths are 32, 64, 128, 256, got '48'"):
        load_any_dataset(f"wikimia:{tmp_path / 'w'}:48")
    with pytest.raises(BlackboxMIAError, match=r"no split 'WikiMIA_length128'; the splits are WikiMIA_length32, "):
        load_any_dataset(f"wikimia:{tmp_path / 'w'}:128")


def test_default_output_names_of_the_new_specs(tmp_path):
    from blackbox_mia.audits.common import dataset_slug
    from blackbox_mia.cli.score import default_output

    (tmp_path / "saved").mkdir()
    assert dataset_slug("data/items.csv.gz?text_field=body") == "items"
    assert dataset_slug("mimir:wikipedia_(en):ngram_13_0.8") == "mimir-wikipedia_(en)-ngram_13_0.8"
    assert dataset_slug("hf:iamgroot42/mimir:arxiv") == "hf-iamgroot42-mimir-arxiv"
    assert dataset_slug(f"hf:{tmp_path / 'saved'}:test") == "hf-saved-test"
    assert str(default_output("wikimia:32")) == "runs/score-wikimia-32.jsonl"
