"""Resuming an interrupted canary training where it stopped.

While :func:`~blackbox_mia.canary.train.train_canary` runs, ``<model dir>/checkpoint/`` holds
the tokenizer and ``state.pt``: the model, optimizer and scheduler states plus the
:class:`TrainingProgress` (where in which epoch, the seeded shuffle's state at the epoch's
start, the losses so far). It is written at every epoch's end and every
:data:`CHECKPOINT_SECONDS` of training, atomically (a run killed mid-write leaves the previous
one), and removed once the canary is complete. A rerun with the same configuration and recipe
resumes from it and trains exactly the model an uninterrupted run would have: the next epoch's
batches come from the restored shuffle state, and the batches of the current epoch already
trained are skipped. ``state.pt`` is read with ``torch.load(weights_only=True)``: tensors and
plain values only, no arbitrary objects.
"""

from __future__ import annotations

import os
import pickle
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..types import BlackboxMIAError
from .config import RECIPE_VERSION, CanaryConfig

CHECKPOINT_DIR = "checkpoint"
STATE_FILE = "state.pt"
CHECKPOINT_SECONDS = 30.0
"""Seconds of training between two checkpoints inside an epoch (one is always written at an
epoch's end): an interrupted run loses at most this much work."""


@dataclass
class TrainingProgress:
    """How far a canary training got.

    Attributes:
        epoch: epochs finished (the current epoch's index).
        step_in_epoch: batches of the current epoch trained.
        steps_per_epoch: batches in every epoch.
        epoch_rng: ``random.Random.getstate()`` at the current epoch's start, before its shuffle.
        losses: the current epoch's batch losses so far (nats/token).
        loss_per_epoch: ``{"epoch", "mean", "final"}`` of every finished epoch.
        trained_tokens: scored targets trained on so far.
        seconds: training wall-clock seconds so far, over every run.
        resumed_at_steps: the global step each earlier run was resumed at.
    """

    epoch: int
    step_in_epoch: int
    steps_per_epoch: int
    epoch_rng: tuple
    losses: list[float] = field(default_factory=list)
    loss_per_epoch: list[dict] = field(default_factory=list)
    trained_tokens: int = 0
    seconds: float = 0.0
    resumed_at_steps: list[int] = field(default_factory=list)

    @property
    def steps_done(self) -> int:
        """Batches trained so far, over all epochs."""
        return self.epoch * self.steps_per_epoch + self.step_in_epoch


def checkpoint_dir(out_dir: Path) -> Path:
    """Where the checkpoint of the canary trained into ``out_dir`` lives."""
    return Path(out_dir) / CHECKPOINT_DIR


def has_checkpoint(out_dir: Path) -> bool:
    """Whether ``out_dir`` holds model states to resume from (of any configuration)."""
    return (checkpoint_dir(out_dir) / STATE_FILE).is_file()


def save_tokenizer(out_dir: Path, tokenizer) -> None:
    """Start a checkpoint: remove any old one, keep the freshly trained tokenizer (the model
    states come with :func:`save_checkpoint`)."""
    discard_checkpoint(out_dir)
    tokenizer.save_pretrained(checkpoint_dir(out_dir))


def save_checkpoint(out_dir: Path, config: CanaryConfig, progress: TrainingProgress, model, optimizer, scheduler) -> None:
    """Write ``state.pt`` atomically (a temporary file, then :func:`os.replace`).

    Raises:
        BlackboxMIAError: the file cannot be written.
    """
    import torch

    path = checkpoint_dir(out_dir) / STATE_FILE
    tmp = path.with_name(STATE_FILE + ".tmp")
    state = {
        "config": asdict(config),
        "recipe_version": RECIPE_VERSION,
        "progress": asdict(progress),
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
    }
    try:
        torch.save(state, tmp)
        os.replace(tmp, path)
    except OSError as exc:
        raise BlackboxMIAError(f"cannot write the training checkpoint {path}: {exc.strerror or exc}") from exc


def saved_progress(out_dir: Path, config: CanaryConfig) -> TrainingProgress | None:
    """How far the checkpoint of ``config`` in ``out_dir`` got; ``None`` when there is none, or
    it was written for another configuration or recipe, or cannot be read."""
    state = _read_state(out_dir, config)
    return None if state is None else state["progress"]


def load_checkpoint(out_dir: Path, config: CanaryConfig):
    """The checkpoint of ``config`` in ``out_dir``: ``(tokenizer, state)``, with
    ``state["progress"]`` a :class:`TrainingProgress`; ``None`` when there is none, or it was
    written for another configuration or recipe, or cannot be read (training starts over).
    """
    from transformers import PreTrainedTokenizerFast

    state = _read_state(out_dir, config)
    if state is None:
        return None
    try:
        return PreTrainedTokenizerFast.from_pretrained(checkpoint_dir(out_dir)), state
    except (OSError, ValueError):
        return None  # a damaged checkpoint only costs the work it held


def _read_state(out_dir: Path, config: CanaryConfig) -> dict | None:
    """``state.pt`` of ``config`` with its progress as a :class:`TrainingProgress`, else ``None``."""
    import torch

    if not has_checkpoint(out_dir):
        return None
    try:
        state = torch.load(checkpoint_dir(out_dir) / STATE_FILE, weights_only=True)
        if state.get("config") != asdict(config) or state.get("recipe_version") != RECIPE_VERSION:
            return None
        progress = state["progress"]
        state["progress"] = TrainingProgress(**{**progress, "epoch_rng": _as_tuples(progress["epoch_rng"])})
    except (OSError, EOFError, RuntimeError, ValueError, KeyError, TypeError, AttributeError, pickle.UnpicklingError):
        return None  # a damaged checkpoint only costs the work it held
    return state


def discard_checkpoint(out_dir: Path) -> None:
    """Remove the checkpoint of ``out_dir`` (none: nothing to do)."""
    shutil.rmtree(checkpoint_dir(out_dir), ignore_errors=True)


def _as_tuples(value):
    """A ``random`` state as ``setstate`` wants it (nested tuples), whatever lists it came back as."""
    return tuple(_as_tuples(v) for v in value) if isinstance(value, (list, tuple)) else value
