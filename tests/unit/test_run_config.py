"""Run files: ``--print-config`` round-trips, a run file reproduces its command line byte for
byte, and its errors are the flags' (one line, exit 2, nothing written)."""

from __future__ import annotations

import csv
import json
import shutil

import pytest
import yaml
from typer.testing import CliRunner

from blackbox_mia import __version__
from blackbox_mia.cli import app

ROWS = ([{"id": f"m{i}", "text": f"Question: Tom has {i + 2} apples and eats one of them.", "label": 1} for i in range(4)]
        + [{"id": f"n{i}", "text": f"Question: Zed sells {i + 3} kites, at the fair.", "label": 0} for i in range(4)])


def invoke(*args, env=None):
    return CliRunner().invoke(app, [str(a) for a in args], env={"OPENAI_BASE_URL": None, **(env or {})},
                              catch_exceptions=False)


@pytest.fixture()
def items(tmp_path):
    path = tmp_path / "items.csv"
    with open(path, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([["key", "body", "label"], *([r["id"], r["text"], r["label"]] for r in ROWS)])
    return path


def eval_args(items, model, out):
    return ["eval", items, "--text-field", "body", "--id-field", "key", "--local", model, "--scorers", "loss,min_k:k=10",
            "--n-boot", 50, "--seed", 3, "--quiet", "--out", out]


def test_print_config_writes_the_command_line_and_round_trips(items, tmp_path):
    printed = invoke(*eval_args(items, "some-model", tmp_path / "out"), "--print-config")
    assert printed.exit_code == 0, printed.output
    config = yaml.safe_load(printed.output)
    assert config == {
        "command": "eval",
        "data": {"source": str(items), "text_field": "body", "id_field": "key"},
        "target": {"local": "some-model"},
        "scorers": ["loss", "min_k:k=10"],
        "out": str(tmp_path / "out"),
        "options": {"n_boot": 50, "seed": 3, "quiet": True},
    }
    run_file = tmp_path / "run.yaml"
    run_file.write_text(printed.output, encoding="utf-8")
    assert invoke("run", run_file, "--print-config").output == printed.output
    assert invoke("eval", "--config", run_file, "--print-config").output == printed.output
    overridden = yaml.safe_load(invoke("run", run_file, "--seed", 4, "--limit", 6, "--print-config").output)
    assert overridden["options"] == {"limit": 6, "n_boot": 50, "seed": 4, "quiet": True}
    assert not (tmp_path / "out").exists()


def test_a_run_file_reproduces_its_command_line_byte_for_byte(tiny_model_dir, items, tmp_path):
    out = tmp_path / "out"
    by_flags = invoke(*eval_args(items, tiny_model_dir, out))
    assert by_flags.exit_code == 0, by_flags.output
    shutil.move(out, tmp_path / "by-flags")
    run_file = tmp_path / "eval.yaml"
    run_file.write_text(invoke(*eval_args(items, tiny_model_dir, out), "--print-config").output, encoding="utf-8")
    by_file = invoke("run", run_file)
    assert by_file.exit_code == 0, by_file.output
    assert by_file.stdout == by_flags.stdout
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted(p.name for p in (tmp_path / "by-flags").iterdir())
    assert {"scores.jsonl", "eval.json", "eval.md", "run.yaml", "roc_linear.png"} <= set(names)
    for name in names:
        assert (out / name).read_bytes() == (tmp_path / "by-flags" / name).read_bytes(), name
    recorded = yaml.safe_load((out / "run.yaml").read_text(encoding="utf-8"))
    assert recorded["data"] == {"source": str(items), "text_field": "body", "id_field": "key"}
    assert recorded["recorded"]["version"] == __version__ and recorded["recorded"]["machine"]["cpus"] >= 1
    dataset = json.loads((out / "eval.json").read_text())["config"]["dataset"]
    assert (dataset["name"], dataset["format"]) == (f"{items}?text_field=body&id_field=key", "csv")
    rerun = invoke("run", out / "run.yaml", "--print-config")  # the recorded file runs again
    assert yaml.safe_load(rerun.output) == {k: v for k, v in recorded.items() if k != "recorded"}


@pytest.mark.parametrize("text, message", [
    ("command: eval\ndata: {source: x.csv}\noptions: {n_bot: 10}\n",
     "unknown key 'n_bot' under 'options' for eval; did you mean 'n_boot'?"),
    ("command: eval\ndata: {source: x.csv, text_fild: body}\n",
     "unknown key 'text_fild' under 'data' for eval; did you mean 'text_field'?"),
    ("command: eval\ndata: {source: x.csv}\ntargte: {local: m}\n", "unknown key 'targte' at the top"),
    ("command: evl\n", ("No such command 'evl'. Did you mean 'eval'?", "describes a 'evl' run, given to 'eval'")),
    ("command: eval\ndata: {source: x.csv}\noptions: {local: m}\n", "it belongs under 'target'"),
    ("command: eval\ntarget: {api_key: sk-secret}\n", "never holds the api_key"),
    ("command: eval\ndata: {source: x.csv}\noptions: {seed: [1, 2]}\n", "'seed' takes one value, got a list"),
    ("- eval\n", "a run file is a mapping"),
    ("command: eval\n  bad: [\n", "not YAML"),
])
def test_a_bad_run_file_is_one_line_exit_2(tmp_path, text, message):
    run_file = tmp_path / "bad.yaml"
    run_file.write_text(text, encoding="utf-8")
    messages = message if isinstance(message, tuple) else (message, message)
    for result, message in zip((invoke("run", run_file), invoke("eval", "--config", run_file)), messages):
        assert result.exit_code == 2 and message in result.output, result.output
        assert len(result.output.strip().splitlines()) == 1 and "sk-secret" not in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yaml"]


def test_a_run_file_fails_as_its_flags_do(items, tmp_path):
    """One home per setting: a value out of range is refused by the option's own check, in its words."""
    flags = invoke(*eval_args(items, "some-model", tmp_path / "out")[:-2], "--limit", 0, "--concurrency", 0)
    run_file = tmp_path / "r.yaml"
    run_file.write_text(yaml.safe_dump({"command": "eval", "data": {"source": str(items)},
                                        "target": {"local": "some-model", "concurrency": 0}}), encoding="utf-8")
    by_file = invoke("run", run_file)
    assert flags.exit_code == by_file.exit_code == 2
    assert flags.output == by_file.output and "--concurrency must be" in by_file.output
    assert not (tmp_path / "out").exists()


def test_the_api_key_is_never_written(items, tmp_path):
    result = invoke("score", items, "--target", "api:m@http://127.0.0.1:9/v1", "--api-key", "sk-secret", "--print-config")
    assert result.exit_code == 2 and "sk-secret" not in result.output and "never written" in result.output
    from_env = invoke("score", items, "--target", "api:m@http://127.0.0.1:9/v1", "--print-config",
                      env={"OPENAI_API_KEY": "sk-secret"})
    assert from_env.exit_code == 0 and "sk-secret" not in from_env.output and "api_key:" not in from_env.output


def test_the_record_of_a_run_leaves_the_api_key_out(items):
    import typer

    from blackbox_mia.cli.run_config import command_line_config

    command = typer.main.get_command(app).commands["score"]
    ctx = command.make_context("score", [str(items), "--target", "api:m@http://127.0.0.1:9/v1", "--api-key", "sk-x"])
    assert command_line_config(ctx, refuse_secrets=False) == {
        "command": "score", "data": {"source": str(items)}, "target": {"target": "api:m@http://127.0.0.1:9/v1"}}


@pytest.mark.parametrize("args", [
    ["sweep", "{items}", "--local", "m", "--ref", "a", "--ref", "b", "--no-control", "--target-fpr", "0.01",
     "--scorers", "loss", "--features", "zlib,min_k:k=5", "--json"],
    ["score", "{items}?label_field=label", "--target", "api:m@http://127.0.0.1:9/v1", "--concurrency", "4",
     "--limit", "5", "--overwrite"],
])
def test_print_config_round_trips_repeated_options_switches_and_numbers(items, tmp_path, args):
    args = [a.format(items=items) for a in args]
    printed = invoke(*args, "--print-config")
    assert printed.exit_code == 0, printed.output
    run_file = tmp_path / "r.yaml"
    run_file.write_text(printed.output, encoding="utf-8")
    assert invoke("run", run_file, "--print-config").output == printed.output
    config = yaml.safe_load(printed.output)
    if args[0] == "sweep":
        assert config["target"] == {"local": "m", "ref": ["a", "b"]}
        assert config["options"] == {"features": "zlib,min_k:k=5", "target_fpr": 0.01, "control": False, "json": True}
    else:
        assert config["target"] == {"target": "api:m@http://127.0.0.1:9/v1", "concurrency": 4}
        assert config["options"] == {"limit": 5, "overwrite": True}
