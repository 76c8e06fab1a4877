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
    count, n = which.shape
    keys = np.ascontiguousarray(np.concatenate([which.astype(np.int64), extra.view(np.int64)], axis=1))
    names, first, inverse = _distinct(keys.view(np.dtype((np.void, keys.shape[1] * 8))).ravel().tolist())
    if known is None:
        reported, scheduled = _lockstep(table, which[first], extra[first], num_layers)
        return reported[inverse], scheduled[inverse]
    found = list(map(known.get, names))
    missing = [k for k, f in enumerate(found) if f is None]
    if missing:
        if len(known) > MINMAX_KNOWN:
            known.clear()
        at = first[missing]
        reported, scheduled = _lockstep(table, which[at], extra[at], num_layers)
        for k, row in zip(missing, np.concatenate([reported, scheduled], axis=1)):
            found[k] = known[names[k]] = row
    both = np.stack(found)[inverse]
    return both[:, :n], both[:, n:]


MINMAX_KNOWN = 1 << 18
"""Min-max results a `known` dict keeps (a few hundred bytes each) before it starts over."""


def _distinct(keys: list) -> tuple[list, np.ndarray, np.ndarray]:
    """(the distinct keys in order of first appearance, the index of each one's first
    appearance, for each key the number of its distinct key)."""
    index: dict = {}
    first: list[int] = []
    inverse = []
    for k, key in enumerate(keys):
        number = index.get(key)
        if number is None:
            number = index[key] = len(first)
            first.append(k)
        inverse.append(number)
    return list(index), np.array(first, dtype=np.intp), np.array(inverse, dtype=np.intp)


