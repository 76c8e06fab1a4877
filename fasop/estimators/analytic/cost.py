"""The analytic cost model: seconds and bytes of one training step from FLOPs, bytes and links.

Pure functions over a :class:`Workload` (model shape, batch, degrees, recipe, physical constants)
and one :class:`StageHardware` per pipeline stage (its GPU and the links its groups use).

Time of a layer (docs/estimators.md §A1): matmul FLOPs / (peak of the precision x matmul
efficiency) + bytes moved / (memory bandwidth x efficiency), the bytes being the elementwise
kernels', FP8's casts and, with `gemm_traffic` (Calculon's `processing_mode: no_overlap`), the
matmuls' own operands (1 byte an input or weight element in FP8). Each weight matmul also loses
its wave quantization: its output tiles (`matmul_tile`) run in whole waves over the GPU's SMs.
Each layer pass adds the GPU's `layer_overhead_s` (launches, framework; the backward twice).
FP8 runs the weight matmuls at the FP8 peak x the GPU's FP8 efficiency, the attention core in 16 bits (Transformer Engine); a
fused (FlashAttention) core runs at `fused_attention_efficiency` of the 16-bit peak, a Mamba-2 scan at
blocks.SSD_FLASH_RATIO of that (measured, docs/models.md). Backward =
2 x forward, + half the fused core's time (FlashAttention recomputes QK^T), + adding the weight
gradients into the fp32 buffer unless `gradient_accumulation_fusion` does it in the matmul; full
recompute adds a forward, selective recompute the attention core's (Korthikanti et al. 2022 §5), or
the forward of each Megatron-Core module it names (modules.py).

Collectives are rings (Calculon's `all_reduce: [2, -1]`): all-reduce 2(n-1)/n x size / bandwidth
+ 2(n-1) latencies, reduce-scatter and all-gather half of that each. Tensor parallelism costs
two all-reduces per layer forward and two backward (Megatron-LM; with sequence parallelism each
becomes reduce-scatter + all-gather of the same volume, Korthikanti et al. 2022 §4.2.2), plus two
in a recomputed forward. Pipeline p2p sends b·s·h 16-bit values split over the TP group
(Narayanan et al. 2021 §4.1 scatter/gather); without SP the receiving stage then all-gathers the
full activation over its TP group before its first layer runs (with SP the sequence shards stay split).

Pipeline (1F1B, interleaved with v chunks per rank; Narayanan et al. 2021 §2.2): each stage's
cycle c_i = F_i + B_i + v x (its in and out transfers); the step is
  m x max_i c_i + (sum_i (F_i + B_i + transfers) - max_i c_i) / v
which for equal stages is (m + (p - 1)/v) x c, the bubble of Narayanan et al. Eq. 1 and §2.2.2.
Stage i's last backward ends sum_{j<i} (B_j + p2p_j) / v before the pipeline does; then its
gradients are reduced over its DP group's slowest link (all-reduce, or reduce-scatter of the
gradients + all-gather of the 16-bit weights with a sharded optimizer), minus the overlapped share;
then the tied embedding is all-reduced between the first and last stage and the optimizer steps.

Memory per stage (bytes per GPU): weights 2, gradients `gradient_reduce_bytes` (4: fp32 main
grads) and Adam 12 (fp32 master weights, m, v) per parameter — 18 bytes as in Megatron-LM's
theoretical memory — divided by dp for what ZeRO shards (1: optimizer, 2: + gradients, 3: + weights);
activations per layer (analytic_layers.activation_bytes) x layers x micro-batches in flight:
min(p - i, m) at stage i under 1F1B, x (1 + (p - 1)/(p v)) interleaved (Korthikanti et al. 2022
§4.2.3); plus the framework overhead.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, replace
from functools import lru_cache

from fasop.estimators.analytic import attention_rate as AR
from fasop.estimators.analytic import block_recompute as BR
from fasop.estimators.analytic import blocks as B
from fasop.estimators.analytic import context as CX
from fasop.estimators.analytic import eager as E
from fasop.estimators.analytic import host as H
from fasop.estimators.analytic import layers as L
from fasop.estimators.analytic import offload as OF
from fasop.estimators.analytic import parallel as P
from fasop.estimators.analytic.hardware import (Link, StageHardware, one_stage, pace_key, stage_hardware,  # noqa: F401
                                                stage_span)
from fasop.estimators.analytic.data_parallel import (all_reduce_s, dp_exposed_s, dp_sync_s, fsdp_sync_s,  # noqa: F401
                                                     stage_sync_parts, stage_sync_s,
                                                     expert_rings, gather_s, layer_gather_s, p2p_s, shard_group,
                                                     state_links, zero3_busy_s, zero3_gather_s)
from fasop.estimators.analytic.layers import Workload
from fasop.estimators.analytic.recipes import tp_overlap_refusal
from fasop.specs.architecture import Architecture
from fasop.estimators.analytic.memory import (ADAM_BYTES, WEIGHT_BYTES, MemoryParts, in_flight, max_layers,  # noqa: F401
                                              mtp_block, root_params, stage_memory, stage_param_split, stage_params,
                                              state_shards, torch_fsdp)
from fasop.specs.catalog import GpuType

ACT_BYTES = 2
FLASH_BACKWARD_MATMULS = 5
"""FlashAttention's backward: QK^T recomputed, then dV, dP, dQ, dK -- 5 matmuls to the forward's 2."""


@dataclass(frozen=True, kw_only=True)
class Step:
    stage_fwd_s: tuple[float, ...]
    stage_bwd_s: tuple[float, ...]
    p2p_s: tuple[float, ...]
    pipeline_s: float
    stage_end_s: tuple[float, ...]
    dp_s: tuple[float, ...]
    dp_exposed_s: tuple[float, ...]
    """The part of each stage's DP sync the step waits for (dp_exposed_s)."""
    embedding_sync_s: float
    optimizer_s: float
    step_s: float


