"""The host's share of a layer pass (issuing its kernels, hidden behind the GPU or not) and how a
runtime posts its pipeline transfers (paired or blocking).

The CPU issues every kernel of an eager PyTorch layer (Python, dispatcher, autograd, launch:
`kernel_launch_s` each, `kernels_per_layer` of them). Two facts decide what that costs:

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

Sources and magnitudes: docs/estimators.md, "Host issue time".
"""

from __future__ import annotations

from fasop.specs.catalog import AnalyticParams, GpuType


def kernel_launch_s(params: AnalyticParams, gpu: GpuType) -> float:
    """Host seconds to issue one kernel on `gpu`'s host: its own figure (a superchip's CPU), else analytic.yaml's."""
    return params.kernel_launch_s if gpu.kernel_launch_s is None else gpu.kernel_launch_s


def issue_s(params: AnalyticParams, gpu: GpuType) -> tuple[float, float]:
    """(forward, backward) host seconds to issue one layer pass's kernels (kernels_per_layer x launch)."""
    launch = kernel_launch_s(params, gpu)
    fwd, bwd = params.kernels_per_layer
    return fwd * launch, bwd * launch


def layer_pass_s(params: AnalyticParams, gpu_s: float, host_s: float) -> float:
    """Seconds of one layer pass whose GPU work takes `gpu_s` and whose kernels take `host_s` to issue:
    their max when the host can queue ahead, their sum when the runtime drains the queue every micro-batch."""
    return gpu_s + host_s if params.micro_batch_sync else max(gpu_s, host_s)


def p2p_directions(params: AnalyticParams) -> int:
    """Pipeline transfers a boundary costs per 1F1B cycle: 1 when the activation going forward and the
    gradient coming back are posted together and overlap on the full-duplex link (Megatron-LM's
    `send_forward_recv_backward` batched isend/irecv), 2 when each is its own blocking send / recv
    (`p2p_blocking`: DeepSpeed's PipelineEngine, SendActivation and RecvGrad are separate instructions
    and its `p2p.send` asserts `async_op == False`, eth-easl/sailor deepspeed/p2p.py L45-47)."""
    return 2 if params.p2p_blocking else 1
