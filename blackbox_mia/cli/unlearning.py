"""``bbmia unlearning`` (the machine-unlearning audit, Shi et al. 2024 §7) and ``bbmia canary
unlearn`` (an unlearned canary to validate it on)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ..backends.registry import BackendSpec
from ..canary.unlearn import FORGET_FILE
from ..canary.unlearn_config import ALL_MEMBERS, GRADIENT_ASCENT
from ..types import BlackboxMIAError
from .app import app, echo_json_line, messages, user_errors
from .audit import run_audit
from .canary import canary_app
from .common import (
    TARGET_OPTIONS,
    BackendFlags,
    TargetOptions,
    backend_options,
    build_from_flags,
    close_all,
    format_table,
    normalized_spec,
    shown_defaults,
)
from .options import parse_numbers, renamed_option, with_dataclass_options
from .spend import print_estimate

if TYPE_CHECKING:
    from ..audits.common import AuditResult
    from ..backends.base import Backend

with_backend_options = with_dataclass_options(BackendFlags, "backend", shown_defaults(backend_options()))


def local_path(spec: BackendSpec) -> Path | None:
    """The model directory of a local backend spec (``local:PATH`` or a bare path), else None."""
    return Path(spec.target) if spec.kind == "local" else None


def default_truth(after: BackendSpec) -> Path | None:
    """The "after" model's directory when it is an unlearned canary (its manifest says so)."""
    from ..canary import MANIFEST
    from ..canary.unlearn import unlearning_record

    path = local_path(after)
    if path is None or not (path / MANIFEST).is_file():
        return None
    return path if unlearning_record(path) is not None else None


# Path options as module-level values (ruff B008).
TRUTH_OPTION = typer.Option(None, "--truth", help="unlearned canary giving the ground truth (default: --after when "
                            "it is one)")
OUT_OPTION = typer.Option(None, "--out", help="output folder (default: runs/unlearning-<dataset>/)")
CANARY_COMPLETION_OPTIONS = "--prompt-words 24 --samples 20 --max-new-tokens 48"
"""The story-completion settings ``bbmia canary unlearn`` prints in its ``bbmia unlearning``
command: a canary's texts (single GSM8K problems, about 100 words) are nearly all shorter than the default 200-word
prompt, which would leave no text to complete; 24-word prompts, 48 new tokens and 20 samples
separated the white-box label best of 192 settings compared on tuning seed 0
(records/unlearning-ground-truth.md, "Story completion"; ``studies/completion_settings.py``)."""