# ----------------------------------------------------------------------------- per-layer times
def linear_s(w: Workload, gpu: GpuType) -> tuple[float, float]:
    """(forward, backward) seconds of one layer's weight matmuls at the precision's achievable rate,
    each slowed by its wave efficiency (backward: input-gradient and weight-gradient matmuls)."""
    rate, tile = gpu.gemm_flops(w.recipe.precision), w.params.matmul_tile   # at layer GEMM shapes (gpus.yaml)
    q = lambda m, n: L.wave_efficiency(m, n, gpu.streaming_multiprocessors, tile)
    fwd = bwd = 0.0
    for c, m, n, k in L.layer_gemms(w.arch, w.mbs, w.local_seq, w.tp, routed=False):
        flops = c * 2 * m * n * k
        fwd += flops / (rate * q(m, n))
        bwd += flops / (rate * q(m, k)) + flops / (rate * q(k, n))
    return fwd, bwd


def _kernel_s(w: Workload, gpu: GpuType, linear: float, core: float, moved: float) -> float:
    p = w.recipe.precision
    core_precision = "bf16" if w.recipe.low_precision else p
    return (linear / gpu.gemm_flops(p) + core / gpu.matmul_flops(core_precision)
            + moved / (gpu.memory_bytes_per_s * gpu.memory_share(w.params)))


@lru_cache(maxsize=1 << 16)
def layer_s(w: Workload, gpu: GpuType, tp_link: Link, hw_groups: P.GroupLinks | None = None) -> tuple[float, float]:
    """(forward, backward) seconds of one Transformer layer for one micro-batch, TP comm included;
    with cp > 1 or experts, the CP ring and the MoE layer over the stage's `hw_groups` links; with
    block recompute the mean of recomputing and non-recomputing layers (block_recompute.py); with
    activation offloading, at least its share of the host copies (offload.py); with 16-bit layers in a
    low-precision run, the mean of both (block_recompute.bf16_share)."""
    k = BR.bf16_share(w)
    if k:
        low = layer_s(BR.one_precision(w, w.recipe.precision), gpu, tp_link, hw_groups)
        return BR.mix(low, layer_s(BR.one_precision(w), gpu, tp_link, hw_groups), k)
    q = BR.recomputed_share(w)
    if w.recipe.recompute == "full" and q < 1.0:
        times = BR.mix(_layer_s(BR.without_recompute(w), gpu, tp_link, hw_groups), _layer_s(w, gpu, tp_link, hw_groups), q)
    else:
        times = _layer_s(w, gpu, tp_link, hw_groups)
    return OF.with_offload(w, gpu, *times)   # activations offloaded to the host: at least their copy (offload.py)


