"""Renamed keys and options keep their old names for one release (docs/migration.md), and the
renames change no hash a result or a directory is found by."""

from __future__ import annotations

import pytest

from blackbox_mia.canary.unlearn import UnlearnConfig
from blackbox_mia.key_aliases import SUMMARY_KEYS, THRESHOLD_KEYS, with_old_keys
from blackbox_mia.types import BlackboxMIAError


def test_old_keys_are_added_with_the_same_values():
    record = {"realised_fpr": 0.25, "realised_fpr_ci": [0.1, 0.4], "tpr": 0.5}
    out = with_old_keys(record, SUMMARY_KEYS["sweep"])
    assert out == {**record, "fpr": 0.25, "fpr_ci": [0.1, 0.4]} and "fpr" not in record  # a new dict
    assert with_old_keys({"realised_fpr": 0.0}, THRESHOLD_KEYS) == {"realised_fpr": 0.0, "fpr": 0.0}
    with pytest.raises(KeyError):  # a table that names a key the record lacks is a bug, not a silent gap
        with_old_keys({"tpr": 0.5}, THRESHOLD_KEYS)


def test_unlearned_canaries_keep_their_directories():
    """The directory hash of an unlearned canary is computed under the setting's old name: the
    values below were printed by the code before the rename (commit e93139f)."""
    assert UnlearnConfig().short_hash(["gsm8k-test-1", "gsm8k-test-7"]) == "60e0dd889c88"
    config = UnlearnConfig(memorized_target_fpr=0.2, method="alternative_labels", alpha=2.0)
    assert config.short_hash(["a"]) == "7569d968f1aa"
    assert UnlearnConfig(memorized_target_fpr=0.1).short_hash(["a"]) != UnlearnConfig().short_hash(["a"])


def test_memorized_target_fpr_is_checked_under_its_new_name():
    with pytest.raises(BlackboxMIAError, match="memorized_target_fpr= must lie in"):
        UnlearnConfig(memorized_target_fpr=1.0).validate()
