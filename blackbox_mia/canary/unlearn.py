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

import copy
import hashlib
import json
import math
import random
import time
from dataclasses import asdict, dataclass
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

FORGET_FILE = "forget_items.jsonl"
GRADIENT_ASCENT, ALTERNATIVE_LABELS = "gradient_ascent", "alternative_labels"
METHODS = (GRADIENT_ASCENT, ALTERNATIVE_LABELS)
ALL_MEMBERS, MEMORIZED = "members", "memorized"
FORGET_FROM = (ALL_MEMBERS, MEMORIZED)  # where a forget count N samples from


@dataclass(frozen=True)
class UnlearnConfig:
    """How a canary is unlearned.

    Attributes:
        steps: gradient-ascent steps (batches), cycling over the forget set's windows.
        lr: constant AdamW learning rate.
        batch_size: windows per step (fewer when the forget set has fewer).
        seed: seeds the forget sample (``forget`` as a count) and the batch order.
        retain_weight: weight of a retain term added to the ascent loss: KL(original ||
            current) per token (nats) on a batch of the kept members' windows each step (the
            "KL" unlearning baseline); 0 is pure gradient ascent.
        target_loss: gradient ascent only: a forget window whose loss (nats/token) already
            exceeds this is left out of the ascent (it counts in the batch's token total but
            adds no gradient); None: never.
        method: ``gradient_ascent`` or ``alternative_labels`` (see the module docstring).
        alpha: alternative labels: the weight of the reinforced model's boost taken away from
            the base logits (> 0).
        forget_from: ``members`` (a count N samples all members) or ``memorized`` (only the
            members memorized before unlearning, :func:`memorized_members`; a file of ids must
            name only those).
        memorized_target_fpr: the target non-member false-positive rate of the "memorized
            before" rule (its threshold is the non-members' ``1 - memorized_target_fpr``
            quantile of the loss score).
    """

    steps: int = 20
    lr: float = 1e-4
    batch_size: int = 8
    seed: int = 0
    retain_weight: float = 0.0
    target_loss: float | None = None
    method: str = GRADIENT_ASCENT
    alpha: float = 1.0
    forget_from: str = ALL_MEMBERS
    memorized_target_fpr: float = 0.05

    def validate(self) -> None:
        """Raise :class:`BlackboxMIAError` naming the option of an impossible value."""
        for name in ("steps", "batch_size"):
            if isinstance(getattr(self, name), bool) or getattr(self, name) < 1:
                raise BlackboxMIAError(f"{named(name)} must be at least 1, got {getattr(self, name)}")
        if not self.lr > 0:
            raise BlackboxMIAError(f"{named('lr')} must be > 0, got {self.lr}")
        if not self.retain_weight >= 0:
            raise BlackboxMIAError(f"{named('retain_weight')} must be >= 0, got {self.retain_weight}")
        if self.target_loss is not None and not self.target_loss > 0:
            raise BlackboxMIAError(f"{named('target_loss')} must be > 0 nats/token, got {self.target_loss}")
        if self.method not in METHODS:
            raise BlackboxMIAError(f"{named('method')} must be one of {', '.join(METHODS)}, got {self.method!r}")
        if self.target_loss is not None and self.method != GRADIENT_ASCENT:
            raise BlackboxMIAError(f"{named('target_loss')} applies to {GRADIENT_ASCENT} only, not {self.method}")
        if not (math.isfinite(self.alpha) and self.alpha > 0):
            raise BlackboxMIAError(f"{named('alpha')} must be > 0, got {self.alpha}")
        if self.forget_from not in FORGET_FROM:
            raise BlackboxMIAError(f"{named('forget_from')} must be one of {', '.join(FORGET_FROM)}, got {self.forget_from!r}")
        if not 0 < self.memorized_target_fpr < 1:
            raise BlackboxMIAError(f"{named('memorized_target_fpr')} must lie in (0, 1), got {self.memorized_target_fpr}")

    def short_hash(self, forget_ids: list[str]) -> str:
        """12 hex digits identifying these settings and the forget set. Each setting is hashed
        under the name it had when the hash was introduced (``memorized_fpr``, renamed
        ``memorized_target_fpr``: docs/migration.md), so an unlearned canary keeps its directory."""
        settings = {UNLEARN_CONFIG_KEYS.get(name, name): value for name, value in asdict(self).items()}
        blob = json.dumps({**settings, "forget": forget_ids}, sort_keys=True)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:12]


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
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from .model import save_model_dir
    from .train import pad_training_batch, training_batches

    config.validate()
    base = Path(base)
    manifest = load_manifest(base)
    items = canary_items(base)
    members = [item for item in items if item.label == 1]
    start = time.perf_counter()
    memorized, threshold = memorized_members(items, loss_scores(base, items), config.memorized_target_fpr)
    pool = members if config.forget_from == ALL_MEMBERS else [m for m in members if m.id in set(memorized)]
    chosen = choose_forget(pool, forget, config.seed, "members" if pool is members else "memorized members")
    forget_ids = [item.id for item in chosen]
    out = Path(out_dir) if out_dir is not None else base.parent / f"{base.name}-unlearned-{config.short_hash(forget_ids)}"
    if out.resolve() == base.resolve():
        raise BlackboxMIAError("the unlearned canary needs its own directory, not the base canary's")
    out.mkdir(parents=True, exist_ok=True)
    (out / MANIFEST).unlink(missing_ok=True)

    tokenizer = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base)
    owned = [(item.id, window) for item in chosen for window in _windows(tokenizer, model, [item])]
    windows = [window for _, window in owned]
    owner = {id(window): item_id for item_id, window in owned}  # batches hold these very lists
    ascents = dict.fromkeys(forget_ids, 0)
    retain = _windows(tokenizer, model, [m for m in members if m.id not in set(forget_ids)])
    rng = random.Random(config.seed)
    torch.manual_seed(config.seed)
    original = copy.deepcopy(model).eval() if config.retain_weight > 0 else None
    labels = {}  # id(window) -> (T-1,) alternative labels
    if config.method == ALTERNATIVE_LABELS:
        labels = _alternative_labels(model, windows, config, random.Random(config.seed))

    def window_losses(batch, alternative):
        """(B,) mean loss of each window (nats/token) against its true next tokens (or, with
        ``alternative``, its alternative labels) and (B,) its token count."""
        ids, mask, targets = pad_training_batch(batch)
        if alternative:
            for i, window in enumerate(batch):
                targets[i, : len(window) - 1] = labels[id(window)]
        logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1]
        per_token = torch.nn.functional.cross_entropy(logits.transpose(1, 2), targets, reduction="none")
        counts = (targets != -100).sum(1)
        return per_token.sum(1) / counts, counts

    def mean_loss(batch):
        """Mean loss of the windows against their true next tokens, nats/token."""
        losses, counts = window_losses(batch, alternative=False)
        return float((losses * counts).sum() / counts.sum())

    def retain_kl(batch):
        """KL(original || current) per token on retained members' windows, nats/token."""
        ids, mask, targets = pad_training_batch(batch)
        with torch.no_grad():
            ref = torch.log_softmax(original(input_ids=ids, attention_mask=mask).logits[:, :-1], -1)
        cur = torch.log_softmax(model(input_ids=ids, attention_mask=mask).logits[:, :-1], -1)
        kl = (ref.exp() * (ref - cur)).sum(-1)
        keep = targets != -100
        return kl[keep].mean()

    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=0.0)
    model.eval()
    with torch.no_grad():
        before = mean_loss(windows)
    model.train()
    sign = -1.0 if config.method == GRADIENT_ASCENT else 1.0  # ascend the true loss, descend the alternative one
    step, batches, retain_batches, ascended = 0, [], [], 0
    while step < config.steps:
        if not batches:
            batches = training_batches(windows, min(config.batch_size, len(windows)), rng)
        batch = batches.pop()
        losses, counts = window_losses(batch, alternative=bool(labels))
        active = torch.ones_like(counts, dtype=torch.bool)
        if config.target_loss is not None:
            active = losses.detach() < config.target_loss
        loss = sign * (losses * counts * active).sum() / counts.sum()
        ascended += int(active.sum())
        for window, on in zip(batch, active.tolist()):
            ascents[owner[id(window)]] += int(on)
        if original is not None and retain:
            if not retain_batches:
                retain_batches = training_batches(retain, min(config.batch_size, len(retain)), rng)
            loss = loss + config.retain_weight * retain_kl(retain_batches.pop())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        step += 1
    model.eval()
    with torch.no_grad():
        after = mean_loss(windows)
    changed = None
    if labels:
        true = [t for w in windows for t in w[1:]]
        alt = [t for w in windows for t in labels[id(w)].tolist()]
        changed = sum(a != b for a, b in zip(alt, true)) / len(true)

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
        "changed_labels": changed,
        "forget_loss_before": before,
        "forget_loss_after": after,
        "seconds": round(time.perf_counter() - start, 2),
        "forget_file": FORGET_FILE,
    }
    write_manifest(out, {**manifest, "unlearning": unlearning})
    return out


