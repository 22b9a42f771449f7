"""``bbmia eval`` (MIA metrics on labelled data) and ``bbmia sweep`` (benchmark contamination)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from ..canary.dataset import dataset_help
from ..datasets.fields import Fields, with_fields
from ..text import DEFAULT_SEGMENTER
from .app import app, messages, user_errors
from .audit import run_audit
from .common import TargetOptions, check_output, format_table, with_field_options, with_target_options
from .options import SINGLE_SCORER_HELP, one_scorer_spec, parse_numbers
from .spend import print_dry_run

if TYPE_CHECKING:
    from ..audits.common import AuditResult
    from ..audits.sweep.plan import SweepConfig
    from ..scorers import Scorer

METHODS_HELP = ("auto: log-prob scorers where the target gives usable log-probs at an acceptable cost, else the "
                "text-only tests (samia, cdd; ts_guessing on multiple-choice items); text-only; logprobs")


@app.command("eval")
@with_target_options
@with_field_options
def eval_command(
    dataset: str = typer.Argument(..., help=f"labelled dataset: {dataset_help()}"),
    scorers: Optional[str] = typer.Option(
        None, help="comma-separated scorer specs, e.g. 'loss,min_k:k=10,pac' (default: every default "
        "scorer the target supports; min_k_pp needs --local)"),
    out_dir: Optional[Path] = typer.Option(None, "--out", help="output folder (default: runs/eval-<dataset>/)"),
    limit: Optional[int] = typer.Option(None, help="evaluate only the first N items"),
    n_boot: int = typer.Option(1000, "--n-boot", help="bootstrap resamples per confidence interval (0 = none)"),
    seed: int = typer.Option(0, help="seed of the bootstrap and of the blind baseline's folds"),
    blind_folds: int = typer.Option(5, "--blind-folds", help="cross-validation folds of the blind baseline"),
    segmenter: str = typer.Option(
        DEFAULT_SEGMENTER, help="what the length buckets count: whitespace (words), chars (characters), japanese "
        "(MeCab words, extra ja) or auto (japanese for mostly kana/kanji texts, else whitespace)"),
    truncate_tokens: Optional[str] = typer.Option(
        None, "--truncate-tokens", help="prompt-length ablation: also score the first L tokens (target's "
        "tokenizer) of each text for each L, e.g. '32,64,128,256' (Ishihara & Takahashi 2024)"),
    methods: Optional[str] = typer.Option(None, help=METHODS_HELP),
    drop_unscored: bool = typer.Option(
        False, "--drop-unscored", help="leave out the texts without a usable score (tokens the endpoint resolves only "
        "by bounds) and count them in the report, instead of stopping"),
    overwrite: bool = typer.Option(False, help="rescore instead of resuming the scores file"),
    quiet: bool = typer.Option(False, help="no progress bars or messages"),
    json_out: bool = typer.Option(False, "--json", help="make the last line of stdout a JSON summary"),
    *,
    target: TargetOptions,
    fields: Fields,
):
    """AUC and TPR at 0.1/1/5/10% FPR with bootstrap 95% CIs, per-length results, ROC plots and a
    blind text-only baseline, on a LABELLED dataset (1 = member, 0 = non-member).

    Writes scores.jsonl (resumable), roc_linear.png, roc_log.png, eval.json and eval.md; with
    --truncate-tokens also scores_L<L>.jsonl per length (resumable) and prompt_length_auc.png.
    """
    with user_errors():
        from ..audits import (
            EvalConfig,
            dataset_slug,
            prepare_eval,
            run_eval,
        )
        from ..audits.routing import check_methods, routed_audit
        from ..scorers import default_scorer_specs, split_specs
        from ..types import BlackboxMIAError

        check_methods(methods)
        if methods and scorers:
            raise BlackboxMIAError("give --scorers or --methods, not both")
        specs = tuple(split_specs(scorers)) if scorers else default_scorer_specs(vocab_stats=target.white_box())
        lengths = parse_numbers(truncate_tokens, "--truncate-tokens") if truncate_tokens else ()
        config = EvalConfig(dataset=with_fields(dataset, fields), scorers=specs, n_boot=n_boot, seed=seed,
                            blind_folds=blind_folds, segmenter=segmenter, truncate_tokens=lengths, limit=limit,
                            resume=not overwrite, drop_unscored=drop_unscored,
                            score_tolerance=target.score_tolerance)
        plan = prepare_eval(config, cache_dir=target.cache_dir)
        out = check_output(out_dir or Path("runs") / f"eval-{dataset_slug(plan.meta['name'])}", folder=True)
        log = messages(quiet)

        def show(result: AuditResult) -> None:
            s = result.summary
            fprs = [f"{f:g}" for f in config.fprs]
            header = ["scorer", "AUC", "CI low", "CI high", *[f"TPR@{100 * f:g}%" for f in config.fprs]]
            rows = []
            for name, auc in s["auc"].items():
                lo, hi = s["auc_ci"][name] or (None, None)
                rows.append([name, auc, lo, hi, *(s["tpr_at_fpr"][name][k] for k in fprs)])
            if s["blind_auc"] is not None:
                lo, hi = result.report["blind_baseline"].get("auc_ci") or (None, None)
                rows.append(["blind (TF-IDF)", s["blind_auc"], lo, hi, *([None] * len(fprs))])
            typer.echo(format_table(header, rows))
            shift = result.report.get("distribution_shift")
            if shift and not shift["distribution_shift"]:  # a shift is one of the report's warnings
                typer.echo(shift["message"])
            if "prompt_length" in s:
                typer.echo(prompt_length_table(s["prompt_length"]))

        dry_run, run = routed_audit(
            methods, [it.text for it in plan.items], specs,
            lambda chosen: plan if chosen == specs else prepare_eval(replace(config, scorers=chosen), target.cache_dir),
            lambda p, backends: run_eval(p, backends, out, progress=not quiet, log=log, yes=target.yes),
            lambda p, backends: print_dry_run(p.scored_groups(backends["target"].codec), p.scorers, backends, json_out),
            log)
        run_audit(target, plan.scorers, dry_run, run, show, json_out)


def prompt_length_table(summary: dict) -> str:
    """The ablation's AUC and TPR@10%FPR per scorer (rows) and prompt length (columns), as text."""
    lengths = [str(n) for n in summary["lengths"]]
    tpr = f"TPR@{100 * summary['fpr']:g}%"
    header = ["scorer", *[f"AUC L={n}" for n in lengths], *[f"{tpr} L={n}" for n in lengths]]
    rows = [[name, *[by_length[n] for n in lengths], *[summary["tpr_at_fpr"][name][n] for n in lengths]]
            for name, by_length in summary["auc"].items()]
    rows.append(["(texts cut to L)", *[summary["counts"][n]["truncated"] for n in lengths], *([""] * len(lengths))])
    return format_table(header, rows)


