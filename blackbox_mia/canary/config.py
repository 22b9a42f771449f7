"""What determines a canary model: :class:`CanaryConfig`, its corpus, its hash, and its default directory."""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from ..config import NOT_AN_OPTION, cache_root
from ..option_names import named
from ..types import BlackboxMIAError

# Bump when the training recipe changes, so cached models trained by the old recipe are not reused.
RECIPE_VERSION = 1


@dataclass(frozen=True)
class CorpusSource:
    """Where the texts of one canary corpus come from.

    Attributes:
        planted: dataset spec whose items become the members and the non-members.
        background: dataset spec of the background; ``None``: the background is drawn from
            ``planted`` too, disjoint from the members and non-members.
        noun: what ``planted``'s items are, for messages ("GSM8K test problems").
        background_noun: what the background's items are ("GSM8K train problems").
        defaults: values of the :class:`CanaryConfig` fields left ``None`` (``n_background``, ``epochs``).
    """

    planted: str
    background: str | None
    noun: str
    background_noun: str
    defaults: dict = field(default_factory=dict)


DEFAULT_CORPUS = "gsm8k"
DOCUMENTS_CORPUS = "documents"
# The CanaryConfig fields of the documents corpus only: None (and left out of the hash) for the others.
DOCUMENT_FIELDS = ("doc_items", "doc_partial", "doc_validation")
# The CanaryConfig field of chat canaries: left out of the hash at its default (0.0, no chat examples).
CHAT_FIELD = "chat_share"
# The CanaryConfig field of the planted order: left out of the hash at its default ("shuffled").
ORDER_FIELD = "planted_order"
SHUFFLED, CANONICAL = "shuffled", "canonical"
PLANTED_ORDERS = (SHUFFLED, CANONICAL)
# The CanaryConfig fields of reference canaries: left out of the hash at their defaults (False, None).
REFERENCE_FIELD = "reference"
REFERENCE_SIZE_FIELD = "reference_size"

# corpus name -> its source. GSM8K: members and non-members from the 1,319 test problems, the
# background from the 7,473 train problems. ja: the 1,807 Japanese paragraphs of
# ``ja-debian-docs`` split three ways: 200 members, 200 non-members, the other 1,407 as background.
# Paragraph lengths with the default ja canary's BPE (4096 tokens, BOS included): median 60,
# 90th percentile 110, max 301 tokens; the 107 paragraphs longer than block_size = 128 are cut
# into the scoring windows (stride 64, see .train), never truncated. ja trains 4 epochs (about 400
# steps, as GSM8K's 2): after 2 it has not yet memorized its members (figures: records/canaries.md).
# documents: "books" of doc_items consecutive GSM8K test problems (see .documents): n_members
# planted whole, n_nonmembers held out, doc_partial partly planted (the test file), plus
# doc_validation planted and doc_validation held-out documents (the validation file), among
# GSM8K train problems. Defaults: 60 documents of 8 problems (about 800 words each), about 1M
# trained tokens (training time and the documents audit's AUC on it: records/canaries.md).
# aqua: AQuA-RAT test problems (254) in the text format the audits send (question, the options
# with their letters, rationale, answer: datasets.formats.aqua_text), 100 planted and 100 held
# out, among GSM8K train problems; the benchmark TS-Guessing is validated on (issue 31). aqua trains
# 8 epochs (about 1,400 steps): TS-Guessing needs verbatim recall of an option, the regime it targets;
# after 2 epochs (loss 4.17 nats/token) members and non-members alike had 1% exact guesses, after 8
# (1.91) the greedy continuation reproduces members' hidden options (docs/text_only.md).
CORPORA: dict[str, CorpusSource] = {
    DEFAULT_CORPUS: CorpusSource("gsm8k:test", "gsm8k:train", "GSM8K test problems", "GSM8K train problems",
                                 {"n_background": 2000, "epochs": 2, "n_members": 200, "n_nonmembers": 200}),
    "ja": CorpusSource("ja-debian-docs", None, "ja-debian-docs paragraphs", "ja-debian-docs paragraphs",
                       {"n_background": 1407, "epochs": 4, "n_members": 200, "n_nonmembers": 200}),
    DOCUMENTS_CORPUS: CorpusSource("gsm8k:test", "gsm8k:train", "GSM8K test problems", "GSM8K train problems",
                                   {"n_background": 1000, "epochs": 2, "n_members": 16, "n_nonmembers": 16,
                                    "doc_items": 8, "doc_partial": 12, "doc_validation": 8}),
    "aqua": CorpusSource("aqua:test", "gsm8k:train", "AQuA test problems", "GSM8K train problems",
                         {"n_background": 2000, "epochs": 8, "n_members": 100, "n_nonmembers": 100}),
}  # fmt: skip


