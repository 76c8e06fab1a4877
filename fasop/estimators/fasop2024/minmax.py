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

from fasop.estimators.fasop2024.lockstep import lockstep
from fasop.partition.splits import Split, boundaries


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
class Known:
    """Min-max results of earlier calls on one table, layer count and stage count n, kept for
    later ones (a search's chunks, the compositions of a pareto sweep): each problem's name (the
    bytes of its which and extra) -> its row of `rows` (reported then scheduled counts, 2n).
    Holds at most MINMAX_KNOWN before it starts over."""

    def __init__(self):
        self.at: dict[bytes, int] = {}
        self.rows = np.zeros((0, 0), dtype=np.int64)

    def find(self, names: list) -> list:
        """The row in `rows` of each name, None where unknown (None for all: none known)."""
        return list(map(self.at.get, names)) if self.at else None

    def add(self, names: list, rows: np.ndarray) -> None:
        size = len(self.at)
        if size + len(names) > MINMAX_KNOWN:
            self.at.clear()
            size = 0
        if size + len(rows) > len(self.rows):  # room for twice as many
            grown = np.zeros((2 * (size + len(rows)), rows.shape[1]), dtype=np.int64)
            if size:
                grown[:size] = self.rows[:size]
            self.rows = grown
        self.rows[size:size + len(rows)] = rows
        self.at.update(zip(names, range(size, size + len(rows))))


MINMAX_KNOWN = 1 << 18
"""Min-max results a `Known` keeps (a row of 2n counts each) before it starts over."""


