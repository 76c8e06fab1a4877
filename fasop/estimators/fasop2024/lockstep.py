"""FASOP-2024's greedy min-max (fasop2024_minmax.minmax, docs/estimators.md §6) of many problems
at once, on arrays: every row moves in lockstep with the others, move for move as the
reference, and leaves the arrays when it stops. fasop2024_minmax.minmax_many prepares the
problems (equal ones once, known ones read back) and calls `lockstep` per range of stage counts.
"""

from __future__ import annotations

import numpy as np

HASH = np.arange(1, 65, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
"""Weights of a row's counts in its hash (sum of count x weight, modulo 2^64), stage by stage:
the counts seen before are looked up by hash, and only a match compared count by count."""


def lockstep(table: np.ndarray, which: np.ndarray, extra: np.ndarray, counts: np.ndarray, sizes: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray]:
    """fasop2024_minmax.minmax_rows of every row from its `counts` (minmax's start), row r of
    sizes[r] stages: its first sizes[r] columns; the rest padding (which -1, extra -inf, counts
    0: no layers, never a maximum or a minimum). Each row's stage times are read from the flat
    table (one index per entry); rows that stop leave the arrays.

    Stage i's entry [a, b] of plane p is flat[p side^2 + side a + b] with b = a + counts[i]:
    with span = (side + 1) counts and its running sum (side + 1) b, the index is offset + that
    sum, offset = p side^2 - side counts; a move changes two entries of each. Padding reads a
    finite entry ([0, 0, 1]) plus -inf: never the maximum, and, the times compared as unsigned
    integers (their bits: the order of non-negative floats, a negative one above them all),
    never the minimum."""
    count, n = which.shape
    side = table.shape[-1]
    flat, step = table.reshape(-1), side + 1
    span = counts * step
    offset = np.where(which >= 0, which * (side * side), 1 - int(counts[0].sum()) * step)
    offset -= side * counts
    weights = np.resize(HASH, n)  # (stages past 64 share weights: a match is compared anyway)
    key = counts.astype(np.uint64) @ weights
    rows = np.arange(count)
    last = np.full(count, 1e6)
    moved = False
    previous_max = previous_min = np.zeros(count, dtype=np.intp)
    history: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (rows, span, keys) before each move
    since = np.zeros(count, dtype=np.intp)  # each row's first move at its present maximum
    reported = np.zeros((count, n), dtype=np.int64)
    scheduled = np.zeros((count, n), dtype=np.int64)
    index = np.empty((count, n), dtype=np.intp)
    while len(rows):
        at = index[: len(rows)]
        np.cumsum(span, axis=1, out=at)
        at += offset
        current = flat.take(at)
        current += extra
        imax, imin = current.argmax(axis=1), current.view(np.uint64).argmin(axis=1)
        top = np.arange(0, len(rows) * n, n) + imax  # (flat positions: ~2x faster than [rows, columns])
        mx = current.take(top)
        if moved:
            stop = mx > last
            tied = np.flatnonzero(mx == last)
            if len(tied):  # steps 2/3: the maximum stayed and these counts were seen before
                stop[tied[_seen(history[int(since[tied].min()):], rows[tied], span[tied], key[tied])]] = True
            since[mx != last] = len(history)
            if stop.any():  # undo the last move and stop
                undone = _shifted(span.compress(stop, axis=0) // step, previous_min[stop], previous_max[stop])
                reported[rows[stop]] = scheduled[rows[stop]] = undone
        else:
            stop = np.zeros(len(rows), dtype=bool)
        last = mx
        at_max = span.take(top)
        quirk = ((imax == 0) | (imax == sizes - 1)) & (at_max == 2 * step) & ~stop
        if quirk.any():  # step 5 quirk: report a changed split, schedule the unchanged one
            kept = span.compress(quirk, axis=0) // step
            scheduled[rows[quirk]] = kept
            reported[rows[quirk]] = _shifted(kept.copy(), imin[quirk], imax[quirk]) if moved else kept
        single = (at_max <= step) & ~stop & ~quirk
        if single.any():
            reported[rows[single]] = scheduled[rows[single]] = span.compress(single, axis=0) // step
        go = ~(stop | quirk | single)
        keys = np.empty(count, dtype=np.uint64)
        keys[rows] = key
        history.append((rows, span, keys))  # (the moves below change a compacted copy, or this one's copy)
        if go.all():
            span = span.copy()
        else:
            span, offset, extra = (a.compress(go, axis=0) for a in (span, offset, extra))  # (a[go]: ~3x slower)
            key = key[go]
            imax, imin, rows, last, since, sizes = imax[go], imin[go], rows[go], last[go], since[go], sizes[go]
        first = np.arange(0, len(rows) * n, n)  # move one layer from the slowest to the fastest
        top, bottom = first + imax, first + imin
        for a, change in ((span.reshape(-1), step), (offset.reshape(-1), -side)):
            a[top] -= change
            a[bottom] += change
        key += weights[imin]
        key -= weights[imax]
        previous_max, previous_min = imax, imin
        moved = True
    return reported, scheduled


def _seen(history: list[tuple[np.ndarray, np.ndarray, np.ndarray]], problems: np.ndarray, span: np.ndarray,
          key: np.ndarray) -> np.ndarray:
    """For each of `problems` (rows of the first arrays), was its `span` (hash `key`) among the
    earlier ones in `history` ((rows ascending, span, every row's hash) triples, each one's rows
    a subset of the one before)? Looked up by hash, a match compared entry by entry. (Only
    those since its maximum last fell: the maximum never rises, and the counts of a larger
    maximum differ.)"""
    seen = np.zeros(len(problems), dtype=bool)
    for rows, before, keys in history:
        match = np.flatnonzero(keys[problems] == key)
        if len(match):
            at = np.searchsorted(rows, problems[match])
            seen[match[(before[at] == span[match]).all(axis=1)]] = True
    return seen


def _shifted(counts: np.ndarray, minus: np.ndarray, plus: np.ndarray) -> np.ndarray:
    """counts (a copy of rows) with one layer taken from column minus[r] of row r and given to
    column plus[r]: a move, or (minus and plus swapped) its undoing."""
    where = np.arange(len(counts))
    counts[where, minus] -= 1
    counts[where, plus] += 1
    return counts
