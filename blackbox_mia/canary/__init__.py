"""The canary model: a small GPT-2 trained on CPU on a corpus with planted members.

Controlled ground truth for membership inference (design §5; the Min-K% paper, Shi et al. 2024
§6, and Ishihara & Takahashi 2024 do the same). With the default corpus ``gsm8k``,
``n_members`` GSM8K test problems are planted ``dup`` times each among ``n_background`` GSM8K
train problems and ``n_nonmembers`` other GSM8K test problems are held out. With ``ja``, the
1,807 Japanese paragraphs of ``ja-debian-docs`` are split (seeded) into members, non-members and
background. With ``documents``, multi-problem GSM8K documents are planted whole or in part at
several dup levels, with held-out and validation documents (:mod:`.documents`). Neither the model nor its tokenizer ever sees a non-member, so a detector's AUC on
members vs. non-members measures detection with known membership.

Modules: :mod:`.config` (what determines a canary, its directory in the cache), :mod:`.corpus`
(background, planted members × dup, held-out non-members), :mod:`.documents` (the document
canary's documents and their truth), :mod:`.chat` (a chat canary's examples, made from
background items only: ``CanaryConfig.chat_share``), :mod:`.train` (the recipe; trains or
reuses), :mod:`.checkpoint` (resuming a training), :mod:`.model` (tokenizer and GPT-2 building
blocks), :mod:`.manifest` (the membership split on disk, the canary's items, which target is a
canary), :mod:`.unlearn` (an "unlearned" canary and its ground truth).
"""

from .config import (
    CORPORA,
    DEFAULT_CORPUS,
    DOCUMENT_FIELDS,
    DOCUMENTS_CORPUS,
    RECIPE_VERSION,
    CanaryConfig,
    CorpusSource,
    canary_dir,
    dup_levels,
)
from .corpus import Corpus, build_corpus
from .documents import (
    DOCUMENTS_FILE,
    PARTIAL_FRACTIONS,
    VALIDATION_FILE,
    CanaryDocument,
)
from .manifest import (
    ITEMS_FILE,
    MANIFEST,
    canary_items,
    find_canary_manifest,
    load_manifest,
)
from .train import WINDOWING_NOTE, ensure_canary, train_canary, training_windows

__all__ = [
    "CORPORA", "DEFAULT_CORPUS", "DOCUMENTS_CORPUS", "DOCUMENTS_FILE", "DOCUMENT_FIELDS", "ITEMS_FILE", "MANIFEST",
    "PARTIAL_FRACTIONS", "RECIPE_VERSION", "VALIDATION_FILE", "WINDOWING_NOTE", "CanaryConfig", "CanaryDocument",
    "Corpus", "CorpusSource", "build_corpus", "canary_dir", "canary_items", "dup_levels",
    "ensure_canary", "find_canary_manifest", "load_manifest", "train_canary", "training_windows",
]
