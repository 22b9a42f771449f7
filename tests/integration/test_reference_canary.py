"""``bbmia canary train --reference-of`` end to end on a tiny canary (seconds on CPU)."""

import json

import pytest
from typer.testing import CliRunner

from blackbox_mia.canary import canary_items, load_manifest
from blackbox_mia.cli import canary as _  # noqa: F401  (registers the sub-app)
from blackbox_mia.cli import evaluate as _evaluate  # noqa: F401  (registers sweep)
from blackbox_mia.cli.app import app

TINY_ARGS = ["--n-background", "30", "--n-members", "4", "--n-nonmembers", "4", "--dup", "2", "--vocab-size", "280",
             "--n-layer", "1", "--n-embd", "16", "--n-head", "2", "--block-size", "32", "--epochs", "1",
             "--batch-size", "8"]  # fmt: skip


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("reference")
    result = CliRunner().invoke(app, ["canary", "train", "--quiet", "--out", str(root / "target"), *TINY_ARGS])
    assert result.exit_code == 0, result.output
    return root


def test_reference_of_trains_an_unplanted_model_on_another_background(tiny):
    runner = CliRunner()
    out = tiny / "reference"
    result = runner.invoke(app, ["canary", "train", "--quiet", "--out", str(out), "--reference-of", str(tiny / "target")])
    assert result.exit_code == 0, result.output
    assert (f"use it as the reference model: bbmia sweep gsm8k --local {tiny / 'target'} --ref {out} "
            f"--calibration canary:{tiny / 'target'} --calibration-fraction 0.5") in result.output
    target, reference = load_manifest(tiny / "target"), load_manifest(out)
    assert reference["config"]["reference"] is True and reference["dup"] == 1 and reference["member_ids"] == []
    assert reference["nonmember_ids"] == target["member_ids"] + target["nonmember_ids"]
    assert len(reference["background_ids"]) == 30 and not set(reference["background_ids"]) & set(target["background_ids"])
    assert reference["n_documents"] == 30 and "nothing" in reference["reference"]["planted"]
    assert all(item.label == 0 for item in canary_items(out))
    # a configuration option with --reference-of, or a reference of a reference: one line, exit 2
    for args in (["--dup", "3"], []):
        source = tiny / "target" if args else out
        bad = runner.invoke(app, ["canary", "train", "--out", str(tiny / "x"), "--reference-of", str(source), *args])
        assert bad.exit_code == 2 and "Traceback" not in bad.output
    assert "give no other configuration option" in runner.invoke(
        app, ["canary", "train", "--reference-of", str(tiny / "target"), "--dup", "3"]).output


def test_sweep_with_ref_names_the_reference_model_and_adds_the_feature(tiny, tmp_path):
    runner = CliRunner()
    reference = tiny / "reference_for_sweep"
    assert runner.invoke(app, ["canary", "train", "--quiet", "--out", str(reference),
                               "--reference-of", str(tiny / "target")]).exit_code == 0
    target = tiny / "target"
    result = runner.invoke(app, ["sweep", "gsm8k", "--local", str(target), "--ref", str(reference), "--limit", "40",
                                 "--calibration", f"canary:{target}", "--calibration-fraction", "0.5",
                                 "--out", str(tmp_path / "sweep"), "--quiet", "--json"])
    assert result.exit_code == 0, result.output
    output = result.output[result.output.index("Contamination"):]  # after any model-loading bar on stderr
    headline = output.splitlines()[:3]
    assert "tail test on 2 combined features" in headline[0]  # min_k and the ref added by --ref
    assert headline[2].startswith(f"Reference model: {reference} (read by ref); assumes the reference model did not "
                                  "see the benchmark")
    summary = json.loads(result.output.splitlines()[-1])
    assert summary["reference_model"] == str(reference)
    config = json.loads((tmp_path / "sweep" / "scores.jsonl.config.json").read_text())
    assert set(config["scorers"]) == {"min_k", "ref"} and config["backends"]["reference"]["model"] == str(reference)


