"""Texts without a usable score (tokens the endpoint resolves only by bounds) stop an audit, with
the way out named as its caller names settings; with ``drop_unscored`` they are left out of every
group alike, counted, and the result says what it covers (issue 30: the error said "drop those
texts" without a way to do it)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from blackbox_mia.audits import EvalConfig, SweepConfig, prepare_eval, prepare_sweep, run_eval, run_sweep
from blackbox_mia.backends.base import LOGPROBS, Backend
from blackbox_mia.option_names import as_flags
from blackbox_mia.types import BlackboxMIAError

from .test_runner import fake_lp

# fake_lp gives a character the log-prob -(1 + ord(c) % 7) / 2 nats: "F" (70) -0.5, "E" (69) -3.5
MEMBER, NONMEMBER = "F" * 30, "E" * 30


class AccentsBoundOnly(Backend):
    """fake_lp's values, exact, except that a text's "é" is known only from above (as a server's
    partial-UTF-8 token is): its lower bound is -inf."""

    features = frozenset({LOGPROBS})

    async def _alogprobs(self, texts, progress, on_done, vocab_stats=None):
        out = []
        for i, text in enumerate(texts):
            lp = fake_lp(text)
            lower = lp.logprobs.copy()
            lower[[j for j, c in enumerate(text) if c == "é"]] = -math.inf
            lp.lower, lp.upper = lower, lp.logprobs.copy()
            if on_done is not None:
                on_done(i, lp)
            out.append(lp)
        return out

    def describe(self):
        return {"backend": "fake", "model": "accents"}


def write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def item(i, text, label=None, accent=False):
    row = {"id": f"{'m' if text == MEMBER else 'n'}{i}{'-acc' if accent else ''}",
           "text": text + (" é" if accent else "") + f" {i:03d}"}
    return row if label is None else {**row, "label": label}


def test_eval_stops_without_it_and_drops_counts_and_warns_with_it(tmp_path):
    rows = [item(i, MEMBER, 1, accent=i < 2) for i in range(10)] + [item(i, NONMEMBER, 0, accent=i < 1) for i in range(10)]
    data = write(tmp_path / "eval.jsonl", rows)
    backends = {"target": AccentsBoundOnly()}
    plan = prepare_eval(EvalConfig(dataset=data, scorers=("loss",), n_boot=0))
    with pytest.raises(BlackboxMIAError) as info:
        run_eval(plan, backends, tmp_path / "stop", progress=False)
    assert "no usable score for 3 of 20 texts" in str(info.value) and "drop_unscored=True" in str(info.value)
    assert "--drop-unscored" in as_flags(info.value.args[0])

    result = run_eval(prepare_eval(EvalConfig(dataset=data, scorers=("loss",), n_boot=0, drop_unscored=True)), backends,
                      tmp_path / "drop", progress=False)
    assert result.summary["dropped_unscored"] == 3 and result.summary["auc"]["loss"] == 1.0
    assert result.report["dropped_unscored"] == {"group": "eval", "n": 3, "of": 20, "ids": ["m0-acc", "m1-acc", "n0-acc"]}
    assert result.summary["warnings"][0].startswith("3 of 20 eval texts dropped for want of a usable score "
                                                    "(first: 'm0-acc'): the result covers the other 17")
    assert "3 of 20 eval texts dropped" in result.md_path.read_text()


def test_eval_refuses_when_dropping_leaves_one_class(tmp_path):
    rows = [item(i, MEMBER, 1, accent=True) for i in range(3)] + [item(i, NONMEMBER, 0) for i in range(3)]
    plan = prepare_eval(EvalConfig(dataset=write(tmp_path / "e.jsonl", rows), scorers=("loss",), n_boot=0,
                                   drop_unscored=True))
    with pytest.raises(BlackboxMIAError, match="once the texts without a usable score are dropped"):
        run_eval(plan, {"target": AccentsBoundOnly()}, tmp_path / "out", progress=False)


def test_sweep_drops_from_benchmark_and_calibration_alike(tmp_path):
    # benchmark: 20 members (4 accented) and 60 non-members (6 accented), unlabelled;
    # calibration: 30 members (3 accented) and 60 non-members (5 accented), none in the benchmark
    bench = [item(i, MEMBER, accent=i < 4) for i in range(20)] + [item(i, NONMEMBER, accent=i < 26) for i in range(20, 80)]
    cal = ([item(i, MEMBER, 1, accent=i < 103) for i in range(100, 130)]
           + [item(i, NONMEMBER, 0, accent=i < 205) for i in range(200, 260)])
    bench_path, cal_path = write(tmp_path / "bench.jsonl", bench), write(tmp_path / "cal.jsonl", cal)
    config = SweepConfig(dataset=bench_path, scorer="loss", calibration=cal_path, control=False, drop_unscored=True)
    result = run_sweep(prepare_sweep(config), {"target": AccentsBoundOnly()}, tmp_path / "out", progress=False)
    roles = result.summary["roles"]
    assert roles["dropped_unscored"] == {"benchmark": 10, "calibration": 8}
    assert (roles["swept"], roles["dropped_calibration_overlap"]) == (70, 0)
    assert (roles["calibration_members"], roles["calibration_nonmembers"]) == (27, 55)
    # the kept swept items: 16 members of 70, every member above the threshold, no non-member;
    # the estimate corrects the flag rate by the conformal FPR (0 + 1) / (55 + 1) and the TPR 1
    assert result.summary["flag_rate"] == pytest.approx(16 / 70) and result.summary["tpr"] == 1.0
    assert result.summary["prevalence"]["estimate"] == pytest.approx((16 / 70 - 1 / 56) / (1 - 1 / 56))
    assert [d["group"] for d in result.report["dropped_unscored"]] == ["benchmark", "calibration"]
    assert result.report["dropped_unscored"][1]["ids"][:3] == ["n200-acc", "n201-acc", "n202-acc"]
    warnings = result.summary["warnings"]
    assert warnings[0].startswith("10 of 80 benchmark texts dropped") and warnings[1].startswith("8 of 90 calibration")

    stopped = SweepConfig(dataset=bench_path, scorer="loss", calibration=cal_path, control=False)
    with pytest.raises(BlackboxMIAError, match="drop_unscored=True"):
        run_sweep(prepare_sweep(stopped), {"target": AccentsBoundOnly()}, tmp_path / "stop", progress=False)


def test_a_sweep_names_settings_as_its_caller_does(tmp_path):
    bench = [item(i, NONMEMBER) for i in range(40)]
    cal = [item(i, NONMEMBER, 0) for i in range(100, 160)]
    config = SweepConfig(dataset=write(tmp_path / "b.jsonl", bench), scorer="loss",
                         nonmembers=write(tmp_path / "n.jsonl", cal), control=False)
    python = run_sweep(prepare_sweep(config), {"target": AccentsBoundOnly()}, tmp_path / "py", progress=False)
    cli = run_sweep(prepare_sweep(config), {"target": AccentsBoundOnly()}, tmp_path / "cli", progress=False,
                    names=as_flags)
    path = str(tmp_path / "n.jsonl")
    assert python.summary["roles"]["calibration_source"] == f"nonmembers={path!r}"
    assert cli.summary["roles"]["calibration_source"] == f"--nonmembers {path}"
    assert "calibration=" in python.summary["headline"] and "--calibration" in cli.summary["headline"]
    for result in (python, cli):
        assert "\x1f" not in result.json_path.read_text() + result.md_path.read_text()
    assert np.isfinite(python.summary["threshold"])
