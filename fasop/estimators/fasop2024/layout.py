"""FASOP-2024's view of a node placement: what a plan's estimate takes from it: per (placement, tp, dp, pp), each
stage's node types, each stage boundary's bandwidth, stage 0's DP ring, the embedding sync
and each stage's memory limit (docs/estimators.md §2, §4, §7, §8).

Searches ask for thousands of plans placement by placement, each placement with the same
(tp, dp, pp) choices, so `Layouts` makes the layouts of a new placement all at once and keeps
those of recent placements for every estimator of the (model, cluster) (a search with another
partitioner, --top, cutoff or placement strategy meets the same placements again). Which node
positions every link and stage reads depends only on the degrees (`comm.link_positions`,
`plan.stage_node_indices`, `limit_nodes`), so each link's least bandwidths are one fancy index
over the placement's node arrays, and FASOP's float32 formulas run on arrays (the same
operations, elementwise, as comm's per plan).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from fasop.core.recent import kept
from fasop.costs import comm
from fasop.costs import model_math
from fasop.plans.plan import Plan, stage_node_indices, trusted_many
from fasop.specs.types import ClusterSpec, ModelSpec, NodeType

f32 = np.float32
Shape = tuple[int, int, int]
"""(tp, dp, pp)."""


class Stages:
    """The node type that sets each stage's pace, and what an estimate reads of them."""

    __slots__ = ("types", "gpus", "shared")

    def __init__(self, types: tuple[NodeType, ...]):
        self.types = types
        self.gpus = tuple(t.gpu for t in types)
        self.shared = tuple(t.intra_node_shared for t in types)


@dataclass(frozen=True, kw_only=True)
class Layout:
    """What an estimate takes from the placement, for one (placement, tp, dp, pp)."""

    stage_nodes: tuple[tuple[NodeType, ...], ...]
    """The distinct node types holding each stage, in node order."""
    p2p_bandwidths: np.ndarray
    """fasop2024_comm.p2p_bandwidths: each stage boundary's (float32)."""
    dp_ring: np.float32
    """fasop2024_comm.dp_ring_bandwidth: the slowest hop of stage 0's DP ring."""
    embedding_s: np.float32
    """fasop2024_comm.embedding_allreduce_seconds."""
    limits: tuple[float, ...]
    """stage_limits: each stage's memory limit (bytes)."""
    stages: Stages | None
    """The stage types when every stage is on nodes of one type; else None, and they depend on
    which node types are slower for the micro-batch size (`Fasop2024Estimator.stages_of`)."""
    rows: tuple | None = None
    """(Rows, k): this layout's row in the padded matrices of the layouts made with it."""


@dataclass(frozen=True)
class Rows:
    """The layouts of one placement made together, as padded matrices (a row per layout, W =
    their largest pp columns): what the compiled kernels read, gathered a chunk at a time."""

    p2p_bandwidths: np.ndarray
    """float32, each row's first pp - 1 entries the layout's, then 1.0."""
    limits: np.ndarray
    """float64, each row's first pp entries the layout's, then inf."""


KEPT_PLACEMENTS = 256
"""Placements whose layouts a `Layouts` store keeps before it starts over: ~32 KiB each (12-17
(tp, dp, pp) on 8, 16 or 64 nodes), at most ~8 MiB."""


