"""The ``local:`` backend kind: its options (:class:`LocalOptions`) and its builder, registered
in :mod:`blackbox_mia.backends.options` (``local:PATH?device=cpu&dtype=float32``)."""

from __future__ import annotations

from dataclasses import dataclass

from ...option_names import named
from ...types import BlackboxMIAError
from ..base import Backend
from ..options import KindOptions, register_backend
from .config import LocalConfig

ENGINES = ("torch", "vllm")
"""Engines of ``local:`` models (:attr:`LocalOptions.engine`)."""

TORCH_ONLY = ("device", "batch_tokens", "threads", "max_memory_gb")
"""The :class:`LocalOptions` fields that only the torch engine reads."""


@dataclass(frozen=True)
class LocalOptions(KindOptions):
    """Settings of a ``local:`` model (query keys and ``--`` flags of the same names, but
    ``engine``: ``--local-engine``; ``max_memory_gb``: ``--max-memory``).

    Attributes:
        engine: ``torch`` (:mod:`blackbox_mia.backends.local`) or ``vllm``
            (:mod:`blackbox_mia.backends.vllm_engine`, extra ``vllm``; reads ``dtype`` only).
        device: torch device (``cpu``, ``cuda``, ``cuda:1``...); ``None``: CUDA when available.
        dtype: weights' dtype: ``float32``, ``bfloat16``, ``float16`` or ``auto`` (bfloat16 on
            CUDA, float32 on CPU).
        batch_tokens: padded tokens per forward pass at most, ≥ 1; ``None``: 8,192 off CUDA,
            and on CUDA the memory budget alone sizes a pass.
        threads: torch CPU threads, ≥ 1; ``None``: one per core, never more.
        max_memory_gb: memory budget of one forward pass beyond the weights, GiB, > 0;
            ``None``: from the device.

    Raises:
        BlackboxMIAError: a number out of its range.
    """

    ranges = {"batch_tokens": {"at_least": 1}, "threads": {"at_least": 1}, "max_memory_gb": {"above": 0}}

    engine: str = ENGINES[0]
    device: str | None = LocalConfig.device
    dtype: str = LocalConfig.dtype
    batch_tokens: int | None = LocalConfig.max_batch_tokens
    threads: int | None = LocalConfig.threads
    max_memory_gb: float | None = LocalConfig.max_memory_gb


@register_backend("local", LocalOptions, "local:PATH")
def build_local(model: str, options: LocalOptions) -> Backend:
    """A local model (directory or hub name) run by ``options.engine``; loads it now.

    Raises:
        BlackboxMIAError: no model, an unknown engine, torch-only settings with the vLLM
            engine, or the model cannot be loaded.
    """
    if not model:
        raise BlackboxMIAError("local: needs a model directory or hub name, e.g. local:gpt2")
    if options.engine == "vllm":
        unread = [name for name in TORCH_ONLY if getattr(options, name) != getattr(LocalOptions, name)]
        if unread:
            raise BlackboxMIAError(f"the vllm engine does not read {', '.join(unread)} (torch engine settings): drop them")
        from ..vllm_engine import VllmBackend, VllmConfig

        return VllmBackend(VllmConfig(model, dtype=options.dtype))
    if options.engine != "torch":
        raise BlackboxMIAError(f"unknown {named('engine', options.engine)} (local: option engine): use {' or '.join(ENGINES)}")
    from .backend import LocalBackend

    return LocalBackend(
        LocalConfig(
            model,
            device=options.device,
            dtype=options.dtype,
            max_batch_tokens=options.batch_tokens,
            threads=options.threads,
            max_memory_gb=options.max_memory_gb,
        )
    )
