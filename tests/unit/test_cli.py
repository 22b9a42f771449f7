"""The command line: real runs on the tiny model, clear errors (exit 2, no traceback), no key leaks."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Annotated

import pytest
import typer
from typer.testing import CliRunner

from blackbox_mia.cli import app
from blackbox_mia.cli.common import TargetOptions, with_target_options
from blackbox_mia.emulator import ServerConfig, serve_in_background
from blackbox_mia.option_names import for_command_line

runner = CliRunner()


def invoke(*args, env=None):
    """Run bbmia; the SDK's OPENAI_BASE_URL of the calling shell is not the target of a test."""
    return runner.invoke(app, [str(a) for a in args], env={"OPENAI_BASE_URL": None, **(env or {})}, catch_exceptions=False)


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


def test_a_bbmia_process_collects_young_objects_every_ten_thousand_allocations(tiny_model_dir, labelled_jsonl,
                                                                               tmp_path, monkeypatch):
    import gc

    from blackbox_mia.cli.app import GC_YOUNG_THRESHOLD

    monkeypatch.setattr(gc, "set_threshold", lambda *t: seen.append(t))
    seen: list[tuple] = []
    result = invoke("score", labelled_jsonl, "--local", tiny_model_dir, "--scorers", "loss", "--out", tmp_path / "s.jsonl")
    assert result.exit_code == 0, result.output
    assert seen == [(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])] and GC_YOUNG_THRESHOLD == 10_000


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
        (("score", "gsm8k", "--local", tmp_path / "no-model", "--limit", 1), "no-model' does not exist"),
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
    assert record["capabilities"]["strategies"] == ["run", "topn", "forced", "bisect"]  # run reading verified by the probe
    tokens = record["tokens"]
    assert "".join(t["token"] for t in tokens) == "Tom has 3 red apples."  # BOS context, all scored
    assert all(t["strategy"] == "forced" and t["lower"] == t["upper"] == t["logprob"] for t in tokens)
    assert set(record["scores"]) == {"loss", "zlib", "lowercase", "min_k", "pac"}
    assert key not in result.output
    for path in (tmp_path / "cache").rglob("*"):
        if path.is_file():
            assert key.encode() not in path.read_bytes(), path


def test_a_credential_in_the_base_url_is_never_written(tiny_model_dir, labelled_jsonl, tmp_path):
    """User info in --base-url (``http://user:SECRET@host/v1``) stays out of the output, the
    capability record (which names the URL: the server ignores prompt_logprobs) and .config.json."""
    secret = "pw-SECRET-77"
    with serve_in_background(ServerConfig(str(tiny_model_dir), echo=False)) as url:
        url = url.replace("http://", f"http://auditor:{secret}@")
        target = ["--base-url", url, "--model", tiny_model_dir, "--tokenizer", tiny_model_dir,
                  "--cache-dir", tmp_path / "cache"]
        probed = invoke("probe", "Tom has 3 red apples.", *target, "--json")
        scored = invoke("score", labelled_jsonl, *target, "--scorers", "loss", "--out", tmp_path / "out" / "s.jsonl")
    assert probed.exit_code == 0 and scored.exit_code == 0, probed.output + scored.output
    reasons = json.loads(probed.stdout.strip().splitlines()[-1])["capabilities"]["reasons"]
    assert "does not return prompt_logprobs" in json.dumps(reasons)  # the message that names the URL
    assert secret not in probed.output + scored.output
    files = [path for path in tmp_path.rglob("*") if path.is_file()]
    assert any(path.name.endswith(".config.json") for path in files)
    assert any(path.parent.name == "capabilities" for path in files)
    for path in files:
        assert secret.encode() not in path.read_bytes(), path


