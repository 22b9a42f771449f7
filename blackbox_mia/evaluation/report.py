"""Write an evaluation report as JSON (exact, machine-readable) and Markdown (for people).

The report is a plain dict assembled from the outputs of this package. Recognised top-level
keys, each optional, rendered in this order:

* ``title``: str.
* ``config``: dict, the exact configuration of the run (shown as a JSON block, as mimir does:
  the config lives next to every result).
* ``scorers``: ``{name: metrics.evaluate_scores(...)}``.
* ``blind_baseline``: ``blind.BlindBaseline.to_dict()`` (optionally with ``auc_ci``), and
  ``distribution_shift``: ``blind.distribution_shift_verdict(...)`` (also accepted as
  ``blind_baseline["verdict"]``).
* ``length_buckets``: ``{scorer: metrics.evaluate_by_length(...)}``, with ``length_unit``:
  what the buckets count (``"words"`` or ``"characters"``; words when absent).
* ``prompt_length``: the prompt-length ablation (``audits.ablation``): ``{"unit", "tokenizer",
  "lengths", "fpr", "counts": {L: {"n", "truncated", "whole"}}, "scorers": {scorer: {L:
  metrics.evaluate_scores(...)}}}``, shown as scorer × L tables of AUC and TPR at ``fpr``.
* ``plots``: ``{caption: image path}``.
* ``sweep``: ``{name: {"threshold": calibration.Threshold.to_dict(), "prevalence":
  estimate.estimate_prevalence(...) (its threshold popped), "dataset_test":
  prevalence.dataset_level_test(...)}}``
  (each part optional).
* ``notes``: list of str.

Any other key is rendered as a JSON block under its own heading.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path

import numpy as np

from ..io import write_json_atomic, write_text_atomic
from ..types import BlackboxMIAError

KNOWN_KEYS = (
    "title", "config", "scorers", "blind_baseline", "distribution_shift",
    "length_buckets", "length_unit", "prompt_length", "plots", "sweep", "notes", "warnings",
)


def write_report(report: dict, out_dir: str | Path, stem: str) -> tuple[Path, Path]:
    """Write ``{stem}.json`` and ``{stem}.md`` into ``out_dir`` (created if missing).

    JSON: sorted keys, indented; numpy values become Python ones, tuples lists, dataclasses
    dicts, and NaN/±inf become null (JSON has no such numbers). Markdown: see the module
    docstring for the sections; image links are relative to ``out_dir``.

    Args:
        report: the report dict (see module docstring).
        out_dir: output folder.
        stem: file name without extension.

    Returns:
        ``(json_path, md_path)``.

    Raises:
        BlackboxMIAError: ``report`` is not a dict, or ``stem`` is empty or contains a path
            separator.
    """
    if not isinstance(report, dict):
        raise BlackboxMIAError(f"report must be a dict, got {type(report).__name__}")
    if not stem or "/" in stem or os.sep in stem:
        raise BlackboxMIAError(f"bad report stem {stem!r}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    data = to_jsonable(report)
    json_path, md_path = out / f"{stem}.json", out / f"{stem}.md"
    write_json_atomic(json_path, data)
    write_text_atomic(md_path, render_markdown(data, out))
    return json_path, md_path


def to_jsonable(value):
    """Recursively convert to JSON types; NaN and ±inf become None."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = value.to_dict() if hasattr(value, "to_dict") else dataclasses.asdict(value)
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Path):
        return str(value)
    return value


def render_markdown(report: dict, out_dir: str | Path = ".") -> str:
    """Markdown text of a (JSON-ready) report dict; image links relative to ``out_dir``."""
    lines = [f"# {report.get('title', 'Membership inference report')}", ""]
    if report.get("warnings"):
        lines += ["## Warnings", ""] + [f"- **{w}**" for w in report["warnings"]] + [""]
    if "config" in report:
        lines += ["## Configuration", "", "```json",
                  json.dumps(report["config"], sort_keys=True, indent=2, ensure_ascii=False),
                  "```", ""]
    if "scorers" in report:
        lines += _scorer_table(report["scorers"])
    blind = report.get("blind_baseline") or {}
    verdict = report.get("distribution_shift") or blind.get("verdict")
    if blind or verdict:
        lines += _blind_section(blind, verdict)
    if "length_buckets" in report:
        lines += _bucket_table(report["length_buckets"], report.get("length_unit", "words"))
    if "prompt_length" in report:
        lines += _prompt_length_tables(report["prompt_length"])
    if "sweep" in report:
        lines += _sweep_table(report["sweep"])
    if "plots" in report:
        lines += ["## Plots", ""]
        for caption, path in report["plots"].items():
            rel = Path(os.path.relpath(Path(path), Path(out_dir))).as_posix()
            lines += [f"![{caption}]({rel})", ""]
    if report.get("notes"):
        lines += ["## Notes", ""] + [f"- {n}" for n in report["notes"]] + [""]
    for key in sorted(k for k in report if k not in KNOWN_KEYS):
        lines += [f"## {key}", "", "```json",
                  json.dumps(report[key], sort_keys=True, indent=2, ensure_ascii=False),
                  "```", ""]
    return "\n".join(lines)


