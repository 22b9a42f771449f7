"""Model-free "blind" baseline: can the member/non-member split be told apart from text alone?

Das, Zhang & Tramèr 2024 ("Blind baselines beat membership inference attacks for foundation
models") show that classifiers that never query the model reach AUC 0.99 on WikiMIA: temporal
splits differ in vocabulary (dates, recent events), so an MIA score on such a split may measure
distribution shift rather than membership. Our baseline is their bag-of-words idea with TF-IDF
word 1–2 grams and a logistic regression, scored out of fold by stratified k-fold
cross-validation so that no text is scored by a classifier that saw it. Text without spaces
between words (Japanese) gets character 1–3 grams instead (:func:`blind_analyzer`): a word
analyser would see whole sentences as single tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..text.script import is_japanese
from ..text.segment import get_segmenter
from ..types import BlackboxMIAError
from .metrics import auc

WORD_NGRAMS = ("word", (1, 2))
"""TF-IDF analyser and n-gram range for text segmented at whitespace: word 1–2 grams."""
CHAR_NGRAMS = ("char", (1, 3))
"""For unsegmented text (Japanese): character 1–3 grams, which cover most of MeCab's words
(one to three characters) and the pairs of one-character words, spaces and newlines included."""
SEGMENTER_NGRAMS = {"whitespace": WORD_NGRAMS, "japanese": CHAR_NGRAMS, "chars": CHAR_NGRAMS}
"""The analyser each segmenter's texts get; ``auto`` chooses between ``whitespace`` and ``japanese``."""
_ANALYZER_WORDS = {"word": "word", "char": "character", "char_wb": "character (within words)"}


def blind_analyzer(texts: Sequence[str], segmenter: str = "auto") -> tuple[str, tuple[int, int]]:
    """The TF-IDF analyser and n-gram range for ``texts`` segmented by ``segmenter`` (a name).

    ``whitespace`` → :data:`WORD_NGRAMS`; ``japanese`` and ``chars`` → :data:`CHAR_NGRAMS`;
    ``auto`` decides once for the whole corpus (one vectorizer serves every text) by the auto
    segmenter's rule on all texts together: Japanese when more than half of their non-space
    characters are kana/kanji (:func:`~blackbox_mia.text.script.is_japanese`).

    Raises:
        BlackboxMIAError: no segmenter is named ``segmenter``.
    """
    get_segmenter(segmenter)  # an unknown name raises here
    if segmenter == "auto":
        segmenter = "japanese" if is_japanese("\n".join(texts)) else "whitespace"
    return SEGMENTER_NGRAMS[segmenter]


@dataclass(frozen=True)
class BlindBaseline:
    """Out-of-fold result of the blind classifier.

    Attributes:
        scores: shape (n,), out-of-fold P(member | text) in [0, 1]; higher = member.
        auc: ROC AUC of ``scores`` against the labels.
        folds: number of cross-validation folds.
        seed: seed of the fold shuffling.
        n_members, n_nonmembers: class sizes.
        analyzer: TF-IDF analyser (``"word"``, ``"char"`` or ``"char_wb"``).
        ngram_range: (smallest, largest) n-gram length, in words or characters.
    """

    scores: np.ndarray
    auc: float
    folds: int
    seed: int
    n_members: int
    n_nonmembers: int
    analyzer: str
    ngram_range: tuple[int, int]

    @property
    def method(self) -> str:
        """One line for reports: ``"TF-IDF word 1-2 grams + logistic regression, ..."``."""
        lo, hi = self.ngram_range
        return (f"TF-IDF {_ANALYZER_WORDS[self.analyzer]} {lo}-{hi} grams + logistic regression, "
                "stratified k-fold out-of-fold")

    def to_dict(self) -> dict:
        """JSON-ready summary (without the per-text scores)."""
        return {
            "method": self.method,
            "analyzer": self.analyzer,
            "ngram_range": list(self.ngram_range),
            "auc": self.auc,
            "folds": self.folds,
            "seed": self.seed,
            "n_members": self.n_members,
            "n_nonmembers": self.n_nonmembers,
        }


