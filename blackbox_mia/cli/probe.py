"""``bbmia probe``: per-token log-probs (with bounds) and scores of texts through an endpoint."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

import typer

from ..backends.base import Backend
from ..canary.dataset import load_items
from ..spend.guard import guard_groups
from ..datasets import Item
from ..scorers import parse_scorers
from ..types import BlackboxMIAError
from .app import app, echo_json_line, user_errors
from .common import (
    TargetOptions,
    build_backends,
    check_number,
    close_all,
    format_table,
    with_target_options,
)
from .spend import print_dry_run, spending

BLACKBOX_SCORERS = "loss,zlib,lowercase,min_k,pac"
LONG_TEXT_CHARS = 200  # a text longer than this (characters) gets a per-token progress bar


def gather_texts(
    text: str | None, file: Path | None, dataset: str | None, limit: int | None, cache_dir: Path | None = None
) -> list[tuple[str, str]]:
    """(id, text) pairs from exactly one source: an argument, a file, ``-`` (stdin) or a dataset.

    Raises:
        BlackboxMIAError: no source, several sources, a missing or unreadable file (not UTF-8
            text, a directory), unreadable stdin, or a bad dataset.
    """
    sources = [s for s in (text, file, dataset) if s is not None]
    if len(sources) != 1:
        raise BlackboxMIAError("give exactly one of: TEXT (or - for stdin), --file PATH, --dataset NAME")
    if dataset is not None:
        items, _ = load_items(dataset, limit, cache_dir)
        return [(it.id, it.text) for it in items]
    if file is not None:
        if not file.exists():
            raise BlackboxMIAError(f"no such file: {file}")
        try:
            return [("file", file.read_text(encoding="utf-8"))]
        except (OSError, UnicodeDecodeError) as exc:
            raise BlackboxMIAError(f"cannot read {file} as UTF-8 text: {exc}") from exc
    if text == "-":
        try:
            return [("stdin", trailing_newline_dropped(sys.stdin.read()))]
        except (OSError, UnicodeDecodeError) as exc:
            raise BlackboxMIAError(f"cannot read stdin as UTF-8 text: {exc}") from exc
    return [("text", text)]


def trailing_newline_dropped(text: str) -> str:
    """``text`` without one final line break (``\n`` or ``\r\n``): what ``echo TEXT | bbmia probe -``
    adds to the text (a shell's ``$(...)`` drops it the same way)."""
    return text.removesuffix("\n").removesuffix("\r") if text.endswith("\n") else text


@app.command()
@with_target_options
def probe(
    text: str = typer.Argument(None, help="text to probe; '-' reads stdin (one final line break dropped)"),
    file: Path = typer.Option(None, "--file", help="read the text from a file"),
    dataset: str = typer.Option(None, "--dataset", help="probe the items of a dataset (gsm8k, a JSONL path, ...)"),
    limit: int = typer.Option(None, help="with --dataset: only the first N items"),
    scorers: str = typer.Option(BLACKBOX_SCORERS, help="scorers computed from the recovered log-probs"),
    json_out: bool = typer.Option(False, "--json", help="one JSON object per text: tokens, scores, usage, capabilities"),
    *,
    target: TargetOptions,
):
    """Recover the log-prob of every token of a text through a top-n API (logit_bias tracker).

    Every value carries [lower, upper] bounds in nats and the strategy that produced it. With
    --dry-run: the expected requests, billed tokens and USD of probing the texts, nothing scored.
    A run estimated above 10,000 requests or $1 needs --max-cost, --max-requests or --yes.
    """
    with user_errors():
        check_number("--limit", limit, at_least=1)
        parsed = parse_scorers(scorers)
        texts = gather_texts(text, file, dataset, limit, target.cache_dir)
        backends = build_backends(target, parsed)
        groups = {"probe": [Item(text_id, content) for text_id, content in texts]}
        if target.dry_run:
            try:
                print_dry_run(groups, parsed, backends, json_out)
            finally:
                close_all(backends)
            return
        with spending(backends, on_success=False):  # each record carries its usage; a stopped run prints the total
            guard_groups(groups, parsed, backends, target.yes)
            # a black-box backend's configuration holds what its probe found (local: nothing)
            capabilities = backends["target"].describe().get("capabilities")
            if capabilities is not None:
                typer.echo(capabilities["reading"], err=True)
            long_text = any(len(content) > LONG_TEXT_CHARS for _, content in texts)
            probe_texts(texts, parsed, backends, capabilities, json_out, progress=not json_out and long_text)


def probe_texts(
    texts: list[tuple[str, str]], scorers: list, backends: dict[str, Backend], capabilities: dict | None,
    json_out: bool, progress: bool = False,
) -> None:
    """Score every text in one stream (the backend keeps its requests in flight across texts) and
    print one record per text in input order, each as soon as it and the texts before it are done.

    A record's ``usage`` is what the run had spent (requests, tokens, USD) when its text was done,
    counted from the start of scoring (the capability probe excluded); with one text, that text's.

    Raises:
        BlackboxMIAError: as :func:`~blackbox_mia.runner.score_texts`; the records of the texts
            done before the error are printed.
    """
    from ..results import ScoredText
    from ..runner import score_texts

    backend = backends["target"]
    start = _usage(backend)
    records: list[dict | None] = [None] * len(texts)
    printed = 0
    lock = threading.Lock()

    def done(j: int, scores: dict, lp) -> None:
        nonlocal printed
        row = ScoredText.from_scores(texts[j][0], None, scores, lp)  # NaN/inf, too wide -> None
        record = {
            "id": texts[j][0],
            **lp.to_json(),
            **{k: v for k, v in row.to_json().items() if k in ("scores", "nonfinite", "unscored", "score_bounds",
                                                               "bound_only")},
            "usage": {k: v - start.get(k, 0) for k, v in _usage(backend).items()},
            "capabilities": capabilities,
        }
        with lock:
            records[j] = record
            while printed < len(records) and records[printed] is not None:
                if json_out:
                    echo_json_line(records[printed])
                else:
                    _print_human(records[printed])
                records[printed] = {}  # printed: keep nothing
                printed += 1

    score_texts([content for _, content in texts], scorers, backends, progress=progress, on_scored=done)


def _usage(backend: Backend) -> dict:
    """Requests, tokens and cost the backend spent so far ({} for a backend that sends none)."""
    usage = backend.usage
    if usage is None:
        return {}
    d = usage.to_dict()
    return {k: d[k] for k in ("requests", "prompt_tokens", "completion_tokens", "cost_usd") if k in d}


def _print_human(record: dict) -> None:
    rows = [
        (json.dumps(t["token"])[1:-1], t["logprob"], t["lower"], t["upper"], t["strategy"]) for t in record["tokens"]
    ]
    typer.echo(f"== {record['id']}")
    typer.echo(format_table(["token", "logprob", "lower", "upper", "strategy"], rows))
    bounds, unscored = record.get("score_bounds", {}), record.get("unscored", {})
    typer.echo(format_table(["scorer", "score", "lower", "upper"],
                            [(k, v, *bounds.get(k, (v, v))) for k, v in record["scores"].items()]))
    if unscored:
        typer.echo(f"{len(unscored)} scores null: {next(iter(unscored.values()))}", err=True)
    if record["usage"]:
        typer.echo("usage: " + ", ".join(f"{k}={v:g}" for k, v in record["usage"].items()))