def _scorer_table(scorers: dict) -> list[str]:
    keys = _fpr_keys(scorers.values())
    head = ["scorer", "AUC [95% CI]", *[f"TPR@{_pct(k)}" for k in keys], "members", "non-members"]
    lines = ["## Membership inference metrics", "", _row(head), _row(["---"] * len(head))]
    notes = []
    for name, m in scorers.items():
        cells = [name, _with_ci(m.get("auc"), m.get("auc_ci"))]
        for k in keys:
            value = (m.get("tpr_at_fpr") or {}).get(k)
            note = (m.get("notes") or {}).get(k)
            cells.append(_num(value) + ("*" if note else ""))
            if note:
                notes.append(f"\\* {name}, TPR@{_pct(k)}: {note}")
        cells += [str(m.get("n_members", "")), str(m.get("n_nonmembers", ""))]
        lines.append(_row(cells))
        if m.get("small_sample"):
            notes.append(f"{name}: {m['small_sample']}")
    lines.append("")
    if notes:
        lines += notes + [""]
    return lines


def _blind_section(blind: dict, verdict: dict | None) -> list[str]:
    lines = ["## Blind baseline (Das, Zhang & Tramèr 2024)", ""]
    if blind:
        what = blind.get("method", "model-free classifier")
        auc_text = _with_ci(blind.get("auc"), blind.get("auc_ci"))
        lines += [f"Blind baseline ({what}): AUC {auc_text}", ""]
    if verdict:
        lines += [f"**Verdict:** {verdict.get('message', '')}", ""]
    return lines


def _bucket_table(buckets: dict, unit: str) -> list[str]:
    head = ["scorer", f"length ({unit})", "members", "non-members", "AUC [95% CI]"]
    lines = ["## By length", "", _row(head), _row(["---"] * len(head))]
    for scorer, per_bucket in buckets.items():
        for bucket, m in per_bucket.items():
            if "auc" in m:
                auc_cell = _with_ci(m.get("auc"), m.get("auc_ci"))
            else:
                auc_cell = m.get("note", "n/a")
            lines.append(_row([scorer, f"≤{bucket}" if bucket[0] != ">" else bucket,
                               str(m.get("n_members", "")), str(m.get("n_nonmembers", "")),
                               auc_cell]))
    return lines + [""]


def _prompt_length_tables(section: dict) -> list[str]:
    lengths = [str(n) for n in section.get("lengths", [])]
    unit, key = section.get("unit", "tokens"), f"{section.get('fpr', 0.1):g}"
    head = ["scorer", *[f"L = {n}" for n in lengths]]
    intro = (f"Each text cut to its first L {unit} ({section.get('tokenizer', 'the target')}'s tokenizer) "
             "and scored again; texts of at most L tokens are kept whole.")
    lines = ["## By prompt length (Ishihara & Takahashi 2024, Tables 4 and 6)", "", intro, ""]
    cells = {
        "AUC [95% CI]": lambda m: _with_ci(m.get("auc"), m.get("auc_ci")),
        f"TPR@{_pct(key)} FPR [95% CI]": lambda m: _with_ci((m.get("tpr_at_fpr") or {}).get(key),
                                                            (m.get("tpr_at_fpr_ci") or {}).get(key)),
    }
    for caption, cell in cells.items():
        lines += [f"**{caption}**", "", _row(head), _row(["---"] * len(head))]
        for scorer, by_length in section.get("scorers", {}).items():
            lines.append(_row([scorer, *[cell(by_length.get(n) or {}) for n in lengths]]))
        lines.append("")
    counts = section.get("counts", {})
    lines += ["**Texts per length**", "", _row(["", *head[1:]]), _row(["---"] * len(head))]
    for label, field in (("texts", "n"), ("cut to L", "truncated"), (f"kept whole (at most L {unit})", "whole")):
        lines.append(_row([label, *[str((counts.get(n) or {}).get(field, "")) for n in lengths]]))
    return lines + [""]


def _sweep_table(sweep: dict) -> list[str]:
    head = ["name", "rule", "threshold", "flag rate", "FPR", "TPR",
            "corrected prevalence [95% CI]", "t-test p-value"]
    lines = ["## Contamination sweep", "", _row(head), _row(["---"] * len(head))]
    notes = []
    for name, entry in sweep.items():
        thr = entry.get("threshold") or {}
        prev = entry.get("prevalence") or {}
        test = entry.get("dataset_test") or {}
        rule = thr.get("rule", "")
        if thr.get("target_fpr") is not None:
            rule += f" ({_pct(thr['target_fpr'])})"
        lines.append(_row([
            name, rule or "n/a", _num(thr.get("value", prev.get("threshold")), 4),
            _num(prev.get("flag_rate")), _num(prev.get("estimated_fpr", thr.get("realised_fpr"))),
            _num(prev.get("tpr", thr.get("tpr"))),
            _with_ci(prev.get("estimate"), prev.get("ci")) if prev else "n/a",
            _p(test.get("p_value")),
        ]))
        notes += [f"- {name}: {n}" for n in prev.get("notes", [])]
        if thr.get("note"):
            notes.append(f"- {name}: {thr['note']}")
    lines.append("")
    return lines + (notes + [""] if notes else [])


def _fpr_keys(metric_dicts) -> list[str]:
    keys = {k for m in metric_dicts for k in (m.get("tpr_at_fpr") or {})}
    return sorted(keys, key=float)


def _pct(fpr) -> str:
    return f"{100 * float(fpr):g}%"


def _num(value, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    return f"{value:.{digits}f}"


def _with_ci(value, ci) -> str:
    if ci and all(v is not None for v in ci):
        return f"{_num(value)} [{_num(ci[0])}, {_num(ci[1])}]"
    return _num(value)


def _p(value) -> str:
    if value is None:
        return "n/a"
    return f"{value:.2e}" if value < 1e-3 else f"{value:.3f}"


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"