def assert_one_line_error(result, *fragments):
    """Exit code 2, no traceback, exactly one line of output, naming every fragment."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    # transformers was imported by the fixtures before the CLI could silence its loading bar
    lines = [line for line in result.output.strip().splitlines() if not line.startswith("Loading weights")]
    assert len(lines) == 1, result.output
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


NO_MODEL = "/nonexistent/model"  # were an option not checked first, the error would be "cannot load model"


@pytest.mark.parametrize(
    "args, option",
    [
        (["--epsilon", "0"], "--epsilon"),
        (["--epsilon", "-0.5"], "--epsilon"),
        (["--epsilon", "nan"], "--epsilon"),
        (["--epsilon", "inf"], "--epsilon"),
        (["--limit", "0"], "--limit"),
        (["--limit", "-1"], "--limit"),
        (["--concurrency", "0"], "--concurrency"),
        (["--rpm", "0"], "--rpm"),
        (["--rpm", "nan"], "--rpm"),
        (["--tpm", "-5"], "--tpm"),
        (["--tpm", "inf"], "--tpm"),
        (["--context-tokens", "1"], "--context-tokens"),
        (["--batch-tokens", "0"], "--batch-tokens"),
    ],
)
def test_score_numeric_options_checked_before_anything(args, option):
    assert_one_line_error(invoke("score", "gsm8k", "--local", NO_MODEL, *args), option)


@pytest.mark.parametrize(
    "args, option",
    [
        (["probe", "--dataset", "gsm8k", "--limit", "0", "--local", NO_MODEL], "--limit"),
        (["probe", "some text", "--epsilon", "0", "--base-url", "http://127.0.0.1:9/v1", "--model", "m"], "--epsilon"),
        (["eval", "wikimia64", "--n-boot", "-1", "--local", NO_MODEL], "--n-boot"),
        (["eval", "wikimia64", "--blind-folds", "1", "--local", NO_MODEL], "--blind-folds"),
        (["eval", "wikimia64", "--limit", "0", "--local", NO_MODEL], "--limit"),
        (["eval", "wikimia64", "--seed", "-1", "--local", NO_MODEL], "--seed"),
        (["eval", "wikimia64", "--epsilon", "nan", "--local", NO_MODEL], "--epsilon"),
        (["sweep", "gsm8k", "--target-fpr", "0", "--local", NO_MODEL], "--target-fpr"),
        (["sweep", "gsm8k", "--target-fpr", "1", "--local", NO_MODEL], "--target-fpr"),
        (["sweep", "gsm8k", "--target-fpr", "nan", "--local", NO_MODEL], "--target-fpr"),
        (["sweep", "gsm8k", "--assumed-tpr", "0", "--local", NO_MODEL], "--assumed-tpr"),
        (["sweep", "gsm8k", "--top", "-1", "--local", NO_MODEL], "--top"),
        (["sweep", "gsm8k", "--limit", "-1", "--local", NO_MODEL], "--limit"),
        (["sweep", "gsm8k", "--seed", "-1", "--local", NO_MODEL], "--seed"),
        (["sweep", "gsm8k", "--concurrency", "0", "--local", NO_MODEL], "--concurrency"),
        (["demo", "--blackbox-n", "1"], "--blackbox-n"),
        (["demo", "--mode", "weird"], "--mode"),
        (["canary", "train", "--epochs", "0"], "epochs"),
        (["canary", "train", "--lr", "nan"], "lr > 0"),
        (["canary", "train", "--block-size", "1"], "block_size"),
    ],
)
def test_numeric_options_of_every_command(args, option, tmp_path):
    assert_one_line_error(invoke(*args, "--cache-dir", tmp_path), option)


def test_unlearning_runs_through_the_audit_skeleton(tiny_model_dir, labelled_jsonl, tmp_path):
    """The same model before and after: every Min-K% ratio is exactly 1, inside the default
    window, so every text is flagged; the report and the --json line as the other audits'."""
    out = tmp_path / "unlearning"
    result = invoke("unlearning", labelled_jsonl, "--before", tiny_model_dir, "--after", f"local:{tiny_model_dir}",
                    "--prompt-words", "3", "--samples", "1", "--max-new-tokens", "4", "--device", "cpu",
                    "--out", out, "--quiet", "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["n_items"] == summary["n_flagged"] == 4 and summary["truth"] is None
    assert "usage" not in summary  # local models send no request
    assert f"report: {out / 'unlearning.json'} and {out / 'unlearning.md'}" in result.stdout
    config = json.loads((out / "unlearning.json").read_text())["config"]["unlearning"]
    assert config["truth_target_fpr"] == config["truth_fpr"] == 0.05  # the renamed key and its old name


@pytest.mark.parametrize(
    "args, fragments",
    [
        (["--truth-target-fpr", "1"], ["--truth-target-fpr must lie in (0, 1)"]),
        (["--truth-fpr", "0"], ["--truth-target-fpr must lie in (0, 1)"]),  # the old spelling, hidden
        (["--truth-target-fpr", "0.1", "--truth-fpr", "0.2"], ["--truth-fpr is the old name of --truth-target-fpr"]),
    ],
)
def test_unlearning_truth_target_fpr_and_its_old_name(args, fragments, tmp_path):
    result = invoke("unlearning", "gsm8k", "--before", NO_MODEL, "--after", NO_MODEL, *args, "--cache-dir", tmp_path)
    assert_one_line_error(result, *fragments)


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--memorized-target-fpr", "1"], "--memorized-target-fpr must lie in (0, 1)"),
        (["--memorized-fpr", "0"], "--memorized-target-fpr must lie in (0, 1)"),  # the old spelling, hidden
        (["--memorized-target-fpr", "0.1", "--memorized-fpr", "0.2"], "--memorized-fpr is the old name"),
    ],
)
def test_canary_unlearn_memorized_target_fpr_and_its_old_name(args, fragment, tmp_path):
    assert_one_line_error(invoke("canary", "unlearn", tmp_path / "no-canary", "--forget", "1", *args), fragment)


