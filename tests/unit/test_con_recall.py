"""Con-ReCall against hand-computed values, against the tiny model's own log-probs, and its bad input."""

import json
import math

import numpy as np
import pytest
from typer.testing import CliRunner

from blackbox_mia.cli import app
from blackbox_mia.runner import score_texts
from blackbox_mia.scorers import Need, parse_scorer
from blackbox_mia.types import Provenance, TokenLogprobs


def tlp(ids, values, lower=None):
    prov = Provenance("test", "none", "fixed", True)
    return TokenLogprobs(np.asarray(ids), ["t"] * len(ids), np.asarray(values, dtype=float), (0,), prov,
                         lower=None if lower is None else np.asarray(lower, dtype=float),
                         upper=None if lower is None else np.asarray(values, dtype=float))


def jsonl(path, texts, label):
    path.write_text("".join(json.dumps({"id": f"{label}-{i}", "text": t, "label": label}) + "\n" for i, t in enumerate(texts)))
    return path


@pytest.fixture
def prefixes(tmp_path):
    return (jsonl(tmp_path / "nonmembers.jsonl", ["a b", "c d"], 0), jsonl(tmp_path / "members.jsonl", ["m n", "o p"], 1))


def test_con_recall_is_the_contrast_of_the_two_conditional_logliks_over_the_plain_one(prefixes):
    nonmembers, members = prefixes
    scorer = parse_scorer(f"con_recall:prefix={nonmembers},member_prefix={members}")
    assert scorer.needs("x y") == [Need("a b\n\nx y"), Need("m n\n\nx y")]  # one shot each, non-member first
    assert scorer.conditioning_texts() == ("a b", "m n")
    plain = tlp([5, 6], [-1.0, -3.0])  # LL(x) = -2
    after_nonmember = tlp([1, 2, 5, 6], [-0.5, -0.5, -2.0, -4.0])  # LL(x | P_nm) = -3
    after_member = tlp([7, 8, 5, 6], [-0.1, -0.1, -1.0, -2.0])  # LL(x | P_m) = -1.5
    # (LL_nm - gamma LL_m) / LL = (-3 + 0.5 * 1.5) / -2; the authors' losses give the same: (3 - 0.5 * 1.5) / 2
    score = scorer.score("x y", plain, [after_nonmember, after_member])
    assert score.value == pytest.approx(1.125) and score.lower == score.upper == pytest.approx(1.125)
    gamma_one = parse_scorer(f"con_recall:prefix={nonmembers},member_prefix={members},gamma=1")
    assert gamma_one.score("x y", plain, [after_nonmember, after_member]).value == pytest.approx(0.75)
    two = parse_scorer(f"con_recall:prefix={nonmembers},member_prefix={members},shots=2")
    assert two.needs("x") == [Need("a b\n\nc d\n\nx"), Need("m n\n\no p\n\nx")]


def test_con_recall_bounds_follow_the_bounded_log_probs(prefixes):
    nonmembers, members = prefixes
    scorer = parse_scorer(f"con_recall:prefix={nonmembers},member_prefix={members}")
    plain = tlp([5, 6], [-1.0, -3.0])
    after_nonmember = tlp([1, 5, 6], [-0.5, -2.0, -4.0])
    after_member = tlp([7, 5, 6], [-0.1, -1.0, -2.0], lower=[-0.1, -3.0, -2.0])  # LL(x | P_m) in [-2.5, -1.5]
    score = scorer.score("x y", plain, [after_nonmember, after_member])
    # numerator -3 - 0.5 [-2.5, -1.5] = [-2.25, -1.75], over -2
    assert (score.value, score.lower, score.upper) == pytest.approx((1.125, 0.875, 1.125))
    assert score.spread == pytest.approx(1.0)


