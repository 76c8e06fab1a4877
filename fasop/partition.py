"""Layers -> pipeline stages. Contiguous splits of the layer list, one count per stage.

`optimal`: the split with the least estimated step time, by branch and bound over stages (the
dynamic programmes its bounds use are in fasop/partition_tables.py); `polish`: a local search
that gives its settle pass a better split to prove. FASOP's greedy `fasop-minmax` is
FASOP-2024's own (fasop/estimators/fasop2024_minmax.py).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from fasop.partition_tables import (  # noqa: F401 -- re-exported: callers import them from here
    CAP_RANGE, CHAIN_LEVELS, PARTITION_CAPS, bottleneck_split, capped_completion, capped_sums, chain_floor, completion,
    least_chain, least_completions, steady_caps, weighted_times)

_weighted = weighted_times
"""Its earlier private name here, which fasop2024_orders still imports (tests/test_layout_rules.py:
OWNERSHIP_PENDING)."""

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
    edges = [0]
    for c in counts:
        edges.append(edges[-1] + c)
    return edges


class Rest:
    """What every search-tree node at stage k starting at one layer shares: its feasible stops
    (where stage k may end), their stage times `t`, and the least completions after each stop --
    the stages after k need at least `sum` seconds in all, with a largest stage of at least `max`
    and a largest weighted stage (weight `stage_weights[i]`) of at least `wmax`; `capped` and
    `below` (None, or partition.capped_completion's rows) bound the sum and the largest weighted
    stage together. A bound keeps what it derives from these once per node with `memo`."""

    __slots__ = ("stops", "t", "times", "sum", "max", "wmax", "capped", "below", "extra", "cuts", "_memo")

    def __init__(self, stops: np.ndarray, t: np.ndarray, sum: np.ndarray, max: np.ndarray, wmax: np.ndarray,
                 capped: np.ndarray | None, below: np.ndarray | None, extra: np.ndarray | None):
        self.stops, self.t, self.times = stops, t, t.tolist()
        self.sum, self.max, self.wmax, self.capped, self.below, self.extra = sum, max, wmax, capped, below, extra
        self.cuts: tuple[int, np.ndarray | None] = (0, None)
        """(cuts known, this node's share of them): kept up to date by `optimal`."""
        self._memo = None

    def memo(self, make: Callable[[], tuple]) -> tuple:
        """make(), once per node: what a bound derives from the node's choices alone."""
        if self._memo is None:
            self._memo = make()
        return self._memo


Bound = Callable[[int, float, object, np.ndarray, Rest], tuple[np.ndarray, np.ndarray]]
"""bound(k, before, chain, t, rest) -> (lower bounds, new chains), vectorised over candidate
times t of stage k: stages < k take `before` seconds in all, `chain` is the caller's running
state (None at the first stage; then the row of new chains of the choice taken), and `rest`
(a `Rest`) says what the stages after k need at least."""
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


POLISH_ROUNDS = 64
"""Most rounds of `polish` (each evaluates every one-layer move at once); measured on FASOP's
experiments, it stops on its own after at most ~10."""


def moves(split: tuple[int, ...], times: np.ndarray) -> list[tuple[int, ...]]:
    """The splits that move one layer from stage i to stage j (the boundaries between them shift
    by one; every pair i != j) and fit: times[k, a, b] finite for every stage; times as in
    `optimal`."""
    n = len(split)
    i, j = np.nonzero(~np.eye(n, dtype=bool))
    counts = np.tile(np.array(split), (len(i), 1))
    counts[np.arange(len(i)), i] -= 1
    counts[np.arange(len(i)), j] += 1
    counts = counts[(counts >= 1).all(axis=1)]
    edges = np.zeros((len(counts), n + 1), dtype=np.intp)
    np.cumsum(counts, axis=1, out=edges[:, 1:])
    fits = np.isfinite(times[np.arange(n), edges[:, :-1], edges[:, 1:]]).all(axis=1)
    return [tuple(c) for c in counts[fits].tolist()]


def polish(split: tuple[int, ...], value: float, times: np.ndarray, evaluate: Evaluate,
           rounds: int = POLISH_ROUNDS) -> tuple[tuple[int, ...], float]:
    """(split, objective) after a best-improvement local search from `split` (objective `value`):
    each round evaluates every `moves` neighbour at once and goes to the lowest (ties: the
    lexicographically smallest), while that is strictly lower. A better incumbent for the
    branch and bound's settle pass: the optimal split of a deep pipeline is often a few layer
    moves from the one a budget-capped search found, and the settle pass only proves what it
    is given. Deterministic; never returns a worse split."""
    for _ in range(rounds):
        near = moves(split, times)
        if not near:
            break
        best = min(zip(evaluate(near), near))
        if not best[0] < value:
            break
        value, split = float(best[0]), best[1]
    return split, value


def optimal(times: np.ndarray, *, bound: Bound, evaluate: Evaluate, cut: Cut, extra: Callable[[int], float],
            seeds: Sequence[tuple[int, ...]] = (), batch: int = 16, margin: float = 1e-6,
            max_cuts: int = 2, max_nodes: int | None = None, above: float = np.inf,
            stage_weights: np.ndarray | None = None, tables: dict | None = None, settle: bool = False) -> Found | None:
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
    always into its lowest-bound child, its other children becoming open nodes. `max_nodes`
    caps the nodes visited; a search stopped there returns the best split found (never worse
    than the seeds) with proven=False.

    `above`: the caller only needs the result if its objective is at most `above`. Best-first
    order visits every node whose bound is at most `above` before any other, so once the lowest
    open bound exceeds it and no split found is at or below it, the result is known to be above
    and the search stops, returning Found((), inf, True). Otherwise the result is exactly the
    one without `above`: it never depends on `above`.

    `tables`: a dict the caller passes to every search over the same `times` (and stage
    weights): the dynamic programmes computed by one are reused by the next. It changes no result.

    `settle`: only prove that no split is faster by more than `margin` than the best seed (or a
    split found faster than it): nodes whose bound is within the margin of the best are dropped
    too, so the many splits of (nearly) equal objective -- e.g. layers moved between stages of
    one GPU type -- are not searched for the lexicographically smallest. proven=True then means
    optimal within the margin; the split is the best seed unless a faster one was found.
    """
    shared = {} if tables is None else tables
    known: dict = {}
    cuts: dict = {}
    evaluate_all = evaluate

    def evaluate(splits: list[tuple[int, ...]]) -> list[float]:  # noqa: F811 -- memoised
        new = [s for s in dict.fromkeys(splits) if s not in known]
        if new:
            known.update(zip(new, evaluate_all(new)))
        return [known[s] for s in splits]

    def table(weights: np.ndarray, largest: bool = False) -> np.ndarray:
        key = ("completion", weights.tobytes(), largest)
        if key not in shared:
            shared[key] = completion(times, weights, largest)
        return shared[key]

    n, size, _ = times.shape
    num_layers = size - 1
    least_sum, least_max = table(np.ones(n)), table(np.ones(n), largest=True)
    least_wmax = table(np.zeros(n) if stage_weights is None else stage_weights, largest=True)
    if not np.isfinite(least_sum[0, 0]):
        return None
    capped = below = None
    if stage_weights is not None:  # least sums of the rest under caps on its largest weighted stage
        if "capped" not in shared:
            least = float(least_wmax[0, 0])
            caps = steady_caps(least, CAP_RANGE * least, PARTITION_CAPS)
            shared["capped"] = (capped_completion(times, stage_weights, caps), np.concatenate([[0.0], caps[:-1]]))
        capped, below = shared["capped"]
    cut_w = np.zeros((0, n))
    cut_c = np.zeros(0)
    cut_tables = np.zeros((0, n + 1, size))
    best: list = [np.inf, ()]
    pending: list[tuple[int, ...]] = []
    nodes: dict[tuple[int, int], Rest | None] = {}

    def children(k: int, first: int) -> Rest | None:
        """What every node at stage k starting at layer `first` shares: its feasible stops, their
        stage times, the least completions after them (the `Rest` given to `bound`) and, at
        stage 0, extra(stop). None: no child."""
        key = (k, first)
        if key not in nodes:
            stops = np.arange(first + 1, num_layers + 1 if k == n - 1 else num_layers - (n - k - 1) + 1)
            t = times[k, first, stops]
            ok = np.isfinite(t) & np.isfinite(least_sum[k + 1, stops])
            stops, t = stops[ok], t[ok]
            nodes[key] = None if not len(stops) else Rest(
                stops, t, least_sum[k + 1, stops], least_max[k + 1, stops], least_wmax[k + 1, stops],
                None if capped is None else capped[:, k + 1, stops], below,
                np.array([extra(int(s)) for s in stops]) if k == 0 else None)
        return nodes[key]

    def child_bounds(k: int, first: int, counts: tuple, before: float, chain, dots: np.ndarray) -> tuple | None:
        """(bounds of the children, their chains, their Rest) of a node; None: no child.
        dots: cut_w . stage times of stages < k, one per cut."""
        rest = children(k, first)
        if rest is None:
            return None
        lb, chains = bound(k, before, chain, rest.t, rest)
        if len(cut_c):
            if rest.cuts[0] != len(cut_c):  # this node's share of the cuts, for the cuts known now
                rest.cuts = (len(cut_c), cut_w[:, k, None] * rest.t[None, :] + cut_tables[:, k + 1, rest.stops]
                             + cut_c[:, None])
            lb = np.maximum(lb, (dots[:, None] + rest.cuts[1]).max(axis=0))
        return lb + (rest.extra if k == 0 else extra(counts[0])), chains, rest

    def known_dots(counts: tuple) -> np.ndarray:
        edges = boundaries(counts)
        return sum((cut_w[:, i] * times[i, edges[i], edges[i + 1]] for i in range(len(counts))), np.zeros(len(cut_c)))

    def cut_bound(k: int, first: int, counts: tuple, dots: np.ndarray) -> float:
        """The cuts' bound on every split below a node (for cuts learned after it was opened)."""
        if not len(cut_c):
            return -np.inf
        value = (dots + cut_tables[:, k, first] + cut_c).max()
        return float(value) + (extra(counts[0]) if k > 0 else 0.0)

    def flush() -> None:
        nonlocal cut_w, cut_c, cut_tables
        if not pending:
            return
        values = evaluate(pending)
        value, split = min(zip(values, pending))
        if (value, split) < (best[0], best[1]):
            best[0], best[1] = float(value), split
        pending.clear()
        if len(cut_c) < max_cuts:  # the best split's critical chain becomes a cut
            if split not in cuts:
                cuts[split] = cut(split)
            w, const = cuts[split]
            if not any(np.array_equal(w, row) for row in cut_w):
                cut_w = np.vstack([cut_w, w])
                cut_c = np.append(cut_c, const)
                cut_tables = np.concatenate([cut_tables, completion(times, w)[None]], axis=0)

    def hopeless(value: float) -> bool:
        if settle:
            return value >= best[0] * (1 - margin)
        return value * (1 - margin) > best[0]

    def beyond(value: float) -> bool:
        return value * (1 - margin) > above

    root = child_bounds(0, 0, (), 0.0, None, np.zeros(0))
    if root is None:
        return None
    least = float(root[0].min())  # no split is below the root's least child bound
    if beyond(least):  # every split is above: nothing to search
        return Found((), np.inf, True)
    if "balanced" not in shared:
        shared["balanced"] = bottleneck_split(times)
    balanced = shared["balanced"]
    for seed in dict.fromkeys([tuple(s) for s in seeds] + ([balanced] if balanced else [])):
        edges = boundaries(seed)
        if len(seed) == n and all(np.isfinite(times[i, edges[i], edges[i + 1]]) for i in range(n)):
            pending.append(tuple(seed))
    flush()

    visited = 0
    opened = 0
    # Open nodes are the children of expanded nodes not yet taken. A heap entry stands for the
    # next such child of one expanded node (its siblings in bound order): (its bound, order
    # opened, the expanded node's _Family, position in that order). Taking it opens the next one.
    root_family = _Family(-1, 0, (), 0.0, [None], np.zeros(0), 0, [0], [0.0], [0], [0.0])
    heap: list = [(0.0, 0, root_family, 0)]
    proven = True
    floor = -np.inf  # the lowest bound of an open node when the search stopped
    while heap:
        lb, _, family, position = heapq.heappop(heap)
        floor = max(lb, least)
        if hopeless(lb):
            break  # every open node is: proven
        if beyond(lb) and best[0] > above and not any(v <= above for v in evaluate(pending)):
            return Found((), np.inf, True)  # every open node is above, and nothing found is at or below
        if position + 1 < len(family.order) and not hopeless(family.lbs[family.order[position + 1]]):
            opened += 1
            heapq.heappush(heap, (family.lbs[family.order[position + 1]], opened, family, position + 1))
        k, first, counts, before, chain, dots = family.child(position, cut_w)
        if family.num_cuts != len(cut_c):  # cuts learned since its parent was expanded: bound it again
            dots = known_dots(counts)
            if hopeless(max(lb, cut_bound(k, first, counts, dots))):
                continue
        try:
            while True:  # dive
                visited += 1
                if max_nodes is not None and visited > max_nodes:
                    raise _Budget
                if k == n:
                    pending.append(counts)
                    if len(pending) >= batch:
                        flush()
                    break
                found = child_bounds(k, first, counts, before, chain, dots)
                if found is None:
                    break
                lbs, chains, rest = found
                order = lbs.argsort(kind="stable").tolist()
                lbs = lbs.tolist()
                if hopeless(lbs[order[0]]):
                    break
                family = _Family(k, first, counts, before, chains, dots, len(cut_c), order, lbs, rest.stops,
                                 rest.times)
                if len(order) > 1 and not hopeless(lbs[order[1]]):
                    opened += 1
                    heapq.heappush(heap, (lbs[order[1]], opened, family, 1))
                k, first, counts, before, chain, dots = family.child(0, cut_w)
        except _Budget:
            proven = False
            break
    flush()
    return Found(best[1], best[0], proven, best[0] if proven else min(floor, best[0]))


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
