"""The probe refuses a tokenizer that is not the served model's (issue 52, bad input): where
prompts go as text, the server's count of the probe text's tokens must be the tokenizer's, or
its values would belong to other contexts than the tracker thinks."""

from __future__ import annotations

import pytest

from blackbox_mia.backends.api import ApiBackend
from blackbox_mia.backends.api.http.client import ApiConfig
from blackbox_mia.backends.api.tracker.tracker import TrackerConfig
from blackbox_mia.emulator import ServerConfig, serve_in_background
from blackbox_mia.types import BlackboxMIAError


def test_a_tokenizer_the_server_counts_otherwise_is_named_and_the_right_one_passes(tiny_model_dir, tmp_path):
    with serve_in_background(ServerConfig(str(tiny_model_dir), token_id_prompts=False)) as url:
        config = ApiConfig(base_url=url, model=str(tiny_model_dir), max_retries=1, backoff_base_s=0.01)
        tracker = TrackerConfig(context=20)  # the probe text cut to 19 tokens: the server's count of it fits its 64
        wrong = ApiBackend(config, tokenizer="cl100k_base", tracker=tracker, cache_dir=tmp_path / "wrong")
        with pytest.raises(BlackboxMIAError, match=r"the tokenizer 'tiktoken:cl100k_base' is not the served model's: "
                           r"it makes \d+ tokens of the probe text, the server counted \d+"):
            wrong.probe()
        wrong.close()
        assert not list((tmp_path / "wrong").glob("capabilities/*.json"))  # nothing saved
        right = ApiBackend(config, tokenizer=str(tiny_model_dir), tracker=tracker, cache_dir=tmp_path / "right")
        evidence = right.capabilities.evidence["tokenizer"]
        right.close()
    assert evidence["requests"] == 1 and evidence["server_tokens"] == evidence["tokens"] == 19
