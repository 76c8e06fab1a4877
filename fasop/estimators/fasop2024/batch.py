"""FASOP-2024's batch plumbing: the chunks of plans the compiled kernels read, and the per-plan
records the Python path passes between partitioning, scheduling and finishing.

What each plan shares with others -- its combination of degrees (`Combos`), its layout, its
stage types -- is found once per group of plans sharing it; arrays hold each shared item once,
indexed per plan (`Chunk`).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter

import numpy as np

from fasop.core.recent import kept
from fasop.costs.compute import LayerCosts, stage_times
from fasop.costs.memory import elements_key, memory_tables
from fasop.estimators.fasop2024 import comm as fasop2024_comm
from fasop.estimators.fasop2024.layout import Layout, Stages
from fasop.partition.splits import Split
from fasop.plans.plan import Plan
from fasop.specs.types import NodeType

# `Fasop2024Estimator` in annotations: the estimator (estimator.py) that calls in; not imported, as it imports this module

f32 = np.float32


class Chosen:
    """A plan with its split chosen and scheduled: what `_finish_many` makes an estimate of."""

    __slots__ = ("plan", "layout", "stages", "p2p", "split", "ends", "compute", "proven", "gap_pct")

    def __init__(self, plan: Plan, layout: "Layout", stages: "Stages", p2p: tuple[float, ...], split: Split,
                 ends: list[float], compute: Sequence[float], proven: bool = False, gap_pct: float = 0.0):
        self.plan, self.layout, self.stages, self.p2p, self.split = plan, layout, stages, p2p, split
        self.ends, self.compute, self.proven, self.gap_pct = ends, compute, proven, gap_pct
        """ends: each stage's end; compute: each stage's fwd+bwd seconds per micro-batch."""


@dataclass(frozen=True)
class Prepared:
    plan: Plan
    stage_types: tuple[NodeType, ...]
    costs: tuple[LayerCosts, ...]
    p2p: tuple[float, ...]
    splits: list[Split]
    proven: bool = False
    gap_pct: float = 0.0
    """The optimal partitioner's gap (Estimate.partition_gap_pct)."""
    layout: Layout | None = None
    """The plan's layout (what `_finish` needs of it again), when known."""

    def stage_compute(self, counts: Sequence[int]) -> list[float]:
        return stage_times(self.costs, counts)


class Combos:
    """What a plan's estimate takes from its (tp, dp, pp, mbs, global batch) alone, one row per
    combination met by the estimators of one (model, cluster) and node types (`shared`): its
    stages, micro-batches, p2p volume, ZeRO bytes per parameter, its element tables' key
    (memory.elements_key), and indices of its shape (tp, dp, pp), its (tp, micro-batch) and, with
    several node types, the order of their paces at that (tp, micro-batch) (`Fasop2024Estimator.pace`)."""

    KEPT = 64
    """Node type lists whose Combos one (model, cluster) keeps before it starts over."""

    @classmethod
    def shared(cls, cache: dict, node_types: Sequence[NodeType]) -> "Combos":
        """The Combos of the estimators of one (model, cluster) (`cache`: their shared cache)
        whose inventories list these node types in this order (what the pace order's index reads):
        a pareto sweep's compositions of these types share most of their combinations."""
        return kept(cache.setdefault("combos", {}), tuple(n.name for n in node_types), cls, cls.KEPT)

    def __init__(self):
        self.rows: dict[tuple[int, int, int, int, int], int] = {}
        self.shapes: dict[tuple[int, int, int], int] = {}
        self.contexts: dict[tuple[int, int], int] = {}
        self.paces: dict[tuple, int] = {}
        self.memory_keys: list[tuple[int, int, int, int]] = []
        self._pace_of: list[int] = []  # per context
        self.pp, self.m, self.sharded = (np.zeros(0, dtype=np.int64) for _ in range(3))
        self.shape, self.context, self.pace = (np.zeros(0, dtype=np.intp) for _ in range(3))
        self.volume = np.zeros(0, dtype=f32)

    KEY = attrgetter("tp", "dp", "pp", "mbs", "global_batch_size")
    """A plan's combination."""

    def of(self, plans: Sequence[Plan], e: "Fasop2024Estimator") -> np.ndarray:
        """The row of each plan of `e`'s (whose combinations these are), adding the rows of new
        combinations. (`e` is passed, not kept: a reference back would make the estimator a
        cycle, left for the cyclic collector instead of freed when its search ends.)"""
        rows = self.rows
        keys = list(map(self.KEY, plans))
        found = list(map(rows.get, keys))
        if None not in found:
            return np.array(found, dtype=np.intp)
        contexts, shapes = self.contexts, self.shapes
        new = [key for key in dict.fromkeys(keys) if key not in rows]
        rows.update(zip(new, range(len(rows), len(rows) + len(new))))
        tp, dp, pp, mbs, batch = np.fromiter(itertools.chain.from_iterable(new), np.int64, 5 * len(new)).reshape(-1, 5).T
        tps, mbss = tp.tolist(), mbs.tolist()
        for key in dict.fromkeys(zip(tps, mbss)):  # new (tp, micro-batch)
            if key not in contexts:
                contexts[key] = len(contexts)
                # the order of the node types' paces matters only where stages span several types
                pace = e.pace(*key)[0] if len(e.node_types) > 1 else ()
                self._pace_of.append(self.paces.setdefault(pace, len(self.paces)))
        context = np.fromiter(map(contexts.__getitem__, zip(tps, mbss)), np.intp, len(new))
        m = batch // (dp * mbs)
        self.memory_keys += map(elements_key, mbss, tps, pp.tolist(), m.tolist())
        shape = np.fromiter((shapes.setdefault(key[:3], len(shapes)) for key in new), np.intp, len(new))
        added = (pp, m, fasop2024_comm.p2p_volume_of(mbs, e.model), e.param_bytes.zero(dp), shape, context,
                 np.array(self._pace_of, dtype=np.intp)[context])
        self.pp, self.m, self.volume, self.sharded, self.shape, self.context, self.pace = (
            np.concatenate([old, values]) for old, values in zip(
                (self.pp, self.m, self.volume, self.sharded, self.shape, self.context, self.pace), added))
        return np.array(list(map(rows.__getitem__, keys)), dtype=np.intp)


