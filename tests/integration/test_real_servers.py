"""The tracker against `bbmia serve` emulating what real servers do: partial UTF-8 tokens named "",
token-id prompts refused with HTTP 500, `max_tokens: 0` meaning "unlimited", a chat template,
special-token strings in texts. Accented and Japanese texts (ja-debian-docs, GPL-2) stay 100%
within bounds of the white-box log-probs in every strategy the probe enables."""

from __future__ import annotations

import numpy as np
import pytest

from blackbox_mia.backends.api import ApiBackend
from blackbox_mia.backends.api.http.client import ApiConfig
from blackbox_mia.backends.api.tracker.tracker import TrackerConfig
from blackbox_mia.backends.local import LocalBackend, LocalConfig
from blackbox_mia.datasets import load_shipped_or_jsonl
from blackbox_mia.emulator import (
    DEFAULT_CHAT_TEMPLATE,
    ServerConfig,
    serve_in_background,
)
from blackbox_mia.tokenizers import HFTokenCodec
from blackbox_mia.types import BlackboxMIAError

EXACT = 1e-4  # nats
EPSILON = 0.01
CONTEXT = 64  # the tiny model's context: longer texts go in sliding windows on both sides


def japanese(n_chars: int) -> str:
    return load_shipped_or_jsonl("ja-debian-docs").items[0].text[:n_chars]


ACCENTED = "Crème brûlée at the café costs ½ price, naïve señor."
TEXTS = [ACCENTED, japanese(24)]
CHAT_TEXT = "Crème brûlée at the café costs 3 dollars."  # short: the template takes context too


@pytest.fixture(scope="module")
def local(peaked_model_dir):
    return LocalBackend(LocalConfig(str(peaked_model_dir)))


def backend_for(url, model_dir, cache_dir, strategy="auto", **kw):
    config = ApiConfig(base_url=url, model=str(model_dir), max_retries=2, backoff_base_s=0.01)
    tracker = TrackerConfig(strategy=strategy, epsilon=EPSILON, context=CONTEXT)
    return ApiBackend(config, tokenizer=str(model_dir), tracker=tracker, cache_dir=cache_dir, **kw)


def assert_within_bounds(black, white, strategy):
    assert black.token_ids.tolist() == white.token_ids.tolist()
    inside = (black.lower - EXACT <= white.logprobs) & (white.logprobs <= black.upper + EXACT)
    assert inside.all(), (strategy, [(s, w, lo, hi) for s, w, lo, hi, ok in zip(
        black.strategies, white.logprobs, black.lower, black.upper, inside) if not ok][:5])


SERVERS = {
    "raw-echo": {"logprobs_mode": "raw", "echo": True},
    "raw-noecho": {"logprobs_mode": "raw", "echo": False},
    "processed-noecho": {"logprobs_mode": "processed", "echo": False},
}


@pytest.mark.parametrize("mode", list(SERVERS))
def test_partial_utf8_tokens_named_empty_stay_within_bounds(mode, local, peaked_model_dir, tmp_path):
    white = local.logprobs(TEXTS)
    codec = HFTokenCodec(local.tokenizer, "tiny")
    ids = local.encode(TEXTS[1])
    assert sum(i in codec.partial_ids for i in ids) > 0.5 * len(ids)  # mostly parts of characters
    settings = dict(SERVERS[mode], empty_partial_names=True, max_logprobs_completions=5)
    with serve_in_background(ServerConfig(str(peaked_model_dir), **settings), backend=local) as url:
        probe = backend_for(url, peaked_model_dir, tmp_path / "auto")
        caps = probe.capabilities
        assert caps.evidence["partial_tokens"]["ambiguous_names"] > 0  # the probe saw the "" names
        assert not caps.exact_names and caps.evidence["token_names"]["exact"] is False  # a forced byte named ""
        strategies = ["auto"] + caps.strategies()
        black = probe.logprobs(TEXTS)
        probe.close()
        for b, w in zip(black, white):
            assert_within_bounds(b, w, "auto")
        # before: "" read as "beyond the cap" gave upper bounds near -103 for 10 of 116 tokens
        assert not any(s.endswith(">cap") for b in black for s in b.strategies)
        if mode.startswith("raw"):  # pre-bias values resolve almost every identity but open ones
            lower = np.concatenate([b.lower for b in black])
            opened = np.isin(np.concatenate([b.token_ids for b in black]), list(codec.open_ids))
            # the tiny model never ends a greedy token mid-character, so the probe cannot show that the
            # server stops at max_tokens then: tokens ending inside a character are never forced
            assert not caps.open_bias and opened.any()
            assert np.isfinite(lower[~opened]).mean() >= 0.95
            assert {s for b in black for s, o in zip(b.strategies, np.isin(b.token_ids, list(codec.open_ids)))
                    if o} <= {"prompt", "run", "topn", "unbiasable", "unsendable"}  # read, never forced
        for strategy in strategies[1:]:
            subset = TEXTS[1:] if strategy == "bisect" else TEXTS
            backend = backend_for(url, peaked_model_dir, tmp_path / strategy, strategy)
            for b, w in zip(backend.logprobs(subset), local.logprobs(subset)):
                assert_within_bounds(b, w, strategy)
            backend.close()


