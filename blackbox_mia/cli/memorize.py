"""``bbmia memorize``: memorization by generation (Ishihara & Takahashi 2024)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from ..types import BlackboxMIAError
from .app import app, messages, user_errors
from .audit import run_audit
from .common import TargetOptions, check_output, format_table, with_target_options
from .options import parse_numbers
from .spend import print_estimate

if TYPE_CHECKING:
    from ..audits.common import AuditResult


@app.command()
@with_target_options
def memorize(
    dataset: str = typer.Argument(..., help="canary, canary:PATH, gsm8k, aqua, wikimia64/128/24, or a JSONL path "
                                  "(labels optional: AUCs need members and non-members)"),
    prompt_lengths: str = typer.Option("32,64,128", "--prompt-lengths", help="prompt lengths L (in --unit), comma-separated"),
    reference_tokens: int = typer.Option(50, "--reference-tokens", help="reference length R (in --unit): the next R after "
                                         "the prompt; at most R tokens are generated"),
    unit: str = typer.Option("tokens", help="tokens (of the target's tokenizer) or chars (characters)"),
    limit: int | None = typer.Option(None, help="only the first N items"),
    n_boot: int = typer.Option(1000, "--n-boot", help="bootstrap resamples per confidence interval (0 = none)"),
    seed: int = typer.Option(0, help="bootstrap seed"),
    out_dir: Path = typer.Option(None, "--out", help="output folder (default: runs/memorize-<dataset>/)"),
    overwrite: bool = typer.Option(False, help="generate again instead of resuming the rows file"),
    quiet: bool = typer.Option(False, help="no progress bar or messages"),
    json_out: bool = typer.Option(False, "--json", help="make the last line of stdout a JSON summary"),
    *,
    target: TargetOptions,
):
    """Greedy-continue the first L tokens of every item and count how much of the next R comes out:
    eidetic (forward-matching characters), approximate (1 - Levenshtein / longer length) and exact
    memorization, by label and prompt length, and each measure's AUC as a membership score with
    bootstrap 95% CIs. Needs only generation: works on endpoints without log-probs.

    Writes memorization.jsonl (resumable), memorization.png, memorize.json and memorize.md; with
    --dry-run only the expected requests, billed tokens and USD of the generations.
    """
    with user_errors():
        from ..audits.common import dataset_slug
        from ..audits.memorization import MemorizeConfig, memorize_estimate, prepare_memorize, run_memorize
        from ..evaluation.memorization import EIDETIC_CHARS

        config = MemorizeConfig(dataset=dataset, prompt_lengths=parse_numbers(prompt_lengths, "--prompt-lengths"),
                                reference_length=reference_tokens, unit=unit, n_boot=n_boot, seed=seed, limit=limit,
                                resume=not overwrite)
        if target.ref:
            raise BlackboxMIAError("memorize uses no reference model: drop --ref")
        plan = prepare_memorize(config, cache_dir=target.cache_dir)
        out = check_output(out_dir or Path("runs") / f"memorize-{dataset_slug(plan.meta['name'])}", folder=True)

        def dry_run(backends) -> None:
            prompts, report = memorize_estimate(plan, backends["target"])
            print_estimate(report, {"memorize": prompts}, json_out)

        def show(result: AuditResult) -> None:
            s = result.summary
            rows = []
            for label, per_length in s["by_label"].items():
                for length, st in per_length.items():
                    rows.append([label, length, st["n"], st["eidetic"]["mean"], st["eidetic"]["median"],
                                 st["approximate"]["mean"], st[f"share_eidetic_ge_{EIDETIC_CHARS}"], st["share_exact"]])
            typer.echo(format_table(["label", f"L ({unit})", "n", "eidetic mean", "eidetic median", "approx. mean",
                                     f"share eid.>={EIDETIC_CHARS}", "share exact"], rows))
            aucs = []
            for length, per_measure in [*s["by_length"].items(), ("pooled", None)]:
                measures = per_measure if length != "pooled" else {m: {"auc": s["auc"][m], "auc_ci": s["auc_ci"][m]}
                                                                    for m in s["auc"]}
                if measures is None or measures["eidetic"]["auc"] is None:
                    continue
                aucs.append([length, *(_with_ci(measures[m]) for m in ("eidetic", "approximate"))])
            if aucs:
                typer.echo(format_table(["L", "AUC eidetic [95% CI]", "AUC approximate [95% CI]"], aucs))

        run_audit(target, [], dry_run, lambda b: run_memorize(plan, b["target"], out, progress=not quiet,
                                                              log=messages(quiet), yes=target.yes),
                  show, json_out)


def _with_ci(metric: dict) -> str:
    ci = metric["auc_ci"]
    return f"{metric['auc']:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")
