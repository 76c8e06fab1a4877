"""The host's share of a layer pass (issuing its kernels, hidden behind the GPU or not) and how a
runtime posts its pipeline transfers (paired or blocking).

The CPU issues every op of an eager PyTorch layer (Python, dispatcher, autograd, launch:
`kernel_launch_s` each): the dense block's `kernels_per_layer`, and the ops and Transformer Engine
calls (`te_module_call_s` each) of the Megatron-Core modules a layer has beyond it, counted from the
source (analytic.yaml `host_ops`, specs/host_ops.py; MLA, unfused RoPE, the MoE router, dispatcher,
grouped experts, shared experts), less the scopes a run captured in CUDA graphs. Three facts decide
what that costs:

- **How fast the host issues.** `kernel_launch_s` (analytic.yaml, ~8 us on an x86 server host) is
  a property of the host CPU; a GPU type whose host is fixed by its package carries its own. The
  GH200's host is the superchip's Grace CPU (72 Arm Neoverse V2 cores): NVIDIA/TransformerEngine#2053
  measured the host time of one `torch.nn.Linear` forward at 33.17 us on GH200 against 13.48 us on
  an H100 DGX (Xeon Platinum 8480C), 2.46x, "This already affects 1 GPU trainings".
- **Whether the host can run ahead.** A runtime that never waits for the GPU inside a step lets the
  host queue kernels ahead of it: a layer pass costs max(GPU time, issue time) -- the CPU-bound
  floor of small layers (`micro_batch_sync: false`, Megatron-LM and NeMo). A runtime that
  synchronises the device at every micro-batch drains that queue each time: DeepSpeed's
  PipelineEngine starts its throughput timer in every ForwardPass (`_exec_forward_pass`:
  `self.tput_timer.start()`; eth-easl/sailor @cf2c8e3 deepspeed/pipe_engine.py L746, which Sailor's
  Dockerfile L42 copies over DeepSpeed 0.16.5's deepspeed/runtime/pipe/engine.py), and `ThroughputTimer.start` calls `get_accelerator().synchronize()` while its
  `synchronized` setting is on (the default) from the third step on (deepspeed/utils/timer.py); its
  LoadMicroBatch also broadcasts the batch's sizes through the host (Megatron
  `tensor_parallel.broadcast_data`: `.cpu()`). With the queue empty at every micro-batch, and the
  eager layer alternating short host-bound kernels (norms, bias, masks, copies) with GPU-bound
  matmuls, the host's issue time stops hiding behind the GPU: a layer pass costs GPU time + issue
  time (`micro_batch_sync: true`), the upper bound of the two. Sailor's measured GH200 runs show
  that form: OPT-350M at TP 4 takes ~45 ms + ~26 ms x micro-batch per micro-batch for micro-batches
  1-8 (tests/data/sailor_homogeneous.csv), a fixed part that max(GPU, issue) cannot produce.
- **Where the host waits inside a pass.** A dropless MoE dispatcher copies its token counts to the host
  and waits on them once per layer forward (Megatron-LM token_dispatcher.py L958): the host cannot queue
  across it, so the forward is costed piece by piece between waits (after_wait_s, moe_forward_s).

Sources and magnitudes: docs/estimators.md, "Host issue time".
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from fasop.core.errors import FasopError
from fasop.specs.architecture import ATTENTION_KINDS, MOE_KINDS, Architecture
from fasop.specs.catalog import AnalyticParams, GpuType
from fasop.specs.host_ops import BEFORE_WAIT, search_scopes


def kernel_launch_s(params: AnalyticParams, gpu: GpuType) -> float:
    """Host seconds to issue one kernel on `gpu`'s host: its own figure (a superchip's CPU), else analytic.yaml's."""
    return params.kernel_launch_s if gpu.kernel_launch_s is None else gpu.kernel_launch_s


def issue_s(params: AnalyticParams, gpu: GpuType, a: Architecture | None = None) -> tuple[float, float]:
    """(forward, backward) host seconds to issue one layer pass, mean over the layers of `a` (the dense
    block's kernels_per_layer alone without it)."""
    if a is None:
        launch = kernel_launch_s(params, gpu) * params.host.dense_share()
        fwd, bwd = params.kernels_per_layer
        return fwd * launch, bwd * launch
    before, after, bwd = mean_issue_s(params, gpu, a)
    return before + after, bwd


SCOPE_KINDS = {"attn": ATTENTION_KINDS, "mlp": ("dense", "mlp"), "moe": MOE_KINDS, "moe_router": MOE_KINDS,
               "moe_preprocess": MOE_KINDS, "mamba": ("mamba",)}
"""The layer kinds a per-layer graph module captures in (Megatron-Core CudaGraphModule: mlp in dense
layers only, moe / moe_router / moe_preprocess in MoE layers, mamba in Mamba layers)."""


def graphed(params: AnalyticParams, a: Architecture, setting: str) -> AnalyticParams:
    """`params` with the host's work of what a run captures in CUDA graphs left out (`setting`: the
    --cuda-graphs value); a module the model has no layer for is refused (Megatron-Core asserts
    "mlp cuda graph is only supported for dense layers", "moe cuda graph is only supported for MoE")."""
    scopes, why = search_scopes(setting)
    if why:
        raise FasopError(f"--cuda-graphs: {why}")
    missing = [m for m in scopes if m in SCOPE_KINDS and not set(SCOPE_KINDS[m]) & set(a.kinds)]
    if missing:
        raise FasopError(f"--cuda-graphs: {missing[0]}: the model has no layer it captures in "
                         f"(Megatron-Core graphs {missing[0]} in {' / '.join(SCOPE_KINDS[missing[0]])} layers; "
                         f"its layers: {', '.join(sorted(set(a.kinds)))})")
    if scopes == params.host.graphed:  # the same object: estimators share their tables by params (workloads.py)
        return params
    return replace(params, host=replace(params.host, graphed=scopes))


