"""What the audits share: option checks, labels, score columns and the report files."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ..canary.dataset import CANARY, is_canary_spec
from ..datasets import Item
from ..datasets.registry import spec_slug
from ..evaluation import render_markdown, to_jsonable, write_report
from ..io import write_text_atomic
from ..key_aliases import SUMMARY_KEYS, with_old_keys
from ..option_names import as_arguments, named
from ..results import ScoredText
from ..types import BlackboxMIAError

Log = Callable[[str], None]
SCORES_FILE = "scores.jsonl"  # an audit's scores of its dataset, in its output folder


def quiet(_: str) -> None:
    """Default ``log``: say nothing."""


def dataset_slug(name: str) -> str:
    """A folder-name-safe short name: ``canary`` for a canary, else
    :func:`~blackbox_mia.datasets.registry.spec_slug` (a file's stem, ``gsm8k-test``...)."""
    return CANARY if is_canary_spec(name) else spec_slug(name)


def require_labelled(items: Sequence[Item], name: str, what: str = "eval") -> None:
    """Raise unless every item has a label and both classes occur.

    Raises:
        BlackboxMIAError: unlabelled items, or a single class.
    """
    missing = sum(it.label is None for it in items)
    if missing:
        raise BlackboxMIAError(
            f"{what} needs a labelled dataset (label 1 = member, 0 = non-member on every item); "
            f"{name} has {missing} of {len(items)} items without a label. "
            "To estimate contamination of an unlabelled benchmark, use `bbmia sweep`."
        )
    classes = {it.label for it in items}
    if classes != {0, 1}:
        few = f" ({named('limit', 1)} keeps one item: use 2 or more)" if len(items) == 1 else ""
        raise BlackboxMIAError(f"{what} needs both members (1) and non-members (0); the {len(items)} items of {name} "
                               f"have only label {classes.pop()}{few}")


@dataclass(frozen=True)
class AuditResult:
    """What an audit produced.

    Attributes:
        summary: the machine-readable summary (the CLI's ``--json`` line).
        report: the full report dict.
        json_path, md_path: the report files.
        out_dir: the output folder (scores, figures, report).
    """

    summary: dict
    report: dict
    json_path: Path
    md_path: Path
    out_dir: Path


def usable(rows: Sequence[ScoredText], labels: Sequence[str]) -> np.ndarray:
    """Shape (len(rows),) bool: whether a row has a usable score (not null in the scores file:
    neither known only by bounds wider than the run's tolerance nor NaN or infinite) for every
    scorer in ``labels``."""
    return np.array([all(r.scores[label] is not None for label in labels) for r in rows], dtype=bool)


@dataclass(frozen=True)
class Dropped:
    """The texts of one group left out for want of a usable score (``drop_unscored``).

    Attributes:
        group: which texts (``benchmark``, ``calibration``, ``control``, ``eval``).
        n: how many were left out, of ``of``.
        ids: their ids (the first :data:`DROPPED_IDS_SHOWN`).
    """

    group: str
    n: int
    of: int
    ids: tuple[str, ...]

    def sentence(self) -> str:
        """The report's warning: what was left out, and what the result then covers."""
        first = f" (first: {self.ids[0]!r})" if self.ids else ""
        return (f"{self.n} of {self.of} {self.group} texts dropped for want of a usable score{first}: the result "
                f"covers the other {self.of - self.n}, which may differ from them (texts whose tokens a server cannot "
                "resolve are often the non-ASCII ones)")


DROPPED_IDS_SHOWN = 20  # ids of dropped texts a report lists


def dropped(group: str, ids: Sequence[str], bad: np.ndarray) -> Dropped | None:
    """The :class:`Dropped` record of a group whose texts ``ids`` lack a usable score where
    ``bad`` (shape (len(ids),) bool); None when none does."""
    if not bad.any():
        return None
    gone = [text_id for text_id, b in zip(ids, bad) if b]
    return Dropped(group, len(gone), len(ids), tuple(gone[:DROPPED_IDS_SHOWN]))


def score_column(rows: Sequence[ScoredText], label: str, droppable: bool = False) -> np.ndarray:
    """The scores of one scorer as a float64 array. ``droppable``: the audit has
    ``drop_unscored`` (the message offers it; else it says to drop the texts from the input).

    Raises:
        BlackboxMIAError: a row without a usable score (null in the scores file): its interval
            was wider than the run's tolerance (tokens known only by bounds) or it was NaN or
            infinite. No AUC or prevalence is computed from such a column; the message counts
            both kinds and names the first text.
    """
    unscored = [r for r in rows if label in r.unscored]
    nonfinite = [r for r in rows if r.scores[label] is None and label not in r.unscored]
    if unscored:
        raise BlackboxMIAError(
            f"scorer {label!r} has no usable score for {len(unscored)} of {len(rows)} texts: their tokens are known "
            f"only by bounds (first: {unscored[0].id!r}, {unscored[0].unscored[label]}; null in the scores file, "
            f"{sum(r.bound_only for r in unscored)} bound-only tokens in all). No metric is computed from bounds: "
            f"drop those texts ({_how_to_drop(droppable)}), or use an endpoint whose log-probs resolve them (see "
            "the capability notes)"
            + (f"; {len(nonfinite)} more texts had a NaN or infinite score" if nonfinite else "")
        )
    if nonfinite:
        raise BlackboxMIAError(
            f"scorer {label!r} gave a NaN or infinite score on {len(nonfinite)} texts (first: {nonfinite[0].id!r}; null "
            f"in the scores file): no metric can use it; drop those texts ({_how_to_drop(droppable)}) or choose "
            "another scorer"
        )
    return np.array([r.scores[label] for r in rows], dtype=np.float64)


def _how_to_drop(droppable: bool) -> str:
    """How a user drops texts without a usable score: the option, or editing the input."""
    return f"{named('drop_unscored', True)}: the report counts them" if droppable else "remove them from the input"


def report_config(run_cfg: dict, audit: str, config, n_items: int, seeds: dict, **extra) -> dict:
    """The report's ``config`` section: the run's configuration
    (:func:`~blackbox_mia.runner.run_config`), the audit's own config dataclass under ``audit``,
    the number of items, the seeds, the scores file and ``extra`` entries."""
    return {**run_cfg, audit: asdict(config), "n_items": n_items, **extra, "seeds": seeds, "scores_file": SCORES_FILE}


Names = Callable[[str], str]
"""How a report names settings (:mod:`blackbox_mia.option_names`): ``as_arguments`` (``nonmembers=``,
for a Python caller: the default) or ``as_flags`` (``--nonmembers``, what the CLI passes)."""


def with_names(value: object, names: Names) -> object:
    """``value`` (a report, a summary: dicts, lists, strings) with every string's marked settings
    (:func:`~blackbox_mia.option_names.named`) written by ``names``."""
    if isinstance(value, str):
        return names(value)
    if isinstance(value, dict):
        return {key: with_names(item, names) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [with_names(item, names) for item in value]
    return value


def publish(report: dict, summary: dict, out_dir: Path, stem: str, appendix: str = "",
            hidden: Sequence[str] = (), warnings: Sequence[str] = (), names: Names = as_arguments) -> AuditResult:
    """Write ``{stem}.json`` and ``{stem}.md`` into ``out_dir`` and return the :class:`AuditResult`,
    whose summary gains ``"report"``: the path of the JSON report, ``"warnings"``: what the report
    warns about (each one sentence; the CLI prints them on the console, one line each, and the
    Markdown lists them first), and the old names of its renamed keys for one release
    (:data:`blackbox_mia.key_aliases.SUMMARY_KEYS`).

    Args:
        report: the full report (JSON-ready after :func:`~blackbox_mia.evaluation.to_jsonable`).
        summary: the machine-readable summary (the CLI's ``--json`` line).
        out_dir: the output folder (created).
        stem: the audit: ``eval``, ``sweep``, ``documents``...
        appendix: Markdown appended to the rendered report (e.g. a table of items).
        hidden: report keys left out of the Markdown rendering (still in the JSON).
        warnings: caveats without which the headline misleads (a target FPR not realised, a
            control that inherits membership, a lower bound of 0...).
        names: how the files and the result name a setting that the text marks with
            :func:`~blackbox_mia.option_names.named` (:data:`Names`).

    Raises:
        BlackboxMIAError: as :func:`~blackbox_mia.evaluation.write_report`.
    """
    report = with_names({**report, "warnings": list(warnings)}, names)
    summary = with_names({**summary, "warnings": list(warnings)}, names)
    appendix = names(appendix)
    json_path, md_path = write_report(report, out_dir, stem)
    if appendix or hidden:
        shown = {key: value for key, value in report.items() if key not in hidden}
        write_text_atomic(md_path, render_markdown(to_jsonable(shown), out_dir) + appendix)
    summary = with_old_keys({**summary, "report": str(json_path)}, SUMMARY_KEYS.get(stem, {}))
    return AuditResult(to_jsonable(summary), report, json_path, md_path, Path(out_dir))
