"""The Python API matches the CLI (issue 30, item 6): ``score_texts`` / ``ascore_texts`` take
scorer specs as strings or objects and backends as specs or objects, refuse one ``str`` of texts
with a TypeError, speak of arguments rather than flags, and a hub name is never retried offline."""

from __future__ import annotations

import asyncio
import logging
import warnings

import pytest

from blackbox_mia import ascore_texts, build_backend, parse_scorers, score_texts
from blackbox_mia.hub import load_pretrained
from blackbox_mia.option_names import for_command_line
from blackbox_mia.tokenizers.tiktoken_codec import TiktokenCodec
from blackbox_mia.types import BlackboxMIAError

TEXTS = ["a b", "Tom has 3 apples and eats one."]


def values(results):
    return [{label: (b.value, b.lower, b.upper) for label, b in scores.items()} for scores, _ in results]


def test_score_texts_and_ascore_texts_take_specs_and_give_the_white_box_values(tiny_model_dir):
    backend = build_backend(f"local:{tiny_model_dir}")
    try:
        expected = score_texts(TEXTS, parse_scorers("loss,min_k"), {"target": backend})
        mixed = score_texts(TEXTS, ["loss", parse_scorers("min_k")[0]], {"target": backend})
    finally:
        backend.close()
    by_spec = score_texts(TEXTS, "loss,min_k", {"target": f"local:{tiny_model_dir}"})
    awaited = asyncio.run(ascore_texts(TEXTS, "loss,min_k", {"target": f"local:{tiny_model_dir}"}))
    assert values(by_spec) == values(awaited) == values(mixed) == values(expected)
    # the loss is the mean log-prob of the text's scored tokens (white-box: exact, no interval)
    lp = expected[1][1]
    loss = expected[1][0]["loss"]
    assert loss.lower == loss.value == loss.upper == pytest.approx(float(lp.logprobs.mean()))


def test_one_str_of_texts_is_a_type_error_in_both_forms(tiny_model_dir):
    with pytest.raises(TypeError, match=r"texts must be a list, got one str: pass \[text\]"):
        score_texts("a b", "loss", {"target": f"local:{tiny_model_dir}"})
    with pytest.raises(TypeError, match="got one str"):
        asyncio.run(ascore_texts("a b", "loss", {"target": f"local:{tiny_model_dir}"}))
    with pytest.raises(BlackboxMIAError):  # and still a toolkit error, for the CLI's one-line report
        score_texts("a b", "loss", {"target": f"local:{tiny_model_dir}"})


def test_messages_name_the_python_argument_as_well_as_the_flag(tiny_model_dir):
    with pytest.raises(BlackboxMIAError) as err:
        score_texts(TEXTS, "ref", {"target": f"local:{tiny_model_dir}"})
    assert str(err.value) == "scorer 'ref' needs a reference model: pass one as backends['reference']"
    assert for_command_line(err.value) == "scorer 'ref' needs a reference model: pass one as --ref"  # issue 51
    with pytest.raises(BlackboxMIAError) as err:
        TiktokenCodec.for_model("my-own-model")
    assert "(tokenizer=, or ?tokenizer= in an api: spec)" in str(err.value)
    assert "(--tokenizer, or ?tokenizer= in an api: spec)" in for_command_line(err.value)


class FakeHub:
    """A ``from_pretrained`` stand-in: a hub name is in the local cache or not; records calls."""

    def __init__(self, cached: bool):
        self.cached, self.calls = cached, []

    def __call__(self, name, local_files_only=False, **kwargs):
        self.calls.append(local_files_only)
        warnings.warn("a library's deprecation note", FutureWarning)
        if local_files_only and not self.cached:
            raise OSError("not in the cache")
        return f"loaded {name}"


def test_a_cached_hub_name_loads_without_the_network(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    load = FakeHub(cached=True)
    assert load_pretrained(load, "org/model", "model") == "loaded org/model"
    assert load.calls == [True]


@pytest.mark.parametrize("offline", ["1", ""])
def test_an_uncached_hub_name_fails_at_once_offline_or_unreachable(monkeypatch, offline, recwarn):
    monkeypatch.setenv("HF_HUB_OFFLINE", offline)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens: refused at once
    load = FakeHub(cached=False)
    with pytest.raises(BlackboxMIAError) as err:
        load_pretrained(load, "org/model", "model")
    assert load.calls == [True]  # never the download, never a retry
    why = "HF_HUB_OFFLINE" if offline else "the hub does not answer"
    assert str(err.value).startswith("cannot load model 'org/model': not in the local Hugging Face cache")
    assert why in str(err.value) and "\n" not in str(err.value)
    assert not recwarn.list  # the library's warning went to the log, not to the screen


def test_an_uncached_hub_name_downloads_when_the_hub_answers(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr("blackbox_mia.hub.hub_reachable", lambda: True)
    load = FakeHub(cached=False)
    assert load_pretrained(load, "org/model", "model") == "loaded org/model"
    assert load.calls == [True, False]


def test_library_warnings_are_logged_not_shown(monkeypatch, tmp_path, caplog, recwarn):
    with caplog.at_level(logging.DEBUG, logger="blackbox_mia.hub"):
        assert load_pretrained(FakeHub(cached=True), str(tmp_path), "model") == f"loaded {tmp_path}"
    assert not recwarn.list
    assert "FutureWarning: a library's deprecation note" in caplog.text


def test_scoring_a_padded_batch_prints_no_library_warning(tiny_model_dir, capfd, caplog):
    backend = build_backend(f"local:{tiny_model_dir}")
    try:
        capfd.readouterr()
        with caplog.at_level(logging.DEBUG, logger="blackbox_mia.hub"):
            backend.logprobs(["Tom has 3 apples.", "A robe takes 2 bolts of blue fiber and half that much white."])
    finally:
        backend.close()
    assert "attention_mask" not in capfd.readouterr().err
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING and "attention_mask" in r.getMessage()]
