"""Layers -> pipeline stages. Contiguous splits of the layer list, one count per stage.

`fasop-minmax` is FASOP's greedy balancing (MODEL.md §6), reproduced move for move, quirks
included. A partitioner returns *candidate splits*; the estimator schedules each and keeps the
one with the lowest pipeline time (FASOP does this across encoder/decoder splits of T5).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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


Bound = Callable[[list[float], int, float, float], float]
"""bound(prefix_times, layers_in_stage0, rest_sum, rest_max) -> lower bound of the objective over
every split that starts with stages of those compute times (layers_in_stage0 = -1 while stage
0 is open) and whose remaining stages sum to >= rest_sum with a largest stage >= rest_max."""
Evaluate = Callable[[list[tuple[int, ...]]], Sequence[float]]
"""evaluate(splits) -> objective of each split (layer counts per stage)."""
Fits = Callable[[int, int, int], bool]
"""fits(stage, first, stop) -> do layers first..stop-1 fit in that stage's GPU memory?"""


def optimal(stages: tuple[StageCosts, ...], num_layers: int, *, bound: Bound, evaluate: Evaluate,
            fits: Fits | None = None, seeds: Sequence[tuple[int, ...]] = (), batch: int = 256,
            margin: float = 1e-6) -> tuple[tuple[int, ...], float] | None:
    """The contiguous split (>= 1 layer per stage, every stage fitting) with the lowest objective,
    found by branch and bound: stages are fixed left to right, a partial split is dropped when
    `bound` exceeds the best objective seen by more than `margin` (relative: the objective may be
    rounded to float32), and complete splits are evaluated `batch` at a time. Exact: a split is
    only dropped when a lower bound proves it cannot win. Ties -> the lexicographically smallest
    counts. None when no split fits.

    rest_sum / rest_max bounds come from two dynamic programmes over the open stages: the least
    possible sum, and the least possible largest stage, of the remaining layers.
    """
    n = len(stages)
    ok = fits or (lambda i, a, b: True)
    inf = float("inf")
    # least sum / least max of stage times for stages k.. over layers l.. (only fitting stages)
    least_sum = [[inf] * (num_layers + 1) for _ in range(n + 1)]
    least_max = [[inf] * (num_layers + 1) for _ in range(n + 1)]
    least_sum[n][num_layers] = least_max[n][num_layers] = 0.0
    for k in range(n - 1, -1, -1):
        for first in range(k, num_layers - (n - k) + 1):
            for stop in range(first + 1, num_layers - (n - k - 1) + 1):
                if least_sum[k + 1][stop] == inf or not ok(k, first, stop):
                    continue
                t = stages[k].stage(first, stop)
                least_sum[k][first] = min(least_sum[k][first], t + least_sum[k + 1][stop])
                least_max[k][first] = min(least_max[k][first], max(t, least_max[k + 1][stop]))
    if least_sum[0][0] == inf:
        return None

    best: list = [inf, None]
    pending: list[tuple[int, ...]] = []

    def flush() -> None:
        if pending:
            for counts, value in zip(pending, evaluate(pending)):
                if (value, counts) < (best[0], best[1] or ()):
                    best[0], best[1] = value, counts
            pending.clear()

    def hopeless(value: float) -> bool:
        return value * (1 - margin) > best[0]

    for seed in seeds:
        edges = boundaries(seed)
        if len(seed) == n and all(c >= 1 and ok(i, edges[i], edges[i + 1]) for i, c in enumerate(seed)):
            pending.append(tuple(seed))
    flush()

    def visit(times: list[float], counts: list[int], first: int) -> None:
        k = len(times)
        if k == n:
            pending.append(tuple(counts))
            if len(pending) >= batch:
                flush()
            return
        children = []
        last_stop = num_layers if k == n - 1 else num_layers - (n - k - 1)
        for stop in range(first + 1, last_stop + 1):
            if least_sum[k + 1][stop] == inf or not ok(k, first, stop):
                continue
            t = stages[k].stage(first, stop)
            stage0 = stop if k == 0 else counts[0]
            lb = bound(times + [t], stage0, least_sum[k + 1][stop], least_max[k + 1][stop] if k + 1 < n else 0.0)
            if not hopeless(lb):
                children.append((lb, stop, t))
        children.sort()
        for lb, stop, t in children:
            if hopeless(lb):
                break
            visit(times + [t], counts + [stop - first], stop)

    visit([], [], 0)
    flush()
    return best[1], best[0]
