"""The analytic cost model's closed forms and invariants (fasop/estimators/analytic/cost.py, analytic_layers.py)."""

import dataclasses

import pytest

from fasop.estimators.analytic import cost as C
from fasop.estimators.analytic.layers import Recipe, attention_core_flops, layer_linear_flops, total_params, wave_efficiency
from fasop.specs.architecture import gpt_architecture
from fasop.specs.catalog import default_params, find_gpu
from fasop.specs.load import load_model

PARAMS = default_params()
ARCH = gpt_architecture(num_layers=8, hidden_size=1024, num_attention_heads=16, vocab_size=32000, max_positions=1024)
LINK = C.Link(100e9, 0.0)


def test_ring_collectives():
    """Ring all-reduce moves 2(n-1)/n of the buffer per rank; RS and AG half of that; one rank: free."""
    assert C.all_reduce_s(8e9, 4, LINK) == pytest.approx(2 * 3 / 4 * 8e9 / 100e9)
    assert C.gather_s(8e9, 4, LINK) == pytest.approx(3 / 4 * 8e9 / 100e9)
    assert C.all_reduce_s(8e9, 1, LINK) == 0.0
    assert C.all_reduce_s(0, 4, C.Link(1e9, 1e-5)) == pytest.approx(6e-5)  # 2(n-1) latencies


def test_flops_per_layer_match_narayanan():
    """Forward FLOPs of a GPT layer: 24bsh^2 + 4bs^2h (Narayanan et al. 2021, Eq. 3 derivation)."""
    b, s, h = 2, 1024, 1024
    assert layer_linear_flops(ARCH, b, s, 1) == 24 * b * s * h * h
    assert attention_core_flops(ARCH, b, s, 1, 1.0) == 4 * b * s * s * h
    assert layer_linear_flops(ARCH, b, s, 4) == 24 * b * s * h * h / 4


def test_shipped_models_have_their_published_sizes():
    """Parameter counts of the shipped HF configs: Llama 3 8B / 70B / 405B, Qwen2.5-7B."""
    sizes = {"llama-3-8b": 8.03e9, "llama-3-70b": 70.55e9, "llama-3.1-405b": 405.85e9, "qwen2.5-7b": 7.62e9}
    for name, n in sizes.items():
        assert total_params(load_model(name).architecture) == pytest.approx(n, rel=2e-3), name


def _uniform(pp, m, virtual=1):
    gpu = find_gpu("H100-SXM")
    fast = C.Link(1e30, 0.0)  # p2p and the interleaved wrap cost nothing: only compute and the bubble
    hw = C.StageHardware(gpu=gpu, tp_link=LINK, dp_link=fast, next_link=fast, memory_limit_bytes=1e15)
    stages = tuple(dataclasses.replace(hw, next_link=None if i == pp - 1 else hw.next_link) for i in range(pp))
    w = C.Workload(arch=ARCH, seq=1024, mbs=1, tp=1, dp=1, pp=pp, num_microbatches=m,
                   recipe=Recipe(virtual_stages=virtual), params=PARAMS)
    return w, stages


def test_one_stage_has_no_bubble_and_the_pipeline_bubble_is_p_minus_1():
    """1 stage: m cycles; p equal stages: (m + p - 1) cycles; interleaved: (m + (p - 1)/v).
    A vocabulary of 8 makes the embedding and head negligible, so the stages are equal."""
    w, stages = _uniform(1, 8)
    one = C.step(w, stages, (8,))
    assert one.pipeline_s == pytest.approx(8 * (one.stage_fwd_s[0] + one.stage_bwd_s[0]))
    arch = dataclasses.replace(ARCH, vocab_size=8, tied_embeddings=False, max_positions=0)
    for virtual in (1, 2):
        w, stages = _uniform(4, 8, virtual)
        w = dataclasses.replace(w, arch=arch)
        cycle = 2 * sum(C.layer_s(w, stages[0].gpu, LINK))
        step = C.step(w, stages, (2, 2, 2, 2))
        assert step.pipeline_s == pytest.approx((8 + 3 / virtual) * cycle, rel=1e-2)


