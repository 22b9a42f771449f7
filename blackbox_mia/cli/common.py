"""Pieces shared by the commands: loading items, building backends, AUC tables."""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import typer

from ..backends.base import Backend
from ..datasets import Item, load_dataset
from ..scorers import REFERENCE, TARGET, Scorer
from ..types import BlackboxMIAError
from .app import user_errors


def load_items(spec: str, limit: int | None = None) -> tuple[list[Item], dict]:
    """Items of a dataset spec (first ``limit``), and the dataset's metadata for the config.

    Besides the specs of :func:`~blackbox_mia.datasets.load_dataset`, ``canary`` (the default
    canary, ``canary_dir(CanaryConfig())``) and ``canary:PATH`` give a trained canary's members
    (label 1) and non-members (label 0); see :func:`blackbox_mia.audit.load_canary_dataset`.

    Raises:
        BlackboxMIAError: an unreadable dataset, no canary there, ``limit`` < 1.
    """
    from ..runner import limit_items

    if spec == "canary" or spec.startswith("canary:"):
        from ..audits import (
            load_items as load_canary_items,  # imports the evaluation stack: only when needed
        )

        return load_canary_items(spec, limit)
    ds = load_dataset(spec)
    return limit_items(ds.items, limit), {"name": ds.name, "source": ds.source, "sha256": ds.sha256}


def check_number(
    option: str,
    value: float | int | None,
    *,
    above: float | None = None,
    at_least: float | None = None,
    below: float | None = None,
    at_most: float | None = None,
) -> None:
    """Check a numeric command-line option: finite and within the given bounds (None passes).

    Args:
        option: the option as typed (``--epsilon``), named in the message.
        value: its value.
        above, at_least, below, at_most: strict / inclusive lower and upper bounds.

    Raises:
        BlackboxMIAError: ``"--epsilon must be a finite number > 0, got nan"`` and the like.
    """
    if value is None:
        return
    bounds = [(above, ">", lambda v, b: v > b), (at_least, ">=", lambda v, b: v >= b),
              (below, "<", lambda v, b: v < b), (at_most, "<=", lambda v, b: v <= b)]
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
    ok = ok and all(bound is None or test(value, bound) for bound, _, test in bounds)
    if not ok:
        wanted = " and ".join(f"{sign} {bound:g}" for bound, sign, _ in bounds if bound is not None)
        kind = "an integer" if isinstance(value, int) and not isinstance(value, bool) else "a finite number"
        raise BlackboxMIAError(f"{option} must be {kind} {wanted}, got {value!r}")


@dataclass(frozen=True)
class TargetOptions:
    """Command-line choice of the target model: ``--local`` or ``--base-url``/``--model``.

    Numeric options are checked on construction, before any model is loaded or request sent.

    Raises:
        BlackboxMIAError: ``--epsilon`` not a finite number > 0 (nats), ``--concurrency`` < 1,
            ``--rpm``/``--tpm`` not finite and > 0, ``--context-tokens`` < 2,
            ``--batch-tokens`` < 1.
    """

    local: str | None = None
    ref: str | None = None
    device: str | None = None
    dtype: str = "auto"
    batch_tokens: int = 8192
    base_url: str | None = None
    model: str | None = None
    api_key: str | None = None
    endpoint: str = "completions"
    allow_chat_conditional: bool = False
    tokenizer: str | None = None
    strategy: str = "auto"
    epsilon: float = 0.01
    context: int | None = None
    concurrency: int = 16
    rpm: float | None = None
    tpm: float | None = None
    cache_dir: Path | None = None
    reprobe: bool = False

    def __post_init__(self) -> None:
        check_number("--epsilon", self.epsilon, above=0)
        check_number("--concurrency", self.concurrency, at_least=1)
        check_number("--rpm", self.rpm, above=0)
        check_number("--tpm", self.tpm, above=0)
        check_number("--context-tokens", self.context, at_least=2)
        check_number("--batch-tokens", self.batch_tokens, at_least=1)


def build_backends(opts: TargetOptions) -> dict[str, Backend]:
    """``{"target": ..., "reference": ...}`` from command-line options.

    Raises:
        BlackboxMIAError: no target, or both a local model and an endpoint.
    """
    if bool(opts.local) == bool(opts.base_url):
        raise BlackboxMIAError("choose the target: --local PATH, or --base-url URL --model NAME")
    if opts.base_url and not opts.model:
        raise BlackboxMIAError("--base-url needs --model")

    def local(model: str) -> Backend:
        from ..backends.local import LocalBackend, LocalConfig

        return LocalBackend(LocalConfig(model, device=opts.device, dtype=opts.dtype, max_batch_tokens=opts.batch_tokens))

    if opts.local:
        backends = {TARGET: local(opts.local)}
    else:
        from ..backends.api import ApiBackend
        from ..backends.api.client import ApiConfig
        from ..backends.api.tracker import TrackerConfig

        api = ApiConfig(
            base_url=opts.base_url,
            model=opts.model,
            endpoint=opts.endpoint,
            concurrency=opts.concurrency,
            rpm=opts.rpm,
            tpm=opts.tpm,
            **({"api_key": opts.api_key} if opts.api_key else {}),
        )
        tracker = TrackerConfig(strategy=opts.strategy, epsilon=opts.epsilon, context=opts.context)
        backends = {
            TARGET: ApiBackend(
                api, opts.tokenizer, tracker, opts.cache_dir, opts.reprobe,
                allow_chat_conditional=opts.allow_chat_conditional,
            )
        }
    if opts.ref:
        backends[REFERENCE] = local(opts.ref)
    return backends


