"""Pieces shared by the commands: the target options, AUC tables (items come from
:func:`blackbox_mia.datasets.load_items`)."""

from __future__ import annotations

import dataclasses
import os
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, make_dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from ..backends.base import Backend
from ..backends.options import KINDS, check_ranges, flag_name, setting_of
from ..backends.registry import BackendSpec, build_spec, read_spec, split_query
from ..datasets.fields import Fields
from ..scorers import TARGET, Scorer, reference_role, refine_for
from ..scorers.bounded import DEFAULT_TOLERANCE_NATS, check_tolerance
from ..config import check_number  # noqa: F401  (the commands import it from here)
from ..spend.limits import GUARD_REQUESTS, GUARD_USD
from ..types import BlackboxMIAError
from .options import option_fields, with_dataclass_options


YES_HELP = (f"run even when the estimate exceeds {GUARD_REQUESTS:,} requests or ${GUARD_USD:g} without --max-cost or "
            "--max-requests (the spend guard, judged before the first request)")

AUC_CI_RESAMPLES = 1000  # bootstrap resamples of the AUC intervals the console prints (score, demo)

PRECISIONS = ("scores", "token")
"""``--precision``: bisection refines a text until the requested scores are ε-precise, or every
value to ε."""

BASE_URL_ENV = "OPENAI_BASE_URL"
"""The environment variable the OpenAI SDK reads its endpoint from (the key: ``OPENAI_API_KEY``)."""


def _backend_fields() -> dict[str, tuple[type, dataclasses.Field]]:
    """The command-line field of each backend setting, by name, with the options class it is
    from (the first kind's, where kinds share a name: one flag)."""
    found: dict[str, tuple[type, dataclasses.Field]] = {}
    for kind in KINDS.values():
        for f in option_fields(kind.options):
            found.setdefault(f.name, (kind.options, f))
    return found


BackendFlags = make_dataclass(
    "BackendFlags", [(name, typing.get_type_hints(cls)[name] | None, field(default=None))
                     for name, (cls, _) in _backend_fields().items()],
    frozen=True, namespace={"__module__": __name__})
BackendFlags.__doc__ = """The backend settings as command-line flags: one field, ``None`` when not given, per field of a
registered kind's options (:class:`~blackbox_mia.backends.local.kind.LocalOptions`,
:class:`~blackbox_mia.backends.api.kind.ApiOptions`) that is a flag; :func:`build_from_flags`
maps them onto the options of the kind a spec names."""


def flag_of(name: str) -> str:
    """The command-line flag of a backend setting (``context`` → ``--context-tokens``)."""
    return flag_name(_backend_fields()[name][1])


def backend_options() -> dict[str, dict[str, Any]]:
    """The :func:`typer.Option` arguments of every backend setting's flag, from its options
    field's :func:`~blackbox_mia.backends.options.setting` (flag, help, panel, envvar)."""
    options = {}
    for name, (_, f) in _backend_fields().items():
        found = setting_of(f)
        spec: dict[str, Any] = {"flags": (flag_name(f),), "help": found.help if found else ""}
        if found is not None and found.panel:
            spec["rich_help_panel"] = found.panel
        if found is not None and found.envvar:
            spec.update(envvar=found.envvar, show_envvar=True)
        options[name] = spec
    return options


def build_from_flags(spec: BackendSpec, flags: BackendFlags, refine: tuple[float, ...] = (),
                     check_first: bool = True) -> Backend:
    """The backend ``spec`` names, its options from the spec's settings and the flags given
    (the one place flags become a kind's options); a flag and a query key for the same setting
    must agree. A kind whose options refine bisection (``refine_for``) gets ``refine``; one that
    can check its server before loading anything slow (``check_first``) does so unless
    ``check_first`` is False.

    Raises:
        BlackboxMIAError: a flag and a query key that disagree (naming both), or the backend
            cannot be built.
    """
    names = {f.name for f in dataclasses.fields(KINDS[spec.kind].options)}
    given = {f.name: getattr(flags, f.name) for f in option_fields(KINDS[spec.kind].options)
             if getattr(flags, f.name) is not None}
    if "refine_for" in names:
        given["refine_for"] = refine
    if "check_first" in names:  # a server that is down or lacks the model: one line, before the tokenizer
        given["check_first"] = check_first
    return build_spec(spec, given, flag_of)


