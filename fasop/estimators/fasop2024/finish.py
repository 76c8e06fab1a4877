"""FASOP-2024's estimates from chosen splits: the batched fasop-minmax path (a chunk of plans on
arrays, fasop2024_plans) and the per-plan path (the optimal partitioner, estimate_split): each
split's schedule (1F1B, p2p-ends-only), the choice among a plan's candidate splits, step time
(fasop2024_dp), memory (fasop2024_memory) and dollars.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from fasop.costs.estimate import Estimate
from fasop.costs.memory import MemoryEstimate, memory_tables
from fasop.estimators.fasop2024.batch import Chosen, Chunk, Prepared, bus_rows, first_of_ints, gathered, rows_of
from fasop.estimators.fasop2024.dp import step_times
from fasop.estimators.fasop2024.memory import PARAM_BYTES, estimate_memory_many, memory_bytes, memory_report
from fasop.estimators.fasop2024.plans import candidate_splits, plan_splits
from fasop.partition.splits import Split
from fasop.plans.plan import Plan, trusted_many
from fasop.schedule.pipeline import one_f_one_b

# `Fasop2024Estimator` in annotations: the estimator (estimator.py) that calls in; not imported, as it imports this module

f32 = np.float32


def estimate_chunk(e: "Fasop2024Estimator", plans: Sequence[Plan], known: dict, kept: dict) -> list[Estimate]:
    """`Fasop2024Estimator.estimate_many` with fasop-minmax, on arrays a row per plan (fasop2024_batch.Chunk):
    every plan's candidate splits, their schedules and the choice among them
    (fasop2024_plans.plan_splits), then step time and memory. Plans of equal inputs (see
    Chunk) are partitioned and scheduled once. `known`: min-max results kept (minmax_rows);
    `kept`: pipelines' chosen splits kept (kept_splits)."""
    c = Chunk(e, plans)
    u, inverse = c.unique, c.inverse
    reported, ends, heads = kept_splits(kept, e.compute.table, c.which[u], c.p2p[u], c.pps[u], c.ms[u],
                                        e.segment_lengths, e.fwd_bwd_factor, known)
    reported, ends = reported[inverse], ends[inverse]
    partition, compute, end, p2p, _ = map(list, zip(*map(heads.__getitem__, inverse.tolist())))
    n = len(plans)
    step, dp = step_times(ends, c.shared.astype(bool), c.dp_table[c.layout_of, reported[:, 0]],
                          c.embedding[c.layout_of])
    step = step.astype(float)
    # memory: the stage bytes of each distinct (pipeline, combination), then each plan's fit
    tables = memory_tables(e.model)
    if len(u) < n:  # (else every plan its own pipeline: one placement)
        first, of = first_of_ints(inverse * (int(c.combination.max()) + 1) + c.combination)
    else:
        first = of = np.arange(n)
    stage_bytes, zero_bytes = memory_bytes(tables.params, tables.act, c.memory[first], reported[first],
                                           c.sharded[first], PARAM_BYTES.full)
    stage, zero = row_tuples(stage_bytes, c.pps[first]), row_tuples(zero_bytes, c.pps[first])
    if len(first) < n:
        stage_bytes, zero_bytes, of = stage_bytes[of], zero_bytes[of], of.tolist()
        stage, zero = [stage[k] for k in of], [zero[k] for k in of]
    oom, oom_gib, zero_oom, zero_gib = memory_report(stage_bytes, zero_bytes, c.limits[c.layout_of],
                                                     e.cluster.memory_overhead_factor)
    memory = trusted_many(MemoryEstimate, n, stage_bytes=stage, stage_zero_bytes=zero, is_oom=oom.tolist(),
                          oom_gpumem_gib=oom_gib, is_zero_oom=zero_oom.tolist(), zero_oom_gpumem_gib=zero_gib)
    return trusted_many(
        Estimate, n, plan=list(plans), partition=partition, stage_node_types=[st.types for st in c.stages],
        stage_compute_s=compute, p2p_s=p2p, stage_end_s=end,
        pipeline_time_s=[e[0] for e in end], dp_allreduce_s=dp.tolist(),
        embedding_allreduce_s=c.embedding.astype(float)[c.layout_of].tolist(), step_time_s=step.tolist(),
        memory=memory, usd_per_step=(e.usd_per_s * step).tolist(), partitioner=e.partitioner,
        partition_proven_optimal=False)


