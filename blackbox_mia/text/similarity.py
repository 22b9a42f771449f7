"""How much of a reference text a generation reproduces: the memorization measures of
Ishihara & Takahashi 2024 ("Quantifying memorization and detecting training data of pre-trained
language models using Japanese newspaper").

The three memorization measures compare characters (Unicode code points), never words or tokens, so they apply to any
language alike, including unsegmented ones such as Japanese, and to any tokenizer.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from rapidfuzz.distance import Levenshtein

from .segment import Segmenter, get_segmenter


def common_prefix(generation: Sequence[Hashable], reference: Sequence[Hashable]) -> int:
    """The length of the common prefix of two sequences (characters of strings, or token ids):
    how many leading items of ``generation`` equal ``reference``'s. Examples: ``("abcx", "abcd")
    -> 3``; ``([5, 7, 9], [5, 8]) -> 1``; ``("", "abc") -> 0``."""
    n = 0
    for g, r in zip(generation, reference):
        if g != r:
            break
        n += 1
    return n


def eidetic(generation: str, reference: str) -> int:
    """Eidetic memorization: the number of forward-matching characters, i.e. the length of the
    common prefix of ``generation`` and ``reference`` (characters, :func:`common_prefix`).

    The study counts how many characters of the reference the model reproduces, in order, from
    the first one on; the first mismatch ends the count. Examples: ``("abcx", "abcd") -> 3``;
    ``("", "abc") -> 0``; a generation longer than the reference counts at most
    ``len(reference)``.
    """
    return common_prefix(generation, reference)


def approximate(generation: str, reference: str) -> float:
    """Approximate memorization: ``1 - Levenshtein(generation, reference) / max(len(generation),
    len(reference))``, a similarity in [0, 1] (character edit distance: insertions, deletions and
    substitutions cost 1 each; :mod:`rapidfuzz`).

    1.0 means identical strings; 0.0 means no character can be kept (e.g. one string empty and
    the other not). Two empty strings are identical: 1.0 (the ratio would be 0/0).
    """
    longest = max(len(generation), len(reference))
    if longest == 0:
        return 1.0
    return 1.0 - Levenshtein.distance(generation, reference) / longest


def exact(generation: str, reference: str) -> bool:
    """Exact memorization: the generation starts with the whole reference (what follows it does
    not matter); ``eidetic(generation, reference) == len(reference)``."""
    return generation.startswith(reference)


class _SegmenterTokenizer:
    """The ``tokenize(text) -> list[str]`` object :mod:`rouge_score` takes: the words of a
    :class:`~blackbox_mia.text.segment.Segmenter`, case-folded (rouge-score's own tokenizer
    drops every non-ASCII character, so a Japanese text would have no token at all)."""

    def __init__(self, segmenter: Segmenter) -> None:
        self._segmenter = segmenter

    def tokenize(self, text: str) -> list[str]:
        segments = self._segmenter.segment(text)
        return [segments.pieces[i].casefold() for i in segments.words]


def rouge_l_recall(generation: str, reference: str, segmenter: str | Segmenter = "auto") -> float:
    """ROUGE-L recall: the length of the longest common subsequence of words of ``generation``
    and ``reference`` divided by the reference's number of words, in [0, 1] (:mod:`rouge_score`,
    the measure Shi et al. 2024 §7 use for sampled answers).

    Words come from ``segmenter``, a :class:`~blackbox_mia.text.segment.Segmenter` or its name
    (pass an instance to compare many texts: MeCab loads once per instance; default ``auto``: MeCab words for a
    Japanese text, whitespace-separated words otherwise; punctuation attached to a word stays
    part of it), case-folded. A reference with no word gives 0.0. Examples:
    ``("the cat sat", "the cat sat down") -> 0.75``; ``("猫が座った", "猫が座る") -> 2/3`` (words
    猫|が|座っ|た vs 猫|が|座る).

    Raises:
        BlackboxMIAError: an unknown segmenter, or ``japanese`` without its extra.
    """
    from rouge_score import rouge_scorer

    if isinstance(segmenter, str):
        segmenter = get_segmenter(segmenter)
    scorer = rouge_scorer.RougeScorer(["rougeL"], tokenizer=_SegmenterTokenizer(segmenter))
    return float(scorer.score(reference, generation)["rougeL"].recall)
