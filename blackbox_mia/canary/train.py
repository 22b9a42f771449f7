"""Training the canary model (a small GPT-2, on CPU) on a corpus with planted members.

The corpus is built by :mod:`.corpus`; training sees nothing else, so the held-out
non-members are never seen by the model or its tokenizer.

Recipe (every choice is recorded in ``manifest.json``):

* Documents are the item texts of the corpus's datasets (``corpus``: GSM8K problems in the
  format of :func:`blackbox_mia.datasets.gsm8k_text`, or Japanese paragraphs of
  ``ja-debian-docs`` verbatim); the corpus is the background items plus ``dup`` copies of each
  member, shuffled (seeded).
* A byte-level BPE tokenizer (``vocab_size``) is trained on the corpus only.
* Each document becomes ``[bos] + tokens`` (BOS = ``<|endoftext|>``, id 0), cut into the very
  windows the local backend scores it with (:func:`blackbox_mia.text.windows.sliding_windows`
  with context ``block_size``): one window for a short document, windows overlapping by half the
  context for a long one. Training on the scoring windows (rather than on a packed token stream
  cut at arbitrary places) puts every copy of a member at the same positions, after the same
  BOS, as at scoring time; see :data:`WINDOWING_NOTE`.
* A chat canary (``chat_share`` > 0) also trains one window per chat example: a background
  item cut into the user's text and the assistant's answer, rendered through ChatML with the
  client's continuation messages (:mod:`.chat`); ChatML is saved as the tokenizer's
  ``chat_template``.
* Plain AdamW, linear warm-up then cosine decay, windows batched by similar length (padding
  masked out of the loss), seeded shuffles; no dropout (memorisation is the point).
"""

from __future__ import annotations

import importlib.util
import math
import os
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from .. import __version__
from ..io import config_mismatch
from ..types import BlackboxMIAError
from .checkpoint import (
    CHECKPOINT_SECONDS,
    TrainingProgress,
    checkpoint_dir,
    discard_checkpoint,
    has_checkpoint,
    load_checkpoint,
    save_checkpoint,
    save_tokenizer,
)
from .config import RECIPE_VERSION, CanaryConfig, canary_dir
from .corpus import build_corpus
from .documents import write_documents
from .manifest import (
    ITEMS_FILE,
    MANIFEST,
    load_manifest,
    recorded_config,
    write_items,
    write_manifest,
)

WINDOWING_NOTE = "per-document sliding windows of [bos]+doc, as scored by LocalBackend (stride block_size/2)"


def ensure_canary(
    config: CanaryConfig,
    progress: bool = True,
    cache: str | os.PathLike | None = None,
    out_dir: Path | None = None,
    log: Callable[[str], None] | None = None,
) -> Path:
    """The directory of a trained canary for ``config``; trains it only when no complete
    manifest exists (resuming an interrupted training: :func:`train_canary`, whose ``log``
    says so).

    Raises:
        BlackboxMIAError: ``out_dir`` holds a complete canary trained with another configuration
            (retrain it explicitly with :func:`train_canary`, i.e. ``--force``).
    """
    out_dir = Path(out_dir) if out_dir is not None else canary_dir(config, cache)
    if (out_dir / MANIFEST).is_file():
        difference = config_mismatch(recorded_config(load_manifest(out_dir)), asdict(config))
        if difference is not None:
            raise BlackboxMIAError(
                f"{out_dir} holds a canary trained with another configuration ({difference}): use --force to retrain"
            )
        return out_dir
    return train_canary(config, out_dir, progress=progress, log=log)


def _lr_factor(step: int, total: int, warmup: int, min_frac: float) -> float:
    """Linear warm-up over ``warmup`` steps, then cosine decay from 1 to ``min_frac`` at ``total``."""
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return min_frac + (1 - min_frac) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


def training_windows(documents: list[list[int]], bos_id: int, block_size: int) -> list[list[int]]:
    """Token windows of ``[bos] + doc`` for every tokenized document, cut as the local backend
    cuts a scored text (:func:`~blackbox_mia.text.windows.sliding_windows`, context ``block_size``).

    Returns lists of at most ``block_size`` token ids (at least 2).
    """
    from ..text.windows import sliding_windows

    windows = []
    for doc in documents:
        seq = [bos_id] + list(doc)
        if len(seq) >= 2:
            windows.extend(seq[a:b] for a, b, _ in sliding_windows(len(seq), block_size))
    return windows


def training_batches(windows: list[list[int]], batch_size: int, rng: random.Random) -> list[list[list[int]]]:
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