@app.command("sweep")
@with_target_options
@with_field_options
def sweep_command(
    dataset: str = typer.Argument(..., help=f"benchmark: {dataset_help()}"),
    scorers: str | None = typer.Option(None, "--scorers", help=SINGLE_SCORER_HELP),
    scorer_alias: str | None = typer.Option(None, "--scorer", hidden=True, help="same as --scorers"),
    features: str = typer.Option(
        "", help="more scorers, scored in the same pass, e.g. 'loss,zlib,min_k:k=5,min_k:k=10,min_k:k=50': with "
        "--calibration members the verdict tests their combination with --scorers (docs/contamination.md)"),
    rule: str = typer.Option("fpr", help="threshold rule: fpr (target FPR on non-members), max_accuracy or "
                             "max_f1 (these two need --calibration with members)"),
    target_fpr: float = typer.Option(0.05, "--target-fpr", help="FPR the threshold is set for (rule fpr)"),
    calibration: Optional[str] = typer.Option(
        None, help="labelled calibration set: any DATASET spec with labels (a data file, hf:..., mimir:...; its "
        "fields as SPEC?text_field=...&label_field=...), canary, or canary:PATH (known members and non-members of a "
        "canary model)"),
    calibration_fraction: float = typer.Option(
        1.0, "--calibration-fraction", help="calibrate on this seeded, label-stratified share of --calibration; "
        "the rest stay in the swept benchmark, unlabelled (a held-out check on a canary)"),
    nonmembers: Optional[str] = typer.Option(
        None, help="known non-members only (any DATASET spec, e.g. a data file); TPR then unknown"),
    assumed_tpr: Optional[float] = typer.Option(
        None, "--assumed-tpr", help="TPR to assume without known members (else the prevalence is reported "
        "as unavailable)"),
    control: Optional[bool] = typer.Option(
        None, "--control/--no-control", help="non-member control from the benchmark with new numbers "
        "(default: on for GSM8K/AQuA problems)"),
    control_seed: int = typer.Option(0, "--control-seed", help="seed of the control's new numbers"),
    limit: Optional[int] = typer.Option(None, help="sweep only the first N benchmark items"),
    top: int = typer.Option(10, help="list this many highest-scoring items"),
    seed: int = typer.Option(0, help="seed of --calibration-fraction's draw and of the dataset-inference test's random halves"),
    out_dir: Optional[Path] = typer.Option(None, "--out", help="output folder (default: runs/sweep-<dataset>/)"),
    methods: Optional[str] = typer.Option(None, help=METHODS_HELP.replace(
        "the text-only tests (samia, cdd; ts_guessing on multiple-choice items)", "the text-only scorer samia")
        + " (a text-only --scorer, e.g. samia:n=5, is kept)"),
    drop_unscored: bool = typer.Option(
        False, "--drop-unscored", help="leave out the texts without a usable score (tokens the endpoint resolves only "
        "by bounds) and count them in the report, instead of stopping"),
    overwrite: bool = typer.Option(False, help="rescore instead of resuming the score files"),
    quiet: bool = typer.Option(False, help="no progress bars or messages"),
    json_out: bool = typer.Option(False, "--json", help="make the last line of stdout a JSON summary"),
    *,
    target: TargetOptions,
    fields: Fields,
):
    """Did a benchmark leak into the target, and how much of it? First the verdict: an exact
    test (p-value) of the swept items against the reference non-members (--calibration,
    --nonmembers, else the control); then the flag rate at a calibrated threshold, the member
    fraction corrected for its FPR and TPR with an exact interval, and a one-sided Welch t-test
    of the benchmark against a control built from it (Maini et al. 2024).

    With --ref MODEL (a reference model that did not see the benchmark, e.g. bbmia canary train
    --reference-of; repeatable: their mean), the feature ref (target minus reference log-likelihood)
    joins the verdict's features; the report names the reference models and what they assume.

    Writes scores.jsonl (resumable), control/calibration scores, histogram.png, sweep.json, sweep.md.
    """
    with user_errors():
        from ..audits import SweepConfig
        from ..audits.sweep.plan import sweep_scorers
        from ..audits.sweep.verdict import with_reference_feature
        from ..controls import ControlConfig

        scorer = one_scorer_spec(scorers, scorer_alias)
        features, read = with_reference_feature(features, sweep_scorers(scorer, features), len(target.references))  # read once
        config = SweepConfig(
            dataset=with_fields(dataset, fields), scorer=scorer, features=features, rule=rule,
            target_fpr=target_fpr, calibration=calibration,
            calibration_fraction=calibration_fraction, nonmembers=nonmembers, assumed_tpr=assumed_tpr, control=control,
            control_config=ControlConfig(seed=control_seed), limit=limit, seed=seed, top=top,
            resume=not overwrite, drop_unscored=drop_unscored, score_tolerance=target.score_tolerance,
        )
        _sweep(config, read, target, methods, out_dir, quiet, json_out)