def _layer_s(w: Workload, gpu: GpuType, tp_link: Link, hw_groups: P.GroupLinks | None = None) -> tuple[float, float]:
    """layer_s of a layer that recomputes as w.recipe says (every layer alike)."""
    a, b, s, t, r = w.arch, w.mbs, w.local_seq, w.tp, w.recipe
    fused = w.params.fused_attention
    linear_fwd, linear_bwd = linear_s(w, gpu)
    # a CP rank's queries (s/cp) meet all s keys, causally balanced: 1/cp of the s x s core
    core = L.attention_core_flops(a, b, w.seq, t, 0.5 if fused else 1.0) / w.cp
    e = r.value_bytes
    moved = L.layer_forward_bytes(a, b, s, t, r.sequence_parallel, e, fused)
    if not w.params.fused_elementwise:   # eager PyTorch: every elementwise op its own kernel
        moved += E.eager_extra_bytes(a, b, s, t, r.sequence_parallel, e, w.params.eager_rope)
    else:   # Megatron-Core's RoPE runs unfused under YaRN's attention factor; compiled complex RoPE (eager.py)
        moved += E.unfused_rope_extra_bytes(a, b, s, t, e)
        moved += E.compiled_rope_extra_bytes(a, b, s, t) if w.params.compiled_rope else 0.0
    operand = r.operand_bytes    # FP8 / MXFP8 / NVFP4 matmuls read 8- or 4-bit inputs and weights
    gemm_bytes = L.layer_gemm_bytes(a, b, s, t, e, operand, routed=False) if w.params.gemm_traffic else 0.0
    if r.low_precision:
        moved += L.fp8_cast_elements(a, b, s, t, routed=False) * r.cast_bytes(w.params)
    # + the per-layer overhead (launches, framework: `layer_overhead_s`), 2x in the backward, again when recomputed
    fwd = _kernel_s(w, gpu, 0.0, 0.0, moved + gemm_bytes) + gpu.layer_overhead(w.params)
    core_bwd_extra = 0.0
    if fused:  # a FlashAttention kernel runs at its own share of the 16-bit peak
        precision = "bf16" if r.low_precision else r.precision
        rate = gpu.matmul_flops(precision) / gpu.matmul_efficiency * gpu.attention_share(w.params)
        # a Mamba-2 layer's chunked scan at its measured share of the peak (gpus.yaml ssd_scan_efficiency), else
        # at its measured share of that rate (blocks.SSD_FLASH_RATIO)
        scan = B.mean_scan_flops(a, b, w.seq, t) / w.cp
        peak = gpu.matmul_flops(precision) / gpu.matmul_efficiency
        scan_rate = peak * gpu.ssd_scan_efficiency if gpu.ssd_scan_efficiency else rate * B.SSD_FLASH_RATIO
        # the scores at the rate of the model's head width (the share was measured at 128: attention_rate.py)
        attention = (core - scan) / (rate * AR.head_width_factor(a)) + scan / scan_rate
        # its backward recomputes QK^T: 5 matmuls where 2 x forward counts 4 (Dao et al. 2022, Alg. 4)
        core_bwd_extra = (FLASH_BACKWARD_MATMULS - 4) * attention / 2
    else:
        attention = _kernel_s(w, gpu, 0.0, core, 0.0)
    fwd += attention
    tp_comm, tp_fwd = tp_collectives_s(w, tp_link)
    accumulate = 0.0 if w.params.gradient_accumulation_fusion else \
        2 * stage_params(w, 1, False, False) * w.params.gradient_reduce_bytes[r.precision]
    # the Mamba scan's backward kernels and layout copies, counted kernel by kernel (blocks.py), beyond 2 x forward
    accumulate += B.mamba_backward_extra_bytes(a, b, s, t, e)
    bwd = 2 * fwd + linear_bwd + tp_comm + _kernel_s(w, gpu, 0.0, 0.0, accumulate) + core_bwd_extra
    fwd += linear_fwd
    mf = cf = 0.0
    if w.cp > 1 or w.arch.moe is not None:
        groups = hw_groups or P.FREE_LINKS
        cf, cb = CX.cp_s(w, groups, attention, 2 * attention + core_bwd_extra)
        mf, mb = P.moe_s(w, gpu, groups, (fwd, bwd))
        fwd, bwd = fwd + cf + mf, bwd + cb + mb
    if r.recompute == "full":
        bwd += fwd + tp_fwd
    elif r.recompute == "selective" and (r.recompute_modules or not fused):
        # the attention core again: the fused kernel's forward, or the unfused scores and their softmax bytes, and
        # its CP exchange, whichever (TE's attention with CP runs it inside the checkpointed core)
        core_again = cf + (attention if fused else _kernel_s(w, gpu, 0.0, core, (
            L.layer_forward_bytes(a, b, s, t, r.sequence_parallel, e, False)
            - L.layer_forward_bytes(a, b, s, t, r.sequence_parallel, e, True))))
        bwd += BR.modules_rerun_s(w, gpu, core_again, mf) if r.recompute_modules else core_again
    # the host issues every op: a layer never runs faster than its issue time, a runtime that drains the
    # GPU every micro-batch adds it, and a MoE forward's host wait splits it in two (host.py)
    before, after, issue_bwd = H.mean_issue_s(w.params, gpu, a)
    recomputed = before + after if r.recompute == "full" else 0.0
    forward = H.moe_forward_s(w.params, fwd + tp_fwd, mf, (before, after)) if mf > 0 else \
        H.layer_pass_s(w.params, fwd + tp_fwd, before + after)
    return forward, H.layer_pass_s(w.params, bwd, issue_bwd + recomputed)