def layer_pass_s(params: AnalyticParams, gpu_s: float, host_s: float) -> float:
    """Seconds of one layer pass whose GPU work takes `gpu_s` and whose kernels take `host_s` to issue:
    their max when the host can queue ahead, their sum when the runtime drains the queue every micro-batch."""
    return gpu_s + host_s if params.micro_batch_sync else max(gpu_s, host_s)


def layer_modules(a: Architecture, kind: str) -> tuple[str, ...]:
    """The counted modules (specs/host_ops.HOST_OP_MODULES) a layer of `kind` issues beyond the dense block."""
    out = []
    if kind in ATTENTION_KINDS:
        if a.mla is not None:
            out.append("mla_attention")
        # MLA's RoPE runs unfused (Megatron-Bridge's DeepSeek bridges: apply_rope_fusion False), and any
        # RoPE under YaRN's mscale != 1 (rope_utils.py apply_rotary_pos_emb)
        if a.mla is not None or (a.position == "rotary" and a.rope_mscale != 1.0):
            out.append("unfused_rope")
    if kind in MOE_KINDS:
        out += ["moe_router", "moe_dispatch", "moe_combine", "grouped_experts"]
        if a.moe.shared_width:
            out.append("shared_experts")
    return tuple(out)


def kind_issue_s(params: AnalyticParams, gpu: GpuType, a: Architecture, kind: str) -> tuple[float, float, float]:
    """(forward before the dispatcher's host wait, forward after it, backward) host seconds of one
    layer of `kind`: the dense block's kernels (half on each side of the wait) + each counted module's
    ops at kernel_launch_s and TE calls at te_module_call_s (a backward TE call one launch more: its
    second GEMM), a Grace host's prices scaled alike; what a graphed scope captured is left out."""
    launch, host = kernel_launch_s(params, gpu), params.host
    # a TE call at the GPU's host's price: scaled as its launches are (Grace), none where launches are free
    te = host.te_module_call_s * (launch / params.kernel_launch_s if params.kernel_launch_s else float(launch > 0))
    dense_fwd, dense_bwd = (k * launch * host.dense_share(kind) for k in params.kernels_per_layer)
    before = after = dense_fwd / 2
    bwd = dense_bwd
    for module in layer_modules(a, kind):
        f_ops, b_ops, f_te, b_te = host.counts(module)
        fwd = f_ops * launch + f_te * te
        if module in BEFORE_WAIT:
            before += fwd
        else:
            after += fwd
        bwd += b_ops * launch + b_te * (te + launch)
    return before, after, bwd


def mean_issue_s(params: AnalyticParams, gpu: GpuType, a: Architecture) -> tuple[float, float, float]:
    """kind_issue_s averaged over the layers' kinds."""
    counts = Counter(a.kinds)
    if len(counts) == 1:
        return kind_issue_s(params, gpu, a, next(iter(counts)))
    parts = [tuple(n * x for x in kind_issue_s(params, gpu, a, kind)) for kind, n in sorted(counts.items())]
    return tuple(sum(p[i] for p in parts) / a.num_layers for i in range(3))


def after_wait_s(pieces: tuple[tuple[float, float], ...]) -> float:
    """Seconds from a host wait (the GPU drained, nothing queued) to the next, over `pieces` (GPU seconds,
    host seconds) in issue order: the GPU starts a piece once the host starts issuing it and the GPU is
    free, and finishes it no sooner than the host issues its last op. The host runs ahead within the
    stretch but not across the wait, so GPU work before a wait and host work after it serialise."""
    host = gpu = 0.0
    for g, h in pieces:
        start = max(gpu, host)
        host += h
        gpu = max(start + g, host)
    return max(gpu, host)


def moe_forward_s(params: AnalyticParams, gpu_s: float, moe_s: float, host: tuple[float, float]) -> float:
    """One MoE layer forward of `gpu_s` GPU seconds, `moe_s` of them the dispatch, experts and combine
    after the dispatcher's host wait, `host` = (host seconds before the wait, after it): the stretch
    from one layer's wait to the next is the after-wait part then the next layer's attention and router
    (after_wait_s); the plain max(GPU, issue) where neither part is host-bound."""
    before, after = host
    if params.micro_batch_sync:
        return gpu_s + before + after
    if after <= moe_s and before + after <= gpu_s:
        return gpu_s
    return after_wait_s(((moe_s, after), (gpu_s - moe_s, before)))


def p2p_directions(params: AnalyticParams) -> int:
    """Pipeline transfers a boundary costs per 1F1B cycle: 1 when the activation going forward and the
    gradient coming back are posted together and overlap on the full-duplex link (Megatron-LM's
    `send_forward_recv_backward` batched isend/irecv), 2 when each is its own blocking send / recv
    (`p2p_blocking`: DeepSpeed's PipelineEngine, SendActivation and RecvGrad are separate instructions
    and its `p2p.send` asserts `async_op == False`, eth-easl/sailor deepspeed/p2p.py L45-47)."""
    return 2 if params.p2p_blocking else 1