def test_allow_chat_conditional_reaches_the_api_backend(tiny_model_dir, tmp_path):
    from dataclasses import replace

    from blackbox_mia.cli.common import TargetOptions, build_backends
    from blackbox_mia.scorers import parse_scorers
    from blackbox_mia.types import BlackboxMIAError

    dead = "http://127.0.0.1:9/v1"  # nothing listens: building a backend unchecked sends no request
    opts = TargetOptions(base_url=dead, model="m", endpoint="chat", allow_chat_conditional=True, epsilon=0.5,
                         tokenizer=str(tiny_model_dir), cache_dir=tmp_path)
    with pytest.raises(BlackboxMIAError, match="connection refused at http://127.0.0.1:9/v1"):
        build_backends(opts, parse_scorers("loss"))  # checked first, as the command line builds it
    backends = build_backends(opts, parse_scorers("loss,min_k:k=10"), check_first=False)
    api = backends["target"]
    assert (api.kind, api.endpoint.kind, api.tracker_config.epsilon) == ("api", "chat", 0.5)
    assert api.tracker_config.refine_for == (10.0, 100.0)  # the scorers' precision: Min-K% at 10%, the mean
    assert api.client.config.base_url == dead and api.client.config.model == "m"
    api.close()
    token = build_backends(replace(opts, precision="token"), parse_scorers("loss,min_k:k=10"), check_first=False)["target"]
    assert token.tracker_config.refine_for == ()  # every value to ε
    token.close()
    with pytest.raises(BlackboxMIAError, match="--precision must be one of scores, token"):
        replace(opts, precision="mean")
    with pytest.raises(BlackboxMIAError, match="allow_chat_conditional=True") as err:
        build_backends(TargetOptions(base_url=dead, model="m", endpoint="chat", tokenizer=str(tiny_model_dir)), [])
    assert "pass --allow-chat-conditional to accept" in for_command_line(err.value)
    assert "--allow-chat-conditional" in invoke("probe", "--help").output


