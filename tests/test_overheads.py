"""The analytic model's per-iteration costs that do not scale with FLOPs (analytic.yaml): the kernel
issue floor of a layer, the optimizer's bytes per parameter, fp16 loss scaling, per-bucket latency."""

from dataclasses import replace

import pytest

from fasop.estimators.analytic import cost as C
from fasop.estimators.analytic import host
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


def test_a_runtime_that_drains_the_gpu_every_micro_batch_adds_the_issue_time():
    """micro_batch_sync (DeepSpeed's PipelineEngine): a layer pass costs GPU time + issue time, not
    their max; the GPU time is the same layer with issue free."""
    p, gpu = default_params(), find_gpu("H100-SXM")
    assert p.micro_batch_sync is False      # Megatron-LM / NeMo: the host queues ahead
    g_fwd, g_bwd = C.layer_s(_w(replace(p, kernel_launch_s=0.0), mbs=8), gpu, LINK)
    fwd, bwd = C.layer_s(_w(replace(p, micro_batch_sync=True), mbs=8), gpu, LINK)
    assert (fwd, bwd) == pytest.approx((g_fwd + 20 * 8e-6, g_bwd + 40 * 8e-6))
    queued = C.layer_s(_w(p, mbs=8), gpu, LINK)
    assert queued == pytest.approx((max(g_fwd, 20 * 8e-6), max(g_bwd, 40 * 8e-6)))
    assert fwd > queued[0] and bwd > queued[1]


def test_a_grace_host_issues_kernels_slower():
    """GH200's host is its Grace CPU: 19.7 us a kernel (TransformerEngine#2053: 33.17 / 13.48 x 8 us);
    an x86-hosted GPU keeps analytic.yaml's 8 us."""
    p = default_params()
    assert host.kernel_launch_s(p, find_gpu("GH200")) == pytest.approx(8e-6 * 33.17 / 13.48, rel=1e-3)
    assert host.kernel_launch_s(p, find_gpu("H100-SXM")) == 8e-6
    assert host.issue_s(p, find_gpu("GH200")) == pytest.approx((20 * 19.7e-6, 40 * 19.7e-6))
    # GB200 / GB300 trays are hosted by Grace CPUs too (one per two GPUs): the same issue time
    for name in ("GB200", "GB300"):
        assert host.issue_s(p, find_gpu(name)) == host.issue_s(p, find_gpu("GH200"))


def test_sailor_clusters_state_their_runtime():
    """Sailor's cluster files carry its runtime: DeepSpeed's synchronising PipelineEngine with blocking p2p, no fused
    weight-gradient accumulation (Megatron-DeepSpeed layers.py L360-368 commented out)."""
    from pathlib import Path
    from fasop.specs.load import load_cluster
    for name in ("sailor_clariden_cluster.yaml", "sailor_mit_cluster.yaml", "sailor_mit_v0_cluster.yaml"):
        params = load_cluster(str(Path(__file__).parent / "data" / name)).analytic
        assert params.micro_batch_sync and params.p2p_blocking and not params.gradient_accumulation_fusion, name


def test_blocking_p2p_pays_both_directions_of_a_boundary_each_cycle():
    """p2p_blocking (DeepSpeed's PipelineEngine): a stage's 1F1B cycle is F + B + 2 x (in + out)
    transfers, where paired sends (Megatron) overlap the activation and the gradient: F + B + (in + out)."""
    gpu = find_gpu("H100-SXM")
    slow = C.Link(1e9, 1e-5)
    hw = C.StageHardware(gpu=gpu, tp_link=LINK, dp_link=slow, next_link=slow, memory_limit_bytes=1e15)
    stages = (hw, replace(hw, next_link=None))
    arch = replace(ARCH, vocab_size=8, tied_embeddings=False, max_positions=0)

    def step(blocking):
        p = replace(default_params(), p2p_blocking=blocking)
        w = Workload(arch=arch, seq=128, mbs=1, tp=1, dp=1, pp=2, num_microbatches=8, recipe=Recipe(), params=p)
        return C.step(w, stages, (1, 1))
    paired, blocking = step(False), step(True)
    transfer = paired.p2p_s[0]
    assert transfer == pytest.approx(128 * 256 * 2 / 1e9 + 1e-5)     # b·s·h 16-bit values + the latency
    cycle = max(f + b for f, b in zip(paired.stage_fwd_s, paired.stage_bwd_s))
    assert paired.pipeline_s == pytest.approx(8 * (cycle + transfer) + (min(
        f + b for f, b in zip(paired.stage_fwd_s, paired.stage_bwd_s)) + transfer))
    assert blocking.pipeline_s - paired.pipeline_s == pytest.approx(9 * transfer)   # (m + p - 1) cycles, one more each
