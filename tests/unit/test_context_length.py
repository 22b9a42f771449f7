"""The model's context length (issue 30, item 4): discovered from the server's ``GET /models``
(vLLM's ``max_model_len``) or the tokenizer's configuration, a 400 for length names
``--context-tokens``, and a resume refused for a changed setting says how to keep the work."""

from __future__ import annotations

import pytest

from blackbox_mia.backends.api import ApiBackend
from blackbox_mia.backends.api.http.client import ApiConfig
from blackbox_mia.backends.api.http.errors import ApiError
from blackbox_mia.backends.api.tracker.config import TrackerConfig
from blackbox_mia.backends.local import LocalBackend, LocalConfig
from blackbox_mia.emulator import ServerConfig, serve_in_background
from blackbox_mia.option_names import for_command_line
from blackbox_mia.tokenizers import HFTokenCodec

from ..conftest import gsm8k_questions


def test_the_context_comes_from_the_server_and_long_texts_match_the_white_box(tiny_model_dir, tmp_path):
    local = LocalBackend(LocalConfig(str(tiny_model_dir)))
    text = " ".join(gsm8k_questions(3))  # well over the tiny model's 64 tokens
    assert len(local.codec.encode(text)) > 2 * local.context == 128
    with serve_in_background(ServerConfig(str(tiny_model_dir)), backend=local) as url:
        api = ApiBackend(ApiConfig(base_url=url, model=str(tiny_model_dir)), tokenizer=str(tiny_model_dir),
                         cache_dir=tmp_path)
        try:
            assert api.context is None  # nothing is sent before the first call
            (black,) = api.logprobs([text])
            assert api.context == 64 and api.describe()["tracker"]["context"] == 64  # GET /models max_model_len
        finally:
            api.close()
    (white,) = local.logprobs([text])
    local.close()
    # the same sliding windows as the local backend: every token's value equals the white-box one
    assert list(black.token_ids) == list(white.token_ids)
    assert black.logprobs == pytest.approx(white.logprobs, abs=0.02)
    assert (black.lower <= white.logprobs + 1e-4).all() and (white.logprobs <= black.upper + 1e-4).all()


def test_a_given_context_is_kept(tiny_model_dir, tmp_path):
    with serve_in_background(ServerConfig(str(tiny_model_dir))) as url:
        api = ApiBackend(ApiConfig(base_url=url, model=str(tiny_model_dir)), tokenizer=str(tiny_model_dir),
                         tracker=TrackerConfig(context=32), cache_dir=tmp_path)
        try:
            api.probe()
            assert api.context == 32 and api.tracker_config.context == 32
        finally:
            api.close()


def test_the_tokenizer_configuration_gives_the_context_of_its_model(tiny_model_dir):
    # the tiny tokenizer sets no model_max_length: the config.json saved beside it says 64 (n_positions)
    assert HFTokenCodec.load(str(tiny_model_dir)).max_length == 64


@pytest.mark.parametrize("message", [
    "This model's maximum context length is 64 tokens. However, you requested 90 tokens.",  # vLLM / OpenAI
    "the request exceeds the available context size, try increasing it",  # llama.cpp
])
async def test_a_400_for_length_names_context_tokens(client, fake, message):
    fake.faults = [{"status": 400, "json": {"error": {"message": message}}}]
    with pytest.raises(ApiError) as err:
        await client.complete([1], logprobs=1)
    assert "give its context in tokens as context=, and longer texts" in str(err.value)
    assert "give its context in tokens as --context-tokens, and longer texts" in for_command_line(err.value)
    assert message.split(".")[0] in str(err.value) and err.value.fault == "final"


def test_a_resume_refused_for_a_changed_setting_names_it_and_how_to_keep_the_work(tiny_model_dir, tmp_path):
    from .test_cli import assert_one_line_error, invoke

    data, out = tmp_path / "items.jsonl", tmp_path / "scores.jsonl"
    data.write_text('{"id": "a", "text": "Tom has 3 apples."}\n')
    assert invoke("score", data, "--local", tiny_model_dir, "--scorers", "loss", "--out", out).exit_code == 0
    again = invoke("score", data, "--local", tiny_model_dir, "--scorers", "zlib", "--out", out)
    assert_one_line_error(again, "was written with another configuration (scorers", "choose another --out to keep "
                          "these results, or pass --overwrite to replace them")
