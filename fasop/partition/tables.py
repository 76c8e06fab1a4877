"""The dynamic programmes over (stage, first layer) that the optimal partitioner's bounds and
the plan bounds use: least completions of a partial split (sums, largest stage, largest
weighted stage, sums under caps on the largest weighted stage), the coupled chain floor, and the
bottleneck-balanced split. times[k, a, b]: seconds of layers a..b-1 on stage k, inf where b <= a
or they do not fit that stage's memory (partition.optimal). In C where the compiled kernels are
built (fasop/schedule/_native.c: completion, capped_completion, bottleneck_split), the same operations;
there each reads only where `finite_runs` says a stage's times are finite (the same values).
"""

from __future__ import annotations

import numpy as np

from fasop.schedule import native

_NO_RUNS = np.zeros(0, dtype=np.int64)


def finite_runs(times: np.ndarray, shared: dict | None = None) -> np.ndarray | None:
    """runs[k, a] = [the first b where times[k, a, b] is finite, the last one + 1) ([0, 0):
    none), for the compiled tables: they read only those entries (every other one is inf or
    nan, which they skip: the same values); kept in `shared` (a search's tables over this
    `times`). None without the kernels."""
    if native.kernels is None:
        return None
    if shared is not None and "runs" in shared:
        return shared["runs"]
    n, size, _ = times.shape
    runs = np.empty((n, size, 2), dtype=np.int64)
    native.kernels.finite_runs(np.ascontiguousarray(times, dtype=float), n, size, runs)
    if shared is not None:
        shared["runs"] = runs
    return runs


def least_completions(times: np.ndarray, weights: np.ndarray | None = None) -> tuple[float, float, float]:
    """(least sum of stage times, least largest stage time, least largest weighted stage time
    weights[i] x t_i) over all splits; times as in `optimal` (the three minima may come from
    different splits). Without weights the third is 0."""
    times = np.ascontiguousarray(times, dtype=float)  # once, not per table (a broadcast stack is copied)
    ones, runs = np.ones(len(times)), finite_runs(times)
    return (float(completion(times, ones, runs=runs)[0, 0]), float(completion(times, ones, True, runs)[0, 0]),
            float(completion(times, ones * 0 if weights is None else weights, True, runs)[0, 0]))


PARTITION_CAPS, CAP_RANGE = 8, 3.0
"""The optimal partitioner bounds a rest's sum and its largest weighted stage together on 8 caps
from the least that largest can be to 3x it (above: the last cap's floor): measured on FASOP's
experiments, as many splits proven optimal as 32 caps over the whole range, at a quarter of the
cost."""
CHAIN_LEVELS = 32
"""Caps on the largest steady-weighted stage time at which `least_chain` solves for the least
sum of stage times: more caps, a tighter floor, a costlier one."""


def least_chain(times: np.ndarray, weights: np.ndarray | None = None, coupled: bool = True) -> tuple[float, float]:
    """(least over splits of sum_i t_i + max_i weights[i] t_i -- the chain of stage 0's end
    time in schedule.steady_weights, without the sends --, least largest stage time); times as
    in `optimal`. The first is found to within the grid of `steady_caps`, from below; with
    coupled=False it is the cheaper and weaker least sum + least largest weighted stage."""
    least_sum, least_max, least_steady = least_completions(times, weights)
    if weights is None or not coupled:
        return least_sum + least_steady, least_max
    caps = steady_caps(least_steady, float(np.max(times[np.isfinite(times)], initial=0.0)) * float(weights.max()))
    return max(chain_floor(capped_sums(times, weights, caps), caps, least_steady), least_sum + least_steady), least_max


def steady_caps(least: float, most: float, levels: int = CHAIN_LEVELS) -> np.ndarray:
    """`levels` caps growing geometrically from above `least` to `most` (the least and the most
    the largest weighted stage can be), then inf."""
    if not most > least > 0:
        return np.array([np.inf])
    return np.append(least * (most / least) ** (np.arange(1, levels + 1) / levels), np.inf)


def capped_sums(times: np.ndarray, weights: np.ndarray, caps: np.ndarray) -> np.ndarray:
    """sums[j] = least sum of stage times over the splits whose every weights[i] t_i <= caps[j]."""
    return capped_completion(times, weights, caps)[:, 0, 0]