def tp_collectives_s(w: Workload, tp_link: Link) -> tuple[float, float]:
    """(backward, forward) seconds of one layer's tensor-parallel collectives, less the overlapped
    share: two all-reduces of b·s·h 16-bit values each way (with SP, reduce-scatter + all-gather).
    An FP8 run with SP all-gathers the matmul inputs already cast to FP8 (Transformer Engine gathers
    the FP8 tensor): in the forward, one byte an element for the two all-gathers."""
    size = w.mbs * w.local_seq * w.arch.hidden_size * w.recipe.value_bytes
    bwd = 2 * all_reduce_s(size, w.tp, tp_link)
    fwd = bwd
    if w.recipe.sequence_parallel and w.recipe.low_precision:
        fwd = 2 * (gather_s(size, w.tp, tp_link) + gather_s(size / ACT_BYTES, w.tp, tp_link))
    hidden = 1.0 if tp_overlap_refusal(w.recipe.sequence_parallel, w.recipe.precision) else 1 - w.params.tp_overlap
    return bwd * hidden, fwd * hidden


@lru_cache(maxsize=1 << 16)
def embedding_s(w: Workload, gpu: GpuType, tp_link: Link) -> tuple[float, float]:
    """Lookup (write b·s·h) and the vocab-parallel all-reduce; backward scatters into the table.
    An embedding narrower than h (OPT-350M) adds project_in's matmul, twice over in the backward."""
    a, b, s = w.arch, w.mbs, w.local_seq
    moved = b * s * a.hidden_size * w.recipe.value_bytes
    fwd = _kernel_s(w, gpu, 0.0, 0.0, moved) + all_reduce_s(moved, w.tp, tp_link)
    bwd = 2 * _kernel_s(w, gpu, 0.0, 0.0, moved)
    if a.projection_params:
        flops = L.embedding_forward_flops(a, b, s, w.tp)
        fwd, bwd = fwd + _kernel_s(w, gpu, 0.0, flops, 0.0), bwd + _kernel_s(w, gpu, 0.0, 2 * flops, 0.0)
    return fwd, bwd


