"""A non-member control built from the benchmark itself: the same problems with new numbers.

Maini et al. 2024 ("LLM Dataset Inference") compare the scores of suspect data with held-out
data of the same distribution. A public benchmark has no held-out twin, so we make one: every
problem is rewritten with its numbers changed consistently, and the worked solution is replayed
with the new numbers. The rewritten texts never existed before, so they cannot be in any
training set (label 0), yet they keep the benchmark's topic, wording, format and length.

Modules: :mod:`.numbers` (numbers in text: values, formats, rewriting), :mod:`.arith` (exact,
safe arithmetic and visible equations), :mod:`.values` (seeded new values, the value map),
:mod:`.gsm8k` and :mod:`.aqua` (the two constructions, each documented there), :mod:`.base`
(configuration, result), :mod:`.build` (which construction a benchmark gets).

Limits (say them next to any result that uses this control):

* Only the numbers change: wording, names and style are the original's, so a control item is
  a near-duplicate of its source. A model that memorised the template (the text around the
  numbers) scores it high too, which shrinks the benchmark-vs-control gap: the control is
  conservative, it under-estimates contamination (and a t-test against it loses power).
* New numbers shift the token statistics slightly (other digits, sometimes other lengths).
  A model that finds "natural" numbers more likely may score the originals higher for that
  reason alone; keep the perturbation small (the defaults) and treat a tiny gap with care.
* Semantics are checked only as arithmetic: an implicit constant that happens to equal a
  mapped number may be rewritten (the replayed solution is then self-consistent but the story
  may be odd), and the kept items are the arithmetically simplest ones (the dropped ones skew
  towards divisions, number words and fractions), so the control is not a uniform sample of
  the benchmark.
"""

from .aqua import perturb_aqua
from .arith import ExpressionError, safe_eval, visible_equations
from .base import ControlConfig, ControlSet
from .build import build_control, control_kind
from .gsm8k import perturb_gsm8k
from .numbers import NUMBER, NUMBER_WORDS

__all__ = [
    "NUMBER", "NUMBER_WORDS", "ControlConfig", "ControlSet", "ExpressionError", "build_control",
    "control_kind", "perturb_aqua", "perturb_gsm8k", "safe_eval", "visible_equations",
]