def test_more_bandwidth_or_memory_speed_is_never_slower():
    w, stages = _uniform(4, 8)
    base = C.step(w, stages, (2, 2, 2, 2)).step_s
    faster_links = tuple(dataclasses.replace(hw, tp_link=C.Link(200e9, 0.0), dp_link=C.Link(200e9, 0.0))
                         for hw in stages)
    assert C.step(w, faster_links, (2, 2, 2, 2)).step_s <= base
    quick = dataclasses.replace(stages[0].gpu, memory_bytes_per_s=2 * stages[0].gpu.memory_bytes_per_s)
    assert C.step(w, tuple(dataclasses.replace(hw, gpu=quick) for hw in stages), (2, 2, 2, 2)).step_s < base


def test_recompute_costs_time_and_saves_memory():
    w, stages = _uniform(2, 8)
    times, memory = {}, {}
    for mode in ("none", "selective", "full"):
        wm = dataclasses.replace(w, recipe=Recipe(recompute=mode), params=dataclasses.replace(PARAMS, fused_attention=False))
        times[mode] = C.step(wm, stages, (4, 4)).step_s
        memory[mode] = C.stage_memory(wm, 4, 0).activations
    assert times["none"] < times["selective"] < times["full"]
    assert memory["none"] > memory["selective"] > memory["full"]


def test_split_is_the_best_min_max_split():
    """On stages of different speeds (one GPU at half speed, the head on it), the split minimises
    the slowest stage among all splits (brute force); it respects each stage's memory."""
    w, stages = _uniform(2, 8)
    w = dataclasses.replace(w, arch=dataclasses.replace(ARCH, num_layers=30))
    slow = dataclasses.replace(stages[1].gpu, peak_flops={k: v / 2 for k, v in stages[1].gpu.peak_flops.items()},
                               memory_bytes_per_s=stages[1].gpu.memory_bytes_per_s / 2)
    pair = (stages[0], dataclasses.replace(stages[1], gpu=slow))

    def slowest(counts):
        step = C.step(w, pair, counts)
        return max(f + b for f, b in zip(step.stage_fwd_s, step.stage_bwd_s))
    counts = C.split_layers(w, pair)
    assert sum(counts) == 30 and counts[0] > counts[1]
    assert slowest(counts) == pytest.approx(min(slowest((n, 30 - n)) for n in range(1, 30)))
    tight = dataclasses.replace(pair[0], memory_limit_bytes=C.stage_memory(w, 5, 0).total)
    counts = C.split_layers(w, (tight, pair[1]))
    assert counts[0] <= 5 and sum(counts) == 30
    assert C.split_layers(w, (dataclasses.replace(tight, memory_limit_bytes=1.0), pair[1])) is None


def _layer(params, precision="bf16", recompute="none"):
    w = C.Workload(arch=ARCH, seq=1024, mbs=2, tp=1, dp=1, pp=1, num_microbatches=1,
                   recipe=Recipe(precision=precision, recompute=recompute), params=params)
    return C.layer_s(w, find_gpu("H100-SXM"), LINK)


def test_gradient_accumulation_fusion_drops_the_read_modify_write_of_the_main_grads():
    """Unfused, each micro-batch's backward reads and writes the fp32 gradient buffer: 2 x 4 bytes
    a parameter at the memory bandwidth; fused into the matmul epilogue it costs nothing more."""
    gpu = find_gpu("H100-SXM")
    fused = dataclasses.replace(PARAMS, gradient_accumulation_fusion=True)
    unfused = dataclasses.replace(PARAMS, gradient_accumulation_fusion=False)
    f1, b1 = _layer(fused)
    f0, b0 = _layer(unfused)
    rmw = 2 * 4 * (12 * 1024 ** 2 + 13 * 1024) / (gpu.memory_bytes_per_s * PARAMS.memory_bandwidth_efficiency)
    assert f0 == f1 and b0 - b1 == pytest.approx(rmw)


