"""The backward sweep from the last stage (fasop/schedule/bounds.py's `SweepBound` from the other
end): its table over the free first stages (`sweep_prefix_completion`) and its bound for a search
that fixes the stages from the last one down (`ReverseSweepBound`, the proven-split search's
reverse settle pass, docs/partitions.md)."""

from __future__ import annotations

import numpy as np

from fasop.schedule import native
from fasop.schedule.bounds import unit_sends, first_layers, sweep_unit_weights


def sweep_prefix_completion(times: np.ndarray, num_microbatches: int, *, fwd_bwd_factor: float,
                            send_fwd: np.ndarray, send_bwd: np.ndarray, runs: np.ndarray | None = None) -> np.ndarray:
    """`sweep_completion` from the other end: table[j, b, x] <= the least, over the splits of
    layers 0..b-1 into stages 0..j-1, of their stage times + the longest advance of the backward
    sweep from micro-batch x (entering stage j-1) to m - 1 (leaving stage 0); inf where no split
    fits. For a search that fixes the last stages first (`ReverseSweepBound`). Shape (pp + 1,
    layers + 1, points). runs: bounds.first_layers'."""
    pp, size, _ = times.shape
    weights = sweep_unit_weights(pp, num_microbatches, fwd_bwd_factor=fwd_bwd_factor)
    waits = unit_sends(pp, num_microbatches, send_fwd, send_bwd)
    points = weights.shape[1]
    longest, reachable = first_layers(times, runs)
    reachable.append((size - 1, size))  # the last stage stops at the last layer
    table = np.full((pp + 1, size, points), np.inf)
    table[0, 0] = -np.inf
    table[0, 0, points - 1] = 0.0  # no stage left: the sweep must have reached micro-batch m - 1
    for j in range(pp):
        stop = np.arange(*reachable[j + 1])[:, None]  # where stage j can stop: where j + 1 starts
        if not longest[j] or not len(stop):
            continue
        first = np.maximum(stop - np.arange(1, longest[j] + 1)[None, :], 0)  # [stop, length]
        t = times[j][first, stop]
        fits = np.isfinite(t) & (first < stop) & np.isfinite(table[j][first]).any(axis=2)
        t = np.where(fits, t, 0.0)[:, :, None]
        g = t * weights[j][None, None, :] + waits[j][None, None, :]
        # enter stage j at x, advance there to x' >= x, then stages < j from x': t + g(x') - g(x) + table[j][a][x']
        later = np.maximum.accumulate((table[j][first] + g)[:, :, ::-1], axis=2)[:, :, ::-1]
        table[j + 1, stop[:, 0]] = np.where(fits[:, :, None], later - g + t, np.inf).min(axis=1)
    return table


class ReverseSweepBound:
    """`SweepBound` for a search that fixes the stages from the last one down: the fixed stages
    j..pp-1 exact (`suffix`: their times + the longest advance of the backward sweep from
    micro-batch 0 at the last stage to x leaving stage j), the free stages 0..j-1 bounded by
    `sweep_prefix_completion`'s table; the bound is the largest over x of the two, + both end
    sends. The same chains as the sweep, relaxed on the other side: measured on FASOP's
    experiments, it proves many of the splits whose critical chain is set by the last stages,
    where the sweep's least over the free last stages is loose."""

    def __init__(self, table: np.ndarray, *, num_microbatches: int, fwd_bwd_factor: float, send_first: float,
                 send_last: float, send_fwd: np.ndarray, send_bwd: np.ndarray):
        """table: `sweep_prefix_completion` of the stage times, with the same sends."""
        pp = table.shape[0] - 1
        self.weights = np.ascontiguousarray(sweep_unit_weights(pp, num_microbatches, fwd_bwd_factor=fwd_bwd_factor))
        self.waits = np.ascontiguousarray(unit_sends(pp, num_microbatches, send_fwd, send_bwd))
        self.table = table
        self.sends = send_first + send_last
        self.start = np.full(self.weights.shape[1], -np.inf)
        self.start[0] = 0.0  # micro-batch 0's backward at the last stage

    def suffix(self, j: int, after: np.ndarray | None, t: np.ndarray) -> np.ndarray:
        """Per choice t of stage j's time, per point x: the stage times of stages j.. + the
        longest advance from micro-batch 0 at the last stage to x leaving stage j (`after`: this
        for stage j + 1)."""
        later = self.start if after is None else after
        g = t[:, None] * self.weights[j][None, :] + self.waits[j][None, :]
        return np.maximum.accumulate(later[None, :] - g, axis=1) + g + t[:, None]

    def __call__(self, j: int, after: np.ndarray | None, t: np.ndarray, firsts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(bounds, suffixes) of the choices t of stage j starting at layers `firsts`."""
        if native.kernels is not None:  # the same operations in C
            suffixes, bounds = np.empty((len(t), len(self.start))), np.empty(len(t))
            native.kernels.reverse_sweep(self.start if after is None else after, t, self.weights[j], self.waits[j],
                                         self.table[j], np.asarray(firsts, dtype=np.int64), self.sends, suffixes, bounds)
            return bounds, suffixes
        suffixes = self.suffix(j, after, t)
        return (suffixes + self.table[j][firsts]).max(axis=1) + self.sends, suffixes


def flipped_bound(sweep: ReverseSweepBound, pp: int, layers: int):
    """`sweep` as the partition.Bound of a search over the stages and layers in reverse order
    (fasop2024's reverse settle pass): the search's stage k is stage pp - 1 - k, a stop there is
    the first layer layers - stop."""
    def bound(k, before, chain, t, rest):
        return sweep(pp - 1 - k, chain, t, layers - rest.stops)
    bound.compiled = ("reverse", sweep, pp, layers)  # what fasop.partition.compiled hands to the C node loop
    return bound


def reversed_times(times: np.ndarray) -> np.ndarray:
    """times with the stages and the layers in reverse order: reversed[k, a, b] = times[pp - 1 - k,
    L - b, L - a] (a split s of times is s[::-1] of it): the tables a search that fixes the last
    stages first runs on."""
    return np.ascontiguousarray(times[::-1, ::-1, ::-1].transpose(0, 2, 1))
