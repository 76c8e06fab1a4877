"""estimate(plan) -> Estimate: step time breakdown, memory, dollars.

The `fasop-2024` estimator is FASOP's cost model (docs/estimators.md), including these named behaviours:

- `slowest-gpu-per-stage`: a stage spanning nodes of several types runs at the pace of the
  type whose whole layer list is slowest (docs/estimators.md §2).
- `p2p-ends-only`: the schedule charges only stage 0's forward sends and the last stage's
  backward sends; middle-stage transfers count in the balancing only (§4, §5).
- `dp-stage0-params`: every stage's DP all-reduce moves stage 0's parameters (§7).
- `encoder-costs-twice`: an encoder-decoder model's decoder stages are balanced on the encoder's
  layer times (§6, in partition.py).
- `memory-limit-lookup`: the memory limit of a stage spanning several nodes is read from the
  second-to-last node of its span (§8, in memory.py).
- `float32`: p2p, DP and embedding all-reduce and the step time are float32, operation by
  operation, as FASOP computes them; stage sums and the schedule are float64.

Plans are estimated in batches: all candidate splits of all plans with the same stage and
micro-batch counts go through one vectorised schedule run.
"""

from __future__ import annotations

from collections import OrderedDict, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import replace

import numpy as np

from fasop import model_math, native
from fasop.estimators import fasop2024_comm
from fasop.compute import LayerCosts, ProfileCompute
from fasop.errors import FasopError
from fasop.estimate import Estimate
from fasop.estimators import register
from fasop.estimators.fasop2024_batch import Chosen, Chunk, Combos, Prepared, bus_rows, gathered, rows_of
from fasop.estimators.fasop2024_minmax import fasop_minmax_splits, fasop_minmax_splits_many, minmax_supported
from fasop.estimators.fasop2024_layout import Layout, Layouts, Stages
from fasop.estimators.fasop2024_memory import PARAM_BYTES, estimate_memory_many
from fasop.memory import MemoryEstimate, memory_tables, rounded, stage_fit_mask
from fasop.partition import DEFAULT_MAX_NODES, PARTITIONERS, Found, Split, least_chain, optimal, polish
from fasop.plan import Plan, trusted_many
from fasop.recent import recent
from fasop.schedule import (Schedule, critical_path, one_f_one_b, one_f_one_b_bound, split_stage_times,
                            stage_chains, steady_weights)
from fasop.schedule_bounds import SweepBound, sweep_completion, with_sweep
from fasop.split_milp import certify
from fasop.specs import GIB, TRANSFORMER_KINDS, ClusterSpec, ModelSpec, NodeType

f32 = np.float32
DP_EXTRA_PARAMS_PER_LAYER = 20800
"""dp-param-count: the gradients of a transformer layer in FASOP's DP all-reduce are 12 h^2 +
20800 (its memory counts 12 h^2, model_math.transformer_params)."""
FIRST_NODES = 100
"""Without a budget (--partition-budget), search-tree nodes of the first, exact branch and bound
per plan; a split it leaves unproven is polished and proven by the settle pass (`certified` in
`_optimal_split`). Measured on gpt2xl and t5 a100=1,a10=7 (default search, with SETTLE_NODES
400 -> 800): unproven 54 -> 42 and 64 -> 50 at about the same CPU time, the nodes going to the
settle pass's tighter bounds instead."""
SETTLE_NODES = 800
"""Search-tree nodes of the settle pass (`_optimal_split`'s certificate) per unproven plan."""
RECENT_SHAPES = 16
"""Plan shapes (stage GPU types, tp, micro-batch, pp, m, memory limits) whose stage-time tables
the optimal partitioner keeps for the next plan of the same shape (a plan and its equivalents
under other placements usually come together)."""
RECENT_BYTES = 1 << 28
"""... and fewer when their stage-time tables (stages x (layers + 1)^2 floats each) pass 256 MiB
together: a long layer list on many stages (limits.LAYERS) stays within memory."""
RECENT_FLOORS = 65536
"""Least-completion floors (three numbers per stage GPU types, tp, micro-batch, pp, m) kept for
the plan bounds."""