def _sweep(config: SweepConfig, scorers: tuple[Scorer, ...], target: TargetOptions, methods: str | None,
           out_dir: Path | None, quiet: bool, json_out: bool) -> None:
    """``bbmia sweep`` once its configuration is read: plan it (items, control, calibration),
    route it by ``--methods`` (log-prob scorers or the text-only one), then run it, or with
    ``--dry-run`` estimate it. ``scorers``: ``config``'s scorer and features, read once.

    Raises:
        BlackboxMIAError: a bad ``--methods`` or ``--out``, or what planning and running raise.
    """
    from ..audits import dataset_slug, prepare_sweep, run_sweep
    from ..audits.routing import TEXT_ONLY_SWEEP_SCORER, check_methods, routed_audit
    from ..option_names import as_flags

    check_methods(methods)
    log = messages(quiet)
    if out_dir is not None:  # checked before the control is built (seconds on GSM8K)
        check_output(out_dir, folder=True)
    plan = prepare_sweep(config, target_model=target.local_model, cache_dir=target.cache_dir, log=log, scorers=scorers)
    out = check_output(out_dir or Path("runs") / f"sweep-{dataset_slug(plan.meta['name'])}", folder=True)

    def plan_for(specs: tuple[str, ...]):
        if specs == (config.scorer,) or not plan.scorer.needs_logprobs:  # a text-only --scorers runs anywhere
            return plan
        return prepare_sweep(replace(config, scorer=specs[0], features=""),  # the log-prob --features go too
                             target_model=target.local_model, cache_dir=target.cache_dir)

    dry_run, run = routed_audit(
        methods, [it.text for it in plan.items], (config.scorer,), plan_for,
        lambda p, backends: run_sweep(p, backends, out, progress=not quiet, log=log, names=as_flags, yes=target.yes),
        lambda p, backends: print_dry_run(p.scored_groups(), p.scorers, backends, json_out), log,
        text_only=(TEXT_ONLY_SWEEP_SCORER,))
    run_audit(target, plan.scorers, dry_run, run,
              lambda result: typer.echo(result.summary["headline"] + "\n" + format_table(
                  ["", next(iter(result.report["sweep"]))], sweep_rows(result.summary))),
              json_out)