def minmax_rows(table: np.ndarray, which: np.ndarray, extra: np.ndarray, num_layers: int,
                known: Known | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(reported, scheduled) counts of FASOP's greedy min-max balancing of `num_layers` layers
    over n <= num_layers stages, one problem per row, every row moving in lockstep: stage i
    of row r takes its times from plane which[r, i] of `table` (entry [a, b]: layers a..b-1)
    plus extra[r, i] (the comm term: 0.0 at the ends). The moves of
    fasop2024_minmax.minmax (docs/estimators.md §6): maxima and first-of-equals indices
    (argmax, argmin) are exact, so every row moves and stops as it does. Equal rows (plans
    that differ only where the partitioner does not look) are balanced once; `known`, if
    given, keeps the results of earlier calls on the same table and layer count."""
    return minmax_many(table, [(which, extra)], num_layers, [known])[0]


def minmax_many(table: np.ndarray, problems: Sequence[tuple[np.ndarray, np.ndarray]], num_layers: int,
                knowns: Sequence[Known | None]) -> list[tuple[np.ndarray, np.ndarray]]:
    """`minmax_rows` of several sets of problems (which, extra) of their own stage counts (each
    at least 2), with their own `known`: the problems of every set not known are solved in one
    lockstep run, those of fewer stages padded to the most (fasop2024_lockstep)."""
    pending, todo = [], []
    for (which, extra), known in zip(problems, knowns):
        count, n = which.shape
        keys = np.concatenate([which.astype(np.int64, copy=False), extra.view(np.int64)], axis=1)
        names = keys.view(np.dtype((np.void, keys.shape[1] * 8))).ravel().tolist()
        found = None if known is None else known.find(names)  # (None: none known)
        hits = [] if found is None else [k for k, f in enumerate(found) if f is not None]
        missing = np.arange(count) if not hits else np.delete(np.arange(count), hits)
        distinct, first, inverse = _distinct(names if not hits else [names[k] for k in missing.tolist()])
        todo.append((which[missing[first]], extra[missing[first]]))
        both = np.empty((count, 2 * n), dtype=np.int64)
        if hits:  # (read before any set adds: an addition may start a Known over)
            both[hits] = known.rows[[found[k] for k in hits]]
        pending.append((both, missing, distinct, inverse, known))
    out = []
    for (which, _), (both, missing, distinct, inverse, known), rows in zip(problems, pending,
                                                                           _solve(table, todo, num_layers)):
        n = which.shape[1]
        if len(missing) == len(both):
            rows.take(inverse, axis=0, out=both)
        else:
            both[missing] = rows[inverse]
        if known is not None and distinct:
            known.add(distinct, rows)
        out.append((both[:, :n], both[:, n:]))
    return out


def _distinct(keys: list) -> tuple[list, np.ndarray, np.ndarray]:
    """(the distinct keys in order of first appearance, the index of each one's first
    appearance, for each key the number of its distinct key)."""
    number = dict.fromkeys(keys)
    number = dict(zip(number, range(len(number))))  # (bytes keep their hash: no rehashing)
    inverse = np.fromiter(map(number.__getitem__, keys), np.intp, len(keys))
    rise = np.ones(len(keys), dtype=bool)  # numbered in order of appearance: a key's first
    rise[1:] = inverse[1:] > np.maximum.accumulate(inverse)[:-1]  # appearance raises the largest so far
    return list(number), np.flatnonzero(rise), inverse


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
    out: list = [None] * len(problems)
    for members in _runs(problems):
        sets = [problems[k] for k in members]
        widest, total = max(w.shape[1] for w, _ in sets), sum(len(w) for w, _ in sets)
        which, extra = np.full((total, widest), -1, dtype=np.int64), np.full((total, widest), -np.inf)
        counts, sizes, start = np.zeros((total, widest), dtype=np.int64), np.zeros(total, dtype=np.int64), 0
        for w, x in sets:
            stop, n = start + len(w), w.shape[1]
            which[start:stop, :n], extra[start:stop, :n], sizes[start:stop] = w, x, n
            counts[start:stop, :n] = _even_split(num_layers, n)
            start = stop
        reported, scheduled = lockstep(table, which, extra, counts, sizes)
        start = 0
        for k, (w, _) in zip(members, sets):
            stop, n = start + len(w), w.shape[1]
            out[k] = np.concatenate([reported[start:stop, :n], scheduled[start:stop, :n]], axis=1)
            start = stop
    return out


SMALL_RUN = 512
"""Rows below which a range of stage counts joins the next wider one's lockstep run: a run
costs some 30 numpy calls a move whatever its rows, padding costs only the padded entries."""


def _runs(problems: list[tuple[np.ndarray, np.ndarray]]) -> list[list[int]]:
    """The sets of each lockstep run: one per range of stage counts (2, 3-4, 5-8, 9-16, ...:
    padding at most doubles a run's width), a range of fewer than SMALL_RUN rows in all joining
    the next (a few rows move as fast padded as apart)."""
    ranges: dict[int, list[int]] = defaultdict(list)
    for k, (which, _) in enumerate(problems):
        ranges[(which.shape[1] - 1).bit_length()].append(k)
    runs, pending = [], []
    for key in sorted(ranges):
        pending += ranges[key]
        if sum(len(problems[k][0]) for k in pending) >= SMALL_RUN:
            runs.append(pending)
            pending = []
    return runs + [pending] * bool(pending)


class _Plane:
    """One plane of a stage-time table as fasop2024_minmax.minmax reads a stage's costs."""

    __slots__ = ("item",)

    def __init__(self, plane: np.ndarray):
        self.item = plane.item

    def stage(self, first: int, stop: int) -> float:
        return self.item(first, stop)


def _even_split(num_layers: int, n: int) -> list[int]:
    """minmax's start for n stages: the layers split evenly, the remainder one each to the last
    stage, then stages 0, 1, ..."""
    counts = [num_layers // n] * n
    for i in range(num_layers % n):
        counts[i - 1] += 1
    return counts


def middle_extra(comm: np.ndarray, n: int) -> np.ndarray:
    """The comm terms of a min-max problem of n stages: comm[:, i - 1] on each middle stage i,
    0.0 on the end stages (docs/estimators.md §6)."""
    extra = np.zeros((len(comm), n))
    if n > 2:
        extra[:, 1:n - 1] = comm[:, :n - 2]
    return extra
