"""The `analytic` estimator: any Transformer (HuggingFace config) on any catalog GPU, no profile.

Registered as `analytic` and chosen by a cluster spec with `estimator: analytic` (aws.yaml,
gcp.yaml). Every number comes from fasop/estimators/analytic/cost.py (the formulas and their citations are
in its docstring and fasop/estimators/analytic/layers.py's); this module maps fasop's Plan onto it:

- For each plan it scores every recipe the search allows (`recompute`, `zero`, `sequence_parallel`,
  `virtual_stages`, `precision`, `offload_layers`; the CLI flags of the same names) and keeps the fastest
  that fits in memory, else the one closest to fitting; the CSV shows the chosen values. Sequence parallelism applies only with tp > 1, ZeRO only with dp > 1,
  interleaving only with pp > 1 when pp x v divides the layers and pp divides the micro-batches.
- The layer split balances stages of different GPUs (analytic_cost.split_layers), each stage at
  most the layers its memory holds.
- A profile (model spec `profile:`) for a stage's (GPU type, tp) replaces the analytic layer
  times of that stage: forward = the profiled first transformer entry x its micro-batch scaling,
  backward = (fwd_bwd_factor - 1) x forward; `compute_source` says analytic, profile or mixed.
- Memory: the per-stage total (weights, gradients, optimizer, activations, framework overhead)
  against the stage's GPU memory; a plan that does not fit names why: weights, activations, both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fasop.core.errors import FasopError
from fasop.costs.estimate import Estimate
from fasop.costs.memory import MemoryEstimate
from fasop.costs.parts import EstimateParts, schedule_or_note, stated_parts
from fasop.estimators import register
from fasop.estimators.analytic import cost as C
from fasop.estimators.analytic import groups as G
from fasop.estimators.analytic import host, overheads, slots
from fasop.estimators.analytic.hardware import cached_stage_hardware, domain_gpus
from fasop.estimators.analytic.bound import CompositionBound, least_bound, stage_caps  # noqa: F401
from fasop.estimators.analytic.layers import PRECISIONS, RECOMPUTES, ZERO_STAGES, Recipe  # noqa: F401
from fasop.estimators.analytic.memory import state_dtypes
from fasop.estimators.analytic.modules import split_recompute
from fasop.estimators.analytic.workloads import TABLE_ROWS, profiled_times, shared_tables, shared_workload
from fasop.estimators.analytic.recipes import (DEFAULTS, default_precision, mtp_depths, parse_recipes,  # noqa: F401
                                              recipe_grid, without_missing_units)
from fasop.estimators.analytic.orders import AnalyticPrefixBounds
from fasop.plans.plan import Plan
from fasop.schedule.pipeline import Schedule
from fasop.specs.catalog import canonical, find_gpu
from fasop.specs.types import GIB, TRANSFORMER_KINDS, ClusterSpec, ModelSpec, NodeType

MEMORY_PARTS = ("weights", "gradients", "optimizer", "activations", "overhead")
"""analytic_cost.MemoryParts' fields, in the order explain shows them."""
COLUMNS = ("cp", "cp_comm", "ep", "etp", "dp_shard", "dp_replicate", "recompute", "zero", "sequence_parallel",
           "virtual_stages", "precision", "main_grads", "optimizer_states", "mtp_layers", "cuda_graphs", "offload_layers",
           "recompute_layers", "bf16_layers", "compute_source", "misfit", "stage_memory_gib", "stage_memory_limit_gib")
"""Extra CSV columns of this estimator's plans (report/results.py appends them after the common ones)."""


@dataclass(frozen=True)
class _Scored:
    recipe: Recipe
    counts: tuple[int, ...]
    fits: bool
    step: C.Step
    memory: tuple[C.MemoryParts, ...]
    excess: float
    """Largest stage memory / limit (> 1: does not fit)."""


