"""Which cluster to assemble: sweep node compositions, then the time-vs-dollar frontier.

For every composition of node counts within per-type limits, `sweep` runs the search and keeps
its result; `analyse` takes each composition's fastest plan that fits in memory, prices the whole
training run, and finds the non-dominated set over (time, cost), its knee, and the answers to a
deadline and a budget query. No printing, no files: the CLI does that.

Definitions (README.md, "fasop pareto"):
- train_time_h = step_time_s x iterations / 3600.
- train_cost_usd = (sum over the composition's nodes of the node's $/h) x train_time_h.
- A point is on the frontier when no other point is at least as good in every column and
  strictly better in one. Identical points: the first in row order (composition order) only.
- Knee: on the frontier, normalise time and cost to [0, 1] between the frontier's extremes; the
  knee is the point farthest below the chord joining the two extremes, i.e. the largest
  1 - t' - c'. Needs at least 3 frontier points; ties go to the faster point.
"""

from __future__ import annotations

import functools
import itertools
import math
import operator
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np

from fasop import limits
from fasop.errors import FasopError
from fasop.enumerate import degree_list
from fasop.estimate import Estimate
from fasop.estimators import make_estimator
from fasop.plan import Plan
from fasop.search import DEFAULT_ITERATIONS, SearchResult, check_strategies, parse_counts, search
from fasop.workers import process_pool
from fasop.workers import stop as _stop
from fasop.specs import ClusterSpec, ModelSpec, NodeType

if TYPE_CHECKING:
    import pandas as pd

Sense = Literal["min", "max"]
Status = Literal["ok", "oom", "no_plan", "pruned"]
Progress = Callable[[int, int], None]
"""progress(done, total) over compositions."""

TIME, COST = "train_time_h", "train_cost_usd"
FLAT = 1e-9
"""A frontier whose times (or costs) span less than this fraction of their size has no knee:
the differences are floating-point rounding, and a knee chosen by them would be noise."""


# ---------------------------------------------------------------------------- frontier
def pareto_front(table: pd.DataFrame, senses: Mapping[str, Sense], *,
                 duplicates: Literal["first", "all"] = "first") -> pd.Series:
    """Boolean Series (index of `table`): True where the row is non-dominated over `senses`.

    `senses` maps each objective column to "min" or "max". Row r dominates row q when r is at
    least as good in every objective and strictly better in one. Rows with a NaN objective are
    never on the front. Rows identical in every objective do not dominate each other:
    duplicates="all" keeps them all, "first" keeps only the first in row order.
    """
    import pandas as pd

    if not senses:
        raise ValueError("pareto_front: no objective columns")
    bad = {c: s for c, s in senses.items() if s not in ("min", "max")}
    if bad:
        raise ValueError(f"pareto_front: sense must be 'min' or 'max', got {bad}")
    if duplicates not in ("first", "all"):
        raise ValueError(f"pareto_front: duplicates must be 'first' or 'all', got {duplicates!r}")
    values = np.column_stack([table[c].to_numpy(dtype=float) * (1.0 if s == "min" else -1.0)
                              for c, s in senses.items()]) if len(table) else np.empty((0, len(senses)))
    valid = ~np.isnan(values).any(axis=1)
    positions = np.flatnonzero(valid)
    # lexicographic order, row position last: a dominating row always comes before the rows it
    # dominates, and the first of identical rows comes first
    order = positions[np.lexsort((positions,) + tuple(values[positions, k] for k in reversed(range(values.shape[1]))))]
    on_front = np.zeros(len(table), dtype=bool)
    front: list[np.ndarray] = []
    for i in order:
        v = values[i]
        beaten = False
        for f in front:
            if (f <= v).all() and (duplicates == "first" or (f < v).any()):
                beaten = True
                break
        if not beaten:
            on_front[i] = True
            front.append(v)
    return pd.Series(on_front, index=table.index, name="on_frontier")


def knee_position(times: Sequence[float], costs: Sequence[float]) -> int | None:
    """Index (into the given frontier points) of the knee, or None with fewer than 3 points, or
    when the times or the costs are flat (span within FLAT of their size: rounding, no trade-off).

    Normalise time and cost to [0, 1] between the frontier's extremes, so the fastest point sits
    at (0, 1) and the cheapest at (1, 0); the knee maximises 1 - t' - c', the distance (x sqrt 2)
    below the chord joining them. Ties go to the faster point.
    """
    if len(times) < 3:
        return None
    t, c = np.asarray(times, dtype=float), np.asarray(costs, dtype=float)
    t_span, c_span = t.max() - t.min(), c.max() - c.min()
    if t_span <= FLAT * abs(t).max() or c_span <= FLAT * abs(c).max():
        return None
    gain = 1.0 - (t - t.min()) / t_span - (c - c.min()) / c_span
    best = max(gain)
    return min((i for i in range(len(t)) if gain[i] == best), key=lambda i: (t[i], i))


def cheapest_within(times: Sequence[float], costs: Sequence[float], deadline_h: float) -> int | None:
    """Deadline query: index of the cheapest point with time <= deadline (ties: faster, then first)."""
    ok = [i for i, t in enumerate(times) if t <= deadline_h]
    return min(ok, key=lambda i: (costs[i], times[i], i)) if ok else None


