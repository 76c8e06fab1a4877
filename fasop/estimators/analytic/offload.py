"""Activation offloading: some layers' stored activations wait in host memory between forward and backward.

Megatron-Core `--cpu-offloading-num-layers N` (TransformerConfig `cpu_offloading_num_layers`,
Transformer Engine's CPU offload context; Megatron-Core refuses it with pipeline parallelism): N of a model
chunk's layers copy what they store for the backward to host memory as their forward ends and back before
their backward. Megatron-Bridge's Megatron-FSDP recipes use it instead of recomputation where a layer's
activations do not fit (perf_recipes/llama/: Llama 3 70B on 64 GB200 / GB300 offloads 20-40 of its 80
layers, on 64 B200 5; Llama 3.1 405B on 128 B300 / GB300 40 of 126).

With q = N / chunk layers the share of the chunk's layers that offload and A the mean layer's stored
activation bytes per micro-batch (block_recompute.activation_bytes), the estimator's mean layer
- keeps (1 - q) of its activations on the GPU, plus one offloaded layer's in transit (memory.stage_memory);
- sends q·A each way per micro-batch over the GPU's host link at R bytes/s, the copy overlapping the
  compute of the pass it belongs to: forward max(F, q·A / R), backward max(B, q·A / R) -- summed over the
  chunk's layers, the offloaded bytes N·A take N·A / R against the whole pass's compute.

R, one direction of the host link (GpuType.host_link_bytes_per_s): a Grace-Blackwell GPU's NVLink-C2C, in
gpus.yaml; any other GPU a PCIe Gen5 x16 slot, 55.2 GB/s -- nvbandwidth on 8 x H200 each on its own Gen5
x16 link measured 55.43 GB/s host-to-device and 55.06 GB/s device-to-host (88 % / 87 % of 63 GB/s;
stas00/ml-engineering network/README.md, PCIe section, @744d01e).
"""

from __future__ import annotations

import math
from dataclasses import replace

from fasop.estimators.analytic import block_recompute as BR
from fasop.estimators.analytic.layers import Workload
from fasop.specs.catalog import GpuType
from fasop.specs.host_ops import per_layer

PCIE_HOST_BYTES_PER_S = 55.2e9
"""One direction of a PCIe Gen5 x16 host link as measured (module docstring)."""


def refusal(n: int, pp: int, layers: int, scopes: tuple[str, ...]) -> str:
    """Why Megatron-Core (TransformerConfig.__post_init__) refuses offloading `n` layers of a model of `layers` on
    `pp` stages under the graphed `scopes`; '' where it allows it. Recomputation, refused too, is the caller's."""
    if not n:
        return ""
    if pp > 1:
        return f"the row's pp is {pp} (Megatron-Core has no activation offloading with pipeline parallelism)"
    if n >= layers:
        return f"the model has {layers} layers (Megatron-Core offloads fewer)"
    if per_layer(scopes):
        return (f"the row captures per-layer CUDA graphs ({','.join(scopes)}; Megatron-Core allows "
                f"offloading only eager or with full_iteration graphs)")
    return ""


def offloaded_share(w: Workload) -> float:
    """Share q of each model chunk's layers whose activations go to host memory."""
    n = w.recipe.offload_layers
    return min(1.0, n / BR.chunk_layers(w)) if n else 0.0


def kept_layers(w: Workload, layers: float) -> float:
    """Layers' worth of stored activations a stage of `layers` layers keeps on the GPU: (1 - q) of them, and
    with offloading one more (an offloaded layer's activations while they are being copied)."""
    q = offloaded_share(w)
    return layers * (1 - q) + (1.0 if q else 0.0)


def host_bytes_per_s(gpu: GpuType) -> float:
    """One direction of `gpu`'s link to host memory."""
    return gpu.host_link_bytes_per_s or PCIE_HOST_BYTES_PER_S


def with_offload(w: Workload, gpu: GpuType, fwd: float, bwd: float) -> tuple[float, float]:
    """A mean layer's (forward, backward) seconds with its share of the offloaded copies: each pass at
    least q·A / R, the copy its compute did not cover."""
    q = offloaded_share(w)
    if not q:
        return fwd, bwd
    copy = q * BR.activation_bytes(w) / host_bytes_per_s(gpu)
    return max(fwd, copy), max(bwd, copy)


def fewest_that_fit(w: Workload, fits) -> int | None:
    """The fewest offloaded layers N (0 .. a chunk's layers - 1: Megatron-Core keeps at least one) whose
    workload `fits(workload)` says fits; None when none does."""
    most = math.ceil(BR.chunk_layers(w)) - 1
    return BR.fewest_that_fit(most, lambda n: fits(replace(w, recipe=replace(w.recipe, offload_layers=n))))
