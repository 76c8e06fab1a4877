"""FASOP-2024's greedy min-max partitioner (`fasop-minmax`, docs/estimators.md §6), reproduced
move for move, quirks included (minmax-early-stop, encoder-costs-twice), one plan at a time
(a search chunk's plans are balanced together on arrays by fasop2024_plans.minmax_rows, move
for move the same). It returns *candidate splits*; the
estimator schedules each and keeps the one with the lowest pipeline time (FASOP does this
across encoder/decoder splits of T5).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Protocol


from fasop.partition import Split, boundaries


class StageCosts(Protocol):
    def stage(self, first: int, stop: int) -> float:
        """Compute seconds of layers first..stop-1 on this stage's GPUs."""


@lru_cache(maxsize=65536)
def minmax(stages: tuple[StageCosts, ...], num_layers: int, comm: tuple[float, ...]) -> Split:
    """FASOP's greedy min-max balancing of `num_layers` layers over `len(stages)` stages.

    Balancing time of stage i = compute + (middle stages only) comm[i-1]. Start from an even
    split (remainder to the last stage, then 0, 1, ...); repeatedly move one layer from the
    slowest stage to the fastest while the maximum drops (docs/estimators.md §6, steps 1-6).
    The stage edges and the earlier splits are kept up to date rather than rebuilt per move (the
    end stages add +0.0 in place of no comm: the same value). The reference of the min-max: the
    tests' oracle for fasop2024_plans.minmax_rows, which moves a chunk's problems in lockstep.
    Cached: plans that differ only elsewhere (placement, DP degree) share their splits.
    """
    n = len(stages)
    counts = [num_layers // n] * n
    for i in range(num_layers % n):
        counts[i - 1] += 1
    edges = boundaries(counts)
    stage = [s.stage for s in stages]
    extra = [0.0] + [comm[i - 1] for i in range(1, n - 1)] + [0.0] * (n > 1)
    current = [stage[i](edges[i], edges[i + 1]) + extra[i] for i in range(n)]
    last, moved, earlier, newest, previous = 1e6, False, set(), tuple(counts), (0, 0)
    while True:
        mx = max(current)
        if moved and (mx > last or (mx == last and newest in earlier)):
            counts[previous[0]] += 1  # steps 2/3: undo the last move and stop
            counts[previous[1]] -= 1
            return Split(tuple(counts), tuple(counts))
        last = mx
        imax, imin = current.index(mx), current.index(min(current))
        if (imax == 0 or imax == n - 1) and counts[imax] == 2:
            scheduled = tuple(counts)
            if moved:  # step 5 quirk: report a changed split, schedule the unchanged one
                counts[imax] += 1
                counts[imin] -= 1
            return Split(tuple(counts), scheduled)
        if counts[imax] <= 1:
            return Split(tuple(counts), tuple(counts))
        counts[imax] -= 1
        counts[imin] += 1
        moved, previous = True, (imax, imin)
        earlier.add(newest)
        newest = tuple(counts)
        if imax < imin:  # the edges between the two stages shift by the moved layer
            lo, hi, shift = imax, imin, -1
        else:
            lo, hi, shift = imin, imax, 1
        for e in range(lo + 1, hi + 1):
            edges[e] += shift
        for i in range(lo, hi + 1):  # only stages between moved edges change
            current[i] = stage[i](edges[i], edges[i + 1]) + extra[i]


Problem = tuple[tuple[StageCosts, ...], int, tuple[float, ...]]
"""The arguments of `minmax`: (stages, num_layers, comm)."""


def fasop_minmax_splits(stages: tuple[StageCosts, ...], segment_lengths: Sequence[int],
                        comm: tuple[float, ...]) -> list[Split]:
    """Candidate splits of FASOP's partitioner.

    One segment: the greedy min-max split. Two segments (encoder-decoder): for every number of
    encoder stages pe (1 <= pe < min(pp, encoder entries), decoder stages pp-pe < decoder
    entries), the concatenation of a min-max split of the encoder over stages 0..pe-1 and one of
    the decoder over stages pe..pp-1 — both balanced on the encoder's layer times and with
    local stage indices for the comm term, as FASOP does (docs/estimators.md §6, T5).
    """
    problems = _minmax_problems(stages, segment_lengths, comm)
    return _joined(stages, segment_lengths, [minmax(*problem) for problem in problems])


def minmax_supported(segment_lengths: Sequence[int]) -> bool:
    """Can `fasop_minmax_splits` split a layer list of these segments? One segment, or an
    encoder-decoder pair of equal length (FASOP balances the decoder on the encoder's layers)."""
    return len(segment_lengths) == 1 or (len(segment_lengths) == 2 and segment_lengths[0] == segment_lengths[1])


def _minmax_problems(stages: tuple[StageCosts, ...], segment_lengths: Sequence[int],
                     comm: tuple[float, ...]) -> list[Problem]:
    """The `minmax` problems behind `fasop_minmax_splits`: none for one stage; for one segment
    the whole layer list; for two, per number of encoder stages, the encoder's then the decoder's."""
    num_stages = len(stages)
    if num_stages == 1:
        return []
    if len(segment_lengths) == 1:
        return [(stages, segment_lengths[0], comm[: max(num_stages - 2, 0)])]
    if len(segment_lengths) != 2:
        raise ValueError("fasop-minmax handles one segment or an encoder-decoder pair")
    n_enc, n_dec = segment_lengths
    if n_enc != n_dec:
        raise ValueError("fasop-minmax balances the decoder on the encoder's layers: halves must be equal")
    problems = []
    for pe in range(1, min(num_stages, n_enc)):
        pd = num_stages - pe
        if pd <= n_dec - 1:
            problems += [(stages[:pe], n_enc, comm[: max(pe - 2, 0)]), (stages[pe:], n_enc, comm[: max(pd - 2, 0)])]
    return problems


def _joined(stages: tuple[StageCosts, ...], segment_lengths: Sequence[int], splits: list[Split]) -> list[Split]:
    """`fasop_minmax_splits` from the splits of its `_minmax_problems`, in their order."""
    if len(stages) == 1:
        total = sum(segment_lengths)
        return [Split((total,), (total,))]
    if len(segment_lengths) == 1:
        return splits
    return [Split(enc.reported + dec.reported, enc.reported + dec.reported)
            for enc, dec in zip(splits[::2], splits[1::2])]
