"""The estimator seam: what search, orders and pareto may ask of an estimator, and the registry
that picks one by the cluster spec's `estimator` key.

An estimator scores plans of one (model, cluster, inventory). Adding one is writing one module
that defines a class (or factory) taking `(model, cluster, inventory, **options)` and decorating
it with `@register("name")`; a cluster spec with `estimator: name` then uses it. The registered
names: `names()`. `fasop-2024` (fasop/estimators/fasop2024/estimator.py) is FASOP's model.

API (the names other modules use):

- `Estimator` -- the protocol below; search/engine.py (with search/chunks.py), search/orders.py and pareto/sweep.py call nothing else.
- `register(name)` -- decorator; a name registered twice is an error.
- `quick_bound_within(estimator)` -- the optional capability of that name, or quick_bound.
- `make_estimator(model, cluster, inventory, **options)` -- the estimator named by
  `cluster.estimator`; an unknown name raises SpecError naming the cluster file, the key and
  the value. `options` are the search's: `partitioner`, `partition_budget`; an estimator takes
  what it understands and ignores the rest.
- Optional capabilities, looked up with `getattr(estimator, NAME, None)`:
  - `expect_shapes(shapes)`: a hint, the (tp, dp, pp) plans will have (search calls it once).
  - `schedule_of(estimate) -> schedule.Schedule`: the estimate's pipeline as a 1F1B timeline
    (events with start and end times, in-flight micro-batches), for plots and explanations.
  - `parts(estimate, zero_stage=0) -> parts.EstimateParts`: what the estimate is made of -- the
    step time as terms, each stage's memory by part against its limit, the `schedule_of`
    timeline -- for `fasop explain` and `fasop plot` (fasop/costs/parts.py; without it they show what
    the Estimate states: `parts.stated_parts`).
  - `prefix_bounds(shape, kinds) -> PrefixBounds`: what `--placements all --top K` needs to
    search node orders too many to list by branch and bound over order prefixes
    (orders.OrderSearch). An estimator without it gets its orders listed, up to
    search.MAX_ORDERS; past that the search is refused with a one-line error.
  - `quick_bound_within(plan, limit) -> float`: `quick_bound(plan)` when it is at most `limit`,
    else any value above `limit` and at most it (a sweep's least bound over degrees, a search's
    cut-off need no more, and the estimator may skip work); `quick_bound_within(estimator)` below
    gives it, or quick_bound itself for an estimator without it.
  - `context_parallel` (a bool attribute, default True): False where the job cannot run context parallelism
    (the analytic estimator's job without fused attention); the search then plans cp 1 only
    (search.engine.runnable_space) and explain / export refuse a CP row.
  - `estimate_split(plan, partition) -> Estimate`: the estimate with the given layer split
    (layer-list entries per stage), for `fasop explain` / `fasop plot` of a results row; without
    it they accept only rows whose split is the one `estimate(plan)` chooses.

What an estimator may build on, below this package (none of it FASOP-specific):
- `fasop.costs.estimate.Estimate`: the result type (fields may be added with defaults).
- `fasop.costs.model_math`: per-layer parameters, activation bytes, p2p and embedding-sync elements.
- `fasop.costs.compute.ComputeSource` / `LayerTimes`: per-layer forward and backward seconds apart
  (`ProfileCompute` reads a model's profile).
- `fasop.schedule.pipeline.Schedule(fwd_s, bwd_s, m, send_fwd_s, send_bwd_s)`: one 1F1B pipeline --
  `stage_end_s`, `pipeline_time_s`, `events` (Event: stage, microbatch, kind in fwd / bwd /
  send_fwd / send_bwd, start_s, end_s), `stage_events(i)`, `critical_path(i)`, `in_flight`,
  `lower_bound_s`; `one_f_one_b` schedules a batch of pipelines at once.
- `fasop.costs.comm`: rank pairs of boundaries, DP rings and embedding syncs; least bandwidths.
- `fasop.costs.memory`: `ParamBytes`, `stage_elements`, `stage_fits`, `stage_fit_mask`.
- `fasop.partition.splits.optimal`: exact split search over any bound / evaluate / cut callables.
FASOP-2024's own rules live in `fasop/estimators/fasop2024/` (docs/estimators.md), the analytic
estimator's in `fasop/estimators/analytic/`; each registers itself when first named.

May import: fasop.core, fasop.specs, fasop.plans, fasop.schedule, fasop.partition, fasop.costs.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Protocol, runtime_checkable

from fasop.core.errors import SpecError
from fasop.costs.estimate import Estimate
from fasop.plans.plan import Plan
from fasop.specs.types import ClusterSpec, ModelSpec, NodeType

Progress = Callable[[int, int], None]


@runtime_checkable
class Estimator(Protocol):
    """What a search may ask of an estimator of one (model, cluster, inventory)."""

    model: ModelSpec
    cluster: ClusterSpec
    inventory: tuple[NodeType, ...]
    usd_per_s: float
    """Price of the whole inventory, dollars per second."""

    def tp_degrees(self) -> tuple[int, ...]:
        """The tensor-parallel degrees this estimator can score on the inventory's GPUs."""

    def signature(self, plan: Plan) -> Hashable:
        """Everything of `plan` its estimate depends on: plans with equal signatures get equal
        estimates (up to the placement's name), so a search estimates only the first."""

    def quick_bound(self, plan: Plan) -> float:
        """A cheap step time no split or placement of `plan`'s degrees beats (may ignore the
        placement); at most `estimate(plan).step_time_s` of each such plan that fits in memory
        (the only ones a search with `top` keeps or a sweep compares): inf when none can fit."""

    def lower_bound(self, plan: Plan, above: float = float("inf")) -> float:
        """A step time `plan` never beats, at most its estimate's if it fits (as quick_bound);
        once it is above `above` it may stop tightening."""

    def estimate(self, plan: Plan) -> Estimate:
        """The plan's estimate."""

    def estimate_many(self, plans: Sequence[Plan], progress: Progress | None = None) -> list[Estimate]:
        """`estimate` of each plan, in order; progress(done, total) if given."""

    def estimate_below(self, plan: Plan, cutoff: float) -> Estimate | None:
        """`estimate(plan)` if it fits in memory with a step time of at most `cutoff`, else None;
        the estimate must not depend on the cutoff."""


