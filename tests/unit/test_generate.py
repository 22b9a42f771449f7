"""Backend.generate: local greedy output equals Hugging Face `generate`; the API path through
`bbmia serve` equals the local one (text and ids); seeded sampling is reproducible per prompt;
prompt-major order; a cached rerun makes zero requests; missing features are clear errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from blackbox_mia.backends.api import ApiBackend
from blackbox_mia.backends.api.http.client import ApiConfig
from blackbox_mia.backends.base import LOGPROBS, Backend
from blackbox_mia.backends.generation import build_generation
from blackbox_mia.backends.local import LocalBackend, LocalConfig
from blackbox_mia.emulator import ServerConfig, serve_in_background
from blackbox_mia.types import BlackboxMIAError, Provenance

from ..conftest import gsm8k_questions

NEW = 8  # generated tokens


@pytest.fixture(scope="module")
def local(peaked_model_dir):
    # a small batch budget: several left-padded batches of different widths
    return LocalBackend(LocalConfig(str(peaked_model_dir), max_batch_tokens=100))


@pytest.fixture(scope="module")
def prompts():
    return [q[: 12 + 9 * i] for i, q in enumerate(gsm8k_questions(5, split="test"))]


def hf_greedy(backend: LocalBackend, prompt: str, steps: int) -> list[int]:
    """Hugging Face greedy decoding of one unpadded prompt (BOS first, as for scoring)."""
    ids = torch.tensor([backend.full_ids(backend.encode(prompt))])
    out = backend.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=steps, do_sample=False,
                                 pad_token_id=backend.tokenizer.pad_token_id)
    return out[0, ids.shape[1]:].tolist()


def test_local_greedy_equals_hf_generate(local, prompts):
    gens = local.generate(prompts, max_new_tokens=NEW)
    assert [g.prompt_index for g in gens] == list(range(len(prompts))) and {g.sample for g in gens} == {0}
    for prompt, g in zip(prompts, gens):
        assert g.token_ids.tolist() == hf_greedy(local, prompt, NEW)
        assert g.finish_reason == "length" and g.n_tokens == NEW
        assert g.text == local.codec.decode(g.token_ids) and g.tokens == [local.codec.token_string(i) for i in g.token_ids]
        assert g.provenance == Provenance("local", local.config.model, "greedy", True)
        # per-token log-probs: the white-box next-token distribution after each prefix
        prefix = local.full_ids(local.encode(prompt))
        want = [local.next_token_logprobs([prefix + g.token_ids[:t].tolist()])[0][g.token_ids[t]] for t in range(NEW)]
        np.testing.assert_allclose(g.logprobs, want, atol=1e-4)
    # a token-id prompt is the same prompt
    again = local.generate([local.encode(prompts[2])], max_new_tokens=NEW)[0]
    assert again.token_ids.tolist() == gens[2].token_ids.tolist()


def test_stop_at_eos(peaked_model_dir, prompts):
    backend = LocalBackend(LocalConfig(str(peaked_model_dir)))
    free = backend.generate(prompts[:1], max_new_tokens=NEW)[0].token_ids.tolist()
    stop = free[3]  # make the 4th greedy token the end-of-sequence token
    backend.tokenizer.eos_token = backend.tokenizer.convert_ids_to_tokens(stop)
    g = backend.generate(prompts[:1], max_new_tokens=NEW)[0]
    cut = free.index(stop) + 1
    assert g.finish_reason == "stop" and g.token_ids.tolist() == free[:cut]
    assert g.text == backend.codec.decode(free[: cut - 1])  # the EOS token is not part of the text
    assert g.logprobs.shape == (cut,)


def test_build_generation_cuts_after_the_first_eos(local):
    provenance = Provenance("local", "m", "greedy", True)
    ids = local.encode("Tom has 3")
    g = build_generation(local.codec, [*ids, 0, 0, 0], [-1.0] * (len(ids) + 3), 0, 2, 1, provenance)
    assert (g.token_ids.tolist(), g.text, g.finish_reason) == ([*ids, 0], "Tom has 3", "stop")
    assert g.logprobs.tolist() == [-1.0] * (len(ids) + 1) and (g.prompt_index, g.sample) == (2, 1)
    h = build_generation(local.codec, ids, None, 0, 0, 0, provenance)
    assert (h.finish_reason, h.logprobs, h.to_json()["tokens"][0]["logprob"]) == ("length", None, None)


def test_seeded_sampling_is_reproducible_per_prompt_and_prompt_major(tiny_model_dir, prompts):
    backend = LocalBackend(LocalConfig(str(tiny_model_dir)))
    both = backend.generate(prompts[:2], max_new_tokens=NEW, temperature=1.0, n=3, seed=7)
    assert [(g.prompt_index, g.sample) for g in both] == [(i, j) for i in range(2) for j in range(3)]
    assert all(g.provenance.strategy == "sample" for g in both)
    alone = backend.generate(prompts[1:2], max_new_tokens=NEW, temperature=1.0, n=3, seed=7)
    for a, b in zip(both[3:], alone):  # the same samples whatever the other prompts
        assert a.token_ids.tolist() == b.token_ids.tolist() and a.sample == b.sample
    assert len({tuple(g.token_ids.tolist()) for g in alone}) == 3  # seeds 7, 8, 9 differ
    shifted = backend.generate(prompts[1:2], max_new_tokens=NEW, temperature=1.0, n=2, seed=8)
    assert shifted[0].token_ids.tolist() == alone[1].token_ids.tolist()  # sample j uses seed + j
    greedy = backend.generate(prompts[:2], max_new_tokens=NEW, n=2)
    assert greedy[0].token_ids.tolist() == greedy[1].token_ids.tolist() and [g.sample for g in greedy] == [0, 1, 0, 1]


def test_bad_generation_arguments(local):
    for kwargs, message in [
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"max_new_tokens": 4, "n": 0}, "n must be"),
        ({"max_new_tokens": 4, "temperature": -1}, "temperature"),
        ({"max_new_tokens": 4, "seed": -3}, "seed"),
        ({"max_new_tokens": 64}, "exceeds the context of 64"),
    ]:
        with pytest.raises(BlackboxMIAError, match=message):
            local.generate(["Tom has 3 apples"], **kwargs)
    with pytest.raises(BlackboxMIAError, match="prompt #1 is empty"):
        local.generate(["Tom", []], max_new_tokens=2)


def test_a_missing_feature_is_named():
    class ScoreOnly(Backend):
        kind = "score-only"
        features = frozenset({LOGPROBS})

        def describe(self):
            return {"backend": self.kind}

    with pytest.raises(BlackboxMIAError, match="score-only backend does not offer 'generate'"):
        ScoreOnly().generate(["Tom"], max_new_tokens=2)


def test_api_greedy_equals_local_and_rerun_is_free(local, peaked_model_dir, prompts, tmp_path):
    want = local.generate(prompts, max_new_tokens=NEW)
    with serve_in_background(ServerConfig(str(peaked_model_dir)), backend=local) as url:
        config = ApiConfig(base_url=url, model=str(peaked_model_dir), max_retries=0)
        api = ApiBackend(config, tokenizer=str(peaked_model_dir), cache_dir=tmp_path)
        got = api.generate(prompts, max_new_tokens=NEW, n=2)
        assert api.usage.requests > 0
        sampled = api.generate(prompts[:2], max_new_tokens=NEW, temperature=1.0, n=3, seed=11)
        api.close()
        rerun = ApiBackend(config, tokenizer=str(peaked_model_dir), cache_dir=tmp_path)
        again = rerun.generate(prompts, max_new_tokens=NEW, n=2)
        resampled = rerun.generate(prompts[:2], max_new_tokens=NEW, temperature=1.0, n=3, seed=11)
        assert rerun.usage.requests == 0  # probe, greedy and seeded samples: all from the cache
        rerun.close()
    assert [(g.prompt_index, g.sample) for g in got] == [(i, j) for i in range(len(prompts)) for j in range(2)]
    for i, w in enumerate(want):
        for g in got[2 * i : 2 * i + 2]:
            assert g.text == w.text and g.token_ids.tolist() == w.token_ids.tolist()
            assert g.finish_reason == w.finish_reason and g.tokens == w.tokens
            np.testing.assert_allclose(g.logprobs, w.logprobs, atol=1e-4)  # raw mode: the white-box values
            assert g.provenance == Provenance("api", str(peaked_model_dir), "greedy", True)
    assert [g.to_json() for g in again] == [g.to_json() for g in got]
    assert [g.to_json() for g in resampled] == [g.to_json() for g in sampled]
    assert [(g.prompt_index, g.sample) for g in sampled] == [(i, j) for i in range(2) for j in range(3)]