class AnalyticEstimator:
    """The analytic estimator of one (model, cluster, inventory) and the allowed recipes."""

    def __init__(self, model: ModelSpec, cluster: ClusterSpec, inventory: Sequence[NodeType], recipes: dict):
        if model.architecture is None:
            raise FasopError(f"{model.path}: the analytic estimator needs the model's architecture: use a "
                             "HuggingFace config (hf_config: in the spec, or --model path/to/config.json)")
        self.model, self.cluster, self.inventory = model, cluster, tuple(inventory)
        self.arch, self.params, self.usd_per_s = model.architecture, cluster.analytic, sum(
            n.usd_per_hour for n in self.inventory) / 3600
        self.gpus = {n.name: self.params.gpu(find_gpu(n.gpu, cluster.path)) for n in self.inventory}
        self.params = overheads.job_params(self.params, self.gpus.values())   # no FlashAttention below sm80
        self.context_parallel = self.params.fused_attention   # TE's CP has no unfused path (search.runnable_space)
        self.params = host.graphed(state_dtypes(self.params, *(recipes.get(k) == ("bf16",) for k in (
            "main_grads", "optimizer_states"))), self.arch, recipes.get("cuda_graphs", ("none",))[0])
        self.recipes, g, self.mtp = recipes, self.inventory[0].gpus_per_node, mtp_depths(recipes, self.arch)
        self.domain_gpus = domain_gpus([self.gpus[n.name] for n in self.inventory], range(len(self.inventory)), g)
        self._bounds, self._roomiest = {}, max(n.memory_limit_bytes for n in self.inventory)
        self._composition: CompositionBound | None = None
        t = shared_tables(model, cluster, self.params, recipes, {n.gpus_per_node for n in self.inventory})  # a sweep's
        self._workloads, self._recipe_lists, self._bound_parts, self._hardware, self._stage_spans = \
            t["workloads"], t["recipes"], t["bound"], t["hardware"], t["spans"]

    # ------------------------------------------------------------------ protocol
    def tp_degrees(self) -> tuple[int, ...]:
        """Powers of two up to a node's GPUs dividing the heads, KV heads and FFN width."""
        g = min(n.gpus_per_node for n in self.inventory)
        a = self.arch
        widths = (a.num_attention_heads, a.num_kv_heads, a.ffn_hidden_size) \
            + ((a.moe.expert_ffn_hidden_size,) if a.moe else ()) + ((a.mamba.num_heads,) if a.mamba else ())
        return tuple(t for t in (1, 2, 4, 8, 16, 32) if t <= g and not any(n % t for n in widths))

    def signature(self, plan: Plan):
        stages = self._stages(plan)
        key = lambda hw: (hw.gpu.name, hw.memory_limit_bytes, hw.domain_nodes, hw.groups and hw.groups.key, *(  # noqa: E731
            (x.bytes_per_s, x.latency_s) if x else None for x in (hw.tp_link, hw.dp_link, hw.next_link)))  # a cheap repr
        return plan.tp, plan.dp, plan.pp, plan.mbs, plan.cp, plan.ep, plan.etp, tuple(key(hw) for hw in stages)

    def quick_bound(self, plan: Plan) -> float:
        """A step time no fitting plan of `plan`'s degrees beats on this inventory, whatever the
        node order, split and allowed recipe; inf when no recipe's memory floor fits
        (fasop/estimators/analytic/bound.py: the composition's best pace, memory floors, the
        optimizer, DP and embedding terms that do not shrink). The plan's placement is an order
        of the inventory (every plan uses every node)."""
        return self.quick_bound_within(plan, float("inf"))

    def quick_bound_within(self, plan: Plan, limit: float) -> float:
        """quick_bound(plan) if at most `limit`, else a value in (limit, quick_bound]: bound.least_bound."""
        if self.model.profile is not None:  # profiled layers may be faster than the analytic floor
            return 0.0
        key = (plan.tp, plan.dp, plan.pp, plan.mbs, plan.num_microbatches, plan.cp, plan.ep, plan.etp)
        bound = self._bounds.get(key)
        if bound is None:
            if self._composition is None:
                self._composition = CompositionBound(self.inventory, self.gpus, self.params, self._bound_parts)
            bound = least_bound(self._composition, self.workloads(plan), limit)
            if bound <= limit:  # the bound itself
                self._bounds[key] = bound
        return bound

    def search_order(self, plan: Plan) -> float:
        """The order tree's visiting key of a degree shape (not a bound of it): all layers on the
        inventory's fastest GPU at a free link, (m + (p - 1)/v) / p of them, the cheapest recipe that
        may fit. Shapes good on the fast GPUs come first, so the kept threshold tightens early: by
        quick_bound the search visited one 17,000-order shape first (llama-3-70b p5=4,p4de=4,g6e=4:
        12.5 s CPU against 1.3 s, the same rows)."""
        fast = C.Link(float("inf"), 0.0)
        t = min(sum(C.layer_s(self._workload(plan, r), gpu, fast))
                for r in self._possible(plan) for gpu in self.gpus.values())
        v = max(r.virtual_stages for r in self._recipes(plan))
        return (plan.num_microbatches + (plan.pp - 1) / v) * self.arch.num_layers * t / plan.pp

    def lower_bound(self, plan: Plan, above: float = float("inf")) -> float:
        return self.quick_bound(plan)

    def estimate(self, plan: Plan) -> Estimate:
        return self._best(plan, float("inf"))

    def estimate_below(self, plan: Plan, cutoff: float) -> Estimate | None:
        if self.lower_bound(plan) > cutoff:
            return None
        e = self._best(plan, cutoff, fitting_only=True)
        return None if e is None or e.memory.is_oom or not e.step_time_s <= cutoff else e

    def _best(self, plan: Plan, cutoff: float, fitting_only: bool = False) -> Estimate | None:
        """The fastest allowed recipe that fits, else (cutoff infinite) the closest to fitting.
        Recipes are tried by their lower bound (the plan's own stages' layer times, the split's
        continuous relaxation, no transfers: slots.pipeline_floor); one whose bound
        exceeds the best step found, or the cutoff, cannot win and ends the search. With a finite cutoff,
        None when none fits below it; `fitting_only`: None when no recipe has room, without scoring."""
        stages = self._stages(plan)
        profiled = profiled_times(self.model, plan, stages)
        tried = []
        limits = [hw.memory_limit_bytes for hw in stages]
        recipes = [r for r in self._possible(plan) if self._room(plan, r, limits)]
        if not recipes:  # none can hold the layers: nothing fits (fitting_only: say so at once)
            if fitting_only:
                return None
            recipes = self._recipes(plan)
        for recipe in recipes:
            w = self._workload(plan, recipe)
            times = self._layer_times(w, stages, profiled)
            ends = (sum(C.embedding_s(w, stages[0].gpu, stages[0].tp_link)), sum(C.head_s(w, stages[-1].gpu)))
            bound = slots.pipeline_floor(plan.num_microbatches, recipe.virtual_stages, self.arch.num_layers,
                                   [f + b for f, b in times], ends)
            tried.append((bound, len(tried), w, times))
        tried.sort(key=lambda t: t[:2])
        best = closest = None
        for bound, _, w, times in tried:
            if bound > cutoff or (best is not None and bound > best.step.step_s):
                break
            scored = self._score(plan, stages, w, times)
            if scored.fits:
                if best is None or scored.step.step_s < best.step.step_s:
                    best = scored
            elif best is None and (closest is None or scored.excess < closest.excess):
                closest = scored
        chosen = best or (closest if cutoff == float("inf") else None)
        if chosen is None or (fitting_only and not chosen.step.step_s <= cutoff):  # estimate_below's None, unbuilt
            return None
        return self._estimate(plan, stages, chosen, profiled)

    def estimate_split(self, plan: Plan, partition: tuple[int, ...]) -> Estimate:
        """The estimate with the layers split as `partition` (layer-list entries per stage; the first
        and last stages also hold the embedding and the head), not as split_layers would: explain and
        plot of a row at another --seq-len, or of a hand-written --partition. Recipes as `estimate`."""
        counts = [*partition]
        counts[0] -= 1
        counts[-1] -= 1  # pp 1: the same stage holds both
        if len(counts) != plan.pp or min(counts) < 0 or sum(counts) != self.arch.num_layers:
            raise FasopError(f"partition {'-'.join(map(str, partition))}: not {plan.pp} stages' entries of the "
                             f"{self.arch.num_layers + 2}-entry layer list (embedding, {self.arch.num_layers} layers, "
                             "head) with the embedding on the first stage and the head on the last")
        stages, scored = self._stages(plan), []
        profiled = profiled_times(self.model, plan, stages)
        for recipe in self._possible(plan):
            w = self._workload(plan, recipe)
            scored.append(self._score(plan, stages, w, self._layer_times(w, stages, profiled), tuple(counts)))
        best = min(scored, key=lambda s: (not s.fits, s.step.step_s if s.fits else s.excess))
        return self._estimate(plan, stages, best, profiled)

    def estimate_many(self, plans: Sequence[Plan], progress=None) -> list[Estimate]:
        out = []
        for i, plan in enumerate(plans):
            out.append(self.estimate(plan))
            if progress is not None:
                progress(i + 1, len(plans))
        return out

    def prefix_bounds(self, shape: Plan, kinds: Sequence[NodeType]) -> AnalyticPrefixBounds:
        """The fold over node orders that lets `--placements all --top K` search many nodes
        (fasop/estimators/analytic/orders.py)."""
        return AnalyticPrefixBounds(self, shape, kinds)

    def workloads(self, shape: Plan) -> list[tuple[Recipe, C.Workload]]:
        """The recipes a plan of `shape`'s degrees could fit with on some placement (`_possible`),
        each with its Workload: what the order bounds score."""
        return [(r, self._workload(shape, r)) for r in self._possible(shape)]

    # ------------------------------------------------------------------ pieces
    def _stages(self, plan: Plan) -> tuple[C.StageHardware, ...]:
        """Each stage's GPU and links, kept per (tp, cp*dp, pp, node order) (mbs, ep, etp share them)."""
        key = (plan.tp, plan.cp * plan.dp, plan.pp, tuple(n.name for n in plan.placement))
        hw = self._hardware.get(key)
        if hw is None:
            if len(self._hardware) >= TABLE_ROWS:
                self._hardware.clear()
                self._stage_spans.clear()
            gpus = tuple(self.gpus[n.name] for n in plan.placement)  # CP sits between TP and DP (tp-cp-dp)
            hw = self._hardware[key] = cached_stage_hardware(self._stage_spans, *key[:3], plan.placement, gpus,
                                                             self.params, key[3])
        return hw

    def _recipes(self, plan: Plan) -> list[Recipe]:
        key = (plan.tp, plan.dp, plan.pp, plan.num_microbatches, plan.cp, plan.ep, plan.etp)
        if key not in self._recipe_lists:
            self._recipe_lists[key] = list(self._recipes_of(plan))
        return self._recipe_lists[key]

    def _possible(self, plan: Plan) -> list[Recipe]:
        """The recipes whose memory could hold the model on pp stages of the inventory's largest
        GPU (a necessary condition for any placement: analytic_cost.split_layers' capacity test);
        all of them when none can (the plan does not fit whatever the recipe)."""
        roomiest = self._roomiest
        key = ("possible", roomiest, plan.tp, plan.dp, plan.pp, plan.num_microbatches, plan.cp, plan.ep, plan.etp)
        if key not in self._recipe_lists:
            n = self.arch.num_layers
            fits = [r for r in self._recipes(plan) if stage_caps(self._workload(plan, r), roomiest).sum() >= n]
            self._recipe_lists[key] = fits or self._recipes(plan)
        return self._recipe_lists[key]

    def _recipes_of(self, plan: Plan):
        return recipe_grid(self.recipes, plan, self.arch.num_layers, *G.hsdp_flags(plan, self.arch, self.domain_gpus),
                           arch=self.arch, seq=self.model.sequence_length)

    def _workload(self, plan: Plan, recipe: Recipe) -> C.Workload:
        """One Workload object per (degrees, micro-batch, recipe): the cost model caches on it."""
        key = (plan.tp, plan.dp, plan.pp, plan.mbs, plan.global_batch_size, recipe, plan.cp, plan.ep, plan.etp)
        w = self._workloads.get(key)
        if w is None:
            shard = G.dp_shard(plan, True, self.domain_gpus) * plan.cp if recipe.hsdp else 0
            w = self._workloads[key] = shared_workload(self.arch, self.params, self.model.sequence_length, plan, recipe,
                                                       shard, self.mtp)
        return w

    def _room(self, plan: Plan, recipe: Recipe, limits: list[float]) -> bool:
        """Whether this plan's stages can hold all layers under `recipe` (split_layers' test)."""
        w, n = self._workload(plan, recipe), self.arch.num_layers
        caps = [C.max_layers(w, i, limit, n) for i, limit in enumerate(limits)]
        return min(caps) >= 1 and sum(caps) >= n

    def _layer_times(self, w: C.Workload, stages, profiled) -> tuple[tuple[float, float], ...]:
        """Each stage's (fwd, bwd) of one layer: the profile's where it has one, else analytic."""
        return tuple(profiled[i] if profiled and profiled[i] else C.layer_s(w, hw.gpu, hw.tp_link, hw.groups)
                     for i, hw in enumerate(stages))

    def _score(self, plan: Plan, stages, w: C.Workload, times, given: tuple[int, ...] | None = None) -> _Scored:
        counts = C.split_layers(w, stages, times) if given is None else given
        fits = counts is not None
        if counts is None:
            n, p = self.arch.num_layers, plan.pp
            counts = tuple(n // p + (i < n % p) for i in range(p))
        memory = tuple(C.stage_memory(w, n, i) for i, n in enumerate(counts))
        excess = max(m.total / hw.memory_limit_bytes for m, hw in zip(memory, stages))
        return _Scored(w.recipe, counts, fits and excess <= 1, C.step(w, stages, counts, times), memory, excess)

    def _estimate(self, plan: Plan, stages, s: _Scored, times) -> Estimate:
        step, counts = s.step, s.counts
        entries = list(counts)
        entries[0] += 1
        entries[-1] += 1
        totals = tuple(m.total for m in s.memory)
        misfits = [m.misfit(hw.memory_limit_bytes) for m, hw in zip(s.memory, stages)]
        misfit = next((x for x in misfits if x == "both"), next((x for x in misfits if x), ""))
        oom = bool(misfit) or not s.fits
        memory = MemoryEstimate(stage_bytes=totals, stage_zero_bytes=totals, is_oom=oom,
                                oom_gpumem_gib=max(totals) / GIB, is_zero_oom=oom, zero_oom_gpumem_gib=max(totals) / GIB)
        source = "analytic" if not times else "profile" if all(times) else "mixed"
        r = s.recipe
        shard = G.dp_shard(plan, r.hsdp, self.domain_gpus) if r.zero else 1
        extra = tuple(zip(COLUMNS, (
            plan.cp, r.cp_comm if plan.cp > 1 else "", plan.ep, plan.etp, shard, plan.dp // shard, r.recompute_name,
            r.zero, r.sequence_parallel, r.virtual_stages, r.precision,
            *(self.mtp if k == "mtp_layers" else self.recipes.get(k, DEFAULTS[k])[0] for k in COLUMNS[11:15]),
            r.offload_layers, r.recompute_layers or "", r.bf16_layers, source, misfit or ("activations" if oom else ""),
            "-".join(f"{t / GIB:.2f}" for t in totals), "-".join(f"{hw.memory_limit_bytes / GIB:.2f}" for hw in stages)),
            strict=True))
        return Estimate(plan=plan, partition=tuple(entries), stage_node_types=self._pacing_nodes(plan, stages),
                        stage_compute_s=tuple(f + b for f, b in zip(step.stage_fwd_s, step.stage_bwd_s)),
                        p2p_s=step.p2p_s[:plan.pp - 1], stage_end_s=step.stage_end_s, pipeline_time_s=step.pipeline_s,
                        dp_allreduce_s=max(step.dp_s), embedding_allreduce_s=step.embedding_sync_s,
                        step_time_s=step.step_s, memory=memory, usd_per_step=self.usd_per_s * step.step_s,
                        partitioner="balanced", extra_columns=extra,
                        stage_memory_parts=tuple(tuple((k, getattr(m, k)) for k in MEMORY_PARTS) for m in s.memory),
                        step_parts=self._step_parts(step))

    def _step_parts(self, step: C.Step) -> tuple[tuple[str, float], ...]:
        """analytic_cost.step's sum: the latest (stage end + its DP sync not overlapped), the
        embedding all-reduce, the optimizer step; the first of equal stages, as max picks it."""
        done = [e + x for e, x in zip(step.stage_end_s, step.dp_exposed_s)]
        k = done.index(max(done))
        return ((f"stage {k}'s end", step.stage_end_s[k]), ("DP sync not overlapped", step.dp_exposed_s[k]),
                ("embedding all-reduce", step.embedding_sync_s), ("optimizer step", step.optimizer_s))

    def parts(self, estimate: Estimate, zero_stage: int = 0) -> EstimateParts:
        """What `estimate` is made of, for explain and plots (parts.stated_parts): the step and
        memory parts it was scored with (its ZeRO is its recipe's: zero_stage is not read), each
        stage's node type's limit, and `schedule_of`'s timeline unless the plan is interleaved."""
        return stated_parts(estimate, *schedule_or_note(self.schedule_of, estimate))

    def schedule_of(self, estimate: Estimate) -> Schedule:
        """The 1F1B timeline of an estimate's pipeline: each stage's forward and backward of one
        micro-batch and its real sends (forward to stage i + 1 and backward to stage i - 1 at the
        boundary's p2p time). analytic_cost.step's pipeline is a closed form (m x the slowest
        stage's cycle + the others' once); this simulation can end earlier or later: explain
        states both. Interleaved plans (virtual_stages > 1) are refused: Schedule runs plain
        1F1B only, and a plain picture of an interleaved plan would be wrong."""
        v = dict(estimate.extra_columns).get("virtual_stages", 1)
        if v != 1:
            raise FasopError(f"{estimate.plan.key()}: virtual_stages {v}: the interleaved 1F1B timeline is not "
                             "drawn yet (fasop.schedule.pipeline.Schedule runs plain 1F1B only)")
        plan, (w, stages, counts) = estimate.plan, self._scored_as(estimate, virtual_stages=1)
        fwd, bwd, _ = C.stage_times(w, stages, counts, self._layer_times(w, stages, profiled_times(self.model, plan, stages)))
        p2p = list(estimate.p2p_s)
        send_fwd = p2p + [0.0]
        send_bwd = [0.0] + p2p
        return Schedule(fwd, bwd, plan.num_microbatches, send_fwd, send_bwd)

    def parallel_lines(self, estimate: Estimate) -> tuple[str, ...]:
        """explain's lines on the plan's EP / CP / FSDP groups and their costs (groups.py); none
        for a plan without them."""
        w, stages, counts = self._scored_as(estimate)
        if w.cp == 1 and w.arch.moe is None and w.recipe.zero < 3 and not w.recipe.hsdp:
            return ()
        return (G.group_line(w, w.tp * w.cp * w.dp), *G.stage_lines(w, stages, counts))

    def _scored_as(self, estimate: Estimate, virtual_stages: int | None = None):
        """(workload, stages, transformer layers per stage) the estimate was scored with."""
        r, plan = dict(estimate.extra_columns), estimate.plan
        mode, modules = split_recompute(r["recompute"])
        recipe = Recipe(recompute=mode, recompute_modules=modules, sequence_parallel=r["sequence_parallel"], zero=r["zero"],
                        virtual_stages=virtual_stages or r["virtual_stages"], precision=r["precision"],
                        hsdp=r["dp_replicate"] > 1 and r["zero"] > 0, cp_comm=r["cp_comm"] or "p2p")
        counts = list(estimate.partition)
        counts[0] -= 1
        counts[-1] -= 1
        return self._workload(plan, recipe), self._stages(plan), tuple(counts)

    def _pacing_nodes(self, plan: Plan, stages) -> tuple[NodeType, ...]:
        return tuple(next(plan.placement[k] for k in span if self.gpus[plan.placement[k].name] is hw.gpu)
                     for span, hw in zip(plan.stage_node_indices, stages))


@register("analytic")
def make(model: ModelSpec, cluster: ClusterSpec, inventory: Sequence[NodeType], **options) -> AnalyticEstimator:
    """The analytic estimator; options `recompute`, `zero`, ..., `cuda_graphs`: tuples of allowed values
    (recipes.DEFAULTS when absent); others are ignored. A virtual-stage count no pipeline of the model can
    use (v x pp must divide its transformer layers for some pp >= 2) is refused, not replaced by 1; a plan
    whose pp it does not divide runs with 1, as its virtual_stages column says."""
    gpus = [find_gpu(n.gpu, cluster.path) for n in inventory]
    recipes = parse_recipes(default_precision(options, gpus))
    for low in ("bf16", "fp8", "mxfp8", "nvfp4"):
        if low in recipes["precision"]:
            recipes = without_missing_units(recipes, gpus, low)
    estimator = AnalyticEstimator(model, cluster, inventory, recipes)
    layers = estimator.arch.num_layers
    usable = [v for v in range(2, layers // 2 + 1) if any(not layers % (pp * v) for pp in range(2, layers // v + 1))]
    bad = [v for v in estimator.recipes["virtual_stages"] if v > 1 and v not in usable]
    if bad:
        raise FasopError(f"--virtual-stages: {bad[0]}: no pipeline of {model.name}'s {layers} transformer layers "
                         f"splits into {bad[0]} chunks a stage (v x pp must divide {layers}); usable: "
                         f"{', '.join(map(str, [1] + usable))}")
    return estimator
