"""The sweep's first lines: the dataset-level verdict, then the member fraction.

A sweep answers two questions, in this order (docs/contamination.md): is any swept item a member
(:func:`~blackbox_mia.evaluation.detection.detection_verdict`, an exact test against the
reference non-members), and how many (the prevalence interval of
:func:`~blackbox_mia.evaluation.estimate_prevalence`). The reference is the best non-member
set the sweep has: known non-members (``--calibration``, ``--nonmembers``) before the control
built from the benchmark, whose perturbed items are not exchangeable with the benchmark's own.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ...canary import load_manifest
from ...evaluation.dataset_inference import MIN_PER_HALF, dataset_inference
from ...evaluation.detection import detection_verdict
from ...option_names import named
from ...results import ScoredText
from ...scorers import Scorer, is_reference_role, parse_scorer, reference_role
from ...types import BlackboxMIAError

CONTROL_CAVEAT = (
    "The reference is the control built from the benchmark: its items are the benchmark's with new numbers, "
    "so they are not exchangeable with the swept items. Where the model memorised a problem its control "
    "inherits part of that (the test loses power); where new numbers make a text less likely than the original "
    f"to any model, the test may alarm without contamination. Known non-members ({named('nonmembers')}) make the "
    "level exact."
)


def sweep_verdict(bench: np.ndarray, nonmembers: np.ndarray | None, control: np.ndarray | None,
                  members: np.ndarray | None, source: str, seed: int) -> dict:
    """The verdict of the swept scores against the sweep's reference non-members.

    Args:
        bench: shape (N, F), the swept items' scores (the sweep's scorer, then ``--features``).
        nonmembers: shape (n, F), known non-members (``--calibration``'s label-0 items or
            ``--nonmembers``), or None when the control is the only non-member set.
        control: shape (n_c, F), the control's scores, or None.
        members: shape (m, F), ``--calibration``'s members, or None: with F > 1 the verdict
            tests the features' combination (fitted on them), else the sweep's scorer alone.
        source: where the reference comes from, as the report's roles name it.
        seed: seed of the dataset-inference test's random halves.

    Returns:
        :func:`~blackbox_mia.evaluation.detection.detection_verdict`'s dict, with ``caveat``
        (None, or why the level is not exact) and ``dataset_inference`` (Maini et al. 2024 on
        the same items and every feature, with its false-positive check:
        :func:`~blackbox_mia.evaluation.dataset_inference.dataset_inference`; None when the
        reference has fewer than 8 items).

    Raises:
        BlackboxMIAError: no reference at all, or as ``detection_verdict``.
    """
    reference = nonmembers if nonmembers is not None else control
    verdict = detection_verdict(bench, reference, f"reference non-members ({source})", members=members)
    enough = len(reference) >= 4 * MIN_PER_HALF and len(bench) >= 2 * MIN_PER_HALF
    inference = dataset_inference(bench, reference, seed=seed) if enough else None
    return {**verdict, "caveat": CONTROL_CAVEAT if nonmembers is None else None, "dataset_inference": inference}


def verdict_notes(verdict: dict) -> list[str]:
    """The report's notes on the verdict: the reference's caveat, then dataset inference."""
    notes = [verdict["caveat"]] if verdict["caveat"] else []
    inference = verdict["dataset_inference"]
    if inference is not None:
        check = inference["false_positive_check"]
        notes.append(f"Dataset inference (Maini et al. 2024; {inference['level']}): p = {inference['p_value']:.3g} on "
                     f"{inference['n_suspect_test']} swept vs {inference['n_validation_test']} reference items held "
                     f"out from the fit; its false-positive check (two reference halves) p = {check['p_value']:.3g}"
                     + ("" if check["passed"] else f", at or below alpha {inference['alpha']:g}: it alarms on a "
                        "homogeneous reference in alpha of runs, so treat dataset inference's p with caution") + ".")
    return notes


def sweep_headline(prevalence: dict, n_swept: int, verdict: dict) -> str:
    """Two lines: the verdict with its p-value, then the member fraction (the estimate with its
    CI when identifiable, else the lower bound)."""
    bound = prevalence["lower_bound"]
    lower = (f"at least {bound['lower_bound']:.3f} of the {n_swept} swept items are members "
             f"(one-sided {100 * bound['confidence']:g}% lower bound, valid whatever the TPR)")
    if prevalence["estimate"] is not None:
        lo, hi = prevalence["ci"]
        fraction = (f"Estimated member fraction {prevalence['estimate']:.3f}, {100 * prevalence['ci_level']:g}% CI "
                    f"[{lo:.3f}, {hi:.3f}] of the {n_swept} swept items; {lower}.")
    elif prevalence["identifiable"] is False:
        fraction = (f"Not identifiable at this signal (TPR - FPR simultaneous lower bound "
                    f"{prevalence['youden_j_lower']:.3f}): no point estimate; {lower}.")
    else:
        fraction = (f"No known member: {lower}; the member fraction itself needs a TPR "
                    f"({named('calibration')} with members).")
    return f"{verdict['sentence']}\n{fraction}"


REFERENCE_MODEL_ASSUMPTION = (
    "assumes the reference model did not see the benchmark; if it did, its log-likelihoods rise with the target's on "
    "the members and the feature loses signal: the test loses power, never validity, since the reference model scores "
    "the swept items and the reference non-members alike (docs/contamination.md)")


def reference_model_line(backends: dict, scorers: Sequence[Scorer]) -> str | None:
    """The headline's line on the reference models (``--ref``, repeatable): their names (model,
    and endpoint for an API), the scorers that read them, and what they assume
    (:data:`REFERENCE_MODEL_ASSUMPTION`); None without a reference model.

    Args:
        backends: role -> the backend's description (the run configuration's ``backends``).
        scorers: the sweep's scorers.
    """
    described = reference_descriptions(backends)
    if not described:
        return None
    names = [f"{d.get('model') or d.get('backend')}" + (f" at {d['base_url']}" if d.get("base_url") else "")
             for d in described]
    readers = [s.label for s in scorers if reads_reference(s)]
    used = f"read by {', '.join(readers)}" if readers else "read by no scorer (add ref to the features)"
    label = "Reference model" if len(names) == 1 else f"Reference models ({len(names)}, averaged)"
    return f"{label}: {', '.join(names)} ({used}); {REFERENCE_MODEL_ASSUMPTION}."


def reference_descriptions(backends: dict) -> list[dict]:
    """The reference models' descriptions in role order (:func:`~blackbox_mia.scorers.reference_role`:
    ``reference``, ``reference2``...); empty without one.

    Args:
        backends: role -> the backend's description (the run configuration's ``backends``).
    """
    described, index = [], 0
    while reference_role(index) in backends:
        described.append(backends[reference_role(index)])
        index += 1
    return described


def reference_models(backends: dict) -> str | None:
    """The summary's ``reference_model``: the reference models' names (model, else backend
    kind) joined by ", " in ``--ref`` order; None without one.

    Args:
        backends: role -> the backend's description (the run configuration's ``backends``).
    """
    return ", ".join(d.get("model") or d.get("backend") for d in reference_descriptions(backends)) or None


def reads_reference(scorer: Scorer) -> bool:
    """Whether ``scorer`` reads a reference model's log-probs (a need of a reference role)."""
    return any(is_reference_role(need.role) for need in scorer.needs("a b c"))


