"""``bbmia score`` / ``eval`` / ``sweep`` read every data format and give the scores of the same
texts in JSON Lines; bad data is one line, exit 2, nothing written."""

from __future__ import annotations

import csv
import gzip
import json

import pytest
from typer.testing import CliRunner

from blackbox_mia.cli import app

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
datasets = pytest.importorskip("datasets")

ROWS = ([{"id": f"m{i}", "text": f"Question: Tom has {i + 2} apples and eats one of them.", "label": 1} for i in range(4)]
        + [{"id": f"n{i}", "text": f"Question: Zed sells {i + 3} kites, at the fair.", "label": 0} for i in range(4)])


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args], env={"OPENAI_BASE_URL": None}, catch_exceptions=False)


def scores_of(path):
    """``{id: scores}`` of a scores file (its rows; the config line left out)."""
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return {row["id"]: row["scores"] for row in rows if "scores" in row}


@pytest.fixture()
def data(tmp_path):
    """The same rows as items.jsonl, in every other format, and as a saved Hugging Face data set."""
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "items.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS), encoding="utf-8")
    (folder / "array.json").write_text(json.dumps(ROWS), encoding="utf-8")
    (folder / "columns.json").write_text(json.dumps({k: [r[k] for r in ROWS] for k in ROWS[0]}), encoding="utf-8")
    with open(folder / "items.csv", "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([list(ROWS[0])] + [list(r.values()) for r in ROWS])
    pq.write_table(pa.Table.from_pylist(ROWS), folder / "items.parquet")
    for name in ("items.jsonl", "columns.json", "items.csv", "items.parquet"):
        (folder / f"{name}.gz").write_bytes(gzip.compress((folder / name).read_bytes()))
    datasets.DatasetDict({"test": datasets.Dataset.from_list(ROWS)}).save_to_disk(str(folder / "items"))
    return folder


SPECS = ["array.json", "columns.json", "items.csv", "items.parquet", "items.jsonl.gz", "columns.json.gz",
         "items.csv.gz", "items.parquet.gz", "hf:{folder}/items:test"]


def test_score_reads_every_format_with_the_scores_of_jsonl(tiny_model_dir, data, tmp_path):
    result = invoke("score", data / "items.jsonl", "--local", tiny_model_dir, "--scorers", "loss,zlib,min_k",
                    "--out", tmp_path / "jsonl.jsonl")
    assert result.exit_code == 0, result.output
    expected = scores_of(tmp_path / "jsonl.jsonl")
    assert len(expected) == 8
    for i, spec in enumerate(SPECS):
        spec = spec.format(folder=data) if spec.startswith("hf:") else data / spec
        result = invoke("score", spec, "--local", tiny_model_dir, "--scorers", "loss,zlib,min_k",
                        "--out", tmp_path / f"{i}.jsonl")
        assert result.exit_code == 0, result.output
        assert scores_of(tmp_path / f"{i}.jsonl") == expected
    assert "read as csv (gzip)" in invoke("score", data / "items.csv.gz", "--local", tiny_model_dir, "--scorers",
                                          "loss", "--out", tmp_path / "again.jsonl").output


@pytest.mark.parametrize("spec", ["items.parquet", "hf:{folder}/items"])
def test_eval_reads_parquet_and_hf_with_the_report_of_jsonl(tiny_model_dir, data, tmp_path, spec):
    spec = spec.format(folder=data) if spec.startswith("hf:") else data / spec
    runs = {}
    for name, given in (("jsonl", data / "items.jsonl"), ("other", spec)):
        result = invoke("eval", given, "--local", tiny_model_dir, "--scorers", "loss,zlib", "--n-boot", 0, "--quiet",
                        "--json", "--out", tmp_path / name)
        assert result.exit_code == 0, result.output
        runs[name] = json.loads(result.output.strip().splitlines()[-1])
        assert scores_of(tmp_path / name / "scores.jsonl")
    assert scores_of(tmp_path / "other" / "scores.jsonl") == scores_of(tmp_path / "jsonl" / "scores.jsonl")
    assert runs["other"]["auc"] == runs["jsonl"]["auc"]


def test_sweep_reads_csv_with_renamed_fields_like_jsonl(tiny_model_dir, data, tmp_path):
    swept = [(f"b{i}", f"Question: Ann buys {i + 4} pens, then {i} more.") for i in range(6)]
    renamed = tmp_path / "renamed.csv"
    with open(renamed, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([["key", "body"], *swept])
    plain = tmp_path / "plain.jsonl"
    plain.write_text("".join(json.dumps({"id": key, "text": text}) + "\n" for key, text in swept), encoding="utf-8")
    calibration = data / "items.jsonl"
    for name, args in (("jsonl", [plain]), ("csv", [renamed, "--text-field", "body", "--id-field", "key"])):
        result = invoke("sweep", *args, "--local", tiny_model_dir, "--scorers", "loss", "--calibration", calibration,
                        "--quiet", "--out", tmp_path / name)
        assert result.exit_code == 0, result.output
    assert len(scores_of(tmp_path / "csv" / "scores.jsonl")) == 6
    assert scores_of(tmp_path / "csv" / "scores.jsonl") == scores_of(tmp_path / "jsonl" / "scores.jsonl")


@pytest.mark.parametrize("content, name, message", [
    ("body,label\nhello,1\n", "d.csv", "d.csv:2: no 'text' or 'input' field (fields: body, label); name the text "
     "field with --text-field"),
    ("text,label\nhello,2\n", "d.csv", "d.csv:2: label must be 0, 1 or null, got '2'"),
    ('{"text": "json, not parquet"}\n', "d.parquet", "d.parquet: not a Parquet file"),
    (gzip.compress(b'{"text": "a"}\n' * 500)[:40], "d.jsonl.gz", "d.jsonl.gz: truncated or corrupt gzip file"),
])
def test_bad_data_is_one_line_exit_2_nothing_written(tiny_model_dir, tmp_path, content, name, message):
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    for command in ("score", "eval"):
        out = tmp_path / f"out-{command}"
        result = invoke(command, path, "--local", tiny_model_dir, "--scorers", "loss", "--out", out)
        assert result.exit_code == 2 and message in result.output, result.output
        assert len(result.output.strip().splitlines()) == 1 and not out.exists()


def test_a_missing_hf_split_is_one_line_listing_the_splits(tiny_model_dir, data, tmp_path):
    result = invoke("score", f"hf:{data}/items:train", "--local", tiny_model_dir, "--out", tmp_path / "s.jsonl")
    assert result.exit_code == 2 and "no split 'train'; the splits are test" in result.output
    assert len(result.output.strip().splitlines()) == 1 and not (tmp_path / "s.jsonl").exists()
