"""Lower bounds on a 1F1B pipeline's time from its stage times (fasop/schedule/pipeline.py's schedule),
for the optimal partitioner (partition.optimal) and the plan bounds: each a chain of events of
the fixed event graph that must run one after another, so its length never exceeds the
simulated stage 0 end.

`steady_weights`: every stage's steady chain (all stage times + c_i t_i); `round_trip_weights`:
a stage's two round trips; `one_f_one_b_bound`: all of them, vectorised over the choices of one
stage of a partial split, with the rest bounded by partition.Rest's least completions.
"""

from __future__ import annotations

import functools

import numpy as np

from fasop.schedule import native

_EMPTY = np.zeros(0)


def steady_weights(num_stages: int, num_microbatches: int, *, fwd_bwd_factor: float) -> np.ndarray:
    """c_i with stage 0's end >= (all stage times + both end sends) + c_i t_i for every stage i:
    the larger of two chains of events that run one after another, stage times t split as
    f = t/k, b = (k - 1) t/k (k: the fwd_bwd_factor).

    - Steady: micro-batch 0 forward to stage i (f_j, j < i, and f_i), on through the later
      stages and back (t_j, j > i, and the sends), then stage i's first backward b_i; after it
      stage i still runs m-1 backwards and m-1-w_i forwards (w_i = min(pp-i-1, m) warm-up
      forwards), and the last gradient drains back (b_j, j < i): sum_j t_j + sends +
      (m - 1 - w_i/k) t_i. Valid when m > w_i.
    - Backwards: micro-batch 0 forward through every stage and back to stage i, stage i's m
      backwards in a row, the last gradient drains back: sum_j t_j + sends + (m-1) (k-1) t_i / k.
      Valid for every stage; the larger where w_i >= m - 1 (short pipelines of few micro-batches).
    """
    m, pp, k = num_microbatches, num_stages, fwd_bwd_factor
    warm = np.minimum(pp - 1 - np.arange(pp), m)
    return np.maximum(np.where(m > warm, m - 1 - warm / k, 0.0), (k - 1) * (m - 1) / k)


