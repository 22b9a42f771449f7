"""Capability probe: what an (endpoint, model) pair can tell us, found once and cached.

Verify, don't trust: the probe walks the model's own greedy continuation of a short text, so
the log-prob of every target it checks is known exactly from the top-n list, and then runs the
tracker's real strategies (the same code, ε and bias cap that will run on the user's texts) on
those positions. A strategy is enabled only when it reproduced the known values; the record keeps
the requests and the measured disagreement behind every flag. The probe text includes accented
Latin and CJK, so the way the server names partial UTF-8 tokens is measured too.

A request that fails for a transient reason (after the client's retries) aborts the probe and
nothing is saved; only a deterministic refusal or a consistently invalid answer counts as
evidence that a feature is missing.

This module runs the probe and keeps its record; the checks themselves are :mod:`.probe_checks`.
"""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
from pathlib import Path

from .capabilities import (
    NOT_PROBED,
    Capabilities,
    capabilities_path,
    load_capabilities,
    save_capabilities,
)
from .http.errors import ApiError
from .precision import rounding_error
from .endpoint import ECHO, PROMPT_LOGPROBS, Endpoint, NextToken, surely
from .probe_checks import (
    ProbeRun,
    attempt,
    check_chains,
    check_echo_bias,
    check_grammar,
    check_open_stop,
    check_partial_tokens,
    check_prompt,
    check_runs,
    check_tokenizer,
    greedy_path,
    known_targets,
    trial,
)
from .probe_noise import NUDGE_SHIFT_NATS, measure_precision, measure_shape_variation, measure_tolerance
from .tracker.config import TrackerConfig

PROBE_TEXT = "The capital of France is Paris: café, crème brûlée, ½ off. 東京は日本の首都です。"
AGREE_NATS = 1e-3  # exact strategies must reproduce known log-probs to this, or the measured tolerance (nats)
# requests of the token-id prompt check: a server that cannot take ids often fails them with the
# same HTTP 500 every time (llama.cpp); two identical answers name that refusal without the whole
# backoff schedule (a 500 elsewhere gets every retry)
TOKEN_ID_CHECK_ATTEMPTS = 2
TOP_N_TRIES = (100, 20, 5, 1)  # top-n asked after a refused one whose refusal names no smaller cap
# strategies that need no check beyond the prompt path: a probe for them may stop once it verified it
PROMPT_ONLY = ("auto", "prompt")
# what a probe that stopped at the prompt path leaves unchecked (each gets the reason NOT_PROBED)
UNCHECKED = (ECHO, "echo_bias", "run", "bias", "forced", "postbias", "bisect", "grammar")


async def load_or_probe(
    endpoint: Endpoint, cache_dir: Path, config: TrackerConfig = TrackerConfig(), refresh: bool = False,
    full: bool = False,
) -> Capabilities:
    """The cached probe result for this endpoint, probing (and saving it atomically) when missing.

    The record is kept per (base URL, model, endpoint kind, ε, bias cap): the probe validates
    the strategies with ``config``'s ε and bias cap, so other values are probed again.
    ``endpoint.token_id_prompts`` is set from the result either way.

    The probe stops once it has verified ``prompt_logprobs`` (a record with ``complete=False``)
    unless ``full`` or ``config.strategy`` needs more than the prompt path; a stopped record is
    completed (its answers come from the response cache, so only the rest is sent) when asked
    with ``full=True`` or such a strategy.

    Raises:
        BlackboxMIAError: a corrupt record, or the probe failed (nothing is saved then).
    """
    path = record_path(endpoint, cache_dir, config)
    full = full or config.strategy not in PROMPT_ONLY
    caps = None if refresh else load_capabilities(path)
    if caps is None or (full and not caps.complete):
        caps = await probe(endpoint, config, full=full)
        save_capabilities(path, caps)
    endpoint.token_id_prompts = caps.token_id_prompts
    endpoint.exact_names, endpoint.open_bias, endpoint.grammar = caps.exact_names, caps.open_bias, caps.grammar
    return caps


