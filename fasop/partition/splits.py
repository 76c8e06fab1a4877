"""Layers -> pipeline stages. Contiguous splits of the layer list, one count per stage.

`optimal`: the split with the least estimated step time, by branch and bound over stages (the
dynamic programmes its bounds use are in fasop/partition/tables.py; `polish`, a local search
that gives its settle pass a better split to prove, in fasop/partition/polish.py). FASOP's
greedy `fasop-minmax` is FASOP-2024's own (fasop/estimators/fasop2024/minmax.py).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import accumulate

import numpy as np

from fasop.partition import compiled
from fasop.partition.tables import (  # noqa: F401 -- re-exported: callers import them from here
    CAP_RANGE, CHAIN_LEVELS, PARTITION_CAPS, bottleneck_split, capped_completion, capped_sums, chain_floor, completion,
    finite_runs, least_chain, least_completions, steady_caps, weighted_times)
from fasop.schedule import native

PARTITIONERS = ("fasop-minmax", "optimal")
"""How a plan's layers are split into stages: FASOP's min-max heuristic, or the exact optimum."""
DEFAULT_MAX_NODES = 400
"""Branch-and-bound budget per plan of the `optimal` partitioner; past it the best split found
is kept and reported as not proven (`partition_proven_optimal`)."""


@dataclass(frozen=True)
class Split:
    reported: tuple[int, ...]
    """Layers per stage: what the plan runs, what is reported and memory-checked."""
    scheduled: tuple[int, ...]
    """Layers per stage whose compute times are scheduled (differs from `reported` only by
    FASOP's early-stop quirk, docs/estimators.md §6, minmax-early-stop)."""


def boundaries(counts: Sequence[int]) -> list[int]:
    """[0, c0, c0+c1, ...]: stage i covers layers boundaries[i]..boundaries[i+1]-1."""
    return [0, *accumulate(counts)]


class Rest:
    """What every search-tree node at stage k starting at one layer shares: its feasible stops,
    their stage times `t`, and the least completions after each stop (the stages after k: `sum`
    in all, a largest stage `max`, a largest weighted stage `wmax`; `capped` and `below`, None or
    partition.capped_completion's rows, bound the sum and `wmax` together). A bound keeps what it
    derives from these once per node with `memo` (or, for a bound of several parts, `cached`)."""

    __slots__ = ("stops", "t", "times", "sum", "max", "wmax", "capped", "below", "extra", "cuts", "_memo", "_cache")

    def __init__(self, stops: np.ndarray, t: np.ndarray, sum: np.ndarray, max: np.ndarray, wmax: np.ndarray,
                 capped: np.ndarray | None, below: np.ndarray | None, extra: np.ndarray | None):
        self.stops, self.t, self.times = stops, t, t.tolist()
        self.sum, self.max, self.wmax, self.capped, self.below, self.extra = sum, max, wmax, capped, below, extra
        self.cuts: tuple[int, np.ndarray | None] = (0, None)
        """(cuts known, this node's share of them): kept up to date by `optimal`."""
        self._memo = self._cache = None

    def memo(self, make: Callable[..., tuple], *args) -> tuple:
        """make(*args), once per node: what a bound derives from the node's choices alone."""
        if self._memo is None:
            self._memo = make(*args)
        return self._memo

    def cached(self, key, make: Callable[..., object], *args):
        """make(*args), once per node and key (e.g. the bound part asking)."""
        if self._cache is None:
            self._cache = {}
        found = self._cache.get(key)
        if found is None:
            found = self._cache[key] = make(*args)
        return found


Bound = Callable[[int, float, object, np.ndarray, Rest], tuple[np.ndarray, np.ndarray]]
"""bound(k, before, chain, t, rest) -> (lower bounds, new chains), vectorised over candidate times
t of stage k: stages < k take `before` seconds in all, `chain` is the caller's running state (None
at the first stage; then the chain of the choice taken), `rest` (a `Rest`) what stages after k need."""
Evaluate = Callable[[list[tuple[int, ...]]], Sequence[float]]
"""evaluate(splits) -> the objective of each split."""
Cut = Callable[[tuple[int, ...]], tuple[np.ndarray, float]]
"""cut(split) -> (weights per stage, const): a linear lower bound learned at that split, valid for
every split s: objective(s) >= weights . stage_times(s) + const + extra(s[0])."""


@dataclass(frozen=True)
class Found:
    split: tuple[int, ...]
    objective: float
    proven: bool
    """True when the search finished: no split is better. False when it stopped at its budget
    (the split is then the best one found, never worse than the seeds)."""
    bound: float = -np.inf
    """No split has a lower objective (the lowest bound of the nodes left open; the objective
    itself when proven)."""
    visited: int = field(default=0, compare=False)
    """Search-tree nodes visited (0 where no search ran)."""


def optimal(times: np.ndarray, *, bound: Bound, evaluate: Evaluate, cut: Cut, extra: Callable[[int], float],
            seeds: Sequence[tuple[int, ...]] = (), batch: int = 16, margin: float = 1e-6,
            max_cuts: int = 2, max_nodes: int | None = None, above: float = np.inf,
            stage_weights: np.ndarray | None = None, tables: dict | None = None, settle: bool = False,
            last_stages: int = 2, cuts_after: int = 0) -> Found | None:
    """The contiguous split with the lowest objective, by branch and bound with cuts.

    times[k, a, b]: compute seconds of layers a..b-1 on stage k, inf where b <= a or they do
    not fit that stage's memory. The objective of a split is what `evaluate` returns; extra(n0)
    is the part that depends only on stage 0's layer count (e.g. its gradient all-reduce).

    A node fixes the layers of stages 0..k-1. Its lower bound is the caller's `bound` (chains of
    events) and every cut learned from evaluated splits, each completed by the cheapest possible
    rest (a dynamic programme over stages and layers, one per cut). Nodes whose bound exceeds
    the best objective found by more than `margin` (relative; objectives may be float32-rounded)
    are dropped: a split is only dropped when a bound proves it cannot win. Ties -> the
    lexicographically smallest counts. None when no split fits.

    Order: the seeds and the bottleneck-balanced split are evaluated first. Then best-first
    with dives: the open node with the lowest bound is taken and followed down to a split,
    always into its lowest-bound child, its other children becoming open nodes. A node that
    fixes all stages but the last `last_stages` (2 or more) is one node: the splits below it
    whose bounds (and their parents') are not hopeless are evaluated, exactly, in the next
    batch. `max_nodes` caps the nodes visited; a search stopped there returns the best split
    found (never worse than the seeds) with proven=False. The loop runs in C where it can
    (partition.compiled: the same nodes, the same bits).
    `above`: the caller only needs the result if its objective is at most `above`. Best-first
    order visits every node whose bound is at most `above` before any other, so once the lowest
    open bound exceeds it and no split found is at or below it, the search stops, returning
    Found((), inf, True); otherwise the result is exactly the one without `above`.
    `tables`: a dict the caller passes to every search over the same `times` (and stage
    weights): the dynamic programmes computed by one are reused by the next (no result changes).
    `settle`: only prove that no split is faster by more than `margin` than the best seed (or a
    split found faster than it): nodes within the margin of the best are dropped too, so the
    many splits of (nearly) equal objective are not searched for the lexicographically smallest;
    proven=True then means optimal within the margin. `cuts_after`: cuts are learned only once
    this many nodes are visited (a search that proves its seed within fewer traces no chain).
    """
    search = _Search(times, bound=bound, evaluate=evaluate, cut=cut, extra=extra, batch=batch, margin=margin,
                     max_cuts=max_cuts, above=above, stage_weights=stage_weights,
                     tables={} if tables is None else tables, settle=settle, last_stages=max(2, last_stages),
                     cuts_after=cuts_after)
    if not np.isfinite(search.least_sum[0, 0]):
        return None
    least = compiled.least(search)  # no split is below the root's least child bound; in C where it can
    root = None if least is not None else search.child_bounds(0, 0, (), 0.0, None, np.zeros(0))
    if least is None and root is None:
        return None
    search.least = float(root[0].min()) if least is None else least
    if search.beyond(search.least):  # every split is above: nothing to search
        return Found((), np.inf, True)
    search.seed(seeds)
    return search.run(max_nodes)


class _Search:
    """The state of one `optimal` search: its tables, the splits evaluated, the cuts learned, the
    best split found and the open nodes."""

    def __init__(self, times: np.ndarray, *, bound: Bound, evaluate: Evaluate, cut: Cut, extra: Callable[[int], float],
                 batch: int, margin: float, max_cuts: int, above: float, stage_weights: np.ndarray | None,
                 tables: dict, settle: bool, last_stages: int, cuts_after: int):
        self.times, self.bound, self.evaluate_all, self.cut, self.extra = times, bound, evaluate, cut, extra
        self.batch, self.margin, self.max_cuts, self.above, self.settle = batch, margin, max_cuts, above, settle
        self.last_stages, self.cuts_after, self.visited = last_stages, cuts_after, 0
        self.shared, self.known, self.cuts = tables, {}, {}  # + objectives and cuts of the splits evaluated
        n, self.size = times.shape[:2]
        self.n, self.num_layers = n, self.size - 1
        self.least_sum, self.least_max = self.table(np.ones(n)), self.table(np.ones(n), largest=True)
        self.least_wmax = self.table(np.zeros(n) if stage_weights is None else stage_weights, largest=True)
        self.capped = self.below = None
        if stage_weights is not None and np.isfinite(self.least_sum[0, 0]):
            self.capped, self.below = self.capped_tables(stage_weights)
        self.cut_w, self.cut_c, self.cut_tables = np.zeros((0, n)), np.zeros(0), np.zeros((0, n + 1, self.size))
        self.best: list = [np.inf, ()]
        self.pending: list[tuple[int, ...]] = []
        self.nodes: dict[tuple[int, int], Rest | None] = {}
        self.least = -np.inf

    def evaluate(self, splits: list[tuple[int, ...]]) -> list[float]:
        """The objective of each split, each evaluated once."""
        new = [s for s in dict.fromkeys(splits) if s not in self.known]
        if new:
            self.known.update(zip(new, self.evaluate_all(new)))
        return [self.known[s] for s in splits]

    def table(self, weights: np.ndarray, largest: bool = False) -> np.ndarray:
        key = ("completion", weights.tobytes(), largest)
        if key not in self.shared:
            self.shared[key] = completion(self.times, weights, largest, finite_runs(self.times, self.shared))
        return self.shared[key]

    def capped_tables(self, stage_weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The least sums of the rest under caps on its largest weighted stage, and each cap's floor."""
        if "capped" not in self.shared:
            least = float(self.least_wmax[0, 0])
            caps = steady_caps(least, CAP_RANGE * least, PARTITION_CAPS)
            self.shared["capped"] = (capped_completion(self.times, stage_weights, caps, finite_runs(self.times, self.shared)),
                                     np.concatenate([[0.0], caps[:-1]]))
        return self.shared["capped"]

    def children(self, k: int, first: int) -> Rest | None:
        """What every node at stage k starting at layer `first` shares: its feasible stops, their
        stage times, the least completions after them (the `Rest` given to `bound`) and, at
        stage 0, extra(stop). None: no child."""
        if (key := (k, first)) not in self.nodes:
            n, num_layers = self.n, self.num_layers
            stops = np.arange(first + 1, num_layers + 1 if k == n - 1 else num_layers - (n - k - 1) + 1)
            t = self.times[k, first, stops]
            ok = np.isfinite(t) & np.isfinite(self.least_sum[k + 1, stops])
            stops, t = stops[ok], t[ok]
            self.nodes[key] = None if not len(stops) else Rest(
                stops, t, self.least_sum[k + 1, stops], self.least_max[k + 1, stops], self.least_wmax[k + 1, stops],
                None if self.capped is None else self.capped[:, k + 1, stops], self.below,
                np.array([self.extra(int(s)) for s in stops]) if k == 0 else None)
        return self.nodes[key]

    def child_bounds(self, k: int, first: int, counts: tuple, before: float, chain, dots: np.ndarray) -> tuple | None:
        """(bounds of the children, their chains, their Rest) of a node; None: no child.
        dots: cut_w . stage times of stages < k, one per cut."""
        rest = self.nodes[k, first] if (k, first) in self.nodes else self.children(k, first)
        if rest is None:
            return None
        lb, chains = self.bound(k, before, chain, rest.t, rest)
        cut_c = self.cut_c
        if len(cut_c) and rest.cuts[0] != len(cut_c):  # this node's share of the cuts, for the cuts known now
            rest.cuts = (len(cut_c), self.cut_w[:, k, None] * rest.t[None, :]
                         + self.cut_tables[:, k + 1, rest.stops] + cut_c[:, None])
        if native.kernels is not None:  # the same operations in C
            out = np.empty(len(lb))
            native.kernels.cut_raise(lb, dots if len(cut_c) else _NONE, rest.cuts[1] if len(cut_c) else _NONE,
                                     rest.extra if k == 0 else _NONE, 0.0 if k == 0 else self.extra(counts[0]), out)
            return out, chains, rest
        lb = np.maximum(lb, (dots[:, None] + rest.cuts[1]).max(axis=0)) if len(cut_c) else lb
        return lb + (rest.extra if k == 0 else self.extra(counts[0])), chains, rest

    def known_dots(self, counts: tuple) -> np.ndarray:
        edges = boundaries(counts)
        return sum((self.cut_w[:, i] * self.times[i, edges[i], edges[i + 1]] for i in range(len(counts))),
                   np.zeros(len(self.cut_c)))

    def cut_bound(self, k: int, first: int, counts: tuple, dots: np.ndarray) -> float:
        """The cuts' bound on every split below a node (for cuts learned after it was opened)."""
        if not len(self.cut_c):
            return -np.inf
        value = (dots + self.cut_tables[:, k, first] + self.cut_c).max()
        return float(value) + (self.extra(counts[0]) if k > 0 else 0.0)

    def last_splits(self, k: int, first: int, counts: tuple, before: float, chain, dots: np.ndarray) -> list:
        """The splits below a node that fixes all stages but the last `last_stages` (k >= n -
        last_stages) whose bounds, and whose parents' bounds, are not hopeless: depth first."""
        found = self.child_bounds(k, first, counts, before, chain, dots)
        if found is None:
            return []
        lbs, chains, rest = found
        if k == self.n - 2:
            return [counts + (s - first, self.num_layers - s) for s, lb in zip(rest.stops.tolist(), lbs.tolist())
                    if not self.hopeless(lb)]
        family = _Family(k, first, counts, before, chains, dots, len(self.cut_c), range(len(lbs)), lbs, rest.stops,
                         rest.times)
        return [split for i, lb in enumerate(lbs.tolist()) if not self.hopeless(lb)
                for split in self.last_splits(*family.child(i, self.cut_w))]

    def flush(self) -> None:
        """Evaluate the pending splits; keep the best; its critical chain becomes a cut."""
        if not self.pending:
            return
        values = self.evaluate(self.pending)
        value, split = min(zip(values, self.pending))
        if (value, split) < (self.best[0], self.best[1]):
            self.best[0], self.best[1] = float(value), split
        self.pending.clear()
        if len(self.cut_c) < self.max_cuts and self.visited >= self.cuts_after:
            if split not in self.cuts:
                self.cuts[split] = self.cut(split)
            w, const = self.cuts[split]
            if not any(np.array_equal(w, row) for row in self.cut_w):
                self.cut_w = np.vstack([self.cut_w, w])
                self.cut_c = np.append(self.cut_c, const)
                self.cut_tables = np.concatenate([self.cut_tables, completion(self.times, w, runs=finite_runs(self.times, self.shared))[None]], axis=0)

    def hopeless(self, value: float) -> bool:
        if self.settle:
            return value >= self.best[0] * (1 - self.margin)
        return value * (1 - self.margin) > self.best[0]

    def beyond(self, value: float) -> bool:
        return value * (1 - self.margin) > self.above

    def seed(self, seeds: Sequence[tuple[int, ...]]) -> None:
        """Evaluate the seeds that fit and the bottleneck-balanced split."""
        if (balanced := self.shared.get("balanced", ())) == ():
            balanced = self.shared["balanced"] = bottleneck_split(self.times, finite_runs(self.times, self.shared))
        seeds = [s for s in dict.fromkeys([tuple(s) for s in seeds] + ([balanced] if balanced else []))
                 if len(s) == self.n]
        edges = np.array([boundaries(s) for s in seeds], dtype=np.intp).reshape(len(seeds), self.n + 1)
        fits = np.isfinite(self.times[np.arange(self.n), edges[:, :-1], edges[:, 1:]]).all(axis=1)  # all at once
        self.pending.extend(seed for seed, fit in zip(seeds, fits.tolist()) if fit)
        self.flush()

    def run(self, max_nodes: int | None) -> Found:
        """Best-first with dives from the root, at most max_nodes nodes visited: in C where it can
        (partition.compiled), else `loop`; the same nodes either way."""
        self.visited, self.opened, self.max_nodes = 0, 0, max_nodes
        status, floor = compiled.run(self, max_nodes) or self.loop()
        if status == compiled.ABOVE:
            return Found((), np.inf, True)  # every open node is above, and nothing found is at or below
        proven = status == compiled.DONE
        self.flush()
        value, split = self.best
        return Found(split, value, proven, value if proven else min(floor, value), self.visited)

    def loop(self) -> tuple[int, float]:
        """`run`'s loop in Python: (compiled.DONE / BUDGET / ABOVE, the lowest bound of an open
        node when it stopped)."""
        # Open nodes are the children of expanded nodes not yet taken. A heap entry stands for the
        # next such child of one expanded node (its siblings in bound order): (its bound, order
        # opened, the expanded node's _Family, position in that order). Taking it opens the next one.
        root_family = _Family(-1, 0, (), 0.0, [None], np.zeros(0), 0, [0], [0.0], [0], [0.0])
        self.heap: list = [(0.0, 0, root_family, 0)]
        status, floor = compiled.DONE, -np.inf
        while self.heap:
            lb, _, family, position = heapq.heappop(self.heap)
            floor = max(lb, self.least)
            if self.hopeless(lb):
                break  # every open node is: proven
            if self.beyond(lb) and self.best[0] > self.above and not any(v <= self.above for v in
                                                                        self.evaluate(self.pending)):
                return compiled.ABOVE, floor
            if position + 1 < len(family.order) and not self.hopeless(family.lbs[family.order[position + 1]]):
                self.push(family, position + 1)
            node = family.child(position, self.cut_w)
            if family.num_cuts != len(self.cut_c):  # cuts learned since its parent was expanded: bound it again
                k, first, counts, before, chain, dots = node
                node = (k, first, counts, before, chain, self.known_dots(counts))
                if self.hopeless(max(lb, self.cut_bound(k, first, counts, node[5]))):
                    continue
            try:
                self.dive(*node)
            except _Budget:
                status = compiled.BUDGET
                break
        return status, floor

    def push(self, family: "_Family", position: int) -> None:  # open the child at `position`
        self.opened += 1
        heapq.heappush(self.heap, (family.lbs[family.order[position]], self.opened, family, position))

    def dive(self, k: int, first: int, counts: tuple, before: float, chain, dots: np.ndarray) -> None:
        """Follow a node down to a split, always into its lowest-bound child, its next child
        becoming an open node. Raises _Budget past max_nodes."""
        while True:
            self.visited += 1
            if self.max_nodes is not None and self.visited > self.max_nodes:
                raise _Budget
            if k >= self.n - self.last_stages and k != self.n - 1:  # a split, or a node over the last stages
                self.pending.extend(self.last_splits(k, first, counts, before, chain, dots) if k < self.n else [counts])
                if len(self.pending) >= self.batch:
                    self.flush()
                return
            found = self.child_bounds(k, first, counts, before, chain, dots)
            if found is None:
                return
            lbs, chains, rest = found
            order = lbs.argsort(kind="stable").tolist()
            lbs = lbs.tolist()
            if self.hopeless(lbs[order[0]]):
                return
            family = _Family(k, first, counts, before, chains, dots, len(self.cut_c), order, lbs, rest.stops, rest.times)
            if len(order) > 1 and not self.hopeless(lbs[order[1]]):
                self.push(family, 1)
            k, first, counts, before, chain, dots = family.child(0, self.cut_w)


_NONE = np.zeros(0)  # cut_raise's "no cuts", "no per-child extra"


class _Budget(Exception):
    pass


class _Family:
    """The children of one expanded node of `optimal`, in bound order."""

    __slots__ = ("k", "first", "counts", "before", "chains", "dots", "num_cuts", "order", "lbs", "stops", "times")

    def __init__(self, k, first, counts, before, chains, dots, num_cuts, order, lbs, stops, times):
        self.k, self.first, self.counts, self.before, self.chains = k, first, counts, before, chains
        self.dots, self.num_cuts, self.order, self.lbs, self.stops, self.times = dots, num_cuts, order, lbs, stops, times

    def child(self, position: int, cut_w: np.ndarray) -> tuple:
        """(k, first, counts, before, chain, dots) of the child at `position` in bound order."""
        i = self.order[position]
        stop, time = int(self.stops[i]), self.times[i]
        if self.k < 0:  # the root's one child: the root
            return 0, 0, (), 0.0, None, np.zeros(0)
        dots = self.dots + cut_w[:len(self.dots), self.k] * time if len(self.dots) else self.dots
        return (self.k + 1, stop, self.counts + (stop - self.first,), self.before + time, self.chains[i], dots)
