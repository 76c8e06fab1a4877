"""Layers -> pipeline stages. Contiguous splits of the layer list, one count per stage.

`fasop-minmax` is FASOP's greedy balancing (MODEL.md §6), reproduced move for move, quirks
included. A partitioner returns *candidate splits*; the estimator schedules each and keeps the
one with the lowest pipeline time (FASOP does this across encoder/decoder splits of T5).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol


class StageCosts(Protocol):
    def stage(self, first: int, stop: int) -> float:
        """Compute seconds of layers first..stop-1 on this stage's GPUs."""


@dataclass(frozen=True)
class Split:
    reported: tuple[int, ...]
    """Layers per stage: what the plan runs, what is reported and memory-checked."""
    scheduled: tuple[int, ...]
    """Layers per stage whose compute times are scheduled (differs from `reported` only by
    FASOP's early-stop quirk, MODEL.md §6 step 5)."""


def boundaries(counts: Sequence[int]) -> list[int]:
    """[0, c0, c0+c1, ...]: stage i covers layers boundaries[i]..boundaries[i+1]-1."""
    edges = [0]
    for c in counts:
        edges.append(edges[-1] + c)
    return edges


@lru_cache(maxsize=65536)
def minmax(stages: tuple[StageCosts, ...], num_layers: int, comm: tuple[float, ...]) -> Split:
    """FASOP's greedy min-max balancing of `num_layers` layers over `len(stages)` stages.

    Balancing time of stage i = compute + (middle stages only) comm[i-1]. Start from an even
    split (remainder to the last stage, then 0, 1, ...); repeatedly move one layer from the
    slowest stage to the fastest while the maximum drops (MODEL.md §6, steps 1-6).
    Cached: plans that differ only elsewhere (placement, DP degree) share their splits.
    """
    n = len(stages)
    counts = [num_layers // n] * n
    for i in range(num_layers % n):
        counts[i - 1] += 1
    edges = boundaries(counts)

    def time_of(i: int) -> float:
        t = stages[i].stage(edges[i], edges[i + 1])
        return t + comm[i - 1] if 0 < i < n - 1 else t

    current = [time_of(i) for i in range(n)]
    last, moved, history, previous = 1e6, False, [tuple(counts)], (0, 0)
    while True:
        mx = max(current)
        if moved and (mx > last or (mx == last and tuple(counts) in history[:-1])):
            counts[previous[0]] += 1  # steps 2/3: undo the last move and stop
            counts[previous[1]] -= 1
            return Split(tuple(counts), tuple(counts))
        last = mx
        imax, imin = current.index(mx), current.index(min(current))
        if imax in (0, n - 1) and counts[imax] == 2:
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
        history.append(tuple(counts))
        edges = boundaries(counts)
        for i in range(min(imax, imin), max(imax, imin) + 1):  # only stages between moved edges change
            current[i] = time_of(i)


def fasop_minmax_splits(stages: tuple[StageCosts, ...], segment_lengths: Sequence[int],
                        comm: tuple[float, ...]) -> list[Split]:
    """Candidate splits of FASOP's partitioner.

    One segment: the greedy min-max split. Two segments (encoder-decoder): for every number of
    encoder stages pe (1 <= pe < min(pp, encoder entries), decoder stages pp-pe < decoder
    entries), the concatenation of a min-max split of the encoder over stages 0..pe-1 and one of
    the decoder over stages pe..pp-1 — both balanced on the encoder's layer times and with
    local stage indices for the comm term, as FASOP does (MODEL.md §6, T5).
    """
    num_stages = len(stages)
    if num_stages == 1:
        total = sum(segment_lengths)
        return [Split((total,), (total,))]
    if len(segment_lengths) == 1:
        return [minmax(stages, segment_lengths[0], comm[: max(num_stages - 2, 0)])]
    if len(segment_lengths) != 2:
        raise ValueError("fasop-minmax handles one segment or an encoder-decoder pair")
    n_enc, n_dec = segment_lengths
    if n_enc != n_dec:
        raise ValueError("fasop-minmax balances the decoder on the encoder's layers: halves must be equal")
    splits = []
    for pe in range(1, min(num_stages, n_enc)):
        pd = num_stages - pe
        if pd > n_dec - 1:
            continue
        enc = minmax(stages[:pe], n_enc, comm[: max(pe - 2, 0)])
        dec = minmax(stages[pe:], n_enc, comm[: max(pd - 2, 0)])
        counts = enc.reported + dec.reported
        splits.append(Split(counts, counts))
    return splits