class PrefixBounds(Protocol):
    """An estimator's view of one plan shape (degrees and micro-batch; placement: the inventory
    in its own order) as a fold over node positions, for orders.OrderSearch.

    A *state* summarises a prefix of a node order. It must be hashable, and two prefixes of the
    same length with equal states and equal node counts left must give, completion by
    completion, plans with equal signatures (the search skips the later one's subtree)."""

    def start(self) -> Hashable:
        """The state of the empty prefix."""

    def extend(self, state: Hashable, position: int, node: NodeType) -> Hashable:
        """The state after placing `node` at `position` (= the prefix's length)."""

    def bound(self, state: Hashable, placed: int, left: tuple[int, ...]) -> float:
        """A step time no completion of the prefix beats; `left`: nodes left per kind (in the
        order of the `kinds` given to `prefix_bounds`)."""


_REGISTRY: dict[str, Callable[..., Estimator]] = {}


def register(name: str) -> Callable:
    """Class or factory decorator: `@register("my-model")` makes it the estimator of cluster
    specs with `estimator: my-model`. It is called as `(model, cluster, inventory, **options)`."""
    def add(factory: Callable[..., Estimator]) -> Callable[..., Estimator]:
        if name in _REGISTRY and _REGISTRY[name] is not factory:
            raise ValueError(f"estimator {name!r} is registered already")
        _REGISTRY[name] = factory
        return factory
    return add


def unregister(name: str) -> None:
    """Remove a registered estimator (tests that register their own clean up with this)."""
    _REGISTRY.pop(name, None)


_ON_FIRST_USE = {"fasop-2024": "fasop.estimators.fasop2024", "analytic": "fasop.estimators.analytic"}
"""Estimators shipped with fasop whose module is imported (and registers itself) when a cluster
spec first names it: a process that never uses one does not pay for importing it."""


def names() -> tuple[str, ...]:
    """The registered estimator names, sorted."""
    return tuple(sorted(set(_REGISTRY) | set(_ON_FIRST_USE)))


def make_estimator(model: ModelSpec, cluster: ClusterSpec, inventory: Iterable[NodeType], **options) -> Estimator:
    """The estimator the cluster spec names (its `estimator` key), for this model and inventory."""
    if cluster.estimator not in _REGISTRY and cluster.estimator in _ON_FIRST_USE:
        importlib.import_module(_ON_FIRST_USE[cluster.estimator])
    factory = _REGISTRY.get(cluster.estimator)
    if factory is None:
        raise SpecError(cluster.path, "estimator", f"unknown estimator {cluster.estimator!r} "
                                                   f"(known: {', '.join(names())})")
    return factory(model, cluster, tuple(inventory), **options)



def quick_bound_within(estimator: Estimator) -> Callable[[Plan, float], float]:
    """within(plan, limit): the estimator's `quick_bound_within` capability, or its quick_bound
    (exact everywhere, so within the capability's contract)."""
    within = getattr(estimator, "quick_bound_within", None)
    return within if within is not None else lambda plan, limit: estimator.quick_bound(plan)
