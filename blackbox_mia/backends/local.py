"""White-box backend: any Hugging Face causal LM through torch (CUDA when present, else CPU).

It is the drop-in for the black-box API backend and the ground truth the tracker is validated
against. One forward pass per text (per window, for texts longer than the context) serves every
scorer: it yields lp_i and, for Min-K%++, the per-position vocabulary mean μ_i and standard
deviation σ_i of log p.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import numpy as np
from tqdm.auto import tqdm

from ..text.windows import sliding_windows
from ..types import BlackboxMIAError, Provenance, TokenLogprobs
from .base import Backend, OnDone, check_texts

SequenceResult = tuple[np.ndarray, np.ndarray | None, np.ndarray | None]
"""``(lp, mu, sigma)`` of one id sequence, each of shape (L-1,) (``mu``/``sigma`` may be None)."""


@dataclass(frozen=True)
class LocalConfig:
    """Configuration of :class:`LocalBackend`.

    Attributes:
        model: local directory or Hugging Face hub name.
        device: ``"cuda"``, ``"cpu"``, ... ; ``None`` picks CUDA when available.
        dtype: ``"float32"``, ``"bfloat16"``, ``"float16"`` or ``"auto"`` (bfloat16 on CUDA,
            float32 on CPU). Log-softmax is always taken in float32.
        max_batch_tokens: padded tokens per forward pass (batch size × longest row).
        max_length: context length in tokens; ``None`` reads it from the model config.
        bos: prepend the tokenizer's BOS token (then every text token is scored);
            ``None`` = when the tokenizer has one.
        vocab_stats: compute μ_i, σ_i for Min-K%++.
        local_files_only: never contact the hub (also set by ``HF_HUB_OFFLINE=1``).
    """

    model: str
    device: str | None = None
    dtype: str = "auto"
    max_batch_tokens: int = 8192
    max_length: int | None = None
    bos: bool | None = None
    vocab_stats: bool = True
    local_files_only: bool = False


class LocalBackend(Backend):
    """Per-token log-probs from a local causal LM.

    Args:
        config: a :class:`LocalConfig`.

    Raises:
        BlackboxMIAError: torch/transformers missing, or the model cannot be loaded.
    """

    def __init__(self, config: LocalConfig):
        try:
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise BlackboxMIAError(
                "the local backend needs torch and transformers: pip install 'blackbox_mia[local]'"
            ) from exc
        self.config = config
        self._torch = torch
        self.device = self._resolve_device(config.device)
        dtype_name = config.dtype
        if dtype_name == "auto":
            dtype_name = "bfloat16" if self.device.type == "cuda" else "float32"
        if dtype_name not in ("float32", "bfloat16", "float16"):
            raise BlackboxMIAError(f"unknown dtype {config.dtype!r}: use float32, bfloat16, float16 or auto")
        self.dtype = getattr(torch, dtype_name)
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(config.model, local_files_only=config.local_files_only)
            self.model = AutoModelForCausalLM.from_pretrained(
                config.model, dtype=self.dtype, local_files_only=config.local_files_only
            )
        except (OSError, ValueError) as exc:
            raise BlackboxMIAError(f"cannot load model {config.model!r}: {exc}") from exc
        try:
            self.model.to(self.device).eval()
        except (RuntimeError, AssertionError) as exc:  # torch's "not compiled with CUDA", out of memory...
            raise BlackboxMIAError(f"cannot put model {config.model!r} on device {self.device}: {exc}") from exc
        self.context = config.max_length or self._model_context()
        self.bos_id = self.tokenizer.bos_token_id if config.bos in (None, True) else None
        if config.bos and self.bos_id is None:
            raise BlackboxMIAError(f"bos=True but the tokenizer of {config.model!r} has no BOS token")
        self.provides_vocab_stats = config.vocab_stats
        self.vocab_size = int(self.model.get_output_embeddings().weight.shape[0])

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
            raise BlackboxMIAError(f"unknown --device {name!r}: use cpu, cuda, cuda:N, mps, ...") from exc
        if device.type == "cuda":
            count = torch.cuda.device_count() if torch.cuda.is_available() else 0
            if count == 0:
                raise BlackboxMIAError(f"--device {name}: CUDA is not available (no GPU, or torch built without CUDA)")
            if device.index is not None and device.index >= count:
                raise BlackboxMIAError(f"--device {name}: only {count} CUDA device(s) here (cuda:0..cuda:{count - 1})")
        return device

    def _model_context(self) -> int:
        cfg = self.model.config
        for attr in ("max_position_embeddings", "n_positions", "seq_length"):
            value = getattr(cfg, attr, None)
            if isinstance(value, int) and value > 0:
                return value
        return min(int(self.tokenizer.model_max_length), 2048)

    # -- tokenization ---------------------------------------------------------------------

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` as plain text: no BOS/EOS added, and special-token strings in
        the text (``"<|endoftext|>"``) are split into ordinary tokens, never mapped to the
        special ids (a text cannot end or reset the model's context by quoting them)."""
        return self.tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]

    def decode_tokens(self, ids: Sequence[int]) -> list[str]:
        """Each id decoded on its own (byte-level pieces may show as U+FFFD)."""
        return self.tokenizer.batch_decode([[int(i)] for i in ids])

    def full_ids(self, text_ids: Sequence[int]) -> list[int]:
        """The sequence fed to the model: BOS (when used) followed by the text's tokens."""
        return ([self.bos_id] if self.bos_id is not None else []) + list(text_ids)

    # -- log-probs ---------------------------------------------------------------------------

    def logprobs(
        self, texts: Sequence[str], progress: bool = False, on_done: OnDone | None = None
    ) -> list[TokenLogprobs]:
        """Log-probs of every text (see :meth:`Backend.logprobs`); ``on_done`` is called for
        the texts whose windows all lie in a forward batch as soon as that batch is done
        (texts run longest first).

        Raises:
            BlackboxMIAError: an empty text, or a single-token text when the model has no BOS.
        """
        check_texts(texts)
        provenance = Provenance("local", self.config.model, "forward", self.bos_id is not None)
        sequences = [self.full_ids(self.encode(t)) for t in texts]
        for i, seq in enumerate(sequences):
            if len(seq) < 2:
                raise BlackboxMIAError(
                    f"text #{i} ({texts[i]!r}) has a single token and the model has no BOS: nothing to score"
                )
        out: list[TokenLogprobs | None] = [None] * len(texts)

        def finish(s: int, result: SequenceResult) -> None:
            lp, mu, sigma = result
            seq = sequences[s]
            out[s] = TokenLogprobs(
                token_ids=np.asarray(seq[1:]),
                tokens=self.decode_tokens(seq[1:]),
                logprobs=lp,
                context_ids=(seq[0],),
                provenance=provenance,
                mu=mu,
                sigma=sigma,
            )
            if on_done is not None:
                on_done(s, out[s])

        self.sequence_logprobs(sequences, progress=progress, on_done=finish)
        return out  # type: ignore[return-value]  (finish filled every slot)

    def sequence_logprobs(
        self,
        sequences: Sequence[Sequence[int]],
        progress: bool = False,
        on_done: Callable[[int, SequenceResult], None] | None = None,
    ) -> list[SequenceResult]:
        """lp_j = log p(seq[j] | seq[:j]) for j = 1..L-1 of every id sequence (float64, nats).

        Returns per sequence ``(lp, mu, sigma)``, each of shape (L-1,); ``mu``/``sigma`` are
        ``None`` unless ``vocab_stats``. Long sequences are split by :func:`sliding_windows`;
        windows are packed into batches of at most ``max_batch_tokens`` padded tokens, longest
        sequence first, each sequence's windows together. ``on_done(index, result)`` is called for each sequence right after the batch
        holding its last window.
        """
        rows = []  # (sequence index, start, end, first_target)
        for s, seq in enumerate(sequences):
            rows.extend((s, *w) for w in sliding_windows(len(seq), self.context))
        remaining = [0] * len(sequences)  # windows not computed yet, per sequence
        for s, *_ in rows:
            remaining[s] += 1
        out_lp = [np.empty(len(seq) - 1) for seq in sequences]
        stats = self.config.vocab_stats
        out_mu = [np.empty(len(seq) - 1) for seq in sequences] if stats else None
        out_sd = [np.empty(len(seq) - 1) for seq in sequences] if stats else None

        def result(s: int) -> SequenceResult:
            return (out_lp[s], out_mu[s], out_sd[s]) if stats else (out_lp[s], None, None)

        # Sequences longest first (by their first, widest window), each sequence's windows kept
        # together: a long text finishes, and is reported, as soon as its own windows ran.
        first_width = [min(len(seq), self.context) for seq in sequences]
        order = sorted(range(len(rows)), key=lambda r: (-first_width[rows[r][0]], rows[r][0], rows[r][1]))
        bar = tqdm(total=sum(len(s) for s in sequences), unit="tok", disable=not progress, desc="forward")
        try:
            for batch in self._pack(order, [rows[r][2] - rows[r][1] for r in range(len(rows))]):
                windows = [rows[r] for r in batch]
                lp, mu, sd = self._forward([sequences[s][a:b] for s, a, b, _ in windows])
                finished = []
                for row, (s, a, b, first) in enumerate(windows):
                    # column c of the window predicts absolute target a + c + 1
                    cols = slice(first - a - 1, b - a - 1)
                    out_lp[s][first - 1 : b - 1] = lp[row, cols]
                    if stats:
                        out_mu[s][first - 1 : b - 1] = mu[row, cols]
                        out_sd[s][first - 1 : b - 1] = sd[row, cols]
                    bar.update(b - first)
                    remaining[s] -= 1
                    if remaining[s] == 0:
                        finished.append(s)
                if on_done is not None:
                    for s in finished:
                        on_done(s, result(s))
        finally:
            bar.close()
        return [result(s) for s in range(len(sequences))]

    def _pack(self, order: list[int], lengths: list[int]):
        """Greedy packing of rows, in ``order``, into batches whose padded size (rows × widest
        row) stays within ``max_batch_tokens`` (a single row may exceed it)."""
        batch: list[int] = []
        width = 0
        for r in order:
            if batch and (len(batch) + 1) * max(width, lengths[r]) > self.config.max_batch_tokens:
                yield batch
                batch, width = [], 0
            batch.append(r)
            width = max(width, lengths[r])
        if batch:
            yield batch

    def _pad(self, rows: Sequence[Sequence[int]]):
        """Right-padded ids and attention mask, shape (B, longest row), on the model's device."""
        torch = self._torch
        width = max(len(r) for r in rows)
        ids = torch.zeros((len(rows), width), dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, : len(r)] = torch.as_tensor(list(r))
            mask[i, : len(r)] = 1
        return ids.to(self.device), mask.to(self.device)

    def _forward(self, rows: list[Sequence[int]]):
        """One padded forward pass; returns float64 arrays (B, T-1): lp, mu, sigma."""
        torch = self._torch
        ids, mask = self._pad(rows)
        with torch.inference_mode():
            logits = self.model(input_ids=ids, attention_mask=mask).logits[:, :-1].float()
            logp = torch.log_softmax(logits, dim=-1)
            lp = logp.gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
            mu = sd = None
            if self.config.vocab_stats:
                p = logp.exp()
                logp_c = logp.clamp_min(-1e4)  # 0 · (-inf) would give NaN
                mu = (p * logp_c).sum(-1)
                # centred form: E[x²] − μ² cancels catastrophically in float32
                sd = (p * (logp_c - mu.unsqueeze(-1)).square()).sum(-1).sqrt()
                mu, sd = mu.double().cpu().numpy(), sd.double().cpu().numpy()
        return lp.double().cpu().numpy(), mu, sd

    def next_token_logprobs(self, prefixes: Sequence[Sequence[int]]) -> np.ndarray:
        """log p(v | prefix) over the whole vocabulary for each prefix: float32 array (B, V), nats.

        Prefixes longer than the context keep their last ``context`` tokens.

        Raises:
            BlackboxMIAError: an empty prefix.
        """
        torch = self._torch
        if any(len(p) == 0 for p in prefixes):
            raise BlackboxMIAError("empty prefix: a next-token distribution needs at least one token")
        rows = [list(p)[-self.context :] for p in prefixes]
        out = np.empty((len(rows), self.vocab_size), dtype=np.float32)
        order = sorted(range(len(rows)), key=lambda r: len(rows[r]), reverse=True)
        for batch in self._pack(order, [len(r) for r in rows]):
            ids, mask = self._pad([rows[r] for r in batch])
            last = torch.as_tensor([len(rows[r]) - 1 for r in batch], device=self.device)
            with torch.inference_mode():
                logits = self.model(input_ids=ids, attention_mask=mask).logits
                picked = logits[torch.arange(len(batch), device=self.device), last].float()
                out[batch] = torch.log_softmax(picked, dim=-1).cpu().numpy()
        return out

    def prompt_top_logprobs(self, ids: Sequence[int], n: int) -> list[tuple[float, tuple[tuple[int, float], ...]]]:
        """For j = 1..L-1: ``(log p(ids[j] | ids[:j]), top-n ((id, log-prob), ...))`` in nats.

        One unpadded forward pass; the caller keeps ``len(ids)`` within the context. ``n = 0``
        gives empty top-n tuples.
        """
        torch = self._torch
        with torch.inference_mode():
            x = torch.as_tensor([list(ids)], device=self.device)
            logits = self.model(input_ids=x, attention_mask=torch.ones_like(x)).logits
            logp = torch.log_softmax(logits[0, :-1].float(), dim=-1)
            actual = logp.gather(-1, x[0, 1:].unsqueeze(-1)).squeeze(-1).cpu().numpy()
            if n > 0:
                values, indices = logp.topk(min(n, logp.shape[-1]), dim=-1)
                values, indices = values.cpu().numpy(), indices.cpu().numpy()
        return [
            (float(actual[j]), tuple(zip(indices[j].tolist(), values[j].tolist())) if n > 0 else ())
            for j in range(len(ids) - 1)
        ]

    def describe(self) -> dict:
        return {
            "backend": "local",
            **asdict(self.config),
            "resolved_device": str(self.device),
            "resolved_dtype": str(self.dtype).removeprefix("torch."),
            "context_tokens": self.context,
            "bos_id": self.bos_id,
        }