@lru_cache(maxsize=1 << 16)
def head_s(w: Workload, gpu: GpuType) -> tuple[float, float]:
    """Logits matmul (16-bit: the output layer stays in bf16 under FP8; a weight GEMM at its training shape,
    gpu.gemm_flops) and the loss."""
    a, b, s, t = w.arch, w.mbs, w.local_seq, w.tp
    flops = L.head_forward_flops(a, b, s, t)
    moved = L.head_forward_bytes(a, b, s, t, w.recipe.value_bytes)
    if w.params.gemm_traffic:
        moved += L.head_gemm_bytes(a, b, s, t, w.recipe.value_bytes)
    fwd = flops / gpu.gemm_flops("bf16" if w.recipe.low_precision else w.recipe.precision) + _kernel_s(w, gpu, 0.0, 0.0, moved)
    return fwd, 2 * fwd


# ----------------------------------------------------------------------------- the step
def step(w: Workload, stages: tuple[StageHardware, ...], counts: tuple[int, ...],
         times: tuple[tuple[float, float] | None, ...] | None = None) -> Step:
    """The step time of `counts[i]` layers on stage i (embedding on the first, head on the last);
    `times[i]`, when given, replaces stage i's analytic (fwd, bwd) seconds of one layer."""
    p, v = w.pp, w.recipe.virtual_stages
    fwd, bwd, params = stage_times(w, stages, counts, times)
    size = w.mbs * w.local_seq * w.arch.hidden_size * w.recipe.value_bytes / w.tp
    links = [hw.next_link for hw in stages[:-1]]
    if v > 1 and p > 1:
        links.append(stages[-1].next_link or stages[-1].dp_link)   # the wrap to stage 0
    regather = 0.0
    if w.tp > 1 and not w.recipe.sequence_parallel:
        # scatter/gather (Narayanan et al. 2021 §4.1): each TP rank sends 1/tp of the activation,
        # the receiving stage all-gathers it over its TP group before the next layer can start
        regather = gather_s(size * w.tp, w.tp, stages[0].tp_link)
    p2p = tuple(p2p_s(size, link) + regather for link in links)
    cycles = []
    for i in range(p):
        out_s = p2p[i] if i < len(p2p) else 0.0
        in_s = p2p[i - 1] if i > 0 else (p2p[-1] if v > 1 and p > 1 else 0.0)
        # a boundary carries the activation one way and the gradient back: paired (Megatron's
        # send_forward_recv_backward) they overlap on a full-duplex link, blocking they queue (host.py)
        cycles.append(fwd[i] + bwd[i] + v * H.p2p_directions(w.params) * (out_s + in_s))
    worst = max(cycles)
    # sums exactly rounded (math.fsum): the same stages in another order give the same bits (order_classes.py)
    pipeline = w.num_microbatches * worst + (math.fsum(cycles) - worst) / v
    drains = [(bwd[i] + (p2p[i] if i < p - 1 else 0.0)) / v for i in range(p)]
    ends = [pipeline - math.fsum(drains[:i]) for i in range(p)]
    if w.recipe.zero >= 3:   # FSDP: the root unit's reduction waits for the end of the backward
        sync = [fsdp_sync_s(w, params[i], fsdp_root_params(w, i), fwd[i], bwd[i], stages[i],
                            stage_param_split(w, counts[i], i == 0, i == p - 1)[1]) for i in range(p)]
        dp, exposed = tuple(s for s, _ in sync), tuple(x for _, x in sync)
    else:   # ZeRO 0-2: the routed experts' gradients over their EDP rings (docs/estimators.md §A2)
        routed = [stage_param_split(w, counts[i], i == 0, i == p - 1)[1] for i in range(p)]
        parts = [stage_sync_parts(w, params[i] - routed[i], routed[i], stages[i]) for i in range(p)]
        dp = tuple(r + g for r, g in parts)
        exposed = tuple(dp_exposed_s(w, r, f, bk, gather=g) for (r, g), f, bk in zip(parts, fwd, bwd))
    done = max(e + x for e, x in zip(ends, exposed))
    emb = 0.0
    if (w.arch.tied_embeddings or (w.mtp and w.arch.mtp_kinds)) and p > 1:  # MTP: finalize_model_grads.py:146
        table = w.arch.vocab_size * w.arch.embed_width / w.tp * w.params.gradient_reduce_bytes[w.recipe.precision]
        # between the first and the last stage: on different nodes whenever any pipeline hop crosses
        # nodes (ranks are numbered node by node), so over the pipeline's slowest hop
        emb = all_reduce_s(table, 2, min((hw.next_link for hw in stages[:-1]), key=lambda k: k.bytes_per_s))
    opt = max(optimizer_s(w, params[i], stages[i].gpu, stage_param_split(w, counts[i], i == 0, i == p - 1)[1])
              for i in range(p))
    return Step(stage_fwd_s=tuple(fwd), stage_bwd_s=tuple(bwd), p2p_s=p2p, pipeline_s=pipeline,
                stage_end_s=tuple(ends), dp_s=dp, dp_exposed_s=exposed, embedding_sync_s=emb, optimizer_s=opt,
                step_s=done + emb + opt)


