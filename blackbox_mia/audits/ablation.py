"""Prompt-length ablation of membership scores: ``bbmia eval --truncate-tokens 32,64,128,256``.

Each text is cut to its first L tokens of the TARGET's tokenizer (the backend's
:class:`~blackbox_mia.tokenizers.TokenCodec`) and scored again by every scorer; the AUC and the
TPR at 10% FPR of each (scorer, L), with bootstrap CIs, form the scorer × L table of Ishihara &
Takahashi 2024 (their Tables 4 and 6: detection improves with the prompt length), drawn as a
heat map too.

The cut is made at a character boundary: the first L tokens' bytes are decoded and a character
whose bytes those tokens only begin (a byte-level token inside a multi-byte character) is left
out, so no U+FFFD appears. A text of at most L tokens is kept whole, and counted.
"""

from __future__ import annotations

import codecs
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ..backends.base import Backend
from ..datasets import Item
from ..evaluation import evaluate_scores
from ..evaluation.plots import plot_heatmap
from ..option_names import named
from ..runner import score_items
from ..scorers import TARGET, Scorer
from ..tokenizers import TokenCodec
from ..types import BlackboxMIAError
from .common import score_column

TABLE_FPR = 0.1  # the FPR of the table's TPR column (the study's TPR@10%FPR)
HEATMAP_FILE = "prompt_length_auc.png"


def scores_file(length: int) -> str:
    """The scores file of the texts cut to ``length`` tokens, in the audit's output folder."""
    return f"scores_L{length}.jsonl"


@dataclass(frozen=True)
class Truncated:
    """A text cut to its first tokens.

    Attributes:
        text: the first ``n_tokens`` tokens' complete characters (the whole text when kept whole).
        n_tokens: tokens of the original text the cut keeps (``min(L, tokens in the text)``).
        whole: the text has at most L tokens and is kept unchanged.
    """

    text: str
    n_tokens: int
    whole: bool


def truncate_tokens(codec: TokenCodec, text: str, length: int) -> Truncated:
    """``text`` cut to its first ``length`` tokens of ``codec``, at a character boundary.

    The first ``length`` ids are turned back into bytes (:meth:`TokenCodec.token_bytes`) and
    decoded as UTF-8; bytes that only begin a character (the cut fell inside it) are dropped.

    Args:
        codec: the target's tokenizer.
        text: the text.
        length: tokens to keep (>= 1).

    Returns:
        The :class:`Truncated` text; ``whole`` when ``text`` has at most ``length`` tokens.

    Raises:
        BlackboxMIAError: ``length`` < 1; the first ``length`` tokens hold no complete
            non-space character (nothing to score).
    """
    if isinstance(length, bool) or not isinstance(length, int) or length < 1:
        raise BlackboxMIAError(f"a token length must be an integer >= 1, got {length!r}")
    ids = codec.encode(text)
    if len(ids) <= length:
        return Truncated(text, len(ids), True)
    data = b"".join(codec.token_bytes(i) for i in ids[:length])
    cut = codecs.getincrementaldecoder("utf-8")().decode(data, final=False)  # holds back a partial character
    if not cut.strip():
        raise BlackboxMIAError(
            f"the first {length} tokens of a text hold no complete non-space character ({text[:40]!r}...): "
            f"nothing to score; use larger {named('truncate_tokens')}"
        )
    return Truncated(cut, length, False)


def truncated_items(items: Sequence[Item], codec: TokenCodec, length: int) -> tuple[list[Item], int]:
    """``items`` with each text cut to its first ``length`` tokens (:func:`truncate_tokens`), and
    how many were kept whole: the texts the ablation scores at L = ``length``.

    Raises:
        BlackboxMIAError: as :func:`truncate_tokens`.
    """
    cuts = [truncate_tokens(codec, it.text, length) for it in items]
    return [replace(it, text=cut.text) for it, cut in zip(items, cuts)], sum(cut.whole for cut in cuts)


@dataclass(frozen=True)
class AblationResult:
    """What the ablation produced.

    Attributes:
        section: the report's ``prompt_length`` section (see :func:`run_prompt_length_ablation`).
        summary: ``{"lengths", "fpr", "auc", "auc_ci", "tpr_at_fpr", "counts"}`` for the CLI's
            ``--json`` line: per scorer, per L (string keys).
        plot: the heat map's path.
    """

    section: dict
    summary: dict
    plot: Path


