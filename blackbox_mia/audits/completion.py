"""Story completion (Shi et al. 2024 §7): prompt a model with a text's first W words, sample
continuations, and measure how much of the true continuation comes out.

Each text is cut after its W-th word (words of a :class:`~blackbox_mia.text.segment.Segmenter`);
the reference is the rest of the text, cut to at most ``max_new_tokens`` tokens of the model's
tokenizer, and that many tokens are generated. Each sample is compared with the reference by
ROUGE-L recall (words) and approximate memorization (characters, the sample cut to the
reference's length), :mod:`blackbox_mia.text.similarity`. Rows (one per text and sample) are
appended to a JSONL file as they come and resumed from it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tqdm.auto import tqdm

from ..backends.base import GENERATE, Backend
from ..datasets import Item
from ..io import check_saved_config, json_line, write_json_atomic
from ..results_file import OVERWRITE_HINT, config_path_for, repair_tail
from ..text.segment import Segmenter
from ..text.similarity import approximate, rouge_l_recall
from ..types import BlackboxMIAError

BATCH_PROMPTS = 16  # prompts per generate call (each with all its samples)


@dataclass(frozen=True)
class Completion:
    """One text cut for story completion.

    Attributes:
        item: the text's item.
        prompt: its first W words (with what joins them).
        reference: the true continuation, at most ``max_new_tokens`` tokens of the model.
        max_new_tokens: tokens to generate (the reference's, in the model's tokenizer).
    """

    item: Item
    prompt: str
    reference: str
    max_new_tokens: int


def cut_completion(item: Item, words: int, max_new_tokens: int, segmenter: Segmenter, model: Backend) -> Completion | None:
    """``item`` cut after its ``words``-th word; None when nothing follows that word, or when the
    prompt, its BOS and one new token exceed the model's context.

    The reference is the rest of the text, cut to ``max_new_tokens`` tokens of ``model.codec``
    and fewer when the context leaves less room after the prompt.
    """
    segments = segmenter.segment(item.text)
    if len(segments.words) <= words:
        return None
    end = segments.words[words - 1] + 1
    return cut_at(item, len("".join(segments.pieces[:end])), max_new_tokens, model)


def cut_at(item: Item, end: int, max_new_tokens: int, model: Backend) -> Completion | None:
    """``item`` cut at character ``end``: ``text[:end]`` is the prompt, the rest (cut to at most
    ``max_new_tokens`` tokens of ``model.codec``, fewer when the context leaves less room after
    the prompt and its BOS) the reference; None when nothing but whitespace follows or no token fits.
    Q&A mode cuts at the end of the question (the reference is the answer)."""
    prompt, rest = item.text[:end], item.text[end:]
    budget = max_new_tokens
    if model.context is not None:
        budget = min(budget, model.context - (model.codec.bos_id is not None) - len(model.codec.encode(prompt)))
    ids = model.codec.encode(rest)
    if budget < 1 or not ids or not rest.strip():
        return None
    ids = ids[:budget]
    return Completion(item, prompt, model.codec.decode(ids), len(ids))


def measure_sample(completion: Completion, sample: int, generation: str, segmenter: Segmenter) -> dict:
    """One row: the sample's ROUGE-L recall of the reference (words) and its approximate
    memorization (characters, the generation cut to the reference's length)."""
    return {
        "id": completion.item.id,
        "sample": sample,
        "generation": generation,
        "rouge_l_recall": rouge_l_recall(generation, completion.reference, segmenter),
        "approximate": approximate(generation[: len(completion.reference)], completion.reference),
    }


def _open(path: Path, config: dict, resume: bool) -> dict[tuple[str, int], dict]:
    """Rows already in ``path`` (resume, same configuration saved beside it), else a new empty file."""
    config_path = config_path_for(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    done: dict[tuple[str, int], dict] = {}
    if resume and path.exists() and path.stat().st_size > 0:
        check_saved_config(config_path, config, "completion configuration", path, OVERWRITE_HINT)
        repair_tail(path)
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                done[(str(row["id"]), int(row["sample"]))] = row
            except (ValueError, TypeError, KeyError):
                raise BlackboxMIAError(f"{path}:{number}: malformed completion row; {OVERWRITE_HINT}") from None
    else:
        path.write_text("", encoding="utf-8")
    write_json_atomic(config_path, config)
    return done


def complete(
    completions: Sequence[Completion],
    model: Backend,
    path: Path,
    config: dict,
    samples: int,
    temperature: float,
    seed: int,
    segmenter: Segmenter,
    resume: bool = True,
    progress: bool = True,
) -> list[dict]:
    """``samples`` continuations of every completion's prompt from ``model`` (sample ``j`` seeded
    ``seed + j``), measured against its reference; rows appended to ``path`` as they come.

    Args:
        config: what the rows depend on, saved beside them (a resumed file must match it).

    Returns:
        Every row (``id``, ``sample``, ``generation``, ``rouge_l_recall``, ``approximate``),
        in completion then sample order.

    Raises:
        BlackboxMIAError: ``model`` lacks ``generate``; a resumed file of another
            configuration or with a malformed row; ``path`` cannot be written.
    """
    model.require(GENERATE)
    done = _open(path, config, resume)
    todo = [c for c in completions if any((c.item.id, j) not in done for j in range(samples))]
    bar = tqdm(total=len(completions), initial=len(completions) - len(todo), unit="text", disable=not progress,
               desc="complete")
    try:
        with open(path, "a", encoding="utf-8") as f:
            for start in range(0, len(todo), BATCH_PROMPTS):
                chunk = todo[start : start + BATCH_PROMPTS]
                for budget in sorted({c.max_new_tokens for c in chunk}):
                    group = [c for c in chunk if c.max_new_tokens == budget]
                    generations = model.generate([c.prompt for c in group], max_new_tokens=budget,
                                                 temperature=temperature, n=samples, seed=seed, logprobs=False)
                    for i, completion in enumerate(group):
                        for j in range(samples):
                            row = measure_sample(completion, j, generations[i * samples + j].text, segmenter)
                            f.write(json_line(row, f"row {completion.item.id!r} sample {j}"))
                            done[(completion.item.id, j)] = row
                        f.flush()
                        os.fsync(f.fileno())
                        bar.update(1)
    except OSError as exc:
        raise BlackboxMIAError(f"cannot write {path}: {exc.strerror or exc}") from exc
    finally:
        bar.close()
    return [done[(c.item.id, j)] for c in completions for j in range(samples)]
