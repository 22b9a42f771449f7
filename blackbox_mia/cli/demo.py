"""``bbmia demo``: the canary model audited white-box, then black-box through ``bbmia serve``."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import numpy as np
import typer

from ..option_names import for_command_line
from ..scorers import DEFAULT_SCORERS, parse_scorers
from ..types import BlackboxMIAError
from .app import app, echo_json_line, messages, user_errors
from .common import auc_by_scorer, auc_cells, check_number, format_table

BLACKBOX_DEMO_SCORERS = "loss,zlib,min_k,min_k:k=10"
DEMO_PORT = 18273
"""Loopback port the demo serves the canary on. The API cache keys every answer by its base URL,
so a port that stays the same between runs lets a rerun reuse the black-box stage's answers
(thousands of requests in the default demo) instead of paying them again; when the port is taken,
a free one is used and that run pays again."""


@app.command()
def demo(
    blackbox: bool = typer.Option(True, "--blackbox/--no-blackbox", help="also audit through the black-box path"),
    blackbox_n: int = typer.Option(20, help="members + non-members (half each) audited black-box"),
    mode: str = typer.Option("raw", help="logprobs mode of the emulated provider: raw or processed"),
    echo: bool = typer.Option(False, "--echo/--no-echo", help="let the emulated provider echo prompt log-probs"),
    cache_dir: str = typer.Option(None, "--cache-dir", envvar="BBMIA_CACHE_DIR", help="cache root (default ./cache)"),
    json_out: bool = typer.Option(False, "--json", help="make the last line of stdout a JSON object"),
):
    """Train the canary (once, cached), score its planted GSM8K members vs held-out non-members.

    Prints each scorer's AUC. With --blackbox (default) the canary is also served on loopback
    port 18273 (a free one when taken) as an OpenAI-compatible endpoint that, like current
    providers, returns top-5 log-probs that ignore logit_bias and no prompt log-probs; the
    tracker recovers every token's log-prob and the demo reports black-box vs white-box
    agreement. Its answers are cached: a rerun pays no request.
    """
    with user_errors():
        from ..emulator import LOGPROBS_MODES

        check_number("--blackbox-n", blackbox_n, at_least=2)
        if mode not in LOGPROBS_MODES:
            raise BlackboxMIAError(f"--mode must be one of {', '.join(LOGPROBS_MODES)}, got {mode!r}")
        from ..backends.local import LocalBackend, LocalConfig
        from ..canary import CanaryConfig, canary_items, ensure_canary
        from ..results import ScoredText
        from ..runner import score_texts

        path = ensure_canary(CanaryConfig(), progress=not json_out, cache=cache_dir, log=messages(quiet=json_out))
        items = canary_items(path)
        scorers = parse_scorers(",".join(DEFAULT_SCORERS) + ",min_k:k=10")
        local = LocalBackend(LocalConfig(str(path)))
        results = score_texts([it.text for it in items], scorers, {"target": local}, progress=not json_out)
        rows = [ScoredText.from_scores(it.id, it.label, s, lp) for it, (s, lp) in zip(items, results)]
        aucs = auc_by_scorer(rows, scorers)
        summary = {
            "auc": aucs,
            "n_members": sum(it.label == 1 for it in items),
            "n_nonmembers": sum(it.label == 0 for it in items),
            "model": str(path),
        }
        table = {name: [cell] for name, cell in auc_cells(rows, scorers).items()}
        if blackbox:
            subset = items[: blackbox_n // 2] + [it for it in items if it.label == 0][: blackbox_n - blackbox_n // 2]
            summary["blackbox"] = blackbox_agreement(path, local, subset, mode, echo, cache_dir, not json_out)
            cells = summary["blackbox"].pop("auc_cells")  # console text, not part of the JSON summary
            for name, values in table.items():
                values.append(cells.get(name, "-"))
        header = ["scorer", f"AUC white-box [95% CI] (n={len(items)})"]
        if blackbox:
            header.append(f"AUC black-box [95% CI] (n={len(summary['blackbox']['ids'])})")
        typer.echo(format_table(header, [[name, *values] for name, values in table.items()]))
        if blackbox:
            bb = summary["blackbox"]
            typer.echo(
                f"black-box vs white-box: {bb['n_tokens']} tokens, max |diff| {bb['max_abs_diff_nats'] or 0:.2e} nats "
                f"({bb['upper_bound_only']} upper-bound only), "
                f"{bb['within_bounds']:.1%} within bounds; {bb['requests_per_token']:.2f} requests/token, "
                f"{bb['wall_seconds']:.1f} s; strategies {bb['strategies']}"
            )
        if json_out:
            echo_json_line(summary)


@contextlib.contextmanager
def demo_server(path, local, mode: str, echo: bool, port: int = DEMO_PORT, log=None) -> Iterator[str]:
    """Serve the loaded canary ``local`` on loopback ``port`` (else, when it is taken, a free
    one, said through ``log``); yields the base URL.

    Raises:
        BlackboxMIAError: the server cannot start.
    """
    from ..emulator import ServerConfig, serve_in_background

    with contextlib.ExitStack() as stack:
        try:
            url = stack.enter_context(
                serve_in_background(ServerConfig(str(path), port=port, logprobs_mode=mode, echo=echo), backend=local)
            )
        except BlackboxMIAError as exc:
            if log is not None:
                log(f"{for_command_line(exc)}; serving on a free port instead (black-box answers cached for port {port} are not reused)")
            url = stack.enter_context(
                serve_in_background(ServerConfig(str(path), port=0, logprobs_mode=mode, echo=echo), backend=local)
            )
        yield url


def blackbox_agreement(path, local, items, mode: str, echo: bool, cache_dir, progress: bool, port: int = DEMO_PORT) -> dict:
    """Serve the canary (:func:`demo_server`), track the items' log-probs through the API path,
    compare them with the white-box values of ``local``.

    Returns:
        The summary's ``blackbox`` section: ``ids``, ``auc`` per scorer (and ``auc_cells``, the
        console cells with their CIs, :func:`~.common.auc_cells`), ``n_tokens``,
        ``max_abs_diff_nats``, ``upper_bound_only``, ``within_bounds`` (share of tokens),
        ``requests`` paid this run (0 when every answer came from the cache),
        ``requests_per_token``, ``wall_seconds``, ``strategies``, ``capabilities``, ``server_mode``.

    Raises:
        BlackboxMIAError: the server cannot start, or the API path fails.
    """
    from ..backends.api import ApiBackend
    from ..backends.api.http.client import ApiConfig
    from ..backends.api.tracker.config import TrackerConfig
    from ..results import ScoredText
    from ..runner import score_texts

    scorers = parse_scorers(BLACKBOX_DEMO_SCORERS)
    texts = [it.text for it in items]
    white = local.logprobs(texts)
    start = time.perf_counter()
    with demo_server(path, local, mode, echo, port, messages(quiet=not progress)) as url:
        api = ApiBackend(
            ApiConfig(base_url=url, model=str(path), api_key="demo-no-key"),
            tokenizer=str(path),
            tracker=TrackerConfig(context=local.context),
            cache_dir=cache_dir,
        )
        try:
            results = score_texts(texts, scorers, {"target": api}, progress=progress)
            usage = api.usage.to_dict()
            capabilities = api.capabilities.to_json()
        finally:
            api.close()
    wall = time.perf_counter() - start
    black = [lp for _, lp in results]
    bounded = np.concatenate([np.isfinite(b.lower) for b in black])
    diffs = np.concatenate([b.logprobs - w.logprobs for b, w in zip(black, white)])[bounded]
    inside = np.concatenate(
        [(b.lower - 1e-4 <= w.logprobs) & (w.logprobs <= b.upper + 1e-4) for b, w in zip(black, white)]
    )
    strategies: dict[str, int] = {}
    for b in black:
        for s in b.strategies:
            strategies[s] = strategies.get(s, 0) + 1
    rows = [ScoredText.from_scores(it.id, it.label, s, lp) for it, (s, lp) in zip(items, results)]
    n_tokens = int(bounded.size)
    return {
        "ids": [it.id for it in items],
        "auc": auc_by_scorer(rows, scorers),
        "auc_cells": auc_cells(rows, scorers),
        "n_tokens": n_tokens,
        "max_abs_diff_nats": float(np.max(np.abs(diffs))) if diffs.size else None,
        "upper_bound_only": int((~bounded).sum()),
        "within_bounds": float(np.mean(inside)),
        "requests": usage["requests"],
        "requests_per_token": usage["requests"] / n_tokens if usage["requests"] else 0.0,
        "wall_seconds": wall,
        "strategies": strategies,
        "capabilities": capabilities,
        "server_mode": {"logprobs_mode": mode, "echo": echo},
    }