def with_reference_feature(features: str, scorers: tuple[Scorer, ...],
                           references: int) -> tuple[str, tuple[Scorer, ...]]:
    """``(features, scorers)`` plus the feature ``ref`` (``ref:refs=N`` for N > 1 reference
    models) when reference models are given and none of ``scorers`` (the sweep's scorer and
    features, as read from ``features`` and the scorer's spec) reads them: ``--ref`` alone makes
    the reference models a feature of the combined verdict.

    Args:
        references: the number of reference models (``--ref`` given that many times; 0: none).

    Raises:
        BlackboxMIAError: a scorer that reads another number of reference models than given.
    """
    if references == 0:  # a scorer reading a reference is refused by the runner (check_compatible)
        return features, scorers
    readers = [s for s in scorers if reads_reference(s)]
    for reader in readers:
        read = len({need.role for need in reader.needs("a b c") if is_reference_role(need.role)})
        if read != references:
            raise BlackboxMIAError(f"scorer {reader.label!r} reads {read} reference model(s) but --ref is given "
                                   f"{references} times: use ref:refs={references}")
    if readers:
        return features, scorers
    ref = "ref" if references == 1 else f"ref:refs={references}"
    return (f"{features},{ref}" if features else ref), (*scorers, parse_scorer(ref))


def suspicious_table(rows: list[dict]) -> str:
    """Markdown table of the highest-scoring items (id, score, start of the text)."""
    lines = ["## Most suspicious items (highest scores)", "", "| id | score | text |", "| --- | --- | --- |"]
    for row in rows:
        text = " ".join(row["text"].split()).replace("|", "\\|")
        lines.append(f"| {row['id']} | {row['score']:.4f} | {text} |")
    return "\n".join(lines) + "\n"


def planted_fraction(manifest_path: Path | None, rows: Sequence[ScoredText]) -> dict | None:
    """The true member fraction of the swept items (``rows``) under a canary manifest, or None
    without one: ``{"fraction", "n_members", "n_scored", "manifest"}``."""
    if manifest_path is None:
        return None
    members = set(load_manifest(manifest_path)["member_ids"])
    n_members = sum(r.id in members for r in rows)
    return {"fraction": n_members / len(rows) if rows else math.nan, "n_members": n_members,
            "n_scored": len(rows), "manifest": str(manifest_path)}