def greedy_splits(e: "Fasop2024Estimator", plans: Sequence[Plan], known: dict) -> list[list[Split]]:
    """Each plan's fasop2024_minmax.fasop_minmax_splits (the optimal partitioner's seeds), the
    min-max problems of all of them solved together on the chunk's arrays
    (fasop2024_plans.candidate_splits), move for move the same; `known` as estimate_chunk's."""
    c = Chunk(e, plans)
    found = candidate_splits(e.compute.table, c.which, c.p2p, c.pps, e.segment_lengths, known)
    return [[Split(*pair) for pair in pairs] for pairs in found]


KEPT_PIPELINES = 1 << 16
"""Pipelines whose chosen split a `kept` dict holds (~5 rows of pp numbers each) before it starts over."""


def kept_splits(kept: dict, table: np.ndarray, which: np.ndarray, comm: np.ndarray, pps: np.ndarray, ms: np.ndarray,
                segment_lengths: Sequence[int], k: float, known: dict) -> tuple[np.ndarray, np.ndarray, list]:
    """(reported, ends) of plan_splits (ends -inf past a row's pp), and each row's (reported,
    times, ends) as tuples of its first pp entries, its sends (first pp - 1), and its reported
    and ends as a (pp, 2) array, for pipelines met before read from `kept`: a pipeline is all
    plan_splits reads of a row (its pp, micro-batches, stage planes, sends), so plans of equal
    pipelines get equal splits, whatever their placement, degrees or search -- e.g. the
    compositions of a pareto sweep share many (`kept` lives as long as the estimators' shared
    cache of one model and cluster, like `known`). The rest are computed together (plan_splits)
    and kept."""
    count, width = which.shape
    columns = np.arange(width)
    # a row's key: the bytes of its micro-batches, then (plane, send) of each stage, up to its pp
    key = np.empty((count, 1 + 2 * width), np.int64)
    key[:, 0], key[:, 1::2] = ms, which
    key[:, 2::2] = np.where(columns < pps[:, None] - 1, comm, 0.0).view(np.int64)
    names = [row[:8 + 16 * pp] for row, pp in zip(key.view(np.dtype((np.void, key.shape[1] * 8))).ravel().tolist(),
                                                   pps.tolist())]
    heads = list(map(kept.get, names))
    missing = [j for j, head in enumerate(heads) if head is None]
    if missing:
        rows = np.array(missing, dtype=np.intp)
        r, _, t, e = plan_splits(table, which[rows], comm[rows], pps[rows], ms[rows], segment_lengths, k, known)
        counts = pps[rows]
        mask = columns < counts[:, None]
        stops = np.cumsum(counts).tolist()
        pairs = np.stack([r[mask], e[mask]], axis=1).astype(float)  # each row's (reported, end) per stage
        made = list(zip(row_tuples(r, counts), row_tuples(t, counts), row_tuples(e, counts),
                        row_tuples(comm[rows], counts - 1),
                        map(pairs.__getitem__, map(slice, [0] + stops[:-1], stops))))
        if len(kept) > KEPT_PIPELINES:
            kept.clear()
        kept.update(zip([names[j] for j in missing], made))
        for j, head in zip(missing, made):
            heads[j] = head
    stages = columns < pps[:, None]
    flat = np.concatenate([head[4] for head in heads])
    reported, ends = np.zeros((count, width), np.int64), np.full((count, width), -np.inf)
    reported[stages], ends[stages] = flat[:, 0], flat[:, 1]
    return reported, ends, heads


def row_tuples(values: np.ndarray, counts: np.ndarray) -> list[tuple]:
    """Row k's first counts[k] entries of `values` as a tuple of Python numbers, for every row."""
    flat = tuple(values[np.arange(values.shape[1]) < counts[:, None]].tolist())
    stops = np.cumsum(counts).tolist()
    return list(map(flat.__getitem__, map(slice, [0] + stops[:-1], stops)))


