"""The detection-power study's issue-43 pieces: the oracle, the reference-power keys, the seeds."""

import numpy as np
import pytest

from studies.detection_features import feature_sets, oracle_power
from studies.detection_power import feature_set_tables, first_seed, ref_power


def planted(shift: float, seed: int = 0):
    rng = np.random.default_rng(seed)
    feature = np.concatenate([rng.normal(shift, 1, 200), rng.normal(0, 1, 1119)])
    return feature, np.arange(len(feature)) < 200


def test_oracle_power_grows_with_the_signal_from_its_noise_floor():
    # no signal: the two KDEs differ only by the 200 members' sampling noise, which the oracle
    # takes as real (its floor, measured with the labels shuffled: oracle_noise_floor)
    floor = oracle_power(*planted(0.0), 1119, 100, 0.05, seed=1)
    assert 0.05 < floor < 0.2
    assert floor < oracle_power(*planted(0.5), 1119, 100, 0.05, seed=1) < 1.0
    assert oracle_power(*planted(3.0), 1119, 100, 0.05, seed=1) == 1.0


def test_feature_sets_append_their_columns_and_skip_incomplete_sets():
    base = np.zeros((3, 2))
    sets = feature_sets(base, {"recall": np.ones(3), "dc_pdd": 2 * np.ones(3)})
    assert list(sets) == ["recall_dc_pdd"] and sets["recall_dc_pdd"][:, 2:].tolist() == [[1, 2]] * 3
    sets = feature_sets(base, {"ref": 3 * np.ones(3), "one_ref": 4 * np.ones(3)})
    assert list(sets) == ["one_ref", "ref", "ref_alone"]
    assert sets["one_ref"].tolist() == [[0, 0, 4]] * 3 and sets["ref_alone"].tolist() == [[3]] * 3


def line(dup, seed, power, test="tail_combined+ref"):
    return {"test": test, "dup": dup, "seed": seed, "power": power, "power_ci": [0, 1], "clean_false_alarm": 0.05,
            "clean_false_alarm_ci": [0.02, 0.09], "headline": test == "tail_combined", "reference_canaries": ["r0", "r1"]}


def test_ref_power_takes_the_weakest_seed_and_the_target_needs_two():
    lines = [line(2, 0, 0.6), line(2, 1, 0.55), line(4, 0, 0.9), line(4, 1, 0.85), line(8, 0, 1.0)]
    keys = ref_power(lines)
    assert (keys["power_dup1_ref"], keys["power_dup2_ref"], keys["power_dup4_ref"], keys["power_dup8_ref"]) == (
        None, 0.55, 0.85, 1.0)
    assert keys["target_ref_power_met"] is True
    assert ref_power(lines[:1] + lines[2:3])["target_ref_power_met"] is False  # one seed only
    assert ref_power([line(2, 0, 0.4), line(2, 1, 0.9), *lines[2:4]])["target_ref_power_met"] is False


def test_first_seed_keeps_the_lowest_seed_per_dup_and_old_lines_count_as_seed_0():
    lines = [line(2, 1, 0.1), line(2, 0, 0.2), line(4, 1, 0.3), {"test": "tail", "dup": 8, "power": 0.4}]
    assert [r["power"] for r in first_seed(lines)] == [0.2, 0.3, 0.4]


def test_feature_set_table_has_a_row_per_set_and_oracle_and_a_column_per_canary():
    rows = [line(2, 0, 0.2, "tail_combined"), line(2, 0, 0.7), line(2, 1, 0.6),
            {"test": "oracle", "oracle_feature": "ref", "dup": 2, "seed": 0, "power": 0.95}]
    table = "\n".join(feature_set_tables(rows))
    assert "| dup 2, seed 0 | dup 2, seed 1 |" in table and "(`r0`, `r1`;" in table
    assert "| today's + `ref` | **0.700 [0.000, 1.000]** | **0.600 [0.000, 1.000]** |" in table
    assert "| oracle, `ref` densities known (no test on `ref` does better) | 0.950 | n/a |" in table
    assert feature_set_tables([line(2, 0, 0.2, "tail_combined")]) == []


def test_find_references_takes_every_matching_reference_own_seed_first(tmp_path):
    import json

    from studies.detection_features import find_references

    arch = {"corpus": "gsm8k", "vocab_size": 4096, "n_layer": 2, "n_embd": 128, "n_head": 4, "block_size": 128,
            "epochs": 2, "lr": 0.003}
    for name, seed, extra in (("a", 0, {}), ("b", 1, {}), ("c", 0, {"reference_size": 3500}), ("d", 2, {"n_layer": 4}),
                              ("e", 3, {})):
        (tmp_path / "canary" / name).mkdir(parents=True)
        manifest = {"config": {**arch, **extra, "seed": seed}, "seed": seed, "complete": name != "e", "reference": {}}
        (tmp_path / "canary" / name / "manifest.json").write_text(json.dumps(manifest))
    canary = {"config": {**arch, "seed": 1}, "seed": 1}
    assert [p.name for p in find_references(canary, tmp_path)] == ["b", "a", "c"]  # d: other architecture; e: incomplete


def test_familywise_ci_of_the_largest_false_alarm_rate():
    from studies.detection_power import familywise_ci

    line = {"clean_false_alarm": 18 / 200, "clean_splits": 200}
    # one line: the per-line 95% Clopper-Pearson CI, whose lower end excludes 0.05
    lo, hi = familywise_ci(line, 1)
    assert abs(lo - 0.0542) < 5e-4 and abs(hi - 0.1390) < 5e-4
    # the largest of 60 lines: level 1 - 0.05/60, wide enough to reach 0.05
    lo60, hi60 = familywise_ci(line, 60)
    assert abs(lo60 - 0.0363) < 5e-4 and abs(hi60 - 0.1764) < 5e-4 and lo60 < 0.05 < lo
