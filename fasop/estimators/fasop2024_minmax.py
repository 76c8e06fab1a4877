"""FASOP-2024's greedy min-max partitioner (`fasop-minmax`, docs/estimators.md §6), reproduced
move for move, quirks included (minmax-early-stop, encoder-costs-twice): `minmax`, one plan at
a time (the reference), and `minmax_rows` / `minmax_many`, a search chunk's problems balanced
together on arrays, move for move the same. It returns *candidate splits*; the estimator
schedules each and keeps the one with the lowest pipeline time (FASOP does this across
encoder/decoder splits of T5, fasop2024_plans).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from functools import lru_cache
from typing import Protocol

import numpy as np

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
    tests' oracle for minmax_rows, which moves a chunk's problems in lockstep.
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


# ---------------------------------------------------------------- batched: many problems on arrays
def minmax_rows(table: np.ndarray, which: np.ndarray, extra: np.ndarray, num_layers: int,
                known: dict | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(reported, scheduled) counts of FASOP's greedy min-max balancing of `num_layers` layers
    over n <= num_layers stages, one problem per row, every row moving in lockstep: stage i
    of row r takes its times from plane which[r, i] of `table` (entry [a, b]: layers a..b-1)
    plus extra[r, i] (the comm term: 0.0 at the ends). The moves of
    fasop2024_minmax.minmax (docs/estimators.md §6): maxima and first-of-equals indices
    (argmax, argmin) are exact, so every row moves and stops as it does. Equal rows (plans
    that differ only where the partitioner does not look) are balanced once; `known`, if
    given, keeps the results of earlier calls on the same table and layer count, by row."""
    return minmax_many(table, [(which, extra)], num_layers, [known])[0]


def minmax_many(table: np.ndarray, problems: Sequence[tuple[np.ndarray, np.ndarray]], num_layers: int,
                knowns: Sequence[dict | None]) -> list[tuple[np.ndarray, np.ndarray]]:
    """`minmax_rows` of several sets of problems (which, extra) of their own stage counts (each
    at least 2), with their own `known`: the problems of every set not known are solved in one
    lockstep run, those of fewer stages padded to the most (_lockstep)."""
    pending, todo = [], []
    for (which, extra), known in zip(problems, knowns):
        count, n = which.shape
        keys = np.ascontiguousarray(np.concatenate([which.astype(np.int64), extra.view(np.int64)], axis=1))
        names = keys.view(np.dtype((np.void, keys.shape[1] * 8))).ravel().tolist()
        found = None if known is None else list(map(known.get, names))
        missing = list(range(count)) if found is None else [k for k, f in enumerate(found) if f is None]
        distinct, first, inverse = _distinct(names if len(missing) == count else [names[k] for k in missing])
        missing = np.array(missing, dtype=np.intp)
        todo.append((which[missing[first]], extra[missing[first]]))
        pending.append((found, missing, distinct, inverse, known))
    out = []
    for (which, _), (found, missing, distinct, inverse, known), rows in zip(problems, pending,
                                                                            _solve(table, todo, num_layers)):
        count, n = which.shape
        both = np.empty((count, 2 * n), dtype=np.int64)
        both[missing] = rows[inverse]
        if known is not None:
            if len(missing) < count:
                hits = [k for k, f in enumerate(found) if f is not None]
                both[hits] = np.array([found[k] for k in hits])
            if len(known) > MINMAX_KNOWN:
                known.clear()
            known.update(zip(distinct, rows))
        out.append((both[:, :n], both[:, n:]))
    return out


MINMAX_KNOWN = 1 << 18
"""Min-max results a `known` dict keeps (a row of 2n counts each) before it starts over."""


def _distinct(keys: list) -> tuple[list, np.ndarray, np.ndarray]:
    """(the distinct keys in order of first appearance, the index of each one's first
    appearance, for each key the number of its distinct key)."""
    number = {key: k for k, key in enumerate(dict.fromkeys(keys))}
    inverse = np.fromiter(map(number.__getitem__, keys), np.intp, len(keys))
    by_number = np.argsort(inverse, kind="stable")  # each number's appearances in order: its first leads
    first = by_number[np.flatnonzero(np.diff(inverse[by_number], prepend=-1))]
    return list(number), first, inverse


ONE_BY_ONE = 4
"""Up to this many distinct problems, `minmax_rows` runs the reference (fasop2024_minmax.minmax)
on each: a handful of rows move faster one by one in Python than in lockstep on arrays (a
search that prunes, e.g. a pareto sweep, estimates one plan at a time)."""