def test_ref_takes_any_backend_spec(tiny_model_dir, tmp_path):
    from blackbox_mia.cli.common import TargetOptions, build_backends
    from blackbox_mia.scorers import parse_scorers

    for ref in (str(tiny_model_dir), f"local:{tiny_model_dir}", [str(tiny_model_dir)]):
        backends = build_backends(TargetOptions(local=str(tiny_model_dir), ref=ref), [])
        assert [b.kind for b in backends.values()] == ["local", "local"]
    backends = build_backends(TargetOptions(local=str(tiny_model_dir), ref=[str(tiny_model_dir)] * 2), [])
    assert list(backends) == ["target", "reference", "reference2"]
    backends = build_backends(TargetOptions(local=str(tiny_model_dir), ref="api:m@http://127.0.0.1:9/v1",
                                            tokenizer=str(tiny_model_dir), cache_dir=tmp_path), parse_scorers("pac"),
                              check_first=False)
    assert backends["reference"].tracker_config.refine_for == ()  # PAC reads the largest values too: every value
    assert backends["reference"].kind == "api" and backends["reference"].client.config.model == "m"
    backends["reference"].close()
    result = invoke("score", "gsm8k", "--local", tiny_model_dir, "--ref", "vllm:m", "--limit", 1, "--scorers", "ref")
    assert_one_line_error(result, "unknown backend kind 'vllm'")


def test_bad_result_and_config_files_on_resume(tiny_model_dir, labelled_jsonl, tmp_path):
    out = tmp_path / "scores.jsonl"
    base = ("score", labelled_jsonl, "--local", tiny_model_dir, "--scorers", "loss", "--out", out)
    assert invoke(*base).exit_code == 0
    good = out.read_text()
    config = out.with_name("scores.jsonl.config.json")
    saved = config.read_text()
    config.write_text("[1, 2]")
    assert_one_line_error(invoke(*base), "scores.jsonl.config.json", "must be a JSON object, got an array")
    config.write_text(saved)
    lines = good.splitlines()
    out.write_text("\n".join([lines[0], '{"id": "m2", "n_tokens": "many", "scores": {"loss": -1}}', *lines[2:]]) + "\n")
    assert_one_line_error(invoke(*base), "scores.jsonl:2:", "'n_tokens'")
    out.write_text(good[:-15])  # killed mid-row: resumes, redoes that row only
    result = invoke(*base, "--json")
    assert result.exit_code == 0, result.output
    assert out.read_text() == good
    assert_one_line_error(invoke(*base[:-1], tmp_path), "is a folder; give a file path")  # --out is a directory


@pytest.mark.parametrize(
    "content, message",
    [
        ('{"text": 5}\n', "text must be a string"),
        ("[1, 2]\n", "expected a JSON object, got an array"),
        ('{"text": "fine", "id": [1]}\n', "id must be a string or an integer"),
        (b"\xff\xfe{}\n", "bad.jsonl:1: not UTF-8 (byte 0xff at column 1"),
    ],
)
def test_wrong_types_in_dataset_rows(tmp_path, content, message):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    assert_one_line_error(invoke("score", path, "--local", NO_MODEL), message)


def test_probe_unreadable_file(tmp_path):
    binary = tmp_path / "binary.txt"
    binary.write_bytes(b"\xff\xfe\x00bad")
    assert_one_line_error(invoke("probe", "--file", binary, "--local", NO_MODEL), "cannot read", "UTF-8")
    assert_one_line_error(invoke("probe", "--file", tmp_path, "--local", NO_MODEL), "cannot read")
    assert_one_line_error(invoke("probe", "--file", tmp_path / "none.txt", "--local", NO_MODEL), "no such file")


