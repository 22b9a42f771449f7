"""JSON keys renamed so that a false-positive rate says which one it is: ``target_fpr``, the
rate a threshold is set for, or ``realised_fpr``, the rate measured at it (issue 28 item 7).

For one release every renamed key is also written under its old name, with the same value, so
that scripts reading earlier results keep working; docs/migration.md lists them. Each table
maps a new key to its old one; delete this module and its callers' aliases in the next release.
"""

from __future__ import annotations

from collections.abc import Mapping

THRESHOLD_KEYS = {"realised_fpr": "fpr"}
"""A calibrated threshold (:class:`~blackbox_mia.evaluation.calibration.Threshold` as a dict)."""

PREVALENCE_KEYS = {"realised_fpr": "fpr_in_sample", "realised_fpr_ci": "fpr_ci", "estimated_fpr": "fpr"}
"""The sweep's prevalence estimate (:func:`~blackbox_mia.evaluation.estimate_prevalence`)."""

SWEEP_SUMMARY_KEYS = {"realised_fpr": "fpr", "realised_fpr_ci": "fpr_ci"}
"""``bbmia sweep``'s summary (its ``--json`` line)."""

DOCUMENTS_SUMMARY_KEYS = {"threshold_realised_fpr": "threshold_fpr"}
"""``bbmia documents``' summary (its ``--json`` line)."""

SUMMARY_KEYS = {"sweep": SWEEP_SUMMARY_KEYS, "documents": DOCUMENTS_SUMMARY_KEYS}
"""An audit's summary by its report's stem (:func:`blackbox_mia.audits.common.publish`)."""

UNLEARNING_TRUTH_KEYS = {"target_fpr": "fpr"}
"""The unlearning audit's ground-truth label (``truth`` in its summary and report), and an
unlearned canary's ``memorized_before`` rule (its manifest)."""

UNLEARNING_CONFIG_KEYS = {"truth_target_fpr": "truth_fpr"}
"""The unlearning audit's configuration (``config.unlearning`` in its report)."""

UNLEARN_CONFIG_KEYS = {"memorized_target_fpr": "memorized_fpr"}
"""An unlearned canary's settings (its manifest's ``unlearning``; also the names its directory's
hash is computed under, which stay the old ones so that existing canaries keep their paths)."""


def with_old_keys(record: Mapping, renamed: Mapping[str, str]) -> dict:
    """``record`` with each renamed key's old name added, holding the same value.

    Args:
        record: a JSON-ready dict holding the new keys.
        renamed: new key → old key (one of this module's tables).

    Returns:
        A new dict: ``record``'s items, then the old keys.

    Raises:
        KeyError: a new key of ``renamed`` missing from ``record`` (a table out of date).
    """
    return {**record, **{old: record[new] for new, old in renamed.items()}}
