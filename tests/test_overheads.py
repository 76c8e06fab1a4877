"""The analytic model's per-iteration costs that do not scale with FLOPs (analytic.yaml): the kernel
issue floor of a layer, the optimizer's bytes per parameter, fp16 loss scaling, per-bucket latency."""

from dataclasses import replace

import pytest

from fasop.estimators.analytic import cost as C
from fasop.estimators.analytic.layers import Recipe, Workload
from fasop.specs.architecture import gpt_architecture
from fasop.specs.catalog import default_params, find_gpu

ARCH = gpt_architecture(num_layers=2, hidden_size=256, num_attention_heads=4, vocab_size=1000, max_positions=128)
LINK = C.Link(bytes_per_s=1e9, latency_s=1e-5)


def _w(params, precision="bf16", mbs=1):
    return Workload(arch=ARCH, seq=128, mbs=mbs, tp=1, dp=2, pp=1, num_microbatches=1,
                    recipe=Recipe(precision=precision), params=params)


def test_a_tiny_layer_takes_its_kernels_issue_time():
    """20 + 40 kernels at 8 us: a 256-wide layer on an H100 is CPU-bound (0.16 ms fwd, 0.32 ms bwd)."""
    p = default_params()
    fwd, bwd = C.layer_s(_w(p), find_gpu("H100-SXM"), LINK)
    assert (fwd, bwd) == pytest.approx((20 * 8e-6, 40 * 8e-6))
    free = replace(p, kernel_launch_s=0.0)
    f0, b0 = C.layer_s(_w(free), find_gpu("H100-SXM"), LINK)
    assert f0 < fwd and b0 < bwd


def test_optimizer_bytes_per_precision_and_loss_scaling():
    p, gpu = default_params(), find_gpu("A100-SXM4-80GB")
    rate = gpu.memory_bytes_per_s * p.memory_bandwidth_efficiency
    n = 1e9
    assert C.optimizer_s(_w(p, "bf16"), n, gpu) == pytest.approx(n * 38 / rate)
    assert C.optimizer_s(_w(p, "fp16"), n, gpu) == pytest.approx(n * (38 + 8) / rate)   # + unscale / inf check
    assert C.optimizer_s(_w(p, "fp32"), n, gpu) == pytest.approx(n * 32 / rate)


def test_each_further_bucket_pays_one_launch_latency():
    """2 ranks: 2(n-1) = 2 ring latencies once, + 1 latency per bucket after the first."""
    p = replace(default_params(), gradient_bucket_bytes=1e6)
    grads = 10e6 / 4                    # 10 MB of fp32 gradients: 10 buckets
    sync = C.dp_sync_s(_w(p), grads, LINK)
    assert sync == pytest.approx(10e6 / 1e9 + (2 + 9) * 1e-5)