@dataclass(frozen=True)
class TargetOptions(BackendFlags):
    """Command-line choice of the target model (``--local``, ``--base-url``/``--model``, or
    ``--target`` with any backend spec) and the reference model (``--ref``, any backend spec),
    plus the settings every backend of the command is built with (the :class:`BackendFlags`
    fields).

    Numeric options are checked on construction, before any model is loaded or request sent,
    against the ranges of the kinds' options.

    Raises:
        BlackboxMIAError: ``--precision`` not one of :data:`PRECISIONS`; a number out of its
            range (``--epsilon`` not a finite number > 0 (nats), ``--concurrency`` < 1,
            ``--rpm``/``--tpm`` not finite and > 0, ``--context-tokens`` < 2,
            ``--batch-tokens`` < 1, ...).
    """

    local: str | None = None
    ref: list[str] | None = None
    base_url: str | None = None
    model: str | None = None
    spec: str | None = None
    dry_run: bool = False
    precision: str = "scores"
    score_tolerance: float = DEFAULT_TOLERANCE_NATS
    yes: bool = False

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise BlackboxMIAError(f"--precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")
        check_tolerance(self.score_tolerance)
        for kind in KINDS.values():
            check_ranges(kind.options, {f.name: getattr(self, f.name) for f in option_fields(kind.options)}, flag_of)

    @property
    def references(self) -> tuple[str, ...]:
        """The reference models' specs in ``--ref`` order (repeatable; one spec given as a
        string counts as one); empty without ``--ref``."""
        return () if not self.ref else (self.ref,) if isinstance(self.ref, str) else tuple(self.ref)

    @property
    def local_model(self) -> str | None:
        """The local target model (``--local``, or ``--target`` naming a ``local:`` model)
        without its ``?`` settings; ``None`` for another kind of target."""
        if self.local:
            return split_query(self.local)[0]
        if self.spec:
            return self.given_spec.target if self.given_spec.kind == "local" else None
        return None

    @cached_property
    def given_spec(self) -> BackendSpec | None:
        """``--target`` or ``--local`` read once (:func:`normalized_spec`); ``None``: neither.

        Raises:
            BlackboxMIAError: a malformed spec.
        """
        if not (self.local or self.spec):
            return None
        return normalized_spec(f"local:{self.local}" if self.local else self.spec)

    def target_spec(self, env: Mapping[str, str] | None = None) -> BackendSpec:
        """The target, read once: ``local`` and its path, ``api`` and its
        :class:`~blackbox_mia.backends.api.kind.ApiTarget`, or the kind ``--target`` names.

        Like the OpenAI SDK, the endpoint defaults to ``OPENAI_BASE_URL`` from the environment,
        but only when none of ``--local``, ``--base-url`` and ``--target`` is given. A local
        path is normalised (:func:`local_model_path`), so ``cache/canary/X/`` and
        ``cache/canary/X`` make the same configuration.

        Args:
            env: the environment to read ``OPENAI_BASE_URL`` from (default ``os.environ``).

        Raises:
            BlackboxMIAError: no target (no ``--local``, ``--base-url``, ``--target`` or
                ``OPENAI_BASE_URL``), two targets, an endpoint without ``--model`` or without
                ``http://``/``https://``, a malformed spec.
        """
        from ..backends.api.http.config import display_url
        from ..backends.api.kind import ApiTarget

        if sum(bool(given) for given in (self.local, self.base_url, self.spec)) > 1:
            raise BlackboxMIAError("choose one target: --local PATH, --base-url URL --model NAME, or --target SPEC")
        if self.given_spec is not None:
            return self.given_spec
        env = os.environ if env is None else env
        base_url, source = (self.base_url, "--base-url") if self.base_url else (env.get(BASE_URL_ENV), BASE_URL_ENV)
        if not base_url:
            raise BlackboxMIAError(f"choose the target: --local PATH, or --base-url URL --model NAME (or "
                                   f"{BASE_URL_ENV} and --model), or --target SPEC")
        if not self.model:
            raise BlackboxMIAError(f"{source} needs --model (the model name at {display_url(base_url)})")
        if not base_url.startswith(("http://", "https://")):
            raise BlackboxMIAError(f"{source} must start with http:// or https://, got {display_url(base_url)!r}")
        return BackendSpec("api", ApiTarget(self.model, base_url))

    def white_box(self) -> bool:
        """Whether the target is a local model (``--local``, or ``--target local:...``): its
        vocabulary statistics are there to read."""
        return self.local_model is not None