def blind_baseline(
    texts: Sequence[str],
    labels,
    folds: int = 5,
    seed: int = 0,
    segmenter: str = "auto",
    analyzer: str | None = None,
    ngram_range: tuple[int, int] | None = None,
) -> BlindBaseline:
    """Score each text with a text-only classifier trained on the other folds.

    Pipeline per fold (fitted on the training folds only): TfidfVectorizer(analyzer,
    ngram_range, sublinear_tf) → LogisticRegression(C=1, lbfgs). Folds come from
    StratifiedKFold(shuffle=True, random_state=seed); scores from sklearn's
    ``cross_val_predict(method="predict_proba")``. The analyser follows the texts'
    segmenter (:func:`blind_analyzer`): word 1–2 grams for text segmented at whitespace
    (English), character 1–3 grams for Japanese; ``auto`` (default) tells them apart by the
    share of kana/kanji.

    Args:
        texts: n strings.
        labels: shape (n,), 1 = member, 0 = non-member.
        folds: number of folds k ≥ 2; each class needs at least k texts.
        seed: fold-shuffling seed (the classifier itself is deterministic).
        segmenter: segmenter name that chooses analyser and n-gram range (``auto``,
            ``whitespace``, ``japanese``, ``chars``).
        analyzer: explicit TfidfVectorizer analyser (``"word"``, ``"char"``, ``"char_wb"``),
            overriding the segmenter's choice.
        ngram_range: explicit (smallest, largest) n-gram length; by default (1, 2) for the
            word analyser and (1, 3) for the character ones.

    Returns:
        :class:`BlindBaseline` with out-of-fold scores (higher = member), their AUC, and
        the analyser and n-gram range used.

    Raises:
        BlackboxMIAError: lengths differ, labels not 0/1, folds < 2, fewer than ``folds``
            texts in a class, no usable token in the texts, an unknown segmenter or
            analyser, a bad n-gram range.
    """
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold, cross_val_predict
    from sklearn.pipeline import make_pipeline

    texts = list(texts)
    y = _checked_labels(texts, labels, folds)
    analyzer, ngram_range = _features(texts, segmenter, analyzer, ngram_range)
    model = make_pipeline(
        TfidfVectorizer(analyzer=analyzer, ngram_range=ngram_range, sublinear_tf=True),
        LogisticRegression(C=1.0, max_iter=1000),
    )
    cv = StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed)
    try:
        proba = cross_val_predict(model, np.asarray(texts, dtype=object), y, cv=cv,
                                  method="predict_proba")
    except ValueError as err:
        if "vocabulary" in str(err):
            msg = f"blind baseline: no usable tokens in the texts ({err})"
            raise BlackboxMIAError(msg) from err
        raise
    scores = proba[:, 1]  # classes_ are sorted: column 1 is label 1 (member)
    return BlindBaseline(scores, auc(y, scores), folds, seed, int(y.sum()), int(len(y) - y.sum()), analyzer, ngram_range)


def _checked_labels(texts: list, labels, folds: int) -> np.ndarray:
    """``labels`` as a (n,) int64 array of 0/1, checked against the texts and the folds.

    Raises:
        BlackboxMIAError: as :func:`blind_baseline` (lengths, labels, texts, folds, class sizes).
    """
    y = np.asarray(labels)
    if y.ndim != 1 or len(y) != len(texts):
        raise BlackboxMIAError(f"{len(texts)} texts but labels of shape {y.shape}")
    if not np.isin(y, (0, 1)).all():
        raise BlackboxMIAError("labels must be 1 (member) or 0 (non-member)")
    if not all(isinstance(t, str) for t in texts):
        raise BlackboxMIAError("texts must be strings")
    y = y.astype(np.int64)
    if folds < 2:
        raise BlackboxMIAError(f"folds must be ≥ 2, got {folds}")
    n1, n0 = int(y.sum()), int(len(y) - y.sum())
    if min(n1, n0) < folds:
        raise BlackboxMIAError(
            f"the blind baseline needs at least {folds} texts per class for {folds}-fold "
            f"cross-validation; got {n1} members and {n0} non-members"
        )
    return y


