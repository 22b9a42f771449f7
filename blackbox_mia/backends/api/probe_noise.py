"""How far the reports of one value may move (the probe's measurements, :mod:`.probe` runs them):
the rounding of the reported numbers, the noise of identical requests, and the variation with the
request's shape. Each is read off values the greedy path already knows (:mod:`.probe_checks`).
"""

from __future__ import annotations

import numpy as np

from .capabilities import MIN_TOLERANCE_NATS
from .endpoint import NextToken
from .precision import SIGNIFICANT_BITS, report_bits, rounding_error
from .probe_checks import ProbeRun, attempt

NUDGE_SHIFT_NATS = 1e-5  # repeats nudged by ≤ 2e-6 nats of bias may move post-bias reports this much, no more
SHAPE_MARGIN = 3.0
"""The shape variation kept: this many times the largest difference the probe saw between request
shapes. The probe sees a few values; the population's largest is bigger. On SmolLM2-135M (Q4_1)
through llama.cpp 0.3.36 the probe's largest was 0.263 nats, while one token at a time against one
batch, over the 4,234 tokens of 20 whole GSM8K test problems, moved a value by up to 0.742 (99th
percentile 0.317): 2.8 times the probe's. Twice (±0.526) left a forced value 0.016 nats outside
its bounds (benchmarks/real_server_check.py); three times is ±0.789."""
SHAPE_RESET_TEXT = "Zero."  # an unrelated prompt: the server's reusable prefix no longer matches the probe text's


def measure_precision(p: ProbeRun, path) -> int | None:
    """The significant bits the server rounds log-probs to (:func:`~.precision.report_bits`),
    read off every value the greedy path's answers listed (no request); evidence under
    ``precision``, and a note naming the format when it is a short one."""
    values = [e.logprob for _, answer in path for e in answer.top] + [a.sampled_logprob for _, a in path]
    bits = report_bits(values)
    p.evidence["precision"] = {"requests": 0, "values": len(values), "report_bits": bits}
    if bits is not None:
        name = next(k for k, v in SIGNIFICANT_BITS.items() if v == bits)
        p.notes.append(f"reported log-probs are rounded to {name} ({bits} significant bits): every value "
                       f"carries ±|lp|·2^-{bits} nats (±{16 * 2.0**-bits:.3g} at −16)")
    return bits


async def measure_tolerance(p: ProbeRun, path, top_n: int, bits: int | None) -> tuple[float, float]:
    """Nats by which reports of one value may differ here, and the jitter of identical requests.

    Tolerance: 10× the largest difference between the first probe answer and two fresh repeats
    of it (a −1e-6 nat bias on its lowest listed token makes each repeat a new request), at
    least :data:`MIN_TOLERANCE_NATS`. Jitter: that tolerance when some difference exceeds what
    the nudge and the rounding to ``bits`` significant bits explain
    (:data:`NUDGE_SHIFT_NATS`, :func:`~.precision.rounding_error` of both values), else 0: the
    server answers one request in several ways, and every value it reports may be off by it.
    """
    if not path:
        return MIN_TOLERANCE_NATS, 0.0
    prefix, answer = path[0]
    lowest = min(answer.top, key=lambda e: e.logprob)
    nudged = next(iter(lowest.ids)) if lowest.ids is not None and len(lowest.ids) == 1 else 0
    before, worst, unexplained = p.spent(), 0.0, 0.0
    for k in (1, 2):
        again = await p.endpoint.next_token(prefix, top_n, {nudged: -k * 1e-6})
        for entry in answer.top:
            if entry.ids is not None and len(entry.ids) == 1 and next(iter(entry.ids)) != nudged:
                value = again.find(next(iter(entry.ids)))
                if value is not None:
                    diff = abs(value - entry.logprob)
                    worst = max(worst, diff)
                    rounding = float(np.sum(rounding_error(np.asarray([value, entry.logprob]), bits)))
                    unexplained = max(unexplained, diff - rounding)
    tolerance = max(MIN_TOLERANCE_NATS, 10 * worst)
    jitter = tolerance if unexplained > NUDGE_SHIFT_NATS else 0.0
    p.evidence["repeat_noise"] = {"requests": p.spent() - before, "max_abs_diff": worst,
                                  "beyond_rounding": max(unexplained, 0.0), "jitter": jitter}
    if jitter:
        p.notes.append(f"identical requests get log-probs up to {worst:.3g} nats apart (a nondeterministic "
                       f"server): every value carries ±{jitter:.3g} nats (10× that)")
    return tolerance, jitter


async def measure_shape_variation(p: ProbeRun, path, top_n: int, bits: int | None) -> float:
    """Nats by which a value moves with the request's shape, though identical requests agree.

    The greedy path's values were read as the last position of prompts growing one token at a
    time (a server that reuses the previous request's computed prefix, as llama.cpp does,
    evaluates each new token alone). They are read again in other shapes: where a generated
    token extends the prompt (``steps_extend_prompt``: completions, not chat), as the generated
    steps of one ``max_tokens = len(path)`` request from the path's first prefix (the request
    of :func:`check_runs`, which then comes from the response cache), and, after an unrelated
    prompt (:data:`SHAPE_RESET_TEXT`), the path's middle and last prefixes as whole new prompts
    (evaluated in one batch), each nudged by a −1e-6 nat bias on its lowest listed token so it
    is a new request. The variation is :data:`SHAPE_MARGIN` times the largest difference of a
    listed value beyond what the rounding to ``bits`` significant bits explains; 0 when every
    value agrees to the rounding. Evidence under ``shape``, and a note when it is not 0.
    """
    if not path:
        return 0.0
    before, diffs = p.spent(), []

    def compare(answer: NextToken, reread: NextToken) -> None:
        for entry in answer.top:
            if entry.ids is not None and len(entry.ids) == 1:
                value = reread.find(next(iter(entry.ids)))
                if value is not None:
                    rounding = float(np.sum(rounding_error(np.asarray([value, entry.logprob]), bits)))
                    diffs.append(abs(value - entry.logprob) - rounding)

    steps = None
    if p.endpoint.dialect.steps_extend_prompt:  # else a run's steps read other contexts than the path's
        steps, _ = await attempt(p.endpoint.next_tokens(path[0][0], len(path), top_n))
    for step, (_, answer) in zip(steps or [], path):
        compare(answer, step)
        if step.sampled != answer.sampled:  # later steps continue another context
            break
    reset = p.endpoint.codec.encode(SHAPE_RESET_TEXT)
    for prefix, answer in [path[k] for k in sorted({len(path) // 2, len(path) - 1})]:
        lowest = min(answer.top, key=lambda e: e.logprob)
        nudged = next(iter(lowest.ids)) if lowest.ids is not None and len(lowest.ids) == 1 else 0
        await attempt(p.endpoint.next_token(reset, 1))
        reread, _ = await attempt(p.endpoint.next_token(prefix, top_n, {nudged: -1e-6}))
        if reread is not None:
            compare(answer, reread)
    worst = max([0.0, *diffs])
    shape = SHAPE_MARGIN * worst if worst > NUDGE_SHIFT_NATS else 0.0
    p.evidence["shape"] = {"requests": p.spent() - before, "values": len(diffs), "beyond_rounding": worst,
                           "shape_variation": shape}
    if shape:
        p.notes.append(f"a value read in another request shape (inside a longer run, or as a whole new prompt) "
                       f"moved up to {worst:.3g} nats, though identical requests agree (batch-dependent kernels): "
                       f"every value carries ±{shape:.3g} nats ({SHAPE_MARGIN:g}× that)")
    return shape
