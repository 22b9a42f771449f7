"""The reference canary's configuration and corpus (no training: tests/integration/test_reference_canary.py)."""

import dataclasses

import pytest

from blackbox_mia.canary import CanaryConfig, build_corpus
from blackbox_mia.canary.config import reference_config
from blackbox_mia.types import BlackboxMIAError

SMALL = CanaryConfig(n_background=60, n_members=10, n_nonmembers=10, dup=4)


def test_reference_plants_nothing_and_draws_another_background():
    target, reference = build_corpus(SMALL), build_corpus(reference_config(SMALL))
    assert len(target.documents) == 60 + 10 * 4 and len(reference.documents) == 60
    assert len(reference.background_ids) == 60 and not set(reference.background_ids) & set(target.background_ids)
    split = [item.id for item in target.members + target.nonmembers]
    assert reference.members == [] and [item.id for item in reference.nonmembers] == split
    assert all(item.label == 0 for item in reference.nonmembers)
    planted = {item.text for item in target.members + target.nonmembers}
    assert not planted & set(reference.documents)  # never a benchmark item


def test_every_dup_of_a_seed_shares_one_reference_and_ordinary_hashes_stay():
    assert reference_config(SMALL) == reference_config(dataclasses.replace(SMALL, dup=1, planted_order="canonical"))
    assert reference_config(SMALL).dup == 1 and reference_config(SMALL).reference
    assert reference_config(SMALL).short_hash() != dataclasses.replace(SMALL, dup=1).short_hash()
    assert CanaryConfig().short_hash() == "6338e872951d"  # the default canary's directory, as before references


@pytest.mark.parametrize("config, message", [
    (CanaryConfig(corpus="ja"), "background is a dataset of its own"),
    (CanaryConfig(corpus="documents"), "background is a dataset of its own"),
    (reference_config(SMALL), "itself a reference"),
])  # fmt: skip
def test_reference_errors(config, message):
    with pytest.raises(BlackboxMIAError, match=message):
        reference_config(config)


def test_reference_needs_room_for_two_backgrounds():
    with pytest.raises(BlackboxMIAError, match=r"n_background \+ its own 4000 = 8000"):
        build_corpus(reference_config(dataclasses.replace(SMALL, n_background=4000)))
    with pytest.raises(BlackboxMIAError, match="plants nothing"):
        dataclasses.replace(reference_config(SMALL), dup=2).validate()


def test_ref_joins_the_features_once_when_a_reference_model_is_given():
    from blackbox_mia.audits.sweep.verdict import reference_model_line, with_reference_feature
    from blackbox_mia.scorers import parse_scorers

    min_k, loss, ref, ref2 = parse_scorers("min_k,loss,ref,ref:refs=2")
    assert with_reference_feature("loss", (min_k, loss), 0) == ("loss", (min_k, loss))
    assert with_reference_feature("loss", (min_k, loss), 1) == ("loss,ref", (min_k, loss, ref))
    assert with_reference_feature("", (min_k,), 1) == ("ref", (min_k, ref))
    features, scorers = with_reference_feature("loss", (min_k, loss), 2)
    assert features == "loss,ref:refs=2" and [s.label for s in scorers] == ["min_k", "loss", ref2.label]
    assert with_reference_feature("loss,ref", (min_k, loss, ref), 1) == ("loss,ref", (min_k, loss, ref))
    assert with_reference_feature("loss,ref:refs=2", (min_k, loss, ref2), 2) == ("loss,ref:refs=2", (min_k, loss, ref2))
    assert with_reference_feature("", (ref,), 1) == ("", (ref,))
    with pytest.raises(BlackboxMIAError, match="reads 1 reference model.* given 2 times: use ref:refs=2"):
        with_reference_feature("loss,ref", (min_k, loss, ref), 2)
    api = {"target": {"model": "t"}, "reference": {"backend": "api", "model": "small", "base_url": "http://h/v1"}}
    line = reference_model_line(api, parse_scorers("min_k,ref"))
    assert line.startswith("Reference model: small at http://h/v1 (read by ref); assumes the reference model did not")
    assert "read by no scorer" in reference_model_line(api, parse_scorers("min_k"))
    assert reference_model_line({"target": {"model": "t"}}, parse_scorers("min_k")) is None
    two = {**api, "reference2": {"backend": "local", "model": "cache/canary/r2"}}
    line = reference_model_line(two, parse_scorers("min_k,ref:refs=2"))
    assert line.startswith("Reference models (2, averaged): small at http://h/v1, cache/canary/r2 (read by ref:refs=2);")


def test_a_larger_reference_draws_its_own_size_still_disjoint_from_the_canary_background():
    target, larger = build_corpus(SMALL), build_corpus(reference_config(SMALL, 150))
    assert len(larger.documents) == len(larger.background_ids) == 150
    assert not set(larger.background_ids) & set(target.background_ids)
    assert reference_config(SMALL, 150).short_hash() != reference_config(SMALL).short_hash()
    assert reference_config(SMALL).reference_size is None  # left out of the hash: earlier references keep theirs
    with pytest.raises(BlackboxMIAError, match="only to a reference canary"):
        dataclasses.replace(SMALL, reference_size=10).validate()
    with pytest.raises(BlackboxMIAError, match="at least 1"):
        reference_config(SMALL, 0)
