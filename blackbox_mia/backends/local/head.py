"""The output embedding as the scoring passes apply it: on CUDA, with its rows padded to a
multiple of :data:`HEAD_ROW_MULTIPLE`.

The output embedding maps hidden states (n, H) to logits (n, V). GPT-2's V = 50,257 is odd: the
(n, V) product then has no 16-byte-aligned leading dimension and cuBLAS falls back to older, slower
kernels (on an H200, a gpt2-1b scoring call spent 27% of its GPU time there, at about 100 TFLOP/s
against the body's 370; nanoGPT pads GPT-2's vocabulary to 50,304 for this reason). A copy of the
weight padded with zero rows makes the product aligned; the padding columns are cut off before
anything reads the logits (log-sum-exp, gather, μ, σ), so the values are those of the model's own
head.
"""

from __future__ import annotations

HEAD_ROW_MULTIPLE = 64
"""On CUDA, output-embedding rows are padded to a multiple of this (64 bf16 values: 128 bytes)."""


def head_row_multiple(device) -> int:
    """Rows of the scoring head are padded to a multiple of this on ``device``:
    :data:`HEAD_ROW_MULTIPLE` on CUDA, 1 (no padding, no copy) elsewhere, where the CPU's
    matrix products run odd widths at full speed."""
    return HEAD_ROW_MULTIPLE if device.type == "cuda" else 1


class PaddedHead:
    """An output embedding ``linear`` (weight (V, H), optional bias (V,)) applied through a copy
    whose rows are padded with zeros to a multiple of ``multiple``: ``head(hidden)`` maps (n, H) to
    the (n, V) logits of ``linear(hidden)`` (a view of the padded (n, V') product: its first V
    columns).

    The copy costs V' × H values of the weight's dtype on its device (gpt2-7b: 412 MB in bf16).
    """

    def __init__(self, torch, linear, multiple: int):
        weight = linear.weight.detach()
        bias = getattr(linear, "bias", None)
        self.vocab, hidden = weight.shape
        rows = -(-self.vocab // multiple) * multiple
        self.weight = weight.new_zeros((rows, hidden))
        self.weight[: self.vocab] = weight
        self.bias = None
        if bias is not None:
            self.bias = bias.detach().new_zeros(rows)
            self.bias[: self.vocab] = bias.detach()
        self._linear = torch.nn.functional.linear

    def __call__(self, hidden):
        return self._linear(hidden, self.weight, self.bias)[:, : self.vocab]


def scoring_head(torch, linear, multiple: int):
    """``linear`` itself when its rows are a multiple of ``multiple`` already, else a
    :class:`PaddedHead` of it."""
    if linear.weight.shape[0] % multiple == 0:
        return linear
    return PaddedHead(torch, linear, multiple)