def test_nonfinite_scores_give_no_auc_and_no_bare_nan():
    from blackbox_mia.cli.app import echo_json_line
    from blackbox_mia.cli.common import auc_by_scorer
    from blackbox_mia.results import ScoredText
    from blackbox_mia.scorers import parse_scorers
    from blackbox_mia.types import BlackboxMIAError, Provenance, TokenLogprobs

    lp = TokenLogprobs([1, 2, 3], ["a", "b", "c"], [-1.0, -2.0, -3.0], (0,), Provenance("api", "m", "forced", True),
                       lower=[-1.0, float("-inf"), -3.0], upper=[-1.0, -2.0, -3.0])
    from blackbox_mia.scorers.bounded import Bounded

    rows = [ScoredText.from_scores(str(i), i % 2, {"loss": Bounded.exact(i), "min_k": Bounded.exact(i)}, lp)
            for i in range(4)]
    rows[1] = ScoredText.from_scores("1", 1, {"loss": Bounded.exact(float("-inf")), "min_k": Bounded.exact(1.0)}, lp)
    assert rows[0].to_json()["bound_only"] == 1 and "condition" not in rows[0].to_json()
    assert rows[1].scores == {"loss": None, "min_k": 1.0} and rows[1].nonfinite == ["loss"]
    assert auc_by_scorer(rows, parse_scorers("loss,min_k")) == {"loss": None, "min_k": 0.75}  # 3 of 4 pairs ordered
    with pytest.raises(BlackboxMIAError, match="NaN or Infinity"):
        echo_json_line({"auc": float("nan")})


@pytest.mark.parametrize(
    "spec, parsed",
    [
        ("local:gpt2", ("local", "gpt2")),
        ("EleutherAI/pythia-70m", ("local", "EleutherAI/pythia-70m")),
        ("api:gpt-4o-mini@https://api.openai.com/v1", ("api", "gpt-4o-mini@https://api.openai.com/v1")),
    ],
)
def test_backend_specs(spec, parsed):
    from blackbox_mia.backends.registry import parse_spec

    assert parse_spec(spec) == parsed


def test_bad_backend_specs(tmp_path, monkeypatch):
    from blackbox_mia.backends.registry import (
        build_backend,
        parse_spec,
        register_backend,
    )
    from blackbox_mia.types import BlackboxMIAError

    for spec, message in [("", "empty backend spec"), ("vllm:m", "unknown backend kind 'vllm'"),
                          ("api:no-url", "not api:MODEL@URL"), ("local:", "needs a model")]:
        with pytest.raises(BlackboxMIAError, match=message):
            build_backend(spec)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "run:1").mkdir()  # an existing path that looks like a kind prefix is a local model
    assert parse_spec("run:1") == ("local", "run:1")
    with pytest.raises(BlackboxMIAError, match="already registered"):
        register_backend("local", lambda rest, options: None)


def test_annotated_options_keep_their_flags_under_the_target_options_decorator():
    """An ``Annotated[..., typer.Option("--flag", help=...)]`` parameter of a decorated command
    keeps its flag name and help (the decorator hands typer evaluated annotations)."""
    mini = typer.Typer()
    seen = {}

    @mini.command()
    @with_target_options
    def cmd(out: Annotated[Path | None, typer.Option("--written-to", help="WHERE-IT-GOES")] = None, *,
            target: TargetOptions):
        seen.update(out=out, local=target.local)

    @mini.command()
    def other():  # two commands: typer keeps the subcommand names
        pass

    help_text = CliRunner().invoke(mini, ["cmd", "--help"], terminal_width=200).output
    assert "--written-to" in help_text and "WHERE-IT-GOES" in help_text
    result = CliRunner().invoke(mini, ["cmd", "--written-to", "x.jsonl", "--local", "m"])
    assert result.exit_code == 0, result.output
    assert seen == {"out": Path("x.jsonl"), "local": "m"}


@pytest.mark.parametrize("given, read", [("Tom has 3 apples.\n", "Tom has 3 apples."),
                                         ("two lines\r\n", "two lines"), ("no newline", "no newline"),
                                         ("kept\n\n", "kept\n")])
def test_stdin_text_loses_one_final_line_break(monkeypatch, given, read):
    from blackbox_mia.cli.probe import gather_texts

    monkeypatch.setattr("sys.stdin", io.StringIO(given))
    assert gather_texts("-", None, None, None) == [("stdin", read)]
