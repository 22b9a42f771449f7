"""Run reading through `bbmia serve` (a model, a server, two trackers: several seconds, so an
integration test): the probe checks the semantics, values are the white-box ones."""

import numpy as np
import pytest

from blackbox_mia.backends.api import ApiBackend
from blackbox_mia.backends.api.http.client import ApiConfig
from blackbox_mia.backends.api.tracker.tracker import TrackerConfig
from blackbox_mia.backends.local import LocalBackend, LocalConfig
from blackbox_mia.emulator import ServerConfig, serve_in_background

from ..conftest import gsm8k_questions


@pytest.fixture(scope="module")
def local(peaked_model_dir):
    return LocalBackend(LocalConfig(str(peaked_model_dir)))


def test_run_reading_through_the_emulator(local, peaked_model_dir, tmp_path):
    question = gsm8k_questions(1, split="test")[0][:20]
    memorized = question + local.generate([question], max_new_tokens=30)[0].text  # the model reproduces its tail
    texts = [memorized, gsm8k_questions(2, split="test")[1][:60]]
    white = local.logprobs(texts)
    with serve_in_background(ServerConfig(str(peaked_model_dir), echo=False), backend=local) as url:
        used = {}
        for strategy in ("run", "forced"):
            config = ApiConfig(base_url=url, model=str(peaked_model_dir), max_retries=1)
            backend = ApiBackend(config, tokenizer=str(peaked_model_dir), tracker=TrackerConfig(strategy=strategy),
                                 cache_dir=tmp_path / strategy)
            assert backend.capabilities.run_reading
            before = backend.usage.requests
            black = backend.logprobs(texts)
            used[strategy] = backend.usage.requests - before
            backend.close()
            for b, w in zip(black, white):
                assert b.token_ids.tolist() == w.token_ids.tolist()
                np.testing.assert_allclose(b.logprobs, w.logprobs, atol=1e-4)
                np.testing.assert_array_equal(b.lower, b.upper)
    tokens = sum(w.n_tokens for w in white)
    assert used["forced"] == tokens
    assert used["run"] < 0.8 * used["forced"]  # the memorized text's tail is read by runs


