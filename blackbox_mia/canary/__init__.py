"""The canary model: a small GPT-2 trained on CPU on a corpus with planted members.

Controlled ground truth for membership inference (design §5; the Min-K% paper, Shi et al. 2024
§6, and Ishihara & Takahashi 2024 do the same). With the default corpus ``gsm8k``,
``n_members`` GSM8K test problems are planted ``dup`` times each among ``n_background`` GSM8K
train problems and ``n_nonmembers`` other GSM8K test problems are held out. With ``ja``, the
1,807 Japanese paragraphs of ``ja-debian-docs`` are split (seeded) into members, non-members and
background. Neither the model nor its tokenizer ever sees a non-member, so a detector's AUC on
members vs. non-members measures detection with known membership.

Modules: :mod:`.config` (what determines a canary, its directory in the cache), :mod:`.corpus`
(background, planted members × dup, held-out non-members), :mod:`.train` (the recipe; trains
or reuses), :mod:`.model` (tokenizer and GPT-2 building blocks), :mod:`.manifest` (the
membership split on disk, the canary's items, which target is a canary).
"""

from .config import (
    CORPORA,
    DEFAULT_CORPUS,
    RECIPE_VERSION,
    CanaryConfig,
    CorpusSource,
    canary_dir,
    config_fields,
)
from .corpus import Corpus, build_corpus
from .manifest import (
    ITEMS_FILE,
    MANIFEST,
    canary_items,
    find_canary_manifest,
    load_manifest,
)
from .train import WINDOWING_NOTE, ensure_canary, train_canary, training_windows

__all__ = [
    "CORPORA", "DEFAULT_CORPUS", "ITEMS_FILE", "MANIFEST", "RECIPE_VERSION", "WINDOWING_NOTE", "CanaryConfig",
    "Corpus", "CorpusSource", "build_corpus",
    "canary_dir", "canary_items", "config_fields", "ensure_canary", "find_canary_manifest", "load_manifest",
    "train_canary", "training_windows",
]
