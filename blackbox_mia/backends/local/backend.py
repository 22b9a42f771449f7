"""The local backend: per-token log-probs and generations from a Hugging Face causal LM.

It is the drop-in for the black-box API backend and the ground truth the tracker is validated
against. Texts are cut into windows (texts longer than the context), packed longest first into
forward passes sized by a memory budget (:mod:`.resources`), and each pass's last hidden states
are reduced to lp_i, and μ_i, σ_i only when a call asks for them, a chunk of positions at a time
(:mod:`.reduce`): the logits of a whole batch are never held at once. Generation is batched
Hugging Face ``generate`` with left padding.

The model computes on the backend's own thread (see :mod:`..base`), so ``await`` never blocks the
caller's event loop; a cancelled call stops after the forward batch in progress.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Iterator, Sequence
from itertools import chain
from dataclasses import asdict, replace

import numpy as np
from tqdm.auto import tqdm

from ...hub import check_model_path, load_pretrained, model_context, route_unmasked_padding_note
from ...option_names import named
from ...tokenizers import HFTokenCodec
from ...types import BlackboxMIAError, Generation, Provenance, TokenLogprobs
from ..base import FULL_DISTRIBUTION, GENERATE, LOGPROBS, Backend, OnDone, Prompt
from ..generation import build_generation, sample_seed, seeded_sampler, strategy_name
from .config import SPEED_FIELDS, LocalConfig
from .head import head_row_multiple, scoring_head
from .packing import pack_rows, window_rows
from .passes import LaunchedPass, SequenceResult
from .reduce import reduce_chunks
from .resources import (
    GIB,
    ForwardBudget,
    ModelShape,
    default_budget_bytes,
    default_threads,
    token_cap,
)

SPLIT_CHECK_TOKENS = 8
"""Tokens of the probe that checks, at load, that logits = output embedding(last hidden state)."""

SCORING_ATTENTION = ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "MATH")
"""The scaled-dot-product attention kernels a scoring pass may use (torch's ``SDPBackend``
names): all but cuDNN's, which builds a new plan for every new input shape (on an H200, a cold
gpt2-1b call over 1,024 GSM8K texts in 8 shapes ran at 92.6k tokens/s with it, 134.8k without;
the warm call at 140.3k and 142.2k: records/measured-settings.md)."""

CUDA_PASSES_IN_FLIGHT = 1
"""On CUDA, forward passes launched after the one whose results the host is reading: the GPU
computes the next batch while the host turns the last one into results (on CPU, where a pass
computes as it is called, none)."""


class LocalBackend(Backend):
    """Per-token log-probs and generations from a local causal LM.

    Features: ``logprobs``, ``generate``, and ``full_distribution`` when ``vocab_stats``.

    Args:
        config: a :class:`LocalConfig`.

    Attributes:
        codec: the model's tokenizer as an :class:`~blackbox_mia.tokenizers.HFTokenCodec`
            (encoding, token strings, BOS convention).
        tokenizer, model: the loaded Hugging Face objects.
        context: the context length in tokens.
        vocab_size: rows of the output embedding (log-prob vectors have this length).
        device, dtype: where and in which precision the model runs.
        threads: torch CPU threads of the compute thread.
        budget: the :class:`~.resources.ForwardBudget` that shapes forward passes.

    Raises:
        BlackboxMIAError: torch/transformers missing, a model path that does not exist, a
            model that cannot be loaded, a bad ``threads`` or ``max_memory_gb``.

    Example:
        >>> backend = LocalBackend(LocalConfig("gpt2"))            # doctest: +SKIP
        >>> backend.logprobs(["Tom has 3 apples."])[0].logprobs  # doctest: +SKIP
        >>> backend.generate(["Tom has"], max_new_tokens=8)[0].text  # doctest: +SKIP
    """

    kind = "local"

    def __init__(self, config: LocalConfig):
        super().__init__()
        try:
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise BlackboxMIAError(
                "the local backend needs torch and transformers: pip install 'blackbox_mia[local]'"
            ) from exc
        check_model_path(config.model)
        self.config = config
        self._torch = torch
        self.threads = config.threads or default_threads()
        self._call(self._on_own_thread(self._use_threads))
        self.device = self._resolve_device(config.device)
        dtype_name = config.dtype
        if dtype_name == "auto":
            dtype_name = "bfloat16" if self.device.type == "cuda" else "float32"
        if dtype_name not in ("float32", "bfloat16", "float16"):
            raise BlackboxMIAError(f"unknown dtype {config.dtype!r}: use float32, bfloat16, float16 or auto")
        self.dtype = getattr(torch, dtype_name)
        self.tokenizer = load_pretrained(AutoTokenizer.from_pretrained, config.model, "model", config.local_files_only)
        self.model = load_pretrained(AutoModelForCausalLM.from_pretrained, config.model, "model",
                                     config.local_files_only, weights=True, dtype=self.dtype)
        route_unmasked_padding_note()  # no mask on purpose (_states): not a warning for the user
        try:
            self.model.to(self.device).eval()
        except (RuntimeError, AssertionError) as exc:  # torch's "not compiled with CUDA", out of memory...
            raise BlackboxMIAError(f"cannot put model {config.model!r} on device {self.device}: {exc}") from exc
        self.context = config.max_length or model_context(self.model.config, self.tokenizer)
        self.codec = HFTokenCodec(self.tokenizer, name=config.model, bos=config.bos)
        self._token_string = functools.lru_cache(maxsize=None)(self.codec.token_string)
        if config.bos and self.codec.bos_id is None:
            raise BlackboxMIAError(f"bos=True but the tokenizer of {config.model!r} has no BOS token")
        self.features = frozenset({LOGPROBS, GENERATE} | ({FULL_DISTRIBUTION} if config.vocab_stats else set()))
        self._head = self.model.get_output_embeddings()
        self.vocab_size = int(self._head.weight.shape[0])
        budget = int(config.max_memory_gb * GIB) if config.max_memory_gb else default_budget_bytes(torch, self.device)
        shape = ModelShape.of(self.model, self.vocab_size, self._head.weight.element_size())
        self.budget = ForwardBudget(budget, token_cap(self.device, config.max_batch_tokens), shape)
        self._split = self._call(self._head_is_last_step())
        self._scoring_head = scoring_head(torch, self._head, head_row_multiple(self.device)) if self._split else _identity
        self._in_flight = CUDA_PASSES_IN_FLIGHT if self.device.type == "cuda" else 0

    async def _on_own_thread(self, fn):
        """``fn()`` on the backend's own thread (where :meth:`_alogprobs` computes)."""
        return fn()

    def _use_threads(self) -> None:
        """Make the calling thread's torch work use :attr:`threads` CPU threads (torch keeps the
        setting per thread; threads started later inherit it). Called on the backend's own
        thread at construction, and by the sync methods that run on their caller's thread."""
        if self._torch.get_num_threads() != self.threads:
            self._torch.set_num_threads(self.threads)

    async def _head_is_last_step(self) -> bool:
        """Whether the model's logits are exactly its output embedding applied to its base
        model's last hidden state (no logit scaling or soft-capping after the head): then
        passes keep hidden states and compute logits a chunk at a time; otherwise they reduce
        the model's own logits. Checked once on a short probe."""
        torch = self._torch
        ids = torch.arange(min(SPLIT_CHECK_TOKENS, self.context), device=self.device).unsqueeze(0) % self.vocab_size
        with torch.inference_mode(), self._attention():
            want = self.model(input_ids=ids, use_cache=False).logits
            try:
                got = self._head(self.model.base_model(input_ids=ids, use_cache=False).last_hidden_state)
            except (AttributeError, TypeError, RuntimeError):
                return False
        return got.shape == want.shape and torch.allclose(got.float(), want.float(), rtol=1e-4, atol=1e-4)

    def _resolve_device(self, name: str | None):
        """The torch device named ``name`` (``None``: CUDA when available, else CPU).

        Raises:
            BlackboxMIAError: an unknown device string, or a CUDA device that is not there.
        """
        torch = self._torch
        if name is None:
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        try:
            device = torch.device(name)
        except (RuntimeError, ValueError) as exc:
            raise BlackboxMIAError(f"unknown {named('device', name)}: use cpu, cuda, cuda:N, mps, ...") from exc
        if device.type == "cuda":
            count = torch.cuda.device_count() if torch.cuda.is_available() else 0
            if count == 0:
                raise BlackboxMIAError(f"{named('device', name)}: CUDA is not available (no GPU, or torch built without CUDA)")
            if device.index is not None and device.index >= count:
                raise BlackboxMIAError(f"{named('device', name)}: only {count} CUDA device(s) here (cuda:0..cuda:{count - 1})")
        return device

    # -- tokenization ---------------------------------------------------------------------

    @property
    def bos_id(self) -> int | None:
        """The BOS id prepended before scoring and generation, or None."""
        return self.codec.bos_id

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` as plain text: no BOS/EOS added, and special-token strings in
        the text (``"<|endoftext|>"``) are split into ordinary tokens, never mapped to the
        special ids (a text cannot end or reset the model's context by quoting them)."""
        return self.codec.encode(text)

    def full_ids(self, text_ids: Sequence[int]) -> list[int]:
        """The sequence fed to the model: BOS (when used) followed by the text's tokens."""
        return ([self.bos_id] if self.bos_id is not None else []) + [int(i) for i in text_ids]

    # -- log-probs ---------------------------------------------------------------------------

    async def _alogprobs(
        self, texts: list[str], progress: bool, on_done: OnDone | None, vocab_stats: bool | None
    ) -> list[TokenLogprobs]:
        """Log-probs of every text (see :meth:`Backend.alogprobs`); ``on_done`` is called for
        the texts whose windows all lie in a forward batch as soon as that batch is done
        (texts run longest first).

        Args:
            vocab_stats: compute μ and σ (Min-K%++); ``None``: when the backend offers the
                ``full_distribution`` feature. ``False`` skips their cost (about half of the
                logits' reduction).

        Raises:
            BlackboxMIAError: a single-token text when the model has no BOS.
        """
        if vocab_stats is None:
            vocab_stats = FULL_DISTRIBUTION in self.features
        provenance = Provenance("local", self.config.model, "forward", self.bos_id is not None)
        sequences = [self.full_ids(ids) for ids in self.codec.encode_many(texts)]
        for i, seq in enumerate(sequences):
            if len(seq) < 2:
                raise BlackboxMIAError(
                    f"text #{i} ({texts[i]!r}) has a single token and the model has no BOS: nothing to score"
                )
        results: list[SequenceResult | None] = [None] * len(sequences)
        out: list[TokenLogprobs | None] = [None] * len(texts)
        for finished in self._sequence_batches(sequences, results, vocab_stats, progress):
            for s in finished:
                lp, mu, sigma = results[s]
                seq = sequences[s]
                out[s] = TokenLogprobs(
                    token_ids=np.asarray(seq[1:]),
                    tokens=[self._token_string(i) for i in seq[1:]],
                    logprobs=lp,
                    context_ids=(seq[0],),
                    provenance=provenance,
                    mu=mu,
                    sigma=sigma,
                )
                if on_done is not None:
                    on_done(s, out[s])
            await asyncio.sleep(0)  # a cancellation point between forward batches
        return out  # type: ignore[return-value]  (every sequence finished in some batch)

    def _sequence_batches(
        self,
        sequences: Sequence[Sequence[int]],
        results: list[SequenceResult | None],
        vocab_stats: bool,
        progress: bool = False,
    ) -> Iterator[list[int]]:
        """lp_j = log p(seq[j] | seq[:j]) for j = 1..L-1 of every id sequence (float64, nats),
        one forward batch per step: yields the indices of the sequences finished by that batch,
        after storing ``results[s] = (lp, mu, sigma)``, each of shape (L-1,) (``mu``/``sigma``
        ``None`` unless ``vocab_stats``).

        Long sequences are split into windows and packed into batches (:mod:`.packing`: a few
        row widths per call) that fit the :attr:`budget`, longest sequence first, each
        sequence's windows together, so a long text finishes as soon as its own windows ran. On
        CUDA a batch's results are read while the next batch computes
        (:data:`CUDA_PASSES_IN_FLIGHT`).
        """
        rows, order = window_rows([len(seq) for seq in sequences], self.context)
        remaining = [0] * len(sequences)  # windows not computed yet, per sequence
        for s, *_ in rows:
            remaining[s] += 1
        out_lp = [np.empty(len(seq) - 1) for seq in sequences]
        out_mu = [np.empty(len(seq) - 1) for seq in sequences] if vocab_stats else None
        out_sd = [np.empty(len(seq) - 1) for seq in sequences] if vocab_stats else None
        bar = tqdm(total=sum(len(s) for s in sequences), unit="tok", disable=not progress, desc="forward", leave=False)
        launched: list[tuple[list, LaunchedPass]] = []  # passes not read yet, oldest first
        # every window of a sequence is padded as its first, widest one: they run together, and a
        # long text finishes as soon as its own windows ran (its last, narrower window would
        # otherwise wait for the narrow rows at the call's end)
        batches = pack_rows(order, [min(len(sequences[s]), self.context) for s, *_ in rows], self.budget)
        try:
            for batch in chain(batches, [None]):  # None: the end, every pass is read
                if batch is not None:
                    windows = [rows[r] for r in batch[0]]
                    ids = [sequences[s][a:b] for s, a, b, _ in windows]
                    launched.append((windows, self._forward(ids, batch[1], vocab_stats)))
                while len(launched) > (self._in_flight if batch is not None else 0):
                    windows, computed = launched.pop(0)
                    finished = []
                    for (s, a, b, first), (lp, mu, sd) in zip(windows, computed.rows()):
                        # entry c of the window's arrays predicts absolute target a + c + 1
                        cols = slice(first - a - 1, b - a - 1)
                        out_lp[s][first - 1 : b - 1] = lp[cols]
                        if vocab_stats:
                            out_mu[s][first - 1 : b - 1] = mu[cols]
                            out_sd[s][first - 1 : b - 1] = sd[cols]
                        bar.update(b - first)
                        remaining[s] -= 1
                        if remaining[s] == 0:
                            results[s] = (out_lp[s], out_mu[s], out_sd[s]) if vocab_stats else (out_lp[s], None, None)
                            finished.append(s)
                    yield finished
        finally:
            bar.close()

    def _pad(self, rows: Sequence[Sequence[int]], width: int):
        """Right-padded ids (padding: id 0, never read), shape (B, ``width``), on the model's
        device."""
        torch = self._torch
        ids = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, : len(r)] = torch.as_tensor(list(r))
        return ids.to(self.device)

    def _states(self, ids):
        """The tensor the logits of right-padded ``ids`` (B, T) are reduced from, (B, T, ·), and
        the map from it to logits: the last hidden states and the output embedding (its
        :func:`~.head.scoring_head`) when :meth:`_head_is_last_step`, else the model's own logits
        and the identity. No KV cache is built (nothing reads it), and attention runs on
        :data:`SCORING_ATTENTION`'s kernels.

        No attention mask is passed: with right padding a causal model's real positions never
        attend to the padding after them, so their values are those of the unpadded row, and
        the fused causal attention kernel runs instead of the masked one (faster on CPU:
        records/measured-settings.md). Padding positions are never read."""
        with self._attention():
            if self._split:
                return self.model.base_model(input_ids=ids, use_cache=False).last_hidden_state, self._scoring_head
            return self.model(input_ids=ids, use_cache=False).logits, _identity

    def _attention(self):
        """A context in which scaled-dot-product attention uses :data:`SCORING_ATTENTION`'s kernels."""
        from torch.nn.attention import SDPBackend, sdpa_kernel

        return sdpa_kernel([getattr(SDPBackend, name) for name in SCORING_ATTENTION])

    def _forward(self, rows: list[Sequence[int]], width: int, vocab_stats: bool) -> LaunchedPass:
        """One forward pass of ``rows`` padded to ``width`` tokens and its reduction, launched (on
        CUDA: queued, the results' copy to the host too); :meth:`LaunchedPass.rows` reads them.
        Padding positions are never reduced; the scored positions are picked by indices computed
        on the host (a boolean mask would make the host wait for the pass)."""
        torch = self._torch
        ids = self._pad(rows, width)
        # position c of row i predicts ids[i, c + 1]: flat index i · width + c, for c < len(row) - 1
        scored = torch.cat([torch.arange(len(r) - 1) + i * width for i, r in enumerate(rows)]).to(self.device)
        targets = torch.as_tensor([t for r in rows for t in r[1:]]).to(self.device)
        with torch.inference_mode():
            states, head = self._states(ids)
            hidden = states.reshape(-1, states.shape[-1]).index_select(0, scored)
            reduced = reduce_chunks(torch, hidden, targets, head, self.budget.chunk, vocab_stats)
            return LaunchedPass.launch(torch, (reduced.lp, reduced.mu, reduced.sigma), [len(r) for r in rows])

    def next_token_logprobs(self, prefixes: Sequence[Sequence[int]]) -> np.ndarray:
        """log p(v | prefix) over the whole vocabulary for each prefix: float32 array (B, V), nats.

        Prefixes longer than the context keep their last ``context`` tokens. Only the last
        position of each prefix goes through the output embedding.

        Raises:
            BlackboxMIAError: an empty prefix.
        """
        self._use_threads()
        torch = self._torch
        if any(len(p) == 0 for p in prefixes):
            raise BlackboxMIAError("empty prefix: a next-token distribution needs at least one token")
        rows = [list(p)[-self.context :] for p in prefixes]
        out = np.empty((len(rows), self.vocab_size), dtype=np.float32)
        order = sorted(range(len(rows)), key=lambda r: len(rows[r]), reverse=True)
        for batch, width in pack_rows(order, [len(r) for r in rows], self.budget):
            ids = self._pad([rows[r] for r in batch], width)
            last = torch.as_tensor([len(rows[r]) - 1 for r in batch], device=self.device)
            with torch.inference_mode():
                states, head = self._states(ids)
                picked = head(states[torch.arange(len(batch), device=self.device), last]).float()
                out[batch] = torch.log_softmax(picked, dim=-1).cpu().numpy()
        return out

    def prompt_top_logprobs(self, ids: Sequence[int], n: int) -> list[tuple[float, tuple[tuple[int, float], ...]]]:
        """For j = 1..L-1: ``(log p(ids[j] | ids[:j]), top-n ((id, log-prob), ...))`` in nats.

        One unpadded forward pass; the caller keeps ``len(ids)`` within the context. ``n = 0``
        gives empty top-n tuples.
        """
        self._use_threads()
        torch = self._torch
        with torch.inference_mode(), self._attention():
            x = torch.as_tensor([list(ids)], device=self.device)
            logits = self.model(input_ids=x, attention_mask=torch.ones_like(x), use_cache=False).logits
            logp = torch.log_softmax(logits[0, :-1].float(), dim=-1)
            actual = logp.gather(-1, x[0, 1:].unsqueeze(-1)).squeeze(-1).cpu().numpy()
            if n > 0:
                values, indices = logp.topk(min(n, logp.shape[-1]), dim=-1)
                values, indices = values.cpu().numpy(), indices.cpu().numpy()
        return [
            (float(actual[j]), tuple(zip(indices[j].tolist(), values[j].tolist())) if n > 0 else ())
            for j in range(len(ids) - 1)
        ]

    # -- generation -------------------------------------------------------------------------

    async def _agenerate(
        self, prompts: list[Prompt], max_new_tokens: int, temperature: float, n: int, seed: int | None,
        logprobs: bool,
    ) -> list[Generation]:
        """Continuations (see :meth:`Backend.agenerate`): batched ``generate`` with left padding,
        rows packed by the :attr:`budget` (prompt + new tokens per row). Greedy runs each prompt
        once (its ``n`` samples are equal); sampling gives row (i, j) its own generator seeded
        with ``seed + j``. Per-token log-probs are log-softmax of the raw logits (nats).

        Raises:
            BlackboxMIAError: a prompt that with ``max_new_tokens`` exceeds the context.
        """
        contexts = [self.full_ids(self.encode(p) if isinstance(p, str) else p) for p in prompts]
        for i, ids in enumerate(contexts):
            if len(ids) + max_new_tokens > self.context:
                raise BlackboxMIAError(
                    f"prompt #{i} has {len(ids)} tokens: with max_new_tokens={max_new_tokens} it exceeds "
                    f"the context of {self.context} tokens"
                )
        greedy = temperature == 0
        rows = [(i, j) for i in range(len(prompts)) for j in range(1 if greedy else n)]
        seeds = [sample_seed(seed, j) for _, j in rows]
        provenance = Provenance("local", self.config.model, strategy_name(temperature), self.bos_id is not None)
        eos = self.tokenizer.eos_token_id
        found: dict[tuple[int, int], Generation] = {}
        order = sorted(range(len(rows)), key=lambda r: -len(contexts[rows[r][0]]))
        widths = [len(contexts[i]) + max_new_tokens for i, _ in rows]
        for batch, _ in pack_rows(order, widths, self.budget):
            ids, lps = self._generate_batch(
                [contexts[rows[r][0]] for r in batch], max_new_tokens, temperature, [seeds[r] for r in batch]
            )
            for k, r in enumerate(batch):
                i, j = rows[r]
                found[i, j] = build_generation(self.codec, ids[k], lps[k], eos, i, j, provenance)
            await asyncio.sleep(0)  # a cancellation point between batches
        if greedy:  # the n samples of a prompt are its one greedy continuation
            return [replace(found[i, 0], sample=j) for i in range(len(prompts)) for j in range(n)]
        return [found[i, j] for i in range(len(prompts)) for j in range(n)]

    def _generate_batch(
        self, contexts: list[list[int]], max_new_tokens: int, temperature: float, seeds: list[int]
    ) -> tuple[list[list[int]], list[np.ndarray]]:
        """One left-padded ``generate`` call: per row, the generated ids (padded after EOS) and
        their log-probs under the raw logits, shape (steps,) each."""
        torch = self._torch
        from transformers import GenerationConfig, LogitsProcessorList

        eos = self.tokenizer.eos_token_id
        pad = self.tokenizer.pad_token_id
        pad = pad if pad is not None else eos if eos is not None else 0
        width = max(len(c) for c in contexts)
        ids = torch.full((len(contexts), width), pad, dtype=torch.long)
        mask = torch.zeros((len(contexts), width), dtype=torch.long)
        for r, c in enumerate(contexts):
            ids[r, width - len(c) :] = torch.as_tensor(c)
            mask[r, width - len(c) :] = 1
        config = GenerationConfig(
            max_new_tokens=max_new_tokens, do_sample=False, num_beams=1, eos_token_id=eos, pad_token_id=pad,
            temperature=1.0, top_p=1.0, repetition_penalty=1.0, no_repeat_ngram_size=0, min_new_tokens=0,
            return_dict_in_generate=True, output_logits=True,
        )
        processors = LogitsProcessorList(
            [] if temperature == 0 else [seeded_sampler(seeds, temperature, self.device)]
        )
        with torch.inference_mode():
            out = self.model.generate(
                input_ids=ids.to(self.device), attention_mask=mask.to(self.device), generation_config=config,
                logits_processor=processors,
            )
            new = out.sequences[:, width:]
            lps = torch.stack(
                [torch.log_softmax(step.float(), dim=-1).gather(-1, new[:, t : t + 1]).squeeze(-1)
                 for t, step in enumerate(out.logits)],
                dim=1,
            )
        return new.cpu().tolist(), list(lps.double().cpu().numpy())

    def describe(self) -> dict:
        return {
            "backend": "local",
            **{k: v for k, v in asdict(self.config).items() if k not in SPEED_FIELDS},
            "max_batch_tokens": self.budget.max_tokens,  # the cap in force (None: the memory budget)
            "resolved_device": str(self.device),
            "resolved_dtype": str(self.dtype).removeprefix("torch."),
            "context_tokens": self.context,
            "bos_id": self.bos_id,
        }


def _identity(x):
    return x
