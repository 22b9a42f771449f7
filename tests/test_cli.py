"""The command line: real runs on the tiny model, clear errors (exit 2, no traceback), no key leaks."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from blackbox_mia.cli import app
from blackbox_mia.server import ServerConfig, serve_in_background

runner = CliRunner()


def invoke(*args, env=None):
    return runner.invoke(app, [str(a) for a in args], env=env, catch_exceptions=False)


@pytest.fixture()
def labelled_jsonl(tmp_path):
    path = tmp_path / "items.jsonl"
    rows = [
        {"id": "m1", "text": "Question: Tom has 3 apples and eats one.", "label": 1},
        {"id": "m2", "text": "Question: A robe takes 2 bolts of fiber.", "label": 1},
        {"id": "n1", "text": "Question: Zed sells 5 kites at the fair.", "label": 0},
        {"id": "n2", "text": "Question: Ivy walks 4 miles to school.", "label": 0},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_score_writes_rows_and_resumes(tiny_model_dir, labelled_jsonl, tmp_path):
    out = tmp_path / "scores.jsonl"
    result = invoke("score", labelled_jsonl, "--local", tiny_model_dir, "--scorers", "loss,min_k:k=10", "--out", out, "--json")
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in rows] == ["m1", "m2", "n1", "n2"]
    assert set(rows[0]["scores"]) == {"loss", "min_k:k=10"} and rows[0]["label"] == 1
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert set(summary["auc"]) == {"loss", "min_k:k=10"}
    config = json.loads((tmp_path / "scores.jsonl.config.json").read_text())
    assert config["scorers"]["min_k:k=10"]["k"] == 10.0 and config["dataset"]["sha256"]
    again = invoke("score", labelled_jsonl, "--local", tiny_model_dir, "--scorers", "loss,min_k:k=10", "--out", out)
    assert again.exit_code == 0 and len(out.read_text().splitlines()) == 4  # resumed, nothing appended


@pytest.mark.parametrize(
    "content, message",
    [
        ('{"text": "fine"}\n{"text": "broken\n', "bad.jsonl:2: malformed JSON"),
        ('{"text": "fine"}\n{"text": "   "}\n', "empty"),
        ('{"text": "fine", "label": 7}\n', "label"),
    ],
)
def test_bad_jsonl_is_a_clear_error(tiny_model_dir, tmp_path, content, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    result = invoke("score", path, "--local", tiny_model_dir, "--out", tmp_path / "o.jsonl")
    assert result.exit_code == 2
    assert message in result.output and "Traceback" not in result.output


def test_missing_file_unknown_model_and_scorer(tiny_model_dir, tmp_path):
    for args, message in [
        (("score", tmp_path / "nope.jsonl", "--local", tiny_model_dir), "not found"),
        (("score", "gsm8k", "--local", tmp_path / "no-model", "--limit", 1), "cannot load model"),
        (("score", "gsm8k", "--local", tiny_model_dir, "--scorers", "min_q"), "unknown scorer"),
        (("score", "gsm8k"), "choose the target"),
        (("probe", "", "--local", tiny_model_dir), "empty"),
    ]:
        result = invoke(*args)
        assert result.exit_code == 2, (args, result.output)
        assert message in result.output and "Traceback" not in result.output


def test_probe_json_against_served_model_never_leaks_the_key(tiny_model_dir, tmp_path):
    key = "sk-test-SECRET-4242"
    with serve_in_background(ServerConfig(str(tiny_model_dir), api_key=key, echo=False)) as url:
        args = ["probe", "Tom has 3 red apples.", "--base-url", url, "--model", tiny_model_dir, "--tokenizer", tiny_model_dir,
                "--json", "--cache-dir", tmp_path / "cache"]
        result = invoke(*args, env={"OPENAI_API_KEY": key})
        assert result.exit_code == 0, result.output
        record = json.loads(result.stdout.strip().splitlines()[-1])
        assert record["usage"]["requests"] > 0
        rerun = json.loads(invoke(*args, env={"OPENAI_API_KEY": key}).stdout.strip().splitlines()[-1])
    assert rerun["usage"]["requests"] == 0 and rerun["tokens"] == record["tokens"]
    assert record["capabilities"]["strategies"] == ["topn", "forced", "bisect"]
    tokens = record["tokens"]
    assert "".join(t["token"] for t in tokens) == "Tom has 3 red apples."  # BOS context, all scored
    assert all(t["strategy"] == "forced" and t["lower"] == t["upper"] == t["logprob"] for t in tokens)
    assert set(record["scores"]) == {"loss", "zlib", "lowercase", "min_k", "pac"}
    assert key not in result.output
    for path in (tmp_path / "cache").rglob("*"):
        if path.is_file():
            assert key.encode() not in path.read_bytes(), path