def _features(texts: list[str], segmenter: str, analyzer: str | None,
              ngram_range: tuple[int, int] | None) -> tuple[str, tuple[int, int]]:
    """The TfidfVectorizer analyser and n-gram range: the given ones, or the segmenter's choice
    (:func:`blind_analyzer`) and the analyser's default range.

    Raises:
        BlackboxMIAError: an unknown analyser, a bad n-gram range.
    """
    if analyzer is None:
        analyzer, default_range = blind_analyzer(texts, segmenter)
    elif analyzer in _ANALYZER_WORDS:
        default_range = WORD_NGRAMS[1] if analyzer == "word" else CHAR_NGRAMS[1]
    else:
        raise BlackboxMIAError(f"unknown analyzer {analyzer!r}; known: {', '.join(_ANALYZER_WORDS)}")
    lo, hi = ngram_range or default_range
    if not 1 <= lo <= hi:
        raise BlackboxMIAError(f"ngram_range must be (smallest, largest) with 1 ≤ smallest ≤ largest, got {(lo, hi)}")
    return analyzer, (lo, hi)


def distribution_shift_verdict(
    blind_auc: float, best_model_auc: float, margin: float = 0.02
) -> dict:
    """Compare the blind baseline with the best model-based scorer (Das, Zhang & Tramèr 2024).

    Rule: ``shifted = blind_auc ≥ best_model_auc − margin``. Then the text alone separates
    the split as well as the model does, and the MIA result is not evidence of membership.
    Otherwise only the part of the model-based AUC above the blind AUC can be attributed to
    the model; the message says so when the blind AUC is itself above 0.5 + margin.

    Args:
        blind_auc: AUC of :func:`blind_baseline`, in [0, 1].
        best_model_auc: highest AUC among the model-based scorers on the same split.
        margin: AUC tolerance (≥ 0).

    Returns:
        ``{"distribution_shift": bool, "blind_auc", "best_model_auc", "margin", "message"}``,
        ``message`` a one-sentence verdict for reports.

    Raises:
        BlackboxMIAError: an AUC outside [0, 1] (or NaN), or a negative margin.
    """
    for name, value in (("blind_auc", blind_auc), ("best_model_auc", best_model_auc)):
        if not 0 <= value <= 1:  # also rejects NaN
            raise BlackboxMIAError(f"{name} must be an AUC in [0, 1], got {value}")
    if margin < 0:
        raise BlackboxMIAError(f"margin must be ≥ 0, got {margin}")
    shifted = blind_auc >= best_model_auc - margin
    if shifted:
        message = (
            f"DISTRIBUTION SHIFT: the model-free blind baseline (AUC {blind_auc:.3f}) matches "
            f"or beats the best model-based scorer (AUC {best_model_auc:.3f}); the split can "
            "be separated without the model, so this MIA result is not evidence of membership."
        )
    elif blind_auc > 0.5 + margin:
        message = (
            f"Partial distribution shift: the blind baseline alone reaches AUC "
            f"{blind_auc:.3f}; only the excess of the best model-based scorer (AUC "
            f"{best_model_auc:.3f}, +{best_model_auc - blind_auc:.3f}) can be attributed to "
            "membership."
        )
    else:
        message = (
            f"No distribution shift detected: the blind baseline (AUC {blind_auc:.3f}) is near "
            f"chance and below the best model-based scorer (AUC {best_model_auc:.3f})."
        )
    return {
        "distribution_shift": bool(shifted),
        "blind_auc": float(blind_auc),
        "best_model_auc": float(best_model_auc),
        "margin": float(margin),
        "message": message,
    }