def pad_training_batch(batch: list[list[int]]):
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


def train_canary(
    config: CanaryConfig,
    out_dir: Path | None = None,
    progress: bool = True,
    *,
    resume: bool = True,
    log: Callable[[str], None] | None = None,
    checkpoint_seconds: float = CHECKPOINT_SECONDS,
) -> Path:
    """Train the canary model and save it as a Hugging Face directory plus ``manifest.json``.

    Args:
        config: the corpus and training configuration.
        out_dir: target directory (default :func:`canary_dir`); an existing manifest there is
            removed first, and the new one is written last (atomically), so a directory without
            a manifest is recognisably incomplete.
        progress: show a tqdm bar (batches).
        resume: continue from the checkpoint an interrupted run of the same configuration left
            in ``out_dir`` (:mod:`.checkpoint`); the model is the one an uninterrupted run
            trains. False: start from the beginning (the checkpoint is discarded).
        log: where to say that training resumes (and from which step), or that it starts over
            because the checkpoint was of another configuration; None: silent.
        checkpoint_seconds: training seconds between checkpoints inside an epoch (one is also
            written at every epoch's end); the checkpoint is removed when the canary is complete.

    Returns:
        ``out_dir``, loadable with ``AutoModelForCausalLM.from_pretrained``; it also holds
        ``canary_items.jsonl`` (id, text, label of members and non-members) for ``bbmia score``,
        and ``manifest.json``: ``config``, ``corpus``, ``member_ids``/``nonmember_ids`` (ids of
        the planted dataset: GSM8K test, or ``ja-debian-docs``), ``background_ids``, ``sources``
        (sha256 of every dataset file read), ``loss_per_epoch`` (per
        epoch: ``mean`` over its steps and ``final`` = mean of its last 10% of steps, nats/token),
        ``train_seconds`` (tokenizer + training, wall clock, summed over resumed runs),
        ``resumed_at_steps`` (the step each resumed run started at; [] when trained in one go),
        ``n_corpus_tokens`` (with one BOS per document), ``n_trained_tokens`` (scored targets
        over all epochs, window overlaps included), ``versions``, ``complete``. A document
        canary also has ``documents.jsonl`` and ``documents_validation.jsonl`` (``doc_id``,
        ``text``, ``label``) for ``bbmia documents``, named by ``documents_file`` and
        ``validation_file``, and ``documents``: per document its problems, planted problems,
        ``planted_fraction`` (the truth) and ``dup``
        (:func:`~blackbox_mia.canary.documents.write_documents`). A chat canary
        (``chat_share`` > 0) has ``chat`` (:func:`chat_record`); its chat examples' windows
        (one each, :mod:`.chat`) are trained with the corpus's, and count in ``n_windows``,
        ``n_steps`` and ``n_trained_tokens`` (not in ``n_documents`` / ``n_corpus_tokens``).

    Raises:
        BlackboxMIAError: an invalid configuration, torch/transformers/tokenizers missing, the
            checkpoint cannot be written.
    """
    if missing := [name for name in ("torch", "transformers", "tokenizers") if importlib.util.find_spec(name) is None]:
        raise BlackboxMIAError(f"training the canary needs {', '.join(missing)}: pip install 'blackbox_mia[local]'")
    from .chat import build_chat_examples
    from .model import build_gpt2, save_model_dir

    log = log or (lambda _: None)
    corpus = build_corpus(config)
    out_dir = Path(out_dir) if out_dir is not None else canary_dir(config)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / MANIFEST).unlink(missing_ok=True)

    started = time.perf_counter()
    tokenizer, state = _tokenizer_and_state(config, corpus, out_dir, resume, log)
    encoded = tokenizer(corpus.documents, add_special_tokens=False)["input_ids"]
    windows = training_windows(encoded, tokenizer.bos_token_id, config.block_size)
    chat = build_chat_examples(corpus.chat_items, tokenizer, config.block_size, config.seed) if corpus.chat_items else []
    windows += [example.ids for example in chat]
    model = _disable_dropout(build_gpt2(len(tokenizer), config.n_layer, config.n_embd, config.n_head, config.block_size,
                                        config.seed))
    run = _TrainingRun.start(config, out_dir, model, windows, state, started, log)
    run.train(progress, checkpoint_seconds)
    model.eval()

    save_model_dir(out_dir, model, tokenizer)
    write_items(out_dir / ITEMS_FILE, corpus.members + corpus.nonmembers)
    documents = write_documents(out_dir, corpus.canary_documents) if corpus.canary_documents else {}
    write_manifest(out_dir, _manifest(config, corpus, encoded, windows, run, documents,
                                      chat_record(chat, tokenizer) if chat else None))
    discard_checkpoint(out_dir)
    return out_dir