def fastest_within(times: Sequence[float], costs: Sequence[float], budget_usd: float) -> int | None:
    """Budget query: index of the fastest point with cost <= budget (ties: cheaper, then first)."""
    ok = [i for i, c in enumerate(costs) if c <= budget_usd]
    return min(ok, key=lambda i: (times[i], costs[i], i)) if ok else None


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
    """Set when the composition was pruned (fasop.pruning): no plan of it that fits in memory is
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
    import concurrent.futures as futures

    pool = process_pool(min(workers, len(comps)), _init_sweep_worker, (job,))
    # the largest compositions first, so that no worker is left with a big one at the end
    order = sorted(range(len(comps)), key=lambda i: (-comps[i].num_nodes, i))
    running = {pool.submit(_sweep_worker, comps[i]): i for i in order}
    finished: dict[int, CompositionResult] = {}
    yielded = 0
    try:
        for future in futures.as_completed(running):
            try:
                finished[running[future]] = future.result()  # a worker's error (or its death) is raised here
            except _Interrupted:
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
              partition_budget: int | None, estimator_options: dict | None = None) -> _SweepJob:
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
    return _SweepJob(model, cluster, prices, options, spot)


@dataclass(frozen=True)
class _SweepJob:
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
                            **self.options, **extra)
        except FasopError as exc:  # e.g. no (tp, dp, pp) fits the batch and layer count
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
        estimator = make_estimator(self.model, self.cluster, inventory, partitioner=self.options["partitioner"],
                                   partition_budget=self.options["partition_budget"],
                                   **self.options.get("estimator_options", {}))
        combos = degree_list(inventory, tp_degrees=estimator.tp_degrees(), global_batch_size=self.model.global_batch_size,
                             num_transformer_layers=self.model.num_transformer_layers)
        gbs = self.model.global_batch_size
        bound = min((estimator.quick_bound(Plan(tp=tp, dp=dp, pp=pp, mbs=mbs, global_batch_size=gbs, placement=inventory))
                     for tp, dp, pp, mbs in combos), default=math.inf)
        return bound, self.spot_usd_per_hour(comp) if self.spot else estimator.usd_per_s * 3600


_SWEEP: dict = {}


def _init_sweep_worker(job: _SweepJob) -> None:
    _SWEEP["job"] = job  # (workers.process_pool: Ctrl-C is the parent's to handle)


def _sweep_worker(comp: Composition, cutoff: float = math.inf) -> CompositionResult:
    try:
        return _SWEEP["job"](comp, cutoff)
    except KeyboardInterrupt:  # not from Ctrl-C (ignored here): pass it on as the parent would see it
        raise _Interrupted from None


class _Interrupted(Exception):
    """A KeyboardInterrupt in a worker process, carried to the parent."""


# ---------------------------------------------------------------------------- analysis
@dataclass(frozen=True, kw_only=True)
class ParetoAnalysis:
    results: tuple[CompositionResult, ...]
    """One per composition, in composition order."""
    on_frontier: tuple[bool, ...]
    """Aligned with `results`."""
    frontier: tuple[int, ...]
    """Indices into `results` of the frontier, fastest first."""
    knee: int | None
    """Index into `results`, or None (fewer than 3 frontier points)."""
    deadline_hours: float | None = None
    deadline: int | None = None
    """Cheapest composition finishing within `deadline_hours` (index into results), if any."""
    budget_usd: float | None = None
    budget: int | None = None
    """Fastest composition costing at most `budget_usd` (index into results), if any."""
    complete: bool = True
    """False when the sweep was interrupted: results cover only the compositions finished."""

    def points(self) -> pd.DataFrame:
        """One row per composition: label, kind, status, train_time_h, train_cost_usd, on_frontier, is_knee."""
        import pandas as pd

        return pd.DataFrame({
            "composition": [r.composition.label for r in self.results],
            "kind": [r.composition.kind for r in self.results],
            "status": [r.status for r in self.results],
            TIME: [r.train_time_h for r in self.results],
            COST: [r.train_cost_usd for r in self.results],
            "on_frontier": list(self.on_frontier),
            "is_knee": [i == self.knee for i in range(len(self.results))],
        })


def analyse(results: Sequence[CompositionResult], *, deadline_hours: float | None = None,
            budget_usd: float | None = None, complete: bool = True) -> ParetoAnalysis:
    """Frontier over (train_time_h, train_cost_usd) of the compositions whose best plan fits, its
    knee, and the deadline and budget answers."""
    if deadline_hours is not None and not deadline_hours > 0:
        raise FasopError(f"--deadline-hours: must be > 0, got {deadline_hours}")
    if budget_usd is not None and not budget_usd > 0:
        raise FasopError(f"--budget-usd: must be > 0, got {budget_usd}")
    import pandas as pd

    results = tuple(results)
    table = pd.DataFrame({TIME: [r.train_time_h for r in results], COST: [r.train_cost_usd for r in results]})
    on_front = pareto_front(table, {TIME: "min", COST: "min"}, duplicates="first").tolist()
    frontier = sorted((i for i, f in enumerate(on_front) if f), key=lambda i: (table[TIME][i], i))
    k = knee_position([table[TIME][i] for i in frontier], [table[COST][i] for i in frontier])
    fitting = [i for i, r in enumerate(results) if r.status == "ok"]
    times = [results[i].train_time_h for i in fitting]
    costs = [results[i].train_cost_usd for i in fitting]
    deadline = budget = None
    if deadline_hours is not None:
        j = cheapest_within(times, costs, deadline_hours)
        deadline = None if j is None else fitting[j]
    if budget_usd is not None:
        j = fastest_within(times, costs, budget_usd)
        budget = None if j is None else fitting[j]
    return ParetoAnalysis(results=results, on_frontier=tuple(on_front), frontier=tuple(frontier),
                          knee=None if k is None else frontier[k], deadline_hours=deadline_hours, deadline=deadline,
                          budget_usd=budget_usd, budget=budget, complete=complete)