def _solve(table: np.ndarray, problems: list[tuple[np.ndarray, np.ndarray]], num_layers: int) -> list[np.ndarray]:
    """`minmax_many` of every row of every set (which, extra), each row's reported counts then
    its scheduled ones: one by one (the reference) for a few rows in all, else in one lockstep
    run per range of stage counts (3-4, 5-8, 9-16, ...), the sets of fewer stages padded."""
    if sum(len(which) for which, _ in problems) <= ONE_BY_ONE:
        return [np.array([s.reported + s.scheduled for s in (
            minmax.__wrapped__(tuple(_Plane(table[w]) for w in row), num_layers, tuple(x[1:]))
            for row, x in zip(which.tolist(), extra.tolist()))], dtype=np.int64).reshape(which.shape * np.array([1, 2]))
            for which, extra in problems]
    ranges: dict[int, list[int]] = defaultdict(list)  # padding at most doubles a run's width
    for k, (which, _) in enumerate(problems):
        ranges[(which.shape[1] - 1).bit_length()].append(k)
    out: list = [None] * len(problems)
    for members in ranges.values():
        sets = [problems[k] for k in members]
        widest, total = max(w.shape[1] for w, _ in sets), sum(len(w) for w, _ in sets)
        which, extra = np.zeros((total, widest), dtype=np.int64), np.zeros((total, widest))
        sizes, start = np.zeros(total, dtype=np.int64), 0
        for w, x in sets:
            stop = start + len(w)
            which[start:stop, :w.shape[1]], extra[start:stop, :w.shape[1]], sizes[start:stop] = w, x, w.shape[1]
            start = stop
        reported, scheduled = _lockstep(table, which, extra, num_layers, sizes)
        start = 0
        for k, (w, _) in zip(members, sets):
            stop, n = start + len(w), w.shape[1]
            out[k] = np.concatenate([reported[start:stop, :n], scheduled[start:stop, :n]], axis=1)
            start = stop
    return out


class _Plane:
    """One plane of a stage-time table as fasop2024_minmax.minmax reads a stage's costs."""

    __slots__ = ("item",)

    def __init__(self, plane: np.ndarray):
        self.item = plane.item

    def stage(self, first: int, stop: int) -> float:
        return self.item(first, stop)


def _even_split(num_layers: int, sizes: np.ndarray, width: int) -> np.ndarray:
    """minmax's start, a row per problem of sizes[r] stages (`width` columns, 0 past them): the
    layers split evenly, the remainder one each to the last stage, then stages 0, 1, ..."""
    stage = np.arange(width)
    rest = (num_layers % sizes)[:, None]
    return (np.where(stage < sizes[:, None], (num_layers // sizes)[:, None], 0)
            + ((stage < rest - 1) | ((stage == sizes[:, None] - 1) & (rest >= 1)))).astype(np.int64)


def _lockstep(table: np.ndarray, which: np.ndarray, extra: np.ndarray, num_layers: int, sizes: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray]:
    """`minmax_rows` of every row, row r of sizes[r] stages (its first sizes[r] columns; the rest
    padding: no layers, never a maximum or a minimum)."""
    count, n = which.shape
    valid = np.arange(n) < sizes[:, None]
    counts = _even_split(num_layers, sizes, n)
    padded = bool((sizes < n).any())
    rows = np.arange(count)
    last = np.full(count, 1e6)
    moved = np.zeros(count, dtype=bool)
    previous_max = previous_min = np.zeros(count, dtype=np.intp)
    history: list[np.ndarray] = []  # the counts before each move made so far, one row per problem
    reported = np.zeros((count, n), dtype=np.int64)
    scheduled = np.zeros((count, n), dtype=np.int64)
    edges = np.zeros((count, n + 1), dtype=np.intp)
    while len(rows):
        np.cumsum(counts, axis=1, out=edges[: len(rows), 1:])
        e = edges[: len(rows)]
        current = table[which, e[:, :-1], e[:, 1:]] + extra
        high, low = (np.where(valid, current, -np.inf), np.where(valid, current, np.inf)) if padded else (current,) * 2
        mx = high.max(axis=1)
        stop = moved & (mx > last)
        tied = moved & (mx == last)
        if tied.any() and history:  # steps 2/3: the maximum stayed and these counts were seen before
            at = np.flatnonzero(tied)  # (only where it stayed: few rows)
            seen = np.zeros(len(at), dtype=bool)
            for before in history:
                seen |= (before[rows[at]] == counts[at]).all(axis=1)
            stop[at[seen]] = True
        local = np.arange(len(rows))
        if stop.any():  # undo the last move and stop
            undone = counts.copy()
            undone[local, previous_max] += 1
            undone[local, previous_min] -= 1
            reported[rows[stop]] = scheduled[rows[stop]] = undone[stop]
        last = mx
        imax, imin = high.argmax(axis=1), low.argmin(axis=1)
        at_max = counts[local, imax]
        quirk = ~stop & ((imax == 0) | (imax == sizes - 1)) & (at_max == 2)
        if quirk.any():  # step 5 quirk: report a changed split, schedule the unchanged one
            changed = counts.copy()
            changed[local, imax] += 1
            changed[local, imin] -= 1
            scheduled[rows[quirk]] = counts[quirk]
            reported[rows[quirk]] = np.where(moved[:, None], changed, counts)[quirk]
        single = ~stop & ~quirk & (at_max <= 1)
        reported[rows[single]] = scheduled[rows[single]] = counts[single]
        go = ~(stop | quirk | single)
        history.append(np.zeros_like(reported))
        history[-1][rows] = counts
        counts, imax, imin = counts[go], imax[go], imin[go]  # move one layer from the slowest to the fastest
        moving = np.arange(len(counts))
        counts[moving, imax] -= 1
        counts[moving, imin] += 1
        previous_max, previous_min = imax, imin
        rows, last, which, extra, sizes, valid = rows[go], last[go], which[go], extra[go], sizes[go], valid[go]
        moved = np.ones(len(rows), dtype=bool)
    return reported, scheduled


def middle_extra(comm: np.ndarray, n: int) -> np.ndarray:
    """The comm terms of a min-max problem of n stages: comm[:, i - 1] on each middle stage i,
    0.0 on the end stages (docs/estimators.md §6)."""
    extra = np.zeros((len(comm), n))
    if n > 2:
        extra[:, 1:n - 1] = comm[:, :n - 2]
    return extra
