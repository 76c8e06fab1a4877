"""Which clusters to try: node compositions within per-type limits, and the sweep that searches
each one (in this process or in worker processes) and prices its whole training run.

No printing, no files: the CLI does that (cli/pareto.py); frontier.py takes the results to the
time-vs-dollar frontier.

Definitions (docs/pareto.md):
- train_time_h = step_time_s x iterations / 3600.
- train_cost_usd = (sum over the composition's nodes of the node's $/h) x train_time_h.
"""

from __future__ import annotations

import functools
import itertools
import math
import operator
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from fasop.core import limits
from fasop.core.errors import FasopError, NoPlan
from fasop.core.workers import completed, process_pool
from fasop.core.workers import stop as _stop
from fasop.costs.estimate import Estimate
from fasop.estimators import make_estimator, quick_bound_within
from fasop.plans.enumerate import combo_plan, degree_list
from fasop.plans.space import split_options
from fasop.search.engine import DEFAULT_ITERATIONS, SearchResult, check_strategies, parse_counts, runnable_space, search
from fasop.specs.types import ClusterSpec, ModelSpec, NodeType

Status = Literal["ok", "oom", "no_plan", "pruned"]
Progress = Callable[[int, int], None]
"""progress(done, total) over compositions."""


# ---------------------------------------------------------------------------- compositions
@dataclass(frozen=True, kw_only=True)
class Composition:
    """Node counts per type, in the order of the --max-nodes limits (zeros included)."""

    counts: tuple[tuple[str, int], ...]

    @property
    def num_nodes(self) -> int:
        return sum(n for _, n in self.counts)

    @property
    def label(self) -> str:
        """e.g. `8xa100+3xa10` (types with no node left out)."""
        return "+".join(f"{n}x{name}" for name, n in self.counts if n)

    @property
    def kind(self) -> str:
        """The node type when all nodes are of one type, else "mixed"."""
        used = [name for name, n in self.counts if n]
        return used[0] if len(used) == 1 else "mixed"

    def inventory(self, cluster: ClusterSpec) -> tuple[NodeType, ...]:
        """The node list: all nodes of the first type, then the next type's (FASOP: A100 first)."""
        return tuple(node for name, n in self.counts for node in [cluster.node_types[name]] * n)


def parse_node_limits(text: str, cluster: ClusterSpec, flag: str) -> dict[str, int]:
    """`a100=8,a10=8` -> {"a100": 8, "a10": 8}, in the order given; counts may be 0."""
    return parse_counts(text, cluster, flag, minimum=0)


def compositions(max_nodes: Mapping[str, int], min_nodes: Mapping[str, int] | None = None) -> tuple[Composition, ...]:
    """Every non-empty composition with min <= count <= max per type.

    Order: the count of the first type ascending outermost, the last type's innermost
    (a100=0..8 x a10=0..8 -> (0,1), (0,2), ..., (0,8), (1,0), ..., (8,8)).
    """
    min_nodes = dict(min_nodes or {})
    unknown = [t for t in min_nodes if t not in max_nodes]
    if unknown:
        raise FasopError(f"--min-nodes: node type {unknown[0]!r} has no --max-nodes limit")
    above = [f"{t}={min_nodes[t]} > {max_nodes[t]}" for t in min_nodes if min_nodes[t] > max_nodes[t]]
    if above:
        raise FasopError(f"--min-nodes: above --max-nodes for {', '.join(above)}")
    names = list(max_nodes)
    ranges = [range(min_nodes.get(t, 0), max_nodes[t] + 1) for t in names]
    if math.prod(len(r) for r in ranges) > limits.COMPOSITIONS + 1:
        raise FasopError(f"--max-nodes: {math.prod(len(r) for r in ranges):,} compositions, more than fasop's ceiling "
                         f"of {limits.COMPOSITIONS:,} (README: Limits): lower --max-nodes or raise --min-nodes")
    found = tuple(Composition(counts=tuple(zip(names, counts)))
                  for counts in itertools.product(*ranges) if sum(counts) > 0)
    if not found:
        raise FasopError(f"--max-nodes: no non-empty composition within {dict(max_nodes)}")
    return found


def iterations_for_tokens(tokens: int, *, global_batch_size: int, sequence_length: int) -> int:
    """Training steps to see `tokens` tokens: ceil(tokens / (global batch x sequence length))."""
    if tokens < 1:
        raise FasopError(f"--tokens: must be >= 1, got {tokens}")
    return math.ceil(tokens / (global_batch_size * sequence_length))


def node_prices(cluster: ClusterSpec, type_names: Iterable[str], *, spot: bool) -> tuple[dict[str, float], tuple[str, ...]]:
    """($/h per node type, types priced on demand although spot was asked: the spec has no spot price)."""
    prices, fallback = {}, []
    for name in type_names:
        node = cluster.node_types[name]
        if spot and node.spot_usd_per_hour is not None:
            prices[name] = node.spot_usd_per_hour
        else:
            prices[name] = node.usd_per_hour
            if spot:
                fallback.append(name)
    return prices, tuple(fallback)