def run_prompt_length_ablation(
    items: Sequence[Item],
    scorers: Sequence[Scorer],
    backends: dict[str, Backend],
    lengths: Sequence[int],
    out_dir: Path,
    run_cfg: dict,
    fprs: Sequence[float],
    n_boot: int,
    seed: int,
    resume: bool = True,
    progress: bool = True,
) -> AblationResult:
    """Score every item cut to each of ``lengths`` tokens and evaluate every (scorer, L).

    Each L has its own resumable scores file (:func:`scores_file`; its configuration is
    ``run_cfg`` plus the length and the tokenizer), written through
    :func:`~blackbox_mia.runner.score_items`: every (text, L) is scored once for all scorers.

    Args:
        items: labelled items (both classes).
        scorers: the scorers.
        backends: ``{"target": ...}`` (its ``codec`` cuts the texts) plus a reference.
        lengths: token lengths L, strictly increasing, each >= 1.
        out_dir: the audit's output folder (scores files and the heat map go there).
        run_cfg: the run's configuration (:func:`~blackbox_mia.runner.run_config`).
        fprs: FPR targets reported besides :data:`TABLE_FPR` (fractions).
        n_boot: bootstrap resamples per CI (0 = no CI).
        seed: bootstrap seed.
        resume: keep the rows already in the scores files (same configuration).
        progress: show progress bars.

    Returns:
        The :class:`AblationResult`. Its ``section``: ``{"unit": "tokens", "tokenizer",
        "lengths", "fpr", "counts": {L: {"n", "truncated", "whole"}}, "scorers": {scorer: {L:
        evaluate_scores(...)}}, "scores_files": {L: name}}``.

    Raises:
        BlackboxMIAError: a text whose cut holds nothing to score, the runner's errors (a
            scorer the backends cannot serve, non-finite scores, a resumed file of another
            configuration).
    """
    codec = backends[TARGET].codec
    all_fprs = tuple(sorted(set(fprs) | {TABLE_FPR}))
    labels = np.array([it.label for it in items], dtype=np.int64)
    counts: dict[int, dict] = {}
    metrics: dict[str, dict[int, dict]] = {s.label: {} for s in scorers}
    for length in lengths:
        cut_items, whole = truncated_items(items, codec, length)
        counts[length] = {"n": len(items), "truncated": len(items) - whole, "whole": whole}
        cfg = {**run_cfg, "truncate_tokens": length, "tokenizer": codec.name}
        rows = score_items(cut_items, scorers, backends, out_dir / scores_file(length), cfg,
                           resume=resume, progress=progress)
        for s in scorers:
            metrics[s.label][length] = evaluate_scores(labels, score_column(rows, s.label), all_fprs, n_boot, seed)
    key = f"{TABLE_FPR:g}"
    grid = np.array([[metrics[s.label][length]["auc"] for length in lengths] for s in scorers])
    plot = plot_heatmap(grid, [s.label for s in scorers], [str(length) for length in lengths],
                        out_dir / HEATMAP_FILE, title="AUC by prompt length", xlabel="prompt length L (tokens)",
                        colorbar="AUC")
    section = {
        "unit": "tokens",
        "tokenizer": codec.name,
        "lengths": list(lengths),
        "fpr": TABLE_FPR,
        "counts": counts,
        "scorers": metrics,
        "scores_files": {length: scores_file(length) for length in lengths},
    }
    summary = {
        "lengths": list(lengths),
        "fpr": TABLE_FPR,
        "auc": {name: {str(n): m["auc"] for n, m in by.items()} for name, by in metrics.items()},
        "auc_ci": {name: {str(n): m["auc_ci"] for n, m in by.items()} for name, by in metrics.items()},
        "tpr_at_fpr": {name: {str(n): m["tpr_at_fpr"][key] for n, m in by.items()} for name, by in metrics.items()},
        "counts": {str(n): c for n, c in counts.items()},
    }
    return AblationResult(section, summary, plot)