def capped_completion(times: np.ndarray, weights: np.ndarray, caps: np.ndarray,
                      runs: np.ndarray | None = None) -> np.ndarray:
    """table[j, k, l] = least sum of stage times over the splits of layers l.. into stages k..
    whose every weights[i] t_i <= caps[j]; times as in `optimal`, runs its `finite_runs`."""
    n, size, _ = times.shape
    if native.kernels is not None:  # the same operations per entry in C (no (caps, size, size) temporaries)
        table = np.empty((len(caps), n + 1, size))
        native.kernels.capped_completion(np.ascontiguousarray(times, dtype=float), n, size,
                                         np.ascontiguousarray(weights, dtype=float),
                                         np.ascontiguousarray(caps, dtype=float),
                                         _NO_RUNS if runs is None else runs, table)
        return table
    table = np.full((len(caps), n + 1, size), np.inf)
    table[:, n, size - 1] = 0.0
    for k in range(n - 1, -1, -1):
        capped = np.where(weighted_times(times[k], weights[k])[None] <= caps[:, None, None], times[k][None], np.inf)
        table[:, k] = (capped + table[:, k + 1, None, :]).min(axis=2)
    return table


def chain_floor(sums: np.ndarray, caps: np.ndarray, least_steady: float) -> float:
    """Least sum + largest weighted stage over splits, from `capped_sums`: a split whose largest
    weighted stage lies in (caps[j-1], caps[j]] (at least `least_steady` for j = 0) sums to at
    least sums[j]."""
    below = np.maximum(np.concatenate([[0.0], caps[:-1]]), least_steady)
    return float(np.min(sums + below))


def weighted_times(times: np.ndarray, weight: float) -> np.ndarray:
    """weight x stage times; weight 0 keeps infeasible runs inf (0 x inf would be nan)."""
    if weight == 1:
        return times
    if weight > 0:
        return times * weight
    return np.where(np.isfinite(times), 0.0, np.inf)


def completion(times: np.ndarray, weights: np.ndarray, largest: bool = False,
               runs: np.ndarray | None = None) -> np.ndarray:
    """table[k, l] = least, over the splits of layers l.. into stages k.., of the sum (or with
    `largest` the largest) of weights[i] x stage time; times as in `optimal`, runs its
    `finite_runs` (read by the kernel)."""
    n, size, _ = times.shape
    if native.kernels is not None:  # the same operations per entry in C
        table = np.empty((n + 1, size))
        native.kernels.completion(np.ascontiguousarray(times, dtype=float), n, size,
                                  np.ascontiguousarray(weights, dtype=float), largest,
                                  _NO_RUNS if runs is None else runs, table)
        return table
    table = np.full((n + 1, size), np.inf)
    table[n, size - 1] = 0.0
    for k in range(n - 1, -1, -1):
        weighted = weighted_times(times[k], weights[k])
        if largest:
            table[k] = np.maximum(weighted, table[k + 1][None, :]).min(axis=1)
        else:
            table[k] = (weighted + table[k + 1][None, :]).min(axis=1)
    return table


def bottleneck_split(times: np.ndarray, runs: np.ndarray | None = None) -> tuple[int, ...] | None:
    """A split minimising the largest stage time, by dynamic programming over (stage, first
    layer); among the suffixes with the same largest time the one with the smaller sum (a
    heuristic tie-break, not the least sum overall). None when no split fits. A seed for
    `optimal`; times as there, runs its `finite_runs`."""
    n, size, _ = times.shape
    if native.kernels is not None:  # the same operations and choices in C
        counts = np.empty(n, dtype=np.int64)
        found = native.kernels.bottleneck_split(np.ascontiguousarray(times, dtype=float), n, size,
                                                _NO_RUNS if runs is None else runs, counts)
        return tuple(counts.tolist()) if found else None
    last = size - 1
    best = np.full((n + 1, size, 2), np.inf)  # (max, sum) of stages k.. covering layers l..
    best[n, last] = 0.0
    choice = np.zeros((n, size), dtype=int)
    rows = np.arange(size)
    for k in range(n - 1, -1, -1):
        mx = np.maximum(times[k], best[k + 1, None, :, 0])  # [first, stop]
        total = times[k] + best[k + 1, None, :, 1]
        lowest = mx.min(axis=1, keepdims=True)
        stop = np.where(mx == lowest, total, np.inf).argmin(axis=1)  # smallest max, then sum, then stop
        ok = np.isfinite(lowest[:, 0])
        best[k, ok] = np.stack([mx[rows, stop], total[rows, stop]], axis=1)[ok]
        choice[k, ok] = stop[ok]
    if not np.isfinite(best[0, 0, 0]):
        return None
    counts, first = [], 0
    for k in range(n):
        stop = int(choice[k, first])
        counts.append(stop - first)
        first = stop
    return tuple(counts)
