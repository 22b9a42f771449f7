"""``bbmia exchangeability``: was a benchmark trained on in its canonical order (Oren et al. 2024)?"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from ..evaluation.exchangeability import DEFAULT_PERMUTATIONS, DEFAULT_SHARDS
from ..types import BlackboxMIAError
from .app import app, messages, user_errors
from .audit import run_audit
from .common import TargetOptions, check_output, with_target_options
from .spend import print_dry_run

if TYPE_CHECKING:
    from ..audits.common import AuditResult


@app.command("exchangeability")
@with_target_options
def exchangeability_command(
    dataset: str = typer.Argument(..., help="the benchmark in its canonical order: gsm8k, aqua, wikimia64/128/24, a "
                                  "JSONL path (file order), or canary / canary:PATH (its members in file order)"),
    shards: int = typer.Option(DEFAULT_SHARDS, help="r: contiguous shards of the item sequence (Oren et al. 2024: 50)"),
    permutations: int = typer.Option(DEFAULT_PERMUTATIONS, help="m: shuffled orders scored per shard (Oren et al.: 250)"),
    seed: int = typer.Option(0, help="seed of the shuffled orders"),
    alpha: float = typer.Option(0.05, help="level of the verdict"),
    limit: int | None = typer.Option(None, help="only the first N items (in canonical order)"),
    out_dir: Path | None = typer.Option(None, "--out", help="output folder (default: runs/exchangeability-<dataset>/)"),
    overwrite: bool = typer.Option(False, help="rescore instead of resuming the scores file"),
    quiet: bool = typer.Option(False, help="no progress bar or messages"),
    json_out: bool = typer.Option(False, "--json", help="make the last line of stdout a JSON summary"),
    *,
    target: TargetOptions,
):
    """Is the benchmark's canonical order more likely than shuffled orders of its items? The sharded
    test of Oren et al. 2024: the items, in file order, cut into --shards contiguous shards; each
    shard's items joined by a blank line, in canonical order and in --permutations shuffled orders,
    scored (full-sequence log-probs: needs a target with log-probs); an exact p-value from the
    canonical order's ranks (the paper's t-test beside it). Applies only where the benchmark was
    trained on as a file, in this order; a negative clears the order, not the items (bbmia sweep).

    Writes scores.jsonl (resumable), exchangeability.json and exchangeability.md; with --dry-run
    only the texts, requests, billed tokens and USD (shards x (permutations + 1) texts).
    """
    with user_errors():
        from ..audits.common import dataset_slug
        from ..audits.exchangeability import (
            SCORER,
            ExchangeabilityConfig,
            prepare_exchangeability,
            run_exchangeability,
        )
        from ..scorers import parse_scorer

        if target.ref:
            raise BlackboxMIAError("exchangeability uses no reference model: drop --ref")
        config = ExchangeabilityConfig(dataset=dataset, shards=shards, permutations=permutations, seed=seed,
                                       alpha=alpha, limit=limit, resume=not overwrite,
                                       score_tolerance=target.score_tolerance)
        if out_dir is not None:
            check_output(out_dir, folder=True)
        plan = prepare_exchangeability(config, cache_dir=target.cache_dir)
        out = check_output(out_dir or Path("runs") / f"exchangeability-{dataset_slug(plan.meta['name'])}", folder=True)
        scorers = [parse_scorer(SCORER)]
        log = messages(quiet)

        def dry_run(backends) -> None:
            typer.echo(f"{plan.n_requested} texts to compare ({len(plan.bounds)} shards x {permutations + 1} orders), "
                       f"{len(plan.texts)} distinct, of {len(plan.items)} items:")
            print_dry_run({"exchangeability": plan.texts}, scorers, backends, json_out)

        def show(result: AuditResult) -> None:
            s = result.summary
            typer.echo(s["headline"])
            t = result.report["verdict"]["t_test"]
            t_line = "undefined (no spread)" if t["p_value"] is None else f"p = {t['p_value']:.3g} (t = {t['t']:.2f}, df {t['df']})"
            typer.echo(f"paper's t-test on the per-shard differences (asymptotic): {t_line}; mean canonical - shuffled "
                       f"{t['mean_difference_nats']:.3f} nats per shard")
            typer.echo(f"{s['n_items']} items, {s['n_shards']} shards, {s['n_permutations']} shuffled orders each: "
                       f"{s['n_texts']} texts ({s['n_distinct_texts']} distinct) scored")

        run_audit(target, scorers, dry_run,
                  lambda backends: run_exchangeability(plan, backends, out, progress=not quiet, log=log, yes=target.yes),
                  show, json_out)