def stage_times(w: Workload, stages, counts, times) -> tuple[list[float], list[float], list[float]]:
    """Each stage's forward and backward seconds of one micro-batch, and its parameters per GPU."""
    p = w.pp
    fwd, bwd, params = [], [], []
    for i, (hw, n) in enumerate(zip(stages, counts)):
        f1, b1 = times[i] if times and times[i] else layer_s(w, hw.gpu, hw.tp_link, hw.groups)
        f, bk = n * f1, n * b1
        if i == 0:
            ef, eb = embedding_s(w, hw.gpu, hw.tp_link)
            f, bk = f + ef, bk + eb
        if i == p - 1:
            hf, hb = head_s(w, hw.gpu)
            mf, mb = mtp_s(w, hw)
            f, bk = f + hf + mf, bk + hb + mb
        dense, experts = stage_param_split(w, n, i == 0, i == p - 1)
        params.append(dense + experts)
        gf, gb = zero3_gather_s(w, params[-1], state_links(w, hw)[0], n, f1, b1, fsdp_root_params(w, i), experts,
                                expert_rings(w, hw))
        if n and torch_fsdp(w):   # FSDP2's copies, or FSDP1's gradient
            # concatenation: memory bound (Megatron-FSDP works in its buffers)
            e, reduce = w.recipe.value_bytes, w.params.gradient_reduce_bytes[w.recipe.precision]
            cf, cb = P.fsdp_copy_bytes(params[-1], e, reduce) if w.params.fsdp_copy_out else \
                P.fsdp1_copy_bytes(params[-1], e, reduce, state_shards(w)[0], w.dp * w.cp)
            gf, gb = gf + _kernel_s(w, hw.gpu, 0.0, 0.0, cf), gb + _kernel_s(w, hw.gpu, 0.0, 0.0, cb)
        fwd.append(f + gf)
        bwd.append(bk + gb)
    return fwd, bwd, params


def fsdp_root_params(w: Workload, i: int) -> float:
    """Parameters of stage i's FSDP root unit on one GPU (0 below ZeRO 3): what the stage holds outside
    its Transformer layers -- the embedding on the first stage, the final norm and output head on the
    last. PyTorch FSDP wraps each block as a unit and leaves these to the root (torchtitan
    parallelize_llama.py `fully_shard(model)` after the blocks, to 2025-07's #1094; fms-fsdp's block
    auto-wrap policy): gathered first, kept through the backward, reduced last (fsdp_sync_s)."""
    return root_params(w, i) if w.recipe.zero >= 3 else 0.0


