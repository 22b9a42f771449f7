"""The unlearning audit's configuration (:class:`UnlearningConfig`, saved in its report) and its
checked input (:class:`UnlearningPlan`: the texts, or Q&A pairs with where each question ends)."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

from ...canary.dataset import load_items
from ...config import check_number
from ...datasets import Item, file_sha256, limit_items, read_jsonl
from ...datasets.formats import parse_label
from ...option_names import named
from ...text.segment import get_segmenter
from ...types import BlackboxMIAError

RATIO_WINDOW = (1 / 1.15, 1.15)  # Shi et al. 2024 §7.1
QA_SEPARATOR = " "  # between a question and its answer in the scored text


@dataclass(frozen=True)
class UnlearningConfig:
    """Configuration of one unlearning audit (saved in the report).

    Attributes:
        dataset: dataset spec of the audited texts (labels are not needed).
        window: (low, high): a text is flagged when low < ratio < high (the default rule).
        k: Min-K% percentage of tokens kept.
        prompt_words: W, the words of the story-completion prompt (segmenter words).
        samples: sampled continuations per text.
        temperature: sampling temperature (> 0).
        max_new_tokens: the most tokens generated (the reference is cut to as many).
        segmenter: segmenter name for W and ROUGE-L (``auto``: Japanese or whitespace words).
        unflagged: also complete the unflagged texts (the comparison).
        truth_target_fpr: ground truth: the non-members' share allowed above the label's threshold,
            the ``1 - truth_target_fpr`` quantile of their loss scores (a target FPR).
        seed: sampling seed (sample j of a text uses seed + j).
        limit: only the first ``limit`` texts.
        resume: keep the rows already in the output files (same configuration).
        qa: Q&A mode: ``dataset`` is a JSONL of ``question`` and ``answer`` (:func:`load_qa`);
            the ratio is taken on ``question + " " + answer``, the prompt is the question and
            the reference its answer (``prompt_words`` unused).
        flag_fraction: F in (0, 1), instead of the window: flag the share F of the texts (``F * n``
            rounded half up, at least one) with the smallest ``|ln ratio|`` (:func:`least_changed`);
            None: the window.
    """

    dataset: str
    window: tuple[float, float] = RATIO_WINDOW
    k: float = 20.0
    prompt_words: int = 200
    samples: int = 20
    temperature: float = 1.0
    max_new_tokens: int = 128
    segmenter: str = "auto"
    unflagged: bool = True
    truth_target_fpr: float = 0.05
    seed: int = 0
    limit: int | None = None
    resume: bool = True
    qa: bool = False
    flag_fraction: float | None = None

    def validate(self) -> None:
        """Raise :class:`BlackboxMIAError` for impossible values (the message names the option)."""
        low, high = self.window
        if not (math.isfinite(low) and math.isfinite(high) and 0 < low < high):
            raise BlackboxMIAError(f"{named('window')} must be two finite numbers 0 < low < high, got {low}, {high}")
        if self.flag_fraction is not None:
            if not (math.isfinite(self.flag_fraction) and 0 < self.flag_fraction < 1):
                raise BlackboxMIAError(f"{named('flag_fraction')} must lie in (0, 1), got {self.flag_fraction}")
            if self.window != RATIO_WINDOW:
                raise BlackboxMIAError(f"{named('flag_fraction')} and {named('window')} are two flag rules: give one")
        if not 0 < self.k <= 100:
            raise BlackboxMIAError(f"{named('k')} must lie in (0, 100] percent, got {self.k}")
        check_number(named("prompt_words"), self.prompt_words, at_least=1, integer=True)
        check_number(named("samples"), self.samples, at_least=1, integer=True)
        check_number(named("max_new_tokens"), self.max_new_tokens, at_least=1, integer=True)
        check_number(named("seed"), self.seed, at_least=0, integer=True)
        if not (math.isfinite(self.temperature) and self.temperature > 0):
            raise BlackboxMIAError(f"{named('temperature')} must be > 0 (sampling), got {self.temperature}")
        if not 0 < self.truth_target_fpr < 1:
            raise BlackboxMIAError(f"{named('truth_target_fpr')} must lie in (0, 1), got {self.truth_target_fpr}")
        if self.limit is not None:
            check_number(named("limit"), self.limit, at_least=1, integer=True)
        get_segmenter(self.segmenter)


def load_qa(path: str | os.PathLike, limit: int | None = None) -> tuple[list[Item], dict[str, int], dict]:
    """Questions with reference answers (the paper's Q&A mode): a JSONL file, one object a line
    with non-empty strings ``question`` and ``answer``, an optional ``id`` (default ``qa-<line>``)
    and an optional ``label``.

    Returns:
        ``(items, prompt_ends, meta)``: one item per pair, its text ``question + QA_SEPARATOR +
        answer``; ``prompt_ends[id]`` = the question's length in characters (where the prompt
        ends); the dataset metadata (``name``, ``source``, ``sha256``).

    Raises:
        BlackboxMIAError: a missing file, a malformed line, a missing or empty question or
            answer, a repeated id, no pair; the message names the file and line.
    """
    path = Path(path)
    items: list[Item] = []
    ends: dict[str, int] = {}
    for number, obj in read_jsonl(path):
        question, answer = obj.get("question"), obj.get("answer")
        if not (isinstance(question, str) and question.strip() and isinstance(answer, str) and answer.strip()):
            raise BlackboxMIAError(f"{path}:{number}: Q&A mode needs non-empty strings 'question' and 'answer'")
        item_id = str(obj.get("id", f"qa-{number}"))
        if item_id in ends:
            raise BlackboxMIAError(f"{path}:{number}: duplicate id {item_id!r}")
        label = parse_label(obj.get("label"), f"{path}:{number}")
        items.append(Item(id=item_id, text=question + QA_SEPARATOR + answer, label=label))
        ends[item_id] = len(question)
    if not items:
        raise BlackboxMIAError(f"{path}: no question (empty file)")
    items = limit_items(items, limit)
    meta = {"name": f"qa:{path.name}", "source": str(path), "sha256": file_sha256(path)}
    return items, {it.id: ends[it.id] for it in items}, meta


@dataclass(frozen=True)
class UnlearningPlan:
    """Checked input of :func:`run_unlearning` (from :func:`prepare_unlearning`).

    Attributes:
        prompt_ends: Q&A mode: per id, the character where the question (the prompt) ends;
            None: story completion (the first ``prompt_words`` words are the prompt).
    """

    config: UnlearningConfig
    items: list[Item]
    meta: dict
    prompt_ends: dict[str, int] | None = None


def prepare_unlearning(config: UnlearningConfig, cache_dir: str | os.PathLike | None = None) -> UnlearningPlan:
    """Check the configuration and load the texts (no model needed).

    Raises:
        BlackboxMIAError: a bad configuration, an unreadable dataset, duplicate ids.
    """
    config.validate()
    if config.qa:
        items, ends, meta = load_qa(config.dataset, config.limit)
        return UnlearningPlan(config, items, meta, ends)
    items, meta = load_items(config.dataset, config.limit, cache_dir)
    if len({it.id for it in items}) != len(items):
        raise BlackboxMIAError(f"{meta['name']}: item ids repeat; every item needs its own id")
    return UnlearningPlan(config, items, meta)
