"""An "unlearned" canary: a trained canary fine-tuned on a forget subset of its members so as to
forget them (the machine-unlearning setting that Shi et al. 2024 §7 audit).

Two methods, each step on a batch of the forget items' training windows (the very windows the
canary was trained and is scored on, :func:`~blackbox_mia.canary.train.training_windows`,
batched as in training), AdamW at a constant learning rate:

* ``gradient_ascent``: steps along the gradient of ``-loss`` (maximises the forget set's loss).
* ``alternative_labels`` (Eldan & Russinovich 2023, the "unlearned" model Shi et al. audit): a
  *reinforced* copy is first trained further on the forget windows (as many steps, the same
  rate); at each position the *generic* logits ``v_base - alpha * relu(v_reinforced - v_base)``
  take away what the forget set itself adds, and their argmax is the alternative label; the
  canary is then fine-tuned (ordinary descent) to predict the alternative labels on the forget
  windows, so a forgotten text is continued by generic tokens instead of its own.

Some forgotten members stay memorized (too few steps, a low rate): the unlearning audit must find
those. The forget set is a seeded sample of the members, or (``forget_from="memorized"``, the
paper's setting: the model had memorized what it is asked to forget) of the members the
white-box memorization label calls memorized before unlearning (:func:`memorized_members`: loss
score above the non-members' ``1 - memorized_target_fpr`` quantile, the rule the audit's ground truth
applies to the unlearned model), so that "still memorized afterwards" is an unlearning failure,
not an item that was never memorized.

The result is a new canary directory: the fine-tuned model, the base canary's items and a
manifest (the base one plus ``unlearning``: the base directory, the forget ids, the method and
its settings, the forget rule and the members memorized before, the forget set's loss before
and after), so ``canary:DIR`` and ``--local DIR``
work on it as on any canary; ``forget_items.jsonl`` holds the forget set.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from ..datasets import Item
from ..key_aliases import UNLEARN_CONFIG_KEYS, UNLEARNING_TRUTH_KEYS, with_old_keys
from ..option_names import named
from ..types import BlackboxMIAError
from .manifest import (
    ITEMS_FILE,
    MANIFEST,
    canary_items,
    load_manifest,
    write_items,
    write_manifest,
)
from .unlearn_config import ALL_MEMBERS, UnlearnConfig

FORGET_FILE = "forget_items.jsonl"
def choose_forget(members: list[Item], forget: str, seed: int, noun: str = "members") -> list[Item]:
    """The forget set: ``forget`` is a count N (a seeded sample of N of ``members``, in their
    order) or the path of a file of their ids (one per line, or a JSON list).

    Args:
        members: the candidates (all members, or those memorized before unlearning).
        noun: what the candidates are, for messages.

    Raises:
        BlackboxMIAError: N outside [1, number of candidates], an unreadable file, an id that is
            not a candidate, an empty list.
    """
    by_id = {item.id: item for item in members}
    if forget.strip().isdigit():
        n = int(forget)
        if not 1 <= n <= len(members):
            raise BlackboxMIAError(f"{named('forget', forget)}: choose between 1 and the canary's {len(members)} {noun}")
        chosen = set(random.Random(seed).sample(range(len(members)), n))
        return [item for i, item in enumerate(members) if i in chosen]
    try:
        text = Path(forget).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BlackboxMIAError(f"{named('forget', forget)}: neither a count nor a readable file of ids ({exc})") from exc
    try:
        ids = json.loads(text) if text.lstrip().startswith("[") else [line.strip() for line in text.splitlines()]
    except json.JSONDecodeError as exc:
        raise BlackboxMIAError(f"{named('forget', forget)}: not a JSON list of ids ({exc})") from exc
    ids = [str(i) for i in ids if str(i)]
    unknown = [i for i in ids if i not in by_id]
    if unknown or not ids:
        raise BlackboxMIAError(f"{named('forget', forget)}: " + (f"not {noun} of the canary: {unknown[:5]}" if unknown else "no id"))
    return [by_id[i] for i in dict.fromkeys(ids)]


def memorized_members(items: list[Item], scores: dict[str, float | None],
                      target_fpr: float) -> tuple[list[str], float]:
    """The white-box memorization label: the members (label 1) whose loss score (mean token
    log-prob, nats/token, higher = more likely) exceeds the ``1 - target_fpr`` quantile (numpy
    ``method="higher"``: an observed score) of the non-members' scores.

    Args:
        items: the canary's items (members and non-members).
        scores: per item id, its loss score under the model judged (None: not scored).
        target_fpr: the non-members' share allowed above the threshold, in (0, 1).

    Returns:
        ``(ids, threshold)``: the memorized members' ids in item order and the threshold.

    Raises:
        BlackboxMIAError: no scored non-member.
    """
    nonmember = [scores[it.id] for it in items if it.label == 0 and scores.get(it.id) is not None]
    if not nonmember:
        raise BlackboxMIAError("the memorization label needs scored non-members; this canary has none")
    threshold = float(np.quantile(np.array(nonmember), 1 - target_fpr, method="higher"))
    ids = [it.id for it in items if it.label == 1 and scores.get(it.id) is not None and scores[it.id] > threshold]
    return ids, threshold


def loss_scores(model_dir: str | Path, items: list[Item]) -> dict[str, float]:
    """Per item id, the loss score (mean token log-prob, nats/token) of its text under the model
    in ``model_dir``, scored by the local backend as the audits score it."""
    from ..backends.local import LocalBackend, LocalConfig
    from ..scorers.base import mean_logprob

    backend = LocalBackend(LocalConfig(str(model_dir), device="cpu"))
    try:
        lps = backend.logprobs([item.text for item in items])
    finally:
        backend.close()
    return {item.id: mean_logprob(lp) for item, lp in zip(items, lps)}


def unlearn_canary(
    base: str | Path, forget: str, config: UnlearnConfig = UnlearnConfig(), out_dir: str | Path | None = None
) -> Path:
    """Fine-tune the canary in ``base`` on a forget set of its members (gradient ascent or
    alternative labels) and save it as a new canary directory (see the module docstring).

    Args:
        base: a trained canary's directory.
        forget: a count N or a file of member ids (see :func:`choose_forget`), among all
            members or the memorized ones (``config.forget_from``).
        config: method, steps, learning rate, batch size, seed, forget rule.
        out_dir: the new directory (default: ``<base>-unlearned-<hash of settings and forget
            ids>`` beside ``base``); its manifest is written last.

    Returns:
        The new directory. Its manifest's ``unlearning`` holds ``base``, ``base_config_hash``,
        ``method``, the settings, ``forget_ids``, ``memorized_before`` (``target_fpr``, also as
        ``fpr`` for one release, ``threshold`` and ``ids``: the members memorized by the base canary, :func:`memorized_members`),
        ``forget_loss_before``/``forget_loss_after`` (mean loss of the forget windows,
        nats/token), ``ascended_windows`` (windows trained on, counted once per step),
        ``ascents_per_item`` (per forget id, how many of its windows' steps there were: 0 for
        an item a short schedule never reached), ``changed_labels`` (alternative labels: the
        share of forget-window positions whose label is not the true next token) and ``seconds``.

    Raises:
        BlackboxMIAError: ``base`` is not a complete canary, bad settings or forget set (also:
            fewer memorized members than N).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from .forget_training import ForgetTraining
    from .model import save_model_dir

    config.validate()
    base = Path(base)
    manifest = load_manifest(base)
    items = canary_items(base)
    members = [item for item in items if item.label == 1]
    start = time.perf_counter()
    memorized, threshold = memorized_members(items, loss_scores(base, items), config.memorized_target_fpr)
    chosen = _forget_set(members, memorized, forget, config)
    forget_ids = [item.id for item in chosen]
    out = _new_directory(base, out_dir, config.short_hash(forget_ids))

    tokenizer = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base)
    owned = [(item.id, window) for item in chosen for window in _windows(tokenizer, model, [item])]
    windows = [window for _, window in owned]
    owner = {id(window): item_id for item_id, window in owned}  # batches hold these very lists
    ascents = dict.fromkeys(forget_ids, 0)
    retain = _windows(tokenizer, model, [m for m in members if m.id not in set(forget_ids)])
    training = ForgetTraining.start(model, windows, config)
    before = training.mean_loss(windows)
    ascended = training.run(windows, retain, owner, ascents, random.Random(config.seed))
    after = training.mean_loss(windows)

    save_model_dir(out, model, tokenizer)
    write_items(out / ITEMS_FILE, items)
    write_items(out / FORGET_FILE, chosen)
    unlearning = {
        "base": str(base),
        "base_config_hash": manifest.get("config_hash"),
        **with_old_keys(asdict(config), UNLEARN_CONFIG_KEYS),
        "forget_ids": forget_ids,
        "memorized_before": with_old_keys({"target_fpr": config.memorized_target_fpr, "threshold": threshold,
                                           "ids": memorized}, UNLEARNING_TRUTH_KEYS),
        "n_forget_windows": len(windows),
        "ascended_windows": ascended,
        "ascents_per_item": ascents,
        "changed_labels": _changed_share(windows, training.labels) if training.labels else None,
        "forget_loss_before": before,
        "forget_loss_after": after,
        "seconds": round(time.perf_counter() - start, 2),
        "forget_file": FORGET_FILE,
    }
    write_manifest(out, {**manifest, "unlearning": unlearning})
    return out


