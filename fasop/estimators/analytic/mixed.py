"""A plan on nodes of several GPU types: each data-parallel replica of each stage on its own GPUs.

Megatron-LM's and DeepSpeed's rank order: rank r is TP lane r mod tp, DP replica (r div tp) mod dp,
pipeline stage r div (tp·dp); ranks are numbered node by node (node k holds the next
`gpus_per_node` ranks). That fixes the GPU type of every (stage, replica) -- a stage whose block of
tp·dp ranks spans two node types has replicas on different GPUs -- unless the caller names them
(`gpu_names`, for runtimes that place ranks otherwise).

Replicas run at their own pace (each is a pipeline of its own until the gradient reduction), so the
step is the slowest replica's: each replica's 1F1B is estimated on its own GPUs with the stage's
shared DP links, and each stage's all-reduce waits for the replica that reaches it last. A stage
whose replicas are mixed is therefore never faster than its slowest replica alone.
"""

from __future__ import annotations

from dataclasses import replace

from fasop.estimators.analytic import cost as C
from fasop.estimators.analytic import hardware as H
from fasop.estimators.analytic import parallel as P
from fasop.estimators.analytic import overheads
from fasop.estimators.analytic.layers import Workload
from fasop.specs.catalog import AnalyticParams, GpuType
from fasop.specs.types import NodeType


def rank_nodes(nodes: tuple[NodeType, ...]) -> tuple[int, ...]:
    """Node index of each rank: node k holds the next nodes[k].gpus_per_node ranks."""
    return tuple(k for k, node in enumerate(nodes) for _ in range(node.gpus_per_node))


def replica_ranks(tp: int, dp: int, i: int, d: int) -> range:
    """The tp ranks of stage i's replica d (rank = t + tp·d + tp·dp·i)."""
    first = tp * d + tp * dp * i
    return range(first, first + tp)


def slowest(gpus) -> GpuType:
    """The GPU a synchronous group runs at: the least matmul rate, then the least memory bandwidth."""
    return min(gpus, key=H.pace_key)


def replica_stages(tp: int, dp: int, pp: int, nodes: tuple[NodeType, ...], gpus: tuple[GpuType, ...],
                   params: AnalyticParams, gpu_names: tuple[tuple[GpuType, ...], ...] | None = None
                   ) -> tuple[tuple[C.StageHardware, ...], ...]:
    """[replica][stage] hardware of a plan on `nodes` (gpus[k]: node k's catalog GPU) in rank
    order; `gpu_names[i][d]`, when given, is stage i's replica d's GPU instead of the rank order's
    (its memory then the GPU's). Links as `cost.one_stage`: within a node the GPUs' link, across
    nodes a GPU's share of the slowest node's network."""
    where = rank_nodes(nodes)
    assert len(where) >= tp * dp * pp, "fewer GPUs than ranks"
    g = min(n.gpus_per_node for n in nodes)
    intra = lambda ks: C.Link(min(gpus[k].intra_node_bytes_per_s * gpus[k].intra_node_share(params) for k in ks),
                              params.intra_node_latency_s)
    net = lambda ks: min(nodes[k].inter_node_bytes_per_s for k in ks)
    inter = lambda ks, share: C.Link(overheads.network_bytes_per_s(params, net(ks)) / share,
                                     overheads.network_latency_s(params, net(ks)))
    link = lambda ks, share: intra(ks) if H.one_domain(ks, g, H.domain_gpus(gpus, ks, g)) else inter(ks, share)
    span = lambda ranks: sorted({where[r] for r in ranks})
    stage_links = []   # per stage (EP / CP groups, DP rings): its whole block of nodes, the same for every replica
    for i in range(pp):
        block = span(range(tp * dp * i, tp * dp * (i + 1)))
        domain = H.domain_gpus(gpus, block, g)
        n = H.domain_nodes(block, g, domain)
        stage_links.append((P.GroupLinks(intra(block).bytes_per_s, overheads.network_bytes_per_s(params, net(block)),
                                         params.intra_node_latency_s, overheads.network_latency_s(params, net(block)),
                                         g, domain),
                            H.dp_link(block, g, domain, tp, intra(block), inter, n), n))   # as hardware.one_stage
    out = []
    for d in range(dp):
        stages = []
        for i in range(pp):
            ks = span(replica_ranks(tp, dp, i, d))
            nxt = None
            if i + 1 < pp:
                nxt = link(span([*replica_ranks(tp, dp, i, d), *replica_ranks(tp, dp, i + 1, d)]), min(g, tp * dp))
            gpu = slowest(gpus[k] for k in ks)
            limit = min(nodes[k].memory_limit_bytes for k in ks)
            if gpu_names is not None and gpu_names[i][d] is not gpu:
                gpu, limit = gpu_names[i][d], gpu_names[i][d].memory_bytes
            groups, ring, n = stage_links[i]
            stages.append(C.StageHardware(gpu=gpu, tp_link=link(ks, min(g, tp)), dp_link=ring,
                                          next_link=nxt, memory_limit_bytes=limit, groups=groups, domain_nodes=n))
        out.append(tuple(stages))
    return tuple(out)


def slowest_stages(w: Workload, replicas) -> tuple[C.StageHardware, ...]:
    """Per stage, the replica with the longest layer (fwd + bwd), holding the least memory of the
    stage's replicas: what a layer split must balance."""
    out = []
    for i in range(w.pp):
        column = [r[i] for r in replicas]
        worst = max(column, key=lambda hw: sum(C.layer_s(w, hw.gpu, hw.tp_link, hw.groups)))
        out.append(replace(worst, memory_limit_bytes=min(hw.memory_limit_bytes for hw in column)))
    return tuple(out)


def step(w: Workload, replicas, counts: tuple[int, ...]) -> C.Step:
    """The step of the slowest replica: every stage's gradient reduction waits for it."""
    return max((C.step(w, stages, counts) for stages in replicas), key=lambda s: s.step_s)


def peak_and_fits(w: Workload, replicas, counts: tuple[int, ...]) -> tuple[float, bool]:
    """(largest per-GPU memory of any stage, whether every replica's stage fits its GPU)."""
    peak, fits = 0.0, True
    for i, n in enumerate(counts):
        total = C.stage_memory(w, n, i).total
        peak = max(peak, total)
        fits = fits and all(total <= r[i].memory_limit_bytes for r in replicas)
    return peak, fits