# ---------------------------------------------------------------------------- sweep
@dataclass(frozen=True, kw_only=True)
class CompositionResult:
    composition: Composition
    search: SearchResult | None
    """Every candidate of the composition (None when no valid plan exists)."""
    usd_per_hour: float
    """Price of the composition per hour on the chosen basis (on-demand or spot)."""
    iterations: int
    no_plan_reason: str = ""
    step_time_bound_s: float | None = None
    """Set when the composition was pruned (fasop.pareto.pruning): no plan of it that fits in memory is
    faster than this, which puts it behind a frontier point; its search was skipped or cut off."""

    @property
    def best(self) -> Estimate | None:
        """Fastest plan that fits in memory (ties: enumeration order)."""
        return None if self.search is None else self.search.best_fitting

    @property
    def status(self) -> Status:
        if self.step_time_bound_s is not None:
            return "pruned"
        return "no_plan" if self.search is None else ("oom" if self.best is None else "ok")

    @property
    def train_time_h(self) -> float:
        return math.nan if self.best is None else train_time_h(self.best.step_time_s, self.iterations)

    @property
    def train_cost_usd(self) -> float:
        return train_cost_usd(self.usd_per_hour, self.train_time_h)


def train_time_h(step_time_s: float, iterations: int) -> float:
    """step time x iterations / 3600 (the one place it is computed: pruning relies on it)."""
    return step_time_s * iterations / 3600


def train_cost_usd(usd_per_hour: float, time_h: float) -> float:
    """$/h x hours (the one place it is computed: pruning relies on it)."""
    return usd_per_hour * time_h


def sweep(model: ModelSpec, cluster: ClusterSpec, comps: Sequence[Composition], *, placements: str = "cyclic",
          partitioner: str = "fasop-minmax", iterations: int = DEFAULT_ITERATIONS, spot: bool = False,
          top: int | None = None, workers: int = 1, partition_budget: int | None = None,
          progress: Progress | None = None, estimator_options: dict | None = None) -> Iterator[CompositionResult]:
    """Search every composition (heterogeneous plans allowed) and yield its result, in order.

    top=1 keeps only each composition's fastest plan that fits, which is all the frontier needs,
    and lets the search prune (exactly); top=None keeps every candidate. With workers > 1 the
    compositions are searched in that many processes, each composition in one process, so the
    results are the same whatever the number. A generator, so a caller interrupted half-way
    keeps the compositions already yielded (the worker processes are then stopped).
    """
    if workers < 1:
        raise FasopError(f"--workers: must be >= 1, got {workers}")
    job = sweep_job(model, cluster, comps, placements=placements, partitioner=partitioner, iterations=iterations,
                    spot=spot, top=top, partition_budget=partition_budget, estimator_options=estimator_options)
    if workers == 1 or len(comps) < 2:
        for done, comp in enumerate(comps, start=1):
            yield job(comp)
            if progress is not None:
                progress(done, len(comps))
        return
    yield from _in_processes(job, comps, workers, progress)


def _in_processes(job: SweepJob, comps: Sequence[Composition], workers: int,
                  progress: Progress | None) -> Iterator[CompositionResult]:
    """`sweep` over worker processes, a composition per process: results in composition order."""
    pool = process_pool(min(workers, len(comps)), init_sweep_worker, (job,))
    # the largest compositions first, so that no worker is left with a big one at the end
    order = sorted(range(len(comps)), key=lambda i: (-comps[i].num_nodes, i))
    running = {pool.submit(sweep_worker, comps[i]): i for i in order}
    finished: dict[int, CompositionResult] = {}
    yielded = 0
    try:
        for future in completed(running):
            try:
                finished[running[future]] = future.result()  # a worker's error (or its death) is raised here
            except Interrupted:
                raise KeyboardInterrupt from None
            while yielded in finished:  # in composition order
                yield finished.pop(yielded)
                yielded += 1
                if progress is not None:
                    progress(yielded, len(comps))
    except KeyboardInterrupt:
        _stop(pool)
        for index in sorted(finished):  # finished but not yet in order: still the caller's to keep
            yield finished[index]
        raise
    finally:  # done, or the caller stopped early: no worker outlives the sweep
        _stop(pool)


