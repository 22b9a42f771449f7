"""The canary model: a small GPT-2 trained on CPU on a corpus with planted GSM8K test problems.

Controlled ground truth for membership inference (design §5; the Min-K% paper, Shi et al. 2024
§6, and Ishihara & Takahashi 2024 do the same): ``n_members`` GSM8K test problems are planted
``dup`` times each among ``n_background`` GSM8K train problems; ``n_nonmembers`` other GSM8K
test problems are held out. Neither the model nor its tokenizer ever sees a non-member, so a
detector's AUC on members vs. non-members measures detection with known membership.

Recipe (every choice is recorded in ``manifest.json``):

* Documents are GSM8K texts in the format of :func:`blackbox_mia.datasets.gsm8k_text`; the
  corpus is the background problems plus ``dup`` copies of each member, shuffled (seeded).
* A byte-level BPE tokenizer (``vocab_size``) is trained on the corpus only.
* Each document becomes ``[bos] + tokens`` (BOS = ``<|endoftext|>``, id 0), cut into the very
  windows the local backend scores it with (:func:`blackbox_mia.windows.sliding_windows`
  with context ``block_size``): one window for a short document, windows overlapping by half the
  context for a long one. Training on the scoring windows (rather than on a packed token stream
  cut at arbitrary places) puts every copy of a member at the same positions, after the same
  BOS, as at scoring time; see :data:`WINDOWING_NOTE`.
* Plain AdamW, linear warm-up then cosine decay, windows batched by similar length (padding
  masked out of the loss), seeded shuffles; no dropout (memorisation is the point).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from .. import __version__
from ..config import cache_root
from ..datasets import Item, load_dataset
from ..types import BlackboxMIAError

MANIFEST = "manifest.json"
ITEMS_FILE = "canary_items.jsonl"
# Bump when the training recipe changes, so cached models trained by the old recipe are not reused.
RECIPE_VERSION = 1
WINDOWING_NOTE = "per-document sliding windows of [bos]+doc, as scored by LocalBackend (stride block_size/2)"
_MANIFEST_KEYS = ("config", "member_ids", "nonmember_ids", "loss_per_epoch", "train_seconds", "complete")


@dataclass(frozen=True)
class CanaryConfig:
    """Everything that determines a canary model.

    Attributes:
        n_background: GSM8K train problems in the corpus (seeded sample).
        n_members: GSM8K test problems planted in the corpus (label 1).
        n_nonmembers: other GSM8K test problems, never seen (label 0).
        dup: copies of each member in the corpus.
        seed: seeds the splits, the corpus order, the initial weights and the batch order.
        vocab_size: BPE vocabulary size (tokens), including ``<|endoftext|>``.
        n_layer, n_embd, n_head: GPT-2 shape.
        block_size: tokens per training window, and the model's context (``n_positions``).
        epochs: passes over the corpus.
        lr: peak AdamW learning rate.
        batch_size: windows per optimisation step.
        warmup_frac: fraction of the steps with a linear warm-up from 0 to ``lr``.
        min_lr_frac: the cosine decay ends at ``min_lr_frac * lr``.
        weight_decay: AdamW weight decay.
    """

    n_background: int = 2000
    n_members: int = 200
    n_nonmembers: int = 200
    dup: int = 8
    seed: int = 0
    vocab_size: int = 4096
    n_layer: int = 2
    n_embd: int = 128
    n_head: int = 4
    block_size: int = 128
    epochs: int = 2
    lr: float = 3e-3
    batch_size: int = 32
    warmup_frac: float = 0.05
    min_lr_frac: float = 0.1
    weight_decay: float = 0.0

    def validate(self) -> None:
        """Raise :class:`BlackboxMIAError` for an impossible configuration."""
        positive = ("n_members", "n_nonmembers", "dup", "vocab_size", "n_layer", "n_embd", "n_head", "epochs", "batch_size")
        for name in positive:
            if getattr(self, name) < 1:
                raise BlackboxMIAError(f"canary: {name} must be at least 1, got {getattr(self, name)}")
        if self.n_background < 0:
            raise BlackboxMIAError(f"canary: n_background must be >= 0, got {self.n_background}")
        if self.block_size < 2:
            raise BlackboxMIAError(f"canary: block_size must be at least 2 tokens, got {self.block_size}")
        if self.n_embd % self.n_head:
            raise BlackboxMIAError(f"canary: n_embd ({self.n_embd}) must be a multiple of n_head ({self.n_head})")
        if not (self.lr > 0 and 0 <= self.warmup_frac < 1 and 0 <= self.min_lr_frac <= 1 and self.weight_decay >= 0):
            raise BlackboxMIAError("canary: need lr > 0, 0 <= warmup_frac < 1, 0 <= min_lr_frac <= 1, weight_decay >= 0")

    def short_hash(self) -> str:
        """12 hex digits identifying this configuration and the recipe version."""
        blob = json.dumps({"recipe": RECIPE_VERSION, **asdict(self)}, sort_keys=True)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:12]


@dataclass(frozen=True)
class Corpus:
    """The training documents and the membership split.

    Attributes:
        documents: corpus texts in training-file order (background + ``dup`` copies per member).
        members, nonmembers: GSM8K test items, labelled 1 and 0.
        background_ids: ids of the GSM8K train problems used.
        sources: ``{dataset name: sha256 of its file}``.
    """

    documents: list[str]
    members: list[Item]
    nonmembers: list[Item]
    background_ids: list[str]
    sources: dict[str, str]


def build_corpus(config: CanaryConfig) -> Corpus:
    """The corpus and the member/non-member split for ``config`` (deterministic in ``seed``).

    Members and non-members are disjoint slices of a seeded shuffle of GSM8K test; the
    background is a seeded sample of GSM8K train; member copies are inserted at random positions
    (one seeded shuffle of the whole corpus).

    Raises:
        BlackboxMIAError: more problems requested than the splits hold.
    """
    config.validate()
    test, train = load_dataset("gsm8k:test"), load_dataset("gsm8k:train")
    if config.n_members + config.n_nonmembers > len(test.items):
        raise BlackboxMIAError(
            f"canary: n_members + n_nonmembers = {config.n_members + config.n_nonmembers} "
            f"exceeds the {len(test.items)} GSM8K test problems"
        )
    if config.n_background > len(train.items):
        raise BlackboxMIAError(f"canary: n_background {config.n_background} exceeds the {len(train.items)} GSM8K train problems")
    rng = random.Random(config.seed)
    order = list(range(len(test.items)))
    rng.shuffle(order)
    members = [_labelled(test.items[i], 1) for i in order[: config.n_members]]
    nonmembers = [_labelled(test.items[i], 0) for i in order[config.n_members : config.n_members + config.n_nonmembers]]
    background = [train.items[i] for i in rng.sample(range(len(train.items)), config.n_background)]
    documents = [item.text for item in background] + [item.text for item in members for _ in range(config.dup)]
    rng.shuffle(documents)
    return Corpus(
        documents=documents,
        members=members,
        nonmembers=nonmembers,
        background_ids=[item.id for item in background],
        sources={test.name: test.sha256, train.name: train.sha256},
    )


def _labelled(item: Item, label: int) -> Item:
    return Item(item.id, item.text, label, item.meta)


def canary_dir(config: CanaryConfig, cache: str | os.PathLike | None = None) -> Path:
    """Default model directory: ``<cache root>/canary/<config.short_hash()>`` (not created)."""
    return cache_root(cache) / "canary" / config.short_hash()


def load_manifest(path: str | os.PathLike) -> dict:
    """The manifest of a canary model directory (or of the ``manifest.json`` path itself).

    Raises:
        BlackboxMIAError: no manifest (training never finished there), unreadable JSON, or a
            manifest missing required keys.
    """
    path = Path(path)
    file = path if path.name == MANIFEST else path / MANIFEST
    if not file.is_file():
        raise BlackboxMIAError(
            f"no {MANIFEST} in {file.parent}: not a canary model, or its training did not finish "
            "(rerun `bbmia canary train`, with --force to start over)"
        )
    try:
        manifest = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise BlackboxMIAError(f"unreadable canary manifest {file}: {exc}") from exc
    missing = [k for k in _MANIFEST_KEYS if k not in manifest]
    if missing or manifest.get("complete") is not True:
        raise BlackboxMIAError(f"incomplete canary manifest {file} (missing: {', '.join(missing) or 'complete=true'})")
    return manifest


def canary_items(path: str | os.PathLike) -> list[Item]:
    """Members (label 1) then non-members (label 0) of a trained canary, as GSM8K test items.

    Raises:
        BlackboxMIAError: no complete manifest, or the shipped GSM8K test file differs from the
            one the canary was trained with (its sha256 changed).
    """
    manifest = load_manifest(path)
    test = load_dataset("gsm8k:test")
    trained_with = manifest.get("sources", {}).get(test.name)
    if trained_with is not None and trained_with != test.sha256:
        raise BlackboxMIAError(f"canary {path} was built from another GSM8K test file (sha256 {trained_with[:12]}...)")
    by_id = {item.id: item for item in test.items}
    try:
        return [_labelled(by_id[i], 1) for i in manifest["member_ids"]] + [
            _labelled(by_id[i], 0) for i in manifest["nonmember_ids"]
        ]
    except KeyError as exc:
        raise BlackboxMIAError(f"canary {path}: unknown GSM8K test id {exc}") from exc


def ensure_canary(
    config: CanaryConfig, progress: bool = True, cache: str | os.PathLike | None = None, out_dir: Path | None = None
) -> Path:
    """The directory of a trained canary for ``config``; trains it only when no complete manifest exists.

    Raises:
        BlackboxMIAError: ``out_dir`` holds a complete canary trained with another configuration
            (retrain it explicitly with :func:`train_canary`, i.e. ``--force``).
    """
    out_dir = Path(out_dir) if out_dir is not None else canary_dir(config, cache)
    if (out_dir / MANIFEST).is_file():
        manifest = load_manifest(out_dir)
        if manifest["config"] != asdict(config):
            raise BlackboxMIAError(f"{out_dir} holds a canary trained with another configuration: use --force to retrain")
        return out_dir
    return train_canary(config, out_dir, progress=progress)


def _lr_factor(step: int, total: int, warmup: int, min_frac: float) -> float:
    """Linear warm-up over ``warmup`` steps, then cosine decay from 1 to ``min_frac`` at ``total``."""
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return min_frac + (1 - min_frac) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


def training_windows(documents: list[list[int]], bos_id: int, block_size: int) -> list[list[int]]:
    """Token windows of ``[bos] + doc`` for every tokenized document, cut as the local backend
    cuts a scored text (:func:`~blackbox_mia.windows.sliding_windows`, context ``block_size``).

    Returns lists of at most ``block_size`` token ids (at least 2).
    """
    from ..text.windows import sliding_windows

    windows = []
    for doc in documents:
        seq = [bos_id] + list(doc)
        if len(seq) >= 2:
            windows.extend(seq[a:b] for a, b, _ in sliding_windows(len(seq), block_size))
    return windows


def _batches(windows: list[list[int]], batch_size: int, rng: random.Random) -> list[list[list[int]]]:
    """Shuffle, group into batches of similar length (sorted within pools of 50 batches), shuffle batches."""
    order = list(range(len(windows)))
    rng.shuffle(order)
    pool = 50 * batch_size
    batches = []
    for start in range(0, len(order), pool):
        chunk = sorted(order[start : start + pool], key=lambda i: len(windows[i]))
        batches.extend([windows[i] for i in chunk[j : j + batch_size]] for j in range(0, len(chunk), batch_size))
    rng.shuffle(batches)
    return batches


def _pad(batch: list[list[int]]):
    """Input ids (B, T) right-padded with 0, attention mask (B, T), targets (B, T-1) with -100 at padding."""
    import torch

    width = max(len(w) for w in batch)
    ids = torch.zeros((len(batch), width), dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    targets = torch.full((len(batch), width - 1), -100, dtype=torch.long)
    for i, w in enumerate(batch):
        ids[i, : len(w)] = torch.as_tensor(w)
        mask[i, : len(w)] = 1
        targets[i, : len(w) - 1] = torch.as_tensor(w[1:])
    return ids, mask, targets


def train_canary(config: CanaryConfig, out_dir: Path | None = None, progress: bool = True) -> Path:
    """Train the canary model and save it as a Hugging Face directory plus ``manifest.json``.

    Args:
        config: the corpus and training configuration.
        out_dir: target directory (default :func:`canary_dir`); an existing manifest there is
            removed first, and the new one is written last (atomically), so a directory without
            a manifest is recognisably incomplete.
        progress: show a tqdm bar (batches).

    Returns:
        ``out_dir``, loadable with ``AutoModelForCausalLM.from_pretrained``; it also holds
        ``canary_items.jsonl`` (id, text, label of members and non-members) for ``bbmia score``,
        and ``manifest.json``: ``config``, ``member_ids``/``nonmember_ids`` (GSM8K test ids),
        ``background_ids``, ``sources`` (sha256 of the GSM8K files), ``loss_per_epoch`` (per
        epoch: ``mean`` over its steps and ``final`` = mean of its last 10% of steps, nats/token),
        ``train_seconds`` (tokenizer + training, wall clock), ``n_corpus_tokens`` (with one BOS
        per document), ``n_trained_tokens`` (scored targets over all epochs, window overlaps
        included), ``versions``, ``complete``.

    Raises:
        BlackboxMIAError: an invalid configuration, or torch/transformers/tokenizers missing.
    """
    try:
        import torch
        import transformers
        from tqdm.auto import tqdm

        from .model import build_gpt2, save_model_dir, train_tokenizer
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise BlackboxMIAError("training the canary needs torch, transformers and tokenizers: pip install 'blackbox_mia[local]'") from exc

    corpus = build_corpus(config)
    out_dir = Path(out_dir) if out_dir is not None else canary_dir(config)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / MANIFEST).unlink(missing_ok=True)

    start = time.perf_counter()
    tokenizer = train_tokenizer(corpus.documents, config.vocab_size)
    encoded = tokenizer(corpus.documents, add_special_tokens=False)["input_ids"]
    windows = training_windows(encoded, tokenizer.bos_token_id, config.block_size)
    model = build_gpt2(len(tokenizer), config.n_layer, config.n_embd, config.n_head, config.block_size, config.seed)
    _disable_dropout(model)
    rng = random.Random(config.seed)
    torch.manual_seed(config.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    steps_per_epoch = math.ceil(len(windows) / config.batch_size)
    total = steps_per_epoch * config.epochs
    warmup = max(1, int(config.warmup_frac * total))
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: _lr_factor(step, total, warmup, config.min_lr_frac)
    )
    model.train()
    loss_per_epoch, trained_tokens = [], 0
    bar = tqdm(total=total, unit="batch", desc="canary", disable=not progress)
    for epoch in range(config.epochs):
        losses, tail = [], max(1, steps_per_epoch // 10)
        for batch in _batches(windows, config.batch_size, rng):
            ids, mask, targets = _pad(batch)
            logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1]
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step()
            losses.append(loss.item())
            trained_tokens += int((targets != -100).sum())
            bar.update(1)
            bar.set_postfix(epoch=epoch + 1, loss=f"{losses[-1]:.3f}")
        loss_per_epoch.append({"epoch": epoch + 1, "mean": sum(losses) / len(losses), "final": sum(losses[-tail:]) / tail})
    bar.close()
    model.eval()
    train_seconds = time.perf_counter() - start

    save_model_dir(out_dir, model, tokenizer)
    _write_items(out_dir / ITEMS_FILE, corpus.members + corpus.nonmembers)
    manifest = {
        "config": asdict(config),
        "config_hash": config.short_hash(),
        "recipe_version": RECIPE_VERSION,
        "windowing": WINDOWING_NOTE,
        "member_ids": [item.id for item in corpus.members],
        "nonmember_ids": [item.id for item in corpus.nonmembers],
        "background_ids": corpus.background_ids,
        "dup": config.dup,
        "seed": config.seed,
        "sources": corpus.sources,
        "n_documents": len(corpus.documents),
        "n_corpus_tokens": sum(len(doc) + 1 for doc in encoded),
        "n_windows": len(windows),
        "n_trained_tokens": trained_tokens,
        "n_steps": total,
        "loss_per_epoch": loss_per_epoch,
        "train_seconds": round(train_seconds, 2),
        "torch_threads": torch.get_num_threads(),
        "versions": {"blackbox_mia": __version__, "torch": torch.__version__, "transformers": transformers.__version__},
        "items_file": ITEMS_FILE,
        "complete": True,
    }
    tmp = out_dir / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, out_dir / MANIFEST)
    return out_dir


def _disable_dropout(model) -> None:
    """Set every dropout probability to 0 (in the modules and in the saved config)."""
    import torch

    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    for name in ("resid_pdrop", "embd_pdrop", "attn_pdrop"):
        setattr(model.config, name, 0.0)


def _write_items(path: Path, items: list[Item]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for item in items:
            f.write(json.dumps({"id": item.id, "text": item.text, "label": item.label}) + "\n")


def config_fields() -> list[str]:
    """Names of the :class:`CanaryConfig` fields, in order (the CLI builds one option per field)."""
    return [f.name for f in fields(CanaryConfig)]