class Fasop2024Estimator:
    """FASOP's estimator for one (model, cluster, inventory)."""

    def __init__(self, model: ModelSpec, cluster: ClusterSpec, inventory: Sequence[NodeType],
                 partitioner: str = "fasop-minmax", max_nodes: int | None = DEFAULT_MAX_NODES):
        if partitioner not in PARTITIONERS:
            raise ValueError(f"unknown partitioner {partitioner!r}")
        self.model, self.cluster, self.partitioner = model, cluster, partitioner
        self.max_nodes = max_nodes
        """Search-tree nodes the `optimal` partitioner may visit per plan; None: every split
        proven where it can be (DEFAULT_MAX_NODES, then `_optimal_split`'s certificate)."""
        """Search-tree nodes the `optimal` partitioner may visit per plan (None: no limit)."""
        self._shared = _shared_cache(model, cluster)
        self._latest_plan: Plan | None = None
        self._latest: dict = {}
        self.layouts = Layouts(model, cluster)
        self._paces: dict[tuple[int, int], tuple] = {}
        self._by_pace: dict[tuple[int, tuple], tuple[Layout, Stages]] = {}
        """stages_of's Stages of layouts with mixed stages, by (layout, order of the paces)."""
        self.combos = Combos()
        self._costs_by_gpu: dict[tuple[int, int], dict[str, LayerCosts]] = {}
        self.inventory = tuple(inventory)
        self.gpus = tuple(dict.fromkeys(n.gpu for n in inventory))
        self.node_types = tuple({n.name: n for n in inventory}.values())
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

    def prefix_bounds(self, shape: Plan, kinds: Sequence[NodeType]):
        """The fold over node positions that orders.OrderSearch bounds prefixes with
        (fasop2024_orders.FasopPrefixBounds)."""
        from fasop.estimators.fasop2024_orders import FasopPrefixBounds

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
        order, pace = self.pace(tp, mbs)
        key = (id(layout), order)
        known = self._by_pace.get(key)
        if known is None or known[0] is not layout:  # (the layout is kept with its Stages: ids stay theirs)
            if len(self._by_pace) >= RECENT_FLOORS:
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
            self._paces[(tp, mbs)] = (tuple(pace.values()), pace)
        return self._paces[(tp, mbs)]

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
        params = self._dp_params(plan, 1)
        dp = min(float(fasop2024_comm.dp_allreduce_seconds(plan, params, f32(ring), shared, self.model.bytes_per_element))
                 for shared in buses)
        return (pipeline + dp + embedding) * (1 - 1e-6)

    def quick_bound(self, plan: Plan) -> float:
        """A weaker `lower_bound` that ignores the placement: every stage costs, layer run by
        layer run, the least over the inventory's GPU types; no sends, no all-reduce."""
        chain, busiest = self.floors(plan, None, coupled=False)
        return max(chain, plan.num_microbatches * busiest) * (1 - 1e-6)

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

    def prepare_many(self, plans: Sequence[Plan]) -> list[Prepared]:
        """`prepare(plan)` of each plan; with fasop-minmax the min-max splits of all of them are
        computed together (fasop2024_minmax.fasop_minmax_splits_many: the same splits)."""
        if self.partitioner != "fasop-minmax":
            return [self.prepare(plan) for plan in plans]
        pieces = [(plan, self.stage_types(plan), self._stage_costs(plan), self.p2p(plan), self.layout(plan))
                  for plan in plans]
        splits = fasop_minmax_splits_many([(costs, self.segment_lengths, p2p) for _, _, costs, p2p, _ in pieces])
        return [Prepared(plan, types, costs, p2p, list(s), layout=layout)
                for (plan, types, costs, p2p, layout), s in zip(pieces, splits)]

    def prepare(self, plan: Plan, cutoff: float = np.inf) -> Prepared | None:
        types, costs, p2p = self.stage_types(plan), self._stage_costs(plan), self.p2p(plan)
        # FASOP's splits (the optimal partitioner's seeds, where FASOP's greedy applies; one stage: the one split)
        greedy = plan.pp == 1 or minmax_supported(self.segment_lengths)
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
        """The split with the lowest estimated step time among those that fit in memory (or among
        all splits when none fits), by exact branch and bound with cuts (partition.optimal).
        With a finite cutoff: None unless a fitting split is at most the cutoff."""
        plan = p.plan
        pp, m, send_first, send_last = plan.pp, plan.num_microbatches, p.p2p[0], p.p2p[-1]
        layout = self.layout(plan)
        embedding = float(layout.embedding_s)
        sends_fwd, sends_bwd = np.zeros((pp, 1)), np.zeros((pp, 1))
        sends_fwd[0], sends_bwd[pp - 1] = send_first, send_last  # p2p-ends-only
        key = (tuple(t.gpu for t in p.stage_types), plan.tp, plan.mbs, pp, m, layout.limits)
        recent = self._shared.setdefault("splits", OrderedDict())  # a few MB each: the latest only
        if key in recent:
            recent.move_to_end(key)
        else:  # stage times, those that fit, and the dynamic programmes over them
            times = np.stack([c.matrix for c in p.costs])
            fits = stage_fit_mask(plan, self.model, self.cluster, layout.limits, param_bytes=PARAM_BYTES)
            fitting = np.where(fits, times, np.inf)
            recent[key] = (times, fitting, {}, {})
            while len(recent) > max(1, min(RECENT_SHAPES, RECENT_BYTES // (2 * times.nbytes))):  # (times, fitting)
                recent.popitem(last=False)
        times, fitting, tables, oom_tables = recent[key]
        dp_by_stage0: dict[int, np.ndarray] = {}

        def dp_costs(stage0_layers: int) -> np.ndarray:
            """Each stage's DP all-reduce (float32), as `_step` computes it."""
            if stage0_layers not in dp_by_stage0:
                dp_by_stage0[stage0_layers] = self._dp_costs(plan, layout, p.stage_types, stage0_layers)
            return dp_by_stage0[stage0_layers]

        extras: dict[int, float] = {}

        def extra(stage0_layers: int) -> float:
            """Stage 0's gradient all-reduce (depends on its layers) + the embedding all-reduce."""
            if stage0_layers not in extras:
                extras[stage0_layers] = float(dp_costs(stage0_layers)[0]) + embedding
            return extras[stage0_layers]

        stages = np.arange(pp)

        def stage_compute(splits: list[tuple[int, ...]]) -> np.ndarray:
            """(pp, splits) compute seconds per stage: the entries of `times`, the same sums as
            Prepared.stage_compute."""
            edges = np.zeros((len(splits), pp + 1), dtype=np.intp)
            np.cumsum(splits, axis=1, out=edges[:, 1:])
            return times[stages, edges[:, :-1], edges[:, 1:]].T

        def evaluate(splits: list[tuple[int, ...]]) -> list[float]:
            """`_step` for many splits at once: the same float32 operations, so the same values."""
            comp = stage_compute(splits)
            ones = np.ones(len(splits))
            ends = one_f_one_b(*self.split(comp), sends_fwd * ones, sends_bwd * ones, m).astype(f32)
            dp = np.stack([dp_costs(c[0]) for c in splits], axis=1)
            return ((ends + dp).max(axis=0) + f32(embedding)).tolist()

        def cut(split: tuple[int, ...]) -> tuple[np.ndarray, float]:
            _, weights, const = critical_path(stage_compute([split]), sends_fwd, sends_bwd, m,
                                              fwd_bwd_factor=self.fwd_bwd_factor)
            return weights[:, 0], float(const[0])

        weights = self.steady_weights(pp, m)

        def bound(k, before, chain, t, rest, round_trips=False):
            return one_f_one_b_bound(k, before, chain, t, rest, num_stages=pp, num_microbatches=m, weights=weights,
                                     send_first=send_first, send_last=send_last, round_trips=round_trips)

        def tight(k, before, chain, t, rest):
            """`bound` with the two round trips: tighter, but it changes the search's order, and within
            a budget the split found; used only to prove (the settle pass below), with the sweep."""
            return bound(k, before, chain, t, rest, True)

        def swept():
            """`tight` raised to the longest backward sweep (schedule_bounds.SweepBound)."""
            if "sweep" not in tables:
                tables["sweep"] = sweep_completion(fitting, m, fwd_bwd_factor=self.fwd_bwd_factor)
            return with_sweep(tight, SweepBound(tables["sweep"], num_microbatches=m, fwd_bwd_factor=self.fwd_bwd_factor,
                                                send_first=send_first, send_last=send_last))

        def certified(found: Found | None) -> Found | None:
            """Without a budget (max_nodes None), a split the branch and bound leaves unproven is
            proven: its split is polished (partition.polish: one-layer moves while they help), then
            the branch and bound runs again, now only to prove that no split is faster by more
            than its margin (many splits of equal time: layers moved between stages of one GPU
            type), then the MILP (split_milp.certify, on programs small enough)."""
            if found is None or found.proven or self.max_nodes is not None:
                return found
            split, value = polish(found.split, found.objective, fitting, evaluate)
            if value < found.objective:
                found = Found(split, value, False, found.bound)
            settled = optimal(fitting, tables=tables, settle=True,
                              **(budget | {"seeds": [found.split], "bound": swept(), "max_nodes": SETTLE_NODES}))
            if settled.objective < found.objective:
                found = settled
            if settled.proven:
                return Found(found.split, found.objective, True, found.objective)
            table = self.dp_table(plan, layout)[:, [int(t.intra_node_shared) for t in p.stage_types]]
            sure = certify(fitting, lambda t: stage_chains(t, sends_fwd[:, 0], sends_bwd[:, 0], m,
                                                           fwd_bwd_factor=self.fwd_bwd_factor),
                           table.astype(float) + embedding, lambda split: evaluate([split])[0], found.split,
                           found.objective)
            return Found(sure.split, sure.objective, sure.proven, max(sure.bound, settled.bound))

        seeds = [s.reported for s in p.splits]
        budget = {"bound": bound, "evaluate": evaluate, "cut": cut, "extra": extra, "seeds": seeds,
                  "max_nodes": FIRST_NODES if self.max_nodes is None else self.max_nodes,
                  "stage_weights": weights}
        if cutoff < np.inf:
            # The search stops early once it knows its result is above the cutoff; otherwise its
            # result is the one without cutoff, so a plan's estimate never depends on the cutoff
            # (top-K runs equal full runs, any --workers).
            found = certified(optimal(fitting, above=cutoff, tables=tables, **budget))
            return None if found is None or not found.objective <= cutoff else found
        found = certified(optimal(fitting, tables=tables, **budget))
        if found is None:  # nothing fits: the fastest split, flagged OOM
            found = optimal(times, tables=oom_tables, **budget)
        return found

    # ------------------------------------------------------------------ batch
    def estimate_many(self, plans: Sequence[Plan], progress=None) -> list[Estimate]:
        """Estimates in the order of `plans`. progress(done, total), if given, is called as
        plans are partitioned and as schedule batches complete."""
        report = progress or (lambda done, total: None)
        total = 2 * len(plans)
        if not plans:
            return []
        if self.partitioner == "fasop-minmax" and native.kernels is not None:
            estimates = self._estimate_minmax_compiled(plans)
            report(total, total)
            return estimates
        if self.partitioner == "fasop-minmax":
            prepared = self.prepare_many(plans)
            report(len(plans), total)
        else:
            prepared = []
            for k, plan in enumerate(plans, start=1):
                prepared.append(self.prepare(plan))
                if k % 64 == 0 or k == len(plans):
                    report(k, total)
        ends = self._schedule_all(prepared, lambda share: report(len(plans) + share, total))
        estimates = self._finish_many([self._chosen(p, e) for p, e in zip(prepared, ends)])
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

    def _estimate_minmax_compiled(self, plans: Sequence[Plan]) -> list[Estimate]:
        """`estimate_many` with fasop-minmax by the compiled kernels: every plan's candidate
        splits, their schedules and the choice among them (native.kernels.fasop_plans), then
        step time and memory (fasop_finish): the values of prepare_many + _schedule_all +
        _finish_many (tests compare them)."""
        c = Chunk(self, plans)
        n, width = len(plans), c.width
        # the distinct kernel inputs: their splits and schedules
        u, inverse = c.unique, c.inverse
        k = len(u)
        table = self.compute.table
        reported, scheduled = np.empty((k, width), np.int64), np.empty((k, width), np.int64)
        times, ends = np.empty((k, width)), np.empty((k, width))
        halves = self.segment_lengths if len(self.segment_lengths) == 2 else (self.segment_lengths[0], 0)
        pps = c.pps[u]
        native.kernels.fasop_plans(table, table.shape[1], np.ascontiguousarray(c.which[u]),
                                   np.ascontiguousarray(c.p2p[u]), pps, c.ms[u], halves[0], halves[1],
                                   self.fwd_bwd_factor, reported, scheduled, times, ends)
        tables = memory_tables(self.model)
        step, dp, flags, gibs = np.empty(n), np.empty(n), np.empty((n, 2), np.uint8), np.empty((n, 2))
        stage_bytes, zero_bytes = np.empty((n, width)), np.empty((n, width))
        native.kernels.fasop_finish(c.pps, reported[inverse], ends[inverse], c.shared, c.layout_of, c.dp_table,
                                    c.embedding, c.limits, c.memory, tables.params, tables.act, c.sharded,
                                    float(PARAM_BYTES.full), self.cluster.memory_overhead_factor, GIB, step, dp, stage_bytes, zero_bytes, flags,
                                    gibs)
        # each plan's first pp entries of every row, as tuples (shared by plans of equal inputs)
        tuples = native.kernels.row_tuples
        of = inverse.tolist()
        rep, comp, end = ([rows[i] for i in of] for rows in (tuples(reported, pps, True), tuples(times, pps, False),
                                                            tuples(ends, pps, False)))
        bytes_, zero = tuples(stage_bytes, c.pps, False), tuples(zero_bytes, c.pps, False)
        sends = tuples(c.p2p, c.pps - 1, False)
        memory = trusted_many(MemoryEstimate, n, stage_bytes=bytes_, stage_zero_bytes=zero,
                              is_oom=flags[:, 0].astype(bool).tolist(), oom_gpumem_gib=rounded(gibs[:, 0]),
                              is_zero_oom=flags[:, 1].astype(bool).tolist(), zero_oom_gpumem_gib=rounded(gibs[:, 1]))
        return trusted_many(
            Estimate, n, plan=list(plans), partition=rep, stage_node_types=[st.types for st in c.stages],
            stage_compute_s=comp, p2p_s=sends, stage_end_s=end, pipeline_time_s=[e[0] for e in end],
            dp_allreduce_s=dp.tolist(), embedding_allreduce_s=c.embedding.astype(float)[c.layout_of].tolist(),
            step_time_s=step.tolist(), memory=memory, usd_per_step=(self.usd_per_s * step).tolist(),
            partitioner=self.partitioner, partition_proven_optimal=False)

    def _schedule_all(self, prepared: list[Prepared], progress=None) -> list[list[np.ndarray]]:
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
            stage_ends = one_f_one_b(*self.split(comp), send_fwd, send_bwd, m,
                                     reuse=self.partitioner == "optimal")
            for col, members in enumerate(pipelines.values()):
                for k, s in members:
                    ends[k][s] = stage_ends[:, col]
                    done_plans.add(k)
            if progress:
                progress(len(done_plans))
        return ends

    # ------------------------------------------------------------------ per plan, after scheduling
    def _step(self, plan: Plan, stage_types: Sequence[NodeType], stage0_layers: int, stage_end: np.ndarray,
              layout: Layout | None = None):
        """(step time, DP cost per stage, index of the stage that ends last, embedding cost), float32:
        step = max_i(E_i + DP_i) + embedding (docs/estimators.md §7). `layout`: the plan's, if known."""
        layout = layout or self.layout(plan)
        dp_costs = self._dp_costs(plan, layout, stage_types, stage0_layers)
        totals = np.asarray(stage_end).astype(f32) + dp_costs
        slowest = int(totals.argmax())  # the first of the latest
        return totals[slowest] + layout.embedding_s, dp_costs, slowest, layout.embedding_s

    def _finish(self, p: Prepared, split_ends: list[np.ndarray]) -> Estimate:
        """The estimate of the split with the lowest pipeline time (the first of equals)."""
        return self._finish_many([self._chosen(p, split_ends)])[0]

    def _chosen(self, p: Prepared, split_ends: list[np.ndarray]) -> "Chosen":
        """The split of `p` with the lowest pipeline time (the first of equals)."""
        best = min(range(len(split_ends)), key=lambda s: (split_ends[s][0], s))
        layout = p.layout or self.layout(p.plan)
        return Chosen(p.plan, layout, self.stages_of(layout, p.plan.tp, p.plan.mbs), p.p2p, p.splits[best],
                       np.asarray(split_ends[best], dtype=float).tolist(), p.stage_compute(p.splits[best].scheduled),
                       p.proven, p.gap_pct)

    def _finish_many(self, chosen: Sequence["Chosen"]) -> list[Estimate]:
        """Estimates of chosen splits: step time (`_step`'s float32 operations), memory and
        dollars, on arrays with a row per plan and a column per stage (rows of shorter
        pipelines padded with stages that end at -inf and fit in any memory)."""
        width = max(c.plan.pp for c in chosen)
        layout_rows, layout_of = rows_of([c.layout for c in chosen])
        stage_rows, stages_of = rows_of([c.stages for c in chosen])
        ends = np.array([c.ends + [-np.inf] * (width - len(c.ends)) for c in chosen])
        # each stage's DP all-reduce: one of two values per plan, by the stage's bus
        pairs = np.array([self.dp_table(c.plan, c.layout)[c.split.reported[0]] for c in chosen], dtype=f32)
        shared = bus_rows(stage_rows, width).astype(bool)[stages_of]
        dp_costs = np.where(shared, pairs[:, 1:], pairs[:, :1])
        totals = ends.astype(f32) + dp_costs
        slowest = totals.argmax(axis=1)  # the first of the latest
        rows = np.arange(len(chosen))
        steps = totals[rows, slowest] + np.array([layout.embedding_s for layout in layout_rows], dtype=f32)[layout_of]
        limits = gathered(layout_rows, width)[1]
        memory = estimate_memory_many(
            [c.plan for c in chosen], self.model, self.cluster,
            np.array([c.split.reported + (0,) * (width - len(c.split.reported)) for c in chosen], dtype=np.intp),
            limits[layout_of], param_bytes=PARAM_BYTES)
        return [Estimate(plan=c.plan, partition=c.split.reported, stage_node_types=c.stages.types,
                         stage_compute_s=tuple(c.compute), p2p_s=c.p2p, stage_end_s=tuple(c.ends),
                         pipeline_time_s=c.ends[0], dp_allreduce_s=dp, embedding_allreduce_s=float(c.layout.embedding_s),
                         step_time_s=step, memory=mem, usd_per_step=self.usd_per_s * step, partitioner=self.partitioner,
                         partition_proven_optimal=c.proven, partition_gap_pct=c.gap_pct)
                for c, dp, step, mem in zip(chosen, dp_costs[rows, slowest].tolist(), steps.tolist(), memory)]

    def dp_table(self, plan: Plan, layout: Layout) -> np.ndarray:
        """table[n, bus]: a stage's DP all-reduce (float32) when stage 0 holds n layers
        (dp-stage0-params, docs/estimators.md §7), on an unshared (0) and a shared (1) bus; the same
        float32 operations as fasop2024_comm.dp_allreduce_seconds, on arrays. Made once per (tp, dp, GPUs
        per node, ring) and shared by the estimators of this (model, cluster), e.g. a pareto
        sweep's compositions."""
        tables = self._shared.setdefault("dp tables", {})
        key = (plan.tp, plan.dp, plan.gpus_per_node, float(layout.dp_ring))
        table = tables.get(key)
        if table is None:
            params = self._dp_params_all(plan.tp)
            table = np.empty((len(params), 2), dtype=f32)
            for bus in (False, True):
                table[:, int(bus)] = fasop2024_comm.dp_allreduce_seconds(plan, params, layout.dp_ring, bus,
                                                               self.model.bytes_per_element)
            if len(tables) >= RECENT_FLOORS:
                tables.clear()
            tables[key] = table
        return table

    def _dp_params_all(self, tp: int) -> np.ndarray:
        """`_dp_params` for every number of layers on stage 0 (0..L), float32: the same sum,
        each prefix of it."""
        params_all = self._shared.setdefault("dp params", {})
        if tp not in params_all:
            h, v = self.model.hidden_size, self.model.vocab_size
            params, embedding_seen, sums = f32(0), False, [f32(0)]
            for kind in self.model.layer_kinds:  # _dp_params of every prefix of the layer list
                if kind in TRANSFORMER_KINDS:
                    params = params + f32((model_math.transformer_params(h) + DP_EXTRA_PARAMS_PER_LAYER) / tp)
                elif not embedding_seen:
                    params, embedding_seen = params + f32(model_math.embedding_params(h, v)), True
                sums.append(params)
            params_all[tp] = np.array(sums, dtype=f32)
        return params_all[tp]

    def _dp_costs(self, plan: Plan, layout: Layout, stage_types: Sequence[NodeType], stage0_layers: int) -> np.ndarray:
        """Each stage's DP all-reduce (float32) when stage 0 holds `stage0_layers` layers
        (dp-stage0-params): it differs between stages only by their bus (docs/estimators.md §7)."""
        return self.dp_table(plan, layout)[stage0_layers, [int(t.intra_node_shared) for t in stage_types]]

    def _dp_params(self, plan: Plan, stage0_layers: int) -> np.float32:
        """dp-stage0-params: stage 0's gradient count, accumulated in float32 (docs/estimators.md §7):
        each transformer layer (12h^2 + 20800)/tp, plus h*v (undivided) for the first
        embedding or head layer."""
        return self._dp_params_all(plan.tp)[stage0_layers]


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
    return Fasop2024Estimator(model, cluster, inventory, partitioner, partition_budget)