def test_flash_attention_backward_recomputes_the_scores():
    """A fused attention core's backward is 5 matmuls to the forward's 2: 2.5 x its forward time,
    where an unfused core's backward is 2 x (FlashAttention, Dao et al. 2022). ARCH's heads are 64 wide:
    the kernel runs at cuDNN's 413 / 595 of its 128-wide rate (attention_rate.py)."""
    gpu = find_gpu("H100-SXM")
    core = attention_core_flops(ARCH, 2, 1024, 1, 0.5)
    rate = gpu.peak_flops["bf16"] * gpu.attention_share(PARAMS) * 413 / 595   # H100: its measured FA-2 share
    fused = dataclasses.replace(PARAMS, gradient_accumulation_fusion=True)  # no accumulate term
    f, b = _layer(fused)    # tp = 1: no TP collectives either
    assert b - 2 * f == pytest.approx(0.5 * core / rate)
    f, b = _layer(dataclasses.replace(fused, fused_attention=False))
    assert b == pytest.approx(2 * f)


def test_fp8_casts_cost_bandwidth():
    """FP8 moves fp8_cast_bytes per cast matmul-input element on top of the 16-bit run's bytes, so
    it never reaches 2x: with casts free it is faster than with casts charged."""
    gpu_bound = dataclasses.replace(PARAMS, kernel_launch_s=0.0)   # the tiny layer's kernel-issue floor off
    free = dataclasses.replace(gpu_bound, fp8_cast_bytes=0.0)
    assert _layer(free, "fp8")[0] < _layer(gpu_bound, "fp8")[0] < _layer(gpu_bound, "bf16")[0]
    f16, f8 = _layer(PARAMS, "bf16")[0], _layer(PARAMS, "fp8")[0]
    assert f16 / f8 < 2


def test_fp8_with_sp_all_gathers_one_byte_elements_in_the_forward():
    """With SP the forward's two all-gathers carry the FP8-cast inputs (1 byte an element), its two
    reduce-scatters 16-bit outputs: 3/4 of the 16-bit volume; the backward's stay 16-bit."""
    link = C.Link(100e9, 0.0)
    def tp(precision):
        w = C.Workload(arch=ARCH, seq=1024, mbs=2, tp=4, dp=1, pp=1, num_microbatches=1,
                       recipe=Recipe(precision=precision, sequence_parallel=True), params=PARAMS)
        return C.tp_collectives_s(w, link)
    bwd16, fwd16 = tp("bf16")
    bwd8, fwd8 = tp("fp8")
    assert fwd16 == bwd16 == bwd8 == pytest.approx(2 * C.all_reduce_s(2 * 1024 * 1024 * 2, 4, link))
    assert fwd8 == pytest.approx(0.75 * fwd16)
    # tp_overlap hides its share with sequence parallelism only (Megatron-LM asserts SP for --tp-comm-overlap),
    # and not in an NVFP4 run (Transformer Engine's userbuffers take no NVFP4 quantizer)
    hidden = dataclasses.replace(PARAMS, tp_overlap=0.25)
    w = lambda **r: C.Workload(arch=ARCH, seq=1024, mbs=2, tp=4, dp=1, pp=1, num_microbatches=1,  # noqa: E731
                               recipe=Recipe(**r), params=hidden)
    assert C.tp_collectives_s(w(sequence_parallel=True), link)[0] == pytest.approx(0.75 * bwd16)
    assert C.tp_collectives_s(w(), link)[0] == pytest.approx(bwd16)
    assert C.tp_collectives_s(w(sequence_parallel=True, precision="nvfp4"), link)[0] == pytest.approx(bwd16)