def mtp_s(w: Workload, hw: StageHardware) -> tuple[float, float]:
    """(forward, backward) seconds of one micro-batch's multi-token-prediction depths on the last stage
    (DeepSeek-V3 §2.2; Megatron-Core MultiTokenPredictionBlock): each runs its block's layers
    (Architecture.mtp_kinds), the 2h -> h projection of the normed hidden state and next token's
    embedding (and the two norms' bytes), and the shared output head with its loss."""
    a, b, s = w.arch, w.mbs, w.local_seq
    if not (w.mtp and a.mtp_kinds):
        return 0.0, 0.0
    lf, lb = layer_s(mtp_block(w), hw.gpu, hw.tp_link, hw.groups)
    proj = _kernel_s(w, hw.gpu, 2 * b * s * 2 * a.hidden_size ** 2 / w.tp, 0.0,
                     3 * 2 * b * s * a.hidden_size * w.recipe.value_bytes)
    hf, hb = head_s(w, hw.gpu)
    n = len(a.mtp_kinds)
    return w.mtp * (n * lf + proj + hf), w.mtp * (n * lb + 2 * proj + hb)


def optimizer_s(w: Workload, params: float, gpu: GpuType, experts: float = 0.0) -> float:
    """Adam over the GPU's share of the stage's `params` (of which `experts` routed-expert ones), and
    fp16's loss-scaling passes: memory bound. Sharded (ZeRO >= 1), the dense states divide over the
    shard group, the experts' over theirs (memory.state_shards)."""
    dense_shard, expert_shard = state_shards(w) if w.recipe.zero >= 1 else (1, 1)
    local = (params - experts) / dense_shard + experts / expert_shard
    moved = w.params.optimizer_step_bytes[w.recipe.precision]
    moved += w.params.loss_scaling_bytes if w.recipe.precision == "fp16" else 0.0
    return local * moved / (gpu.memory_bytes_per_s * gpu.memory_share(w.params))


# ----------------------------------------------------------------------------- layer split
def split_layers(w: Workload, stages: tuple[StageHardware, ...], times: tuple[tuple[float, float], ...] | None = None,
                 caps: list[int] | None = None) -> tuple[int, ...] | None:
    """Layers per stage minimising the slowest stage's fwd+bwd time (embedding and head counted
    on the first and last stage), each stage at most the layers that fit its memory; None when
    no split fits. Exact for identical layers: from the continuous optimum, the stage whose next
    layer raises the bottleneck least takes it, until all layers are placed. `times`: each
    stage's (fwd, bwd) per layer when not the analytic ones (a profile's); `caps`: each stage's
    most layers when not what fits its memory (max_layers)."""
    p, total = w.pp, w.arch.num_layers
    if total < p:
        return None
    per, extra, cap = [], [], []
    for i, hw in enumerate(stages):
        per.append(sum(times[i]) if times and times[i] else sum(layer_s(w, hw.gpu, hw.tp_link, hw.groups)))
        e = sum(embedding_s(w, hw.gpu, hw.tp_link)) if i == 0 else 0.0
        e += sum(head_s(w, hw.gpu)) + sum(mtp_s(w, hw)) if i == p - 1 else 0.0
        extra.append(e)
        cap.append(max_layers(w, i, hw.memory_limit_bytes, total - (p - 1)) if caps is None else caps[i])
    if min(cap) < 1 or sum(cap) < total:
        return None
    counts = [max(1, min(cap[i], n)) for i, n in enumerate(split_start(per, extra, total))]
    while sum(counts) > total:  # rounding up to one layer a stage can overshoot: drop from the fastest
        i = min((k for k in range(p) if counts[k] > 1), key=lambda k: (per[k] * counts[k] + extra[k], k))
        counts[i] -= 1
    heap = [(per[i] * (counts[i] + 1) + extra[i], i) for i in range(p) if counts[i] < cap[i]]
    heapq.heapify(heap)
    for _ in range(total - sum(counts)):
        _, i = heapq.heappop(heap)
        counts[i] += 1
        if counts[i] < cap[i]:
            heapq.heappush(heap, (per[i] * (counts[i] + 1) + extra[i], i))
    return tuple(counts)


def split_start(per: list[float], extra: list[float], total: int) -> list[int]:
    """split_layers' first counts before its caps: each stage's share of the continuous optimum
    (the level every stage would reach with fractional layers), rounded down; the sums exactly
    rounded, so that the same stages in another order start alike (order_classes.py)."""
    level = (total + math.fsum(e / t for e, t in zip(extra, per))) / math.fsum(1 / t for t in per)   # any stage order
    return [int((level - e) / t) for e, t in zip(extra, per)]