def record_path(endpoint: Endpoint, cache_dir: Path, config: TrackerConfig) -> Path:
    """Where :func:`load_or_probe` keeps the record of ``endpoint`` probed with ``config``
    (:func:`~.capabilities.capabilities_path`)."""
    client = endpoint.client.config
    return capabilities_path(cache_dir, client.base_url, client.model, endpoint.dialect.key, config.epsilon,
                             config.max_bias)


async def probe(endpoint: Endpoint, config: TrackerConfig = TrackerConfig(), full: bool = True) -> Capabilities:
    """Probe ``endpoint`` with :data:`PROBE_TEXT` (a few dozen requests, all cached), cut to fit
    ``config.context`` tokens when the model's context is that short.

    Without ``full``, the probe stops as soon as ``prompt_logprobs`` reproduced the greedy
    path's known values (vLLM: about 10 requests): the record then has ``complete=False`` and
    only the prompt strategy (:func:`stopped_at_prompt`).

    ``endpoint.token_id_prompts`` is updated to what the server accepts.

    The largest top-n the endpoint honours is found first: one request asks for the tokenizer's
    whole vocabulary; a server that caps the list silently answers with as many entries as it
    allows, one that refuses is asked again for the cap its refusal names (else 100, 20, 5, 1:
    :func:`next_top_n`). The record's ``top_n`` is the number of entries returned (at most the
    vocabulary size); every later probe request, like the tracker's, asks for at most
    ``config.max_top_n`` of them.

    Returns:
        The record; ``top_n = 0`` (no strategy) when no valid log-probs come back, with the
        refusals in ``reasons["topn"]``.

    Raises:
        BlackboxMIAError: a transient failure or a 404 (wrong base URL, unknown model: nothing
            is saved), the model is not among those the server lists
            (:meth:`~.client.ApiClient.check_model`), or a request outside the checks above
            failed for good.
    """
    p = ProbeRun(endpoint, config)
    codec, dialect = endpoint.codec, endpoint.dialect
    p.notes.extend(dialect.notes)
    p.reasons.update(dialect.reasons)
    ids = codec.encode(PROBE_TEXT)
    bos = [codec.bos_id] if codec.bos_id is not None else []
    token_ids = await check_token_id_prompts(p, bos + ids[:3])
    seq = (bos if token_ids else []) + ids
    if config.context:
        seq = seq[: config.context - 1]  # room for the generated token

    first, honoured = await find_top_n(p, seq[:3])
    if first is None:
        return p.caps(token_id_prompts=token_ids)
    await check_tokenizer(p, seq)
    top_n = min(honoured, config.max_top_n)  # what the checks below (and the tracker) ask per request

    # the top-n answer is the path's first step when it lists no more than later requests ask for
    path = await greedy_path(p, seq[:3], top_n, first if len(first.top) <= top_n else None)
    checks = known_targets(path)
    bits = measure_precision(p, path)
    # two reports of one value may differ by each one's rounding (and, below, the tolerance)
    rounding = 2 * float(np.max(rounding_error(np.asarray([c[2] for c in checks] + [0.0]), bits)))
    if (not full and dialect.name == "completions"
            and await check_prompt(p, path, top_n, AGREE_NATS + rounding, PROMPT_LOGPROBS)):
        return stopped_at_prompt(p, honoured, token_ids, bits)
    tolerance, jitter = await measure_tolerance(p, path, top_n, bits)
    shape = await measure_shape_variation(p, path, top_n, bits)
    tolerance = max(tolerance, shape)
    agree = max(AGREE_NATS, tolerance) + rounding
    echo = dialect.echo and await check_prompt(p, path, top_n, agree, ECHO)
    vllm = dialect.name == "completions" and await check_prompt(p, path, top_n, agree, PROMPT_LOGPROBS)
    if not (echo or vllm):
        p.reasons["prompt"] = "; ".join(p.reasons[f] for f in (ECHO, PROMPT_LOGPROBS) if f in p.reasons)
    runs = await check_runs(p, path, top_n, agree)

    non_argmax = [c for c in checks if not surely(c[3].sampled, c[1]) and endpoint.may_bias(c[1])]
    forces, reported = await check_bias(p, non_argmax, top_n, agree)
    base = {"top_n": top_n, "token_id_prompts": token_ids, "echo": echo, "bias_forces": forces,
            "reported": reported, "tolerance": tolerance, "report_bits": bits, "jitter": jitter,
            "shape_variation": shape}
    enabled = await trial_strategies(p, non_argmax, base, agree)
    echo_bias_free = echo and enabled["forced"] and await check_echo_bias(p, path, top_n, agree, non_argmax)
    chains = enabled["bisect"] and await check_chains(p, path, base, agree)
    reproducible = (p.evidence.get("repeat_noise", {}).get("max_abs_diff", 0.0) <= NUDGE_SHIFT_NATS
                    and p.evidence.get("bisect", {}).get("unreproduced_flips", 0) == 0)
    caps = p.caps(**base, forced_readout=enabled["forced"], postbias_solve=enabled["postbias"], bisect=enabled["bisect"],
                  flips_reproducible=reproducible, run_reading=runs, prompt_logprobs=vllm, chained_flips=chains,
                  echo_bias_free=echo_bias_free)
    open_bias = await check_open_stop(p, seq, top_n)
    if enabled["forced"]:
        grammar = await check_grammar(p, checks, agree)
    else:
        grammar, p.reasons["grammar"] = False, "spelled read-out reads forced tokens' values: forced read-out is off"
    endpoint.grammar = grammar
    caps = replace(caps, exact_names=endpoint.exact_names, open_bias=open_bias, grammar=grammar)
    await check_partial_tokens(p, seq, caps)
    return replace(caps, top_n=honoured)