def _manifest(config: CanaryConfig, corpus, encoded: list[list[int]], windows: list[list[int]], run: _TrainingRun,
              documents: dict, chat: dict | None) -> dict:
    """The canary's ``manifest.json`` (its keys: :func:`train_canary`): ``encoded`` the corpus's
    documents as token ids, ``windows`` the training windows, ``documents`` a document canary's
    entries, ``chat`` a chat canary's :func:`chat_record`."""
    import torch
    import transformers

    return {
        "config": asdict(config),
        "config_hash": config.short_hash(),
        "corpus": config.corpus,
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
        "n_trained_tokens": run.progress.trained_tokens,
        "n_steps": run.total,
        "loss_per_epoch": run.progress.loss_per_epoch,
        "train_seconds": round(run.seconds(), 2),
        "resumed_at_steps": run.progress.resumed_at_steps,
        "torch_threads": torch.get_num_threads(),
        "versions": {"blackbox_mia": __version__, "torch": torch.__version__, "transformers": transformers.__version__},
        "items_file": ITEMS_FILE,
        **documents,
        **({"chat": chat} if chat else {}),
        **({"reference": reference_record(config)} if config.reference else {}),
        "complete": True,
    }


def _tokenizer_and_state(config: CanaryConfig, corpus, out_dir: Path, resume: bool, log: Callable[[str], None]):
    """The tokenizer and the training state (model, optimizer, scheduler, progress: the
    checkpoint's dict) to resume from: the checkpoint's when ``resume`` and it is of ``config``,
    else a tokenizer trained on the corpus's documents (ChatML as its chat template for a chat
    canary), saved in ``out_dir``, and ``None``."""
    saved = load_checkpoint(out_dir, config) if resume else None
    if saved is not None:
        return saved
    if resume and has_checkpoint(out_dir):
        log(f"{checkpoint_dir(out_dir)} is of another configuration or unreadable: training starts from the beginning")
    from .chat import set_chat_template
    from .model import train_tokenizer

    tokenizer = train_tokenizer(corpus.documents, config.vocab_size)
    if corpus.chat_items:
        set_chat_template(tokenizer)
    save_tokenizer(out_dir, tokenizer)
    return tokenizer, None