def _lockstep(table: np.ndarray, which: np.ndarray, extra: np.ndarray, num_layers: int
              ) -> tuple[np.ndarray, np.ndarray]:
    """`minmax_rows` of every row."""
    count, n = which.shape
    start = [num_layers // n] * n
    for i in range(num_layers % n):
        start[i - 1] += 1
    counts = np.tile(np.array(start, dtype=np.int64), (count, 1))
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
        mx = current.max(axis=1)
        stop = moved & (mx > last)
        tied = moved & (mx == last)
        if tied.any() and history:  # steps 2/3: the maximum stayed and these counts were seen before
            seen = np.zeros(len(rows), dtype=bool)
            for before in history:
                seen |= (before[rows] == counts).all(axis=1)
            stop |= tied & seen
        local = np.arange(len(rows))
        if stop.any():  # undo the last move and stop
            undone = counts.copy()
            undone[local, previous_max] += 1
            undone[local, previous_min] -= 1
            reported[rows[stop]] = scheduled[rows[stop]] = undone[stop]
        last = mx
        imax, imin = current.argmax(axis=1), current.argmin(axis=1)
        at_max = counts[local, imax]
        quirk = ~stop & ((imax == 0) | (imax == n - 1)) & (at_max == 2)
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
        rows, last, which, extra = rows[go], last[go], which[go], extra[go]
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


def schedule_ends(times: np.ndarray, first_send: np.ndarray, last_send: np.ndarray, m: int, k: float) -> np.ndarray:
    """Stage ends (rows x pp) of 1F1B pipelines of stage times `times` (rows x pp, pp > 1),
    forward t / k and backward (k - 1) t / k (fwd-bwd-split-of-stage-sums), with only stage 0's
    forward send and the last stage's backward send (p2p-ends-only)."""
    comp = times.T
    send_fwd, send_bwd = np.zeros_like(comp), np.zeros_like(comp)
    send_fwd[0], send_bwd[-1] = first_send, last_send
    return one_f_one_b(*split_stage_times(comp, k), send_fwd, send_bwd, m).T


class _Problems:
    """Min-max problems (minmax_rows) collected by stage count and solved together: one
    lockstep run per stage count for a whole chunk."""

    def __init__(self, table: np.ndarray, num_layers: int, known: dict | None = None):
        self.table, self.num_layers, self.known = table, num_layers, known
        self.parts: dict[int, list[tuple[np.ndarray, np.ndarray]]] = defaultdict(list)
        self.solved: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {}

    def add(self, which: np.ndarray, extra: np.ndarray) -> tuple[int, int]:
        """A ticket for the (reported, scheduled) counts of these rows, once `solve`d."""
        n = which.shape[1]
        self.parts[n].append((which, extra))
        return n, len(self.parts[n]) - 1

    def solve(self) -> None:
        for n, parts in self.parts.items():
            sizes = np.cumsum([len(w) for w, _ in parts])[:-1]
            if n == 1:  # one stage takes every layer
                counts = np.full((int(sum(len(w) for w, _ in parts)), 1), self.num_layers, dtype=np.int64)
                reported = scheduled = counts
            else:
                known = None if self.known is None else self.known.setdefault((n, self.num_layers), {})
                reported, scheduled = minmax_rows(self.table, np.concatenate([w for w, _ in parts]),
                                                  np.concatenate([x for _, x in parts]), self.num_layers, known)
            self.solved[n] = list(zip(np.split(reported, sizes), np.split(scheduled, sizes)))

    def __getitem__(self, ticket: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
        return self.solved[ticket[0]][ticket[1]]


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
    for pp in np.unique(pps).tolist():
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
    for rows, w, c, tickets in groups:
        pp = w.shape[1]
        if len(segment_lengths) == 1:
            rep, sch = problems[tickets]
            t = stage_times(table, w, sch)
            e = _ends_by_m(t, c, ms[rows], k)
        else:
            rep, t, e = _encoder_decoder(problems, tickets, table, w, c, ms[rows], k)
            sch = rep
        reported[rows, :pp], scheduled[rows, :pp], times[rows, :pp], ends[rows, :pp] = rep, sch, t, e
    return reported, scheduled, times, ends


def _ends_by_m(times: np.ndarray, comm: np.ndarray, ms: np.ndarray, k: float) -> np.ndarray:
    """schedule_ends of each row, the rows of one micro-batch count scheduled together."""
    ends = np.empty_like(times)
    for m in np.unique(ms).tolist():
        at = np.flatnonzero(ms == m)
        ends[at] = schedule_ends(times[at], comm[at, 0], comm[at, -1], m, k)
    return ends


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


def _encoder_decoder(problems: _Problems, tickets: list[tuple[int, tuple, tuple]], table: np.ndarray,
                     which: np.ndarray, comm: np.ndarray, ms: np.ndarray, k: float) -> tuple[np.ndarray, ...]:
    """(counts, times, ends) of the chosen split of each plan: of its candidates
    (_encoder_decoder_problems, solved), the one with the lowest stage-0 end, the first of equals."""
    count, pp = which.shape
    counts = np.zeros((count, len(tickets), pp), dtype=np.int64)
    for q, (pe, encoder, decoder) in enumerate(tickets):
        counts[:, q, :pe], counts[:, q, pe:] = problems[encoder][0], problems[decoder][0]
    times = stage_times(table, which[:, None, :], counts)
    ends = np.full_like(times, np.inf)
    for m in np.unique(ms).tolist():
        at = np.flatnonzero(ms == m)
        ends[at] = _least_ends(times[at], comm[at, 0], comm[at, -1], m, k)
    best = ends[:, :, 0].argmin(axis=1)  # the first of equals
    rows = np.arange(count)
    return counts[rows, best], times[rows, best], ends[rows, best]


def _least_ends(times: np.ndarray, first_send: np.ndarray, last_send: np.ndarray, m: int, k: float) -> np.ndarray:
    """Stage ends of the candidate splits (times: plans x candidates x pp) that may have the
    lowest stage-0 end of their plan, inf for the others: first each plan's candidate of least
    `end_bounds`, then those whose bound is at most the stage-0 end it got (any other ends
    later, so it is neither the least nor tied with it)."""
    count, candidates, pp = times.shape
    bounds = end_bounds(times.reshape(-1, pp), np.repeat(first_send, candidates), np.repeat(last_send, candidates),
                        m, k).reshape(count, candidates)
    ends = np.full_like(times, np.inf)
    rows = np.arange(count)
    lead = bounds.argmin(axis=1)
    ends[rows, lead] = schedule_ends(times[rows, lead], first_send, last_send, m, k)
    rest = bounds <= ends[rows, lead, 0][:, None]
    rest[rows, lead] = False
    plan, split = np.nonzero(rest)
    if len(plan):
        ends[plan, split] = schedule_ends(times[plan, split], first_send[plan], last_send[plan], m, k)
    return ends


def end_bounds(times: np.ndarray, first_send: np.ndarray, last_send: np.ndarray, m: int, k: float) -> np.ndarray:
    """A lower bound on the stage-0 end of each 1F1B pipeline of schedule_ends (rows of stage
    times, pp > 1): the larger of two chains of events that run one after another -- every
    stage's time, both sends and the largest steady chain c_i t_i (schedule.steady_weights);
    and per stage i, the stages before it, its own m forwards and backwards, and the sends
    that reach or leave it -- less a relative 1e-9, more than the rounding of any chain of
    fewer than 10^6 events."""
    pp = times.shape[1]
    w = np.minimum(pp - np.arange(pp) - 1, m)
    c = np.full(pp, (k - 1.0) * (m - 1) / k)
    c = np.where((m > w) & (m - 1 - w / k > c), m - 1 - w / k, c)
    before = np.zeros_like(times)
    np.cumsum(times[:, :-1], axis=1, out=before[:, 1:])
    busy = before + m * times
    busy[:, 1:] += first_send[:, None]
    busy[:, -1] += last_send
    chain = times.sum(axis=1) + first_send + last_send + np.maximum((c * times).max(axis=1), 0.0)
    return np.maximum(chain, busy.max(axis=1)) * (1 - 1e-9)