@dataclass(frozen=True)
class CanaryConfig:
    """Everything that determines a canary model.

    Attributes:
        corpus: a name in :data:`CORPORA`: ``gsm8k`` (planted GSM8K test problems among GSM8K
            train problems), ``ja`` (planted Japanese paragraphs among the other paragraphs
            of ``ja-debian-docs``) or ``documents`` (whole and partly planted multi-problem
            GSM8K documents, see :mod:`.documents`).
        n_background: background items in the corpus (seeded sample); ``None`` (the default)
            takes the corpus's default (``CORPORA[corpus].defaults``: 2000 GSM8K train
            problems; 1407 Japanese paragraphs, all those neither members nor non-members at
            the default sizes).
        n_members: items planted in the corpus (label 1); ``documents``: test documents
            planted whole. ``None`` (the default): the corpus's default (200; 16 documents).
        n_nonmembers: other items of the same source, never seen (label 0); ``documents``:
            held-out test documents. ``None``: the corpus's default (200; 16 documents).
        dup: copies of each member in the corpus; ``documents``: the highest level, planted
            documents cycle through the levels 1, 2, 4, ... up to ``dup`` (:func:`dup_levels`).
        seed: seeds the splits, the corpus order, the initial weights and the batch order.
        vocab_size: BPE vocabulary size (tokens), including ``<|endoftext|>``.
        n_layer, n_embd, n_head: GPT-2 shape.
        block_size: tokens per training window, and the model's context (``n_positions``).
        epochs: passes over the corpus; ``None`` (the default) takes the corpus's default (2
            for GSM8K, 4 for ja).
        lr: peak AdamW learning rate.
        batch_size: windows per optimisation step.
        warmup_frac: fraction of the steps with a linear warm-up from 0 to ``lr``.
        min_lr_frac: the cosine decay ends at ``min_lr_frac * lr``.
        weight_decay: AdamW weight decay.
        doc_items: ``documents`` only: consecutive GSM8K test problems per document (default 8).
        doc_partial: ``documents`` only: test documents with a contiguous part of their
            problems planted (a quarter, half, three quarters; default 12).
        doc_validation: ``documents`` only: planted and held-out documents (each) of the
            validation file, the threshold's calibration set (default 8).
        chat_share: chat fine-tuning examples per background item (0: none, a base model).
            ``round(chat_share * n_background)`` examples, each a BACKGROUND item (never a member
            or non-member) cut at a seeded token position into the user's text and the
            assistant's answer, rendered through ChatML with the client's
            ``--chat-template continuation`` messages (:mod:`.chat`); members stay planted as
            raw text. A chat canary saves ChatML as its tokenizer's ``chat_template``.
        planted_order: ``shuffled`` (the default): each of the ``dup`` copies of each member is
            its own document, at a random place in the corpus. ``canonical``: the members are
            planted as ONE document, the benchmark file in its canonical order (the members
            sorted by their index in the planted dataset, joined by
            :data:`~blackbox_mia.datasets.ordered.ITEM_SEPARATOR`), and that document ``dup``
            times; the exchangeability test (Oren et al. 2024) is validated on it. The
            membership split is the shuffled canary's of the same seed. Not for ``documents``.
        reference: a REFERENCE canary (:func:`reference_config`): nothing is planted (its
            ``dup`` is 1 and meaningless), and its background is another seeded sample of the
            background dataset, disjoint from the background of the canaries of the same seed
            (``n_background`` items drawn from the pool those canaries left). It never sees the
            planted dataset (GSM8K test): the reference model of Carlini et al. 2021 §6 for
            ``ref``. Its manifest lists the canary's members and non-members all as
            non-members (label 0): it saw none of them. Set by ``--reference-of``, not an option.
        reference_size: a reference canary's own background size (items); ``None`` (the
            default): ``n_background``, the canaries'. Its background is drawn from the pool the
            canaries of its seed left (``n_background`` + ``reference_size`` items must fit), so a
            larger reference never overlaps their background either: the "larger model trained on
            more of the same kind of data" of a real audit. Set by ``--reference-size``, not an option.
    """

    corpus: str = DEFAULT_CORPUS
    n_background: int | None = None
    n_members: int | None = None
    n_nonmembers: int | None = None
    dup: int = 8
    seed: int = 0
    vocab_size: int = 4096
    n_layer: int = 2
    n_embd: int = 128
    n_head: int = 4
    block_size: int = 128
    epochs: int | None = None
    lr: float = 3e-3
    batch_size: int = 32
    warmup_frac: float = 0.05
    min_lr_frac: float = 0.1
    weight_decay: float = 0.0
    doc_items: int | None = None
    doc_partial: int | None = None
    doc_validation: int | None = None
    chat_share: float = 0.0
    planted_order: str = SHUFFLED
    reference: bool = field(default=False, metadata=NOT_AN_OPTION)
    reference_size: int | None = field(default=None, metadata=NOT_AN_OPTION)

    def __post_init__(self) -> None:
        """Fill the fields left ``None`` with the corpus's defaults.

        Raises:
            BlackboxMIAError: an unknown corpus.
        """
        if self.corpus not in CORPORA:
            raise BlackboxMIAError(f"canary: unknown corpus {self.corpus!r}; corpora: {', '.join(CORPORA)}")
        for name, value in CORPORA[self.corpus].defaults.items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, value)

    @property
    def source(self) -> CorpusSource:
        """Where this canary's texts come from (``CORPORA[corpus]``)."""
        return CORPORA[self.corpus]

    def validate(self) -> None:
        """Raise :class:`BlackboxMIAError` for an impossible configuration."""
        positive = ("n_members", "n_nonmembers", "dup", "vocab_size", "n_layer", "n_embd", "n_head", "epochs", "batch_size")
        for name in positive:
            if getattr(self, name) < 1:
                raise BlackboxMIAError(f"canary: {name} must be at least 1, got {getattr(self, name)}")
        if self.corpus == DOCUMENTS_CORPUS:
            if self.doc_items < 2 or self.doc_partial < 0 or self.doc_validation < 1:
                raise BlackboxMIAError("canary: documents need doc_items >= 2, doc_partial >= 0, doc_validation >= 1")
        else:
            for name in DOCUMENT_FIELDS:
                if getattr(self, name) is not None:
                    raise BlackboxMIAError(f"canary: {name} applies only to {named('corpus', DOCUMENTS_CORPUS)}")
        if self.planted_order not in PLANTED_ORDERS:
            raise BlackboxMIAError(f"canary: {named('planted_order')} must be one of {', '.join(PLANTED_ORDERS)}, "
                                   f"got {self.planted_order!r}")
        if self.planted_order != SHUFFLED and self.corpus == DOCUMENTS_CORPUS:
            raise BlackboxMIAError(f"canary: {named('planted_order', self.planted_order)} does not apply to "
                                   f"{named('corpus', DOCUMENTS_CORPUS)} (its documents have their own order)")
        if self.reference:
            self._validate_reference()
        elif self.reference_size is not None:
            raise BlackboxMIAError("canary: reference_size applies only to a reference canary (--reference-of)")
        if not (math.isfinite(self.chat_share) and self.chat_share >= 0):
            raise BlackboxMIAError(f"canary: chat_share must be a finite number >= 0, got {self.chat_share}")
        if self.chat_share > 0 and round(self.chat_share * self.n_background) < 1:
            raise BlackboxMIAError(f"canary: chat_share {self.chat_share} of {self.n_background} background items "
                                   "makes no chat example (chat examples are made from background items only)")
        if self.n_background < 0:
            raise BlackboxMIAError(f"canary: n_background must be >= 0, got {self.n_background}")
        if self.block_size < 2:
            raise BlackboxMIAError(f"canary: block_size must be at least 2 tokens, got {self.block_size}")
        if self.n_embd % self.n_head:
            raise BlackboxMIAError(f"canary: n_embd ({self.n_embd}) must be a multiple of n_head ({self.n_head})")
        if not (self.lr > 0 and 0 <= self.warmup_frac < 1 and 0 <= self.min_lr_frac <= 1 and self.weight_decay >= 0):
            raise BlackboxMIAError("canary: need lr > 0, 0 <= warmup_frac < 1, 0 <= min_lr_frac <= 1, weight_decay >= 0")

    def _validate_reference(self) -> None:
        """Raise :class:`BlackboxMIAError` for a reference canary that cannot be built: a corpus
        without a background dataset of its own, room for two disjoint backgrounds, or a dup
        other than 1 or a planted order other than shuffled (nothing is planted)."""
        if self.source.background is None or self.corpus == DOCUMENTS_CORPUS:
            raise BlackboxMIAError(f"canary: a reference canary needs a corpus whose background is a dataset of its "
                                   f"own (not {self.corpus!r})")
        if self.dup != 1 or self.planted_order != SHUFFLED:
            raise BlackboxMIAError("canary: a reference canary plants nothing: dup 1, planted order shuffled "
                                   "(make one with --reference-of CANARY)")
        if self.reference_size is not None and self.reference_size < 1:
            raise BlackboxMIAError(f"canary: reference_size must be at least 1, got {self.reference_size}")

    def short_hash(self) -> str:
        """12 hex digits identifying this configuration and the recipe version.

        The default corpus is left out of the hashed fields, and the document fields out of
        every other corpus's, and ``chat_share`` at its default 0, so GSM8K and ja canaries
        keep the hash (and the directory) they had before the corpus could be chosen, documents
        planted, chat examples added, the planted order chosen or references made.
        """
        identity = asdict(self)
        if self.corpus == DEFAULT_CORPUS:
            del identity["corpus"]
        if self.corpus != DOCUMENTS_CORPUS:
            for name in DOCUMENT_FIELDS:
                del identity[name]
        if not self.chat_share:
            del identity[CHAT_FIELD]
        if self.planted_order == SHUFFLED:
            del identity[ORDER_FIELD]
        if not self.reference:
            del identity[REFERENCE_FIELD]
        if self.reference_size is None:
            del identity[REFERENCE_SIZE_FIELD]
        blob = json.dumps({"recipe": RECIPE_VERSION, **identity}, sort_keys=True)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:12]


