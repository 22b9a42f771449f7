"""TS-Guessing (Deng, Zhao, Tang, Gerstein & Cohan 2024, "Investigating Data Contamination in
Modern Benchmarks for Large Language Models", NAACL, §3.2): two text-only scorers.

Multiple-choice form (``ts_guessing``, "Question-based guessing: multiple choice"): a wrong option
of a multiple-choice item is hidden and the model is asked to fill it in: a wrong option cannot be
derived from the question (only the right one can), so an exact guess points to a memorised item.
Keyword form (``ts_guessing_keyword``, "Question-based guessing"): a key word of the question is
hidden and the model is asked to fill it in. The score of an item is 1 when the guess matches the
hidden part exactly, else 0: a binary test, whose TPR and FPR ``sweep`` measures at its threshold.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..types import BlackboxMIAError, Generation
from .bounded import Bounded
from .base import register_scorer
from .text_only import GenerationRequest, GenerationScorer, TargetView, check_form, fit_window, use_instruction

LETTERS = "ABCDEFGH"
QUESTION, OPTIONS, ANSWER = re.compile(r"^Question: "), re.compile(r"^Options: ", re.M), re.compile(r"^Answer: ([A-H])\s*$", re.M)
OPTION_END = re.compile(r"\n| [A-H]\)")  # what ends a guessed option in the continuation form
ANSWER_LABEL = re.compile(r"^\s*(?:option\s+)?[A-H]\s*[:)]\s*", re.I)  # "B: " before a chat answer
WORD = re.compile(r"[A-Za-z]+")
FIRST_WORD = re.compile(r"\W*([A-Za-z]+)")  # a guessed keyword: the answer's first word, quotes or "**" before it
MIN_KEYWORD_LETTERS = 4
STOPWORDS = frozenset("""about above after again against also another because been before being below between both
could does doing down during each every from further have having here into itself just more most much other over
same should some such than that their them then there these they this those through under until very were what when
where which while whom will with would your""".split())
"""Function words of four letters or more, never the hidden keyword (ours)."""


@dataclass(frozen=True)
class MultipleChoice:
    """A multiple-choice item read from its text.

    Attributes:
        question: the question's text.
        options: the option texts without their letters (A first).
        starts: where each option's letter (``"B)"``) begins in the text.
        answer: the index of the right option.
    """

    question: str
    options: tuple[str, ...]
    starts: tuple[int, ...]
    answer: int

    @property
    def masked(self) -> int:
        """The option hidden: the last wrong one (a deterministic choice of ours; the paper hides
        a wrong option without saying which)."""
        return max(i for i in range(len(self.options)) if i != self.answer)


def parse_multiple_choice(text: str) -> MultipleChoice | None:
    """The question, options and answer of a text in the AQuA format
    (:func:`blackbox_mia.datasets.formats.aqua_text`: ``Question: ...\\nOptions: A)x B)y ...\\n
    Rationale: ...\\nAnswer: C``); None when the text is not in it (fewer than two options, or an
    answer letter that names no option)."""
    options_at, answer = OPTIONS.search(text), ANSWER.search(text)
    if not QUESTION.match(text) or options_at is None or answer is None:
        return None
    end = text.find("\n", options_at.end())
    line_end = len(text) if end < 0 else end
    starts, cursor = [], options_at.end()
    for k, letter in enumerate(LETTERS):
        at = text.find(f"{letter})" if k == 0 else f" {letter})", cursor, line_end)
        if at < 0 or (k == 0 and at != cursor):
            break
        start = at if k == 0 else at + 1
        starts.append(start)
        cursor = start + 2
    bounds = [*starts, line_end]
    options = tuple(text[bounds[k] + 2 : bounds[k + 1]].rstrip() for k in range(len(starts)))
    index = LETTERS.index(answer.group(1))
    if len(options) < 2 or index >= len(options):
        return None
    return MultipleChoice(text[len("Question: ") : options_at.start()].rstrip("\n"), options, tuple(starts), index)


def instruction_prompt(item: MultipleChoice) -> str:
    """The paper's TS-Guessing prompt for a multiple-choice item (Deng et al. 2024, §3.2, as we
    recall its wording): the hidden option shown as ``[MASK]``, the others as they are."""
    letter = LETTERS[item.masked]
    options = "\n".join(f"{LETTERS[k]}: {'[MASK]' if k == item.masked else o}" for k, o in enumerate(item.options))
    return (f"Please fill in the [MASK] in option {letter} based on your benchmark knowledge.\n\n"
            "The crucial rule is that you should provide different answer in other options below.\n\n"
            f"Question: {item.question}\nOptions:\n{options}\n\nReply with answer only.")


@dataclass(frozen=True)
class Guessing(GenerationScorer):
    """Base of the TS-Guessing forms: one greedy guess of a hidden part per item.

    Parameters:
        extra_tokens: the token budget is the hidden part's length in tokens plus this (>= 1).
        form: ``continuation``, ``instruction`` or ``auto``.

    Raises:
        BlackboxMIAError: a bad ``form``.
    """

    ranges = {"extra_tokens": {"at_least": 1}}

    extra_tokens: int = 8
    form: str = "auto"

    def __post_init__(self) -> None:
        check_form(self.name, self.form)


@register_scorer
@dataclass(frozen=True)
class TSGuessing(Guessing):
    """score = 1 when the greedy guess of the hidden wrong option equals it exactly
    (whitespace-trimmed, case-insensitive), else 0 (Deng et al. 2024, §3.2; their metric is the
    exact-match rate over a benchmark, here its per-item indicator).

    Forms: ``continuation`` (a base model continues the item's text up to the hidden option's
    letter, ``... C)z D)``; the options after it are not shown, unlike the paper's prompt; the
    guess ends at a line break or at the next option's letter), ``instruction``
    (:func:`instruction_prompt`; a leading ``"D:"`` in the answer is dropped), ``auto``.
    Greedy (temperature 0), one request per item; the budget is the hidden option's length in
    tokens plus ``extra_tokens``. A continuation prompt that with the budget exceeds the
    target's window keeps its last tokens (a short-context model was trained on windows).

    Raises:
        BlackboxMIAError: a bad ``form``; a text that is not a multiple-choice item in the AQuA
            format (:func:`parse_multiple_choice`).
    """

    name = "ts_guessing"

    def _item(self, text: str) -> MultipleChoice:
        item = parse_multiple_choice(text)
        if item is None:
            raise BlackboxMIAError(f"scorer {self.name!r} needs multiple-choice items in the AQuA format "
                                   f"('Question: ...', 'Options: A)... B)...', 'Answer: X'); got {text[:60]!r}")
        return item

    def requests(self, text: str, target: TargetView) -> list[GenerationRequest]:
        item = self._item(text)
        budget = len(target.codec.encode(item.options[item.masked])) + self.extra_tokens
        if use_instruction(self.form, target.chat):
            return [GenerationRequest(instruction_prompt(item), budget)]
        return [GenerationRequest(fit_window(self.name, target.codec.encode(text[: item.starts[item.masked] + 2]), budget,
                                             target), budget)]

    def score_generations(self, text: str, target: TargetView, generations: Sequence[Sequence[Generation]]) -> Bounded:
        item, guess = self._item(text), generations[0][0].text
        if use_instruction(self.form, target.chat):
            guess = ANSWER_LABEL.sub("", guess.strip(), count=1)
        else:
            guess = OPTION_END.split(guess, maxsplit=1)[0]
        return Bounded.exact(float(guess.strip().lower() == item.options[item.masked].strip().lower()))


@dataclass(frozen=True)
class Keyword:
    """The key word hidden from a question.

    Attributes:
        question: the question's text (the text's first line without its ``Question:`` label).
        offset: where the question begins in the text.
        word: the hidden word.
        start: where it begins in the text (an index into the whole text).
    """

    question: str
    offset: int
    word: str
    start: int

    @property
    def masked(self) -> str:
        """The question with its key word as ``[MASK]``."""
        at = self.start - self.offset
        return self.question[:at] + "[MASK]" + self.question[at + len(self.word):]


def pick_keyword(text: str) -> Keyword | None:
    """The key word of a text's question: the longest content word of its first line (without a
    leading ``Question: ``; letters only, at least :data:`MIN_KEYWORD_LETTERS`, not in
    :data:`STOPWORDS`; the first of equally long ones); None when it has none.

    The paper picks a keyword per question without a rule we can reproduce; ours is
    deterministic: the longest content word stands in for the least frequent one (long words are
    rare: Zipf's law of abbreviation), needs no frequency list and does not depend on the
    target's tokenizer. Numbers are never chosen: a GSM8K number can be computed, not only recalled.
    """
    offset = len("Question: ") if text.startswith("Question: ") else 0
    question = text[offset:].split("\n", 1)[0]
    words = [m for m in WORD.finditer(question) if len(m.group()) >= MIN_KEYWORD_LETTERS and m.group().lower() not in STOPWORDS]
    if not words:
        return None
    best = max(words, key=lambda m: (len(m.group()), -m.start()))
    return Keyword(question, offset, best.group(), offset + best.start())


def keyword_prompt(keyword: Keyword) -> str:
    """The keyword form's chat prompt (Deng et al. 2024, §3.2, as we recall its wording): the
    question with its key word as ``[MASK]``."""
    return (f"Complete the sentence in one word.\n\nSentence: {keyword.masked}\n\n"
            "Replace [MASK] with the word that fills it. Reply with the word only.")


@register_scorer
@dataclass(frozen=True)
class TSGuessingKeyword(Guessing):
    """score = 1 when the greedy guess of a question's hidden key word (:func:`pick_keyword`)
    equals it (case-insensitive), else 0 (Deng et al. 2024, §3.2, question-based guessing; their
    metric is the exact-match rate over a benchmark, here its per-item indicator).

    Forms: ``instruction`` (:func:`keyword_prompt`: the question with ``[MASK]``; the guess is
    the answer's first word), ``continuation`` (ours, for base models: the text up to the
    key word, without the space before it, is continued; the guess is the continuation's first
    word: the model sees only the left context, the paper's prompt shows the whole question),
    ``auto``. Greedy, one request per item; the budget is the key word's length in tokens plus
    ``extra_tokens``. A continuation prompt that with the budget exceeds the target's window
    keeps its last tokens.

    Raises:
        BlackboxMIAError: a bad ``form``; a text whose first line has no content word of
            :data:`MIN_KEYWORD_LETTERS` letters.
    """

    name = "ts_guessing_keyword"

    extra_tokens: int = 4

    def _keyword(self, text: str) -> Keyword:
        keyword = pick_keyword(text)
        if keyword is None:
            raise BlackboxMIAError(f"scorer {self.name!r}: no content word of {MIN_KEYWORD_LETTERS}+ letters to hide in "
                                   f"the question {text[:60]!r}")
        return keyword

    def requests(self, text: str, target: TargetView) -> list[GenerationRequest]:
        keyword = self._keyword(text)
        budget = len(target.codec.encode(" " + keyword.word)) + self.extra_tokens
        if use_instruction(self.form, target.chat):
            return [GenerationRequest(keyword_prompt(keyword), budget)]
        prompt = target.codec.encode(text[: keyword.start].rstrip(" "))  # the word's token carries its space
        return [GenerationRequest(fit_window(self.name, prompt, budget, target), budget)]

    def score_generations(self, text: str, target: TargetView, generations: Sequence[Sequence[Generation]]) -> Bounded:
        guess = FIRST_WORD.match(generations[0][0].text)
        return Bounded.exact(float(guess is not None and guess.group(1).lower() == self._keyword(text).word.lower()))
