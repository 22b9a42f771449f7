"""How much of a reference text a generation reproduces: the memorization measures of
Ishihara & Takahashi 2024 ("Quantifying memorization and detecting training data of pre-trained
language models using Japanese newspaper").

All three compare characters (Unicode code points), never words or tokens, so they apply to any
language alike, including unsegmented ones such as Japanese, and to any tokenizer.
"""

from __future__ import annotations

from rapidfuzz.distance import Levenshtein


def eidetic(generation: str, reference: str) -> int:
    """Eidetic memorization: the number of forward-matching characters, i.e. the length of the
    common prefix of ``generation`` and ``reference`` (characters).

    The study counts how many characters of the reference the model reproduces, in order, from
    the first one on; the first mismatch ends the count. Examples: ``("abcx", "abcd") -> 3``;
    ``("", "abc") -> 0``; a generation longer than the reference counts at most
    ``len(reference)``.
    """
    n = 0
    for g, r in zip(generation, reference):
        if g != r:
            break
        n += 1
    return n


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
