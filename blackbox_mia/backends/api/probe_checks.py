"""The capability probe's checks (:mod:`.probe` runs them): each asks the endpoint questions
whose answers are known and says whether a feature reproduced them.

The known values come from the model's own greedy continuation of the probe text
(:func:`greedy_path`): every target there is read exactly from the top-n list. A check runs the
tracker's real strategies on those positions; :class:`ProbeRun` keeps the notes, the reasons a
feature is off and the evidence (requests, measured disagreement) behind every flag.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable
from dataclasses import replace

from ...option_names import named
from ...types import BlackboxMIAError
from .tracker.bisection import TextBisection
from .capabilities import Capabilities
from .tracker.choice import strategy_set
from .http.errors import ApiError, NotAnApiError
from .endpoint import ECHO, Endpoint, NextToken, surely
from .tracker.spelling import Speller
from .tracker.strategies import Position
from .tracker.config import TrackerConfig

GREEDY_STEPS = 6  # known positions on the model's greedy path
PARTIAL_POSITIONS = 4  # probe positions whose target is part of a UTF-8 character
CHAIN_STEPS = 3  # consecutive known positions the chained-request check bisects
OPEN_STOP_REQUESTS = 12  # most unbiased probe-text prefixes asked for a greedy token that ends mid-character


async def attempt(request: Awaitable) -> tuple[object, ApiError | None]:
    """``(answer, None)``, or ``(None, error)`` for a refusal that is evidence (final or invalid).

    Raises:
        BlackboxMIAError: a transient failure that outlasted the retries, a 401/403 (the key
            was refused), a 404 (a wrong base URL or an unknown model) or a page instead of JSON
            (:class:`~.http.errors.NotAnApiError`: not the API): no evidence about a feature;
            the probe stops, nothing saved.
    """
    try:
        return await request, None
    except ApiError as exc:
        if exc.fault.outage:
            raise BlackboxMIAError(f"capability probe stopped, nothing saved (rerun later): {exc}") from None
        if exc.status_code in (401, 403, 404) or isinstance(exc, NotAnApiError):  # a refused key, a wrong URL:
            raise  # nothing learnt about a feature
        return None, exc


class ProbeRun:
    """One probe run: the endpoint, the tracker settings, and what has been measured so far."""

    def __init__(self, endpoint: Endpoint, config: TrackerConfig):
        self.endpoint = endpoint
        self.config = config
        self.notes: list[str] = []
        self.reasons: dict[str, str] = {}
        self.evidence: dict[str, dict] = {}

    def spent(self) -> int:
        """Answers obtained so far (fresh or cached): the request count behind a piece of evidence."""
        usage = self.endpoint.client.usage
        return usage.requests + usage.cache_hits

    def caps(self, **values) -> Capabilities:
        condition = self.endpoint.dialect.condition
        base = Capabilities(self.endpoint.kind, 0, False, False, False, "unknown", False, False, False)
        return replace(base, condition=condition, notes=self.notes, reasons=self.reasons,
                       evidence=self.evidence, **values)


async def check_tokenizer(p: ProbeRun, seq: list[int]) -> None:
    """Refuse a tokenizer that is not the served model's, before the checks build on it: where
    prompts go as text (completions), the server's count of the probe text's tokens
    (:meth:`~.endpoint.Endpoint.counted_tokens`) must be this tokenizer's ``len(seq)``, or one
    more (a BOS the server adds to text). Nothing is asked where prompts go as token ids (the
    server reads this tokenizer's ids), on chat (the template adds tokens), or for a text that
    does not round-trip; evidence under ``tokenizer``.

    Raises:
        BlackboxMIAError: the counts disagree, naming both and the way out.
    """
    endpoint = p.endpoint
    if endpoint.token_id_prompts or endpoint.dialect.name != "completions" or not endpoint.sendable(seq):
        return
    before = p.spent()
    counted = await endpoint.counted_tokens(seq)
    p.evidence["tokenizer"] = {"requests": p.spent() - before, "tokens": len(seq), "server_tokens": counted}
    if counted is not None and counted - len(seq) not in (0, 1):
        raise BlackboxMIAError(
            f"the tokenizer {endpoint.codec.name!r} is not the served model's: it makes {len(seq)} tokens of the "
            f"probe text, the server counted {counted} (usage.prompt_tokens); pass the model's own tokenizer "
            f"({named('tokenizer')}: a Hugging Face directory, or the GGUF file the server loaded)")


async def greedy_path(
    p: ProbeRun, start: list[int], top_n: int, first: NextToken | None = None
) -> list[tuple[list[int], NextToken]]:
    """(prefix, unbiased answer) along the model's own greedy continuation of ``start``;
    ``first``: an unbiased answer after ``start`` already in hand (the top-n check's), used for
    the first step instead of a request."""
    path, prefix = [], list(start)
    limit = p.config.context - 1 if p.config.context else None
    for step in range(GREEDY_STEPS):
        if (limit and len(prefix) >= limit) or not p.endpoint.sendable(prefix):
            break
        if step == 0 and first is not None:
            answer, error = first, None
        else:
            answer, error = await attempt(p.endpoint.next_token(prefix, top_n))
        if error is not None:  # e.g. a server that answers a generated end-of-text without log-probs
            p.notes.append(f"the probe's greedy path stopped early: {error}")
            break
        path.append((list(prefix), answer))
        if answer.sampled is None or len(answer.sampled) != 1:
            break
        prefix.append(next(iter(answer.sampled)))
    return path


def known_targets(path) -> list[tuple[list[int], int, float, NextToken]]:
    """(prefix, target, exact log-prob, unbiased answer) for every uniquely named listed entry."""
    out = []
    for prefix, answer in path:
        for entry in answer.top:
            if entry.ids is not None and len(entry.ids) == 1:
                out.append((prefix, next(iter(entry.ids)), entry.logprob, answer))
    # the lowest listed entries first: they are the hardest (furthest from the argmax)
    return sorted(out, key=lambda c: c[2])


async def check_prompt(p: ProbeRun, path, top_n: int, agree: float, form: str) -> bool:
    """Whether the prompt log-probs of one request in ``form`` (:data:`~.endpoint.ECHO` or
    :data:`~.endpoint.PROMPT_LOGPROBS`) equal the known greedy-path values; evidence and the
    reason (when not) go under the form's name."""
    if not path:
        p.reasons[form] = f"no probe path to check {form} against"
        return False
    prefix, answer = path[-1]
    full = prefix + [next_known(answer)] if next_known(answer) is not None else prefix
    if not p.endpoint.sendable(full):
        p.reasons[form] = "the probe prompt does not round-trip as text"
        return False
    before = p.spent()
    result, error = await attempt(p.endpoint.prompt_logprobs(full, top_n, form))
    if error is not None:
        p.reasons[form] = f"{form} unavailable: {error}"
        return False
    values, _ = result  # values[k] is the target full[k]
    worst, compared = 0.0, 0
    for prefix, answer in path:
        if len(prefix) < len(full):
            known = answer.find(full[len(prefix)])
            if known is not None:
                worst, compared = max(worst, abs(values[len(prefix)] - known)), compared + 1
    p.evidence[form] = {"requests": p.spent() - before, "positions": compared, "max_abs_diff": worst}
    if compared == 0 or worst > agree:
        p.reasons[form] = f"{form} log-probs disagree with per-prefix top-n values by {worst:.3g} nats ({compared} positions)"
        return False
    return True


async def check_echo_bias(p: ProbeRun, path, top_n: int, agree: float, non_argmax: list) -> bool:
    """Whether echo's prompt log-probs stay the same (within ``agree`` nats) when the request
    biases a token (``non_argmax``'s first target, +``max_bias``) at the generated position:
    what lets a full echo window force its last target in the same request (the tracker's
    :meth:`~.tracker.tracker.Tracker.forces_in_window`). The unbiased request is
    :func:`check_prompt`'s (cached); evidence and the reason (when not) under ``echo_bias``."""
    if not path or not non_argmax:
        p.reasons["echo_bias"] = "no probe path or no biasable target to check echo under a bias"
        return False
    prefix, answer = path[-1]
    full = prefix + [next_known(answer)] if next_known(answer) is not None else prefix
    before = p.spent()
    plain, error = await attempt(p.endpoint.prompt_logprobs(full, top_n, ECHO))
    if error is None:
        bias = {non_argmax[0][1]: p.config.max_bias}
        biased, error = await attempt(p.endpoint.prompt_logprobs(full, top_n, ECHO, bias))
    if error is not None:
        p.reasons["echo_bias"] = f"echo under a logit_bias unavailable: {error}"
        return False
    worst = max(abs(a - b) for a, b in zip(plain[0][1:], biased[0][1:]))
    p.evidence["echo_bias"] = {"requests": p.spent() - before, "max_abs_diff": worst}
    if worst > agree:
        p.reasons["echo_bias"] = f"echo log-probs move by {worst:.3g} nats under a logit_bias on the generated position"
        return False
    return True


def next_known(answer: NextToken) -> int | None:
    """A token whose log-prob after the answer's prefix is known from it: the sampled one where
    its name denotes one id, else the most likely listed entry that does (a greedy path that
    stops at an ambiguous name still gives a position to check); None when none does."""
    if answer.sampled is not None and len(answer.sampled) == 1:
        return next(iter(answer.sampled))
    return next((next(iter(e.ids)) for e in sorted(answer.top, key=lambda e: -e.logprob)
                 if e.ids is not None and len(e.ids) == 1), None)  # fmt: skip


async def check_runs(p: ProbeRun, path, top_n: int, agree: float) -> bool:
    """Whether one ``max_tokens = len(path)`` request from the greedy path's first prefix gives,
    at every generated position, the path's token and the per-prefix answer there (every listed
    value within ``agree`` nats): the semantics run reading relies on."""
    if len(path) < 2:
        p.reasons["run"] = "the probe's greedy path is too short to check run reading"
        return False
    before = p.spent()
    steps, error = await attempt(p.endpoint.next_tokens(path[0][0], len(path), top_n))
    if error is not None:
        p.reasons["run"] = f"a {len(path)}-token request failed: {error}"
        return False
    worst, compared, same_path = 0.0, 0, len(steps) == len(path)
    for step, (_, answer) in zip(steps, path):
        same_path &= step.sampled == answer.sampled
        for entry in answer.top:
            if entry.ids is not None and len(entry.ids) == 1:
                value = step.find(next(iter(entry.ids)))
                if value is None:
                    same_path = False
                else:
                    worst, compared = max(worst, abs(value - entry.logprob)), compared + 1
    p.evidence["run"] = {"requests": p.spent() - before, "positions": len(steps), "values": compared,
                         "max_abs_diff": worst, "same_path": same_path}
    if not same_path or compared == 0 or worst > agree:
        p.reasons["run"] = (f"a {len(path)}-token greedy continuation did not reproduce the per-prefix answers "
                            f"(same path: {same_path}; values differ by up to {worst:.3g} nats)")
        return False
    return True


async def trial(p: ProbeRun, strategy: str, checks, base: dict, agree: float) -> bool:
    """Run the tracker's ``strategy`` object (:mod:`.strategies`, with the tracker's ε, bias cap
    and re-checks) on known positions; whether it reproduced every value (to ε + the agreement
    tolerance for ``bisect``)."""
    if not checks:
        p.reasons[strategy] = "no known non-argmax log-prob on the probe path to test it on"
        return False
    flags = {"forced_readout": strategy == "forced", "postbias_solve": strategy == "postbias", "bisect": strategy == "bisect"}
    trial_caps = Capabilities(p.endpoint.kind, base["top_n"], base["token_id_prompts"], False,
                              base["bias_forces"], base["reported"], **flags, tolerance=base["tolerance"],
                              report_bits=base["report_bits"], jitter=base["jitter"],
                              shape_variation=base["shape_variation"],
                              flips_reproducible=False)  # every bracket the trial bisects is re-checked
    run = strategy_set(p.endpoint, trial_caps, p.config)[strategy]
    eps = p.config.epsilon + agree if strategy == "bisect" else agree
    before, worst, positions = p.spent(), 0.0, checks[: 2 if strategy == "bisect" else 3]
    ok, widened = True, 0
    for prefix, target, lp, _ in positions:
        estimate = await run.measure(Position(prefix, target))  # the mechanism, though the target is listed
        widened += estimate.strategy == "bisect~"
        worst = max(worst, abs(estimate.value - lp))
        ok &= estimate.lower - eps <= lp <= estimate.upper + eps and abs(estimate.value - lp) <= eps
    p.evidence[strategy] = {"requests": p.spent() - before, "positions": len(positions), "max_abs_diff": worst,
                            **({"epsilon": p.config.epsilon, "unreproduced_flips": widened} if strategy == "bisect" else {})}
    if not ok:
        p.reasons[strategy] = f"{strategy} missed known log-probs by up to {worst:.3g} nats on the probe text"
    return ok


async def check_grammar(p: ProbeRun, checks, agree: float) -> bool:
    """Whether a GBNF grammar alone (no bias) forces a known non-argmax token of printable ASCII,
    which comes back with its known, unconstrained log-prob (so a spelled read-out may trust
    both: :mod:`.spelling`). Safe on any server: the token ends a character, so even a server
    that ignores the grammar stops at ``max_tokens``. Evidence and the reason (when not) go
    under ``grammar``."""
    printable = [c for c in checks if not surely(c[3].sampled, c[1])
                 and all(0x20 <= b < 0x7F for b in p.endpoint.codec.token_bytes(c[1]))]
    if not printable:
        p.reasons["grammar"] = "no known non-argmax ASCII token on the probe path to force by a grammar"
        return False
    prefix, target, lp, _ = printable[-1]  # the most likely one
    before = p.spent()
    result, error = await attempt(p.endpoint.spell(prefix, [target], 0.0))
    if error is not None:
        p.reasons["grammar"] = f"a request with a grammar failed: {error}"
        return False
    steps, text = result
    forced = bool(steps) and surely(steps[0].sampled, target)
    reported = steps[0].sampled_logprob if steps else None
    p.evidence["grammar"] = {"requests": p.spent() - before, "target_logprob": lp, "forced": forced,
                             "reported": reported, "text": text[:40]}
    if not forced or abs(reported - lp) > agree:
        p.reasons["grammar"] = ("a grammar did not force a known token with its own log-prob "
                                f"(forced: {forced}; reported {reported} vs {lp:.6g})")
        return False
    return True


async def check_chains(p: ProbeRun, path, base: dict, agree: float) -> bool:
    """Whether chained bisection requests (:mod:`.chains`) reproduce known values: along a path
    that takes, at each of :data:`CHAIN_STEPS` prefixes from the probe path's first, the most
    likely listed token that is not the argmax (its value known, a flip to find), the tracker's
    text bisection with chains (every value to ε, every bracket re-checked alone) must find every
    value to ε + ``agree`` nats, with at least one answer read deeper than a chain's first
    position. Evidence and the reason (when not) go under ``chained_flips``."""
    if not path:
        p.reasons["chained_flips"] = "no probe path to check chained requests on"
        return False
    endpoint, prefix, known = p.endpoint, list(path[0][0]), []
    before = p.spent()
    for _ in range(CHAIN_STEPS):
        if not endpoint.sendable(prefix):
            break
        answer = await endpoint.next_token(prefix, base["top_n"])
        taken = {position.target for position, _ in known}
        entries = [e for e in answer.top if e.ids is not None and len(e.ids) == 1 and not e.ids & taken
                   and endpoint.may_bias(next(iter(e.ids)))
                   and not surely(answer.sampled, next(iter(e.ids)))]
        if not entries:
            break
        target = next(iter(max(entries, key=lambda e: e.logprob).ids))
        known.append((Position(list(prefix), target, unbiased=answer), answer.find(target)))
        prefix.append(target)
    if len(known) < 2:
        p.reasons["chained_flips"] = "the probe found no two consecutive non-argmax targets to chain"
        return False
    caps = Capabilities(endpoint.kind, base["top_n"], base["token_id_prompts"], False, base["bias_forces"],
                        base["reported"], False, False, True, tolerance=base["tolerance"],
                        report_bits=base["report_bits"], jitter=base["jitter"],
                        shape_variation=base["shape_variation"],
                        flips_reproducible=False, chained_flips=True)
    config = replace(p.config, refine_for=())
    bisection = TextBisection(strategy_set(endpoint, caps, config)["bisect"], len(known))
    positions = [position for position, _ in known]
    found = [await bisection.bisect.gallop(position) for position in positions]
    follows = [True] * (len(known) - 1) + [False]
    estimates = await bisection.run(positions, follows, [len(known) - i for i in range(len(known))], found)
    eps = config.epsilon + agree
    worst = max(abs(e.value - lp) for e, (_, lp) in zip(estimates, known))
    ok = bisection.chained_answers > 0 and all(
        e.strategy == "bisect" and e.lower - eps <= lp <= e.upper + eps and abs(e.value - lp) <= eps
        for e, (_, lp) in zip(estimates, known))
    p.evidence["chained_flips"] = {"requests": p.spent() - before, "positions": len(known), "max_abs_diff": worst,
                                   "chained_answers": bisection.chained_answers}
    if not ok:
        p.reasons["chained_flips"] = (f"chained bisection requests missed known log-probs by up to {worst:.3g} nats "
                                      f"({bisection.chained_answers} answers read past a chain's first position)")
    return ok


async def _ask_partial_name(p: ProbeRun, seq: list[int], top_n: int) -> None:
    """Ask how the server names a token that is part of a character: one request forcing (bias at
    the cap) a partial token that does not end inside a character (a lone continuation byte: safe
    on every server), so its sampled name is seen (``bytes:\\x..`` counts as exact naming in
    :attr:`~.endpoint.Endpoint.partial_names_rendered`). Nothing is asked when the tokenizer has
    no such token."""
    codec, endpoint = p.endpoint.codec, p.endpoint
    probe_id = min(codec.partial_ids - codec.open_ids, default=None)
    if probe_id is None or not endpoint.sendable(seq[:3]):
        return
    before, seen = p.spent(), endpoint.partial_names_rendered
    answer, error = await attempt(endpoint.next_token(seq[:3], top_n, {probe_id: p.config.max_bias}))
    p.evidence["token_names"] = {"requests": p.spent() - before, "forced_partial_id": probe_id,
                                 "exact": endpoint.partial_names_rendered > seen,
                                 "refusal": None if error is None else str(error)}


async def check_open_stop(p: ProbeRun, seq: list[int], top_n: int) -> bool:
    """Whether the server stops at ``max_tokens`` when its output ends inside a character, so a
    request may bias such a token upward (:attr:`~.endpoint.Endpoint.open_bias`); also settles
    :attr:`~.endpoint.Endpoint.exact_names` from the names seen so far.

    Safe by construction: only unbiased one-token requests at the probe text's sendable prefixes
    (those before a partial token first, most already asked, so answered from the cache; at most
    :data:`OPEN_STOP_REQUESTS`, none longer than :func:`check_partial_tokens` sends), until one
    whose greedy token ends inside
    a character (:func:`~blackbox_mia.tokenizers.base.ends_open`) answers with one token (the
    server stops: True) or with more than one (it runs on mid-character, as llama-cpp-python
    does: False). Without such a prefix nothing is known: False, with the reason.
    """
    endpoint, codec = p.endpoint, p.endpoint.codec
    await _ask_partial_name(p, seq, top_n)
    endpoint.exact_names = endpoint.partial_names_rendered > 0
    before, asked = p.spent(), 0
    # prefixes before a partial token first: there the greedy token is likeliest a partial one; none
    # longer than the partial-token check's (a server with a short context may abort on a longer prompt)
    partial = [j for j in range(1, len(seq)) if seq[j] in codec.partial_ids and endpoint.sendable(seq[:j])]
    longest = max(partial[:PARTIAL_POSITIONS], default=GREEDY_STEPS + 3)
    order = sorted(range(1, longest + 1), key=lambda j: seq[j] not in codec.partial_ids)
    for j in order:
        if asked >= OPEN_STOP_REQUESTS:
            break
        if not endpoint.sendable(seq[:j]):
            continue
        asked += 1
        answer, error = await attempt(endpoint.next_token(seq[:j], top_n))
        if error is not None and "more than max_tokens" in str(error):
            p.evidence["open_bias"] = {"requests": p.spent() - before, "prefix_tokens": j, "overrun": str(error)}
            p.reasons["open_bias"] = ("the server generates past max_tokens while its output ends inside a "
                                      f"character ({error}): no request biases such a token upward")
            return False
        if answer is not None and answer.sampled is not None and answer.sampled <= codec.open_ids:
            p.evidence["open_bias"] = {"requests": p.spent() - before, "prefix_tokens": j, "overrun": None}
            return True
    p.evidence["open_bias"] = {"requests": p.spent() - before, "prefix_tokens": None, "overrun": None}
    p.reasons["open_bias"] = (f"no greedy token after {asked} of the probe text's prefixes ends inside a character, "
                              "so whether the server stops at max_tokens then is unknown: no request biases such a "
                              "token upward")
    return False


async def check_partial_tokens(p: ProbeRun, seq: list[int], caps: Capabilities) -> None:
    """Measure how the server names tokens that are part of a UTF-8 character, on the probe text's
    accented and CJK positions, and how many of them the tracker resolves."""
    codec, endpoint = p.endpoint.codec, p.endpoint
    positions = [j for j in range(1, len(seq)) if seq[j] in codec.partial_ids and endpoint.sendable(seq[:j])]
    positions = positions[:PARTIAL_POSITIONS]
    if not positions or not caps.strategies():
        return
    strategies = strategy_set(endpoint, caps, p.config)
    auto, topn = strategies["auto"], strategies["topn"]
    speller = Speller(endpoint, p.config.max_bias) if caps.grammar else None
    before, unnamed, ambiguous = p.spent(), 0, 0
    for j in positions:
        answer = await endpoint.next_token(seq[:j], caps.top_n)
        unnamed += sum(1 for e in answer.top if e.ids is None or len(e.ids) > 1)
        strategy = auto if endpoint.may_bias(seq[j]) else topn  # no upward bias on an open token
        position = Position.at(seq, 0, j, len(seq), p.config.context)
        estimate = await strategy.resolve(position)
        if estimate.lower == -math.inf and speller is not None:
            estimate = await speller.resolve(position) or estimate
        ambiguous += estimate.lower == -math.inf  # bound only
    p.evidence["partial_tokens"] = {"requests": p.spent() - before, "positions": len(positions),
                                    "ambiguous_names": unnamed, "unresolved": ambiguous}
    if unnamed:
        p.notes.append(
            f"the server does not name tokens that are part of a UTF-8 character uniquely ({unnamed} listed "
            f"entries at {len(positions)} probe positions): their identity is inferred by elimination; "
            f"{ambiguous} of those positions stayed ambiguous or unbiasable (after spelled read-out, where the "
            "server honours a grammar) and get a top-n upper bound"
        )