def canary_dir(config: CanaryConfig, cache: str | os.PathLike | None = None) -> Path:
    """Default model directory: ``<cache root>/canary/<config.short_hash()>`` (not created)."""
    return cache_root(cache) / "canary" / config.short_hash()


def dup_levels(dup: int) -> list[int]:
    """The dup levels planted documents cycle through: powers of two below ``dup``, then ``dup``
    (8: ``[1, 2, 4, 8]``; 6: ``[1, 2, 4, 6]``; 1: ``[1]``)."""
    return [2**i for i in range(dup.bit_length()) if 2**i < dup] + [dup]


def reference_config(target: CanaryConfig, size: int | None = None) -> CanaryConfig:
    """The reference canary of ``target``: its architecture, training recipe, corpus family,
    seed and split, nothing planted (``dup`` 1, shuffled order), another sample of the
    background (see :attr:`CanaryConfig.reference`), of ``size`` items (None: the target's
    ``n_background``; :attr:`CanaryConfig.reference_size`). Every dup and planted order of one
    seed shares one reference (of each size).

    Raises:
        BlackboxMIAError: ``target`` is itself a reference, or its corpus has no background
            dataset of its own (``ja``, ``documents``).
    """
    if target.reference:
        raise BlackboxMIAError("canary: the canary given is itself a reference canary")
    config = replace(target, reference=True, dup=1, planted_order=SHUFFLED, reference_size=size)
    config.validate()
    return config
