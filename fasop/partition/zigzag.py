"""A lower bound on a 1F1B pipeline's time (fasop/schedule/pipeline.py's schedule) over the splits below a
partial one, for the optimal partitioner (partition.optimal): the longest zigzag chain.

A zigzag chain is a chain of events of the fixed event graph that runs one after another:
micro-batch 0 forward through every stage and back to stage i; stage i's steady run up to its
last forward (m - 1 - w_i forwards and as many backwards, counting the one that comes back; w_i =
min(pp - i - 1, m) warm-up forwards); that last micro-batch forward on to a stage j >= i; there
the backward of micro-batch m - 1 - w_j, which runs back to a stage i' <= i; stage i''s w_j
backwards after it (the cool-down); the last gradient drains back to stage 0. With stage times t
split as f = t/k, b = (k - 1) t/k (k: the fwd_bwd_factor), its length is

    Z(i, j, i') = all stage times + both end sends + (m - 1 - w_i) t_i + sum_{i<l<=j} t_l
                  + w_j (k - 1)/k t_{i'},

valid where w_i <= m - 2 (stage i has a forward after micro-batch 0's backward) and w_j <= m -
1 (stage j a backward after its last forward). With j = i' = i it is the steady chain of
schedule_bounds.steady_weights; the measured splits it adds are those whose critical chain
turns forward from a steady run at an early stage and back (a "zigzag"), which the backward
sweep (schedule_bounds.SweepBound, chains that only go back) and the steady chains miss.

The bound fixes i and i' among the fixed stages 0..k of a partial split, j anywhere: for j fixed
it is exact but for the free stages' sum (their least, partition.Rest.sum); for j free the free
stages' sum + their sum up to j is at least `zigzag_completion`'s table.
"""

from __future__ import annotations

import numpy as np

from fasop.partition.tables import completion
from fasop.schedule import native

_EMPTY = np.zeros(0)


def zigzag_coefficients(num_stages: int, num_microbatches: int, *, fwd_bwd_factor: float) -> tuple[np.ndarray, np.ndarray]:
    """(a_i, u_j): Z(i, j, i') = all stage times + sends + a_i t_i + sum_{i<l<=j} t_l + u_j
    t_{i'}; a_i = m - 1 - w_i where w_i <= m - 2, u_j = w_j (k - 1)/k where w_j <= m - 1, -inf
    where the chain does not exist."""
    m, k = num_microbatches, fwd_bwd_factor
    warm = np.minimum(num_stages - 1 - np.arange(num_stages), m)
    steady = np.where(warm <= m - 2, m - 1 - warm, -np.inf).astype(float)
    turn = np.where(warm <= m - 1, warm * (k - 1) / k, -np.inf).astype(float)
    return steady, turn


def zigzag_completion(times: np.ndarray) -> np.ndarray:
    """table[j, k, a] = least, over the splits of layers a.. into stages k.., of their stage
    times' sum + the sum of those of stages k..j (partition_tables.completion, weights 2 up to
    stage j, 1 after); times as in partition.optimal. Shape (pp, pp + 1, layers + 1)."""
    pp = times.shape[0]
    stages = np.arange(pp)
    return np.stack([completion(times, 1.0 + (stages <= j)) for j in range(pp)])


class ZigzagBound:
    """The longest zigzag chain (module docstring) as a partition.Bound-like callable: for the
    choices t of stage k ending at layers `stops`, (bounds, chains), bounds without the stages
    before k (added by `with_zigzag`). The chain of a choice: (A, fixed, largest), A[j] = the
    largest over fixed i <= i' of a_i t_i + sum_{i<l<=k} t_l + u_j t_{i'} (per j), fixed = the
    largest Z - (all stage times + sends) over fixed j, largest = the largest fixed stage time."""

    def __init__(self, table: np.ndarray, *, num_microbatches: int, fwd_bwd_factor: float, send_first: float,
                 send_last: float):
        """table: `zigzag_completion` of the stage times."""
        pp = table.shape[0]
        steady, turn = zigzag_coefficients(pp, num_microbatches, fwd_bwd_factor=fwd_bwd_factor)
        self.steady = steady.tolist()
        finite = np.where(np.isfinite(turn), turn, 0.0)
        self.turn = [finite[k:] for k in range(pp)]  # u_j, j >= k
        self.no_turn = [np.where(np.isfinite(turn[k:]), 0.0, -np.inf) for k in range(pp)]  # -inf: no turn at j
        self.table, self.sends, self.pp = table, send_first + send_last, pp
        self.start = (np.full(pp, -np.inf), -np.inf, 0.0)

    def __call__(self, k: int, chain, t: np.ndarray, rest) -> tuple[np.ndarray, tuple]:
        """(bounds - before, (A, fixed, largest) per choice) of the choices t of stage k at a node
        of partition.optimal (`rest`: its partition.Rest, with the stops of t)."""
        row, fixed, largest = self.start if chain is None else chain  # row: A[j] for j >= k
        if native.kernels is not None:  # the same operations in C
            n, turns = len(t), np.empty((len(t), len(row)))
            out, fixed_out, top = np.empty(n), np.empty(n), np.empty(n)
            native.kernels.zigzag(row, fixed, largest, t, self.steady[k], self.turn[k], self.no_turn[k], rest.sum,
                                  rest.cached(self, self._free, k, rest.stops) if k + 1 < self.pp else _EMPTY,
                                  self.sends, out, turns, fixed_out, top)
            return out, (turns[:, 1:], fixed_out, top)
        top = np.maximum(largest, t)
        turns = row[None, :] + t[:, None]
        if self.steady[k] > -np.inf:  # stage k may be i (and i')
            turns = np.maximum(turns, self.steady[k] * t[:, None] + self.turn[k][None, :] * top[:, None] + self.no_turn[k])
        fixed = np.maximum(fixed, turns[:, 0])
        bounds = fixed + rest.sum
        if k + 1 < self.pp:  # a turn at a free stage
            free = rest.cached(self, self._free, k, rest.stops)
            bounds = np.maximum(bounds, (turns[:, 1:] + free).max(axis=1))
        return t + self.sends + bounds, (turns[:, 1:], fixed, top)

    def _free(self, k: int, stops: np.ndarray) -> np.ndarray:
        """The table's rows of a node's stops: (choices, turns j > k)."""
        return np.ascontiguousarray(self.table[k + 1:, k + 1, stops].T)


def with_zigzag(bound, zigzag: ZigzagBound):
    """`bound` (a partition.Bound) raised to `zigzag`'s where that is higher; its chains carry the
    zigzag's along."""
    def raised(k, before, chain, t, rest):
        inner, own = (None, None) if chain is None else chain
        bounds, chains = bound(k, before, inner, t, rest)
        zig, (turns, fixed, top) = zigzag(k, own, t, rest)
        return np.maximum(bounds, before + zig), _ZigzagChains(chains, turns, fixed, top)
    raised.compiled = ("zigzag", bound, zigzag)  # what fasop.partition.compiled hands to the C node loop
    return raised


class _ZigzagChains:
    """The chains of `with_zigzag`: (the bound's chain, the zigzag's) per choice."""

    __slots__ = ("chains", "turns", "fixed", "top")

    def __init__(self, chains, turns: np.ndarray, fixed: np.ndarray, top: np.ndarray):
        self.chains, self.turns, self.fixed, self.top = chains, turns, fixed, top

    def __getitem__(self, i: int) -> tuple:
        return self.chains[i], (self.turns[i], float(self.fixed[i]), float(self.top[i]))
