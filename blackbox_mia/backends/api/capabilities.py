"""What an (endpoint, model) pair can tell us: the capability record, its evidence, and its cache.

The record is written by the probe (:mod:`.probe`) once per (base URL, model,
endpoint kind) and read back by every later run. Only evidence becomes a capability: each flag
comes with the requests and measured disagreement behind it (``evidence``), and each strategy
that is off with the reason (``reasons``).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import numpy as np

from ...io import read_json_object, write_json_atomic
from ...option_names import named
from ...types import BlackboxMIAError
from .precision import computation_error, rounding_error

PROBE_VERSION = 14  # bump when the probe's checks change: older records are probed again
REPORTED = ("pre-bias", "post-bias", "unknown")
MIN_TOLERANCE_NATS = 1e-4  # the smallest difference two reports of one value may show (nats)
NOT_PROBED = "not probed: the probe stopped at the cheapest exact path (prompt_logprobs); it runs in full when a command needs more"


@dataclass(frozen=True)
class Capabilities:
    """What the probe found for one (base URL, model, endpoint kind).

    Attributes:
        endpoint: ``"completions"`` or ``"chat"``.
        top_n: the most top log-probs per position the endpoint returns (0: none): the entries
            its answer listed when the probe asked for the tokenizer's whole vocabulary (or for
            the cap a refusal named), at most the vocabulary size. The tracker asks for
            ``min(top_n, TrackerConfig.max_top_n)`` per request.
        token_id_prompts: prompts may be lists of token ids.
        echo: echo + logprobs returns prompt log-probs that agree with per-prefix values.
            (``prompt`` is available with it or with ``prompt_logprobs``.)
        bias_forces: a logit_bias at the cap (``TrackerConfig.max_bias``) forces the token at
            temperature 0.
        reported: ``"pre-bias"``, ``"post-bias"`` or ``"unknown"``: whether returned log-probs
            ignore ``logit_bias``.
        forced_readout: the forced token's own reported log-prob is its unbiased one.
        postbias_solve: the post-bias exact solve reproduces known log-probs.
        bisect: greedy-flip bisection reproduces known log-probs (to ε).
        notes: facts every user of the values should know (e.g. the chat condition, how the
            server names partial UTF-8 tokens, which positions text prompts cannot send).
        condition: ``None`` when values are the text's own log-probs, else what they are
            conditional on (``"chat-template"``).
        reasons: capability or strategy name → why it is off.
        evidence: capability name → what was measured (``requests``, ``positions``,
            ``max_abs_diff`` in nats, ...).
        tolerance: nats by which two reports of the same log-prob may differ on this endpoint:
            the probe measures repeated requests and keeps 10× their largest difference (at
            least :data:`MIN_TOLERANCE_NATS`).
        flips_reproducible: repeated requests gave the same answers (same values, and the probe's
            bisection trial saw no flip that did not reproduce). ``False`` makes the tracker
            re-check every bisection bracket; ``True`` only a sample of them.
        run_reading: a ``max_tokens = K`` request without bias returns, at each generated
            position, the top-n of the conditional after the prompt plus the tokens generated
            so far (checked on the probe's greedy path): generated tokens that equal the text's
            give the text's own log-probs.
        prompt_logprobs: vLLM's ``prompt_logprobs`` request field returns every prompt token's
            log-prob by token id, agreeing with per-prefix values (one request per text, like
            ``echo``; preferred to it).
        echo_bias_free: echo's prompt log-probs stay the same under a logit_bias on the
            generated position (checked where forced read-out holds), so a window as long as the
            context forces its last target in its own echo request, as with ``prompt_logprobs``
            (whose values come before any logit processing).
        exact_names: the server names tokens that are part of a character exactly (``bytes:``
            names seen), so a name denotes the ids this package gives it; otherwise lossy namings
            are presumed (:attr:`~blackbox_mia.tokenizers.TokenCodec.lossy_names`).
        open_bias: the server stops at ``max_tokens`` when its output ends inside a character,
            so a request may bias such a token upward (else the tracker never does:
            :meth:`~.endpoint.Endpoint.may_bias`).
        chained_flips: a ``max_tokens = K`` request biasing several consecutive targets answers
            each one's bisection question while the generated tokens are the text's (checked by
            bisecting known values with chains: :mod:`.chains`).
        grammar: a GBNF ``grammar`` request field constrains the output without changing the
            reported log-probs (a known non-argmax token forced by a grammar alone came back with
            its known value), and forced read-out holds: the tracker reads positions inside a
            character by spelled requests (:mod:`.spelling`).
        report_bits: significant bits the server rounds reported log-probs to (8: bfloat16,
            11: float16), read off the probe's answers (:func:`~.precision.report_bits`);
            ``None``: float32 or finer, values taken as exact.
        jitter: nats by which a reported log-prob may differ from the model's own because the
            server answers the same request differently (batch-dependent kernels): the measured
            ``tolerance`` when repeated requests disagreed by more than a bias nudge explains,
            else 0.
        shape_variation: nats by which a reported log-prob may differ from the model's own
            because of the request's shape (how the server batched the tokens: llama.cpp's
            quantized kernels give a context evaluated in one batch and one token at a time
            other values), though identical requests agree: the probe reads known values in
            several shapes (:func:`~.probe_noise.measure_shape_variation`) and keeps
            :data:`~.probe_noise.SHAPE_MARGIN` times their largest difference beyond rounding.
            Every bound is widened by it, and ``tolerance`` is at least it.
        complete: every check ran. ``False``: the probe stopped once it had verified the
            cheapest exact path (``prompt_logprobs``: one request per text or window); the
            strategies it did not check are off with the reason :data:`NOT_PROBED` until a
            command needs one (``--strategy``, or a window whose last target is not listed) and
            the rest of the probe runs (:func:`~.probe.load_or_probe` with ``full=True``).

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
    condition: str | None = None
    reasons: dict[str, str] = field(default_factory=dict)
    evidence: dict[str, dict] = field(default_factory=dict)
    tolerance: float = MIN_TOLERANCE_NATS
    flips_reproducible: bool = True
    run_reading: bool = False
    prompt_logprobs: bool = False
    echo_bias_free: bool = False
    chained_flips: bool = False
    exact_names: bool = False
    open_bias: bool = False
    grammar: bool = False
    report_bits: int | None = None
    jitter: float = 0.0
    shape_variation: float = 0.0
    complete: bool = True

    def strategies(self) -> list[str]:
        """Available strategies, cheapest first; empty when absolute values are out of reach."""
        if self.top_n == 0:
            return []
        flags = [
            ("prompt", self.echo or self.prompt_logprobs),
            ("run", self.run_reading),
            ("topn", True),
            ("forced", self.forced_readout),
            ("postbias", self.postbias_solve),
            ("bisect", self.bisect),
        ]
        return [name for name, ok in flags if ok]

    def reading(self) -> str:
        """One line: which reading the endpoint allows (prompt log-probs, top-n with bias, top-n
        without bias, text only), what it costs per token, and what limits its values (rounding,
        jitter)."""
        available = self.strategies()
        if not available:
            return "reading: text only (no usable log-probs): the text-only scorers (--methods) are what remains"
        exact = [s for s in ("forced", "postbias", "bisect") if s in available]
        if "prompt" in available:
            line = "reading: prompt log-probs: 1 request per text (per context window), exact"
        elif exact:
            cost = {"forced": "1 request per token", "postbias": "1 request per token (more where the biased answer does not list it)",
                    "bisect": "several requests per token (flip search to epsilon)"}[exact[0]]
            line = f"reading: top-n with logit_bias ({exact[0]}): {cost}" + (
                ", fewer where the model's greedy run follows the text" if "run" in available else "")
        else:
            line = ("reading: top-n without logit_bias: 1 request per token, exact where the token is listed, "
                    "else an upper bound only")
        limits = []
        if self.report_bits is not None:
            limits.append(f"values rounded to {self.report_bits} significant bits (±|lp|·2^-{self.report_bits})")
        if self.jitter:
            limits.append(f"nondeterministic (±{self.jitter:.3g} nats)")
        if self.shape_variation:
            limits.append(f"values move with the request's shape (±{self.shape_variation:.3g} nats)")
        return line + ("; " + ", ".join(limits) + ": bounds widened" if limits else "")

    def report_error(self, values: np.ndarray) -> np.ndarray:
        """The largest |reported − true| (nats) of reported log-probs ``values`` (any shape):
        the rounding of :attr:`report_bits` plus :attr:`jitter` and :attr:`shape_variation`;
        zeros on an exact, deterministic server whose values do not depend on the request."""
        return rounding_error(values, self.report_bits) + self.jitter + self.shape_variation

    def computed_error(self, values: np.ndarray) -> np.ndarray:
        """The largest |reported − model's| (nats) of reported log-probs ``values`` (any shape)
        once the server's own arithmetic counts (:func:`~.precision.computation_error`: float32 at
        best, ±2^-24 nats near 0) plus :attr:`jitter` and :attr:`shape_variation`: what a value
        must allow for where a closed form amplifies its error (post-bias read-out,
        :mod:`.tracker.postbias`)."""
        return computation_error(values, self.report_bits) + self.jitter + self.shape_variation

    def reason(self, strategy: str) -> str:
        """Why ``strategy`` (or capability) is off, as the probe measured it."""
        return self.reasons.get(strategy) or "the capability probe did not find it"

    def to_json(self) -> dict:
        """The fields as JSON, with the derived :meth:`strategies` and :meth:`reading` line."""
        return {**asdict(self), "strategies": self.strategies(), "reading": self.reading()}

    @classmethod
    def from_json(cls, data: dict, where: str) -> Capabilities:
        """A record read back from JSON, every field type-checked.

        Raises:
            BlackboxMIAError: a missing or mistyped field (``where`` names the file).
        """
        kinds = {
            "endpoint": str, "top_n": int, "token_id_prompts": bool, "echo": bool, "bias_forces": bool,
            "reported": str, "forced_readout": bool, "postbias_solve": bool, "bisect": bool,
            "notes": list, "condition": (str, type(None)), "reasons": dict, "evidence": dict,
            "tolerance": (int, float), "flips_reproducible": bool, "run_reading": bool,
            "prompt_logprobs": bool, "echo_bias_free": bool, "chained_flips": bool, "exact_names": bool,
            "open_bias": bool, "grammar": bool, "report_bits": (int, type(None)), "jitter": (int, float),
            "shape_variation": (int, float), "complete": bool,
        }
        values = {}
        for f in fields(cls):
            value = data.get(f.name)
            bad = not isinstance(value, kinds[f.name]) or (kinds[f.name] is int and isinstance(value, bool))
            if f.name not in data or bad:
                raise BlackboxMIAError(
                    f"{where}: field {f.name!r} is {json.dumps(value)}; delete the file or pass {named('reprobe', True)}"
                )
            values[f.name] = value
        if (values["top_n"] < 0 or values["reported"] not in REPORTED or not values["tolerance"] >= 0
                or not values["jitter"] >= 0 or not values["shape_variation"] >= 0):
            raise BlackboxMIAError(f"{where}: a value is out of range; delete the file or pass {named('reprobe', True)}")
        return cls(**values)


def capabilities_path(
    cache_dir: Path, base_url: str, model: str, endpoint: str, epsilon: float, max_bias: float
) -> Path:
    """Where the probe result of one (base URL, model, endpoint kind) is cached (JSON), for the
    bisection width ``epsilon`` and the bias cap ``max_bias`` (nats) the probe validated with."""
    key = json.dumps([base_url.rstrip("/"), model, endpoint, epsilon, max_bias, PROBE_VERSION])
    return Path(cache_dir) / "capabilities" / (hashlib.sha256(key.encode()).hexdigest()[:24] + ".json")


def load_capabilities(path: Path) -> Capabilities | None:
    """The record saved at ``path``, or ``None`` when there is none.

    Raises:
        BlackboxMIAError: the file is not a valid record (named, with the way out).
    """
    if not path.exists():
        return None
    return Capabilities.from_json(read_json_object(path, "capability record"), str(path))


def save_capabilities(path: Path, caps: Capabilities) -> None:
    """Write the record atomically (a crash leaves the old file or the new one).

    Raises:
        BlackboxMIAError: the file cannot be written, or a value is not finite.
    """
    write_json_atomic(path, caps.to_json())
