"""The fused attention kernel's rate by head width: the share of the GPU's FlashAttention rate
(gpus.yaml `fused_attention_efficiency`, measured at head width 128 on H100 / H200 / GH200 and B200;
analytic.yaml's 0.5 for the others, FlashAttention-2's range) that a model's head width reaches
(docs/estimators.md "Attention rate by head width").

A FlashAttention kernel's two matmuls grow with the head width d, its softmax (the exponentials,
the row max and sum, the rescaling) does not: it works once per score. So narrower heads spend a
larger share of the kernel on the softmax, and the FLOP rate falls; wider heads run out of
registers and shared memory instead, so the rate does not keep rising."""

from __future__ import annotations

import math

from fasop.specs.architecture import Architecture


CUDNN_FORWARD_TFLOPS = {64: 413.0, 128: 595.0, 256: 581.0}
"""cuDNN's fused attention forward on an H100 80GB SXM5, BF16, non-causal, sequence 16k, by head
width (Shah et al. 2024, "FlashAttention-3", arXiv 2407.08608, Figure 5 "Attention forward speed,
head dim 64 / 128 / 256": its cuDNN bars). cuDNN is the kernel Transformer Engine's FusedAttention
runs in the Megatron-Core recipes most published runs come from. The same figure's FlashAttention-3
bars fall the same way below 128 (497 / 648 / 756: 0.77 at 64)."""

REFERENCE_WIDTH = 128
"""The head width the GPUs' measured attention shares were taken at (Llama and GPT models)."""


def head_width(a: Architecture) -> float:
    """The width the kernel's two matmuls run at on average: the head dim, or MLA's mean of its
    query-key width (no-RoPE + RoPE) and value width, each one of the two matmuls."""
    if a.mla is not None:
        return (a.mla.qk_head_dim + a.mla.v_head_dim) / 2
    return float(a.head_dim)


def head_width_factor(a: Architecture) -> float:
    """Rate at the model's head width over the rate at REFERENCE_WIDTH, interpolated in log2 of the
    width between the measured widths; outside them, the nearest measured width's (no narrower or
    wider head was measured)."""
    widths = sorted(CUDNN_FORWARD_TFLOPS)
    d = min(max(head_width(a), widths[0]), widths[-1])
    for lo, hi in zip(widths, widths[1:]):
        if d <= hi:
            f = (math.log2(d) - math.log2(lo)) / (math.log2(hi) - math.log2(lo))
            rate = CUDNN_FORWARD_TFLOPS[lo] * (1 - f) + CUDNN_FORWARD_TFLOPS[hi] * f
            return rate / CUDNN_FORWARD_TFLOPS[REFERENCE_WIDTH]
    raise AssertionError("unreachable: d is clamped to the measured widths")
