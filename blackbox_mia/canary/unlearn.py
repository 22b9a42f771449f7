"""An "unlearned" canary: a trained canary fine-tuned by gradient ascent on a forget subset of its
members (the machine-unlearning setting that Shi et al. 2024 §7 audit).

Gradient ascent maximises the training loss of the forget set: each step takes a batch of the
forget items' training windows (the very windows the canary was trained and is scored on,
:func:`~blackbox_mia.canary.train.training_windows`, batched as in training) and steps the
weights along the gradient of ``-loss`` with AdamW at a constant learning rate. Some forgotten
members stay memorized (too few steps, a low rate): the unlearning audit must find those.

The result is a new canary directory: the fine-tuned model, the base canary's items and a
manifest (the base one plus ``unlearning``: the base directory, the forget ids, the method and
its settings, the forget set's loss before and after), so ``canary:DIR`` and ``--local DIR``
work on it as on any canary; ``forget_items.jsonl`` holds the forget set.
"""

from __future__ import annotations

import copy
import hashlib
import json
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from ..datasets import Item
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
METHOD = "gradient_ascent"


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
        target_loss: a forget window whose loss (nats/token) already exceeds this is left out
            of the ascent (it counts in the batch's token total but adds no gradient); None:
            never.
    """

    steps: int = 20
    lr: float = 1e-4
    batch_size: int = 8
    seed: int = 0
    retain_weight: float = 0.0
    target_loss: float | None = None

    def validate(self) -> None:
        """Raise :class:`BlackboxMIAError` naming the option of an impossible value."""
        for name in ("steps", "batch_size"):
            if isinstance(getattr(self, name), bool) or getattr(self, name) < 1:
                raise BlackboxMIAError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        if not self.lr > 0:
            raise BlackboxMIAError(f"--lr must be > 0, got {self.lr}")
        if not self.retain_weight >= 0:
            raise BlackboxMIAError(f"--retain-weight must be >= 0, got {self.retain_weight}")
        if self.target_loss is not None and not self.target_loss > 0:
            raise BlackboxMIAError(f"--target-loss must be > 0 nats/token, got {self.target_loss}")

    def short_hash(self, forget_ids: list[str]) -> str:
        """12 hex digits identifying these settings and the forget set."""
        blob = json.dumps({"method": METHOD, **asdict(self), "forget": forget_ids}, sort_keys=True)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:12]


def choose_forget(members: list[Item], forget: str, seed: int) -> list[Item]:
    """The forget set: ``forget`` is a count N (a seeded sample of N members, in member order)
    or the path of a file of member ids (one per line, or a JSON list).

    Raises:
        BlackboxMIAError: N outside [1, number of members], an unreadable file, an id that is
            not a member, an empty list.
    """
    by_id = {item.id: item for item in members}
    if forget.strip().isdigit():
        n = int(forget)
        if not 1 <= n <= len(members):
            raise BlackboxMIAError(f"--forget {n}: choose between 1 and the canary's {len(members)} members")
        chosen = set(random.Random(seed).sample(range(len(members)), n))
        return [item for i, item in enumerate(members) if i in chosen]
    try:
        text = Path(forget).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BlackboxMIAError(f"--forget {forget}: neither a count nor a readable file of ids ({exc})") from exc
    try:
        ids = json.loads(text) if text.lstrip().startswith("[") else [line.strip() for line in text.splitlines()]
    except json.JSONDecodeError as exc:
        raise BlackboxMIAError(f"--forget {forget}: not a JSON list of ids ({exc})") from exc
    ids = [str(i) for i in ids if str(i)]
    unknown = [i for i in ids if i not in by_id]
    if unknown or not ids:
        raise BlackboxMIAError(f"--forget {forget}: " + (f"not members of the canary: {unknown[:5]}" if unknown else "no id"))
    return [by_id[i] for i in dict.fromkeys(ids)]


def unlearn_canary(
    base: str | Path, forget: str, config: UnlearnConfig = UnlearnConfig(), out_dir: str | Path | None = None
) -> Path:
    """Fine-tune the canary in ``base`` by gradient ascent on a forget set of its members and
    save it as a new canary directory (see the module docstring).

    Args:
        base: a trained canary's directory.
        forget: a count N or a file of member ids (see :func:`choose_forget`).
        config: steps, learning rate, batch size and seed.
        out_dir: the new directory (default: ``<base>-unlearned-<hash of settings and forget
            ids>`` beside ``base``); its manifest is written last.

    Returns:
        The new directory. Its manifest's ``unlearning`` holds ``base``, ``base_config_hash``,
        ``method``, the settings, ``forget_ids``, ``forget_loss_before``/``forget_loss_after``
        (mean loss of the forget windows, nats/token), ``ascended_windows`` (windows ascended,
        counted once per step), ``ascents_per_item`` (per forget id, how many of its windows'
        ascents there were: 0 for an item a short schedule never reached) and ``seconds``.

    Raises:
        BlackboxMIAError: ``base`` is not a complete canary, bad settings or forget set.
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
    chosen = choose_forget(members, forget, config.seed)
    forget_ids = [item.id for item in chosen]
    out = Path(out_dir) if out_dir is not None else base.parent / f"{base.name}-unlearned-{config.short_hash(forget_ids)}"
    if out.resolve() == base.resolve():
        raise BlackboxMIAError("the unlearned canary needs its own directory, not the base canary's")
    out.mkdir(parents=True, exist_ok=True)
    (out / MANIFEST).unlink(missing_ok=True)

    start = time.perf_counter()
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
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=0.0)

    def window_losses(batch):
        """(B,) mean loss of each window (nats/token) and (B,) its token count."""
        ids, mask, targets = pad_training_batch(batch)
        logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1]
        per_token = torch.nn.functional.cross_entropy(logits.transpose(1, 2), targets, reduction="none")
        counts = (targets != -100).sum(1)
        return per_token.sum(1) / counts, counts

    def mean_loss(batch):
        losses, counts = window_losses(batch)
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

    model.eval()
    with torch.no_grad():
        before = mean_loss(windows)
    model.train()
    step, batches, retain_batches, ascended = 0, [], [], 0
    while step < config.steps:
        if not batches:
            batches = training_batches(windows, min(config.batch_size, len(windows)), rng)
        batch = batches.pop()
        losses, counts = window_losses(batch)
        active = torch.ones_like(counts, dtype=torch.bool)
        if config.target_loss is not None:
            active = losses.detach() < config.target_loss
        loss = -(losses * counts * active).sum() / counts.sum()
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

    save_model_dir(out, model, tokenizer)
    write_items(out / ITEMS_FILE, items)
    write_items(out / FORGET_FILE, chosen)
    unlearning = {
        "base": str(base),
        "base_config_hash": manifest.get("config_hash"),
        "method": METHOD,
        **asdict(config),
        "forget_ids": forget_ids,
        "n_forget_windows": len(windows),
        "ascended_windows": ascended,
        "ascents_per_item": ascents,
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


def _windows(tokenizer, model, items: list[Item]) -> list[list[int]]:
    """The training windows of ``items`` (as the canary was trained on them)."""
    from .train import training_windows

    if not items:
        return []
    encoded = tokenizer([item.text for item in items], add_special_tokens=False)["input_ids"]
    return training_windows(encoded, tokenizer.bos_token_id, model.config.n_positions)