def unlearning_record(path: str | Path) -> dict | None:
    """The ``unlearning`` section of the canary manifest in ``path`` (None for a canary that was
    not unlearned).

    Raises:
        BlackboxMIAError: as :func:`~blackbox_mia.canary.manifest.load_manifest`.
    """
    return load_manifest(path).get("unlearning")


def _alternative_labels(model, windows: list[list[int]], config: UnlearnConfig, rng: random.Random) -> dict:
    """Eldan & Russinovich's alternative labels of the forget windows: a copy of ``model``
    reinforced on ``windows`` (``config.steps`` descent steps at ``config.lr``, batches as in
    training), then per position the argmax of ``v_base - alpha * relu(v_reinforced - v_base)``.

    Returns:
        ``{id(window): (len(window) - 1,) tensor of token ids}`` (``model`` is left unchanged).
    """
    import torch

    from .train import pad_training_batch, training_batches

    reinforced = copy.deepcopy(model).train()
    optimizer = torch.optim.AdamW(reinforced.parameters(), lr=config.lr, weight_decay=0.0)
    batches = []
    for _ in range(config.steps):
        if not batches:
            batches = training_batches(windows, min(config.batch_size, len(windows)), rng)
        ids, mask, targets = pad_training_batch(batches.pop())
        logits = reinforced(input_ids=ids, attention_mask=mask).logits[:, :-1]
        loss = torch.nn.functional.cross_entropy(logits.transpose(1, 2), targets, ignore_index=-100)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    reinforced.eval()
    model.eval()
    labels = {}
    with torch.no_grad():
        for start in range(0, len(windows), config.batch_size):
            batch = windows[start : start + config.batch_size]
            ids, mask, _ = pad_training_batch(batch)
            base = model(input_ids=ids, attention_mask=mask).logits[:, :-1]
            boost = reinforced(input_ids=ids, attention_mask=mask).logits[:, :-1] - base
            generic = (base - config.alpha * torch.relu(boost)).argmax(-1)
            for i, window in enumerate(batch):
                labels[id(window)] = generic[i, : len(window) - 1].clone()
    model.train()
    return labels


def _windows(tokenizer, model, items: list[Item]) -> list[list[int]]:
    """The training windows of ``items`` (as the canary was trained on them)."""
    from .train import training_windows

    if not items:
        return []
    encoded = tokenizer([item.text for item in items], add_special_tokens=False)["input_ids"]
    return training_windows(encoded, tokenizer.bos_token_id, model.config.n_positions)
