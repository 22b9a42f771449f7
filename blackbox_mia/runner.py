"""Score texts: log-probs once per distinct text, shared by every scorer; resumable JSONL output.

For a chunk of texts the runner gathers every text any scorer needs (the texts themselves, their
lowercased forms, PAC neighbours, reference-model passes), computes each distinct (backend,
text) pair's log-probs exactly once in one batched backend call, then lets every scorer read
them. Rows are appended to the output as chunks finish, so an interrupted run resumes where it
stopped.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tqdm.auto import tqdm

from . import __version__
from .backends.base import Backend
from .datasets import Item, read_jsonl
from .scorers import TARGET, Scorer
from .types import BlackboxMIAError, TokenLogprobs


@dataclass
class ScoredText:
    """One output row: the item, its scores by scorer label, and N scored tokens."""

    id: str
    label: int | None
    scores: dict[str, float]
    n_tokens: int

    def to_json(self) -> dict:
        row = {"id": self.id, "n_tokens": self.n_tokens, "scores": self.scores}
        if self.label is not None:
            row["label"] = self.label
        return row


def check_compatible(scorers: Sequence[Scorer], backends: dict[str, Backend]) -> None:
    """Fail early when a scorer needs what no backend gives.

    Raises:
        BlackboxMIAError: a reference scorer without a reference backend, or Min-K%++ on a
            backend without vocabulary statistics.
    """
    for scorer in scorers:
        roles = {need.role for need in scorer.needs("a b c")} | {TARGET}
        missing = roles - set(backends)
        if missing:
            raise BlackboxMIAError(f"scorer {scorer.label!r} needs a {'/'.join(sorted(missing))} model (use --ref)")
        if scorer.needs_vocab_stats and not backends[TARGET].provides_vocab_stats:
            raise BlackboxMIAError(
                f"scorer {scorer.label!r} needs the full next-token distribution, which this backend "
                "does not expose (black-box APIs return top-n only): run it with --local"
            )


def score_texts(
    texts: Sequence[str], scorers: Sequence[Scorer], backends: dict[str, Backend], progress: bool = False
) -> list[tuple[dict[str, float], TokenLogprobs]]:
    """Scores of every text under every scorer, plus the text's own log-probs.

    Args:
        texts: texts to score.
        scorers: scorers (their labels key the result dicts).
        backends: ``{"target": backend}`` plus ``{"reference": backend}`` for ``ref``.

    Returns:
        Per text: ``({label: score}, TokenLogprobs of the text under the target)``.
    """
    check_compatible(scorers, backends)
    needs = {s.label: [s.needs(t) for t in texts] for s in scorers}
    wanted: dict[str, dict[str, None]] = {role: {} for role in backends}
    wanted[TARGET].update(dict.fromkeys(texts))
    for per_text in needs.values():
        for need_list in per_text:
            for need in need_list:
                wanted[need.role][need.text] = None
    computed: dict[str, dict[str, TokenLogprobs]] = {}
    for role, unique in wanted.items():
        unique_texts = list(unique)
        if unique_texts:
            computed[role] = dict(zip(unique_texts, backends[role].logprobs(unique_texts, progress=progress)))
    out = []
    for j, text in enumerate(texts):
        lp = computed[TARGET][text]
        scores = {
            s.label: s.score(text, lp, [computed[n.role][n.text] for n in needs[s.label][j]]) for s in scorers
        }
        out.append((scores, lp))
    return out


def run_config(scorers: Sequence[Scorer], backends: dict[str, Backend], dataset: dict) -> dict:
    """The exact configuration saved next to a result: scorers, backends, dataset, version."""
    return {
        "package": "blackbox_mia",
        "version": __version__,
        "scorers": {s.label: {"name": s.name, **s.params()} for s in scorers},
        "backends": {role: b.describe() for role, b in backends.items()},
        "dataset": dataset,
    }


def score_items(
    items: Sequence[Item],
    scorers: Sequence[Scorer],
    backends: dict[str, Backend],
    out_path: Path | None = None,
    config: dict | None = None,
    chunk_size: int = 64,
    resume: bool = True,
    progress: bool = True,
) -> list[ScoredText]:
    """Score ``items`` chunk by chunk, appending one JSONL row per item to ``out_path``.

    With ``resume``, rows already in ``out_path`` (same configuration, saved in
    ``<out>.config.json``) are kept and their items skipped; otherwise the file is rewritten.

    Raises:
        BlackboxMIAError: the existing output was made with another configuration, or a row in
            it is malformed.
    """
    check_compatible(scorers, backends)
    done: dict[str, ScoredText] = {}
    if out_path is not None:
        out_path = Path(out_path)
        out_path.parent.mkdir(parents=True, exist_ok=True)
        config_path = out_path.with_name(out_path.name + ".config.json")
        if resume and out_path.exists():
            if config_path.exists() and json.loads(config_path.read_text()) != config:
                raise BlackboxMIAError(
                    f"{out_path} was written with another configuration ({config_path}); "
                    "pass --overwrite or choose another --out"
                )
            done = {row.id: row for row in read_rows(out_path)}
        else:
            out_path.write_text("")
        config_path.write_text(json.dumps(config, indent=2, sort_keys=True))
    todo = [it for it in items if it.id not in done]
    bar = tqdm(total=len(items), initial=len(items) - len(todo), unit="text", disable=not progress, desc="score")
    for start in range(0, len(todo), chunk_size):
        chunk = todo[start : start + chunk_size]
        results = score_texts([it.text for it in chunk], scorers, backends)
        rows = [ScoredText(it.id, it.label, scores, lp.n_tokens) for it, (scores, lp) in zip(chunk, results)]
        if out_path is not None:
            with open(out_path, "a", encoding="utf-8") as f:
                f.writelines(json.dumps(r.to_json()) + "\n" for r in rows)
                f.flush()
                os.fsync(f.fileno())
        done.update((r.id, r) for r in rows)
        bar.update(len(chunk))
    bar.close()
    return [done[it.id] for it in items]


def read_rows(path: Path) -> list[ScoredText]:
    """Rows of a ``bbmia score`` JSONL file.

    Raises:
        BlackboxMIAError: a malformed line (its number is named).
    """
    rows = []
    for number, obj in read_jsonl(path):
        try:
            rows.append(ScoredText(obj["id"], obj.get("label"), obj["scores"], obj["n_tokens"]))
        except (KeyError, TypeError) as exc:
            raise BlackboxMIAError(f"{path}:{number}: malformed result row ({exc})") from exc
    return rows