def test_measured_fp8_and_nvlink_shares_of_the_h100():
    """The catalog's H100 reaches its measured FP8 share (not its BF16 one) and NCCL's NVLink4 share."""
    gpu = find_gpu("H100-SXM")
    assert gpu.matmul_flops("fp8") == pytest.approx(1979e12 * 0.70)
    assert gpu.matmul_flops("bf16") == pytest.approx(989e12 * 0.803)
    hw = C.stage_hardware(8, 1, 1, [type("N", (), {"gpus_per_node": 8, "inter_node_bytes_per_s": 1e9,
                                                   "memory_limit_bytes": 1e12})()], [gpu], PARAMS)
    assert hw[0].tp_link.bytes_per_s == pytest.approx(450e9 * 0.82)
    a100 = find_gpu("A100-SXM4-80GB")
    assert a100.matmul_flops("fp8") == a100.matmul_flops("bf16")  # no FP8 units: the 16-bit rate
    assert gpu.attention_share(PARAMS) == 0.33 and a100.attention_share(PARAMS) == PARAMS.fused_attention_efficiency


def test_overlapped_gradient_reduction_waits_only_for_what_the_backward_cannot_hide():
    """Without overlap the step waits for (1 - dp_overlap) of a stage's DP sync; with
    overlap_grad_reduce only for what its last backward (+ the next forward under a sharded
    optimizer, for the weight all-gather) cannot cover."""
    on = dataclasses.replace(PARAMS, overlap_grad_reduce=True, dp_overlap=0.0, overlap_slowdown=0.0)   # free overlap
    off = dataclasses.replace(PARAMS, overlap_grad_reduce=False, dp_overlap=0.25)
    w = lambda params, zero: C.Workload(arch=ARCH, seq=1024, mbs=1, tp=1, dp=4, pp=1, num_microbatches=4,
                                        recipe=Recipe(zero=zero), params=params)
    assert C.dp_exposed_s(w(off, 0), 2.0, 0.5, 1.0) == pytest.approx(1.5)
    assert C.dp_exposed_s(w(on, 0), 2.0, 0.5, 1.0) == pytest.approx(1.0)     # 2 - backward 1
    assert C.dp_exposed_s(w(on, 0), 0.8, 0.5, 1.0) == 0.0                    # fully hidden
    # ZeRO 1: reduce-scatter 1.2 behind the backward 1 (0.2 left), all-gather 0.8 behind the next
    # forward 0.5 (0.3 left): 0.5 -- one pool (2 - 1 - 0.5) gives the same 0.5 here ...
    assert C.dp_exposed_s(w(on, 1), 1.2, 0.5, 1.0, gather=0.8) == pytest.approx(0.5)
    # ... but not when the backward has time to spare: reduce-scatter 0.4 hidden, all-gather 0.8
    # behind 0.5 leaves 0.3 (one pool would say max(0, 1.2 - 1.5) = 0)
    assert C.dp_exposed_s(w(on, 1), 0.4, 0.5, 1.0, gather=0.8) == pytest.approx(0.3)
    assert C.dp_exposed_s(w(off, 1), 0.4, 0.5, 1.0, gather=0.8) == pytest.approx(0.9)   # 0.75 of 1.2


def test_wave_quantization_by_hand():
    """A100 (108 SMs), 128 x 256 tiles: a 2048 x 9600 output is 16 x 38 = 608 tiles (or 8 x 75 =
    600 the other way), 6 waves of 108 slots: 2048 * 9600 / (6 * 108 * 128 * 256) = 0.9259; one
    full wave (13824 x 256 = 108 tiles) loses nothing; a GPU without an SM count, nothing."""
    a100, tile = find_gpu("A100-SXM4-80GB"), (128, 256)
    assert a100.streaming_multiprocessors == 108 and PARAMS.matmul_tile == tile
    sms = a100.streaming_multiprocessors
    assert wave_efficiency(2048, 9600, sms, tile) == pytest.approx(2048 * 9600 / (6 * 108 * 128 * 256))
    assert wave_efficiency(13824, 256, sms, tile) == 1.0
    assert wave_efficiency(2048, 9600, sms, (1, 1)) == 1.0
    assert wave_efficiency(2048, 9600, 0, tile) == 1.0


