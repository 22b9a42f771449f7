"""``bbmia eval`` and ``bbmia sweep`` end to end on a tiny canary trained in a few seconds."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score
from typer.testing import CliRunner

from blackbox_mia.audits import (
    EvalConfig,
    SweepConfig,
    dataset_slug,
    prepare_eval,
    prepare_sweep,
    run_eval,
)
from blackbox_mia.audits.ablation import truncate_tokens
from blackbox_mia.backends.local import LocalBackend, LocalConfig
from blackbox_mia.canary import (
    CanaryConfig,
    find_canary_manifest,
    load_manifest,
    train_canary,
)
from blackbox_mia.cli import evaluate  # noqa: F401  (registers eval and sweep)
from blackbox_mia.cli.app import app
from blackbox_mia.canary.dataset import load_items
from blackbox_mia.evaluation import length_buckets
from blackbox_mia.runner import DEFAULT_CHUNK_SIZE
from blackbox_mia.tokenizers import HFTokenCodec
from blackbox_mia.types import BlackboxMIAError

# 40 planted members among the 1,319 GSM8K test problems: some fall in the first 120.
TINY = CanaryConfig(
    n_background=60, n_members=40, n_nonmembers=40, dup=3, vocab_size=300,
    n_layer=1, n_embd=32, n_head=2, block_size=64, epochs=1, batch_size=8,
)  # fmt: skip
LIMIT = 120

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def canary(tmp_path_factory):
    return train_canary(TINY, tmp_path_factory.mktemp("canary") / "model", progress=False)


def last_json(result) -> dict:
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_canary_spec_loads_labelled_items_in_both_loaders(canary):
    items, meta = load_items(f"canary:{canary}")
    manifest = load_manifest(canary)
    assert [it.id for it in items] == manifest["member_ids"] + manifest["nonmember_ids"]
    assert [it.label for it in items] == [1] * 40 + [0] * 40
    assert meta["name"] == f"canary:{canary}" and len(meta["sha256"]) == 64
    assert load_items(f"canary:{canary}", 5) == (items[:3] + items[40:42], meta)  # --limit keeps both labels
    with pytest.raises(BlackboxMIAError, match="bbmia canary train"):
        load_items(f"canary:{canary.parent / 'nothing'}")
    assert dataset_slug(meta["name"]) == "canary" and dataset_slug("gsm8k:test") == "gsm8k-test"


def test_eval_end_to_end(canary, tmp_path):
    out = tmp_path / "eval"
    result = invoke("eval", canary / "canary_items.jsonl", "--local", canary, "--scorers", "loss,min_k:k=10",
                    "--n-boot", 200, "--out", out, "--quiet", "--json")
    assert result.exit_code == 0, result.output
    summary = last_json(result)
    assert set(summary) >= {"auc", "auc_ci", "tpr_at_fpr", "blind_auc", "report"}
    assert set(summary["auc"]) == {"loss", "min_k:k=10"}
    assert set(summary["tpr_at_fpr"]["loss"]) == {"0.001", "0.01", "0.05", "0.1"}
    assert summary["tpr_at_fpr"]["loss"]["0.001"] is None  # 40 non-members cannot measure 0.1% FPR
    for name in ("eval.json", "eval.md", "roc_linear.png", "roc_log.png", "scores.jsonl"):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    report = json.loads((out / "eval.json").read_text())
    rows = [json.loads(line) for line in (out / "scores.jsonl").read_text().splitlines()]
    labels = [r["label"] for r in rows]
    assert len(rows) == 80 and sum(labels) == 40
    for name in ("loss", "min_k:k=10"):
        expected = roc_auc_score(labels, [r["scores"][name] for r in rows])
        assert report["scorers"][name]["auc"] == pytest.approx(expected, abs=1e-12)
        assert summary["auc"][name] == pytest.approx(expected, abs=1e-12)
        lo, hi = summary["auc_ci"][name]
        assert lo <= expected <= hi
    assert 0 <= summary["blind_auc"] <= 1 and report["blind_baseline"]["auc"] == summary["blind_auc"]
    verdict = report["distribution_shift"]
    assert isinstance(verdict["distribution_shift"], bool) and verdict["blind_auc"] == summary["blind_auc"]
    assert verdict["best_model_auc"] == pytest.approx(max(summary["auc"].values()))
    config = report["config"]
    assert config["backends"]["target"]["backend"] == "local" and config["version"]
    assert config["scorers"]["min_k:k=10"]["k"] == 10.0 and config["dataset"]["sha256"]
    assert config["eval"]["seed"] == 0 and config["eval"]["n_boot"] == 200
    md = (out / "eval.md").read_text()
    assert "Blind baseline" in md and "roc_log.png" in md and "By length" in md


def test_eval_refuses_an_unlabelled_dataset(tiny_model_dir, tmp_path):
    result = invoke("eval", "gsm8k", "--local", tiny_model_dir, "--out", tmp_path / "e")
    assert result.exit_code == 2
    assert "needs a labelled dataset" in result.stderr and "bbmia sweep" in result.stderr
    assert "Traceback" not in result.output and not (tmp_path / "e").exists()


def test_sweep_end_to_end_with_canary_calibration(canary, tmp_path):
    out = tmp_path / "sweep"
    result = invoke("sweep", "gsm8k", "--local", canary, "--calibration", f"canary:{canary}",
                    "--limit", LIMIT, "--out", out, "--quiet", "--json")
    assert result.exit_code == 0, result.output
    summary = last_json(result)
    assert set(summary) >= {"flag_rate", "realised_fpr", "realised_fpr_ci", "tpr", "prevalence", "p_value", "planted",
                            "report", "roles"}
    # the old names of the renamed keys, for one release (docs/migration.md)
    assert (summary["fpr"], summary["fpr_ci"]) == (summary["realised_fpr"], summary["realised_fpr_ci"])
    manifest = load_manifest(canary)
    calibration_ids = set(manifest["member_ids"] + manifest["nonmember_ids"])
    in_bench = sum(f"gsm8k-test-{i}" in calibration_ids for i in range(LIMIT))
    assert in_bench > 0
    # disjoint roles: the calibration items found in the benchmark are not swept
    roles = summary["roles"]
    assert roles["benchmark_items"] == LIMIT and roles["dropped_calibration_overlap"] == in_bench
    assert roles["swept"] == LIMIT - in_bench and roles["disjoint"] is True
    assert roles["calibration_members"] == 40 and roles["calibration_nonmembers"] == 40
    # every planted member is a calibration member, so none is left among the swept items
    assert summary["planted"] == 0.0
    for name in ("sweep.json", "sweep.md", "histogram.png", "scores.jsonl", "control_scores.jsonl"):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    report = json.loads((out / "sweep.json").read_text())
    entry = report["sweep"]["min_k"]
    rows = [json.loads(line) for line in (out / "scores.jsonl").read_text().splitlines()]
    assert len(rows) == LIMIT
    bench = np.array([r["scores"]["min_k"] for r in rows if r["id"] not in calibration_ids])
    threshold = entry["threshold"]["value"]
    assert summary["flag_rate"] == pytest.approx(np.mean(bench > threshold))
    assert entry["threshold"]["rule"] == "fpr" and entry["threshold"]["n_calibration_members"] == 40
    assert entry["dataset_test"]["against"].startswith("control") and entry["dataset_test"]["p_value"] == summary["p_value"]
    assert report["control"]["n_source"] == LIMIT and report["control"]["n_kept"] > LIMIT / 2
    assert 0 <= report["control"]["contamination"]["share_sources_flagged"] <= 1
    top = report["most_suspicious"]
    assert len(top) == 10 and top[0]["score"] == pytest.approx(bench.max()) and len(top[0]["text"]) <= 80
    assert report["planted"]["n_members"] == 0 and report["planted"]["n_scored"] == LIMIT - in_bench
    # calibration texts that are in the benchmark reuse its scores: only the rest were scored
    cal_rows = (out / "calibration_scores.jsonl").read_text().splitlines()
    assert len(cal_rows) == 80 - in_bench
    # the realised FPR: k of the 40 non-members above the threshold, with its Clopper-Pearson CI
    cal = {json.loads(line)["id"]: json.loads(line)["scores"]["min_k"] for line in cal_rows}
    cal.update({r["id"]: r["scores"]["min_k"] for r in rows})
    neg = np.array([cal[i] for i in manifest["nonmember_ids"]])
    k = int(np.sum(neg > threshold))
    assert summary["realised_fpr"] == k / 40 and summary["realised_fpr_ci"][0] <= k / 40 <= summary["realised_fpr_ci"][1]
    # the lower bound: Clopper-Pearson lower flag rate against upper FPR, each at 97.5%
    from scipy.stats import beta

    flagged = int(np.sum(bench > threshold))
    flag_lo = 0.0 if flagged == 0 else beta.ppf(0.025, flagged, len(bench) - flagged + 1)
    fpr_hi = beta.ppf(0.975, k + 1, 40 - k)
    p = summary["prevalence"]
    assert p["lower_bound"] == pytest.approx(max(0.0, (flag_lo - fpr_hi) / (1 - fpr_hi)))
    assert p["lower_bound"] == 0.0  # no member is swept: the bound must not claim one
    # the simultaneous bounds: the FPR's conformal Beta(k + 1, n − k) law and the TPR's Clopper-Pearson at 1 − 0.05/3
    pos = np.array([cal[i] for i in manifest["member_ids"]])
    tp, side = int(np.sum(pos > threshold)), 0.05 / 3
    tpr_lo = 0.0 if tp == 0 else beta.ppf(side / 2, tp, 40 - tp + 1)
    assert summary["bounds_level"] == pytest.approx(1 - side)
    assert summary["tpr_minus_fpr_lower"] == pytest.approx(tpr_lo - beta.ppf(1 - side / 2, k + 1, 40 - k))
    # the estimate is (flag − FPR)/(TPR − FPR), clipped, with the FPR of a conformal threshold (k + 1)/(n + 1)
    if summary["identifiable"]:
        fpr = (k + 1) / 41
        raw = (summary["flag_rate"] - fpr) / (summary["tpr"] - fpr)
        assert p["estimate"] == pytest.approx(min(1, max(0, raw)))
        assert p["ci"][0] <= p["estimate"] <= p["ci"][1]
    else:
        assert p["estimate"] is None and "not identifiable" in summary["headline"].lower()
    assert summary["headline"] in result.stdout and "realised FPR" in result.stdout
    # the verdict comes first: no member is swept here, and the reference is the calibration's non-members
    verdict = summary["verdict"]
    assert result.stdout.startswith(summary["headline"].split("\n")[0]) and "p = " in summary["headline"].split("\n")[0]
    assert verdict["reference"].startswith("reference non-members (--calibration") and 0 < verdict["p_value"] <= 1
    from blackbox_mia.evaluation.detection import tail_test

    assert verdict["p_value"] == pytest.approx(tail_test(bench, neg)["p_value"])


def test_sweep_with_control_only_gives_the_lower_bound_as_headline(canary, tmp_path):
    result = invoke("sweep", "gsm8k", "--local", canary, "--limit", 80,
                    "--out", tmp_path / "s", "--quiet", "--json")
    assert result.exit_code == 0, result.output
    summary = last_json(result)
    assert summary["tpr"] is None and summary["identifiable"] is None
    assert summary["prevalence"]["estimate"] is None and summary["prevalence"]["ci"] is None
    assert summary["prevalence"]["lower_bound_confidence"] == 0.95 and 0 <= summary["prevalence"]["lower_bound"] <= 1
    first, second = summary["headline"].split("\n")
    assert first.startswith("Contamination ") and "control" in first and "p = " in first
    assert second.startswith("No known member: at least") and "lower bound" in second
    assert summary["roles"]["dropped_calibration_overlap"] == 0 and summary["roles"]["swept"] == 80
    assert summary["p_value"] is not None and "planted" in summary  # --local names the canary
    report = json.loads((tmp_path / "s" / "sweep.json").read_text())
    assert report["notes"][:2] == [first, second] and "not exchangeable" in report["notes"][2]
    assert any(n.startswith("Control contamination") and "lower bound" in n for n in report["notes"])
    # whatever the report warns about, the console says too, one line each (issue 30)
    assert report["warnings"] == summary["warnings"]
    assert (summary["prevalence"]["lower_bound"] == 0) == any("lower bound is 0.000" in w for w in summary["warnings"])
    markdown = (tmp_path / "s" / "sweep.md").read_text()
    for warning in summary["warnings"]:
        assert f"warning: {warning}\n" in result.stderr and f"- **{warning}**" in markdown
    # the control's contamination: the share of control items whose source scores above the threshold
    rows = {json.loads(line)["id"]: json.loads(line)["scores"]["min_k"]
            for line in (tmp_path / "s" / "scores.jsonl").read_text().splitlines()}
    control_ids = [json.loads(line)["id"] for line in (tmp_path / "s" / "control_scores.jsonl").read_text().splitlines()]
    sources = np.array([rows[i.removesuffix("-control")] for i in control_ids])
    share = np.mean(sources > summary["threshold"])
    assert summary["control_contamination"] == pytest.approx(share)
    contamination = report["control"]["contamination"]
    assert contamination["share_sources_flagged"] == pytest.approx(share)
    controls = np.array([json.loads(line)["scores"]["min_k"]
                         for line in (tmp_path / "s" / "control_scores.jsonl").read_text().splitlines()])
    hit, miss = controls[sources > summary["threshold"]] > summary["threshold"], controls[sources <= summary["threshold"]] > summary["threshold"]
    if hit.size and miss.size:
        assert contamination["flag_rate_source_flagged"] == pytest.approx(hit.mean())
        assert contamination["inherits_membership"] is bool(hit.mean() > 0 and hit.mean() >= 3 * miss.mean())


def test_calibration_fraction_is_a_seeded_stratified_share(canary):
    spec = f"canary:{canary}"
    plans = [prepare_sweep(SweepConfig(dataset="gsm8k", limit=5, calibration=spec, calibration_fraction=0.5, seed=seed))
             for seed in (0, 0, 1)]
    items, meta = plans[0].calibration
    assert sum(it.label == 1 for it in items) == 20 and sum(it.label == 0 for it in items) == 20
    assert meta["fraction"] == 0.5 and meta["n_used"] == 40
    assert [it.id for it in items] == [it.id for it in plans[1].calibration[0]]
    assert [it.id for it in items] != [it.id for it in plans[2].calibration[0]]
    everything = [it.id for it in load_items(spec)[0]]
    assert [it.id for it in items] == [i for i in everything if i in {it.id for it in items}]  # input order


def test_sweep_refuses_a_control_too_small_for_the_target_fpr(tmp_path):
    with pytest.raises(BlackboxMIAError, match=r"kept only 4 of 254 .*need >= 39.*calibration=.*nonmembers="):
        prepare_sweep(SweepConfig(dataset="aqua"))
    # with known non-members the tiny control only feeds the t-test
    nonmembers = tmp_path / "non.jsonl"
    nonmembers.write_text("".join(json.dumps({"text": f"text {i}", "label": 0}) + "\n" for i in range(5)))
    plan = prepare_sweep(SweepConfig(dataset="aqua", nonmembers=str(nonmembers)))
    assert len(plan.control.items) == 4


@pytest.mark.parametrize(
    "options, message",
    [
        ({"calibration": "gsm8k"}, "needs a labelled dataset"),
        ({"calibration": "wikimia64", "nonmembers": "wikimia64"}, "not both"),
        ({"rule": "max_f1"}, "needs labelled members"),
        ({"nonmembers": "wikimia64"}, "labelled 1"),
        ({"target_fpr": 1.5}, "target_fpr="),
        ({"calibration_fraction": 0.5}, "needs calibration="),
        ({"calibration": "wikimia64", "calibration_fraction": 0.0}, "calibration_fraction="),
    ],
)
def test_sweep_option_errors(options, message):
    with pytest.raises(BlackboxMIAError, match=message):
        prepare_sweep(SweepConfig(dataset="gsm8k", limit=5, **options))


def test_sweep_without_any_nonmembers_is_a_clear_error(tmp_path, tiny_model_dir):
    path = tmp_path / "bench.jsonl"
    path.write_text("".join(json.dumps({"text": f"text number {i}"}) + "\n" for i in range(5)))
    result = invoke("sweep", path, "--local", tiny_model_dir, "--out", tmp_path / "o")
    assert result.exit_code == 2 and "no known non-members" in result.stderr and "Traceback" not in result.output


def test_planted_manifest_comes_from_the_local_target_only(canary, tmp_path):
    assert find_canary_manifest(canary) == canary / "manifest.json"
    assert find_canary_manifest(str(canary)) == canary / "manifest.json"
    assert find_canary_manifest(tmp_path) is None  # a model directory without a manifest
    assert find_canary_manifest("gpt-4o") is None and find_canary_manifest(None) is None
    # a canary calibration set says nothing about what the target was trained on
    plan = prepare_sweep(SweepConfig(dataset="gsm8k", limit=5, calibration=f"canary:{canary}"))
    assert plan.planted_manifest is None
    plan = prepare_sweep(SweepConfig(dataset="gsm8k", limit=5, calibration=f"canary:{canary}"), target_model=canary)
    assert plan.planted_manifest == canary / "manifest.json"


def test_eval_finds_the_default_canary_in_the_cache_dir(canary, tmp_path):
    import shutil

    cache = tmp_path / "cache"
    default = cache / "canary" / CanaryConfig().short_hash()
    shutil.copytree(canary, default)
    out = tmp_path / "eval"
    args = ("eval", "canary", "--local", default, "--scorers", "loss", "--n-boot", 0, "--out", out, "--quiet", "--json")
    result = invoke(*args, "--cache-dir", cache)
    assert result.exit_code == 0, result.output
    report = json.loads((out / "eval.json").read_text())
    assert report["config"]["dataset"]["name"] == f"canary:{default}"
    assert report["config"]["dataset"]["source"] == str(default / "manifest.json")
    assert report["config"]["n_items"] == 80
    missing = invoke(*args, "--cache-dir", tmp_path / "empty")
    assert missing.exit_code == 2 and "no trained canary at" in missing.stderr
    assert str(tmp_path / "empty" / "canary" / CanaryConfig().short_hash()) in missing.stderr


def test_sweep_with_known_nonmembers_and_assumed_tpr(canary, tmp_path):
    nonmembers = tmp_path / "non.jsonl"
    rows = [json.loads(line) for line in (canary / "canary_items.jsonl").read_text().splitlines()]
    nonmembers.write_text("".join(json.dumps(r) + "\n" for r in rows if r["label"] == 0))
    out = tmp_path / "s"
    result = invoke("sweep", "aqua", "--local", canary, "--nonmembers", nonmembers, "--assumed-tpr", 0.5,
                    "--limit", 20, "--top", 3, "--out", out, "--quiet", "--json")
    assert result.exit_code == 0, result.output
    summary = last_json(result)
    assert summary["tpr"] == 0.5 and "planted" in summary and summary["planted"] == 0  # no GSM8K member in AQuA
    report = json.loads((out / "sweep.json").read_text())
    entry = report["sweep"]["min_k"]
    assert entry["threshold"]["n_calibration_nonmembers"] == 40
    assert entry["prevalence"]["tpr_source"].startswith("assumed")
    k = entry["prevalence"]["n_false_positives"]
    assert summary["realised_fpr"] == k / 40
    if summary["identifiable"]:
        fpr = (k + 1) / 41
        raw = (summary["flag_rate"] - fpr) / (0.5 - fpr)
        assert summary["prevalence"]["estimate"] == pytest.approx(min(1, max(0, raw)))
    assert len(report["most_suspicious"]) == 3 and "Most suspicious items" in (out / "sweep.md").read_text()


# -- the prompt-length ablation (eval --truncate-tokens) -----------------------------------------


class CountingBackend(LocalBackend):
    """The local model, remembering every text it was asked to score."""

    def __init__(self, config):
        super().__init__(config)
        self.asked: list[str] = []

    async def _alogprobs(self, texts, progress, on_done, vocab_stats=None):
        self.asked += texts
        return await super()._alogprobs(texts, progress, on_done, vocab_stats)


def test_eval_prompt_length_ablation_table_and_heatmap(canary, tmp_path):
    out = tmp_path / "eval"
    result = invoke("eval", f"canary:{canary}", "--local", canary, "--scorers", "loss,min_k:k=10",
                    "--truncate-tokens", "8,16", "--n-boot", 100, "--out", out, "--quiet", "--json")
    assert result.exit_code == 0, result.output
    ablation = last_json(result)["prompt_length"]
    assert ablation["lengths"] == [8, 16] and ablation["fpr"] == 0.1
    for table in ("auc", "tpr_at_fpr"):
        assert set(ablation[table]) == {"loss", "min_k:k=10"}  # one row per scorer
        for row in ablation[table].values():
            assert set(row) == {"8", "16"} and all(0 <= v <= 1 for v in row.values())  # one column per L
    assert (out / "prompt_length_auc.png").read_bytes()[:4] == b"\x89PNG"
    codec = HFTokenCodec.load(str(canary))
    items, _ = load_items(f"canary:{canary}")
    report = json.loads((out / "eval.json").read_text())
    for length in (8, 16):
        rows = [json.loads(line) for line in (out / f"scores_L{length}.jsonl").read_text().splitlines()]
        assert [r["id"] for r in rows] == [it.id for it in items]
        whole = sum(len(codec.encode(it.text)) <= length for it in items)
        assert ablation["counts"][str(length)] == {"n": 80, "truncated": 80 - whole, "whole": whole}
        labels = [r["label"] for r in rows]
        for name in ("loss", "min_k:k=10"):
            expected = roc_auc_score(labels, [r["scores"][name] for r in rows])
            assert ablation["auc"][name][str(length)] == pytest.approx(expected, abs=1e-12)
            entry = report["prompt_length"]["scorers"][name][str(length)]
            assert entry["auc_ci"][0] <= expected <= entry["auc_ci"][1]
    # the cut texts are 8 and 16 tokens of the canary's tokenizer (or the whole text)
    assert {r["n_tokens"] for r in map(json.loads, (out / "scores_L8.jsonl").read_text().splitlines())} <= set(range(1, 10))
    md = (out / "eval.md").read_text()
    assert "By prompt length" in md and "| loss |" in md and "prompt_length_auc.png" in md
    assert "length (words)" in md and "Length buckets count words (segmenter 'whitespace')" in md
    assert "AUC L=8" in result.stdout


def test_ablation_beyond_every_text_equals_plain_eval_and_resumes(canary, tmp_path):
    backend = CountingBackend(LocalConfig(model=str(canary)))
    try:
        items, _ = load_items(f"canary:{canary}")
        longest = max(len(backend.codec.encode(it.text)) for it in items)
        config = EvalConfig(dataset=f"canary:{canary}", scorers=("loss", "min_k:k=20"), n_boot=0,
                            truncate_tokens=(8, longest))
        plan = prepare_eval(config)
        result = run_eval(plan, {"target": backend}, tmp_path, progress=False)
        ablation = result.summary["prompt_length"]
        assert ablation["counts"][str(longest)] == {"n": 80, "truncated": 0, "whole": 80}
        assert set(result.summary["auc"]) == {"loss", "min_k"}  # min_k:k=20 is labelled min_k (the default k)
        for name, auc in result.summary["auc"].items():
            assert ablation["auc"][name][str(longest)] == auc
        texts = [it.text for it in items]
        cut8 = [truncate_tokens(backend.codec, text, 8).text for text in texts]
        # each (text, L) once for both scorers: the full texts, their 8-token cuts (equal cuts in a
        # chunk of items scored once), the full texts again
        chunks = [cut8[i : i + DEFAULT_CHUNK_SIZE] for i in range(0, len(cut8), DEFAULT_CHUNK_SIZE)]
        assert backend.asked == texts + [t for chunk in chunks for t in dict.fromkeys(chunk)] + texts
        # resume: a run killed after 30 rows of L = 8 scores only the other 50 cut texts
        path = tmp_path / "scores_L8.jsonl"
        lines = path.read_text().splitlines(keepends=True)
        path.write_text("".join(lines[:30]))
        backend.asked.clear()
        again = run_eval(plan, {"target": backend}, tmp_path, progress=False)
        cut = {json.loads(line)["id"] for line in lines[30:]}
        expected = {text for it, text in zip(items, cut8) if it.id in cut}
        assert set(backend.asked) == expected and len(backend.asked) == len(expected)
        assert again.summary == result.summary
        backend.asked.clear()
        run_eval(plan, {"target": backend}, tmp_path, progress=False)
        assert backend.asked == []  # everything done: nothing scored
        # length buckets in characters: the resumed scores, bucketed by non-space characters
        chars = run_eval(prepare_eval(replace(config, segmenter="chars", truncate_tokens=())), {"target": backend},
                         tmp_path, progress=False)
        assert backend.asked == [] and chars.report["length_unit"] == "characters"
        buckets = length_buckets([sum(not c.isspace() for c in text) for text in texts])
        by_hand = {b: sum(it.label for it, mine in zip(items, buckets) if mine == b) for b in set(buckets)}
        assert {b: m["n_members"] for b, m in chars.report["length_buckets"]["loss"].items()} == by_hand
        assert "Length buckets count characters (segmenter 'chars')." in chars.report["notes"]
    finally:
        backend.close()


def test_eval_option_errors_for_the_ablation_and_segmenter():
    with pytest.raises(BlackboxMIAError, match="strictly increasing"):
        EvalConfig(dataset="x", truncate_tokens=(16, 8)).validate()
    with pytest.raises(BlackboxMIAError, match="truncate_tokens= must be an integer >= 1"):
        EvalConfig(dataset="x", truncate_tokens=(0,)).validate()
    with pytest.raises(BlackboxMIAError, match="unknown segmenter 'klingon'"):
        EvalConfig(dataset="x", segmenter="klingon").validate()
    result = invoke("eval", "canary", "--local", "nowhere", "--truncate-tokens", "8,x")
    assert result.exit_code == 2 and "comma-separated integers" in result.stderr


def test_sweep_verdict_on_combined_features(canary, tmp_path):
    out = tmp_path / "f"
    args = ("sweep", "gsm8k", "--local", canary, "--calibration", f"canary:{canary}", "--calibration-fraction", 0.5,
            "--limit", LIMIT, "--out", out, "--quiet", "--json")
    result = invoke(*args, "--features", "loss,zlib")
    assert result.exit_code == 0, result.output
    summary = last_json(result)
    assert summary["verdict"]["test"] == "tail test on 3 combined features"
    verdict = json.loads((out / "sweep.json").read_text())["sweep"]["min_k"]["verdict"]
    assert len(verdict["combination"]["weights"]) == 3
    assert verdict["combination"]["n_members"] == summary["roles"]["calibration_members"] == 20
    rows = [json.loads(line) for line in (out / "scores.jsonl").read_text().splitlines()]
    assert all(set(r["scores"]) == {"min_k", "loss", "zlib"} for r in rows)
    repeated = invoke(*args, "--features", "min_k,loss")
    assert repeated.exit_code == 2 and "--features repeats --scorer" in repeated.stderr
    assert "Traceback" not in repeated.output
