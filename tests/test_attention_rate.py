"""The fused attention kernel's rate by head width (fasop/estimators/analytic/attention_rate.py):
cuDNN's H100 forward rates in the FlashAttention-3 paper's Figure 5, 413 / 595 / 581 TFLOP/s at head
width 64 / 128 / 256, relative to 128 (where the GPUs' attention shares were measured)."""

import dataclasses

import pytest

from fasop.estimators.analytic import attention_rate as AR
from fasop.estimators.analytic import cost as C
from fasop.estimators.analytic.layers import Recipe, attention_core_flops
from fasop.specs.architecture import gpt_architecture
from fasop.specs.catalog import default_params, find_gpu
from fasop.specs.load import load_model

LINK = C.Link(100e9, 0.0)


def _gpt(heads: int):
    return gpt_architecture(num_layers=8, hidden_size=1024, num_attention_heads=heads, vocab_size=32000,
                            max_positions=1024)


def test_factor_at_the_measured_widths_by_hand():
    """Head width 128: 1; 64: 413 / 595; 256: 581 / 595; MLA (DeepSeek-V3: query-key 128 + 64 RoPE = 192,
    value 128) at their mean 160, log2-interpolated between 128 and 256 by hand."""
    assert AR.head_width_factor(load_model("llama-3-8b").architecture) == 1.0
    assert AR.head_width_factor(_gpt(16)) == pytest.approx(413 / 595)          # 1024 / 16 = 64
    assert AR.head_width_factor(_gpt(4)) == pytest.approx(581 / 595)           # 256
    dsv3 = load_model("deepseek-v3").architecture
    assert AR.head_width(dsv3) == 160
    # log2(160/128) = 0.3219 of the way from 128 to 256: (595 x 0.6781 + 581 x 0.3219) / 595
    assert AR.head_width_factor(dsv3) == pytest.approx(0.99243, abs=1e-5)
    assert AR.head_width_factor(load_model("gpt-oss-120b").architecture) == pytest.approx(413 / 595)


def test_widths_outside_the_measured_range_take_the_nearest():
    """No narrower than 64 nor wider than 256 was measured: 32 takes 64's rate, 512 takes 256's."""
    assert AR.head_width_factor(_gpt(32)) == AR.head_width_factor(_gpt(16))
    assert AR.head_width_factor(_gpt(2)) == AR.head_width_factor(_gpt(4))


def test_factor_is_monotone_up_to_128_and_never_above_it():
    """Narrower heads than 128 run slower (the softmax is a larger share), 128 is the fastest measured."""
    widths = [AR.head_width_factor(_gpt(1024 // d)) for d in (32, 64, 128)]
    assert widths == sorted(widths)
    assert max(AR.head_width_factor(_gpt(h)) for h in (1, 2, 4, 8, 16, 32, 64)) == 1.0


def test_narrow_heads_slow_only_the_attention_core():
    """Two layers with the same FLOPs (16 heads of 64 against 8 of 128, both 1024 wide) differ by exactly
    the 128-wide core's time x (595 / 413 - 1) in the forward, and 2.5 x that in the backward (twice the
    forward, plus the recomputed QK^T of FlashAttention's backward: 5 matmuls to the forward's 2)."""
    params = dataclasses.replace(default_params(), kernel_launch_s=0.0)
    gpu = find_gpu("H100-SXM")

    def layer(arch):
        w = C.Workload(arch=arch, seq=4096, mbs=2, tp=1, dp=1, pp=1, num_microbatches=1,
                       recipe=Recipe(), params=params)
        return C.layer_s(w, gpu, LINK)
    narrow, wide = layer(_gpt(16)), layer(_gpt(8))
    core_s = attention_core_flops(_gpt(8), 2, 4096, 1, 0.5) / (
        gpu.matmul_flops("bf16") / gpu.matmul_efficiency * gpu.attention_share(params))
    assert narrow[0] - wide[0] == pytest.approx(core_s * (595 / 413 - 1), rel=1e-9)
    assert narrow[1] - wide[1] == pytest.approx(2.5 * core_s * (595 / 413 - 1), rel=1e-9)
