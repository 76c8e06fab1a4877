"""FASOP-2024's partitioner and schedule for a chunk of plans, on arrays (docs/estimators.md §5,
§6): every plan's candidate splits by the greedy min-max (for an encoder-decoder model one per
number of encoder stages), their stage times, their 1F1B runs, and the split with the lowest
stage-0 end (the first of equals).

Plans come as rows of plain arrays (`fasop2024_batch.Chunk`): `which` (the stage-time table
plane of each stage), `comm` (p2p seconds per stage boundary), `pps`, `ms`; the rows are S wide
and a plan uses its first pp entries. The schedule runs on the generic 1F1B recurrences
(`schedule.one_f_one_b`, compiled where built); everything FASOP-specific is here: the split of a
stage time t into forward t / k and backward (k - 1) t / k, the ends-only p2p
(`p2p-ends-only`), the one-stage float32 product, the encoder-decoder candidates balanced on
the encoder's layers (`encoder-costs-twice`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from fasop import native
from fasop.estimators.fasop2024_batch import first_of
from fasop.estimators.fasop2024_minmax import minmax
from fasop.schedule import one_f_one_b, split_stage_times

f32 = np.float32


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
        found = [None] * count if known is None else list(map(known.get, names))
        missing = [k for k, f in enumerate(found) if f is None]
        distinct, first, inverse = _distinct([names[k] for k in missing])
        at = np.array(missing, dtype=np.intp)[first]
        todo.append((which[at], extra[at]))
        pending.append((found, missing, distinct, inverse, known))
    solved = _solve(table, todo, num_layers)
    out = []
    for (which, _), (found, missing, distinct, inverse, known), rows in zip(problems, pending, solved):
        if known is not None:
            if len(known) > MINMAX_KNOWN:
                known.clear()
            known.update(zip(distinct, rows))
        for k, j in zip(missing, inverse.tolist()):
            found[k] = rows[j]
        count, n = which.shape
        both = np.array(found, dtype=np.int64).reshape(count, 2 * n)
        out.append((both[:, :n], both[:, n:]))
    return out


MINMAX_KNOWN = 1 << 18
"""Min-max results a `known` dict keeps (a few hundred bytes each) before it starts over."""


def _distinct(keys: list) -> tuple[list, np.ndarray, np.ndarray]:
    """(the distinct keys in order of first appearance, the index of each one's first
    appearance, for each key the number of its distinct key): fasop2024_batch.first_of."""
    first, inverse = first_of(keys)
    return [keys[k] for k in first], np.array(first, dtype=np.intp), inverse


ONE_BY_ONE = 4
"""Up to this many distinct problems, `minmax_rows` runs the reference (fasop2024_minmax.minmax)
on each: a handful of rows move faster one by one in Python than in lockstep on arrays (a
search that prunes, e.g. a pareto sweep, estimates one plan at a time)."""


def _solve(table: np.ndarray, problems: list[tuple[np.ndarray, np.ndarray]], num_layers: int) -> list[list[tuple]]:
    """`minmax_many` of every row of every set (which, extra), each row's (reported + scheduled)
    counts as one tuple: one by one (the reference) for a few rows in all, else in one lockstep
    run per range of stage counts (3-4, 5-8, 9-16, ...), the sets of fewer stages padded."""
    if sum(len(which) for which, _ in problems) <= ONE_BY_ONE:
        return [[(s.reported + s.scheduled) for s in (
            minmax.__wrapped__(tuple(_Plane(table[w]) for w in row), num_layers, tuple(x[1:]))
            for row, x in zip(which.tolist(), extra.tolist()))] for which, extra in problems]
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
            out[k] = list(map(tuple, np.concatenate([reported[start:stop, :n], scheduled[start:stop, :n]],
                                                    axis=1).tolist()))
            start = stop
    return out


class _Plane:
    """One plane of a stage-time table as fasop2024_minmax.minmax reads a stage's costs."""

    __slots__ = ("item",)

    def __init__(self, plane: np.ndarray):
        self.item = plane.item

    def stage(self, first: int, stop: int) -> float:
        return self.item(first, stop)