def test_sweep_with_two_references_compares_with_their_mean(tiny, tmp_path):
    runner = CliRunner()
    target, first, second = tiny / "target", tiny / "reference_a", tiny / "reference_b"
    assert runner.invoke(app, ["canary", "train", "--quiet", "--out", str(first), "--reference-of", str(target)]).exit_code == 0
    # a second, independent reference: --reference-seed draws its background, weights and batches with seed 1
    assert runner.invoke(app, ["canary", "train", "--quiet", "--out", str(second), "--reference-of", str(target),
                               "--reference-seed", "1"]).exit_code == 0
    one, other = load_manifest(first), load_manifest(second)
    assert (one["seed"], other["seed"]) == (0, 1) and other["config"]["reference"] and other["member_ids"] == []
    assert set(other["background_ids"]) != set(one["background_ids"]) and other["config"]["n_background"] == 30
    alone = runner.invoke(app, ["canary", "train", "--out", str(tiny / "x"), "--reference-seed", "1"])
    assert alone.exit_code == 2 and "--reference-seed and --reference-size need --reference-of CANARY" in alone.output
    result = runner.invoke(app, ["sweep", "gsm8k", "--local", str(target), "--ref", str(first), "--ref", str(second),
                                 "--limit", "40", "--calibration", f"canary:{target}", "--calibration-fraction", "0.5",
                                 "--out", str(tmp_path / "sweep"), "--quiet", "--json"])
    assert result.exit_code == 0, result.output
    output = result.output[result.output.index("Contamination"):]
    assert f"Reference models (2, averaged): {first}, {second} (read by ref:refs=2)" in output.splitlines()[2]
    config = json.loads((tmp_path / "sweep" / "scores.jsonl.config.json").read_text())
    assert set(config["scorers"]) == {"min_k", "ref:refs=2"}
    assert [config["backends"][role]["model"] for role in ("reference", "reference2")] == [str(first), str(second)]
    summary = json.loads(result.output.splitlines()[-1])
    assert summary["reference_model"] == f"{first}, {second}"
    # the feature is the target's mean log-prob minus the mean of the two references' (white-box, hand-checked)
    from blackbox_mia.backends.local import LocalBackend, LocalConfig
    from blackbox_mia.datasets import load_shipped_or_jsonl

    row = json.loads((tmp_path / "sweep" / "scores.jsonl").read_text().splitlines()[0])
    text = next(item.text for item in load_shipped_or_jsonl("gsm8k").items if item.id == row["id"])
    means = []
    for model in (target, first, second):
        backend = LocalBackend(LocalConfig(str(model)))
        means.append(float(backend.logprobs([text])[0].logprobs.mean()))
        backend.close()
    assert row["scores"]["ref:refs=2"] == pytest.approx(means[0] - (means[1] + means[2]) / 2, abs=1e-5)
    # ref alone as the sweep's scorer (the study's ref_alone set); a count that disagrees with --ref: one line
    base = ["sweep", "gsm8k", "--local", str(target), "--ref", str(first), "--ref", str(second), "--limit", "40",
            "--calibration", f"canary:{target}", "--calibration-fraction", "0.5", "--quiet"]
    alone = runner.invoke(app, [*base, "--scorer", "ref:refs=2", "--out", str(tmp_path / "alone")])
    assert alone.exit_code == 0, alone.output
    assert "Reference models (2, averaged)" in alone.output and "combined features" not in alone.output
    wrong = runner.invoke(app, [*base, "--scorer", "ref", "--out", str(tmp_path / "wrong")])
    assert wrong.exit_code == 2 and "reads 1 reference model(s) but --ref is given 2 times: use ref:refs=2" in wrong.output


def test_sweep_of_an_api_target_with_a_local_reference(tiny, tmp_path):
    from blackbox_mia.emulator import ServerConfig, serve_in_background

    target, reference = tiny / "target", tiny / "reference_local"
    runner = CliRunner()
    assert runner.invoke(app, ["canary", "train", "--quiet", "--out", str(reference), "--reference-of", str(target)]).exit_code == 0
    with serve_in_background(ServerConfig(str(target), served_name="target-model")) as url:
        result = runner.invoke(app, ["sweep", "gsm8k", "--base-url", url, "--model", "target-model", "--tokenizer",
                                     str(target), "--ref", str(reference), "--limit", "40", "--calibration",
                                     f"canary:{target}", "--calibration-fraction", "0.5", "--cache-dir",
                                     str(tmp_path / "cache"), "--out", str(tmp_path / "sweep"), "--quiet", "--json"],
                               env={"OPENAI_BASE_URL": None, "OPENAI_API_KEY": "none"})
    assert result.exit_code == 0, result.output
    output = result.output[result.output.index("Contamination"):]
    headline = output.splitlines()[:3]
    assert "tail test on 2 combined features" in headline[0]
    assert headline[2].startswith(f"Reference model: {reference} (read by ref); assumes the reference model did not")
    config = json.loads((tmp_path / "sweep" / "scores.jsonl.config.json").read_text())
    assert config["backends"]["target"]["backend"] == "api" and config["backends"]["reference"]["backend"] == "local"
    assert json.loads(result.output.splitlines()[-1])["reference_model"] == str(reference)