class Chunk:
    """A chunk of plans as the compiled kernels read them. What each plan shares with others --
    its combination of degrees (`Combos`), its layout (placement, tp, dp, pp), its stage types
    -- is found once per group of plans that share it, and the arrays hold each shared item
    once, indexed per plan. Plans of different placements whose kernel inputs are equal (the
    same stage time planes, sends, pp and micro-batches: FASOP's rotations that leave the same
    node types under every stage) are partitioned and scheduled once: `unique` (the rows of
    `which`, `p2p`, `pps`, `ms` to run) and `inverse` (each plan's among them)."""

    def __init__(self, estimator: "Fasop2024Estimator", plans: Sequence[Plan]):
        combos = estimator.combos
        rows = combos.of(plans, estimator)
        places: dict[int, int] = {}
        place_of = np.array([places.setdefault(id(p.placement), len(places)) for p in plans], dtype=np.intp)
        # layouts: one per (placement, shape), looked up in order of placement
        first, group_of = first_of_ints(place_of * len(combos.shapes) + combos.shape[rows])
        layouts: dict[int, int] = {}
        layout_list, first_plan, group_layout = [], [], []
        for k in first.tolist():
            layout = estimator.layouts.of(plans[k])
            if id(layout) not in layouts:
                layouts[id(layout)] = len(layout_list)
                layout_list.append(layout)
                first_plan.append(plans[k])
            group_layout.append(layouts[id(layout)])
        self.layout_of = np.array(group_layout, dtype=np.int64)[group_of]
        # stage types: the layout's own, or by the order of the node types' paces
        mixed = np.array([layout.stages is None for layout in layout_list])[self.layout_of]
        first, stage_of = first_of_ints(self.layout_of * (len(combos.paces) + 1) + mixed * combos.pace[rows])
        layout_of = self.layout_of.tolist()
        stage_list = [estimator.stages_of(layout_list[layout_of[k]], plans[k].tp, plans[k].mbs) for k in first.tolist()]
        first, same = first_of([id(st) for st in stage_list])  # layouts of one placement share their Stages
        stage_list, stage_of = [stage_list[k] for k in first], same[stage_of]
        self.stages = [stage_list[k] for k in stage_of.tolist()]
        self.combination = rows
        self.pps, self.ms, self.sharded = combos.pp[rows], combos.m[rows], combos.sharded[rows]
        self.width = width = int(self.pps.max())
        # the stage-time table plane of each stage: by (tp, micro-batch) and the stage's GPU type
        gpus = estimator.gpus
        contexts = list(combos.contexts)
        planes = np.array(estimator.compute.planes([(g, tp, mbs) for tp, mbs in contexts for g in gpus]),
                          dtype=np.int64).reshape(len(contexts), len(gpus))
        code = {g: k for k, g in enumerate(gpus)}
        codes = np.zeros((len(stage_list), width), dtype=np.intp)
        codes[_filled(stage_list, width)] = list(map(code.__getitem__, itertools.chain.from_iterable(
            st.gpus for st in stage_list)))
        self.which = planes[combos.context[rows][:, None], codes[stage_of]]
        # fasop2024_comm.p2p_seconds: the micro-batch's volume over each boundary's bandwidth, float32
        bandwidths, limits = gathered(layout_list, width)
        self.p2p = (combos.volume[rows][:, None] / bandwidths[self.layout_of]).astype(float)
        # what the step time and memory read: per stage, its bus; per layout, its DP all-reduce
        # by stage 0's layers, its embedding sync and stage memory limits
        self.shared = bus_rows(stage_list, width)[stage_of]
        self.dp_table = np.array([estimator.dp_table(plan, layout) for plan, layout in zip(first_plan, layout_list)])
        self.embedding = np.array([layout.embedding_s for layout in layout_list], dtype=f32)
        self.limits = limits
        # the element table plane of each plan (memory), found per combination
        distinct = list(dict.fromkeys(rows.tolist()))
        plane_of = np.zeros(len(combos.memory_keys), dtype=np.int64)
        plane_of[distinct] = memory_tables(estimator.model).of_keys([combos.memory_keys[r] for r in distinct])
        self.memory = plane_of[rows]
        # plans with equal kernel inputs (only plans of different placements can have them): of
        # one combination (pp, micro-batches, p2p volume, (tp, micro-batch)), equal stage GPU types
        # (their planes) and equal boundary bandwidths (their sends)
        if len(places) > 1:
            gpu_rows, bandwidth_rows = (first_of(_row_bytes(a))[1] for a in (codes, bandwidths))
            key = (gpu_rows[stage_of] * len(layout_list) + bandwidth_rows[self.layout_of]) * len(combos.rows) + rows
            self.unique, self.inverse = first_of_ints(key)
        else:
            self.unique = self.inverse = np.arange(len(plans))