def sweep_rows(summary: dict) -> list[list]:
    """The console table of a sweep summary: roles, threshold, rates with their CIs, the
    estimate (or why there is none), the lower bound, the control's contamination, the t-test."""
    roles, prevalence = summary["roles"], summary["prevalence"]
    fpr_lo, fpr_hi = summary["realised_fpr_ci"]
    target = "" if summary["target_fpr"] is None else f" (target {summary['target_fpr']:g})"
    if prevalence["estimate"] is not None:
        lo, hi = prevalence["ci"]
        estimate = f"{prevalence['estimate']:.3f} [{lo:.3f}, {hi:.3f}]"
    elif summary["identifiable"] is False:
        estimate = "not identifiable at this signal"
    else:
        estimate = "n/a (no known member: TPR unknown)"
    verdict = summary["verdict"]
    rows = [
        [f"contamination detected at alpha {verdict['alpha']:g} ({verdict['test']})",
         f"{'yes' if verdict['detected'] else 'no'} (p = {verdict['p_value']:.3g})"],
        ["benchmark items / swept", f"{roles['benchmark_items']} / {roles['swept']}"],
        ["calibration members / non-members (disjoint)", f"{roles['calibration_members']} / {roles['calibration_nonmembers']}"],
        ["threshold", summary["threshold"]],
        ["flag rate (swept) [95% CI]", _with_interval(summary["flag_rate"], summary["flag_rate_ci"])],
        [f"realised FPR [95% CI]{target}", f"{summary['realised_fpr']:.4f} [{fpr_lo:.4f}, {fpr_hi:.4f}]"],
        ["TPR (calibration members) [95% CI]", _with_interval(summary["tpr"], summary["tpr_ci"])],
        ["TPR - FPR, simultaneous lower bound", summary["tpr_minus_fpr_lower"]],
        ["member fraction [95% CI]", estimate],
        [f"lower bound ({100 * prevalence['lower_bound_confidence']:g}%, one-sided)", prevalence["lower_bound"]],
        ["control items with a flagged source (share)", summary["control_contamination"]],
        ["t-test p-value", "n/a" if summary["p_value"] is None else f"{summary['p_value']:.3g}"],
    ]
    if "planted" in summary:
        rows.append(["planted member fraction (swept)", summary["planted"]])
    return rows


def _with_interval(value: float | None, interval: list[float] | None) -> str | None:
    """``value [low, high]`` to 3 decimals; the value alone when it has no interval (an assumed
    TPR); None when there is no value."""
    if value is None:
        return None
    return f"{value:.3f}" + ("" if interval is None else f" [{interval[0]:.3f}, {interval[1]:.3f}]")
