"""What one forward pass of a local model may use: CPU threads, and a memory budget turned into
batch shapes.

A forward pass over B rows of width T (padded tokens N = B·T) holds, besides the weights, the
activations of about one layer at a time, and the logits of one chunk of positions (see
:mod:`.reduce`). :class:`ForwardBudget` sizes both against one budget in bytes, so a batch is
sized by tokens × vocabulary and hidden size, not by tokens alone.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from .reduce import chunk_positions

GIB = 1 << 30

MAX_DEFAULT_THREADS = 4
"""Default torch CPU threads never exceed this: past it a forward pass gains little and a
shared machine loses a lot."""

CPU_BUDGET_SHARE = 0.25
"""Default CPU budget: this share of the memory available (``MemAvailable``) ..."""

CPU_BUDGET_CAP_GIB = 0.25
"""... capped at this many GiB: on CPU, passes larger than this are not faster (measured with
``benchmarks/bench_local.py``), they only add memory."""

GPU_BUDGET_SHARE = 0.5
"""Default GPU budget: this share of the device memory free once the model is loaded."""

LOGIT_SHARE = 0.25
"""Share of the budget given to the logits of one chunk of positions; the rest to activations."""

HIDDEN_COPIES = 8
"""Activation tensors of hidden size alive per token inside one layer (residual, norms, q/k/v,
attention output, projections): an estimate, calibrated by peak-RSS measurements."""

INTERMEDIATE_COPIES = 2
"""MLP tensors of intermediate size alive per token (the up projection and its activation)."""

SCORE_COPIES = 2
"""Attention scores per token and head, of the row width each (the scores and their softmax)."""


def default_threads() -> int:
    """Torch CPU threads that do not oversubscribe the machine: the cores this process may run
    on, less the load already running on them (1-minute load average), between 1 and
    :data:`MAX_DEFAULT_THREADS`.

    A second thread on a core another process keeps busy makes torch's thread team wait on
    each other at every operation: on a loaded 2-core machine one text at a time ran 15-19×
    slower with 2 threads than with 1.
    """
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    try:
        busy = round(os.getloadavg()[0])
    except OSError:  # no load average on this platform
        busy = 0
    return max(1, min(MAX_DEFAULT_THREADS, cores - busy))


def available_ram_bytes() -> int | None:
    """``MemAvailable`` from ``/proc/meminfo`` in bytes, or None where there is no such file."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def default_budget_bytes(torch, device) -> int:
    """The default memory budget of one forward pass on ``device``, in bytes.

    CUDA: :data:`GPU_BUDGET_SHARE` of the free device memory. Elsewhere:
    :data:`CPU_BUDGET_SHARE` of the available RAM, at most :data:`CPU_BUDGET_CAP_GIB` GiB
    (the cap alone when the available RAM is unknown).
    """
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free * GPU_BUDGET_SHARE)
    cap = int(CPU_BUDGET_CAP_GIB * GIB)
    available = available_ram_bytes()
    return cap if available is None else min(cap, int(available * CPU_BUDGET_SHARE))


CPU_BATCH_TOKENS = 8192  # padded tokens per pass off CUDA when no cap is given (records/measured-settings.md)


def token_cap(device, max_batch_tokens: int | None) -> int | None:
    """The fixed cap on padded tokens per pass on ``device``: ``max_batch_tokens`` when given;
    else :data:`CPU_BATCH_TOKENS` on CPU and other devices, and none on CUDA, where the memory
    budget alone sizes a pass (:meth:`ForwardBudget.rows_per_pass`): a fixed 8,192 bound a 139 GB GPU's
    passes long before its memory did."""
    if max_batch_tokens is not None:
        return max_batch_tokens
    return None if device.type == "cuda" else CPU_BATCH_TOKENS


@dataclass(frozen=True)
class ModelShape:
    """The sizes that set a forward pass's memory.

    Attributes:
        hidden: hidden size; intermediate: MLP inner size; heads: attention heads;
        vocab: output vocabulary (logit columns); dtype_bytes: bytes per activation element.
    """

    hidden: int
    intermediate: int
    heads: int
    vocab: int
    dtype_bytes: int

    @classmethod
    def of(cls, model, vocab: int, dtype_bytes: int) -> ModelShape:
        """The shape of a Hugging Face model from its config (GPT-2's ``n_embd``/``n_inner``
        names too; the MLP defaults to 4 × hidden, heads to 1 when the config has none)."""
        cfg = model.config
        hidden = _first_int(cfg, ("hidden_size", "n_embd", "d_model")) or model.get_output_embeddings().weight.shape[1]
        intermediate = _first_int(cfg, ("intermediate_size", "n_inner", "ffn_dim")) or 4 * hidden
        heads = _first_int(cfg, ("num_attention_heads", "n_head")) or 1
        return cls(int(hidden), int(intermediate), int(heads), int(vocab), dtype_bytes)

    def activation_bytes(self, width: int) -> int:
        """Activation bytes of one padded token in a row of ``width`` tokens."""
        per_token = HIDDEN_COPIES * self.hidden + INTERMEDIATE_COPIES * self.intermediate + SCORE_COPIES * self.heads * width
        return per_token * self.dtype_bytes


def _first_int(cfg, names: tuple[str, ...]) -> int | None:
    for name in names:
        value = getattr(cfg, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


@dataclass(frozen=True)
class ForwardBudget:
    """Batch shapes of one forward pass under a memory budget.

    Attributes:
        budget_bytes: memory of one pass beyond the weights, in bytes.
        max_tokens: padded tokens per pass at most, whatever the memory; ``None``: no fixed
            cap (:func:`token_cap`).
        shape: the model's :class:`ModelShape`.
    """

    budget_bytes: int
    max_tokens: int | None
    shape: ModelShape

    @property
    def chunk(self) -> int:
        """Positions whose logits are reduced at once (:func:`~.reduce.chunk_positions` of
        :data:`LOGIT_SHARE` of the budget)."""
        return chunk_positions(self.shape.vocab, int(self.budget_bytes * LOGIT_SHARE))

    def capacity(self, width: int) -> int:
        """Padded tokens of rows ``width`` tokens wide whose activations fit the budget's share
        (1 − :data:`LOGIT_SHARE`) and the token cap, at least one row's."""
        activations = int(self.budget_bytes * (1 - LOGIT_SHARE))
        tokens = activations // self.shape.activation_bytes(width)
        if self.max_tokens is not None:
            tokens = min(tokens, self.max_tokens)
        return max(width, tokens)

    def rows_per_pass(self, width: int) -> int:
        """Rows ``width`` tokens wide that make one pass: :meth:`capacity` over ``width``, at
        least 1 (a single row always runs, even past the budget)."""
        return self.capacity(width) // width