def gathered(layouts: Sequence[Layout], width: int) -> tuple[np.ndarray, np.ndarray]:
    """(p2p bandwidths, memory limits) of each layout as rows of `width` entries, padded with
    1.0 and inf: gathered from the padded matrices of the layouts made together (layout.Rows),
    one fancy index per such set, consecutive layouts of one set at a time."""
    bandwidths, limits = np.ones((len(layouts), width), dtype=f32), np.full((len(layouts), width), np.inf)
    start = 0
    while start < len(layouts):
        matrices = layouts[start].rows[0]
        stop = start + 1
        while stop < len(layouts) and layouts[stop].rows[0] is matrices:
            stop += 1
        at = [layout.rows[1] for layout in layouts[start:stop]]
        w = min(width, matrices.limits.shape[1])
        bandwidths[start:stop, :w] = matrices.p2p_bandwidths[at, :w]
        limits[start:stop, :w] = matrices.limits[at, :w]
        start = stop
    return bandwidths, limits


def first_of(keys: list) -> tuple[list[int], np.ndarray]:
    """(the index of the first plan of each distinct key, in order of appearance; for each key,
    the number of its distinct key in that order)."""
    index: dict = {}
    first: list[int] = []
    of = []
    for k, key in enumerate(keys):
        number = index.get(key)
        if number is None:
            number = index[key] = len(first)
            first.append(k)
        of.append(number)
    return first, np.array(of, dtype=np.intp)


def first_of_ints(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """first_of of integer keys, on the array: (the index of the first of each distinct key, in
    order of appearance; each key's number in that order)."""
    order = np.argsort(keys, kind="stable")
    starts = np.empty(len(keys), dtype=bool)
    starts[:1] = True
    ordered = keys[order]
    np.not_equal(ordered[1:], ordered[:-1], out=starts[1:])
    firsts = order[starts]  # by key: its first index (the sort is stable)
    appearance = np.argsort(firsts, kind="stable")
    number = np.empty(len(firsts), dtype=np.intp)
    number[appearance] = np.arange(len(firsts))
    of = np.empty(len(keys), dtype=np.intp)
    of[order] = number[np.cumsum(starts) - 1]
    return firsts[appearance], of


def _row_bytes(rows: np.ndarray) -> list[bytes]:
    """Each row of a 2-D array as the bytes of its entries (equal rows, equal bytes)."""
    rows = np.ascontiguousarray(rows)
    return rows.view(np.dtype((np.void, rows.shape[1] * rows.itemsize))).ravel().tolist()


def rows_of(items: Sequence, key=id) -> tuple[list, np.ndarray]:
    """(the distinct items in order of first appearance, the index of each item among them);
    distinct by `key` (default: the same object)."""
    first, of = first_of([key(item) for item in items])
    return [items[k] for k in first], of


def bus_rows(stages: Sequence[Stages], width: int) -> np.ndarray:
    """Each Stages' shared-bus flags as a row of `width` (padded with False), uint8."""
    rows = np.zeros((len(stages), width), dtype=np.uint8)
    rows[_filled(stages, width)] = list(itertools.chain.from_iterable(st.shared for st in stages))
    return rows


def _filled(stages: Sequence[Stages], width: int) -> np.ndarray:
    """Which entries of rows of `width` a row per Stages its stages fill (the first of each row)."""
    return np.arange(width) < np.array([len(st.types) for st in stages])[:, None]
