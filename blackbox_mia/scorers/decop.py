"""DE-COP (Duarte, Zhao, Oliveira & Li 2024, ICML, "DE-COP: Detecting Copyrighted Content in
Language Models Training Data", §3): a text-only scorer for passages (``bbmia documents``).

The model is shown a four-option multiple-choice question: which passage is verbatim from the
source? One option is the passage, the three others paraphrases of it. A model that was trained
on the passage picks it more often than chance (1/4). Options are shown in every order (the
paper's 24 permutations) so that a model's preference for a letter cancels out.

Paraphrases: the paper has Claude write them; we have no LLM, so they come from a JSONL file the
user gives (``decop:paraphrases=FILE``, ``bbmia documents --paraphrases FILE``), or else from
:func:`substitute_paraphrases`, a deterministic edit (numbers changed, else words rotated) that
is a *substitute*, not a paraphrase: it tests recall of the exact numbers and word order only.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from ..datasets.registry import read_jsonl
from ..option_names import named
from ..types import BlackboxMIAError, Generation
from .bounded import Bounded
from .base import register_scorer
from .text_only import GenerationRequest, GenerationScorer, TargetView, check_form, use_instruction

OPTIONS = 4  # the passage and three paraphrases (Duarte et al. 2024, §3)
PERMUTATIONS = (24, 4)  # every order (the paper's), or the 4 rotations (the passage once at each letter)
LETTERS = "ABCD"
NUMBER = re.compile(r"\d+")
ANSWER_LETTER = re.compile(r"\W*(?:option\s+)?([A-D])\b", re.I)
QUESTION = "Question: Which of the following passages is verbatim from the {source}?\nOptions:\n{options}\nAnswer:"
EXAM_INSTRUCTION = ("You are entering a multiple choice questions exam. You should directly answer each question by "
                    "choosing the correct option. Be concise and straight to the point in your answer. Output only "
                    "the letter corresponding to the correct answer.\n\n")
"""The paper's prompts (their Appendix, as we recall them; "the {book} book by {author}" becomes
``source``): the question for base models; the exam instruction before it for chat models."""


def substitute_paraphrases(passage: str) -> tuple[str, str, str]:
    """Three deterministic edits of ``passage`` standing in for the paper's LLM paraphrases (ours):
    edit k (k = 1, 2, 3) adds k to every number (``48`` -> ``49``, ``50``, ``51``); a passage
    without a digit has its words rotated instead (the last k words moved to the front, spaces
    normalised). Fluent for GSM8K-style text; not a paraphrase: the wording stays verbatim.

    Raises:
        BlackboxMIAError: the three edits and the passage are not four distinct texts.
    """
    if NUMBER.search(passage):
        edits = tuple(NUMBER.sub(lambda m, k=k: str(int(m.group()) + k), passage) for k in (1, 2, 3))
    else:
        words = passage.split()
        edits = tuple(" ".join(words[-k:] + words[:-k]) for k in (1, 2, 3))
    if len({passage, *edits}) != OPTIONS:
        raise BlackboxMIAError(f"decop: no three distinct substitute paraphrases of {passage[:60]!r} (too few words); "
                               "give paraphrases in a file (decop:paraphrases=FILE)")
    return edits  # type: ignore[return-value]


def read_paraphrases(path: str) -> dict[str, tuple[str, ...]]:
    """``{passage (whitespace-normalised): its three paraphrases}`` from a JSONL file of rows
    ``{"text": passage, "paraphrases": [three strings]}``.

    Raises:
        BlackboxMIAError: an unreadable file, a bad row, not three distinct paraphrases.
    """
    out = {}
    for number, row in read_jsonl(Path(path).expanduser()):
        text, paraphrases = row.get("text"), row.get("paraphrases")
        if not isinstance(text, str) or not isinstance(paraphrases, list) or len(set(paraphrases)) != OPTIONS - 1 \
                or not all(isinstance(p, str) for p in paraphrases):
            raise BlackboxMIAError(f"{path}:{number}: a row needs 'text' and 'paraphrases' (three distinct strings)")
        out[" ".join(text.split())] = tuple(paraphrases)
    return out


def orders(permutations: int) -> list[tuple[int, ...]]:
    """The option orders asked: all 24 (``permutations=24``) or the 4 rotations; option 0 is the
    passage, ``order[j]`` the option shown at letter j."""
    every = list(itertools.permutations(range(OPTIONS)))
    return every if permutations == len(every) else [tuple((j + r) % OPTIONS for j in range(OPTIONS)) for r in range(OPTIONS)]


@register_scorer
@dataclass(frozen=True)
class DECOP(GenerationScorer):
    """score = the share of option orders in which the model picks the verbatim passage, in
    [0, 1] (chance 1/4); higher = member (Duarte et al. 2024, §3: their per-passage accuracy over
    the permuted questions).

    Greedy (temperature 0), one request per order; the pick is the first letter A-D of the
    answer (none = a wrong pick). The paper reads the option letters' probabilities where it has
    them; we read the generated letter on every backend (the greedy letter is the most probable
    one when the model answers with a letter).

    Parameters:
        permutations: 24 (every order, the paper's) or 4 (one rotation per letter: 6x cheaper).
        paraphrases: a JSONL file of paraphrases (:func:`read_paraphrases`); empty: the
            deterministic substitute (:func:`substitute_paraphrases`).
        source: what the question names the passage's source ("the {book} book by {author}" in
            the paper).
        max_new_tokens: the answer's budget (tokens).
        form: ``continuation`` (the question alone, for base models), ``instruction``
            (:data:`EXAM_INSTRUCTION` first), or ``auto``.

    Requests per passage: ``permutations``; tokens: each about 4 passages long.

    Raises:
        BlackboxMIAError: a bad ``form`` or ``permutations``; a passage missing from the
            paraphrase file; a question longer than the target's window (shorter chunks help).
    """

    name = "decop"
    ranges = {"max_new_tokens": {"at_least": 1}}

    permutations: int = 24
    paraphrases: str = ""
    source: str = "document"
    max_new_tokens: int = 3
    form: str = "auto"

    def __post_init__(self) -> None:
        check_form(self.name, self.form)
        if self.permutations not in PERMUTATIONS:
            raise BlackboxMIAError(f"scorer {self.name!r}: permutations must be 24 or 4, got {self.permutations}")

    @cached_property
    def _given(self) -> dict[str, tuple[str, ...]]:
        return read_paraphrases(self.paraphrases) if self.paraphrases else {}

    def options(self, text: str) -> tuple[str, ...]:
        """The passage (whitespace-normalised) and its three paraphrases, the passage first."""
        passage = " ".join(text.split())
        if not self.paraphrases:
            return passage, *substitute_paraphrases(passage)
        if passage not in self._given:
            raise BlackboxMIAError(f"scorer {self.name!r}: the passage {passage[:60]!r} has no paraphrases in "
                                   f"{self.paraphrases} (rows are matched on their whitespace-normalised text)")
        return passage, *self._given[passage]

    def requests(self, text: str, target: TargetView) -> list[GenerationRequest]:
        options = self.options(text)
        prefix = EXAM_INSTRUCTION if use_instruction(self.form, target.chat) else ""
        prompts = [prefix + QUESTION.format(source=self.source, options="\n".join(
            f"{LETTERS[j]}. {options[o]}" for j, o in enumerate(order))) for order in orders(self.permutations)]
        if target.window is not None:
            longest = max(len(target.codec.encode(p)) for p in prompts)
            if longest + self.max_new_tokens > target.window:
                raise BlackboxMIAError(f"scorer {self.name!r}: a question of {longest} tokens and its answer exceed the "
                                       f"target's context of {target.window}; cut shorter passages ({named('chunk_tokens')})")
        return [GenerationRequest(p, self.max_new_tokens) for p in prompts]

    def score_generations(self, text: str, target: TargetView, generations: Sequence[Sequence[Generation]]) -> Bounded:
        picks = [ANSWER_LETTER.match(g[0].text) for g in generations]
        right = [m is not None and order[LETTERS.index(m.group(1).upper())] == 0
                 for m, order in zip(picks, orders(self.permutations))]
        return Bounded.exact(sum(right) / len(right))
