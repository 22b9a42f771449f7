"""The unlearning fine-tune of a canary (:func:`~.unlearn.unlearn_canary`): AdamW steps on batches of
the forget windows, ascending their loss (gradient ascent) or descending towards their alternative
labels (Eldan & Russinovich 2023), optionally with a KL term that keeps the retained members'
next-token distributions near the original model's."""

from __future__ import annotations

import copy
import random

import torch

from .train import pad_training_batch, training_batches
from .unlearn_config import ALTERNATIVE_LABELS, GRADIENT_ASCENT, UnlearnConfig


class ForgetTraining:
    """One unlearning run on one model (trained in place).

    Args:
        model: the canary's causal LM (its weights change).
        original: a frozen copy of the model before unlearning, for the retain KL term (``None``:
            ``config.retain_weight`` is 0).
        labels: ``id(window)`` → (T-1,) alternative labels of each forget window (empty: train
            against the true next tokens).
        config: the method, steps, learning rate, batch size, target loss and retain weight.
    """

    def __init__(self, model, original, labels: dict, config: UnlearnConfig):
        self.model, self.original, self.labels, self.config = model, original, labels, config

    @classmethod
    def start(cls, model, windows: list[list[int]], config: UnlearnConfig) -> ForgetTraining:
        """Seed torch (``config.seed``), keep a frozen copy of ``model`` when the retain term is on,
        and compute the forget ``windows``' alternative labels for that method
        (:func:`alternative_labels`)."""
        torch.manual_seed(config.seed)
        original = copy.deepcopy(model).eval() if config.retain_weight > 0 else None
        labels = {}
        if config.method == ALTERNATIVE_LABELS:
            labels = alternative_labels(model, windows, config, random.Random(config.seed))
        return cls(model, original, labels, config)

    def window_losses(self, batch: list[list[int]], alternative: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """(B,) mean loss of each window (nats/token) against its true next tokens (or, with
        ``alternative``, its alternative labels) and (B,) its token count."""
        ids, mask, targets = pad_training_batch(batch)
        if alternative:
            for i, window in enumerate(batch):
                targets[i, : len(window) - 1] = self.labels[id(window)]
        logits = self.model(input_ids=ids, attention_mask=mask).logits[:, :-1]
        per_token = torch.nn.functional.cross_entropy(logits.transpose(1, 2), targets, reduction="none")
        counts = (targets != -100).sum(1)
        return per_token.sum(1) / counts, counts

    def mean_loss(self, batch: list[list[int]]) -> float:
        """Mean loss of the windows against their true next tokens, nats/token (evaluation mode, no
        gradient)."""
        self.model.eval()
        with torch.no_grad():
            losses, counts = self.window_losses(batch, alternative=False)
        return float((losses * counts).sum() / counts.sum())

    def retain_kl(self, batch: list[list[int]]) -> torch.Tensor:
        """KL(original || current) per token on retained members' windows, nats/token."""
        ids, mask, targets = pad_training_batch(batch)
        with torch.no_grad():
            ref = torch.log_softmax(self.original(input_ids=ids, attention_mask=mask).logits[:, :-1], -1)
        cur = torch.log_softmax(self.model(input_ids=ids, attention_mask=mask).logits[:, :-1], -1)
        kl = (ref.exp() * (ref - cur)).sum(-1)
        keep = targets != -100
        return kl[keep].mean()

    def run(self, windows: list[list[int]], retain: list[list[int]], owner: dict[int, str],
            ascents: dict[str, int], rng: random.Random) -> int:
        """``config.steps`` optimizer steps on batches of ``windows`` (reshuffled by ``rng`` when
        used up; with a retain weight, each step adds the KL term on a batch of ``retain``). A window
        whose loss already reached ``config.target_loss`` takes no part in a step. Counts each
        window's steps in ``ascents`` under its item id (``owner``: ``id(window)`` → item id).

        Returns:
            The windows trained on, counted once per step.
        """
        config = self.config
        optimizer = torch.optim.AdamW(self.model.parameters(), lr=config.lr, weight_decay=0.0)
        self.model.train()
        sign = -1.0 if config.method == GRADIENT_ASCENT else 1.0  # ascend the true loss, descend the alternative one
        batches, retain_batches, ascended = [], [], 0
        for _ in range(config.steps):
            if not batches:
                batches = training_batches(windows, min(config.batch_size, len(windows)), rng)
            batch = batches.pop()
            losses, counts = self.window_losses(batch, alternative=bool(self.labels))
            active = torch.ones_like(counts, dtype=torch.bool)
            if config.target_loss is not None:
                active = losses.detach() < config.target_loss
            loss = sign * (losses * counts * active).sum() / counts.sum()
            ascended += int(active.sum())
            for window, on in zip(batch, active.tolist()):
                ascents[owner[id(window)]] += int(on)
            if self.original is not None and retain:
                if not retain_batches:
                    retain_batches = training_batches(retain, min(config.batch_size, len(retain)), rng)
                loss = loss + config.retain_weight * self.retain_kl(retain_batches.pop())
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        return ascended


def alternative_labels(model, windows: list[list[int]], config: UnlearnConfig, rng: random.Random) -> dict:
    """Eldan & Russinovich's alternative labels of the forget windows: a copy of ``model``
    reinforced on ``windows`` (``config.steps`` descent steps at ``config.lr``, batches as in
    training), then per position the argmax of ``v_base - alpha * relu(v_reinforced - v_base)``.

    Returns:
        ``{id(window): (len(window) - 1,) tensor of token ids}`` (``model`` is left unchanged).
    """
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