def test_con_recall_on_the_tiny_model_is_the_formula_on_its_log_probs(backend, prefixes):
    nonmembers, members = prefixes
    text = "Tom has 3 red apples."
    scorer = parse_scorer(f"con_recall:prefix={nonmembers},member_prefix={members},gamma=0.3")
    (scores, _), = score_texts([text], [scorer], {"target": backend})
    plain, after_nonmember, after_member = backend.logprobs([text, f"a b\n\n{text}", f"m n\n\n{text}"])
    n = len(plain.token_ids)
    assert n > 3 and all(np.array_equal(lp.token_ids[-n:], plain.token_ids) for lp in (after_nonmember, after_member))
    ll, ll_nm, ll_m = (float(np.mean(lp.logprobs[-n:])) for lp in (plain, after_nonmember, after_member))
    assert scores[scorer.label].value == pytest.approx((ll_nm - 0.3 * ll_m) / ll, rel=1e-6)
    assert not math.isclose(ll_nm, ll_m)  # the two prefixes condition x differently


@pytest.mark.parametrize("spec, message", [
    ("con_recall:prefix={nm}", "scorer 'con_recall' needs member_prefix=PATH: a JSONL of known MEMBERS"),
    ("con_recall:member_prefix={m}", "scorer 'con_recall' needs prefix=PATH: a JSONL of known NON-members"),
    ("con_recall:prefix={nm},member_prefix={missing}", "scorer 'con_recall': member_prefix={missing}: dataset file not found"),
    ("con_recall:prefix={empty},member_prefix={m}", "scorer 'con_recall': prefix={empty}: {empty}: empty dataset"),
    ("con_recall:prefix={m},member_prefix={m}", "prefix={m} is for known NON-members, but its item '1-0' is labelled 1"),
    ("con_recall:prefix={nm},member_prefix={nm}", "member_prefix={nm} is for known MEMBERS, but its item '0-0' is labelled 0"),
    ("con_recall:prefix={nm},member_prefix={m},shots=3", "prefix={nm} holds 2 texts, shots=3 asks for more"),
    ("con_recall:prefix={nm},member_prefix={m},gamma=0", "gamma must be a finite number > 0, got 0"),
])
def test_con_recall_bad_prefixes_are_one_line_and_exit_2(tiny_model_dir, tmp_path, prefixes, spec, message):
    paths = {"nm": prefixes[0], "m": prefixes[1], "missing": tmp_path / "nope.jsonl", "empty": tmp_path / "empty.jsonl"}
    paths["empty"].write_text("")
    items = jsonl(tmp_path / "items.jsonl", ["Tom has 3 red apples."], 1)
    out = tmp_path / "scores.jsonl"
    result = CliRunner().invoke(app, ["score", str(items), "--local", str(tiny_model_dir), "--scorers", spec.format(**paths),
                                      "--out", str(out)], env={"OPENAI_BASE_URL": None}, catch_exceptions=False)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.strip().splitlines() if not line.startswith("Loading weights")]
    assert len(lines) == 1 and message.format(**paths) in lines[0], result.output
    assert not out.exists()


def test_an_eval_refuses_a_con_recall_prefix_text_among_its_items_before_loading_the_model(tmp_path, prefixes):
    items = tmp_path / "items.jsonl"
    items.write_text("".join(json.dumps(row) + "\n" for row in [{"id": "1", "text": "x y", "label": 0},
                                                                 {"id": "2", "text": "m n", "label": 1}]))
    spec = f"con_recall:prefix={prefixes[0]},member_prefix={prefixes[1]}"
    result = CliRunner().invoke(app, ["eval", str(items), "--local", str(tmp_path / "no-model"), "--scorers", spec,
                                      "--out", str(tmp_path / "out")], env={"OPENAI_BASE_URL": None}, catch_exceptions=False)
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [
        f"error: scorer '{spec}' conditions on 1 text(s) among the evaluated items ('m n'...): "
        "take its prefix from other known items"]
    assert not (tmp_path / "out").exists()
