"""Communication over the link hierarchy: pipeline p2p, data-parallel ring and embedding sync.

Bandwidths in bytes/s, volumes in bytes, times in seconds. The fasop-2024 estimator computes
these in float32, operation by operation, as FASOP does (MODEL.md §4, §7); the order of the
operations below is part of that contract.
"""

from __future__ import annotations

import numpy as np

from fasop.plan import Plan
from fasop.specs import ClusterSpec, ModelSpec

f32 = np.float32


def _pair_bandwidth(plan: Plan, rank_a: int, rank_b: int) -> tuple[bool, float]:
    """(same node?, link bandwidth between two ranks): intra of the node, else the slower inter."""
    m = plan.gpus_per_node
    return _node_bandwidth(plan, rank_a // m, rank_b // m)


def _node_bandwidth(plan: Plan, a: int, b: int) -> tuple[bool, float]:
    """(same node?, link bandwidth between nodes a and b of the placement)."""
    node_a, node_b = plan.placement[a], plan.placement[b]
    if a == b:
        return True, node_a.intra_node_bytes_per_s
    return False, min(node_a.inter_node_bytes_per_s, node_b.inter_node_bytes_per_s)


def p2p_seconds(plan: Plan, model: ModelSpec, cluster: ClusterSpec,
                bandwidths: tuple[np.float32, ...] | None = None) -> tuple[float, ...]:
    """Activation transfer time across each stage boundary j -> j+1 (MODEL.md §4): volume b*s*h
    elements over the boundary's `p2p_bandwidths` (pass them if you have them: they do not depend
    on the micro-batch size)."""
    volume = f32(plan.mbs * model.sequence_length * model.hidden_size * model.bytes_per_element)
    if bandwidths is None:
        bandwidths = p2p_bandwidths(plan, cluster)
    return tuple(float(volume / bw) for bw in bandwidths)


def p2p_bandwidths(plan: Plan, cluster: ClusterSpec) -> tuple[np.float32, ...]:
    """Bandwidth of each stage boundary j -> j+1 (MODEL.md §4).

    Each TP lane of each replica sends to its peer in the next stage: ranks a and a + tp*dp for
    a in stage j's block. An inter-node pair gets min(inter)/dp/tp/divisor (the replicas and
    lanes share the NICs), an intra-node pair intra/divisor; the boundary waits for its slowest
    pair. Pairs between the same two nodes have the same bandwidth, so each node pair counts once.
    """
    inter_div, intra_div = f32(cluster.p2p_inter_node_divisor), f32(cluster.p2p_intra_node_divisor)
    m, block = plan.gpus_per_node, plan.tp * plan.dp
    out = []
    for j in range(plan.pp - 1):
        slowest = None
        for a, b in dict.fromkeys((r // m, (r + block) // m) for r in range(j * block, (j + 1) * block)):
            same, bw = _node_bandwidth(plan, a, b)
            if same:
                bw = f32(bw) / intra_div
            else:
                bw = f32(bw) / f32(plan.dp) / f32(plan.tp) / inter_div
            slowest = bw if slowest is None else min(slowest, bw)
        out.append(slowest)
    return tuple(out)


def dp_ring_bandwidth(plan: Plan) -> np.float32:
    """Slowest hop of stage 0's data-parallel ring for TP lane tp-1 (MODEL.md §7)."""
    t = plan.tp - 1
    slowest = None
    for d in range(plan.dp):
        _, bw = _pair_bandwidth(plan, plan.rank(0, d, t), plan.rank(0, (d + 1) % plan.dp, t))
        slowest = bw if slowest is None else min(slowest, bw)
    return f32(slowest)


def dp_allreduce_seconds(plan: Plan, params: np.float32, ring_bw: np.float32, stage_shared_bus: bool) -> np.float32:
    """Ring all-reduce of `params` 16-bit gradients: 2(dp-1)/dp of the buffer over the ring.

    FASOP's contention rules (MODEL.md §7): when the replicas fill a node (tp*dp >= M) the TP
    lanes share the ring's links (bw / tp); when a node holds several rings on a shared bus
    (PCIe, tp > 1) they share it (bw / (M/dp)).
    """
    if plan.dp == 1:
        return f32(0.0)
    m = plan.gpus_per_node
    bw = ring_bw
    if plan.tp * plan.dp >= m:
        bw = bw / f32(plan.tp)
    elif plan.tp > 1 and stage_shared_bus:
        bw = bw / f32(m / plan.dp)
    return f32(2 * (plan.dp - 1)) * params * f32(2) / (f32(plan.dp) * bw)


def embedding_allreduce_seconds(plan: Plan, model: ModelSpec) -> np.float32:
    """Sync of the tied word embedding between the first and the last stage (MODEL.md §7).

    Only when the embedding is tied to a head on another stage. Link: the slowest TP lane of
    replica dp-1 between stage 0 and stage pp-1, shared by min(dp, M) replicas.
    """
    kinds = model.layer_kinds
    if plan.pp == 1 or not model.tie_word_embeddings or kinds[0] != "embedding" or kinds[-1] != "head":
        return f32(0.0)
    d = plan.dp - 1
    slowest = min(_pair_bandwidth(plan, plan.rank(0, d, t), plan.rank(plan.pp - 1, d, t))[1] for t in range(plan.tp))
    shared = slowest / min(plan.dp, plan.gpus_per_node)
    volume = model.hidden_size * model.vocab_size * model.bytes_per_element
    return f32(volume / (shared * plan.tp))
