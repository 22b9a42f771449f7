"""Run the text-only scorers: their generations batched per setting, scored per text.

:class:`~blackbox_mia.scorers.text_only.GenerationScorer` s list the generations they read for
a text; this module gathers those of every text and scorer, sends identical requests once,
batches the others by their settings (one :meth:`~blackbox_mia.backends.base.Backend.generate`
call per (token budget, temperature, n, seed) in a batch of texts), scores each text as soon as
its batch is answered, and estimates what that costs before anything is sent (``--dry-run``:
the same list of requests, so the estimate is the count sent when nothing is cached).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .backends.base import GENERATE, Backend
from .cost.estimate import CostEstimate
from .scorers.bounded import Bounded
from .scorers.text_only import GenerationRequest, GenerationScorer, TargetView
from .types import Generation

TEXTS_PER_BATCH = 16  # texts whose generations go out together: a killed run loses at most these

OnGenerated = Callable[[int, dict[str, Bounded]], None]
"""``on_generated(index, scores)``: text ``index`` has all its text-only scores."""


def target_view(backend: Backend) -> TargetView:
    """What the scorers know of ``backend``: its tokenizer, whether its generations are
    conditional on a chat template (``describe_generation()["condition"]``), and its window (the
    context less the BOS, ``None`` when the context is unknown)."""
    context = backend.context
    window = None if context is None else context - int(backend.codec.bos_id is not None)
    return TargetView(backend.codec, backend.describe_generation().get("condition") is not None, window)


def plan_requests(texts: Sequence[str], scorers: Sequence[GenerationScorer],
                  target: TargetView) -> list[dict[str, list[GenerationRequest]]]:
    """Per text, per scorer label, the requests it reads.

    Raises:
        BlackboxMIAError: a text a scorer cannot use (before anything is generated).
    """
    return [{s.label: s.requests(text, target) for s in scorers} for text in texts]


def estimate_generated(texts: Sequence[str], scorers: Sequence[GenerationScorer], backend: Backend) -> CostEstimate:
    """What :func:`score_generated` on ``texts`` is expected to cost on ``backend``: its
    :meth:`~blackbox_mia.backends.base.Backend.estimate_generation` of every distinct request
    (identical requests of two scorers are sent once). Sends nothing.

    Raises:
        BlackboxMIAError: the backend lacks ``generate``; a text a scorer cannot use.
    """
    backend.require(GENERATE)
    unique = _unique(plan_requests(texts, scorers, target_view(backend)))
    codec = backend.codec
    lengths = [len(codec.encode(r.prompt)) if isinstance(r.prompt, str) else len(r.prompt) for r in unique]
    return backend.estimate_generation(lengths, [r.max_new_tokens for r in unique], [r.sent for r in unique])


def score_generated(texts: Sequence[str], scorers: Sequence[GenerationScorer], backend: Backend,
                    on_generated: OnGenerated | None = None) -> list[dict[str, Bounded]]:
    """Text-only scores of every text: ``{label: Bounded}`` per text, in input order.

    Texts go :data:`TEXTS_PER_BATCH` at a time; within a batch, distinct requests are grouped by
    their settings and each group is one ``generate`` call (without log-probs, so an endpoint
    that gives none works). ``on_generated(j, scores)`` is called as soon as text ``j``'s batch
    is scored, in input order.

    Raises:
        BlackboxMIAError: the backend lacks ``generate``; a text a scorer cannot use (before
            anything is generated); whatever the backend raises.
    """
    backend.require(GENERATE)
    target = target_view(backend)
    plans = plan_requests(texts, scorers, target)
    out: list[dict[str, Bounded]] = []
    for start in range(0, len(texts), TEXTS_PER_BATCH):
        batch = plans[start : start + TEXTS_PER_BATCH]
        answers = _generate(_unique(batch), backend)
        for j, plan in enumerate(batch, start):
            scores = {s.label: s.score_generations(texts[j], target, [answers[r] for r in plan[s.label]])
                      for s in scorers}
            out.append(scores)
            if on_generated is not None:
                on_generated(j, scores)
    return out


def _unique(plans: Sequence[dict[str, list[GenerationRequest]]]) -> list[GenerationRequest]:
    """The distinct requests of ``plans``, in first-seen order."""
    return list(dict.fromkeys(r for plan in plans for requests in plan.values() for r in requests))


def _generate(requests: list[GenerationRequest], backend: Backend) -> dict[GenerationRequest, list[Generation]]:
    """The ``n`` answers of every request, one ``generate`` call per distinct setting."""
    groups: dict[tuple, list[GenerationRequest]] = {}
    for r in requests:
        groups.setdefault(r.settings, []).append(r)
    answers: dict[GenerationRequest, list[Generation]] = {}
    for (budget, temperature, n, seed), group in groups.items():
        generations = backend.generate([r.prompt for r in group], budget, temperature=temperature, n=n, seed=seed,
                                       logprobs=False)
        for i, r in enumerate(group):
            answers[r] = generations[i * n : (i + 1) * n]
    return answers
