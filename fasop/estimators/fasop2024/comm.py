"""FASOP-2024's communication times (docs/estimators.md §4, §7): pipeline p2p over the
boundary bandwidth with the spec's divisors, the data-parallel ring all-reduce with FASOP's
contention rules, and the tied-embedding sync -- in float32, operation by operation, as FASOP
computes them; the order of the operations below is part of that contract. Bandwidths in
bytes/s, volumes in bytes, times in seconds; which ranks talk: fasop/costs/comm.py.
"""

from __future__ import annotations

import numpy as np

from fasop.costs import model_math
from fasop.costs.comm import dp_ring_pairs, embedding_pairs, least_bandwidths, p2p_pairs
from fasop.plans.plan import Plan
from fasop.specs.types import ClusterSpec, ModelSpec

f32 = np.float32


def p2p_seconds(plan: Plan, model: ModelSpec, cluster: ClusterSpec,
                bandwidths: tuple[np.float32, ...] | None = None) -> tuple[float, ...]:
    """Activation transfer time across each stage boundary j -> j+1 (docs/estimators.md §4): volume b*s*h
    elements over the boundary's `p2p_bandwidths` (pass them if you have them: they do not depend
    on the micro-batch size)."""
    if bandwidths is None:
        bandwidths = p2p_bandwidths(plan, cluster)
    # one float32 division per boundary, on an array
    return tuple((p2p_volume(plan, model) / np.array(bandwidths, dtype=f32)).tolist())


def p2p_bandwidths(plan: Plan, cluster: ClusterSpec) -> tuple[np.float32, ...]:
    """Bandwidth of each stage boundary j -> j+1 (docs/estimators.md §4), from `least_bandwidths` of its pairs."""
    return tuple(boundary_bandwidth(plan, cluster, *least_bandwidths(plan, p2p_pairs(plan, j)))
                 for j in range(plan.pp - 1))


def boundary_bandwidth(plan: Plan, cluster: ClusterSpec, intra: float, inter: float) -> np.float32:
    """A boundary's bandwidth (docs/estimators.md §4). Each TP lane of each replica sends to its peer in the
    next stage; an inter-node pair gets min(inter)/dp/tp/divisor (the replicas and lanes share the
    NICs), an intra-node pair intra/divisor; the boundary waits for its slowest pair. The least
    of these float32 quotients is the quotient of the least bandwidth (they are monotone), so
    `least_bandwidths` is all it needs; inf where the pairs have none of a kind."""
    intra_bw = f32(intra) / f32(cluster.p2p_intra_node_divisor)
    inter_bw = f32(inter) / f32(plan.dp) / f32(plan.tp) / f32(cluster.p2p_inter_node_divisor)
    return min(intra_bw, inter_bw)


def p2p_boundary_seconds(plan: Plan, model: ModelSpec, cluster: ClusterSpec, intra: float, inter: float) -> float:
    """One boundary's transfer time from `least_bandwidths` of its pairs (0 when both are inf)."""
    return float(p2p_volume(plan, model) / boundary_bandwidth(plan, cluster, intra, inter))


def p2p_volume(plan: Plan, model: ModelSpec) -> np.float32:
    """Bytes one micro-batch's activations take across a boundary: b*s*h elements, float32."""
    return p2p_volume_of(np.int64(plan.mbs), model)


def p2p_volume_of(mbs, model: ModelSpec):
    """p2p_volume of micro-batch sizes (an int64 or an int64 array): the integer product, as float32."""
    return (model_math.p2p_elements(mbs, model.sequence_length, model.hidden_size) * model.bytes_per_element).astype(f32)


def dp_ring_bandwidth(plan: Plan) -> np.float32:
    """Slowest hop of stage 0's data-parallel ring for TP lane tp-1 (docs/estimators.md §7)."""
    return f32(min(least_bandwidths(plan, dp_ring_pairs(plan))))


def dp_allreduce_seconds(plan: Plan, params: np.float32, ring_bw: np.float32, stage_shared_bus: bool,
                         bytes_per_element: int) -> np.float32:
    """Ring all-reduce of `params` gradients of `bytes_per_element` bytes (the model spec's
    precision of what GPUs exchange): 2(dp-1)/dp of the buffer over the ring.

    FASOP's contention rules (docs/estimators.md §7): when the replicas fill a node (tp*dp >= M) the TP
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
    return f32(2 * (plan.dp - 1)) * params * f32(bytes_per_element) / (f32(plan.dp) * bw)


def embedding_allreduce_seconds(plan: Plan, model: ModelSpec) -> np.float32:
    """Sync of the tied word embedding between the first and the last stage (docs/estimators.md §7)."""
    return embedding_seconds(plan, model, min(least_bandwidths(plan, embedding_pairs(plan, model))))


def embedding_seconds(plan: Plan, model: ModelSpec, slowest: float) -> np.float32:
    """The embedding sync over its slowest TP lane (`embedding_pairs`), shared by min(dp, M)
    replicas; 0 without pairs (slowest = inf)."""
    shared = slowest / min(plan.dp, plan.gpus_per_node)
    volume = model_math.embedding_sync_elements(model.hidden_size, model.vocab_size) * model.bytes_per_element
    return f32(volume / (shared * plan.tp))