class Layouts:
    """The layouts of recent placements, for one (model, cluster). `kept`: the store of the
    layouts made so far, by the placement's node names (the estimators of one (model, cluster)
    share one); each entry holds its layouts by (tp, dp, pp) and the Stages of its uniform stages."""

    def __init__(self, model: ModelSpec, cluster: ClusterSpec, kept: dict | None = None):
        self.model, self.cluster = model, cluster
        self._tied = comm.embedding_tied(model)
        self._kept: dict[tuple[str, ...], tuple[dict, dict]] = {} if kept is None else kept
        self._layouts: dict[Shape, Layout] = {}
        self._names: tuple[str, ...] = ()
        self._placement: tuple[NodeType, ...] | None = None
        self._arrays: tuple | None = None  # the latest placement's node arrays (_node_arrays), when made
        self._shapes: dict[Shape, None] = {}  # every (tp, dp, pp) expected or asked, in order
        self._stages: dict[tuple[int, ...], tuple] = {}  # (Stages, stage nodes) of uniform stages, by kind codes

    def expect(self, shapes: Iterable[Shape]) -> None:
        """The (tp, dp, pp) that plans will have: the layouts of all of them are made together
        when a placement is first asked about."""
        self._shapes.update(dict.fromkeys(shapes))

    def of(self, plan: Plan) -> Layout:
        """The plan's layout (kept with those of recent placements of the same node types)."""
        if plan.placement is not self._placement:
            self._set_placement(plan.placement)
        key = (plan.tp, plan.dp, plan.pp)
        layout = self._layouts.get(key)
        if layout is None:
            self._shapes[key] = None
            missing = tuple(shape for shape in self._shapes if shape not in self._layouts)  # all at once
            self._layouts.update(zip(missing, self._new(plan.placement, missing)))
            layout = self._layouts[key]
        return layout

    def _set_placement(self, placement: tuple[NodeType, ...]) -> None:
        """The kept layouts of the placement's node types (a new, empty entry if none)."""
        names = tuple(n.name for n in placement)
        if names != self._names:
            self._layouts, self._stages = kept(self._kept, names, lambda: ({}, {}), KEPT_PLACEMENTS)
            self._names = names
            self._arrays = None
        self._placement = placement

    def _node_arrays(self, placement: tuple[NodeType, ...]) -> tuple:
        """(intra-node and inter-node bytes/s of each node, then inf for position -1; memory
        limits; the node types by kind code, each node's kind code), made once per placement."""
        if self._arrays is None:
            inf = [np.inf]  # what position -1 (no node) reads
            kinds = {n.name: n for n in placement}  # by name: NodeType hashes all its fields
            codes = {name: k for k, name in enumerate(kinds)}
            self._arrays = (np.array([n.intra_node_bytes_per_s for n in placement] + inf),
                            np.array([n.inter_node_bytes_per_s for n in placement] + inf),
                            np.array([n.memory_limit_bytes for n in placement]),
                            list(kinds.values()), np.array([codes[n.name] for n in placement]))
        return self._arrays

    def _new(self, placement: tuple[NodeType, ...], shapes: tuple[Shape, ...]) -> list[Layout]:
        """The layout of each (tp, dp, pp) on the latest placement."""
        m, cluster = placement[0].gpus_per_node, self.cluster
        node_intra, node_inter, node_memory, kinds, node_codes = self._node_arrays(placement)
        links = shape_links(shapes, m, len(placement), self._tied)
        intra, inter = node_intra[links.intra].min(axis=1), node_inter[links.inter].min(axis=1)
        # fasop2024_comm.boundary_bandwidth, per link; only the stage boundaries' are read
        intra_bw = intra.astype(f32) / f32(cluster.p2p_intra_node_divisor)
        inter_bw = inter.astype(f32) / links.dp / links.tp / f32(cluster.p2p_inter_node_divisor)
        bandwidths = np.minimum(intra_bw, inter_bw)
        least = np.minimum(intra, inter)
        rings = least[links.rings].astype(f32)  # fasop2024_comm.dp_ring_bandwidth
        volume = model_math.embedding_sync_elements(self.model.hidden_size, self.model.vocab_size) * \
            self.model.bytes_per_element
        syncs = (volume / (least[links.syncs] / links.replicas * links.lanes)).astype(f32)  # fasop2024_comm.embedding_seconds
        codes = node_codes[links.stages]
        uniform = np.minimum.reduceat((codes == codes[:, :1]).all(axis=1), links.first_stage[:-1]).tolist()
        memory = node_memory[links.limits]
        firsts, limits = codes[:, 0].tolist(), memory.tolist()
        rows = Rows(p2p_bandwidths=np.where(links.send_columns, bandwidths[links.sends_at], f32(1.0)),
                    limits=np.where(links.stage_columns, memory[links.stages_at], np.inf))
        stage_nodes, stage_types, sends, limit_rows = [], [], [], []
        for k, (tp, dp, pp) in enumerate(shapes):
            first, stage = links.first_link[k], links.first_stage[k]
            if uniform[k]:  # every stage on nodes of one type; shapes with the same stage types share one Stages
                key = tuple(firsts[stage:stage + pp])
                if key not in self._stages:
                    types = tuple(kinds[c] for c in key)
                    self._stages[key] = (Stages(types), tuple((t,) for t in types))
                stages, nodes = self._stages[key]
            else:
                stages = None
                nodes = tuple(tuple({placement[q].name: placement[q] for q in indices}.values())
                              for indices in stage_node_indices(tp * dp, pp, m))
            stage_types.append(stages)
            stage_nodes.append(nodes)
            sends.append(bandwidths[first:first + pp - 1])
            limit_rows.append(tuple(limits[stage:stage + pp]))
        n = len(shapes)
        return trusted_many(Layout, n, stage_nodes=stage_nodes, p2p_bandwidths=sends, dp_ring=list(rings),
                            embedding_s=list(syncs), limits=limit_rows, stages=stage_types,
                            rows=[(rows, k) for k in range(n)])


