"""The sweep's first lines: the verdict against the best reference, then the member fraction."""

from __future__ import annotations

import numpy as np
import pytest

from blackbox_mia.audits.sweep.verdict import sweep_headline, sweep_verdict, verdict_notes
from blackbox_mia.evaluation import estimate_prevalence
from blackbox_mia.evaluation.detection import tail_test


def test_known_nonmembers_come_before_the_control_and_the_headline_starts_with_the_verdict():
    rng = np.random.default_rng(0)
    bench = np.vstack([rng.normal(size=(360, 2)), rng.normal(4, 1, size=(40, 2))])
    nonmembers, control = rng.normal(size=(60, 2)), rng.normal(3, 1, size=(60, 2))
    verdict = sweep_verdict(bench, nonmembers, control, None, "--nonmembers n.jsonl", seed=0)
    assert verdict["p_value"] == pytest.approx(tail_test(bench[:, 0], nonmembers[:, 0])["p_value"])
    assert verdict["detected"] and verdict["caveat"] is None and verdict["combination"] is None
    assert verdict["dataset_inference"]["false_positive_check"]["p_value"] > 0
    prevalence = estimate_prevalence(bench[:, 0], nonmembers[:, 0])
    first, second = sweep_headline(prevalence, 400, verdict).split("\n")
    assert first.startswith("Contamination DETECTED at alpha = 0.05: p = ") and "--nonmembers n.jsonl" in first
    assert second.startswith("No known member: at least")
    assert verdict_notes(verdict)[0].startswith("Dataset inference (Maini et al. 2024")


def test_the_control_as_reference_carries_its_caveat():
    rng = np.random.default_rng(1)
    verdict = sweep_verdict(rng.normal(size=(100, 1)), None, rng.normal(size=(50, 1)), None, "the control", seed=0)
    assert not verdict["detected"] and "not exchangeable" in verdict["caveat"]
    assert verdict_notes(verdict)[0] == verdict["caveat"]
    # too small a reference for dataset inference: no line, the verdict still stands
    small = sweep_verdict(rng.normal(size=(100, 1)), rng.normal(size=(5, 1)), None, None, "x", seed=0)
    assert small["dataset_inference"] is None and verdict_notes(small) == []
