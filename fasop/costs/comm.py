"""Which ranks talk to which: the rank pairs of each pipeline boundary, of stage 0's
data-parallel ring and of the tied-embedding sync, the node positions they read, and the least
intra- and inter-node bandwidth over a set of pairs. Geometry only: how long a transfer takes
is an estimator's rule (fasop-2024's: estimators/fasop2024/comm.py).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from fasop.plans.plan import Plan
from fasop.specs.types import ModelSpec



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