def check_output(path: Path, folder: bool) -> Path:
    """Check before anything slow that ``--out`` can be written: a folder (``folder``) or a file
    path that is not the other kind, under a folder this process may write (the missing part is
    created when the results are written). Nothing is created here.

    Returns:
        ``path``.

    Raises:
        BlackboxMIAError: ``path`` is a file where a folder is meant or the reverse, a part of
            it is a file, or its nearest existing folder is not writable.
    """
    if path.exists() and path.is_dir() != folder:
        kind, wanted = ("a file", "a folder") if folder else ("a folder", "a file path")
        raise BlackboxMIAError(f"--out {path} is {kind}; give {wanted}")
    existing = (path if folder else path.parent).absolute()
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise BlackboxMIAError(f"--out {path}: {existing} is a file, so nothing can be written under it")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise BlackboxMIAError(f"--out {path}: {existing} is not writable; choose another --out")
    return path


def local_model_path(model: str) -> str:
    """A local model as one spelling: an existing path normalised (``cache/canary/X/``,
    ``./cache/canary/X`` → ``cache/canary/X``; relative stays relative), a hub name as given.
    Results record this spelling, so resuming does not depend on how the path was typed."""
    return os.path.normpath(model) if Path(model).exists() else model


def normalized_spec(spec: str) -> BackendSpec:
    """A backend spec as typed, read once (:func:`~blackbox_mia.backends.registry.read_spec`),
    its local model path normalised (:func:`local_model_path`); other kinds as read.

    Raises:
        BlackboxMIAError: a malformed spec (see :func:`~blackbox_mia.backends.registry.read_spec`).
    """
    read = read_spec(spec)
    if read.kind != "local" or not read.target:
        return read
    return replace(read, target=local_model_path(read.target))


def build_backends(opts: TargetOptions, scorers: Sequence[Scorer], check_first: bool = True) -> dict[str, Backend]:
    """``{"target": ..., "reference": ...}`` from command-line options, through the backend
    registry (``--target`` and ``--ref`` take any spec: a local path, ``local:PATH``, ``api:MODEL@URL``, with
    ``?key=value`` settings; ``--ref`` repeated, the roles ``reference``, ``reference2``... of
    :func:`~blackbox_mia.scorers.reference_role`); a black-box tracker refines values to the precision ``scorers``
    need (:func:`~blackbox_mia.scorers.refine_for`) unless ``opts.precision`` is ``"token"``.

    An endpoint is checked first (``GET /models``: the server answers, takes the key, lists the
    model) before its tokenizer loads, unless ``check_first`` is False.

    Raises:
        BlackboxMIAError: no target, both a local model and an endpoint, a bad spec, a flag
            and a query key that disagree; a server refusing the connection or the key, or not
            listing the model.
    """
    refine = refine_for(scorers) if opts.precision == "scores" else ()
    backends = {TARGET: build_from_flags(opts.target_spec(), opts, refine, check_first)}
    if opts.references:
        try:
            for index, spec in enumerate(opts.references):
                backends[reference_role(index)] = build_from_flags(normalized_spec(spec), opts, refine, check_first)
        except BaseException:
            close_all(backends)
            raise
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
    from ..evaluation.metrics import auc

    labelled = [r for r in rows if r.label is not None]
    labels = [r.label for r in labelled]
    if len(set(labels)) < 2:
        return {}
    aucs: dict[str, float | None] = {}
    for s in scorers:
        values = [r.scores[s.label] for r in labelled]
        aucs[s.label] = None if None in values else auc(labels, values)
    return aucs


def auc_cells(rows, scorers: Sequence[Scorer], n_boot: int = AUC_CI_RESAMPLES, seed: int = 0) -> dict[str, str]:
    """Each scorer's AUC as a console cell with its 95% stratified percentile-bootstrap CI
    (:func:`~blackbox_mia.evaluation.metrics.bootstrap_ci`): ``"0.869 [0.834, 0.902]"``; ``"-"``
    where :func:`auc_by_scorer` has none; {} without labels of both classes. With fewer than
    :data:`~blackbox_mia.evaluation.metrics.MIN_PER_CLASS_CI` texts of a class no interval:
    ``"1.000 [no CI: 2 + 1 texts]"`` (:func:`small_sample_warning` says why)."""
    from ..evaluation.metrics import bootstrap_ci

    labelled = [r for r in rows if r.label is not None]
    labels = [r.label for r in labelled]
    small = small_sample_warning(rows) is not None
    cells = {}
    for label, value in auc_by_scorer(rows, scorers).items():
        if value is None:
            cells[label] = "-"
            continue
        if small:
            cells[label] = f"{value:.3f} [no CI: {labels.count(1)} + {labels.count(0)} texts]"
            continue
        lo, hi = bootstrap_ci(labels, [r.scores[label] for r in labelled], "auc", n_boot, seed=seed)
        cells[label] = f"{value:.3f} [{lo:.3f}, {hi:.3f}]"
    return cells