def close_all(backends: dict[str, Backend]) -> None:
    """Close every backend (idempotent)."""
    for backend in backends.values():
        backend.close()


def auc_by_scorer(rows, scorers: Sequence[Scorer]) -> dict[str, float | None]:
    """AUC of each scorer on labelled rows ({} when the rows carry no or one-class labels).

    A scorer with a non-finite (``None``) score on some labelled row gets ``None``: its AUC is
    not defined on the rows as they are.
    """
    from sklearn.metrics import roc_auc_score

    labelled = [r for r in rows if r.label is not None]
    labels = [r.label for r in labelled]
    if len(set(labels)) < 2:
        return {}
    aucs: dict[str, float | None] = {}
    for s in scorers:
        values = [r.scores[s.label] for r in labelled]
        aucs[s.label] = None if None in values else float(roc_auc_score(labels, values))
    return aucs


def format_table(header: Sequence[str], rows: Sequence[Sequence]) -> str:
    """A plain-text table; floats shown with 3 decimals, None as '-'."""
    cells = [[("-" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v)) for v in row] for row in rows]
    widths = [max(len(str(h)), *(len(r[i]) for r in cells)) for i, h in enumerate(header)]
    lines = ["  ".join(str(h).ljust(w) for h, w in zip(header, widths))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)


def _target_parameters() -> list[inspect.Parameter]:
    opt = typer.Option
    specs = [
        ("local", Optional[str], opt(None, "--local", help="local Hugging Face model (directory or hub name)", rich_help_panel="Target")),
        ("base_url", Optional[str], opt(None, "--base-url", help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1", rich_help_panel="Target")),
        ("model", Optional[str], opt(None, "--model", help="model name at the endpoint", rich_help_panel="Target")),
        ("api_key", Optional[str], opt(None, "--api-key", envvar="OPENAI_API_KEY", show_envvar=True, help="API key (never stored or printed)", rich_help_panel="Target")),
        ("endpoint", str, opt("completions", "--endpoint", help="completions or chat", rich_help_panel="Target")),
        ("allow_chat_conditional", bool, opt(False, "--allow-chat-conditional", help="with --endpoint chat: accept log-probs that are conditional on the server's chat template (not the text's own log-probs)", rich_help_panel="Target")),
        ("tokenizer", Optional[str], opt(None, "--tokenizer", help="tiktoken encoding or HF tokenizer dir (default: tiktoken's for the model)", rich_help_panel="Target")),
        ("strategy", str, opt("auto", "--strategy", help="auto, prompt, topn, forced, postbias or bisect", rich_help_panel="Tracker")),
        ("epsilon", float, opt(0.01, "--epsilon", help="bisection precision (nats)", rich_help_panel="Tracker")),
        ("context", Optional[int], opt(None, "--context-tokens", help="model context in tokens: longer texts go in sliding windows like --local", rich_help_panel="Tracker")),
        ("concurrency", int, opt(16, "--concurrency", help="requests in flight", rich_help_panel="Tracker")),
        ("rpm", Optional[float], opt(None, "--rpm", help="requests-per-minute limit", rich_help_panel="Tracker")),
        ("tpm", Optional[float], opt(None, "--tpm", help="tokens-per-minute limit", rich_help_panel="Tracker")),
        ("reprobe", bool, opt(False, "--reprobe", help="probe the endpoint's capabilities again", rich_help_panel="Tracker")),
        ("ref", Optional[str], opt(None, "--ref", help="reference model for the 'ref' scorer (local)", rich_help_panel="Target")),
        ("device", Optional[str], opt(None, "--device", help="torch device (default: cuda when available)", rich_help_panel="Local model")),
        ("dtype", str, opt("auto", "--dtype", help="float32, bfloat16, float16 or auto", rich_help_panel="Local model")),
        ("batch_tokens", int, opt(8192, "--batch-tokens", help="padded tokens per forward pass", rich_help_panel="Local model")),
        ("cache_dir", Optional[Path], opt(None, "--cache-dir", envvar="BBMIA_CACHE_DIR", help="cache root (default ./cache)")),
    ]
    return [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=d, annotation=a) for n, a, d in specs]


def with_target_options(func):
    """Add the target-model options (``--local`` or ``--base-url``/``--model`` and friends) to a
    typer command; the command receives them as one ``target: TargetOptions`` argument."""
    extra = _target_parameters()
    names = [p.name for p in extra]
    signature = inspect.signature(func)
    params = [p for p in signature.parameters.values() if p.name != "target"]

    @functools.wraps(func)
    def wrapper(**kwargs):
        with user_errors():
            target = TargetOptions(**{name: kwargs.pop(name) for name in names})
        return func(target=target, **kwargs)

    wrapper.__signature__ = signature.replace(parameters=params + extra)
    wrapper.__annotations__ = {**{k: v for k, v in func.__annotations__.items() if k != "target"}, **{p.name: p.annotation for p in extra}}
    return wrapper
