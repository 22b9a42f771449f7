"""The two audits behind ``bbmia eval`` and ``bbmia sweep`` (library logic, no I/O to the terminal).

* :func:`run_eval` measures how well scorers separate KNOWN members from non-members (labelled
  data): AUC and TPR at low FPR with bootstrap CIs (Carlini et al. 2022; Duan et al. 2024),
  results by length bucket (WikiMIA's 32/64/128/256 words; Shi et al. 2024), and the blind
  text-only baseline beside them (Das, Zhang & Tramèr 2024), whose verdict says whether the
  split is distribution-shifted.
* :func:`run_sweep` estimates how much of an UNLABELLED benchmark leaked into a model: one
  scorer, a threshold calibrated on known non-members for a target FPR, the flag rate
  corrected for that FPR and the TPR measured on known members (Rogan & Gladen 1978,
  docs/design.md §5), and a one-sided Welch t-test of the benchmark against a non-member control
  built from the benchmark itself (:mod:`blackbox_mia.controls`; Maini et al. 2024).

Both write the scores (JSONL, resumable through :func:`blackbox_mia.runner.score_items`), a JSON
+ Markdown report with the exact configuration (:func:`blackbox_mia.runner.run_config` plus the
audit's own config dataclass), and figures into one output folder. Convention: higher score =
more likely a member; labels 1 = member, 0 = non-member.

Each audit runs in two steps so that bad input fails before a model is loaded:
``prepare_*`` loads and checks the data (cheap), then ``run_*`` scores it with the backends.

Modules: :mod:`.eval`, :mod:`.ablation` (eval's prompt-length ablation), :mod:`.sweep` (a
package: its plan, score matrices, verdict, caveats and run), :mod:`.unlearning` (a package),
:mod:`.memorization` (``bbmia memorize``), and :mod:`.common` (what they share: option checks,
labels, score columns, the report files).
"""

from .common import AuditResult, dataset_slug, require_labelled
from .eval import EvalConfig, EvalPlan, prepare_eval, run_eval
from .sweep import SweepConfig, SweepPlan, prepare_sweep, run_sweep

__all__ = [
    "AuditResult", "EvalConfig", "EvalPlan", "SweepConfig", "SweepPlan", "dataset_slug",
    "prepare_eval", "prepare_sweep", "require_labelled", "run_eval", "run_sweep",
]
