"""A local search over layer splits: one-layer moves while they help (`polish`), which gives the
optimal partitioner's settle pass (fasop/estimators/fasop2024/optimal.py) a better split to prove."""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from fasop.partition.splits import Evaluate
from fasop.schedule import native

POLISH_ROUNDS = 64
"""Most rounds of `polish` (each evaluates every one-layer move at once); measured on FASOP's
experiments, it stops on its own after at most ~10."""
LOWER_MARGIN = 1e-6
"""Relative: a move whose lower bound (polish's `lower`) is within this of the current objective
or above is not evaluated -- the objectives are float32-rounded, a bound is exact in float64."""


def moves(split: tuple[int, ...], times: np.ndarray) -> list[tuple[int, ...]]:
    """The splits that move one layer from stage i to stage j (the boundaries between them shift
    by one; every pair i != j) and fit: times[k, a, b] finite for every stage; times as in
    `optimal`."""
    return list(map(tuple, move_rows(split, times)[0].tolist()))


def move_rows(split: tuple[int, ...], times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(counts, stage times): `moves` as rows of layer counts, in its order, and each one's stage
    times (row r, stage k: times[k, a, b] of its layers a..b-1). In C where the kernels are built
    (polish_moves: the same rows, the same copied times)."""
    n = len(split)
    if native.kernels is not None and n > 1:
        counts, stage_times = np.empty((n * (n - 1), n), dtype=np.int64), np.empty((n * (n - 1), n))
        rows = native.kernels.polish_moves(np.array(split, dtype=np.int64), np.ascontiguousarray(times, dtype=float),
                                           times.shape[1], counts, stage_times)
        return counts[:rows], stage_times[:rows]
    i, j = _pairs(n)
    counts = np.tile(np.array(split), (len(i), 1))
    counts[np.arange(len(i)), i] -= 1
    counts[np.arange(len(i)), j] += 1
    counts = counts[(counts >= 1).all(axis=1)]
    edges = np.zeros((len(counts), n + 1), dtype=np.intp)
    np.cumsum(counts, axis=1, out=edges[:, 1:])
    stage_times = times[np.arange(n), edges[:, :-1], edges[:, 1:]]
    fits = np.isfinite(stage_times).all(axis=1)
    return counts[fits], stage_times[fits]


@functools.lru_cache(maxsize=64)
def _pairs(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(i, j) of every pair of stages i != j, i first."""
    return np.nonzero(~np.eye(n, dtype=bool))


def polish(split: tuple[int, ...], value: float, times: np.ndarray, evaluate: Evaluate,
           rounds: int = POLISH_ROUNDS,
           lower: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None) -> tuple[tuple[int, ...], float]:
    """(split, objective) after a best-improvement local search from `split` (objective `value`):
    each round evaluates every `moves` neighbour at once and goes to the lowest (ties: the
    lexicographically smallest), while that is strictly lower. A better incumbent for the
    branch and bound's settle pass: the optimal split of a deep pipeline is often a few layer
    moves from the one a budget-capped search found, and the settle pass only proves what it
    is given. Deterministic; never returns a worse split. `lower(counts, stage_times)`, if
    given, bounds the objective of each move (`move_rows`) from below: the moves it shows cannot
    be lower (LOWER_MARGIN) are not evaluated -- the same result, as only a strictly lower move is
    ever taken."""
    for _ in range(rounds):
        counts, stage_times = move_rows(split, times)
        if len(counts) and lower is not None:
            counts = counts[lower(counts, stage_times) * (1 - LOWER_MARGIN) < value]
        near = list(map(tuple, counts.tolist()))
        if not near:
            break
        best = min(zip(evaluate(near), near))
        if not best[0] < value:
            break
        value, split = float(best[0]), best[1]
    return split, value
