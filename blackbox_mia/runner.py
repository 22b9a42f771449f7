"""Score texts: log-probs once per distinct text, shared by every scorer; resumable JSONL output.

The runner gathers every text any scorer needs (the texts themselves, their lowercased forms, PAC
neighbours, reference-model passes) and computes each distinct (backend, text) pair's log-probs
exactly once, in one batched backend call per role over the whole run (one bounded stream: a
black-box backend keeps its ``concurrency`` requests in flight from the first text to the last):
the other roles (the reference model) first, then the target. The target backend reports each
text as it finishes (``on_done``), and an item is scored, and its JSONL row appended, flushed and
fsynced, the moment every text it needs is done: a killed run loses at most the items in flight,
and a rerun resumes where it stopped. A last line cut mid-write by a kill is dropped on resume
and its item redone. When the run completes the file is rewritten (atomically) in dataset order.

Progress goes per text, with the requests sent, their rate and the spend so far (refreshed every
:data:`~blackbox_mia.progress.PROGRESS_REFRESH_S` seconds, so a long text shows its requests moving).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

from tqdm.auto import tqdm

from . import __version__
from .backends.base import FULL_DISTRIBUTION, GENERATE, LOGPROBS, Backend, refuse_one_str
from .datasets import Item
from .text_only_runner import score_generated
from .io import json_line, write_text_atomic
from .option_names import spelled
from .results import ScoredText
from .results_file import RowSink, prepare_output
from .scorers import TARGET, Scorer, parse_scorer, parse_scorers
from .scorers.bounded import DEFAULT_TOLERANCE_NATS, Bounded, check_tolerance
from .text.windows import windows_notes
from .types import BlackboxMIAError, TokenLogprobs

DEFAULT_CHUNK_SIZE = 4096  # items per backend stream: bounds the log-probs held; most datasets are one stream
OnScored = Callable[[int, dict[str, Bounded], TokenLogprobs | None], None]
"""``on_scored(index, scores, logprobs)``: text ``index`` is fully scored (``logprobs`` None
when every scorer is text-only: no log-prob was computed)."""


def check_compatible(scorers: Sequence[Scorer], backends: dict[str, Backend]) -> None:
    """Fail early when a scorer needs what no backend gives.

    Raises:
        BlackboxMIAError: a log-prob scorer on a backend without the ``logprobs`` feature, a
            text-only scorer on a target without ``generate``, a reference scorer without a
            reference backend, or Min-K%++ on a backend without the ``full_distribution`` feature.
    """
    if any(s.needs_logprobs for s in scorers):
        for backend in backends.values():
            backend.require(LOGPROBS)
    if not all(s.needs_logprobs for s in scorers):
        backends[TARGET].require(GENERATE)
    for scorer in scorers:
        roles = {need.role for need in scorer.needs("a b c")} | {TARGET}
        missing = roles - set(backends)
        if missing:
            role = "/".join(sorted(missing))
            raise BlackboxMIAError(f"scorer {scorer.label!r} needs a {role} model: pass one as "
                                   f"{spelled(f'backends[{role!r}]', '--ref')}")
        if scorer.needs_vocab_stats and FULL_DISTRIBUTION not in backends[TARGET].features:
            raise BlackboxMIAError(
                f"scorer {scorer.label!r} needs the full next-token distribution, which this backend "
                f"does not expose (black-box APIs return top-n only): use a local model ({spelled('local:PATH', '--local')})"
            )


def logprobs_reporting(
    backend: Backend, texts: Sequence[str], on_done, progress: bool = False, vocab_stats: bool | None = None
) -> list[TokenLogprobs]:
    """``backend.logprobs(texts, vocab_stats=...)`` with ``on_done(index, logprobs)`` called
    exactly once per text.

    Texts the backend reports through its ``on_done`` are passed on as they finish (on the
    backend's thread); any it did not report are passed on in order when ``logprobs`` returns.

    Raises:
        BlackboxMIAError: the backend reported an index outside ``texts``, or returned a list
            of the wrong length; anything ``on_done`` or the backend raises propagates.
    """
    reported = [False] * len(texts)

    def report(index: int, lp: TokenLogprobs) -> None:
        if not 0 <= index < len(texts):
            raise BlackboxMIAError(f"backend reported text #{index} of {len(texts)}")
        if not reported[index]:
            reported[index] = True
            on_done(index, lp)

    result = backend.logprobs(texts, progress=progress, on_done=report, vocab_stats=vocab_stats)
    if len(result) != len(texts):
        raise BlackboxMIAError(f"backend returned {len(result)} results for {len(texts)} texts")
    for index, lp in enumerate(result):
        report(index, lp)
    return result


def score_texts(
    texts: Sequence[str],
    scorers: Sequence[Scorer | str] | str,
    backends: Mapping[str, Backend | str],
    progress: bool = False,
    on_scored: OnScored | None = None,
) -> list[tuple[dict[str, Bounded], TokenLogprobs]]:
    """Scores of every text under every scorer, plus the text's own log-probs.

    The log-probs of the non-target roles (the reference model) are computed first, then those
    of the target, each role in one backend call over all the texts (μ/σ over the vocabulary only
    when a scorer needs them, :attr:`Scorer.needs_vocab_stats`); text ``j`` is scored as soon
    as every target text it needs (itself, its lowercased form, PAC neighbours...) is done, and
    ``on_scored(j, scores, logprobs)`` is called right then, so a caller can save each result
    before the next text finishes.

    Args:
        texts: texts to score (a list: one ``str`` is refused, not read character by character).
        scorers: scorers (their labels key the result dicts), their specs as one string
            (``"loss,min_k:k=10"``, :func:`~blackbox_mia.scorers.parse_scorers`), or a list
            of scorers and specs.
        backends: ``{"target": backend}`` plus ``{"reference": backend}`` for ``ref``; a
            backend may be given as its spec (``"local:PATH"``, ``"api:MODEL@URL"``), which is
            built with default options (:func:`~blackbox_mia.backends.registry.build_backend`)
            and closed before this returns.
        progress: let the backends show progress bars.
        on_scored: called once per text, in completion order, on the target backend's thread
            (see :meth:`~blackbox_mia.backends.base.Backend.alogprobs`).

    Text-only scorers (:attr:`Scorer.needs_logprobs` False) are scored first, from the
    target's generations (:func:`~blackbox_mia.text_only_runner.score_generated`); when no scorer
    reads log-probs, none are computed and each text is reported with ``logprobs`` None.

    Returns:
        Per text, in input order: ``({label: score}, TokenLogprobs of the text under the
        target, or None without log-prob scorers)``. Scores are :class:`~blackbox_mia.scorers.bounded.Bounded`: the value (a
        degenerate text may give NaN or ±inf) and the interval the tokens' bounds allow;
        :meth:`ScoredText.from_scores` decides which are reported as numbers.

    Raises:
        ArgumentTypeError: one ``str`` as ``texts`` (a ``TypeError``; ``[text]`` is meant).
        BlackboxMIAError: a bad scorer or backend spec, a scorer the
            backends cannot serve, a text the backend or a scorer refuses (empty, no scorable
            token); texts scored before the error were reported through ``on_scored``.
    """
    refuse_one_str(texts)
    scorers = as_scorers(scorers)
    with built_backends(backends) as backends:
        return _score_texts(texts, scorers, backends, progress, on_scored)


async def ascore_texts(
    texts: Sequence[str],
    scorers: Sequence[Scorer | str] | str,
    backends: Mapping[str, Backend | str],
    progress: bool = False,
    on_scored: OnScored | None = None,
) -> list[tuple[dict[str, Bounded], TokenLogprobs]]:
    """The async form of :func:`score_texts` (same arguments, result and errors): awaitable in a
    running event loop (a notebook, a server), which it leaves free while the backends work
    (the work runs in a worker thread; the backends compute on their own threads as always)."""
    refuse_one_str(texts)  # refused here, before a thread is started
    return await asyncio.to_thread(score_texts, texts, scorers, backends, progress, on_scored)


def as_scorers(scorers: Sequence[Scorer | str] | str) -> list[Scorer]:
    """Scorers from scorers, one string of specs, or a list mixing both.

    Raises:
        BlackboxMIAError: a bad spec, no scorer, or two scorers with the same label.
    """
    if isinstance(scorers, str):
        return parse_scorers(scorers)
    built = [parse_scorer(s) if isinstance(s, str) else s for s in scorers]
    labels = [s.label for s in built]
    if not built or len(set(labels)) != len(labels):
        raise BlackboxMIAError(f"scorers must be distinct and at least one, got {labels}")
    return built


@contextlib.contextmanager
def built_backends(backends: Mapping[str, Backend | str]) -> Iterator[dict[str, Backend]]:
    """The backends, those given as specs built (default options) and closed on exit.

    Raises:
        BlackboxMIAError: a malformed spec or a backend that cannot be built (those already
            built are closed).
    """
    from .backends.registry import build_backend

    built: dict[str, Backend] = {}
    try:
        ready = {}
        for role, backend in backends.items():
            if isinstance(backend, str):
                backend = built[role] = build_backend(backend)
            ready[role] = backend
        yield ready
    finally:
        for backend in built.values():
            backend.close()


def _score_texts(texts: Sequence[str], scorers: Sequence[Scorer], backends: dict[str, Backend], progress: bool,
                 on_scored: OnScored | None) -> list[tuple[dict[str, Bounded], TokenLogprobs]]:
    """:func:`score_texts` once its scorers and backends are built."""
    check_compatible(scorers, backends)
    generative = [s for s in scorers if not s.needs_logprobs]
    scorers = [s for s in scorers if s.needs_logprobs]
    if not scorers:
        def generated(j: int, scores: dict[str, Bounded]) -> None:
            if on_scored is not None:
                on_scored(j, scores, None)

        return [(scores, None) for scores in score_generated(texts, generative, backends[TARGET], generated)]
    text_only = score_generated(texts, generative, backends[TARGET]) if generative else [{} for _ in texts]
    needs = {s.label: [s.needs(t) for t in texts] for s in scorers}
    wanted = _wanted(texts, needs, backends)
    if progress:
        _windows_notes(texts, wanted, backends)
    computed: dict[str, dict[str, TokenLogprobs]] = {role: {} for role in backends}
    for role, unique in wanted.items():
        if role != TARGET and unique:
            unique_texts = list(unique)
            lps = backends[role].logprobs(unique_texts, progress=progress, vocab_stats=False)
            computed[role] = dict(zip(unique_texts, lps))

    # target texts each item still waits for, and the items waiting for each target text
    pending: list[set[str]] = []
    waiting: dict[str, list[int]] = {}
    for j, text in enumerate(texts):
        mine = {text} | {n.text for label in needs for n in needs[label][j] if n.role == TARGET}
        pending.append(mine)
        for t in mine:
            waiting.setdefault(t, []).append(j)
    out: list[tuple[dict[str, Bounded], TokenLogprobs] | None] = [None] * len(texts)
    targets = list(wanted[TARGET])

    def done(index: int, lp: TokenLogprobs) -> None:
        text = targets[index]
        computed[TARGET][text] = lp
        for j in waiting[text]:
            pending[j].discard(text)
            if not pending[j]:
                own = computed[TARGET][texts[j]]
                scores = {
                    s.label: s.score(texts[j], own, [computed[n.role][n.text] for n in needs[s.label][j]])
                    for s in scorers
                } | text_only[j]
                out[j] = (scores, own)
                if on_scored is not None:
                    on_scored(j, scores, own)

    if targets:
        vocab_stats = any(s.needs_vocab_stats for s in scorers)
        logprobs_reporting(backends[TARGET], targets, done, progress=progress, vocab_stats=vocab_stats)
    return out  # type: ignore[return-value]  (every text was scored in done())


def _windows_notes(texts: Sequence[str], wanted: dict[str, dict[str, None]], backends: dict[str, Backend]) -> None:
    """On stderr, before the progress bars: which of the caller's ``texts`` each backend scores
    in sliding windows (:func:`~blackbox_mia.text.windows.windows_notes`, numbered as in
    ``texts``; another role's than the target's says so). The texts the scorers add (lowercased
    forms, PAC neighbours) are not counted. A backend without a known context (an API not probed
    yet) gets none."""
    for role, unique in wanted.items():
        backend = backends[role]
        mine = [text for text in dict.fromkeys(texts) if text in unique]
        if mine and backend.context is not None:
            length = dict(zip(mine, backend.sequence_lengths(mine)))
            for note in windows_notes([length.get(text, 0) for text in texts], backend.context):
                tqdm.write(note if role == TARGET else note.replace("note: ", f"note ({role} model): ", 1),
                           file=sys.stderr)


def _wanted(texts: Sequence[str], needs: dict[str, list], backends: dict[str, Backend]) -> dict[str, dict[str, None]]:
    """Distinct texts per role, item by item (a text, then what it needs), so that a backend
    working in this order finishes whole items early."""
    wanted: dict[str, dict[str, None]] = {role: {} for role in backends}
    for j, text in enumerate(texts):
        wanted[TARGET][text] = None
        for label in needs:
            for need in needs[label][j]:
                wanted[need.role][need.text] = None
    return wanted


def needed_texts(texts: Sequence[str], scorers: Sequence[Scorer], backends: dict[str, Backend]) -> dict[str, list[str]]:
    """Every distinct text each role's backend is asked the log-probs of when :func:`score_texts`
    scores ``texts`` (the texts, lowercased forms, PAC neighbours, reference passes...), in the
    order it asks; none for text-only scorers (they generate instead).

    Raises:
        BlackboxMIAError: a scorer the backends cannot serve.
    """
    refuse_one_str(texts)
    if isinstance(scorers, str):
        scorers = parse_scorers(scorers)
    check_compatible(scorers, backends)
    scorers = [s for s in scorers if s.needs_logprobs]
    if not scorers:
        return {role: [] for role in backends}
    needs = {s.label: [s.needs(t) for t in texts] for s in scorers}
    return {role: list(unique) for role, unique in _wanted(texts, needs, backends).items()}


def run_config(scorers: Sequence[Scorer], backends: dict[str, Backend], dataset: dict,
               tolerance: float = DEFAULT_TOLERANCE_NATS) -> dict:
    """The exact configuration saved next to a result: scorers, the score tolerance (nats,
    :meth:`ScoredText.from_scores`), backends, dataset, version. Without a log-prob scorer the
    backends are described by what determines their generations
    (:meth:`~blackbox_mia.backends.base.Backend.describe_generation`: no log-prob probe, which
    an endpoint without log-probs fails)."""
    logprobs = any(s.needs_logprobs for s in scorers)
    return {
        **run_settings(scorers, dataset, tolerance),
        "backends": {role: b.describe() if logprobs else b.describe_generation() for role, b in backends.items()},
    }


def run_settings(scorers: Sequence[Scorer], dataset: dict, tolerance: float = DEFAULT_TOLERANCE_NATS) -> dict:
    """The part of :func:`run_config` known before any backend is built (package, version,
    scorers, score tolerance, dataset): what :func:`~blackbox_mia.results_file.check_resumable`
    compares before a model loads.

    Raises:
        BlackboxMIAError: ``tolerance`` not a finite number of nats > 0.
    """
    check_tolerance(tolerance)
    return {
        "package": "blackbox_mia",
        "version": __version__,
        "scorers": {s.label: {"name": s.name, **s.params()} for s in scorers},
        "score_tolerance_nats": tolerance,
        "dataset": dataset,
    }


def score_items(
    items: Sequence[Item],
    scorers: Sequence[Scorer],
    backends: dict[str, Backend],
    out_path: Path | None = None,
    config: dict | None = None,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    resume: bool = True,
    progress: bool = True,
    on_resumed: Callable[[int], None] | None = None,
) -> list[ScoredText]:
    """Score ``items``, appending one JSONL row per item to ``out_path`` as soon as it is scored.

    Each row is written, flushed and fsynced the moment every text it needs is done (see
    :func:`score_texts`), so a killed run keeps every finished item. Items go to the backends
    ``chunk_size`` at a time, each chunk one stream (a black-box backend keeps its requests in
    flight across texts; a chunk ends with a tail of fewer). With ``resume``, rows already in ``out_path`` (same configuration,
    saved in ``<out>.config.json``) are kept and their items skipped, after dropping a last line
    cut mid-write; otherwise the file is rewritten. When every item is done, the file is
    rewritten atomically in the order of ``items`` (rows of other ids kept at the end).

    Args:
        items: the items (unique ids).
        scorers: the scorers.
        backends: ``{"target": ...}`` plus ``{"reference": ...}`` for ``ref``.
        out_path: the JSONL output, or None to keep the rows in memory only.
        config: the run's configuration (:func:`run_config`), saved beside the output; None
            saves none and checks none. Its ``score_tolerance_nats`` (default
            :data:`~blackbox_mia.scorers.bounded.DEFAULT_TOLERANCE_NATS`): a score resting on a
            log-prob mean known less precisely is null (:meth:`ScoredText.from_scores`).
        chunk_size: items per batched backend call (>= 1).
        resume: keep the rows already in ``out_path``.
        progress: show a progress bar (texts) on stderr, with the requests sent, their rate and
            the spend so far when a backend sends requests (:func:`~blackbox_mia.progress.usage_line`),
            and under it the backend's bar of the chunk's tokens (a long text moves it while
            its windows run), with a one-line note for each text split into windows.
        on_resumed: called once, before scoring, with how many of ``items`` were already in
            ``out_path`` (0 on a fresh run): the rest are scored by this call.

    Returns:
        One :class:`ScoredText` per item, in the order of ``items``.

    Raises:
        BlackboxMIAError: duplicate item ids, ``chunk_size`` < 1, a scorer the backends cannot
            serve, the existing output was made with another configuration, a row in it is
            malformed (named by path:line), or the output cannot be written.
    """
    check_compatible(scorers, backends)
    ids = _checked_ids(items, chunk_size)
    tolerance = (config or {}).get("score_tolerance_nats", DEFAULT_TOLERANCE_NATS)
    labels = [s.label for s in scorers]
    condition = None if any(s.needs_logprobs for s in scorers) else backends[TARGET].describe_generation().get("condition")
    done: dict[str, ScoredText] = {}
    if out_path is not None:
        out_path = Path(out_path)
        done = prepare_output(out_path, config, resume, labels)
    todo = [it for it in items if it.id not in done]
    if on_resumed is not None:
        on_resumed(len(items) - len(todo))
    with RowSink(out_path, done, len(items), progress, list(backends.values())) as sink:
        for start in range(0, len(todo), chunk_size):
            chunk = todo[start : start + chunk_size]

            def save(j: int, scores: dict[str, Bounded], lp: TokenLogprobs | None, chunk=chunk) -> None:
                sink.add(ScoredText.from_scores(chunk[j].id, chunk[j].label, scores, lp, tolerance, condition))

            score_texts([it.text for it in chunk], scorers, backends, progress=progress, on_scored=save)
    if out_path is not None:
        wanted_ids = set(ids)
        wanted = ids + [i for i in dict.fromkeys(sink.order) if i not in wanted_ids]
        if sink.order != wanted:
            write_text_atomic(out_path, "".join(json_line(done[i].to_json(), f"row {i!r}") for i in wanted))
    return [done[i] for i in ids]


def _checked_ids(items: Sequence[Item], chunk_size: int) -> list[str]:
    """The ids of ``items`` in order.

    Raises:
        BlackboxMIAError: ``chunk_size`` < 1, or two items with one id.
    """
    if chunk_size < 1:
        raise BlackboxMIAError(f"chunk_size must be at least 1, got {chunk_size}")
    ids = [it.id for it in items]
    if len(set(ids)) != len(ids):
        duplicate = next(i for n, i in enumerate(ids) if i in ids[:n])
        raise BlackboxMIAError(f"duplicate item id {duplicate!r}: every item needs its own id")
    return ids