def schedule_all(e: "Fasop2024Estimator", prepared: list[Prepared], progress=None) -> list[list[np.ndarray]]:
    """Stage end times of every split of every plan; one schedule run per (pp, m), each
    distinct pipeline (stage times and end sends) scheduled once.
    progress(plans_done), if given, is called after each schedule run."""
    groups: dict[tuple[int, int], dict[tuple, list[tuple[int, int]]]] = defaultdict(dict)
    ends: list[list] = [[None] * len(p.splits) for p in prepared]
    for k, p in enumerate(prepared):
        for s, split in enumerate(p.splits):
            comp = p.stage_compute(split.scheduled)
            if p.plan.pp == 1:  # no pipeline: m micro-batches back to back
                ends[k][s] = np.array([float(f32(p.plan.num_microbatches * comp[0]))])
            else:  # p2p-ends-only: stage 0's forward and the last stage's backward sends
                pipeline = (tuple(comp), p.p2p[0], p.p2p[-1])
                groups[(p.plan.pp, p.plan.num_microbatches)].setdefault(pipeline, []).append((k, s))
    done_plans: set[int] = set()
    for (pp, m), pipelines in groups.items():
        comp = np.array([c for c, _, _ in pipelines], dtype=float).T
        send_fwd, send_bwd = np.zeros_like(comp), np.zeros_like(comp)
        send_fwd[0] = [first for _, first, _ in pipelines]
        send_bwd[pp - 1] = [last for _, _, last in pipelines]
        stage_ends = one_f_one_b(*e.split(comp), send_fwd, send_bwd, m)
        for col, members in enumerate(pipelines.values()):
            for k, s in members:
                ends[k][s] = stage_ends[:, col]
                done_plans.add(k)
        if progress:
            progress(len(done_plans))
    return ends


def chosen_split(e: "Fasop2024Estimator", p: Prepared, split_ends: list[np.ndarray]) -> Chosen:
    """The split of `p` with the lowest pipeline time (the first of equals)."""
    best = min(range(len(split_ends)), key=lambda s: (split_ends[s][0], s))
    layout = p.layout or e.layout(p.plan)
    return Chosen(p.plan, layout, e.stages_of(layout, p.plan.tp, p.plan.mbs), p.p2p, p.splits[best],
                   np.asarray(split_ends[best], dtype=float).tolist(), p.stage_compute(p.splits[best].scheduled),
                   p.proven, p.gap_pct)


def finish_many(e: "Fasop2024Estimator", chosen: Sequence[Chosen]) -> list[Estimate]:
    """Estimates of chosen splits: step time (fasop2024_dp.step_times), memory and
    dollars, on arrays with a row per plan and a column per stage (rows of shorter
    pipelines padded with stages that end at -inf and fit in any memory)."""
    width = max(c.plan.pp for c in chosen)
    layout_rows, layout_of = rows_of([c.layout for c in chosen])
    stage_rows, stages_of = rows_of([c.stages for c in chosen])
    ends = np.array([c.ends + [-np.inf] * (width - len(c.ends)) for c in chosen])
    pairs = np.array([e.dp_table(c.plan, c.layout)[c.split.reported[0]] for c in chosen], dtype=f32)
    steps, dps = step_times(ends, bus_rows(stage_rows, width).astype(bool)[stages_of], pairs,
                            np.array([layout.embedding_s for layout in layout_rows], dtype=f32)[layout_of])
    limits = gathered(layout_rows, width)[1]
    memory = estimate_memory_many(
        [c.plan for c in chosen], e.model, e.cluster,
        np.array([c.split.reported + (0,) * (width - len(c.split.reported)) for c in chosen], dtype=np.intp),
        limits[layout_of], param_bytes=PARAM_BYTES)
    return [Estimate(plan=c.plan, partition=c.split.reported, stage_node_types=c.stages.types,
                     stage_compute_s=tuple(c.compute), p2p_s=c.p2p, stage_end_s=tuple(c.ends),
                     pipeline_time_s=c.ends[0], dp_allreduce_s=dp, embedding_allreduce_s=float(c.layout.embedding_s),
                     step_time_s=step, memory=mem, usd_per_step=e.usd_per_s * step, partitioner=e.partitioner,
                     partition_proven_optimal=c.proven, partition_gap_pct=c.gap_pct)
            for c, dp, step, mem in zip(chosen, dps.tolist(), steps.tolist(), memory)]
