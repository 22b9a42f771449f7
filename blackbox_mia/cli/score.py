"""``bbmia score``: every scorer on every text of a dataset, one JSONL row per text."""

from __future__ import annotations

from pathlib import Path

import typer

from ..canary.dataset import CANARY, dataset_help, load_items
from ..datasets.fields import Fields
from ..datasets.registry import spec_slug
from ..spend.guard import guard_groups
from ..scorers import default_scorer_specs, parse_scorers
from .app import app, echo_json_line, user_errors
from .common import (
    TargetOptions,
    auc_by_scorer,
    auc_cells,
    build_backends,
    check_number,
    check_output,
    close_all,
    format_table,
    small_sample_warning,
    with_field_options,
    with_target_options,
)
from .spend import print_dry_run, spending


def default_output(name: str) -> Path:
    """``runs/score-<name>.jsonl`` for the dataset ``name``: ``canary-<directory name>`` for
    ``canary:PATH``, else :func:`~blackbox_mia.datasets.registry.spec_slug` (a shipped name with
    ``-`` for ``:``: ``gsm8k:test`` -> ``score-gsm8k-test.jsonl``; a file's stem:
    ``data/items.jsonl`` -> ``score-items.jsonl``)."""
    if name.startswith(CANARY + ":"):
        stem = f"{CANARY}-{Path(name[len(CANARY) + 1:]).name}"
    else:
        stem = spec_slug(name)
    return Path("runs") / f"score-{stem}.jsonl"


@app.command()
@with_target_options
@with_field_options
def score(
    dataset: str = typer.Argument(..., help=dataset_help()),
    scorers: str = typer.Option(None, help="comma-separated scorer specs, e.g. 'loss,min_k:k=10,pac' (default: every "
                                "default scorer the target supports; min_k_pp needs --local)"),
    out: Path = typer.Option(None, "--out", help="output JSONL (default: runs/score-<dataset>.jsonl)"),
    limit: int = typer.Option(None, help="score only the first N items"),
    overwrite: bool = typer.Option(False, help="rewrite the output instead of resuming it"),
    json_out: bool = typer.Option(False, "--json", help="make the last line of stdout a JSON summary"),
    *,
    target: TargetOptions,
    fields: Fields,
):
    """Score every text of DATASET with each scorer; write one JSONL row per text (higher = member).

    Resumable: rerunning the same command skips the texts already in --out. A black-box run
    estimated above 10,000 requests or $1 needs --max-cost, --max-requests or --yes.
    """
    with user_errors():
        check_number("--limit", limit, at_least=1)
        parsed = parse_scorers(scorers or ",".join(default_scorer_specs(vocab_stats=target.white_box())))
        items, meta = load_items(dataset, limit, target.cache_dir, fields)
        out = check_output(out or default_output(meta["name"]), folder=False)
        if not target.dry_run:
            from ..results_file import check_resumable
            from ..runner import run_settings

            check_resumable(out, run_settings(parsed, meta, target.score_tolerance), resume=not overwrite)  # before a model loads
        backends = build_backends(target, parsed)
        if target.dry_run:
            try:
                print_dry_run({meta["name"]: items}, parsed, backends, json_out)
            finally:
                close_all(backends)
            return
        with spending(backends) as spent:  # what was spent is printed, also after an error or Ctrl-C
            guard_groups({meta["name"]: items}, parsed, backends, target.yes)
            from ..runner import run_config, score_items

            resumed: list[int] = []
            rows = score_items(items, parsed, backends, out, run_config(parsed, backends, meta, target.score_tolerance),
                               resume=not overwrite,
                               on_resumed=resumed.append)
        usage = spent["usage"]
        aucs = auc_by_scorer(rows, parsed)
        earlier = resumed[0] if resumed else 0
        typer.echo(f"scored {len(rows) - earlier} texts"
                   + (f" this run, {len(rows)} in all ({earlier} resumed from the earlier run)" if earlier else "")
                   + f" ({sum(r.n_tokens for r in rows)} tokens"
                   + (f"; {meta['source']} read as {meta['format']}" if "format" in meta else "") + f") -> {out}", err=True)
        nonfinite = [r.id for r in rows if r.nonfinite]
        if nonfinite:
            typer.echo(
                f"warning: {len(nonfinite)} texts have a NaN/infinite score (null in the rows, scorers listed "
                f"under 'nonfinite'; AUC not computed for those scorers), first: {nonfinite[0]}",
                err=True,
            )
        unscored = [r for r in rows if r.unscored]
        if unscored:
            first = unscored[0]
            label, why = next(iter(first.unscored.items()))
            typer.echo(
                f"warning: {len(unscored)} of {len(rows)} texts have null scores "
                f"({', '.join(sorted({k for r in unscored for k in r.unscored}))}): their tokens are known only by "
                f"bounds too wide for a score (reasons under 'unscored' in the rows, intervals under 'score_bounds'), "
                f"first: {first.id}, {label}: {why}",
                err=True,
            )
        if aucs:
            typer.echo(format_table(["scorer", "AUC [95% CI]"], list(auc_cells(rows, parsed).items())))
            warning = small_sample_warning(rows)
            if warning:
                typer.echo(f"warning: {warning}", err=True)
        if json_out:
            echo_json_line({"out": str(out), "n": len(rows), "auc": aucs, **({"usage": usage} if usage else {})})