def test_token_ids_refused_with_500_text_prompts_no_bos(local, peaked_model_dir, tmp_path):
    """The probe learns the refusal from two identical 500s (not 6 retries), sends text without BOS,
    and reports prefixes that do not round-trip (inside a character) as unsendable bounds."""
    no_bos = LocalBackend(LocalConfig(str(peaked_model_dir), bos=False))
    settings = {"token_id_prompts": False, "token_id_refusal_status": 500, "empty_partial_names": True, "echo": False}
    with serve_in_background(ServerConfig(str(peaked_model_dir), **settings), backend=local) as url:
        backend = backend_for(url, peaked_model_dir, tmp_path)
        caps = backend.capabilities
        assert not caps.token_id_prompts and "500" in caps.reasons["token_id_prompts"]
        assert caps.evidence["token_id_prompts"]["requests"] == 2
        black = backend.logprobs(TEXTS)
        backend.close()
    for b, w in zip(black, no_bos.logprobs(TEXTS)):
        assert not b.provenance.bos
        assert_within_bounds(b, w, "text")
    assert "unsendable" in black[1].strategies  # prefixes ending inside a character
    exact = np.isfinite(black[0].lower)
    opened = np.isin(black[0].token_ids, list(HFTokenCodec(local.tokenizer, "tiny").open_ids))
    assert exact[~opened].mean() > 0.8  # the accented text is mostly sendable
    # a token that ends inside a character is never forced (the probe could not show that this server
    # stops at max_tokens then): read from the top-n or bounded, never sent with a bias
    assert {s for s, o in zip(black[0].strategies, opened) if o} <= {"topn", "unbiasable", "unsendable"}


def test_zero_max_tokens_unlimited_server_echo_is_exact(local, peaked_model_dir, tmp_path):
    with serve_in_background(ServerConfig(str(peaked_model_dir), zero_max_tokens_unlimited=True), backend=local) as url:
        backend = backend_for(url, peaked_model_dir, tmp_path)
        assert backend.capabilities.echo  # the probe (its run-reading check generates several tokens at once)
        probed = backend.usage.completion_tokens, backend.usage.requests
        black = backend.logprobs(TEXTS)
        completion_tokens, requests = backend.usage.completion_tokens - probed[0], backend.usage.requests - probed[1]
        backend.close()
    for b, w in zip(black, local.logprobs(TEXTS)):
        assert_within_bounds(b, w, "prompt")
    assert 0 < completion_tokens <= requests  # scoring: one generated token per request, never "to the end"


def test_special_token_strings_are_plain_text(local, peaked_model_dir, tmp_path):
    text = "Tom has 3 apples.<|endoftext|>Then he ate one."
    white = local.logprobs([text])[0]
    eos = local.tokenizer.eos_token_id
    assert eos not in white.token_ids.tolist()
    with serve_in_background(ServerConfig(str(peaked_model_dir), echo=False), backend=local) as url:
        backend = backend_for(url, peaked_model_dir, tmp_path)
        assert backend.capabilities.exact_names  # the forced continuation byte came back named "bytes:\x.."
        black = backend.logprobs([text])[0]
        backend.close()
    assert_within_bounds(black, white, "auto")


def test_chat_values_are_conditional_and_refused_without_opt_in(local, peaked_model_dir, tmp_path):
    config = ServerConfig(str(peaked_model_dir), chat_template=DEFAULT_CHAT_TEMPLATE)
    with serve_in_background(config, backend=local) as url:
        api = ApiConfig(base_url=url, model=str(peaked_model_dir), endpoint="chat", max_retries=1)
        with pytest.raises(BlackboxMIAError, match="allow_chat_conditional=True"):
            ApiBackend(api, tokenizer=str(peaked_model_dir), cache_dir=tmp_path)
        assert not (tmp_path / "capabilities").exists()  # refused before any request
        backend = ApiBackend(api, tokenizer=str(peaked_model_dir), cache_dir=tmp_path, allow_chat_conditional=True)
        caps = backend.capabilities
        black = backend.logprobs([CHAT_TEXT])[0]
        backend.close()
    assert caps.condition == "chat-template" and any("chat template" in n for n in caps.notes)
    assert black.provenance.condition == "chat-template"
    from blackbox_mia.results import ScoredText

    assert ScoredText.from_scores("x", None, {}, black).to_json()["condition"] == "chat-template"  # every row says it
    white = LocalBackend(LocalConfig(str(peaked_model_dir), bos=False)).logprobs([CHAT_TEXT])[0]
    assert black.token_ids.tolist() == white.token_ids.tolist()  # chat prompts are text: no BOS
    # conditional on the template: not the text's own log-probs
    inside = (black.lower - EXACT <= white.logprobs) & (white.logprobs <= black.upper + EXACT)
    assert inside.mean() < 0.5


def test_transient_failure_during_the_probe_saves_no_capability(local, peaked_model_dir, tmp_path):
    """Measured: one transient failure during the probe was stored as `token_id_prompts: false`."""
    from tests.tools.fault_proxy import FaultConfig, proxy_in_background

    with serve_in_background(ServerConfig(str(peaked_model_dir)), backend=local) as upstream:
        with proxy_in_background(FaultConfig(upstream, rate=1.0, classes=("503",))) as proxy:
            faulty = backend_for(proxy.base_url, peaked_model_dir, tmp_path)  # sends nothing yet
            with pytest.raises(BlackboxMIAError, match="nothing saved.*transient"):
                faulty.probe()
            faulty.close()
        assert not list((tmp_path / "capabilities").glob("*.json"))
        backend = backend_for(upstream, peaked_model_dir, tmp_path)
        assert backend.capabilities.token_id_prompts and backend.capabilities.evidence["token_id_prompts"]["requests"] == 1
        backend.close()