@app.command()
@with_backend_options
def unlearning(
    dataset: str = typer.Argument(..., help="the audited texts: canary:PATH, a JSONL path, gsm8k... (labels not needed)"),
    before: str = typer.Option(..., "--before", help="the original model: a local path, local:PATH or api:MODEL@URL"),
    after: str = typer.Option(..., "--after", help="the unlearned model (needs generation): a spec as --before"),
    window: str | None = typer.Option(None, "--window", help="LOW,HIGH: flag a text when LOW < ratio < HIGH "
                                      "(default 1/1.15,1.15)"),
    flag_least_changed: float | None = typer.Option(None, "--flag-least-changed", help="F in (0, 1), instead of "
                                                    "--window: flag the share F of the texts unlearning changed least "
                                                    "(smallest |ln ratio|; ties to the earlier text)"),
    k: float = typer.Option(20.0, "--k", help="Min-K%: percentage of least likely tokens"),
    prompt_words: int = typer.Option(200, "--prompt-words", help="W: words of the story-completion prompt "
                                     "(use fewer for short texts such as canary items)"),
    samples: int = typer.Option(20, "--samples", help="sampled continuations per text"),
    temperature: float = typer.Option(1.0, "--temperature", help="sampling temperature (> 0)"),
    max_new_tokens: int = typer.Option(128, "--max-new-tokens", help="the most tokens per continuation"),
    segmenter: str = typer.Option("auto", "--segmenter", help="words for W and ROUGE-L: auto, whitespace, japanese, chars"),
    flagged_only: bool = typer.Option(False, "--flagged-only", help="complete only the flagged texts (no comparison)"),
    qa: bool = typer.Option(False, "--qa", help="Q&A mode: DATASET is a JSONL of 'question' and 'answer' (optional "
                            "'id'); the question is the prompt, its answer the reference"),
    truth: Path | None = TRUTH_OPTION,
    truth_target_fpr: float | None = typer.Option(None, "--truth-target-fpr", help="ground truth: the target FPR of "
                                                  "the still-memorized label, whose threshold is the non-members' 1 - "
                                                  "FPR quantile of the loss (default 0.05)"),
    truth_fpr: float | None = typer.Option(None, "--truth-fpr", hidden=True, help="old name of --truth-target-fpr"),
    limit: int | None = typer.Option(None, help="only the first N texts"),
    seed: int = typer.Option(0, help="sampling seed"),
    out_dir: Path | None = OUT_OPTION,
    overwrite: bool = typer.Option(False, help="score and sample again instead of resuming"),
    quiet: bool = typer.Option(False, help="no progress bar or messages"),
    json_out: bool = typer.Option(False, "--json", help="make the last line of stdout a JSON summary"),
    dry_run: bool = typer.Option(False, "--dry-run", help=TARGET_OPTIONS["dry_run"]["help"],
                                 rich_help_panel=TARGET_OPTIONS["dry_run"]["rich_help_panel"]),
    yes: bool = typer.Option(False, "--yes", help=TARGET_OPTIONS["yes"]["help"],
                             rich_help_panel=TARGET_OPTIONS["yes"]["rich_help_panel"]),
    *,
    backend: BackendFlags,
):
    """Did unlearning fail? Min-K% under the original (--before) and the unlearned (--after)
    model; a text whose ratio min_k(after) / min_k(before) lies inside the window is flagged
    (or, with --flag-least-changed F, the share F of the texts whose ratio is closest to 1).
    The after model then continues each text's first W words (--samples samples), compared with
    the true continuation (ROUGE-L recall, approximate memorization), flagged vs unflagged. On an
    unlearned canary, precision and recall against its still-memorized forgotten members.

    Writes scores_before/after.jsonl and completions.jsonl (resumable), unlearning_items.jsonl,
    histograms, unlearning.json and unlearning.md; with --dry-run only the expected requests,
    billed tokens and USD (every text completed: an upper bound with --flagged-only).
    """
    with user_errors():
        from ..audits.common import dataset_slug
        from ..audits.unlearning import (RATIO_WINDOW, UnlearningConfig, estimate_unlearning, prepare_unlearning,
                                         run_unlearning)

        target = TargetOptions(**asdict(backend), dry_run=dry_run, yes=yes)  # checks the numeric options
        if window is not None and flag_least_changed is not None:
            raise BlackboxMIAError("--flag-least-changed and --window are two flag rules: give one")
        config = UnlearningConfig(
            dataset=dataset, k=k, prompt_words=prompt_words, samples=samples,
            window=RATIO_WINDOW if window is None else parse_numbers(window, "--window", float, "0.8696,1.15", 2),
            temperature=temperature, max_new_tokens=max_new_tokens, segmenter=segmenter, unflagged=not flagged_only,
            seed=seed, limit=limit, resume=not overwrite, qa=qa, flag_fraction=flag_least_changed,
            **renamed_option("truth_target_fpr", truth_target_fpr, truth_fpr, "--truth-target-fpr", "--truth-fpr"),
        )
        models = {"before": normalized_spec(before), "after": normalized_spec(after)}  # read once, here
        plan = prepare_unlearning(config, cache_dir=backend.cache_dir)
        truth_dir = truth if truth is not None else default_truth(models["after"])
        out = out_dir or Path("runs") / f"unlearning-{dataset_slug(plan.meta['name'])}"
        specs, truth_role = _model_specs(models, truth_dir)

        def run(models: dict[str, Backend]) -> AuditResult:
            return run_unlearning(plan, models["before"], models["after"], out,
                                  truth=None if truth_role is None else (truth_dir, models[truth_role]),
                                  progress=not quiet, log=messages(quiet), yes=yes)

        def estimate(models: dict[str, Backend]) -> None:
            print_estimate(estimate_unlearning(plan, models["before"], models["after"]),
                           {"unlearning": len(plan.items)}, json_out)

        run_audit(target, [], estimate, run, _show, json_out, build=lambda: _build_models(specs, backend))