def small_sample_warning(rows) -> str | None:
    """The warning for labelled ``rows`` with fewer than
    :data:`~blackbox_mia.evaluation.metrics.MIN_PER_CLASS_CI` texts of a class (None otherwise,
    and without labels of both classes)."""
    from ..evaluation.metrics import small_sample

    labels = [r.label for r in rows if r.label is not None]
    if len(set(labels)) < 2:
        return None
    return small_sample(labels.count(1), labels.count(0))


def format_table(header: Sequence[str], rows: Sequence[Sequence]) -> str:
    """A plain-text table; floats shown with 3 decimals, None as '-'."""
    cells = [[("-" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v)) for v in row] for row in rows]
    widths = [max(len(str(h)), *(len(r[i]) for r in cells)) for i, h in enumerate(header)]
    lines = ["  ".join(str(h).ljust(w) for h, w in zip(header, widths))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)


TARGET_OPTIONS = {
    "local": {"flags": ("--local",), "help": "local Hugging Face model (directory, hub name, or a .gguf file)",
              "rich_help_panel": "Target"},
    "base_url": {"flags": ("--base-url",), "help": "OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1 "
                 "(default: $OPENAI_BASE_URL when no --local is given, as in the OpenAI SDK)", "rich_help_panel": "Target"},
    "model": {"flags": ("--model",), "help": "model name at the endpoint", "rich_help_panel": "Target"},
    "spec": {"flags": ("--target",), "help": "the target as a backend spec of any registered kind: local:PATH, "
             "api:MODEL@URL, KIND:... (instead of --local or --base-url/--model)", "rich_help_panel": "Target"},
    "ref": {"help": "reference model for the 'ref' scorer: a local path, local:PATH or api:MODEL@URL; repeatable "
            "(several references: 'ref' compares with the mean of their log-likelihoods)", "rich_help_panel": "Target"},
    **backend_options(),
    "precision": {"help": "bisection refines each text until the requested scores are --epsilon-precise "
                  "('scores': Min-K%'s and the loss score's bounds, fewer requests), or every token's value "
                  "('token')", "rich_help_panel": "Tracker"},
    "score_tolerance": {"help": "nats: a score resting on log-prob means known less precisely than this (tokens the "
                        "endpoint gives only by bounds, or bounds widened by its shape variation) is null with "
                        "its interval; a wider tolerance reports the score with its interval beside it",
                        "rich_help_panel": "Tracker"},
    "dry_run": {"help": "print the expected requests, billed tokens and USD, and stop: nothing is scored or "
                "generated (a black-box target's capability probe, a few dozen requests once per endpoint and "
                "model, runs first when its record is not cached: the estimate needs it)", "rich_help_panel": "Tracker"},
    "yes": {"help": YES_HELP, "rich_help_panel": "Tracker"},
}
"""The :func:`typer.Option` arguments of every :class:`TargetOptions` flag: the target's own,
then every backend setting's (:func:`backend_options`, from the kinds' options)."""


def shown_defaults(options: Mapping[str, Mapping]) -> dict[str, Mapping]:
    """``options`` with each backend setting's default (from its kind's options class) shown
    in the help: the flags themselves default to ``None``, "not given"."""
    defaults = {name: f.default for name, (_, f) in _backend_fields().items()}
    return {name: {**spec, "show_default": str(defaults[name])}
            if defaults.get(name) is not None and not isinstance(defaults[name], bool) else spec
            for name, spec in options.items()}


with_target_options = with_dataclass_options(TargetOptions, "target", shown_defaults(TARGET_OPTIONS))
"""Add the target-model options (``--local`` or ``--base-url``/``--model`` and friends) to a
typer command; the command receives them as one ``target: TargetOptions`` argument."""


FIELD_OPTIONS = {
    "text_field": {"help": "the column (field) of DATASET's records that holds the text (default: text, else input)",
                   "rich_help_panel": "Data"},
    "label_field": {"help": "the column of the membership label, 0, 1 or null (default: label, optional)",
                    "rich_help_panel": "Data"},
    "id_field": {"help": "the column of the item ids (default: id, optional: <file stem>-<row>)",
                 "rich_help_panel": "Data"},
}
"""The :func:`typer.Option` arguments of the :class:`~blackbox_mia.datasets.fields.Fields` flags."""

with_field_options = with_dataclass_options(Fields, "fields", FIELD_OPTIONS)
"""Add ``--text-field``, ``--label-field`` and ``--id-field`` to a typer command that reads a
DATASET; the command receives them as one ``fields: Fields`` argument and gives them to its
spec with :func:`~blackbox_mia.datasets.fields.with_fields`."""
