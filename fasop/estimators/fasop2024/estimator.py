"""estimate(plan) -> Estimate: step time breakdown, memory, dollars.

The `fasop-2024` estimator is FASOP's cost model (docs/estimators.md), including these named behaviours:

- `slowest-gpu-per-stage`: a stage spanning nodes of several types runs at the pace of the
  type whose whole layer list is slowest (docs/estimators.md §2).
- `p2p-ends-only`: the schedule charges only stage 0's forward sends and the last stage's
  backward sends; middle-stage transfers count in the balancing only (§4, §5).
- `dp-stage0-params`: every stage's DP all-reduce moves stage 0's parameters (§7).
- `encoder-costs-twice`: an encoder-decoder model's decoder stages are balanced on the encoder's
  layer times (§6, in fasop/partition/splits.py).
- `memory-limit-lookup`: the memory limit of a stage spanning several nodes is read from the
  second-to-last node of its span (§8, in memory.py).
- `float32`: p2p, DP and embedding all-reduce and the step time are float32, operation by
  operation, as FASOP computes them; stage sums and the schedule are float64.

Plans are estimated in batches: all candidate splits of all plans with the same stage and
micro-batch counts go through one vectorised schedule run.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import replace

import numpy as np

from fasop.core.errors import FasopError
from fasop.core.recent import recent
from fasop.costs.compute import LayerCosts, ProfileCompute
from fasop.costs.estimate import Estimate
from fasop.costs.parts import EstimateParts, counted_parts, schedule_or_note
from fasop.estimators import register
from fasop.estimators.fasop2024 import comm as fasop2024_comm
from fasop.estimators.fasop2024 import dp as fasop2024_dp
from fasop.estimators.fasop2024.batch import Combos, Prepared
from fasop.estimators.fasop2024.finish import chosen_split, estimate_chunk, finish_many, greedy_splits, schedule_all
from fasop.estimators.fasop2024.layout import Layout, Layouts, Stages
from fasop.estimators.fasop2024.memory import PARAM_BYTES
from fasop.estimators.fasop2024.minmax import fasop_minmax_splits, minmax_supported
from fasop.partition.splits import DEFAULT_MAX_NODES, PARTITIONERS, Found, Split, least_chain
from fasop.plans.plan import Plan
from fasop.schedule.pipeline import Schedule, split_stage_times, steady_weights
from fasop.specs.types import ClusterSpec, ModelSpec, NodeType

f32 = np.float32
RECENT_FLOORS = 65536
"""Least-completion floors (three numbers per stage GPU types, tp, micro-batch, pp, m) kept for
the plan bounds."""
STAGES_BY_PACE = 4096
"""stages_of's Stages of mixed-stage layouts kept (each keeps its layout alive: ~2 KiB)."""


