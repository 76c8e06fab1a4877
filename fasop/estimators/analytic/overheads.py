"""Hardware facts of older GPUs and slow networks that the analytic cost model reads per job or per link.

- **FlashAttention needs compute capability 8.0+.** FlashAttention-2 (Dao 2023, arXiv 2307.08691: "Ampere,
  Ada, or Hopper GPUs") and PyTorch SDPA's flash backend (sdp_utils: "Flash attention only supports gpu
  architectures in the range [sm80, sm90]") have no Volta (sm70) or Turing (sm75) kernels. A job's
  attention implementation is one switch for all its ranks (Megatron-LM `--use-flash-attn`, HF
  `attn_implementation`), so a job with any GPU below 8.0 runs the unfused path everywhere: the s x s
  scores are written, softmaxed and read through memory (layers.layer_forward_bytes) and kept for the
  backward (layers.activation_bytes). analytic.yaml's `fused_attention: true` stands for sm80+ jobs.
- **TCP sockets on Ethernet.** NCCL without RDMA (no InfiniBand, RoCE or EFA) uses its socket transport:
  kernel TCP, one proxy thread per connection (NVIDIA/nccl src/transport/net_socket.cc). Its fixed cost
  per ring step is the LAN round trip plus the proxy: nccl-tests on sockets show a ~40 us floor for
  8-byte collectives (NVIDIA/nccl-tests#82, V100-PCIe over TCP), against NCCL's own 8.4 us base + 14 us
  per network hop for IB (src/graph/tuning.cc). Cloud instances at or below 50 Gbit/s per node have no
  RDMA NIC by default (AWS p3.8xlarge 10 Gbit/s, g4dn.12xlarge 50 Gbit/s ENA; EFA comes with the 100
  Gbit/s sizes), so their network steps cost SOCKET_LATENCY_S instead of analytic.yaml's
  `link_latency_s.inter_node` (an InfiniBand figure). Their bandwidth share stays `link_efficiency.network`
  where the line is slow (NCCL sockets fill 10 GbE at ~0.85-0.95 for MB-sized buffers, NVIDIA/nccl#481),
  but the socket transport itself tops out near SOCKET_MAX_BYTES_PER_S a node: 3.75 GB/s on a 32 Gbit/s
  link with 8 rings tuned, 60 % of it untuned (NVIDIA/nccl#209); "4-6 GB/s ... less than half" of 100
  Gbit/s (NVIDIA/nccl#450), ~6 GB/s (NVIDIA/nccl#398). A 50 Gbit/s g4dn node thus reaches ~4 GB/s, not 5.6.

Sources and magnitudes: docs/estimators.md, "Pre-Ampere GPUs and Ethernet networks".
"""

from __future__ import annotations

from dataclasses import replace
from typing import Iterable

from fasop.specs.catalog import AnalyticParams, GpuType

FLASH_MIN_COMPUTE_CAPABILITY = 8.0
"""The least CUDA compute capability FlashAttention-2 / SDPA-flash kernels exist for (sm80)."""
SOCKET_LATENCY_S = 4.0e-5
"""Fixed cost of one ring step (or p2p send) over NCCL's TCP socket transport: ~40 us (nccl-tests#82)."""
SOCKET_NETWORK_MAX_BYTES_PER_S = 50e9 / 8
"""Node networks at or below 50 Gbit/s are taken as Ethernet without RDMA (TCP sockets)."""
SOCKET_MAX_BYTES_PER_S = 4.0e9
"""What NCCL's socket transport moves a node at most, bytes/s (nccl#209: 3.75 GB/s tuned; #450, #398: 4-6)."""


def flash_capable(gpu: GpuType) -> bool:
    """Whether FlashAttention-class kernels run on `gpu` (no compute capability given: not restricted)."""
    return gpu.compute_capability is None or gpu.compute_capability >= FLASH_MIN_COMPUTE_CAPABILITY


def job_params(params: AnalyticParams, gpus: Iterable[GpuType]) -> AnalyticParams:
    """`params` for a job on `gpus`: the unfused attention path when any of them has no FlashAttention
    kernels (one attention implementation per job); `params` itself otherwise."""
    if params.fused_attention and not all(flash_capable(g) for g in gpus):
        return replace(params, fused_attention=False)
    return params


def network_latency_s(params: AnalyticParams, node_bytes_per_s: float) -> float:
    """Fixed cost of one network step between nodes whose slowest network is `node_bytes_per_s`:
    the TCP-socket figure on Ethernet at or below 50 Gbit/s, else analytic.yaml's inter-node latency."""
    if node_bytes_per_s <= SOCKET_NETWORK_MAX_BYTES_PER_S:
        return max(params.inter_node_latency_s, SOCKET_LATENCY_S)
    return params.inter_node_latency_s


def network_bytes_per_s(params: AnalyticParams, node_bytes_per_s: float) -> float:
    """Bytes/s a node's collectives achieve over a `node_bytes_per_s` network: its share
    `link_efficiency.network`, and on TCP-socket Ethernet at most SOCKET_MAX_BYTES_PER_S."""
    achieved = node_bytes_per_s * params.link_efficiency["network"]
    if node_bytes_per_s <= SOCKET_NETWORK_MAX_BYTES_PER_S:
        return min(achieved, SOCKET_MAX_BYTES_PER_S)
    return achieved
