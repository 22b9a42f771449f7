"""The probe's one-line verdict: which reading an endpoint allows and what it costs per token."""

from __future__ import annotations

from dataclasses import replace

from blackbox_mia.backends.api.capabilities import Capabilities

# endpoint, top_n, token_id_prompts, echo, bias_forces, reported, forced_readout, postbias_solve, bisect
TOPN_ONLY = Capabilities("completions", 5, True, False, False, "unknown", False, False, False)


def test_each_reading_in_one_line():
    assert TOPN_ONLY.reading().startswith("reading: top-n without logit_bias: 1 request per token")
    assert replace(TOPN_ONLY, top_n=0).reading().startswith("reading: text only")
    forced = replace(TOPN_ONLY, bias_forces=True, reported="pre-bias", forced_readout=True, bisect=True)
    assert forced.reading() == "reading: top-n with logit_bias (forced): 1 request per token"
    post = replace(TOPN_ONLY, bias_forces=True, reported="post-bias", postbias_solve=True, run_reading=True)
    assert post.reading() == ("reading: top-n with logit_bias (postbias): 1 request per token (more where the biased answer "
                              "does not list it), fewer where "
                              "the model's greedy run follows the text")
    assert replace(forced, prompt_logprobs=True).reading().startswith("reading: prompt log-probs: 1 request per text")


def test_the_verdict_names_rounding_and_jitter():
    line = replace(TOPN_ONLY, report_bits=8, jitter=0.25).reading()
    assert line.endswith("; values rounded to 8 significant bits (±|lp|·2^-8), nondeterministic (±0.25 nats): "
                         "bounds widened")
    assert "\n" not in line