def _model_specs(specs: dict[str, BackendSpec], truth_dir: Path | None) -> tuple[dict[str, BackendSpec], str | None]:
    """The model spec per role (``before``, ``after`` as given, and ``truth`` when the
    ground-truth canary ``truth_dir`` is not the "after" model itself), and the role whose model
    gives the ground truth (``None`` without one)."""
    if truth_dir is None:
        return specs, None
    after_dir = local_path(specs["after"])
    if after_dir is not None and after_dir.resolve() == truth_dir.resolve():
        return specs, "after"
    return {**specs, "truth": BackendSpec("local", str(truth_dir))}, "truth"


def _build_models(specs: dict[str, BackendSpec], backend: BackendFlags) -> dict[str, Backend]:
    """One backend per role (``before``, ``after``, maybe ``truth``) from its spec and the shared
    flags; those already built are closed when one fails."""
    models: dict[str, Backend] = {}
    try:
        for role, spec in specs.items():
            models[role] = build_from_flags(spec, backend)
    except BaseException:
        close_all(models)
        raise
    return models


def _show(result: AuditResult) -> None:
    """The audit on the console: flagged count, similarity per group and their difference, and with
    a ground truth the flags' precision and recall."""
    s = result.summary
    typer.echo(f"flagged {s['n_flagged']} of {s['n_items']} texts ({s['flag_rule']}; ratio {s['ratio']})")
    typer.echo(format_table(["group", "n", "ROUGE-L recall mean", "approx. mean"],
                            [[g, st["rouge_l_recall"]["n"], st["rouge_l_recall"]["mean"], st["approximate"]["mean"]]
                             for g, st in s["completion"].items()]))
    _echo_differences(s["completion_difference"], "flagged - unflagged")
    if s["truth"] is not None:
        t = s["truth"]
        typer.echo(format_table(["precision", "95% CI", "recall", "base rate", "Fisher p", "still memorized",
                                 "forgotten"],
                                [[t["precision"], _interval(t["precision_ci"]), t["recall"], t["base_rate"],
                                  t["fisher_p"], t["n_positive"], t["n_forget"]]]))
        _echo_differences(t["completion_difference"], "still memorized - not (the ground truth)")


def _echo_differences(differences: dict, groups: str) -> None:
    """One line per similarity measure: the difference of the two groups' means, its CI and p."""
    for measure, d in differences.items():
        if d is not None:
            typer.echo(f"{measure}: {groups} = {d['difference']:.4f} [{d['ci'][0]:.4f}, {d['ci'][1]:.4f}] "
                       f"(Mann-Whitney one-sided p = {d['mann_whitney_p']:.3g})")


def _interval(ci: list[float] | None) -> str:
    """``[lo, hi]`` with three decimals, or ``n/a``."""
    return "n/a" if ci is None else f"[{ci[0]:.3f}, {ci[1]:.3f}]"