class Fasop2024Estimator:
    """FASOP's estimator for one (model, cluster, inventory)."""

    def __init__(self, model: ModelSpec, cluster: ClusterSpec, inventory: Sequence[NodeType],
                 partitioner: str = "fasop-minmax", max_nodes: int | None = DEFAULT_MAX_NODES):
        if partitioner not in PARTITIONERS:
            raise ValueError(f"unknown partitioner {partitioner!r}")
        self.model, self.cluster, self.partitioner = model, cluster, partitioner
        self.max_nodes = max_nodes
        """Search-tree nodes the `optimal` partitioner may visit per plan; None: every split
        proven where it can be (fasop2024_optimal.FIRST_NODES, then its certificate)."""
        self._shared = _shared_cache(model, cluster)
        self._latest_plan: Plan | None = None
        self._latest: dict = {}
        self.layouts = Layouts(model, cluster, self._shared.setdefault("layouts", {}))
        self._paces: dict[tuple[int, int], tuple] = {}
        self._by_pace: dict[tuple[int, tuple], tuple[Layout, Stages]] = self._shared.setdefault("stages by pace", {})
        """stages_of's Stages of layouts with mixed stages, by (layout, the paces' ranks by node
        type name): kept with the layouts (Layouts) for every estimator of the (model, cluster)."""
        self._quick: dict[tuple[int, int, int, int], float] = {}
        self._costs_by_gpu: dict[tuple[int, int], dict[str, LayerCosts]] = {}
        self.inventory = tuple(inventory)
        self.gpus = tuple(dict.fromkeys(n.gpu for n in inventory))
        self.node_types = tuple({n.name: n for n in inventory}.values())
        self.combos = Combos.shared(self._shared, self.node_types)
        self.compute = ProfileCompute.of(model)
        self.param_bytes = PARAM_BYTES
        self.fwd_bwd_factor = model.profile.fwd_bwd_factor
        self.compute.check_gpus(self.gpus)
        self.segment_lengths = [model.layer_segments.count(s) for s in model.segments]
        if partitioner == "fasop-minmax" and not minmax_supported(self.segment_lengths):
            raise FasopError(f"{model.path}: layers: --partitioner fasop-minmax balances an encoder-decoder model's "
                             f"decoder on its encoder's layers, so it needs one segment or two of equal length, got "
                             f"{' and '.join(map(str, self.segment_lengths))} entries; use --partitioner optimal")
        # $/s of the whole inventory, summed in inventory order (FASOP: numpy sum, docs/estimators.md §1)
        self.usd_per_s = float(np.sum(np.array([n.usd_per_hour for n in inventory]))) / 3600

    # ------------------------------------------------------------------ fwd/bwd split
    def split(self, comp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """fwd-bwd-split-of-stage-sums: the schedule's (forward, backward) seconds of each stage
        are its summed fwd+bwd time / fwd_bwd_factor and (fwd_bwd_factor - 1) x it / the factor
        (the profile's fwd+bwd is fwd_bwd_factor x the forward), split after the layers are summed."""
        return split_stage_times(comp, self.fwd_bwd_factor)

    def steady_weights(self, pp: int, m: int) -> np.ndarray:
        """schedule.steady_weights of this split."""
        return steady_weights(pp, m, fwd_bwd_factor=self.fwd_bwd_factor)

    # ------------------------------------------------------------------ the seam's optional capabilities
    def tp_degrees(self) -> tuple[int, ...]:
        """The TP degrees profiled for every GPU type of the inventory."""
        return tuple(self.compute.tp_degrees(self.gpus))

    def schedule_of(self, estimate: Estimate) -> Schedule:
        """The 1F1B timeline of an estimate's pipeline as this model schedules it: each stage's
        compute split by `split`, only stage 0's forward and the last stage's backward sends
        (p2p-ends-only). Its stage ends are the estimate's, bit for bit, for pp > 1 (one stage:
        the estimate's end is FASOP's float32 product m x compute, the timeline's the float64 sum)."""
        comp = np.array(estimate.stage_compute_s)
        fwd, bwd = self.split(comp)
        pp = len(comp)
        send_fwd, send_bwd = np.zeros(pp), np.zeros(pp)
        if pp > 1:
            send_fwd[0], send_bwd[pp - 1] = estimate.p2p_s[0], estimate.p2p_s[-1]
        return Schedule(fwd, bwd, estimate.plan.num_microbatches, send_fwd, send_bwd)

    def parts(self, estimate: Estimate, zero_stage: int = 0) -> EstimateParts:
        """For explain and plots (parts.counted_parts): fit checked x the overhead without ZeRO only."""
        schedule, note = schedule_or_note(self.schedule_of, estimate)
        return counted_parts(estimate, self.model, self.param_bytes, self.layout(estimate.plan).limits, 1.0 if
                             zero_stage else self.cluster.memory_overhead_factor, schedule, zero_stage, note)

    def prefix_bounds(self, shape: Plan, kinds: Sequence[NodeType]):
        """The fold over node positions that orders.OrderSearch bounds prefixes with
        (fasop2024_orders.FasopPrefixBounds)."""
        from fasop.estimators.fasop2024.orders import FasopPrefixBounds

        return FasopPrefixBounds(self, shape, kinds)

    # ------------------------------------------------------------------ per plan, before scheduling
    def _of_plan(self, plan: Plan, what: str, compute):
        """compute(), remembered for the latest plan object: a search asks for a plan's stage
        types and sends several times in a row (bounds, signature, estimate)."""
        if self._latest_plan is not plan:
            self._latest_plan, self._latest = plan, {}
        if what not in self._latest:
            self._latest[what] = compute()
        return self._latest[what]

    def expect_shapes(self, shapes: Iterable[tuple[int, int, int]]) -> None:
        """The (tp, dp, pp) that plans will have: the layouts of all of them are made together
        when a placement is first asked about (layout.Layouts)."""
        self.layouts.expect(shapes)

    def layout(self, plan: Plan) -> Layout:
        """What the plan's estimate takes from its placement apart from the micro-batch size,
        remembered for the plans of the latest placement (they differ in degrees and micro-batch)."""
        return self.layouts.of(plan)

    def p2p(self, plan: Plan) -> tuple[float, ...]:
        """fasop2024_comm.p2p_seconds of the plan."""
        return self._of_plan(plan, "p2p", lambda: fasop2024_comm.p2p_seconds(plan, self.model, self.cluster,
                                                                    self.layout(plan).p2p_bandwidths))

    def stage_types(self, plan: Plan) -> tuple[NodeType, ...]:
        """slowest-gpu-per-stage: of the node types holding a stage, the slowest over the layer list."""
        return self.stages_of(self.layout(plan), plan.tp, plan.mbs).types

    def stages_of(self, layout: Layout, tp: int, mbs: int) -> Stages:
        """slowest-gpu-per-stage: of the node types holding a stage, the one whose GPUs take
        longest over the whole layer list (the first in node order of equals)."""
        if layout.stages is not None:
            return layout.stages
        pace = self.pace(tp, mbs)[1]
        key = (id(layout), self._paces[(tp, mbs)][2])
        known = self._by_pace.get(key)
        if known is None or known[0] is not layout:  # (the layout is kept with its Stages: ids stay theirs)
            if len(self._by_pace) >= STAGES_BY_PACE:
                self._by_pace.clear()
            known = self._by_pace[key] = (layout, Stages(tuple(
                nodes[0] if len(nodes) == 1 else max(nodes, key=lambda n: pace[n.name]) for nodes in layout.stage_nodes)))
        return known[1]

    def pace(self, tp: int, mbs: int) -> tuple[tuple[int, ...], dict[str, int]]:
        """(key, pace): pace[node type name] = the rank of its GPUs' time over the whole layer
        list among the inventory's types (equal times, equal ranks); key: the ranks in
        inventory order, so micro-batch sizes that order the types alike share a key."""
        if (tp, mbs) not in self._paces:
            totals = {n.name: self._costs_by(tp, mbs)[n.gpu].total for n in self.node_types}
            levels = sorted(set(totals.values()))
            pace = {name: levels.index(total) for name, total in totals.items()}
            self._paces[(tp, mbs)] = (tuple(pace.values()), pace, tuple(sorted(pace.items())))
        return self._paces[(tp, mbs)][:2]

    def signature(self, plan: Plan) -> tuple:
        """Everything of `plan` the estimate depends on: two plans with equal signatures get the
        same estimate (up to the placement's name), so a search estimates only the first.
        The placement enters only through the stage GPU types, the boundary links, stage 0's DP
        ring, the embedding link and the per-stage memory limits."""
        return (plan.tp, plan.dp, plan.pp, plan.mbs, tuple(t.name for t in self.stage_types(plan)),
                self.p2p(plan), float(self.layout(plan).dp_ring), float(self.layout(plan).embedding_s),
                self.layout(plan).limits)

    def lower_bound(self, plan: Plan, above: float = np.inf) -> float:
        """A step time no split of `plan` beats, whatever the partitioner: stage 0 finishes after
        every stage's compute, both end sends and the largest steady chain c_i t_i
        (schedule.steady_weights), and after m x the busiest stage -- each at its least over
        all splits (`floors`); plus stage 0's gradient all-reduce for one layer (the step ends
        after stage 0's end + its all-reduce) and the embedding all-reduce (docs/estimators.md §5, §7).
        The floors are coupled (partition.least_chain) for the optimal partitioner; they are
        not when the uncoupled ones already put the bound above `above` (all a caller with that
        threshold needs), nor for fasop-minmax, whose estimate costs less than the coupled floor."""
        types = self.stage_types(plan)
        p2p = self.p2p(plan)
        gpus = tuple(t.gpu for t in types)
        rest = ((p2p[0] + p2p[-1]) if plan.pp > 1 else 0.0, self.layout(plan).dp_ring,
                {types[0].intra_node_shared}, float(self.layout(plan).embedding_s))
        cheap = self.bound(plan, self.floors(plan, gpus, coupled=False), *rest)
        if cheap > above or self.partitioner != "optimal":  # the coupled floor pays where an estimate is a search
            return cheap
        return self.bound(plan, self.floors(plan, gpus), *rest)

    def bound(self, plan: Plan, floors: tuple[float, float], sends: float, ring: float, buses: set[bool],
              embedding: float) -> float:
        """`lower_bound` from what it depends on, each at most its true value: `floors` (least
        stage times + largest steady chain, least busiest stage, over all splits), the two end
        sends, stage 0's DP all-reduce over the cheaper of the `buses` stage 0 may have, with
        its ring at `ring` bytes/s (at least the true bandwidth), the embedding all-reduce.
        orders.py bounds partial node orders so."""
        chain, busiest = floors
        pipeline = max(chain + sends, plan.num_microbatches * busiest)
        params = fasop2024_dp.dp_params(self._shared, self.model, plan.tp)[1]
        dp = min(float(fasop2024_comm.dp_allreduce_seconds(plan, params, f32(ring), shared, self.model.bytes_per_element))
                 for shared in buses)
        return (pipeline + dp + embedding) * (1 - 1e-6)

    def quick_bound(self, plan: Plan) -> float:
        """A weaker `lower_bound` that ignores the placement: every stage costs, layer run by
        layer run, the least over the inventory's GPU types; no sends, no all-reduce. Kept per
        (tp, micro-batch, pp, micro-batches): a search asks it of every plan, its placements many."""
        key = (plan.tp, plan.mbs, plan.pp, plan.num_microbatches)
        bound = self._quick.get(key)
        if bound is None:
            chain, busiest = self.floors(plan, None, coupled=False)
            bound = self._quick[key] = max(chain, plan.num_microbatches * busiest) * (1 - 1e-6)
        return bound

    def floors(self, plan: Plan, stage_gpus: tuple[str, ...] | None, coupled: bool = True) -> tuple[float, float]:
        """partition.least_chain (least stage times + largest steady chain, least busiest
        stage, over all splits) with these stage GPU types (None: every stage at the least,
        layer run by layer run, of the inventory's types). Cached: many plans share them, also
        across the estimators of one (model, cluster), e.g. the compositions of a pareto sweep."""
        m = plan.num_microbatches
        key = (stage_gpus or ("least of",) + self.gpus, plan.tp, plan.mbs, plan.pp, m, coupled)
        floors = self._shared.setdefault("floor", OrderedDict())
        if key in floors:
            floors.move_to_end(key)
        else:
            costs = [self.compute.layer_costs(g, plan.tp, plan.mbs).matrix for g in stage_gpus or self.gpus]
            matrices = np.stack(costs) if stage_gpus else np.broadcast_to(np.min(costs, axis=0),
                                                                          (plan.pp,) + costs[0].shape)
            floors[key] = least_chain(matrices, self.steady_weights(plan.pp, m) if plan.pp > 1 else None, coupled)
            if len(floors) > RECENT_FLOORS:
                floors.popitem(last=False)
        return floors[key]

    def estimate_below(self, plan: Plan, cutoff: float) -> Estimate | None:
        """`estimate(plan)` if it fits in memory with a step time of at most `cutoff`, else None.
        The optimal partitioner's search stops early once it knows its result is above the
        cutoff, so a plan that cannot get there costs less; the estimate itself never depends on
        the cutoff."""
        if self.partitioner != "optimal" or plan.pp == 1 or cutoff == np.inf:
            estimate = self.estimate(plan)
        else:
            prepared = self.prepare(plan, cutoff=cutoff)
            if prepared is None:
                return None
            estimate = self._finish(prepared, self._schedule_all([prepared])[0])
        return None if estimate.memory.is_oom or not estimate.step_time_s <= cutoff else estimate

    def _stage_costs(self, plan: Plan) -> tuple[LayerCosts, ...]:
        by_gpu = self._costs_by(plan.tp, plan.mbs)
        return tuple(by_gpu[g] for g in self.stages_of(self.layout(plan), plan.tp, plan.mbs).gpus)

    def _costs_by(self, tp: int, mbs: int) -> dict[str, LayerCosts]:
        """LayerCosts of each of the inventory's GPU types at (tp, mbs)."""
        if (tp, mbs) not in self._costs_by_gpu:
            self._costs_by_gpu[(tp, mbs)] = {g: self.compute.layer_costs(g, tp, mbs) for g in self.gpus}
        return self._costs_by_gpu[(tp, mbs)]

    def prepare(self, plan: Plan, cutoff: float = np.inf, splits: list[Split] | None = None) -> Prepared | None:
        types, costs, p2p = self.stage_types(plan), self._stage_costs(plan), self.p2p(plan)
        # FASOP's splits (the optimal partitioner's seeds, where FASOP's greedy applies; one stage: the one split)
        greedy = plan.pp == 1 or minmax_supported(self.segment_lengths)
        if splits is None:  # (estimate_many has them: greedy_splits)
            splits = fasop_minmax_splits(costs, self.segment_lengths, p2p) if greedy else []
        prepared = Prepared(plan, types, costs, p2p, splits, layout=self.layout(plan))
        if self.partitioner != "optimal":
            return prepared
        if plan.pp == 1:  # one split only
            return replace(prepared, proven=True)
        found = self._optimal_split(prepared, cutoff)
        return None if found is None else replace(prepared, splits=[Split(found.split, found.split)],
                                                  proven=found.proven, gap_pct=_gap_pct(found))

    def _optimal_split(self, p: Prepared, cutoff: float = np.inf) -> Found | None:
        """fasop2024_optimal.optimal_split of `p`, its stage-time tables shared by this (model, cluster)."""
        from fasop.estimators.fasop2024.optimal import optimal_split  # (a fasop-minmax search never imports it)

        return optimal_split(self, p, self._shared.setdefault("splits", OrderedDict()), cutoff)

    # ------------------------------------------------------------------ batch
    def estimate_many(self, plans: Sequence[Plan], progress=None) -> list[Estimate]:
        """Estimates in the order of `plans`. progress(done, total), if given, is called as
        plans are partitioned and as schedule batches complete."""
        report = progress or (lambda done, total: None)
        total = 2 * len(plans)
        if not plans:
            return []
        if self.partitioner == "fasop-minmax":
            estimates = estimate_chunk(self, plans, self._shared.setdefault(("min-max", self.compute), {}),
                                       self._shared.setdefault(("pipelines", self.compute), {}))
            report(total, total)
            return estimates
        prepared, seeds = [], (greedy_splits(self, plans, self._shared.setdefault(("min-max", self.compute), {}))
                               if minmax_supported(self.segment_lengths) else [None] * len(plans))
        for k, (plan, splits) in enumerate(zip(plans, seeds), start=1):
            prepared.append(self.prepare(plan, splits=splits))
            if k % 64 == 0 or k == len(plans):
                report(k, total)
        ends = self._schedule_all(prepared, lambda share: report(len(plans) + share, total))
        estimates = finish_many(self, [chosen_split(self, p, e) for p, e in zip(prepared, ends)])
        report(total, total)
        return estimates

    def estimate(self, plan: Plan) -> Estimate:
        return self.estimate_many([plan])[0]

    def estimate_split(self, plan: Plan, partition: tuple[int, ...]) -> Estimate:
        """The estimate of `plan` with its layers split as `partition` (layer-list entries per
        stage) rather than by the partitioner: the same schedule, step time and memory as a
        split the partitioner chose (`fasop explain`, `fasop plot`)."""
        prepared = Prepared(plan, self.stage_types(plan), self._stage_costs(plan), self.p2p(plan),
                            [Split(tuple(partition), tuple(partition))], layout=self.layout(plan))
        return self._finish(prepared, self._schedule_all([prepared])[0])

    # ------------------------------------------------------------------ per plan, after scheduling
    def _step(self, plan: Plan, stage_types: Sequence[NodeType], stage0_layers: int, stage_end: np.ndarray,
              layout: Layout | None = None):
        """(step time, DP cost per stage, index of the stage that ends last, embedding cost), float32:
        step = max_i(E_i + DP_i) + embedding (docs/estimators.md §7). `layout`: the plan's, if known."""
        layout = layout or self.layout(plan)
        dp_costs = self.dp_costs(plan, layout, stage_types, stage0_layers)
        totals = np.asarray(stage_end).astype(f32) + dp_costs
        slowest = int(totals.argmax())  # the first of the latest
        return totals[slowest] + layout.embedding_s, dp_costs, slowest, layout.embedding_s

    def _schedule_all(self, prepared: list[Prepared], progress=None) -> list[list[np.ndarray]]:
        return schedule_all(self, prepared, progress)

    def _finish(self, p: Prepared, split_ends: list[np.ndarray]) -> Estimate:
        """The estimate of the split with the lowest pipeline time (the first of equals)."""
        return finish_many(self, [chosen_split(self, p, split_ends)])[0]

    def dp_table(self, plan: Plan, layout: Layout) -> np.ndarray:
        """fasop2024_dp.dp_table: a stage's DP all-reduce by stage 0's layers and the stage's bus."""
        return fasop2024_dp.dp_table(self._shared, self.model, plan, layout)

    def dp_costs(self, plan: Plan, layout: Layout, stage_types: Sequence[NodeType], stage0_layers: int) -> np.ndarray:
        """Each stage's DP all-reduce (float32) when stage 0 holds `stage0_layers` layers
        (dp-stage0-params): it differs between stages only by their bus (docs/estimators.md §7)."""
        return self.dp_table(plan, layout)[stage0_layers, [int(t.intra_node_shared) for t in stage_types]]


_SHARED: dict[tuple, tuple] = {}


def _shared_cache(model: ModelSpec, cluster: ClusterSpec) -> dict:
    """A cache for what depends only on (model, cluster) and a plan's shape -- least completions,
    stage-time tables -- shared by every estimator of that pair in this process (a pareto sweep
    makes one per composition). Its parts are bounded (RECENT_SHAPES, RECENT_FLOORS), and only
    the latest few (model, cluster) pairs are kept."""
    return recent(_SHARED, (model, cluster), dict)


def _gap_pct(found: Found) -> float:
    """Estimate.partition_gap_pct of a search's result: 0 when proven, else how far below its
    objective its best bound lies, in percent (4 significant digits)."""
    if found.proven or not found.objective > 0 or not np.isfinite(found.objective):
        return 0.0
    return float(f"{max(0.0, 100 * (found.objective - max(found.bound, 0.0)) / found.objective):.4g}")


@register("fasop-2024")
def make(model: ModelSpec, cluster: ClusterSpec, inventory: Sequence[NodeType], *, partitioner: str = "fasop-minmax",
         partition_budget: int | None = None, **_ignored) -> Fasop2024Estimator:
    """FASOP's estimator with the search's options: `partitioner` and `partition_budget` (the
    optimal partitioner's search-tree nodes per plan)."""
    if model.profile is None:  # a catalog model (an architecture, no profile) on a FASOP cluster
        raise FasopError(f"{model.path}: the fasop-2024 estimator of {cluster.path} needs a model with a "
                         "profile (per-layer times measured on its GPUs); this model has none: use a catalog "
                         "cluster (estimator: analytic), e.g. --cluster aws")
    return Fasop2024Estimator(model, cluster, inventory, partitioner, partition_budget)