def _lockstep(table: np.ndarray, which: np.ndarray, extra: np.ndarray, num_layers: int, sizes: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray]:
    """`minmax_rows` of every row, row r of sizes[r] stages (its first sizes[r] columns; the rest
    padding: no layers, never a maximum or a minimum)."""
    count, n = which.shape
    stage = np.arange(n)
    valid = stage < sizes[:, None]
    rest = (num_layers % sizes)[:, None]  # the remainder goes to the last stage, then 0, 1, ...
    counts = (np.where(valid, (num_layers // sizes)[:, None], 0)
              + ((stage < rest - 1) | ((stage == sizes[:, None] - 1) & (rest >= 1)))).astype(np.int64)
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


def stage_times(table: np.ndarray, which: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Seconds of each stage's layers (counts[..., i] layers from the end of stage i - 1) on its
    plane: the entries of `table` (compute.stage_times; 0.0 for no layer, where `table` is inf)."""
    edges = np.zeros(counts.shape[:-1] + (counts.shape[-1] + 1,), dtype=np.intp)
    np.cumsum(counts, axis=-1, out=edges[..., 1:])
    return np.where(counts > 0, table[which, edges[..., :-1], edges[..., 1:]], 0.0)


def schedule_ends(times: np.ndarray, pps: np.ndarray, ms: np.ndarray, first_send: np.ndarray,
                  last_send: np.ndarray, k: float) -> np.ndarray:
    """Stage ends of 1F1B pipelines of their own stage and micro-batch counts (rows of `times`,
    padded past each pp; pp > 1), forward t / k and backward (k - 1) t / k
    (fwd-bwd-split-of-stage-sums), with only stage 0's forward send and the last stage's
    backward send (p2p-ends-only): the generic recurrences, compiled (one_f_one_b_many) or
    schedule.one_f_one_b's. Entries past a pipeline's pp are 0."""
    count, width = times.shape
    ends = np.zeros((count, width))
    if count == 0:
        return ends
    if native.kernels is None:
        shapes = pps * (int(ms.max()) + 1) + ms
        for shape in sorted(set(shapes.tolist())):
            at = np.flatnonzero(shapes == shape)
            pp, m = int(pps[at[0]]), int(ms[at[0]])
            comp = times[at, :pp].T
            send_fwd, send_bwd = np.zeros_like(comp), np.zeros_like(comp)
            send_fwd[0], send_bwd[-1] = first_send[at], last_send[at]
            ends[at, :pp] = one_f_one_b(*split_stage_times(comp, k), send_fwd, send_bwd, m).T
        return ends
    durations = np.zeros((count, 4 * width))  # per pipeline F, B, SF, SB of each stage (blocks of width)
    np.divide(times, k, out=durations[:, :width])
    np.divide((k - 1) * times, k, out=durations[:, width:2 * width])
    durations[:, 2 * width] = first_send
    durations[np.arange(count), 3 * width + pps - 1] = last_send
    native.kernels.one_f_one_b_many(durations, width, pps.astype(np.int64), ms.astype(np.int64), ends)
    return ends


class _Problems:
    """Min-max problems (minmax_rows) collected by stage count and solved together: one
    lockstep run for a whole chunk (minmax_many)."""

    def __init__(self, table: np.ndarray, num_layers: int, known: dict | None = None):
        self.table, self.num_layers, self.known = table, num_layers, known
        self.parts: dict[int, list[tuple[np.ndarray, np.ndarray]]] = defaultdict(list)
        self.solved: dict[int, tuple[np.ndarray, np.ndarray, list[int]]] = {}

    def add(self, which: np.ndarray, extra: np.ndarray) -> tuple[int, int]:
        """A ticket for the (reported, scheduled) counts of these rows, once `solve`d."""
        n = which.shape[1]
        self.parts[n].append((which, extra))
        return n, len(self.parts[n]) - 1

    def solve(self) -> None:
        sets, sizes = [], []
        for n, parts in self.parts.items():
            starts = np.cumsum([0] + [len(w) for w, _ in parts]).tolist()
            if n == 1:  # one stage takes every layer
                reported = np.full((starts[-1], 1), self.num_layers, dtype=np.int64)
                self.solved[n] = (reported, reported, starts)
            else:
                sets.append((np.concatenate([w for w, _ in parts]), np.concatenate([x for _, x in parts])))
                sizes.append((n, starts))
        knowns = [None if self.known is None else self.known.setdefault((n, self.num_layers), {}) for n, _ in sizes]
        for (n, starts), (reported, scheduled) in zip(sizes, minmax_many(self.table, sets, self.num_layers, knowns)):
            self.solved[n] = (reported, scheduled, starts)

    def __getitem__(self, ticket: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
        reported, scheduled, starts = self.solved[ticket[0]]
        at = slice(starts[ticket[1]], starts[ticket[1] + 1])
        return reported[at], scheduled[at]


def plan_splits(table: np.ndarray, which: np.ndarray, comm: np.ndarray, pps: np.ndarray, ms: np.ndarray,
                segment_lengths: Sequence[int], k: float, known: dict | None = None) -> tuple[np.ndarray, ...]:
    """(reported, scheduled, times, ends), rows of S like `which`: each plan's chosen split
    (the reported and the scheduled counts), its stage times and its 1F1B stage ends; entries
    past a plan's pp are 0. One stage: every layer, its end m x its time in float32. `known`:
    min-max results of earlier calls on the same table (minmax_rows), if kept."""
    count, width = which.shape
    layers = sum(segment_lengths)
    reported, scheduled = np.zeros((count, width), np.int64), np.zeros((count, width), np.int64)
    times, ends = np.zeros((count, width)), np.zeros((count, width))
    problems = _Problems(table, segment_lengths[0], known)
    groups = []
    for pp in sorted(set(pps.tolist())):  # (np.unique would import numpy.ma: ~10 ms a process)
        rows = np.flatnonzero(pps == pp)
        if pp == 1:  # no pipeline: m micro-batches back to back, float32
            reported[rows, 0] = scheduled[rows, 0] = layers
            times[rows, 0] = table[which[rows, 0], 0, layers]
            ends[rows, 0] = (ms[rows] * times[rows, 0]).astype(f32)
            continue
        w, c = which[rows, :pp], comm[rows, :pp - 1]
        if len(segment_lengths) == 1:
            groups.append((rows, w, c, problems.add(w, middle_extra(c, pp))))
        else:
            groups.append((rows, w, c, _encoder_decoder_problems(problems, w, c, segment_lengths)))
    problems.solve()
    if len(segment_lengths) == 2 and groups:  # (none: every plan has one stage)
        for (rows, *_), (rep, t, e) in zip(groups, _encoder_decoder(problems, groups, table, ms, width, k)):
            pp = rep.shape[1]
            reported[rows, :pp], scheduled[rows, :pp], times[rows, :pp], ends[rows, :pp] = rep, rep, t, e
        return reported, scheduled, times, ends
    for rows, w, c, tickets in groups:
        pp = w.shape[1]
        reported[rows, :pp], scheduled[rows, :pp] = problems[tickets]
        times[rows, :pp] = stage_times(table, w, scheduled[rows, :pp])
    multi = np.flatnonzero(pps > 1)
    ends[multi] = schedule_ends(times[multi], pps[multi], ms[multi], comm[multi, 0], comm[multi, pps[multi] - 2], k)
    return reported, scheduled, times, ends


def _encoder_decoder_problems(problems: _Problems, which: np.ndarray, comm: np.ndarray,
                              segment_lengths: Sequence[int]) -> list[tuple[int, tuple, tuple]]:
    """The candidate splits of plans of pp stages (rows of `which`) whose layer list is an
    encoder and a decoder of equal length, as min-max problems: per number of encoder stages
    pe, the encoder's split over stages 0..pe-1 and the decoder's over pe..pp-1, both balanced
    on the encoder's layers with local stage indices for the comm term (encoder-costs-twice,
    docs/estimators.md §6). (pe, encoder ticket, decoder ticket) per candidate."""
    n_enc, n_dec = segment_lengths
    pp = which.shape[1]
    cuts = [pe for pe in range(1, min(pp, n_enc)) if pp - pe <= n_dec - 1]
    if not cuts:
        raise ValueError(f"fasop-minmax: no encoder-decoder split of {n_enc}+{n_dec} layers over {pp} stages")
    return [(pe, problems.add(which[:, :pe], middle_extra(comm, pe)),
             problems.add(which[:, pe:], middle_extra(comm, pp - pe))) for pe in cuts]


def _encoder_decoder(problems: _Problems, groups: list, table: np.ndarray, ms: np.ndarray, width: int,
                     k: float) -> list[tuple[np.ndarray, ...]]:
    """(counts, times, ends) of the chosen split of each plan of each group (rows of one pp):
    of its candidates (_encoder_decoder_problems, solved), the one with the lowest stage-0 end,
    the first of equals. Scheduled in two calls for all groups: each plan's candidate of least
    bound (`end_bounds`), then those whose bound is at most the stage-0 end it got (any other
    ends later, so it is neither the least nor tied with it)."""
    found = []
    for rows, which, comm, tickets in groups:
        count, pp = which.shape
        counts = np.zeros((count, len(tickets), pp), dtype=np.int64)
        for q, (pe, encoder, decoder) in enumerate(tickets):
            counts[:, q, :pe], counts[:, q, pe:] = problems[encoder][0], problems[decoder][0]
        times = stage_times(table, which[:, None, :], counts)
        c = len(tickets)
        bounds = end_bounds(times.reshape(-1, pp), np.repeat(comm[:, 0], c), np.repeat(comm[:, -1], c),
                            np.repeat(ms[rows], c), k).reshape(count, c)
        found.append((rows, comm, counts, times, bounds, np.full_like(times, np.inf)))
    lead = [(np.arange(len(rows)), bounds.argmin(axis=1)) for rows, _, _, _, bounds, _ in found]
    _schedule_candidates(found, lead, ms, width, k)
    rest = []
    for (rows, _, _, _, bounds, ends), (plan, split) in zip(found, lead):
        more = bounds <= ends[plan, split, 0][:, None]
        more[plan, split] = False
        rest.append(np.nonzero(more))
    _schedule_candidates(found, rest, ms, width, k)
    chosen = []
    for rows, _, counts, times, _, ends in found:
        best, at = ends[:, :, 0].argmin(axis=1), np.arange(len(rows))  # the first of equals
        chosen.append((counts[at, best], times[at, best], ends[at, best]))
    return chosen


def _schedule_candidates(found: list, picks: list[tuple[np.ndarray, np.ndarray]], ms: np.ndarray, width: int,
                         k: float) -> None:
    """Schedules the (plan, candidate) picks of every group together (schedule_ends), into the
    groups' ends."""
    parts = []
    for (rows, comm, _, times, _, _), (plan, split) in zip(found, picks):
        pp = times.shape[2]
        padded = np.zeros((len(plan), width))
        padded[:, :pp] = times[plan, split]
        parts.append((padded, np.full(len(plan), pp), ms[rows][plan], comm[plan, 0], comm[plan, -1]))
    ends = schedule_ends(*(np.concatenate(column) for column in zip(*parts)), k)
    start = 0
    for (_, _, _, times, _, group_ends), (plan, split) in zip(found, picks):
        pp = times.shape[2]
        group_ends[plan, split] = ends[start:start + len(plan), :pp]
        start += len(plan)


def end_bounds(times: np.ndarray, first_send: np.ndarray, last_send: np.ndarray, m: np.ndarray, k: float
               ) -> np.ndarray:
    """A lower bound on the stage-0 end of each 1F1B pipeline of schedule_ends (rows of stage
    times, pp > 1): the larger of two chains of events that run one after another -- every
    stage's time, both sends and the largest steady chain c_i t_i (schedule.steady_weights);
    and per stage i, the stages before it, its own m forwards and backwards, and the sends
    that reach or leave it -- less a relative 1e-9, more than the rounding of any chain of
    fewer than 10^6 events. m: each pipeline's micro-batches."""
    pp = times.shape[1]
    m = np.asarray(m, dtype=float)[:, None]
    w = np.minimum(pp - np.arange(pp) - 1, m)
    c = np.broadcast_to((k - 1.0) * (m - 1) / k, w.shape)
    c = np.where((m > w) & (m - 1 - w / k > c), m - 1 - w / k, c)
    before = np.zeros_like(times)
    np.cumsum(times[:, :-1], axis=1, out=before[:, 1:])
    busy = before + m * times
    busy[:, 1:] += first_send[:, None]
    busy[:, -1] += last_send
    chain = times.sum(axis=1) + first_send + last_send + np.maximum((c * times).max(axis=1), 0.0)
    return np.maximum(chain, busy.max(axis=1)) * (1 - 1e-9)