async def check_token_id_prompts(p: ProbeRun, prompt: list[int]) -> bool:
    """Whether the server takes prompts as token ids (``prompt``: a few token ids, BOS first where
    the model has one); sets ``p.endpoint.token_id_prompts`` and records the evidence, or the
    refusal and the note that prompts then go as text. False without asking where the dialect
    cannot send ids."""
    endpoint = p.endpoint
    token_ids = endpoint.token_id_prompts  # False where the dialect cannot send ids
    if token_ids:
        before = p.spent()
        _, error = await attempt(endpoint.next_token(prompt, 1, attempts=TOKEN_ID_CHECK_ATTEMPTS))
        token_ids = error is None or error.fault.answered  # a 200 accepted the prompt
        p.evidence["token_id_prompts"] = {"requests": p.spent() - before, "refusal": None if token_ids else str(error)}
        if not token_ids:
            p.reasons["token_id_prompts"] = f"token-id prompts refused: {error}"
    endpoint.token_id_prompts = token_ids
    if not token_ids:
        p.notes.append(
            "prompts go as text: a prefix that ends inside a character or re-tokenizes differently cannot "
            "be sent as its tokens; such positions get the bound [-inf, 0] (strategy 'unsendable')"
        )
    return token_ids


async def find_top_n(p: ProbeRun, prompt: list[int]) -> tuple[NextToken | None, int]:
    """The first top-n answer after ``prompt`` and the number of entries the server honours
    (at most the vocabulary size), asking for the whole vocabulary first, then for the cap a
    refusal names (else 100, 20, 5, 1: :func:`next_top_n`); ``(None, 0)`` when no valid top-n
    log-probs come back (the refusals are in ``p.reasons["topn"]``)."""
    first, refusals, asked = None, [], []
    before = p.spent()
    n = p.endpoint.codec.vocab_size
    while n is not None:
        asked.append(n)
        first, error = await attempt(p.endpoint.next_token(prompt, n))
        if first is not None:
            break
        refusals.append(f"top_n={n}: {error}")
        n = next_top_n(error, asked)
    if first is None:
        p.evidence["topn"] = {"requests": p.spent() - before, "asked": asked, "refusals": refusals}
        p.reasons["topn"] = (
            "no valid top-n log-probs are returned (" + "; ".join(refusals) + "): bisection can measure "
            "lp_top − lp_i but never lp_top itself, so absolute log-probs cannot be recovered"
        )
        return None, 0
    honoured = min(n, len(first.top), p.endpoint.codec.vocab_size)
    p.evidence["topn"] = {"requests": p.spent() - before, "asked": asked, "top_n": honoured,
                          **({"refusals": refusals} if refusals else {})}
    return first, honoured