def sweep_job(model: ModelSpec, cluster: ClusterSpec, comps: Sequence[Composition], *, placements: str,
              partitioner: str, iterations: int, spot: bool, top: int | None,
              partition_budget: int | None, estimator_options: dict | None = None) -> SweepJob:
    """One composition's search as `sweep` runs it, after checking the options (one-line errors);
    estimator_options (the analytic estimator's recipes) go to every search, when given."""
    check_strategies(placements, partitioner, iterations)
    names = list(dict.fromkeys(name for c in comps for name, _ in c.counts))
    gpus = {name: cluster.node_types[name].gpus_per_node for name in names}
    if len(set(gpus.values())) > 1:
        raise FasopError(f"--max-nodes: node types must have the same gpus_per_node, got {gpus}")
    prices, _ = node_prices(cluster, names, spot=spot)
    options = {"placements": placements, "partitioner": partitioner, "iterations": iterations, "top": top,
               "partition_budget": partition_budget}
    if estimator_options:
        options["estimator_options"] = dict(estimator_options)
    return SweepJob(model, cluster, prices, options, spot)


@dataclass(frozen=True)
class SweepJob:
    """One composition's search, as `sweep` runs it (picklable, for worker processes)."""

    model: ModelSpec
    cluster: ClusterSpec
    prices: Mapping[str, float]
    options: Mapping
    spot: bool

    def __call__(self, comp: Composition, cutoff: float = math.inf) -> CompositionResult:
        """The composition's search; with a cutoff (and top), only plans of at most that step
        time: none that fits means the composition is pruned with the cutoff as its bound."""
        usd_per_hour = self.spot_usd_per_hour(comp)
        iterations = self.options["iterations"]
        extra = {"cutoff": cutoff} if cutoff < math.inf else {}
        try:
            result = search(self.model, self.cluster, comp.inventory(self.cluster), heterogeneous=True,
                            seed_orders=False, **self.options, **extra)  # (seeding a composition's tree: not measured)
        except NoPlan as exc:  # no (tp, dp, pp) fits the batch and layer count; any other error stops the sweep
            return CompositionResult(composition=comp, search=None, usd_per_hour=usd_per_hour,
                                     iterations=iterations, no_plan_reason=str(exc))
        if not self.spot:
            usd_per_hour = result.usd_per_hour  # the estimator's own sum: FASOP's rounding
        if extra and result.best_fitting is None:
            return CompositionResult(composition=comp, search=None, usd_per_hour=usd_per_hour, iterations=iterations,
                                     step_time_bound_s=cutoff)
        return CompositionResult(composition=comp, search=result, usd_per_hour=usd_per_hour, iterations=iterations)

    def spot_usd_per_hour(self, comp: Composition) -> float:
        """The composition's $/h summed from the per-type prices (the price on the spot basis)."""
        # left to right from 0 (not Python's sum, which compensates its rounding from Python 3.12 on)
        return float(functools.reduce(operator.add, (self.prices[name] * n for name, n in comp.counts), 0))

    def quick_bound(self, comp: Composition) -> tuple[float, float]:
        """(step time no plan of the composition beats, its $/h as __call__ prices it): the least
        of the estimator's quick_bound over the composition's degree combinations (quick_bound
        holds for every placement and split of a plan's degrees). FasopError when the
        estimator cannot be made; inf when no combination is valid."""
        inventory = comp.inventory(self.cluster)
        space, recipes = split_options(self.model, self.options.get("estimator_options"))
        estimator = make_estimator(self.model, self.cluster, inventory, partitioner=self.options["partitioner"],
                                   partition_budget=self.options["partition_budget"], **recipes)
        usd = self.spot_usd_per_hour(comp) if self.spot else estimator.usd_per_s * 3600
        try:   # the degrees the composition's job runs: no CP without fused attention, as its search
            space = runnable_space(space, estimator)
        except NoPlan:
            return math.inf, usd
        combos = degree_list(inventory, tp_degrees=estimator.tp_degrees(), global_batch_size=self.model.global_batch_size,
                             num_transformer_layers=self.model.num_transformer_layers, space=space)
        gbs = self.model.global_batch_size
        within = quick_bound_within(estimator)
        bound = math.inf
        for combo in combos:  # exact where below the least so far: the least is exact
            bound = min(bound, within(combo_plan(combo, global_batch_size=gbs, placement=inventory), bound))
        return bound, usd


_SWEEP: dict = {}


def init_sweep_worker(job: SweepJob) -> None:
    """A worker process's job: `sweep_worker` and pruning.bound_worker run it."""
    _SWEEP["job"] = job  # (workers.process_pool: Ctrl-C is the parent's to handle)


def worker_job() -> SweepJob:
    """The job `init_sweep_worker` gave this worker process."""
    return _SWEEP["job"]


def sweep_worker(comp: Composition, cutoff: float = math.inf) -> CompositionResult:
    try:
        return _SWEEP["job"](comp, cutoff)
    except KeyboardInterrupt:  # not from Ctrl-C (ignored here): pass it on as the parent would see it
        raise Interrupted from None


class Interrupted(Exception):
    """A KeyboardInterrupt in a worker process, carried to the parent."""