def one_f_one_b_bound(k: int, before: float, chain, t: np.ndarray, rest, *, num_stages: int,
                      num_microbatches: int, send_first: float, send_last: float,
                      weights: np.ndarray, round_trips: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Lower bounds on stage 0's end time (of `one_f_one_b`) over pipelines whose stages < k take
    `before` seconds in all, stage k takes t (an array of choices), and the stages after k sum to
    at least rest.sum with a largest stage of at least rest.max and a largest
    steady_weights-weighted stage of at least rest.wmax (`rest`: a partition.Rest). Each term is
    a chain of events that must run one after another:

    - micro-batch 0 forward through every stage and back: all stage times + the two sends;
    - stage i: micro-batch 0 reaches it (the stages before it), it runs m forwards and m
      backwards, the last gradient drains back through the stages before it: sum_{j<i} t_j +
      m t_i (+ the sends on that way); `chain` carries the largest such term over stages < k;
    - the slowest stage after k likewise: everything before it + m x rest.max;
    - every stage's steady chain (`steady_weights`): all stage times + sends + c_i t_i; with
      rest.capped and rest.below (partition.capped_completion) the rest's sum and its
      largest c_i t_i are bounded together rather than each at its least.
    - stage i's two round trips (`round_trip_weights`): micro-batch 0 reaches stage i, goes on
      through the later stages and back; stage i runs its steady forwards and backwards up to
      its last forward; micro-batch m-1 goes through the later stages and back; stage i's last
      backward; the gradient drains back: sum_{j<i} t_j + 2 sum_{j>i} t_j + (m - w_i) t_i (+ the
      sends), i.e. 2 (all stage times) + a_i t_i - sum_{j<i} t_j with a_i = m - w_i - 2 >= 0,
      whatever the forward/backward split. The balanced splits of a homogeneous pipeline often
      end on this chain through an early stage.
    `chain` carries (largest own chain, largest c_i t_i, largest a_i t_i - sum_{j<i} t_j + sends)
    over stages < k (None at the start).
    `weights`: steady_weights(pp, m, ...) of the stage times' split. round_trips=False leaves the
    two round trips out (the bounds, and so the search's order, of earlier releases).
    Returns (bounds, chains including stage k, one row per choice of t).
    """
    own_before, steady_before, trips_before = (0.0, 0.0, -np.inf) if chain is None else chain
    steady, everything, busy, terms, least_steady, least_terms, twice, trips = rest.memo(
        _shared, k, t, rest, num_stages, num_microbatches, send_first, send_last, weights, round_trips)
    if native.kernels is not None:  # the same operations in C
        bounds = np.empty(len(terms))
        native.kernels.chain_bounds(before, own_before, steady_before, trips_before, least_steady, least_terms, terms,
                                    everything, twice, bounds)
        return bounds, _Chains(before, busy, own_before, steady, steady_before, trips, trips_before)
    if steady_before > least_steady:  # an earlier stage's steady chain is the longer for some choices
        terms = np.maximum(terms, everything + steady_before)
    bounds = before + terms
    if trips_before > -np.inf:  # an earlier stage's two round trips
        bounds = np.maximum(bounds, 2 * before + twice + trips_before)
    if own_before > before + least_terms:  # an earlier stage's own chain is the longer for some choices
        bounds = np.maximum(bounds, own_before)
    return bounds, _Chains(before, busy, own_before, steady, steady_before, trips, trips_before)


def _shared(k: int, t: np.ndarray, rest, pp: int, m: int, send_first: float, send_last: float, weights: np.ndarray,
            round_trips: bool) -> tuple:
    """What every node of `one_f_one_b_bound` with these choices shares (once per `rest`, its memo)."""
    c, a = weights[k], round_trip_weights(pp, m)[k] if round_trips else -1.0
    if native.kernels is not None:  # the same operations in C
        out, least, no_caps = np.empty((6, len(t))), np.empty(2), rest.capped is None
        native.kernels.chain_terms(t, rest.sum, rest.max, rest.wmax, _EMPTY if no_caps else np.ascontiguousarray(
            rest.capped), _EMPTY if no_caps else rest.below, float(c), send_first, send_last, float(m), k, pp, float(a),
            out, least)
        steady, everything, busy, terms, twice, trips = out
        return steady, everything, busy, terms, float(least[0]), float(least[1]), twice, trips
    steady = c * t
    sends = send_first + send_last
    everything = t + rest.sum + sends  # + before: micro-batch 0 through every stage and back
    busy = m * t + ((send_first if k > 0 else 0.0) + (send_last if k == pp - 1 else 0.0))  # + before: own chain
    chain = everything + np.maximum(steady, rest.wmax)
    if rest.capped is not None:
        # the rest's sum and its largest weighted stage together: a rest whose largest lies in
        # (below[j], cap j] sums to at least capped[j] (partition.capped_completion)
        largest = np.maximum(np.maximum(steady[None, :], rest.below[:, None]), rest.wmax[None, :])
        chain = np.maximum(chain, t + sends + (rest.capped + largest).min(axis=0))
    terms = np.maximum(chain, busy)
    if k < pp - 1:  # the slowest later stage's own chain
        terms = np.maximum(terms, t + send_first + m * rest.max)
    twice = 2 * (t + rest.sum)  # + 2 before: every stage time twice
    trips = np.full_like(t, -np.inf)
    if a >= 0:  # stage k's two round trips (+ before - before)
        trips = a * t + ((send_first if k > 0 else 0.0) + (send_last if k < pp - 1 else 0.0))
        terms = np.maximum(terms, twice + trips)
    return (steady, everything, busy, terms, float(np.maximum(steady, rest.wmax).min()), float(terms.min()),
            twice, trips)


class _Chains:
    """The `chain` of each choice of one_f_one_b_bound: (largest own chain, largest c_i t_i,
    largest a_i t_i - sum_{j<i} t_j + sends); `trips`: a_i t_i + sends of stage k's choices,
    before them the stages before it (`before`)."""

    __slots__ = ("before", "busy", "own_before", "steady", "steady_before", "trips", "trips_before")

    def __init__(self, before: float, busy: np.ndarray, own_before: float, steady: np.ndarray, steady_before: float,
                 trips: np.ndarray, trips_before: float):
        self.before, self.busy, self.own_before = before, busy, own_before
        self.steady, self.steady_before = steady, steady_before
        self.trips, self.trips_before = trips, trips_before

    def __getitem__(self, i: int) -> tuple[float, float, float]:
        return (max(self.own_before, self.before + float(self.busy[i])), max(self.steady_before, float(self.steady[i])),
                max(self.trips_before, float(self.trips[i]) - self.before))


@functools.lru_cache(maxsize=256)
def round_trip_weights(num_stages: int, num_microbatches: int) -> np.ndarray:
    """a_i = m - w_i - 2 (w_i = min(pp-i-1, m) warm-up forwards), -1 where negative: stage 0's
    end >= sends + 2 (all stage times) + a_i t_i - sum_{j<i} t_j for every stage with a_i >= 0
    (`one_f_one_b_bound`, the two round trips). Stage i's steady part between micro-batch 0's
    backward and micro-batch m-1's forward is m-1-w_i forwards and m-2-w_i backwards."""
    warm = np.minimum(num_stages - 1 - np.arange(num_stages), num_microbatches)
    a = num_microbatches - warm - 2.0
    weights = np.where(a >= 0, a, -1.0)
    weights.flags.writeable = False  # kept (lru_cache): read, never changed
    return weights


# ---------------------------------------------------------------------------- the backward sweep
SWEEP_POINTS = 33
"""The sweep may change stages only at this many micro-batches, evenly spread from 0 to m - 1
(every one while m <= 33): fewer chains, so still a lower bound, and the tables stay small for
m = 64, 128. Measured on t5 a100=1,a10=7 (default search): one more of its 510 splits left
unproven than with every micro-batch, and the tables' CPU time 0.64 s -> 0.45 s."""


def sweep_points(num_microbatches: int) -> np.ndarray:
    """The micro-batches at which the sweep may change stages: 0, ..., m - 1 (`SWEEP_POINTS`)."""
    m = num_microbatches
    if m <= SWEEP_POINTS:
        return np.arange(m)
    spread = np.round(np.linspace(0, m - 1, SWEEP_POINTS)).astype(int)  # non-decreasing: its distinct values
    return spread[np.concatenate([[True], spread[1:] != spread[:-1]])]  # (np.unique would import numpy.ma)


def sweep_unit_weights(num_stages: int, num_microbatches: int, *, fwd_bwd_factor: float) -> np.ndarray:
    """G[i, j] = sum over u = 1..x_j of stage i's cost of advancing the way back from micro-batch
    u - 1 to u, in units of its stage time t_i, at the points x_j = `sweep_points`: 1 while
    u <= m - 1 - w_i (a steady forward and backward, F B), (k - 1)/k after (a cool-down
    backward); w_i = min(pp - i - 1, m) warm-up forwards, k the fwd_bwd_factor. Shape
    (pp, points)."""
    return _unit_weights(num_stages, num_microbatches, fwd_bwd_factor, SWEEP_POINTS)


@functools.lru_cache(maxsize=256)
def _unit_weights(num_stages: int, num_microbatches: int, fwd_bwd_factor: float, points: int) -> np.ndarray:
    """`sweep_unit_weights`, kept per (pp, m, k, SWEEP_POINTS): read, never changed."""
    m, k = num_microbatches, fwd_bwd_factor
    warm = np.minimum(num_stages - 1 - np.arange(num_stages), m)
    u = np.arange(1, m)
    per = np.where(u[None, :] <= (m - 1 - warm)[:, None], 1.0, (k - 1) / k)
    weights = np.concatenate([np.zeros((num_stages, 1)), np.cumsum(per, axis=1)], axis=1)[:, sweep_points(m)]
    weights.flags.writeable = False  # kept (lru_cache): read, never changed
    return weights


def sweep_unit_sends(num_microbatches: int, send_fwd: np.ndarray, send_bwd: np.ndarray) -> np.ndarray:
    """H[i, j] = the send seconds the sweep's advance at stage i waits for, from micro-batch 0 to
    x_j (`sweep_points`), as `sweep_unit_weights` counts the stage time: a steady step at stage i
    (its backward, then its next forward) waits for its own backward send (send_bwd[i]), then
    for its forward send (send_fwd[i]) or the next stage's backward send to it (send_bwd[i+1]);
    a cool-down step for the larger of its own and the next stage's backward send
    (recurrences.run: a send ends when both ends are ready; stage 0's backward waits for neither
    its forward send nor its backward send).
    send_fwd, send_bwd: seconds per stage, shape (pp,)."""
    pp, m = len(send_fwd), num_microbatches
    warm = np.minimum(pp - 1 - np.arange(pp), m)
    after = np.append(np.asarray(send_bwd, dtype=float)[1:], 0.0)  # the next stage's backward send
    own = np.where(np.arange(pp) > 0, send_bwd, 0.0)  # stage 0 sends no gradient
    stage = np.arange(pp)
    forward = np.where((stage > 0) & (stage < pp - 1), send_fwd, 0.0)  # the last stage sends none
    steady = np.maximum(forward, after) + own
    cool = np.maximum(own, after)
    u = np.arange(1, m)
    per = np.where(u[None, :] <= (m - 1 - warm)[:, None], steady[:, None], cool[:, None])
    return np.concatenate([np.zeros((pp, 1)), np.cumsum(per, axis=1)], axis=1)[:, sweep_points(m)]


def first_layers(times: np.ndarray, runs: np.ndarray | None = None) -> tuple[list[int], list[tuple[int, int]]]:
    """(the longest run of layers each stage fits, [lo, hi) of the first layers stage k can
    start at in a split that fits: the stages before it hold at least one layer each and at most
    their longest run, and so do it and the stages after it). The completion tables are computed
    only there: a search from stage 0 asks for nothing else (every other entry is inf or
    unreachable). times as in partition.optimal; runs, if given, its partition.finite_runs: each
    (stage, first layer)'s last finite entry, whence the same longest runs without a pass over
    times."""
    pp, size, _ = times.shape
    if runs is not None:  # the last finite b of row a: b - a where above the diagonal, else 0
        longest = np.maximum(runs[:, :, 1] - 1 - np.arange(size), 0).max(axis=1, initial=0).tolist()
    else:
        lengths = _run_lengths(size)  # b - a above the diagonal, 0 elsewhere
        longest = np.where(np.isfinite(times), lengths, 0).max(axis=(1, 2), initial=0).tolist()
    front = np.concatenate([[0], np.cumsum(longest)])  # most layers stages < k hold
    back = np.concatenate([np.cumsum(longest[::-1])[::-1], [0]])  # most layers stages >= k hold
    layers = size - 1
    return longest, [(max(k, layers - int(back[k])), min(layers - (pp - k), int(front[k])) + 1) for k in range(pp)]


@functools.lru_cache(maxsize=16)
def _run_lengths(size: int) -> np.ndarray:
    """lengths[a, b] = b - a layers of the run a..b-1 where b > a, else 0."""
    stops = np.arange(size)
    lengths = np.maximum(stops[None, :] - stops[:, None], 0)
    lengths.flags.writeable = False  # kept (lru_cache): read, never changed
    return lengths


def unit_sends(pp: int, num_microbatches: int, send_fwd, send_bwd) -> np.ndarray:
    """`sweep_unit_sends`, or zeros without sends; the latest kept for the next call with the same
    arguments and SWEEP_POINTS (a plan's sweep table and its bound ask for it in turn): read,
    never changed."""
    if send_fwd is None:
        return np.zeros((pp, len(sweep_points(num_microbatches))))
    key = (num_microbatches, SWEEP_POINTS, np.asarray(send_fwd, dtype=float).tobytes(),
           np.asarray(send_bwd, dtype=float).tobytes())
    if _LATEST_SENDS[0] != key:
        waits = sweep_unit_sends(num_microbatches, send_fwd, send_bwd)
        waits.flags.writeable = False
        _LATEST_SENDS[:] = key, waits
    return _LATEST_SENDS[1]


_LATEST_SENDS: list = [None, None]


def sweep_completion(times: np.ndarray, num_microbatches: int, *, fwd_bwd_factor: float,
                     send_fwd: np.ndarray | None = None, send_bwd: np.ndarray | None = None,
                     runs: np.ndarray | None = None) -> np.ndarray:
    """table[k, a, x] <= the least, over the splits of layers a.. into stages k.., of the longest
    backward sweep through them that leaves stage k at micro-batch x (`sweep_bound`): the stage
    times of stages k.. + their share of the advance from micro-batch 0 to x; inf where no split
    fits. Stage by stage from the last, the least over the stage's choices of the largest over
    where the advance enters it (a min-max relaxed to the least per x, so a lower bound); times
    as in partition.optimal. Shape (pp + 1, layers + 1, points): x at the `sweep_points`.
    send_fwd, send_bwd (per stage, default none): the sends each advance waits for
    (`sweep_unit_sends`); runs: `first_layers`'."""
    pp, size, _ = times.shape
    weights = sweep_unit_weights(pp, num_microbatches, fwd_bwd_factor=fwd_bwd_factor)
    waits = unit_sends(pp, num_microbatches, send_fwd, send_bwd)
    longest, reachable = first_layers(times, runs)
    table = np.full((pp + 1, size, weights.shape[1]), np.inf)
    table[pp, size - 1] = -np.inf
    table[pp, size - 1, 0] = 0.0  # micro-batch 0's backward at the last stage
    if native.kernels is not None:  # the same operations per entry in C
        native.kernels.sweep_completion(np.ascontiguousarray(times, dtype=float), pp, size, *(
            np.ascontiguousarray(x, dtype=float) for x in (weights, waits)), *(
            np.array(x, dtype=np.int64) for x in zip(*reachable)), np.array(longest, dtype=np.int64), table)
        return table
    for k in range(pp - 1, -1, -1):
        # the runs of layers stage k may hold that fit, by first layer (where a split can start
        # it) and length (memory caps keep them short): as pairs, grouped by first layer
        lo, hi = reachable[k]
        if not longest[k] or hi <= lo:
            continue
        first = np.arange(lo, hi)[:, None]
        stop = first + np.arange(1, longest[k] + 1)[None, :]
        t = times[k][first, np.minimum(stop, size - 1)]
        runs, length = np.nonzero((stop <= size - 1) & np.isfinite(t))
        if not len(runs):
            continue
        stop, t = stop[runs, length], t[runs, length][:, None]
        g, h = weights[k][None, :], waits[k][None, :]
        # the sweep enters stage k at micro-batch x' <= x and advances to x there:
        # t (G(x) - G(x')) + H(x) - H(x') + t
        entering = np.maximum.accumulate(table[k + 1][stop] - t * g - h, axis=1)
        starts = np.flatnonzero(np.concatenate([[True], runs[1:] != runs[:-1]]))  # each first layer's pairs
        table[k, lo + runs[starts]] = np.minimum.reduceat(entering + t * (g + 1.0) + h, starts, axis=0)
    return table


class SweepBound:
    """A lower bound on stage 0's end (`one_f_one_b`) over the splits below a partial one: the
    longest backward sweep. Micro-batch 0 runs forward through every stage and back (every
    stage time once, both end sends); on the way back the path advances from micro-batch 0 to
    m - 1, at any stages in order from the last to the first, each step at stage i a steady F B
    (t_i) or a cool-down B ((k - 1)/k t_i) as `sweep_unit_weights` says. Each such path is a chain
    of events of the schedule, so its length never exceeds the simulated end.

    The fixed stages 0..k are exact (`prefix`: the longest way from micro-batch x at stage k down
    to stage 0 and micro-batch m - 1, plus their times); the free stages after k are bounded by
    `sweep_completion`'s table; the bound is the largest over x of the two. Measured on FASOP's
    experiments, it is what proves the splits whose critical chain advances at two stages (a
    steady run at one, the cool-down at an earlier one) -- splits of many equal-time
    rearrangements the other bounds leave open."""

    def __init__(self, table: np.ndarray, *, num_microbatches: int, fwd_bwd_factor: float, send_first: float,
                 send_last: float, send_fwd: np.ndarray | None = None, send_bwd: np.ndarray | None = None):
        """table: `sweep_completion` of the stage times (shared by the plans of one shape), with the
        same send_fwd, send_bwd (per stage: the sends each advance waits for, `sweep_unit_sends`)."""
        pp = table.shape[0] - 1
        # points in reverse order (last micro-batch first), as `prefix` keeps its vectors
        self.weights = sweep_unit_weights(pp, num_microbatches, fwd_bwd_factor=fwd_bwd_factor)[:, ::-1]
        self.waits = unit_sends(pp, num_microbatches, send_fwd, send_bwd)[:, ::-1]
        self.table = table[:, :, ::-1]
        self.sends = send_first + send_last
        self.start = np.full(self.weights.shape[1], -np.inf)
        self.start[0] = 0.0  # before stage 0: the sweep must have reached micro-batch m - 1

    def prefix(self, k: int, before: np.ndarray | None, t: np.ndarray) -> np.ndarray:
        """Per choice t of stage k's time, per point x (last first): the longest way from
        micro-batch x at stage k down to stage 0 at m - 1 plus the stage times of stages 0..k
        (`before`: this for k - 1)."""
        later = self.start if before is None else before
        g = t[:, None] * self.weights[k][None, :] + self.waits[k][None, :]
        return np.maximum.accumulate(later[None, :] + g, axis=1) - g + t[:, None]

    def __call__(self, k: int, before: np.ndarray | None, t: np.ndarray, stops: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(bounds, prefixes) of the choices t of stage k ending at layers `stops`."""
        prefixes = self.prefix(k, before, t)
        return (prefixes + self.table[k + 1][stops]).max(axis=1) + self.sends, prefixes


    def at(self, k: int, before: np.ndarray | None, rest, floor: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`__call__` at a node of partition.optimal (`rest`: its partition.Rest), the same
        operations, what depends on the node alone (its stage times' shares, the table's rows of
        its stops) kept on the node; the bounds raised to `floor` (np.maximum(floor, bounds))."""
        t, g, col, later_table = rest.cached(self, self._node, k, rest)
        later = self.start if before is None else before
        if native.kernels is not None:  # the same operations in C
            prefixes, bounds = np.empty(g.shape), np.empty(len(t))
            native.kernels.sweep_at(later, g, t, later_table, self.sends, floor, prefixes, bounds)
            return bounds, prefixes
        prefixes = np.maximum.accumulate(later[None, :] + g, axis=1) - g + col
        return np.maximum(floor, (prefixes + later_table).max(axis=1) + self.sends), prefixes

    def _node(self, k: int, rest) -> tuple:
        t = rest.t
        return (t, t[:, None] * self.weights[k][None, :] + self.waits[k][None, :], t[:, None],
                np.ascontiguousarray(self.table[k + 1][rest.stops]))


def with_sweep(bound, sweep: SweepBound):
    """`bound` (a partition.Bound) raised to `sweep`'s where that is higher; its chains carry the
    sweep's prefixes along."""
    def raised(k, before, chain, t, rest):
        inner, prefix = (None, None) if chain is None else chain
        bounds, chains = bound(k, before, inner, t, rest)
        if t is rest.t:
            raised_bounds, prefixes = sweep.at(k, prefix, rest, bounds)
            return raised_bounds, _SweptChains(chains, prefixes)
        swept, prefixes = sweep(k, prefix, t, rest.stops)
        return np.maximum(bounds, swept), _SweptChains(chains, prefixes)
    raised.compiled = ("sweep", bound, sweep)  # what fasop.partition.compiled hands to the C node loop
    return raised


class _SweptChains:
    """The chains of `with_sweep`: (the bound's chain, the sweep's prefix) per choice."""

    __slots__ = ("chains", "prefixes")

    def __init__(self, chains, prefixes: np.ndarray):
        self.chains, self.prefixes = chains, prefixes

    def __getitem__(self, i: int) -> tuple:
        return self.chains[i], self.prefixes[i]