def test_without_wave_quantization_the_matmuls_are_their_flops_at_the_achievable_rate():
    """Tile (1, 1): forward = layer_linear_flops / rate, backward = 2 x forward; with tiles, never faster."""
    gpu = find_gpu("H100-SXM")
    off = dataclasses.replace(PARAMS, matmul_tile=(1, 1))
    for params in (off, PARAMS):
        w = C.Workload(arch=ARCH, seq=1024, mbs=3, tp=2, dp=1, pp=1, num_microbatches=1, recipe=Recipe(),
                       params=params)
        f, b = C.linear_s(w, gpu)
        exact = layer_linear_flops(ARCH, 3, 1024, 2) / gpu.matmul_flops("bf16")
        if params is off:
            assert f == pytest.approx(exact) and b == pytest.approx(2 * exact)
        else:
            assert f >= exact * (1 - 1e-12) and b >= 2 * exact * (1 - 1e-12)


def test_nvfp4_quantization_costs_what_te_measured_against_mxfp8():
    """analytic.yaml nvfp4_cast_bytes: Transformer Engine's GEMM profiling tutorial (B300, one h 4096 / ffn
    16384 layer) spends 2.689 ms quantizing NVFP4 inputs where MXFP8 takes 1.823 ms; an NVFP4 layer's casts move
    that ratio of an MXFP8 layer's bytes, by hand: elements x (5.9 - 4) / the memory rate."""
    def layer(precision, params):
        w = C.Workload(arch=ARCH, seq=1024, mbs=2, tp=1, dp=1, pp=1, num_microbatches=1,
                       recipe=Recipe(precision=precision), params=params)
        return C.layer_s(w, find_gpu("B300"), LINK)[0]
    gpu_bound = dataclasses.replace(PARAMS, kernel_launch_s=0.0)
    assert Recipe(precision="nvfp4").cast_bytes(PARAMS) / Recipe(precision="mxfp8").cast_bytes(PARAMS) == \
        pytest.approx(2.689 / 1.823, rel=1e-3)
    assert Recipe(precision="bf16").cast_bytes(PARAMS) == 0
    as_mxfp8 = dataclasses.replace(gpu_bound, nvfp4_cast_bytes=gpu_bound.fp8_cast_bytes)
    from fasop.estimators.analytic.layers import fp8_cast_elements
    b300 = find_gpu("B300")
    extra = fp8_cast_elements(ARCH, 2, 1024, 1, routed=False) * (5.9 - 4.0) / (
        b300.memory_bytes_per_s * b300.memory_share(PARAMS))
    assert layer("nvfp4", gpu_bound) - layer("nvfp4", as_mxfp8) == pytest.approx(extra, rel=1e-6)


def test_unfused_attention_scores_by_hand():
    """Per s x s score of unfused attention on one TP rank, forward: QK^T written, the masked softmax read and
    written, AV's input read -- 4e with 16-bit values (Megatron's fused scale-mask-softmax kernel); fp32 values
    take its torch path, a masked_fill pass more (6e); dropout adds its output read and written and a byte of
    mask (2e + 1). b 2, 4 heads, s 8, t 2: 2 x 4 x 64 / 2 = 256 scores."""
    from fasop.estimators.analytic.layers import layer_forward_bytes
    a = gpt_architecture(num_layers=2, hidden_size=64, num_attention_heads=4, vocab_size=100)
    plain = dataclasses.replace(a, dropout=False)

    def scores(arch, e):
        return layer_forward_bytes(arch, 2, 8, 2, False, e, False) - layer_forward_bytes(arch, 2, 8, 2, False, e, True)
    assert scores(plain, 2) == 256 * 4 * 2
    assert scores(plain, 4) == 256 * 6 * 4
    assert scores(a, 2) == 256 * (4 * 2 + 2 * 2 + 1)
    assert scores(a, 4) == 256 * (6 * 4 + 2 * 4 + 1)