@canary_app.command()
def unlearn(
    canary: Annotated[Path, typer.Argument(help="a trained canary's directory")],
    forget: str = typer.Option(..., "--forget", help="N (a seeded sample of N members) or a file of member ids"),
    steps: int = typer.Option(20, "--steps", help="gradient-ascent steps (batches)"),
    lr: float = typer.Option(1e-4, "--lr", help="constant AdamW learning rate"),
    batch_size: int = typer.Option(8, "--batch-size", help="windows per step"),
    seed: int = typer.Option(0, "--seed", help="seed of the forget sample and the batch order"),
    retain_weight: float = typer.Option(0.0, "--retain-weight", help="weight of KL(original || unlearned) on the "
                                        "kept members' windows, added to the ascent loss (0: pure gradient ascent)"),
    target_loss: float | None = typer.Option(None, "--target-loss", help="gradient ascent: stop ascending a window "
                                             "once its loss exceeds this many nats/token (default: never)"),
    method: str = typer.Option(GRADIENT_ASCENT, "--method", help="gradient_ascent, or alternative_labels (Eldan & "
                               "Russinovich 2023: fine-tune on the forget texts with generic labels)"),
    alpha: float = typer.Option(1.0, "--alpha", help="alternative labels: generic logits = base - alpha * "
                                "relu(reinforced - base)"),
    forget_from: str = typer.Option(ALL_MEMBERS, "--forget-from", help="members, or memorized: sample the forget set "
                                    "among the members the base canary memorized (loss above the non-members' "
                                    "1 - FPR quantile)"),
    memorized_target_fpr: float | None = typer.Option(None, "--memorized-target-fpr", help="the target FPR of the "
                                                      "'memorized before' rule (default 0.05)"),
    memorized_fpr: float | None = typer.Option(None, "--memorized-fpr", hidden=True,
                                               help="old name of --memorized-target-fpr"),
    out: Annotated[Path | None, typer.Option("--out", help="new directory (default: <canary>-unlearned-<hash>)")] = None,
    json_out: bool = typer.Option(False, "--json", help="make the last line of stdout a JSON summary"),
):
    """Make an "unlearned" canary: fine-tune CANARY on a forget subset of its members (gradient
    ascent or alternative labels), saved in a new directory with the forget list, the forget rule
    and the settings in its manifest.

    Audit it afterwards with: bbmia unlearning NEW/forget_items.jsonl --before local:CANARY --after local:NEW
    --prompt-words 24 --samples 20 --max-new-tokens 48 (the command it prints)
    """
    from ..canary.unlearn import UnlearnConfig, unlearn_canary, unlearning_record

    with user_errors():
        config = UnlearnConfig(steps=steps, lr=lr, batch_size=batch_size, seed=seed, retain_weight=retain_weight,
                               target_loss=target_loss, method=method, alpha=alpha, forget_from=forget_from,
                               **renamed_option("memorized_target_fpr", memorized_target_fpr, memorized_fpr,
                                                "--memorized-target-fpr", "--memorized-fpr"))
        path = unlearn_canary(canary, forget, config, out)
        record = unlearning_record(path)
        typer.echo(f"unlearned canary: {path}")
        memorized = record["memorized_before"]
        typer.echo(f"{len(memorized['ids'])} members memorized before (loss above {memorized['threshold']:.4f} "
                   f"nats/token, the non-members' {1 - memorized['target_fpr']:.0%} quantile); forget set from the {forget_from}")
        typer.echo(f"forgot {len(record['forget_ids'])} members in {steps} steps ({method}): forget-set loss "
                   f"{record['forget_loss_before']:.3f} -> {record['forget_loss_after']:.3f} nats/token")
        typer.echo(f"audit: bbmia unlearning {path / FORGET_FILE} --before local:{canary} --after local:{path} "
                   f"{CANARY_COMPLETION_OPTIONS}", err=True)
        if json_out:
            echo_json_line({"path": str(path), "forget_ids": record["forget_ids"], "method": record["method"],
                            "forget_from": record["forget_from"], "n_memorized_before": len(memorized["ids"]),
                            "forget_loss_before": record["forget_loss_before"],
                            "forget_loss_after": record["forget_loss_after"]})
