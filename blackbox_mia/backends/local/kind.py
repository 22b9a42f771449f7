"""The ``local:`` backend kind: its options (:class:`LocalOptions`) and its builder, registered
in :mod:`blackbox_mia.backends.options` (``local:PATH?device=cpu&dtype=float32``)."""

from __future__ import annotations

from dataclasses import dataclass

from ...option_names import named
from ...types import BlackboxMIAError
from ..base import Backend
from ..options import KindOptions, configured, register_backend, setting
from .config import LocalConfig

ENGINES = ("torch", "vllm")
"""Engines of ``local:`` models (:attr:`LocalOptions.engine`)."""

TORCH_ONLY = ("device", "batch_tokens", "threads", "max_memory_gb")
"""The :class:`LocalOptions` fields that only the torch engine reads."""


PANEL = "Local model"
"""The ``--help`` panel of the local kind's flags."""


@dataclass(frozen=True)
class LocalOptions(KindOptions):
    """Settings of a ``local:`` model: query keys, and ``--`` flags of the same names but
    ``engine``: ``--local-engine``; ``max_memory_gb``: ``--max-memory`` (each field's
    :func:`~..options.setting` is its one home: default, range, flag, help, the
    :class:`LocalConfig` field it fills).

    Attributes:
        engine: ``torch`` (:mod:`blackbox_mia.backends.local`) or ``vllm``
            (:mod:`blackbox_mia.backends.vllm_engine`, extra ``vllm``; reads ``dtype`` only).
        device: torch device (``cpu``, ``cuda``, ``cuda:1``...); ``None``: CUDA when available.
        dtype: weights' dtype: ``float32``, ``bfloat16``, ``float16`` or ``auto`` (bfloat16 on
            CUDA, float32 on CPU).
        batch_tokens: padded tokens per forward pass at most, ≥ 1 (``LocalConfig.max_batch_tokens``);
            ``None``: 8,192 off CUDA, and on CUDA the memory budget alone sizes a pass.
        threads: torch CPU threads, ≥ 1; ``None``: one per core, never more.
        max_memory_gb: memory budget of one forward pass beyond the weights, GiB, > 0;
            ``None``: from the device.

    Raises:
        BlackboxMIAError: a number out of its range.
    """

    engine: str = setting(ENGINES[0], flag="--local-engine", help="torch, or vllm (extra 'vllm')", panel=PANEL)
    device: str | None = setting(help="torch device (default: cuda when available)", panel=PANEL,
                                 source=(LocalConfig, "device"))
    dtype: str = setting(help="float32, bfloat16, float16 or auto", panel=PANEL, source=(LocalConfig, "dtype"))
    batch_tokens: int | None = setting(
        help="padded tokens per forward pass at most (default: 8192 on CPU, the memory budget on CUDA)", panel=PANEL,
        source=(LocalConfig, "max_batch_tokens"))
    threads: int | None = setting(help="torch CPU threads (default: one per core, never more)", panel=PANEL,
                                  source=(LocalConfig, "threads"))
    max_memory_gb: float | None = setting(
        flag="--max-memory", help="memory budget of one forward pass in GiB (default: from the device)", panel=PANEL,
        source=(LocalConfig, "max_memory_gb"))


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

    return LocalBackend(LocalConfig(model, **configured(LocalConfig, options)))