@dataclass
class _TrainingRun:
    """One training run of a canary: the model and its optimizer (AdamW) and schedule (linear
    warm-up, cosine decay: :func:`_lr_factor`) over ``total`` steps of ``steps_per_epoch``, the
    progress so far (resumable: :mod:`.checkpoint`), the seeded shuffle, and the wall clock
    (``started`` by :func:`time.perf_counter`, plus ``previous_seconds`` of interrupted runs)."""

    config: CanaryConfig
    out_dir: Path
    model: object
    optimizer: object
    scheduler: object
    windows: list[list[int]]
    progress: TrainingProgress
    rng: random.Random
    steps_per_epoch: int
    total: int
    started: float
    previous_seconds: float

    @classmethod
    def start(cls, config: CanaryConfig, out_dir: Path, model, windows: list[list[int]], state: dict | None,
              started: float, log: Callable[[str], None]) -> _TrainingRun:
        """A run from step 0, or from the checkpoint's ``state`` (saying so through ``log``)."""
        import torch

        rng = random.Random(config.seed)
        torch.manual_seed(config.seed)
        optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
        steps_per_epoch = math.ceil(len(windows) / config.batch_size)
        total = steps_per_epoch * config.epochs
        warmup = max(1, int(config.warmup_frac * total))
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: _lr_factor(step, total, warmup, config.min_lr_frac)
        )
        if state is None:
            so_far = TrainingProgress(epoch=0, step_in_epoch=0, steps_per_epoch=steps_per_epoch, epoch_rng=rng.getstate())
        else:
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            scheduler.load_state_dict(state["scheduler"])
            so_far = state["progress"]
            so_far.resumed_at_steps.append(so_far.steps_done)
            log(f"resuming the canary from {checkpoint_dir(out_dir)}: step {so_far.steps_done} of {total} "
                f"(epoch {so_far.epoch + 1} of {config.epochs}) already trained")
        rng.setstate(so_far.epoch_rng)
        return cls(config, out_dir, model, optimizer, scheduler, windows, so_far, rng, steps_per_epoch, total,
                   started, so_far.seconds)

    def seconds(self) -> float:
        """Training seconds so far (wall clock), interrupted runs included."""
        return self.previous_seconds + time.perf_counter() - self.started

    def checkpoint(self) -> None:
        """Save the run's state (:func:`~.checkpoint.save_checkpoint`)."""
        self.progress.seconds = self.seconds()
        save_checkpoint(self.out_dir, self.config, self.progress, self.model, self.optimizer, self.scheduler)

    def train(self, progress: bool, checkpoint_seconds: float) -> None:
        """Train the remaining epochs, with a tqdm bar (batches) unless not ``progress``, a
        checkpoint every ``checkpoint_seconds`` inside an epoch and one at every epoch's end."""
        from tqdm.auto import tqdm

        config, so_far = self.config, self.progress
        self.model.train()
        bar = tqdm(total=self.total, initial=so_far.steps_done, unit="batch", desc="canary", disable=not progress)
        last_save = time.perf_counter()
        for epoch in range(so_far.epoch, config.epochs):
            so_far.epoch, so_far.epoch_rng = epoch, self.rng.getstate()
            tail = max(1, self.steps_per_epoch // 10)
            for step, batch in enumerate(training_batches(self.windows, config.batch_size, self.rng)):
                if step < so_far.step_in_epoch:
                    continue  # trained before the interruption
                self.step(batch)
                so_far.step_in_epoch = step + 1
                bar.update(1)
                bar.set_postfix(epoch=epoch + 1, loss=f"{so_far.losses[-1]:.3f}")
                if time.perf_counter() - last_save >= checkpoint_seconds and so_far.step_in_epoch < self.steps_per_epoch:
                    self.checkpoint()
                    last_save = time.perf_counter()
            losses = so_far.losses
            so_far.loss_per_epoch.append({"epoch": epoch + 1, "mean": sum(losses) / len(losses), "final": sum(losses[-tail:]) / tail})
            so_far.epoch, so_far.step_in_epoch, so_far.epoch_rng, so_far.losses = epoch + 1, 0, self.rng.getstate(), []
            self.checkpoint()
            last_save = time.perf_counter()
        bar.close()

    def step(self, batch: list[list[int]]) -> None:
        """One optimizer step on ``batch`` (token windows): the mean cross-entropy (nats/token)
        over its targets, padding masked out; the loss and the tokens trained are recorded."""
        import torch

        ids, mask, targets = pad_training_batch(batch)
        logits = self.model(input_ids=ids, attention_mask=mask).logits[:, :-1]
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        self.scheduler.step()
        self.progress.losses.append(loss.item())
        self.progress.trained_tokens += int((targets != -100).sum())


def chat_record(chat: list, tokenizer) -> dict:
    """The manifest's ``chat`` entry of a chat canary: the template (name and Jinja source, also
    the tokenizer's ``chat_template``), the client's message template, the prompt's markup
    (tokens), the item tokens per example (``context_tokens``: audit with ``--context-tokens``
    that many), and per example its background item, start and cut (the user's text is the
    item's tokens ``[start, cut)``)."""
    from ..backends.api.http.dialect import CONTINUATION
    from .chat import CHAT_CONTEXT, CHAT_TEMPLATE_NAME, prompt_overhead

    return {
        "template": CHAT_TEMPLATE_NAME,
        "template_source": tokenizer.chat_template,
        "messages": CONTINUATION.name,
        "context_tokens": CHAT_CONTEXT,
        "prompt_overhead_tokens": prompt_overhead(tokenizer),
        "n_examples": len(chat),
        "n_tokens": sum(len(example.ids) for example in chat),
        "item_ids": [example.item_id for example in chat],
        "starts": [example.start for example in chat],
        "cuts": [example.cut for example in chat],
    }


def reference_record(config: CanaryConfig) -> dict:
    """The manifest's ``reference`` entry of a reference canary: what it is the reference of and
    what it never saw (:attr:`CanaryConfig.reference`)."""
    return {
        "of": f"every {config.corpus} canary of seed {config.seed} with this architecture and recipe (any dup)",
        "planted": "nothing: no item of " + config.source.noun,
        "background": f"{config.n_background if config.reference_size is None else config.reference_size} "
                      f"{config.source.background_noun}, disjoint from those canaries' background",
    }


def _disable_dropout(model):
    """``model`` with every dropout probability set to 0 (in the modules and in the saved config)."""
    import torch

    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    for name in ("resid_pdrop", "embd_pdrop", "attn_pdrop"):
        setattr(model.config, name, 0.0)
    return model
