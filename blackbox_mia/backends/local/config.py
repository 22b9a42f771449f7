"""Configuration of the local (torch) backend."""

from __future__ import annotations

from dataclasses import dataclass

from ...config import bounded, check_bounds

SPEED_FIELDS = ("threads", "max_memory_gb")
"""Fields of :class:`LocalConfig` that change how fast a pass runs, never its values: left out
of :meth:`LocalBackend.describe` so a run resumes whatever they are."""


@dataclass(frozen=True)
class LocalConfig:
    """Configuration of :class:`~blackbox_mia.backends.local.LocalBackend`.

    Attributes:
        model: local directory, Hugging Face hub name, or a GGUF file (``FILE.gguf``: its
            weights dequantized, see :func:`~blackbox_mia.hub.check_gguf`).
        device: ``"cuda"``, ``"cpu"``, ... ; ``None`` picks CUDA when available.
        dtype: ``"float32"``, ``"bfloat16"``, ``"float16"`` or ``"auto"`` (bfloat16 on CUDA,
            float32 on CPU). Everything after the output embedding (log-sum-exp, gather,
            statistics) is float32.
        max_batch_tokens: padded tokens per forward pass at most (batch size × longest row), ≥ 1;
            ``None``: :data:`~.resources.CPU_BATCH_TOKENS` off CUDA, and on CUDA no fixed cap: the
            memory budget alone sizes a pass (:func:`~.resources.token_cap`).
        max_length: context length in tokens; ``None`` reads it from the model config.
        bos: prepend the tokenizer's BOS token (then every text token is scored);
            ``None`` = when the tokenizer has one.
        vocab_stats: offer the ``full_distribution`` feature (μ_i, σ_i for Min-K%++); they are
            computed only for calls that ask for them.
        local_files_only: never contact the hub (also set by ``HF_HUB_OFFLINE=1``).
        threads: torch CPU threads of the backend's compute thread, ≥ 1; ``None``:
            :func:`~.resources.default_threads` (no oversubscription).
        max_memory_gb: memory budget of one forward pass beyond the weights, in GiB, > 0
            (``None``: :func:`~.resources.default_budget_bytes` of the device).

    Raises:
        BlackboxMIAError: a number out of its range (its field's :func:`~blackbox_mia.config.bounded`).
    """

    model: str
    device: str | None = None
    dtype: str = "auto"
    max_batch_tokens: int | None = bounded(None, at_least=1, integer=True)
    max_length: int | None = None
    bos: bool | None = None
    vocab_stats: bool = True
    local_files_only: bool = False
    threads: int | None = bounded(None, at_least=1, integer=True)
    max_memory_gb: float | None = bounded(None, above=0)

    def __post_init__(self) -> None:
        check_bounds(self)
