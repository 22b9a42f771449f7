"""``bbmia score`` and ``bbmia demo``."""

from __future__ import annotations

from pathlib import Path

import typer

from ..scorers import DEFAULT_SCORERS, parse_scorers
from .app import app, echo_json_line, user_errors
from .common import auc_by_scorer, build_backends, format_auc_table, load_items


@app.command()
def score(
    dataset: str = typer.Argument(..., help="gsm8k, gsm8k:train, aqua, aqua:dev, wikimia64, wikimia128, wikimia24, or a JSONL path"),
    local: str = typer.Option(None, "--local", help="local Hugging Face model directory or hub name"),
    scorers: str = typer.Option(",".join(DEFAULT_SCORERS), help="comma-separated scorer specs, e.g. 'loss,min_k:k=10,pac'"),
    ref: str = typer.Option(None, "--ref", help="reference model for the 'ref' scorer (local directory or hub name)"),
    out: Path = typer.Option(None, "--out", help="output JSONL (default: runs/score-<dataset>.jsonl)"),
    limit: int = typer.Option(None, help="score only the first N items"),
    overwrite: bool = typer.Option(False, help="rewrite the output instead of resuming it"),
    device: str = typer.Option(None, help="torch device (default: cuda when available)"),
    dtype: str = typer.Option("auto", help="float32, bfloat16, float16 or auto"),
    batch_tokens: int = typer.Option(8192, help="padded tokens per forward pass"),
    json_out: bool = typer.Option(False, "--json", help="make the last line of stdout a JSON summary"),
):
    """Score every text of DATASET with each scorer; write one JSONL row per text (higher = member)."""
    with user_errors():
        parsed = parse_scorers(scorers)
        items, meta = load_items(dataset, limit)
        backends = build_backends(local=local, ref=ref, device=device, dtype=dtype, batch_tokens=batch_tokens)
        out = out or Path("runs") / f"score-{meta['name'].replace(':', '-').replace('/', '_')}.jsonl"
        from ..runner import run_config, score_items

        rows = score_items(items, parsed, backends, out, run_config(parsed, backends, meta), resume=not overwrite)
        aucs = auc_by_scorer(rows, parsed)
        typer.echo(f"scored {len(rows)} texts ({sum(r.n_tokens for r in rows)} tokens) -> {out}", err=True)
        if aucs:
            typer.echo(format_auc_table(aucs, rows))
        if json_out:
            echo_json_line({"out": str(out), "n": len(rows), "auc": aucs})
