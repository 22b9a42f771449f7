"""Capability probe: what an (endpoint, model) pair can tell us, found once and cached.

Verify, don't trust (design.md §4): every strategy the probe enables is cross-checked against
the top-n values on a short probe text, and an inconsistent one is refused with a note.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .endpoint import Endpoint, NextToken
from .types import BlackboxMIAError

PROBE_TEXT = "The capital of France is Paris, and the river that runs through it is the Seine."
PROBE_VERSION = 1
AGREE_NATS = 1e-3  # exact strategies must agree with top-n values to this (nats)


@dataclass(frozen=True)
class Capabilities:
    """What the probe found for one (base URL, model, endpoint kind).

    Attributes:
        endpoint: ``"completions"`` or ``"chat"``.
        top_n: top log-probs per position the endpoint returns (0: none).
        token_id_prompts: prompts may be lists of token ids.
        echo: echo + logprobs returns prompt log-probs that agree with per-prefix values.
        bias_forces: a +100 logit_bias forces the token at temperature 0.
        reported: ``"pre-bias"``, ``"post-bias"`` or ``"unknown"``: whether returned log-probs
            ignore ``logit_bias``.
        forced_readout: the forced token's own reported log-prob is its unbiased one.
        postbias_solve: the post-bias exact solve reproduces a known log-prob.
        bisect: greedy-flip bisection reproduces a known log-prob (to ε).
        notes: why a strategy is off.
    """

    endpoint: str
    top_n: int
    token_id_prompts: bool
    echo: bool
    bias_forces: bool
    reported: str
    forced_readout: bool
    postbias_solve: bool
    bisect: bool
    notes: list[str] = field(default_factory=list)

    def strategies(self) -> list[str]:
        """Available strategies, cheapest first; empty when absolute values are out of reach."""
        if self.top_n == 0:
            return []
        flags = [
            ("prompt", self.echo),
            ("topn", True),
            ("forced", self.forced_readout),
            ("postbias", self.postbias_solve),
            ("bisect", self.bisect),
        ]
        return [name for name, ok in flags if ok]

    def to_json(self) -> dict:
        return {**asdict(self), "strategies": self.strategies()}


def capabilities_path(cache_dir: Path, base_url: str, model: str, endpoint: str) -> Path:
    """Where the probe result of one (base URL, model, endpoint) is cached (JSON)."""
    key = json.dumps([base_url.rstrip("/"), model, endpoint, PROBE_VERSION])
    return Path(cache_dir) / "capabilities" / (hashlib.sha256(key.encode()).hexdigest()[:24] + ".json")


async def load_or_probe(
    endpoint: Endpoint, cache_dir: Path, refresh: bool = False, context: int | None = None
) -> Capabilities:
    """The cached probe result for this endpoint, probing (and caching as JSON) when missing.

    ``endpoint.token_id_prompts`` is set from the result either way.
    """
    config = endpoint.client.config
    path = capabilities_path(cache_dir, config.base_url, config.model, endpoint.kind)
    if path.exists() and not refresh:
        try:
            caps = Capabilities(**{k: v for k, v in json.loads(path.read_text()).items() if k != "strategies"})
        except (json.JSONDecodeError, TypeError) as exc:
            raise BlackboxMIAError(f"corrupt capability cache {path}: {exc}; delete it or pass --reprobe") from exc
        endpoint.token_id_prompts = caps.token_id_prompts
        return caps
    caps = await probe(endpoint, context=context)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(caps.to_json(), indent=2))
    return caps


async def probe(
    endpoint: Endpoint, max_bias: float = 100.0, epsilon: float = 0.01, context: int | None = None
) -> Capabilities:
    """Probe ``endpoint`` with :data:`PROBE_TEXT` (a few dozen requests, all cached), cut to the
    first ``context`` tokens when the model's context is that short.

    ``endpoint.token_id_prompts`` is updated to what the server accepts.

    Raises:
        BlackboxMIAError: the endpoint rejects even a plain one-token request.
    """
    notes: list[str] = []
    codec = endpoint.codec
    ids = codec.encode(PROBE_TEXT)
    kind = endpoint.kind

    token_ids = False
    if kind == "completions" and endpoint.token_id_prompts:
        try:
            await endpoint.next_token(([codec.bos_id] if codec.bos_id is not None else []) + ids[:3], 1)
            token_ids = True
        except BlackboxMIAError as exc:
            notes.append(f"token-id prompts refused ({exc}); prompts go as text, re-tokenization checked")
    endpoint.token_id_prompts = token_ids
    seq = (([codec.bos_id] if codec.bos_id is not None and token_ids else []) + ids)[:context]

    top_n, first = 0, None
    for n in (20, 5, 1):
        try:
            first = await endpoint.next_token(seq[:3], n)
        except BlackboxMIAError as exc:
            notes.append(f"top_n={n} refused ({exc})")
            continue
        top_n = min(n, len(first.top))
        break
    if first is None:
        raise BlackboxMIAError("the endpoint refused every probe request: " + "; ".join(notes))
    if top_n == 0:
        notes.append(
            "no log-probs are returned (sampled token only): bisection can measure lp_top − lp_i "
            "but never lp_top itself, so absolute log-probs cannot be recovered"
        )
        return Capabilities(kind, 0, token_ids, False, False, "unknown", False, False, False, notes)

    answers = [await endpoint.next_token(seq[:i], top_n) for i in range(1, min(len(seq), 9))]
    echo = False
    if kind == "completions":
        echo = await _check_echo(endpoint, seq, answers, notes)

    forces = forced = postbias = bisect = False
    reported = "unknown"
    pick = _listed_non_argmax(first)
    if pick is None:
        notes.append("top-n too small to test logit_bias semantics (need 2 listed tokens)")
    else:
        target, lp_target = pick
        biased = await endpoint.next_token(seq[:3], top_n, {target: max_bias})
        forces = target in biased.sampled
        reported_target = biased.find(target)
        if reported_target is None and forces:
            reported_target = biased.sampled_logprob
        if reported_target is not None and abs(reported_target - lp_target) < AGREE_NATS:
            reported = "pre-bias"
        elif reported_target is not None and reported_target > -0.01:
            reported = "post-bias"
        forced = forces and reported == "pre-bias" and biased.sampled_logprob is not None and abs(
            biased.sampled_logprob - lp_target
        ) < AGREE_NATS
        if not forces:
            notes.append("a +100 logit_bias did not force the token at temperature 0: bias ignored")
        elif not forced:
            notes.append("the forced token's reported log-prob is not its unbiased value: forced read-out off")
        if reported == "post-bias":
            postbias = _solve_check(first, biased, target, lp_target, max_bias, notes)
        if forces:
            bisect = await _bisect_check(endpoint, seq[:3], first, target, lp_target, max_bias, epsilon, notes)
    return Capabilities(kind, top_n, token_ids, echo, forces, reported, forced, postbias, bisect, notes)


def _listed_non_argmax(answer: NextToken) -> tuple[int, float] | None:
    """The lowest listed token that is not the argmax, with its (unbiased) log-prob."""
    ranked = sorted((e for e in answer.top if len(e.ids) == 1), key=lambda e: -e.logprob)
    if len(ranked) < 2:
        return None
    return ranked[-1].ids[0], ranked[-1].logprob


async def _check_echo(endpoint: Endpoint, seq: list[int], answers: list[NextToken], notes: list[str]) -> bool:
    try:
        echoed = await endpoint.prompt_logprobs(seq)
    except BlackboxMIAError as exc:
        notes.append(f"echo unavailable ({exc})")
        return False
    worst = 0.0
    for i, answer in enumerate(answers, start=1):
        listed = answer.find(seq[i])
        if listed is not None:
            if echoed[i] is None:
                notes.append("echo returned null log-probs for prompt tokens: refused")
                return False
            worst = max(worst, abs(echoed[i] - listed))
    if worst > AGREE_NATS:
        notes.append(f"echo log-probs disagree with per-prefix top-n values by {worst:.3g} nats: refused")
        return False
    return True


def _solve_check(unbiased: NextToken, biased: NextToken, target: int, lp_target: float, bias: float, notes) -> bool:
    ref = max((e for e in unbiased.top if target not in e.ids), key=lambda e: e.logprob)
    lp_ref_biased = next((e.logprob for e in biased.top if set(e.ids) & set(ref.ids)), None)
    lp_target_biased = biased.find(target)
    if lp_ref_biased is None or lp_target_biased is None:
        notes.append("post-bias answer lacks the reference token: post-bias solve off")
        return False
    solved = ref.logprob + (lp_target_biased - lp_ref_biased) - bias
    if abs(solved - lp_target) > AGREE_NATS:
        notes.append(f"post-bias solve misses a known log-prob by {abs(solved - lp_target):.3g} nats: off")
        return False
    return True


async def _bisect_check(endpoint, prefix, unbiased, target, lp_target, cap, eps, notes) -> bool:
    top = unbiased.top_logprob
    lo, hi = 0.0, cap
    while hi - lo > eps:
        mid = round((lo + hi) / 2, 6)
        if target in (await endpoint.next_token(prefix, 0, {target: mid})).sampled:
            hi = mid
        else:
            lo = mid
    estimate = top - (lo + hi) / 2
    if not (top - hi - eps <= lp_target <= top - lo + eps) or math.isnan(estimate):
        notes.append(f"greedy-flip bisection misses a known log-prob ({estimate:.4f} vs {lp_target:.4f}): off")
        return False
    return True
