"""``bbmia documents``: per-document contamination rates (Shi et al. 2024, §5)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from ..text import DEFAULT_SEGMENTER
from .app import app, messages, user_errors
from .audit import run_audit
from .common import TargetOptions, check_output, format_table, with_target_options
from .options import SINGLE_SCORER_HELP, one_scorer_spec
from .spend import print_dry_run

if TYPE_CHECKING:
    from ..audits.common import AuditResult

TOP_SHOWN = 20  # documents listed on the terminal (the report lists all)


OUT_OPTION = typer.Option(None, "--out", help="output folder (default: runs/documents-<docs>/)")  # ruff B008


@app.command("documents")
@with_target_options
def documents_command(
    docs: str = typer.Argument(..., help="a folder of .txt files (doc_id = file stem) or a JSONL with doc_id, text "
                               "and optional label (1 member, 0 non-member: gives an AUC over documents)"),
    calibration: str = typer.Option(..., help="labelled validation documents (same formats, label on every one): "
                                    "the threshold is chosen on their chunks"),
    scorers: str | None = typer.Option(None, "--scorers", help=SINGLE_SCORER_HELP),
    scorer_alias: str | None = typer.Option(None, "--scorer", hidden=True, help="same as --scorers"),
    chunk_words: int | None = typer.Option(None, "--chunk-words", help="words per chunk (default 512; words of "
                                              "--segmenter)"),
    chunk_tokens: int | None = typer.Option(None, "--chunk-tokens", help="tokens per chunk (target's tokenizer) "
                                               "instead of words"),
    segmenter: str = typer.Option(DEFAULT_SEGMENTER, help="what a word is: whitespace, chars, japanese (MeCab, "
                                  "extra ja) or auto"),
    chunks_per_doc: int | None = typer.Option(None, "--chunks-per-doc", help="score a seeded sample of at most "
                                                 "K chunks per document (default: all)"),
    rule: str = typer.Option("fpr", help="threshold rule: fpr (target FPR, conformal), max_accuracy (the paper's) "
                             "or max_f1"),
    target_fpr: float = typer.Option(0.05, "--target-fpr", help="FPR the threshold is set for (rule fpr)"),
    n_boot: int = typer.Option(1000, "--n-boot", help="bootstrap resamples of the AUC-over-documents "
                                "CI and the corrected rates' CIs (0 = neither)"),
    seed: int = typer.Option(0, help="seed of the chunk sample and the bootstrap"),
    paraphrases: str | None = typer.Option(None, "--paraphrases", help="with --scorers decop: a JSONL file of rows "
                                           "{\"text\": chunk, \"paraphrases\": [three strings]} (default: a "
                                           "deterministic substitute, numbers changed; docs/text_only.md)"),
    out_dir: Path | None = OUT_OPTION,
    overwrite: bool = typer.Option(False, help="rescore instead of resuming the score files"),
    quiet: bool = typer.Option(False, help="no progress bars or messages"),
    json_out: bool = typer.Option(False, "--json", help="make the last line of stdout a JSON summary"),
    *,
    target: TargetOptions,
):
    """Contamination rate of every document: the share of its chunks whose score is above a
    threshold chosen on labelled validation documents, with a Wilson 95% CI, and the rate
    corrected for the threshold's FPR and TPR with a bootstrap 95% CI (the document's share and
    the FPR and TPR of resampled validation documents); documents ranked, most contaminated first.

    Writes scores.jsonl and calibration_scores.jsonl (resumable), chunks.jsonl, rates.png,
    documents.json and documents.md; with --dry-run only the expected cost of scoring the chunks.
    """
    with user_errors():
        from ..audits.common import dataset_slug
        from ..audits.documents import (
            DEFAULT_CHUNK_WORDS,
            DocumentsConfig,
            chunk_groups,
            prepare_documents,
            run_documents,
        )

        if chunk_words is None and chunk_tokens is None:
            chunk_words = DEFAULT_CHUNK_WORDS
        config = DocumentsConfig(docs=docs, calibration=calibration,
                                 scorer=with_paraphrases(one_scorer_spec(scorers, scorer_alias), paraphrases),
                                 chunk_words=chunk_words,
                                 chunk_tokens=chunk_tokens, segmenter=segmenter, chunks_per_doc=chunks_per_doc,
                                 rule=rule, target_fpr=target_fpr, seed=seed, n_boot=n_boot, resume=not overwrite,
                                 score_tolerance=target.score_tolerance)
        plan = prepare_documents(config)
        out = check_output(out_dir or Path("runs") / f"documents-{dataset_slug(docs.rstrip('/'))}", folder=True)
        log = messages(quiet)

        def show(result: AuditResult) -> None:
            s = result.summary
            rows = [[r["doc_id"], r.get("label"), f"{r['n_scored']}/{r['n_chunks']}", r["rate"], _interval(r["rate_ci"]),
                     r["corrected"], _interval(r["corrected_ci"])] for r in s["documents"][:TOP_SHOWN]]
            typer.echo(format_table(["doc_id", "label", "scored", "rate", "95% CI", "corrected", "95% CI"], rows))
            if len(s["documents"]) > TOP_SHOWN:
                typer.echo(f"... {len(s['documents']) - TOP_SHOWN} more documents in the report")
            typer.echo(f"threshold {s['threshold']} ({s['threshold_rule']}): realised FPR {s['threshold_realised_fpr']:.3f}, "
                       f"TPR {s['threshold_tpr']:.3f} on the validation chunks")
            if s["auc_documents"] is not None:
                typer.echo(f"AUC over documents: {s['auc_documents']:.3f}, 95% CI {_interval(s['auc_documents_ci'])}")

        run_audit(target, [plan.scorer],
                  lambda b: print_dry_run(chunk_groups(plan, b["target"]), [plan.scorer], b, json_out),
                  lambda b: run_documents(plan, b, out, progress=not quiet, log=log, yes=target.yes), show, json_out)


def with_paraphrases(spec: str, paraphrases: str | None) -> str:
    """``spec`` with ``paraphrases=FILE`` among its parameters when ``--paraphrases`` is given.

    Raises:
        BlackboxMIAError: ``--paraphrases`` with another scorer than ``decop``, or a path that a
            spec cannot hold (a comma or ``=``).
    """
    from ..types import BlackboxMIAError

    if paraphrases is None:
        return spec
    name, colon, params = spec.partition(":")
    if name != "decop":
        raise BlackboxMIAError(f"--paraphrases is read by --scorers decop, not {name!r}")
    if "," in paraphrases or "=" in paraphrases:
        raise BlackboxMIAError(f"--paraphrases: rename {paraphrases!r}: a path with ',' or '=' cannot go in a scorer spec")
    return f"{name}:{params + ',' if colon and params else ''}paraphrases={paraphrases}"


def _interval(bounds: list[float] | None) -> str:
    """``[low, high]`` to 3 decimals, or ``-``."""
    return "-" if bounds is None else f"[{bounds[0]:.3f}, {bounds[1]:.3f}]"