async def check_bias(p: ProbeRun, non_argmax: list, top_n: int, agree: float) -> tuple[bool, str]:
    """What a ``+max_bias`` logit_bias on the first listed non-argmax target of the probe path
    (``non_argmax``: :func:`~.probe_checks.known_targets` entries) does: whether it forces the
    token at temperature 0, and whether the reported log-prob is the token's own (``"pre-bias"``,
    within ``agree`` nats), the biased distribution's (``"post-bias"``) or ``"unknown"``."""
    if not non_argmax:
        p.reasons["bias"] = "no listed non-argmax token on the probe path: logit_bias semantics untested"
        return False, "unknown"
    max_bias = p.config.max_bias
    prefix, target, lp, _ = non_argmax[0]
    before = p.spent()
    biased = await p.endpoint.next_token(prefix, top_n, {target: max_bias})
    forces = surely(biased.sampled, target)
    value = biased.find(target)
    if value is None and forces:
        value = biased.sampled_logprob
    reported = "unknown"
    if value is not None and abs(value - lp) < agree:
        reported = "pre-bias"
    elif value is not None and value > -0.01:
        reported = "post-bias"
    p.evidence["bias"] = {"requests": p.spent() - before, "target_logprob": lp, "reported_biased": value,
                          "forced": forces, "max_bias": max_bias}
    if not forces:
        p.reasons["bias"] = f"a +{max_bias:g} logit_bias did not force the token at temperature 0"
    return forces, reported


async def trial_strategies(p: ProbeRun, non_argmax: list, base: dict, agree: float) -> dict[str, bool]:
    """Each logit_bias strategy (forced read-out, the post-bias solve, bisection) whose
    prerequisite (``base``'s ``bias_forces`` and ``reported``) holds, tried on the known targets
    (:func:`~.probe_checks.trial`); the others off with the missing prerequisite as the reason."""
    forces, reported = base["bias_forces"], base["reported"]
    enabled = {}
    for strategy, prerequisite in (
        ("forced", None if forces and reported == "pre-bias" else
         p.reasons.get("bias") or f"reported log-probs are {reported}: the forced token's value is not its own"),
        ("postbias", None if reported == "post-bias" else
         f"reported log-probs are {reported}: the solve needs post-bias values"),
        ("bisect", None if forces else p.reasons.get("bias") or "logit_bias does not force tokens"),
    ):
        if prerequisite is not None:
            p.reasons[strategy] = prerequisite
            enabled[strategy] = False
        else:
            enabled[strategy] = await trial(p, strategy, non_argmax, base, agree)
    return enabled


def stopped_at_prompt(p: ProbeRun, top_n: int, token_ids: bool, bits: int | None) -> Capabilities:
    """The record of a probe that stopped once ``prompt_logprobs`` was verified: the prompt
    strategy (and the top-n), every other check off with the reason :data:`NOT_PROBED`,
    ``complete=False``; the tolerance is the minimum (nothing else was repeated), and the
    rounding ``bits`` read off the answers (:func:`~.probe_noise.measure_precision`) kept."""
    for name in UNCHECKED:
        p.reasons.setdefault(name, NOT_PROBED)
    p.notes.append("the probe stopped once prompt_logprobs was verified (one request per text or window); "
                   "the other strategies are probed when a command needs them")
    return p.caps(top_n=top_n, token_id_prompts=token_ids, prompt_logprobs=True,
                  exact_names=p.endpoint.exact_names, complete=False, report_bits=bits)


def next_top_n(refusal: ApiError, asked: list[int]) -> int | None:
    """The top-n to ask after ``refusal`` refused ``asked[-1]``: the largest number below it that
    the server's message names (its cap, as in "must be less than or equal to 20"), else the next
    smaller entry of :data:`TOP_N_TRIES`; never one already asked; ``None`` when none is left."""
    last = asked[-1]
    named = [int(m) for m in re.findall(r"\d+", refusal.detail or "") if 1 <= int(m) < last]
    if named and max(named) not in asked:
        return max(named)
    return next((n for n in TOP_N_TRIES if n < last and n not in asked), None)
