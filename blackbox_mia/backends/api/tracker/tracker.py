"""The logit_bias probability tracker: lp_i for every token of a text through a top-n API.

For position i the prefix is x_<i (token ids, BOS first when the tokenizer has one) and the
target token is x_i. Strategies, cheapest first (docs/blackbox.md); each is an object in
:mod:`.strategies` (bisection: :mod:`.flips`), the same objects the capability probe checks on
positions whose value it knows:

``prompt``    vLLM's ``prompt_logprobs`` field, or echo + logprobs, returns every prompt token's
              log-prob: 1 request per text (per window), exact.
``run``       run reading (:mod:`.runs`): the greedy continuation of a prefix, while it equals
              the text, gives the text's own top-n at every generated position: one request
              for a run of positions, per-position read-out (``auto``) where runs do not pay.
``topn``      request the prefix (max_tokens = 1, temperature 0, top-n log-probs); when x_i is
              listed its value is read, exact. Otherwise it bounds lp_i from above by the n-th
              listed value and by log(1 − Σ listed p) (``topn-bound``).
``forced``    bias x_i by the cap so it is sampled and read the log-prob reported for it: exact
              where the probe showed the reported value is the unbiased one (1 request).
``postbias``  with post-bias log-probs (pre-2024 semantics): bias x_i by b and solve its reported
              biased value lp'_i in closed form, logit(p_i) = logit(p'_i) − b (Finlayson et al.
              2024; :mod:`.postbias`): 1 request where the biased answer lists x_i, b chosen from
              the server's measured precision so the solve stays within ε.
``bisect``    greedy-flip bisection: the smallest bias b* that makes the temperature-0 output x_i
              gives lp_i = lp_top − b*. The top-n list gives the lower end of the bracket, a
              galloping search (steps of 1, 2, 4, ... nats) the upper end, and bisection stops
              at ε nats; [lower, upper] are reported. A text's positions are bisected together
              (:mod:`.bisection`), their questions chained where the probe verified it
              (:mod:`.chains`: consecutive positions' questions in one ``max_tokens = K``
              request), their unbiased answers read by runs where the probe verified run
              reading (:func:`.runs.read_unbiased`). A flip that does not reproduce when the
              bracket is re-checked widens the bounds instead of moving the value (``bisect~``).

``spelled``    positions inside a character, on servers that take text prompts or must never
              be sent a bias on such a token: one grammar-constrained request reads the
              character's tokens at once, identified by the bytes they spell
              (:mod:`.spelling`; where the probe found the server honours a grammar).

Every value carries [lower, upper] bounds (nats) and the strategy that produced it. Values known
only from above have ``lower = -inf`` and one of these strategies:

``*>cap``       the target is not sampled even at the bias cap: lp_i ≤ lp_top − cap.
``topn-bound``  the top-n bound only (``--strategy topn``, or no exact solve was possible).
``ambiguous``   the server's name for the sampled or listed token does not tell whether it is the
                target (e.g. a partial UTF-8 token named ``""``, and the argmax is one too):
                the top-n bound, never a guess.
``unsendable``  prompts go as text and this prefix does not reach the model as these tokens (it
                ends inside a character, or re-tokenizes differently), and no spelled read-out
                proved the value: [−inf, 0].
``unbiasable``  no request may bias this target upward (its bytes end inside a character and
                the server was not shown to stop at ``max_tokens`` then,
                :attr:`~.endpoint.Endpoint.open_bias`), the top-n does not list it and no
                spelled read-out proved the value: the top-n bound.

Token identity never rests on a name alone. With a bias on the target only, the greedy token is
either the unbiased argmax or the target, so an unnamed sampled token is the target when it
cannot be the argmax (different candidates, the argmax listed below it, or, with pre-bias
log-probs, a different reported value).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import asdict, replace

import numpy as np
from tqdm.auto import tqdm

from ....text.windows import sliding_windows
from ....tokenizers import TokenCodec
from ....tokenizers.long import LongEncoder
from ....types import BlackboxMIAError, NoLogprobs, Provenance, TokenLogprobs
from ...loop import in_daemon_thread
from .bisection import TextBisection
from ..capabilities import Capabilities
from .choice import FALLBACKS, strategy_set
from ..endpoint import Endpoint, with_bos
from .flips import Gallop
from .runs import RunReader, read_unbiased
from .spelling import Speller
from .strategies import Estimate, Position, Prompt
from .config import TrackerConfig


class Tracker:
    """Recovers per-token log-probs of texts through an :class:`Endpoint`.

    Args:
        endpoint: the endpoint adapter (client, tokenizer, prompt form).
        capabilities: what the capability probe found for this (endpoint, model); kept as
            :attr:`caps` with ``top_n`` at most ``config.max_top_n`` (what every request asks).
        config: a :class:`TrackerConfig`.
        complete: for a record that stopped at the prompt path (``capabilities.complete`` false),
            the rest of the probe: awaited (once) before texts whose windows need a per-position
            strategy (a window as long as the context reads its last target from the generated
            position, else per position), and the tracker adopts the full record.

    Raises:
        NoLogprobs: the endpoint cannot give absolute log-probs (the message gives the probe's reason).
        BlackboxMIAError: the requested strategy is not available on it (the same).
    """

    def __init__(self, endpoint: Endpoint, capabilities: Capabilities, config: TrackerConfig = TrackerConfig(),
                 complete: Callable[[], Awaitable[Capabilities]] | None = None):  # fmt: skip
        self.endpoint = endpoint
        self.codec: TokenCodec = endpoint.codec
        self._encoder = LongEncoder(self.codec)
        self.config = config
        self._complete = complete
        self._adopt(capabilities)

    def _adopt(self, capabilities: Capabilities) -> None:
        """Build the strategies from ``capabilities`` (checked against ``config.strategy``).

        Raises:
            BlackboxMIAError: as the constructor.
        """
        endpoint, config = self.endpoint, self.config
        available = capabilities.strategies()
        if not available:
            raise NoLogprobs(
                "this endpoint does not return log-probs usable for absolute values: " + capabilities.reason("topn")
            )
        if config.strategy != "auto" and config.strategy not in available:
            raise BlackboxMIAError(
                f"strategy {config.strategy!r} is not available on this endpoint "
                f"(available: {', '.join(available)}): {capabilities.reason(config.strategy)}"
            )
        capabilities = replace(capabilities, top_n=min(capabilities.top_n, config.max_top_n))  # what requests ask
        self.caps = capabilities
        self.available = available
        self.strategies = strategy_set(endpoint, capabilities, config)
        self.prompt = Prompt(endpoint, capabilities)
        self.runs = RunReader(endpoint, capabilities.top_n, self._resolve, config.context)
        chain = config.chain_tokens if capabilities.chained_flips else 1
        self.bisection = TextBisection(self.strategies["bisect"], chain)
        self.speller = Speller(endpoint, config.max_bias) if capabilities.grammar else None

    # -- public ---------------------------------------------------------------------------

    def sequence(self, text: str) -> list[int]:
        """The ids sent for ``text``: BOS (when the codec has one and prompts are ids) + text tokens
        (a long text tokenized window by window: :class:`~blackbox_mia.tokenizers.long.LongEncoder`)."""
        return with_bos(self.codec, self._encoder.encode(text), self.endpoint.token_id_prompts)

    async def sequences(self, texts: Sequence[str]) -> list[list[int]]:
        """:meth:`sequence` of every text, computed in a daemon thread: the event loop keeps
        serving (answers in flight, Ctrl-C's grace period), and a cancelled call neither waits
        for the tokenizer nor delays the process's exit (the thread stops after its text)."""

        def encode(stop: threading.Event) -> list[list[int]]:
            return [self.sequence(text) for text in texts if not stop.is_set()]

        return await in_daemon_thread(encode, "bbmia-tokenize")

    async def track(
        self,
        texts: Sequence[str],
        progress: bool = False,
        on_done: Callable[[int, TokenLogprobs], None] | None = None,
    ) -> list[TokenLogprobs]:
        """Log-probs of every scored token of every text.

        Positions (or echo windows) of all texts are generated lazily and worked on by at most
        ``config.pending`` tasks at once, under the client's limits. When a task fails, no new
        position starts, the ones in flight finish (their answers are cached), then the first
        error is raised.

        Args:
            texts: the texts.
            progress: show a progress bar over scored tokens.
            on_done: called as ``on_done(index, logprobs)`` the moment a text is complete.

        Raises:
            BlackboxMIAError: a text with fewer than two tokens, or a failed request.
        """
        sequences = await self.sequences(texts)
        for i, seq in enumerate(sequences):
            if len(seq) < 2:
                raise BlackboxMIAError(f"text #{i} has fewer than 2 tokens (no BOS): nothing to score")
        await self.complete_for(sequences)
        estimates: list[list[Estimate | None]] = [[None] * (len(s) - 1) for s in sequences]
        remaining = [len(s) - 1 for s in sequences]
        results: list[TokenLogprobs | None] = [None] * len(sequences)
        bar = tqdm(total=sum(remaining), unit="tok", disable=not progress, desc="track", leave=False)

        async def run(job: tuple[int, int, int, int]) -> None:
            t, start, end, first = job
            seq = sequences[t]
            if self.mode() == "prompt":
                found = await self._window(seq, start, end, first)
            elif self.mode() == "run":
                found = await self.runs.read(seq, start, first, end)
            elif self.bisects_texts():
                found = await self._bisect(seq)
            else:  # one position: target seq[first] after the window's prefix
                found = [await self._resolve(Position.at(seq, start, first, end, self.config.context), self.mode())]
            estimates[t][first - 1 : first - 1 + len(found)] = found
            remaining[t] -= len(found)
            bar.update(len(found))
            if remaining[t] == 0:
                results[t] = self._to_logprobs(seq, estimates[t])
                estimates[t] = []
                if on_done is not None:
                    on_done(t, results[t])

        try:
            await self._work(self._jobs(sequences), run)
        finally:
            bar.close()
        return results

    async def complete_for(self, sequences: list[list[int]]) -> None:
        """Adopt the rest of a probe that stopped at the prompt path (the constructor's
        ``complete``, run once) where scoring ``sequences`` may need a per-position strategy:
        before tracking them, and before estimating them (a full window forces its last target
        only where the full probe verified forced read-out)."""
        if not self.caps.complete and self._complete is not None and self._needs_positions(sequences):
            self._adopt(await self._complete())

    def describe(self) -> dict:
        return {"tracker": asdict(self.config), "available_strategies": self.available}

    # -- scheduling -------------------------------------------------------------------------

    def _jobs(self, sequences: list[list[int]]) -> Iterator[tuple[int, int, int, int]]:
        """``(text, start, end, first)``: an echo window, or (per position) one target ``first``
        with prefix ``seq[start:first]`` in the window ending at ``end``, or a whole text bisected
        together (:meth:`bisects_texts`: ``(text, 0, len, 1)``)."""
        for t, seq in enumerate(sequences):
            if self.bisects_texts():
                yield t, 0, len(seq), 1
                continue
            for start, end, first in self._windows(seq):
                if self.mode() in ("prompt", "run"):
                    yield t, start, end, first
                else:
                    for j in range(first, end):
                        yield t, start, end, j

    async def _work(self, jobs: Iterator, run: Callable) -> None:
        """Run ``run(job)`` for every job with at most ``pending`` in progress (lazy: a job is
        drawn only when a worker is free)."""
        width = self.config.pending or 2 * self.endpoint.client.config.concurrency
        failures: list[Exception] = []

        async def worker() -> None:
            for job in jobs:  # next() never awaits, so workers can share the generator
                try:
                    await run(job)
                except Exception as exc:  # noqa: BLE001 - re-raised below, after in-flight work ends
                    failures.append(exc)
                if failures:
                    return

        tasks = [asyncio.ensure_future(worker()) for _ in range(width)]
        try:
            await asyncio.gather(*tasks)
        except BaseException:  # cancelled (Ctrl-C): stop everything
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        if failures:
            raise failures[0]

    def _needs_positions(self, sequences: list[list[int]]) -> bool:
        """Whether scoring ``sequences`` may need a per-position strategy: a mode other than the
        prompt path, or a window as long as the context (its last target is read from the
        generated position's top-n, and per position when it is not listed there)."""
        if self.mode() != "prompt":
            return True
        context = self.config.context
        return context is not None and any(end - start >= context for seq in sequences
                                           for start, end, _ in self._windows(seq))  # fmt: skip

    def mode(self) -> str:
        """The strategy every text runs with: the configured one, or for ``auto`` "prompt" where
        prompt log-probs are available, else "run" where the probe verified run reading (never
        dearer than per-position read-out by more than a request per failed run, far cheaper on
        memorized text), else "auto" (per position: :meth:`per_position_strategy`)."""
        if self.config.strategy == "auto":
            return next((s for s in ("prompt", "run") if s in self.available), "auto")
        return self.config.strategy

    def bisects_texts(self) -> bool:
        """Whether texts are bisected whole (:meth:`_bisect`): where bisection is the per-position
        strategy (``bisect``, or ``auto`` falling back to it)."""
        return self.mode() == "bisect" or (self.mode() == "auto" and self.per_position_strategy() == "bisect")

    def per_position_strategy(self) -> str:
        """What ``auto`` does per position: forced read-out where available, else a listed
        target's value and the first fallback available for the others (``postbias``,
        ``bisect``), else the top-n bound (``topn``)."""
        if "forced" in self.available:
            return "forced"
        return next((s for s in FALLBACKS if s in self.available), "topn")

    # -- one text bisected to its scores' precision ----------------------------------------------

    def _windows(self, seq: list[int]) -> list[tuple[int, int, int]]:
        """``(start, end, first)`` of each window of ``seq`` (one window without a context)."""
        return sliding_windows(len(seq), self.config.context) if self.config.context else [(0, len(seq), 1)]

    async def _bisect(self, seq: list[int]) -> list[Estimate]:
        """Every target of ``seq`` by bisection, the text's positions together
        (:class:`~.bisection.TextBisection`: chained requests where the probe verified them,
        refined to the requested scores' precision or every value to ε), the unbiased answers
        read by runs where the probe verified run reading (:func:`~.runs.read_unbiased`: one
        request per non-argmax target). A whole text at once: Min-K%'s lowest k% are a text's,
        not a window's (so its positions are held together: memory grows as the text's length
        times its window's, unlike the per-position modes)."""
        spans = [(start, end, j) for start, end, first in self._windows(seq) for j in range(first, end)]
        positions = [Position.at(seq, start, j, end, self.config.context) for start, end, j in spans]
        follows = [a[0] == b[0] and b[2] == a[2] + 1 for a, b in zip(spans, spans[1:])] + [False]
        room = [len(seq) if p.room is None else p.room for p in positions]
        if self.caps.run_reading:
            await read_unbiased(self.endpoint, self.caps.top_n, positions, follows, room)
        found = list(await asyncio.gather(*(self._open(p) for p in positions)))
        done = await self.bisection.run(positions, follows, room, found)
        return list(await asyncio.gather(*(self._respell(p, e) for p, e in zip(positions, done))))

    async def _open(self, position: Position) -> Estimate | Gallop:
        """A position's listed value, or its galloping search (or final estimate), or what
        :meth:`_gate` says."""
        return await self._gate(position) or await self.strategies["bisect"].start(position)

    # -- one echo window ------------------------------------------------------------------------

    async def _window(self, seq: list[int], start: int, end: int, first: int) -> list[Estimate]:
        """Targets ``first .. end-1`` of one window from one echo request.

        The request generates one token (``max_tokens = 1``), so a window as long as the context
        sends all but its last token and reads the last target at the generated position: forced
        there in the same request where :meth:`forces_in_window` allows, else from its top-n;
        a per-position strategy when neither gives it. Only a window that reads its last target
        from the top-n asks for the top-n (the others: the sampled token alone).
        """
        full = self.config.context is None or end - start < self.config.context
        ids = seq[start:end] if full else seq[start : end - 1]
        if not self.endpoint.sendable(ids):  # text prompts that do not round-trip: position by position
            return [await self._resolve(Position.at(seq, start, j, end, self.config.context)) for j in range(first, end)]
        target = seq[end - 1]
        forcing = not full and self.forces_in_window(target)
        values, after = await self.prompt.resolve(ids, {target: self.config.max_bias} if forcing else None,
                                                  listed=not full and not forcing)
        found = values[first - start - 1 :]  # values[k] is the target ids[k + 1]
        if not full:
            listed = after.find(target) if not forcing else (
                after.sampled_logprob if self.strategies["forced"].is_target(after, target, None) else None)
            found.append(
                Estimate.exact(listed, "forced" if forcing else "topn") if listed is not None
                else await self._resolve(Position.at(seq, start, end - 1, end, self.config.context))
            )
        return found

    def forces_in_window(self, target: int) -> bool:
        """Whether a full window's request also forces its last target (one request, as the
        offline engine does): forced read-out holds, the strategy would use it, and the prompt's
        values stay the same under the bias (vLLM's ``prompt_logprobs``, computed before any
        logit processing, or echo where the probe checked it: ``echo_bias_free``)."""
        return (self.caps.forced_readout and (self.caps.prompt_logprobs or self.caps.echo_bias_free)
                and self.config.strategy in ("auto", "forced") and self.endpoint.may_bias(target))

    # -- one position ---------------------------------------------------------------------------

    async def _resolve(self, position: Position, mode: str = "auto") -> Estimate:
        """lp of ``position``'s target with the strategy named ``mode`` (``auto``: the cheapest
        available), or what :meth:`_gate` says; an ``ambiguous`` bound spelled where it can be."""
        return await self._gate(position) or await self._respell(position, await self.strategies[mode].resolve(position))

    async def _respell(self, position: Position, estimate: Estimate) -> Estimate:
        """``estimate``, or for an ``ambiguous`` bound (the sampled name does not tell the target
        from another token) the spelled read-out where it proves the target's value."""
        if estimate.strategy != "ambiguous":
            return estimate
        return await self._spelled(position) or estimate

    async def _spelled(self, position: Position) -> Estimate | None:
        """The spelled read-out (:mod:`.spelling`) where the probe found the server honours a
        grammar, else None."""
        return None if self.speller is None else await self.speller.resolve(position)

    async def _gate(self, position: Position) -> Estimate | None:
        """What a position gets where the strategies' requests may not be sent; None when they may.

        A prefix that cannot be sent as its tokens is never sent as a text the server would
        tokenize otherwise: the spelled read-out (:mod:`.spelling`, from the last sendable
        prefix) where it proves the value, else ``unsendable`` (an upper bound of 0). A target
        no request may bias upward (:meth:`~.endpoint.Endpoint.may_bias`): its listed value
        (``topn``), else the spelled read-out, else the top-n bound (``unbiasable``).
        """
        if not self.endpoint.sendable(position.prefix):
            return await self._spelled(position) or Estimate.at_most(0.0, "unsendable")
        if self.endpoint.may_bias(position.target):
            return None
        estimate = await self.strategies["topn"].resolve(position)
        if estimate.strategy == "topn":
            return estimate
        return await self._spelled(position) or Estimate.at_most(estimate.upper, "unbiasable")

    # -- assembly ---------------------------------------------------------------------------

    def _to_logprobs(self, seq: list[int], estimates: list[Estimate]) -> TokenLogprobs:
        """The text's :class:`TokenLogprobs`: each estimate's bounds widened by the server's
        report error at that bound (:meth:`~..capabilities.Capabilities.report_error`: values
        rounded to a short float format, or jittered between identical requests), so a value is
        within its bounds whatever the server's precision; exact servers change nothing."""
        strategies = [e.strategy for e in estimates]
        lower = np.asarray([e.lower for e in estimates], dtype=np.float64)
        upper = np.asarray([e.upper for e in estimates], dtype=np.float64)
        lower, upper = lower - self.caps.report_error(lower), upper + self.caps.report_error(upper)
        kinds = set(strategies)
        provenance = Provenance(
            backend="api",
            model=self.endpoint.client.config.model,
            strategy=kinds.pop() if len(kinds) == 1 else "mixed",
            bos=self.codec.bos_id is not None and seq[0] == self.codec.bos_id and self.endpoint.token_id_prompts,
            condition=self.caps.condition,
        )
        return TokenLogprobs(
            token_ids=np.asarray(seq[1:]),
            tokens=[self.codec.token_string(i) for i in seq[1:]],
            logprobs=[e.value for e in estimates],
            context_ids=(seq[0],),
            provenance=provenance,
            lower=lower,
            upper=upper,
            strategies=strategies,
        )