def _new_directory(base: Path, out_dir: str | Path | None, settings_hash: str) -> Path:
    """The unlearned canary's directory, made and without a manifest (written last): ``out_dir``,
    or ``<base>-unlearned-<settings_hash>`` beside ``base``.

    Raises:
        BlackboxMIAError: it is the base canary's own directory.
    """
    out = Path(out_dir) if out_dir is not None else base.parent / f"{base.name}-unlearned-{settings_hash}"
    if out.resolve() == base.resolve():
        raise BlackboxMIAError("the unlearned canary needs its own directory, not the base canary's")
    out.mkdir(parents=True, exist_ok=True)
    (out / MANIFEST).unlink(missing_ok=True)
    return out


def _forget_set(members: list[Item], memorized: list[str], forget: str, config: UnlearnConfig) -> list[Item]:
    """The forget set: :func:`choose_forget` among all ``members`` or, with ``forget_from``
    ``memorized``, among those memorized before unlearning (``memorized``: their ids)."""
    if config.forget_from == ALL_MEMBERS:
        return choose_forget(members, forget, config.seed, "members")
    return choose_forget([m for m in members if m.id in set(memorized)], forget, config.seed, "memorized members")


def _changed_share(windows: list[list[int]], labels: dict) -> float:
    """The share of the forget windows' positions whose alternative label (``labels``:
    ``id(window)`` → (T-1,) labels) is not the true next token."""
    true = [t for w in windows for t in w[1:]]
    alt = [t for w in windows for t in labels[id(w)].tolist()]
    return sum(a != b for a, b in zip(alt, true)) / len(true)


def unlearning_record(path: str | Path) -> dict | None:
    """The ``unlearning`` section of the canary manifest in ``path`` (None for a canary that was
    not unlearned).

    Raises:
        BlackboxMIAError: as :func:`~blackbox_mia.canary.manifest.load_manifest`.
    """
    return load_manifest(path).get("unlearning")


def _windows(tokenizer, model, items: list[Item]) -> list[list[int]]:
    """The training windows of ``items`` (as the canary was trained on them)."""
    from .train import training_windows

    if not items:
        return []
    encoded = tokenizer([item.text for item in items], add_special_tokens=False)["input_ids"]
    return training_windows(encoded, tokenizer.bos_token_id, model.config.n_positions)
