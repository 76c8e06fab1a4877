"""FASOP-2024's estimates from chosen splits: the batched fasop-minmax path (a chunk of plans on
arrays, fasop2024_plans) and the per-plan path (the optimal partitioner, estimate_split): each
split's schedule (1F1B, p2p-ends-only), the choice among a plan's candidate splits, step time
(fasop2024_dp), memory (fasop2024_memory) and dollars.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from fasop.estimate import Estimate
from fasop.estimators.fasop2024_batch import Chosen, Chunk, Prepared, bus_rows, gathered, rows_of
from fasop.estimators.fasop2024_dp import step_times
from fasop.estimators.fasop2024_memory import PARAM_BYTES, estimate_memory_many, memory_arrays
from fasop.estimators.fasop2024_plans import plan_splits
from fasop.memory import MemoryEstimate, memory_tables
from fasop.plan import Plan, trusted_many
from fasop.schedule import one_f_one_b

if TYPE_CHECKING:
    from fasop.estimators.fasop2024 import Fasop2024Estimator

f32 = np.float32


def estimate_chunk(e: "Fasop2024Estimator", plans: Sequence[Plan], known: dict) -> list[Estimate]:
    """`Fasop2024Estimator.estimate_many` with fasop-minmax, on arrays a row per plan (fasop2024_batch.Chunk):
    every plan's candidate splits, their schedules and the choice among them
    (fasop2024_plans.plan_splits), then step time and memory. Plans of equal inputs (see
    Chunk) are partitioned and scheduled once. `known`: min-max results kept (minmax_rows)."""
    c = Chunk(e, plans)
    u, inverse = c.unique, c.inverse
    reported, _, times, ends = (rows[inverse] for rows in plan_splits(
        e.compute.table, c.which[u], c.p2p[u], c.pps[u], c.ms[u], e.segment_lengths, e.fwd_bwd_factor, known))
    n = len(plans)
    stages = np.arange(c.width) < c.pps[:, None]
    step, dp = step_times(np.where(stages, ends, -np.inf), c.shared.astype(bool),
                          c.dp_table[c.layout_of, reported[:, 0]], c.embedding[c.layout_of])
    step = step.astype(float)
    tables = memory_tables(e.model)
    stage_bytes, zero_bytes, oom, oom_gib, zero_oom, zero_gib = memory_arrays(
        tables.params, tables.act, c.memory, reported, c.limits[c.layout_of], c.sharded,
        e.cluster.memory_overhead_factor, PARAM_BYTES.full)
    memory = trusted_many(MemoryEstimate, n, stage_bytes=_heads(stage_bytes, c.pps),
                          stage_zero_bytes=_heads(zero_bytes, c.pps), is_oom=oom.tolist(), oom_gpumem_gib=oom_gib,
                          is_zero_oom=zero_oom.tolist(), zero_oom_gpumem_gib=zero_gib)
    end = _heads(ends, c.pps)
    return trusted_many(
        Estimate, n, plan=list(plans), partition=_heads(reported, c.pps), stage_node_types=[st.types for st in c.stages],
        stage_compute_s=_heads(times, c.pps), p2p_s=_heads(c.p2p, c.pps - 1), stage_end_s=end,
        pipeline_time_s=[e[0] for e in end], dp_allreduce_s=dp.tolist(),
        embedding_allreduce_s=c.embedding.astype(float)[c.layout_of].tolist(), step_time_s=step.tolist(),
        memory=memory, usd_per_step=(e.usd_per_s * step).tolist(), partitioner=e.partitioner,
        partition_proven_optimal=False)


def _heads(rows: np.ndarray, counts: np.ndarray) -> list[tuple]:
    """The first counts[k] entries of row k of `rows`, as a tuple of Python numbers per row
    (the rows of one count sliced together)."""
    out: list = [None] * len(rows)
    for count in np.unique(counts).tolist():
        at = np.flatnonzero(counts == count)
        for k, row in zip(at.tolist(), map(tuple, rows[at, :count].tolist())):
            out[k] = row
    return out


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
