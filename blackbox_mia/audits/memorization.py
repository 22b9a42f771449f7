"""``bbmia memorize``: memorization by generation (Ishihara & Takahashi 2024).

For each item and each prompt length L, the prompt is the item's first L tokens of the TARGET's
tokenizer (or L characters with ``unit="chars"``) and the reference the next R; the target
continues the prompt greedily (temperature 0, up to R tokens) and the continuation is compared
with the reference character by character (:mod:`blackbox_mia.text.similarity`: eidetic,
approximate and exact memorization). Members of the training data are expected to come out more
often than non-members, so each measure is also scored as a membership signal (AUC with
bootstrap CIs). Only the ``generate`` feature is needed: an endpoint without log-probs works.

Files in the output folder: ``memorization.jsonl`` (one row per (item, L), flushed as it is
made, resumable; its configuration in ``memorization.jsonl.config.json``), ``memorization.png``,
``memorize.json`` and ``memorize.md``.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from tqdm.auto import tqdm

from .. import __version__
from ..backends.base import GENERATE, Backend, Prompt
from ..canary.dataset import load_items
from ..config import check_number
from ..cost.estimate import CostEstimate
from ..spend.guard import guard_spend
from ..spend.plan import estimate_report
from ..datasets import Item
from ..evaluation import to_jsonable
from ..evaluation.memorization import (
    EIDETIC_CHARS,
    MEASURES,
    POOLED,
    markdown_tables,
    plot_memorization,
    summarize,
)
from ..io import check_saved_config, json_line, write_json_atomic
from ..option_names import named
from ..scorers import TARGET
from ..results_file import OVERWRITE_HINT, config_path_for, repair_tail
from ..text.similarity import approximate, eidetic, exact
from ..tokenizers import TokenCodec
from ..types import BlackboxMIAError
from .common import AuditResult, Log, publish, quiet

ROWS_FILE = "memorization.jsonl"
UNITS = ("tokens", "chars")
TOO_SHORT, OVER_CONTEXT = "too_short", "over_context"  # why an (item, L) pair has no row
BATCH_PROMPTS = 64  # prompts per generate call (the local backend packs them into batches itself)


@dataclass(frozen=True)
class MemorizeConfig:
    """Configuration of one memorization audit (saved in the report).

    Attributes:
        dataset: dataset spec (labels optional: without both classes there is no AUC).
        prompt_lengths: prompt lengths L (``unit`` each), distinct, >= 1.
        reference_length: R, the reference's length (``unit``) and the most tokens generated.
        unit: ``"tokens"`` (of the target's tokenizer; prompts are sent as token ids) or
            ``"chars"`` (characters; prompts sent as text, at most as many tokens generated as
            the reference has, the generation cut to R characters before comparing).
        n_boot: bootstrap resamples of every CI (0 = none).
        seed: bootstrap seed.
        limit: only the first ``limit`` items.
        resume: keep the rows already in the rows file (same configuration).
    """

    dataset: str
    prompt_lengths: tuple[int, ...] = (32, 64, 128)
    reference_length: int = 50
    unit: str = "tokens"
    n_boot: int = 1000
    seed: int = 0
    limit: int | None = None
    resume: bool = True

    def validate(self) -> None:
        """Raise :class:`BlackboxMIAError` for impossible values (the message names the option)."""
        if not self.prompt_lengths:
            raise BlackboxMIAError(f"{named('prompt_lengths')} needs at least one length")
        for length in self.prompt_lengths:
            check_number(named("prompt_lengths"), length, at_least=1, integer=True)
        if len(set(self.prompt_lengths)) != len(self.prompt_lengths):
            raise BlackboxMIAError(f"{named('prompt_lengths')} repeats a length: {list(self.prompt_lengths)}")
        check_number(named("reference_length"), self.reference_length, at_least=1, integer=True)
        if self.unit not in UNITS:
            raise BlackboxMIAError(f"{named('unit')} must be one of {', '.join(UNITS)}, got {self.unit!r}")
        check_number(named("n_boot"), self.n_boot, at_least=0, integer=True)
        check_number(named("seed"), self.seed, at_least=0, integer=True)
        if self.limit is not None:
            check_number(named("limit"), self.limit, at_least=1, integer=True)


@dataclass(frozen=True)
class Split:
    """One item cut at prompt length L.

    Attributes:
        prompt: what is sent: token ids (unit tokens) or the prompt text (unit chars).
        prompt_text, reference: texts (the reference's tokens decoded, with unit tokens).
        max_new_tokens: tokens to generate.
        prompt_ids, reference_ids: the token ids (unit tokens), else None.
    """

    prompt: Prompt
    prompt_text: str
    reference: str
    max_new_tokens: int
    prompt_ids: list[int] | None = None
    reference_ids: list[int] | None = None


def split_text(text: str, length: int, reference_length: int, unit: str, codec: TokenCodec) -> Split | None:
    """Cut ``text`` into a prompt of ``length`` and a reference of the next ``reference_length``
    (``unit``: tokens of ``codec``, or characters); None when the text is shorter than both.

    With tokens the prompt is the ids themselves (no retokenization drift); prompt and
    reference texts are their ids decoded (a character cut by the boundary becomes U+FFFD on
    both sides, as in the generation's text). With characters, at most as many tokens are
    generated as the reference has in ``codec``.
    """
    if unit == "tokens":
        ids = codec.encode(text)
        if len(ids) < length + reference_length:
            return None
        prompt_ids, reference_ids = ids[:length], ids[length : length + reference_length]
        return Split(prompt_ids, codec.decode(prompt_ids), codec.decode(reference_ids), reference_length,
                     prompt_ids, reference_ids)
    if len(text) < length + reference_length:
        return None
    prompt, reference = text[:length], text[length : length + reference_length]
    return Split(prompt, prompt, reference, max(1, len(codec.encode(reference))))


def row_key(item_id: str, length: int) -> tuple[str, int]:
    """The identity of a row: (item id, prompt length)."""
    return item_id, length


@dataclass(frozen=True)
class MemorizePlan:
    """Checked input of :func:`run_memorize` (from :func:`prepare_memorize`)."""

    config: MemorizeConfig
    items: list[Item]
    meta: dict


def prepare_memorize(config: MemorizeConfig, cache_dir: str | os.PathLike | None = None) -> MemorizePlan:
    """Check the configuration and load the items (no model needed).

    Raises:
        BlackboxMIAError: a bad configuration, an unreadable dataset, duplicate item ids.
    """
    config.validate()
    items, meta = load_items(config.dataset, config.limit, cache_dir)
    ids = [it.id for it in items]
    if len(set(ids)) != len(ids):
        raise BlackboxMIAError(f"{meta['name']}: item ids repeat; every item needs its own id")
    return MemorizePlan(config, items, meta)


def rows_config(plan: MemorizePlan, target: Backend) -> dict:
    """What the rows depend on (saved beside them; a resumed file must match it): the package
    version, the target's generation settings, the dataset, the unit and R."""
    return {
        "package": "blackbox_mia",
        "version": __version__,
        "target": target.describe_generation(),
        "dataset": plan.meta,
        "unit": plan.config.unit,
        "reference_length": plan.config.reference_length,
    }


ROW_FIELDS = {"id": str, "prompt_length": int, "eidetic": int, "approximate": (int, float), "exact": bool,
              "prompt": str, "reference": str, "generation": str}


def read_memorization_rows(path: Path) -> list[dict]:
    """The rows of a memorization JSONL file (blank lines skipped).

    Raises:
        BlackboxMIAError: an unreadable file, or a malformed line (named by path:line): not a
            JSON object, a field missing or of the wrong type, a label other than 0, 1, null.
    """
    rows = []
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise BlackboxMIAError(f"cannot read {path}: {exc}") from exc
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            row = None
        bad = not isinstance(row, dict) or row.get("label") not in (0, 1, None) or isinstance(row.get("label"), bool)
        bad = bad or any(not isinstance(row.get(k), t) or (t is int and isinstance(row.get(k), bool))
                         for k, t in ROW_FIELDS.items())
        if bad:
            raise BlackboxMIAError(f"{path}:{number}: malformed memorization row; pass {named('resume')} to start again")
        rows.append(row)
    return rows


def _open_rows(path: Path, config: dict, resume: bool) -> dict[tuple[str, int], dict]:
    """Rows already in ``path`` (resume, same configuration), else a fresh empty file; the
    configuration is saved beside it."""
    config_path = config_path_for(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    done: dict[tuple[str, int], dict] = {}
    if resume and path.exists() and path.stat().st_size > 0:
        check_saved_config(config_path, config, "memorization configuration", path, OVERWRITE_HINT)
        repair_tail(path)
        done = {row_key(r["id"], r["prompt_length"]): r for r in read_memorization_rows(path)}
    else:
        path.write_text("", encoding="utf-8")
    write_json_atomic(config_path, config)
    return done


def measure_row(item: Item, length: int, split: Split, generation: str, unit: str, reference_length: int) -> dict:
    """One result row: the split, the generation (cut to R characters with unit chars) and its
    eidetic (characters), approximate and exact memorization of the reference."""
    if unit == "chars":
        generation = generation[:reference_length]
    return {
        "id": item.id,
        "label": item.label,
        "prompt_length": length,
        "prompt": split.prompt_text,
        "reference": split.reference,
        "generation": generation,
        "prompt_ids": split.prompt_ids,
        "reference_ids": split.reference_ids,
        "eidetic": eidetic(generation, split.reference),
        "approximate": approximate(generation, split.reference),
        "exact": exact(generation, split.reference),
    }


def fits(split: Split, target: Backend) -> bool:
    """Whether the codec's BOS, the prompt and ``max_new_tokens`` fit the target's context
    (always, when the context is unknown)."""
    if target.context is None:
        return True
    prompt = split.prompt_ids if split.prompt_ids is not None else target.codec.encode(split.prompt_text)
    return (target.codec.bos_id is not None) + len(prompt) + split.max_new_tokens <= target.context


def plan_prompts(
    plan: MemorizePlan, target: Backend
) -> tuple[list[tuple[Item, int, Split]], dict[int, dict[str, int]]]:
    """Every (item, prompt length, split) to generate, in the order (prompt length, item), and per
    prompt length the items skipped: ``too_short`` (shorter than L + R) and ``over_context``
    (BOS + L + R tokens exceed the target's context). Sends nothing."""
    config = plan.config
    skipped: dict[int, dict[str, int]] = {}
    wanted: list[tuple[Item, int, Split]] = []
    for length in config.prompt_lengths:
        skipped[length] = {TOO_SHORT: 0, OVER_CONTEXT: 0}
        for item in plan.items:
            split = split_text(item.text, length, config.reference_length, config.unit, target.codec)
            if split is None:
                skipped[length][TOO_SHORT] += 1
            elif not fits(split, target):
                skipped[length][OVER_CONTEXT] += 1
            else:
                wanted.append((item, length, split))
    return wanted, skipped


def estimate_memorize(plan: MemorizePlan, target: Backend) -> tuple[int, CostEstimate]:
    """``(prompts, estimate)``: how many prompts :func:`generate_rows` generates from and what that
    is expected to cost (requests, billed tokens, USD: the backend's
    :meth:`~blackbox_mia.backends.base.Backend.estimate_generation` of every prompt
    :func:`plan_prompts` lists, rows already in a resumed file counted too). Sends nothing.

    Raises:
        BlackboxMIAError: the target lacks ``generate``.
    """
    target.require(GENERATE)
    wanted, _ = plan_prompts(plan, target)
    lengths = [len(s.prompt_ids) if s.prompt_ids is not None else len(target.codec.encode(s.prompt_text))
               for _, _, s in wanted]
    return len(wanted), target.estimate_generation(lengths, [s.max_new_tokens for _, _, s in wanted])


def memorize_estimate(plan: MemorizePlan, target: Backend) -> tuple[int, dict[str, dict]]:
    """``(prompts, report)``: :func:`estimate_memorize` as the report ``--dry-run`` prints and the
    spend guard judges (:func:`~blackbox_mia.spend.plan.estimate_groups`' shape, one group
    ``memorize``). Sends nothing.

    Raises:
        BlackboxMIAError: the target lacks ``generate``.
    """
    prompts, estimate = estimate_memorize(plan, target)
    return prompts, estimate_report({"memorize": {TARGET: estimate}})


def generate_rows(
    plan: MemorizePlan, target: Backend, path: Path, progress: bool = True
) -> tuple[list[dict], dict[int, dict[str, int]]]:
    """Generate the missing rows into ``path`` (resuming it) and return every row, in the
    order (prompt length, item), and per prompt length the items skipped: ``too_short``
    (shorter than L + R) and ``over_context`` (BOS + L + R tokens exceed the target's context).

    Raises:
        BlackboxMIAError: the target lacks ``generate``; a resumed file of another
            configuration; a prompt that does not fit the target's context.
    """
    config = plan.config
    target.require(GENERATE)
    done = _open_rows(path, to_jsonable(rows_config(plan, target)), config.resume)
    wanted, skipped = plan_prompts(plan, target)
    todo = [w for w in wanted if row_key(w[0].id, w[1]) not in done]
    bar = tqdm(total=len(wanted), initial=len(wanted) - len(todo), unit="prompt", disable=not progress, desc="memorize")
    try:
        with open(path, "a", encoding="utf-8") as f:
            for start in range(0, len(todo), BATCH_PROMPTS):
                chunk = todo[start : start + BATCH_PROMPTS]
                for budget in sorted({s.max_new_tokens for _, _, s in chunk}):
                    group = [w for w in chunk if w[2].max_new_tokens == budget]
                    generations = target.generate([s.prompt for _, _, s in group], max_new_tokens=budget, logprobs=False)
                    for (item, length, split), gen in zip(group, generations):
                        row = measure_row(item, length, split, gen.text, config.unit, config.reference_length)
                        f.write(json_line(row, f"row {item.id!r} L={length}"))
                        f.flush()
                        os.fsync(f.fileno())
                        done[row_key(item.id, length)] = row
                        bar.update(1)
    except OSError as exc:
        raise BlackboxMIAError(f"cannot write {path}: {exc.strerror or exc}") from exc
    finally:
        bar.close()
    return [done[row_key(item.id, length)] for item, length, _ in wanted], skipped


def run_memorize(plan: MemorizePlan, target: Backend, out_dir: Path, progress: bool = True, log: Log = quiet,
                 yes: bool = False) -> AuditResult:
    """Generate (see :func:`generate_rows`), summarize and report (see the module docstring).
    Before the first request, the estimate (:func:`memorize_estimate`, what ``--dry-run``
    prints) goes through the spend guard (:func:`~blackbox_mia.spend.guard.guard_spend`):
    ``yes=True``, or a target with ``max_cost=``, lets a run above it proceed.

    Returns:
        The :class:`AuditResult`; its summary holds ``auc`` and ``auc_ci`` (pooled over prompt
        lengths) per measure, ``by_length`` (AUC and CI per measure per L), ``by_label``
        (:func:`~blackbox_mia.evaluation.memorization.summarize`), ``skipped`` and ``n_rows``.

    Raises:
        SpendRefused: the estimate exceeds the spend guard, neither ``yes`` nor a cap given.
        BlackboxMIAError: as :func:`generate_rows`; no item long enough for any prompt length.
    """
    config = plan.config
    out_dir = Path(out_dir)
    guard_spend(lambda: memorize_estimate(plan, target)[1], {TARGET: target}, yes)
    log(f"greedy continuations of {len(plan.items)} items at prompt lengths "
        f"{', '.join(map(str, config.prompt_lengths))} {config.unit}, reference {config.reference_length} {config.unit}")
    rows, skipped = generate_rows(plan, target, out_dir / ROWS_FILE, progress)
    if not rows:
        raise BlackboxMIAError(
            f"no item of {plan.meta['name']} has a prompt of {min(config.prompt_lengths)} + a reference of "
            f"{config.reference_length} {config.unit} that fits the target ({target.context} tokens of context): choose "
            f"shorter {named('prompt_lengths')} or {named('reference_length')}"
        )
    log("summaries and AUCs with bootstrap CIs")
    summary = summarize(rows, config.prompt_lengths, config.n_boot, config.seed)
    metrics = summary["metrics"]
    pooled = metrics[POOLED]
    plot = plot_memorization(summary["by_label"], config.unit, out_dir / "memorization.png")
    notes = [
        (f"Eidetic memorization counts forward-matching characters; the share column counts rows with at least "
        f"{EIDETIC_CHARS} characters. Approximate = 1 - Levenshtein / longer length (characters)."),
        "Pooled AUCs take every (item, prompt length) row: an item counts once per prompt length.",
    ]
    report = {
        "title": f"Memorization by generation: {plan.meta['name']}",
        "config": {**rows_config(plan, target), "memorize": asdict(config), "n_items": len(plan.items),
                   "n_rows": len(rows), "seeds": {"bootstrap": config.seed}, "rows_file": ROWS_FILE},
        "plots": {"Memorization vs prompt length": plot},
        "notes": notes,
        "by_label": summary["by_label"],
        "membership": metrics,
        "skipped": skipped,
    }
    result_summary = {
        "auc": {m: None if pooled is None else pooled[m]["auc"] for m in MEASURES},
        "auc_ci": {m: None if pooled is None else pooled[m]["auc_ci"] for m in MEASURES},
        "by_length": {length: None if m is None else {k: {"auc": m[k]["auc"], "auc_ci": m[k]["auc_ci"]} for k in MEASURES}
                      for length, m in metrics.items() if length != POOLED},
        "by_label": summary["by_label"],
        "skipped": skipped,
        "n_rows": len(rows),
    }
    return publish(report, result_summary, out_dir, "memorize", appendix=markdown_tables(summary, config.unit),
                   hidden=("by_label", "membership", "skipped"),
                   warnings=memorize_warnings(skipped, metrics, config.unit, target.context))


def memorize_warnings(skipped: dict, metrics: dict, unit: str, context: int) -> list[str]:
    """What a memorization report's reader must know before quoting its AUCs (the report lists
    them first, the console prints them one line each: :func:`~.common.publish`).

    Args:
        skipped: per prompt length L, items without a row: ``{L: {"too_short": n,
            "over_context": n}}`` (:func:`generate_rows`).
        metrics: per ``str(L)`` and ``"pooled"``, the membership metrics or None (not both
            labels among the rows: :func:`~blackbox_mia.evaluation.memorization.summarize`).
        unit: what L and R count (``tokens`` or ``chars``).
        context: the target's context in tokens.

    Returns:
        One sentence per caveat: per L, the items skipped (too short for L + R, or over the
        context); no AUC at all (the rows hold one class), else the lengths without an AUC.
    """
    warnings = [f"L={length}: {n[TOO_SHORT]} items shorter than L + R {unit} and {n[OVER_CONTEXT]} items whose prompt "
                f"and reference exceed the target's context ({context} tokens) were skipped"
                for length, n in skipped.items() if n[TOO_SHORT] or n[OVER_CONTEXT]]
    if metrics[POOLED] is None:
        warnings.append("no membership AUC: the rows do not hold both members (label 1) and non-members (label 0)")
    else:
        missing = [length for length, m in metrics.items() if m is None]
        if missing:
            warnings.append(f"no AUC at L={', '.join(missing)}: the rows left there do not hold both members and "
                            "non-members (the pooled AUC counts the other lengths only)")
    return warnings

