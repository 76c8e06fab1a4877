"""Communication over the link hierarchy: pipeline p2p, data-parallel ring and embedding sync.

Bandwidths in bytes/s, volumes in bytes, times in seconds. The fasop-2024 estimator computes
these in float32, operation by operation, as FASOP does (docs/estimators.md §4, §7); the order of the
operations below is part of that contract.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from fasop import model_math
from fasop.plan import Plan
from fasop.specs import ClusterSpec, ModelSpec

f32 = np.float32


def p2p_pairs(plan: Plan, boundary: int) -> list[tuple[int, int]]:
    """Rank pairs that send across stage boundary j -> j+1: every TP lane of every replica."""
    return _boundary_pairs(plan.tp * plan.dp, boundary)


def dp_ring_pairs(plan: Plan) -> list[tuple[int, int]]:
    """The hops of stage 0's data-parallel ring for TP lane tp-1 (docs/estimators.md §7)."""
    return _ring_pairs(plan.tp, plan.dp)


def embedding_pairs(plan: Plan, model: ModelSpec) -> list[tuple[int, int]]:
    """The TP lanes of replica dp-1 between stage 0 and stage pp-1 that sync the tied word
    embedding (docs/estimators.md §7); none when the model has no embedding tied to a head on another stage."""
    return _sync_pairs(plan.tp, plan.dp, plan.pp) if embedding_tied(model) else []


def embedding_tied(model: ModelSpec) -> bool:
    """Does the model sync a word embedding tied to its head (first and last entries of its list)?"""
    kinds = model.layer_kinds
    return model.tie_word_embeddings and kinds[0] == "embedding" and kinds[-1] == "head"


def _boundary_pairs(block: int, boundary: int) -> list[tuple[int, int]]:
    # ranks t + tp*d + block*j of stage j (Plan.rank), block = tp*dp
    return [(a, a + block) for a in range(boundary * block, (boundary + 1) * block)]


def _ring_pairs(tp: int, dp: int) -> list[tuple[int, int]]:
    t = tp - 1
    return [(t + tp * d, t + tp * ((d + 1) % dp)) for d in range(dp)]


def _sync_pairs(tp: int, dp: int, pp: int) -> list[tuple[int, int]]:
    if pp == 1:
        return []
    d, last = dp - 1, tp * dp * (pp - 1)
    return [(t + tp * d, t + tp * d + last) for t in range(tp)]


@lru_cache(maxsize=4096)
def link_positions(tp: int, dp: int, pp: int, gpus_per_node: int, tied: bool) -> tuple[np.ndarray, np.ndarray]:
    """(intra, inter) for plans of these degrees, whatever their node types: per link -- each
    stage boundary (`p2p_pairs`), stage 0's DP ring (`dp_ring_pairs`), the embedding sync
    (`embedding_pairs`, none unless `tied`) -- the node positions that `least_bandwidths` folds
    its rank pairs over: those of pairs on one node (intra), those of pairs across two (inter).
    A row per link, padded with -1 (no node)."""
    m = gpus_per_node
    links = [_boundary_pairs(tp * dp, j) for j in range(pp - 1)] + [_ring_pairs(tp, dp)]
    links.append(_sync_pairs(tp, dp, pp) if tied else [])
    intra = [list(dict.fromkeys(a // m for a, b in pairs if a // m == b // m)) for pairs in links]
    inter = [list(dict.fromkeys(q for a, b in pairs if a // m != b // m for q in (a // m, b // m))) for pairs in links]
    return _padded(intra), _padded(inter)


def _padded(rows: list[list[int]]) -> np.ndarray:
    width = max(1, max(map(len, rows)))
    return np.array([row + [-1] * (width - len(row)) for row in rows], dtype=np.intp)


def least_bandwidths(plan: Plan, pairs: list[tuple[int, int]]) -> tuple[float, float]:
    """(least intra-node bandwidth over the pairs on one node, least inter-node bandwidth over
    the nodes of the pairs across two), inf where there are none: every link time below is a
    function of these two (a pair across nodes runs at the slower node's inter bandwidth)."""
    m = plan.gpus_per_node
    intra = inter = float("inf")
    for node_a, node_b in dict.fromkeys((a // m, b // m) for a, b in pairs):
        if node_a == node_b:
            intra = min(intra, plan.placement[node_a].intra_node_bytes_per_s)
        else:
            inter = min(inter, plan.placement[node_a].inter_node_bytes_per_s,
                        plan.placement[node_b].inter_node_bytes_per_s)
    return intra, inter


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