@dataclass(frozen=True)
class ShapeLinks:
    """Node positions of the links and stages of several (tp, dp, pp) on N nodes, concatenated:
    per shape its pp - 1 stage boundaries, stage 0's DP ring and the embedding sync
    (comm.link_positions; intra and inter padded with -1, which reads a node array's final inf),
    and its pp stages (plan.stage_node_indices, rows padded with their first node; the memory
    limit node, limit_nodes)."""

    intra: np.ndarray
    inter: np.ndarray
    tp: np.ndarray
    """float32, per link: its shape's tp (and `dp`)."""
    dp: np.ndarray
    first_link: list[int]
    stages: np.ndarray
    limits: np.ndarray
    first_stage: list[int]
    rings: np.ndarray
    """Per shape: the index of its DP ring link (and of its embedding link, `syncs`)."""
    syncs: np.ndarray
    replicas: np.ndarray
    """Per shape: min(dp, GPUs per node), and its tp (`lanes`): the embedding sync's sharing."""
    lanes: np.ndarray
    sends_at: np.ndarray
    """The padded rows of Layouts (layout.Rows), a row per shape and a column per stage of the
    deepest: the link of each stage boundary (first link + column, clipped to the last), where
    `send_columns` (column < pp - 1); and each stage's limit node entry (`stages_at`), where
    `stage_columns` (column < pp)."""
    send_columns: np.ndarray
    stages_at: np.ndarray
    stage_columns: np.ndarray


@lru_cache(maxsize=256)
def shape_links(shapes: tuple[Shape, ...], gpus_per_node: int, num_nodes: int, tied: bool) -> ShapeLinks:
    positions = [comm.link_positions(tp, dp, pp, gpus_per_node, tied) for tp, dp, pp in shapes]
    stage_rows = [row for tp, dp, pp in shapes for row in stage_node_indices(tp * dp, pp, gpus_per_node)]
    width = max(map(len, stage_rows))
    counts = [pp + 1 for _, _, pp in shapes]
    first_link = np.cumsum([0] + counts)
    first_stage = np.cumsum([0] + [pp for _, _, pp in shapes])
    pps = np.array([pp for _, _, pp in shapes])
    columns = np.arange(pps.max())
    return ShapeLinks(
        intra=_stacked([p[0] for p in positions]), inter=_stacked([p[1] for p in positions]),
        tp=np.repeat(np.array([tp for tp, _, _ in shapes], dtype=f32), counts),
        dp=np.repeat(np.array([dp for _, dp, _ in shapes], dtype=f32), counts),
        first_link=first_link.tolist(),
        stages=np.array([row + (row[0],) * (width - len(row)) for row in stage_rows], dtype=np.intp),
        limits=np.array([q for _, _, pp in shapes for q in limit_nodes(pp, num_nodes)], dtype=np.intp),
        first_stage=first_stage.tolist(),
        rings=first_link[:-1] + np.array([pp - 1 for _, _, pp in shapes]),
        syncs=first_link[:-1] + np.array([pp for _, _, pp in shapes]),
        replicas=np.array([min(dp, gpus_per_node) for _, dp, _ in shapes]), lanes=np.array([tp for tp, _, _ in shapes]),
        sends_at=np.minimum(first_link[:-1, None] + columns, first_link[-1] - 1),
        send_columns=columns < pps[:, None] - 1,
        stages_at=np.minimum(first_stage[:-1, None] + columns, first_stage[-1] - 1),
        stage_columns=columns < pps[:, None])


def _stacked(blocks: list[np.ndarray]) -> np.ndarray:
    """Rows of the blocks one after another, padded with -1 to the widest."""
    out = np.full((sum(len(b) for b in blocks), max(b.shape[1] for b in blocks)), -1, dtype=np.intp)
    row = 0
    for b in blocks:
        out[row:row + len(b), :b.shape[1]] = b
        row += len(b)
    return out


def fasop_limit_node(plan: Plan, stage: int) -> int:
    """Node whose memory limit FASOP applies to a stage (docs/estimators.md §8, quirk kept): for pp < N
    the last node it reads is the second-to-last of the stage's span."""
    return limit_nodes(plan.pp, len(plan.placement))[stage]


@lru_cache(maxsize=4096)
def limit_nodes(pp: int, n: int) -> tuple[int, ...]:
    """`fasop_limit_node` of each of pp stages on n nodes. pp > n: the node holding the stage's
    first rank, stage * n // pp; that is FASOP's stage // (pp // n) where n divides pp (FASOP
    reads past the last node otherwise). pp = n: node i. pp < n: FASOP's reading of the span."""
    if pp >= n:
        return tuple(stage * n // pp for stage in range(pp))
    span = n // pp
    return tuple(max(stage * span, (stage + 1) * span - 2) for stage in range(pp))


def stage_limits(plan: Plan) -> tuple[float, ...]:
    """The memory limit (bytes) applied to each stage (`fasop_limit_node`)."""
    return tuple(plan.placement[q].memory_limit_bytes for q in limit_nodes(plan.pp, len(plan.placement)))
