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

from fasop.estimators.fasop2024.minmax import Known, middle_extra, minmax_many
from fasop.schedule import native
from fasop.schedule.pipeline import one_f_one_b, split_stage_times

f32 = np.float32


def stage_times(table: np.ndarray, which: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Seconds of each stage's layers (counts[..., i] layers from the end of stage i - 1) on its
    plane: the entries of `table` (compute.stage_times; 0.0 for no layer, where `table` is inf)."""
    side = table.shape[-1]
    edges = np.zeros(counts.shape[:-1] + (counts.shape[-1] + 1,), dtype=np.intp)
    np.cumsum(counts, axis=-1, out=edges[..., 1:])
    index = edges[..., :-1] * side  # entry [p, a, b] of the flat table: p side^2 + a side + b
    index += edges[..., 1:]
    index += which * (side * side)  # (one take: ~3x faster than indexing with three arrays)
    times = table.reshape(-1).take(index)
    times[counts <= 0] = 0.0
    return times


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
        knowns = [None if self.known is None else self.known.setdefault((n, self.num_layers), Known())
                  for n, _ in sizes]
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
    where the min-max results of calls on the same table are kept, if they are (a
    fasop2024_minmax.Known per stage and layer count)."""
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
    t = np.ascontiguousarray(times.T)  # a row per stage: reductions over the stages run across pipelines,
    m = np.asarray(m, dtype=float)  # and a pipeline's numbers broadcast along rows (~10x faster than over short rows)
    w = np.minimum((pp - 1.0 - np.arange(pp))[:, None], m)  # steady_weights' c_i: (k-1)(m-1)/k, or
    c0 = (k - 1.0) * (m - 1) / k  # m - 1 - w_i/k where larger and w_i < m
    c = w / k
    np.subtract(m - 1, c, out=c)
    np.maximum(c, c0, out=c)
    np.copyto(c, np.broadcast_to(c0, c.shape), where=w >= m)
    busy = np.empty_like(t)  # the stages before, then m x its own
    busy[0] = 0.0
    for i in range(1, pp):
        np.add(busy[i - 1], t[i - 1], out=busy[i])
    busy += m * t
    busy[1:] += first_send
    busy[-1] += last_send
    c *= t
    chain = t.sum(axis=0) + first_send + last_send + np.maximum(c.max(axis=0), 0.0)
    return np.maximum(chain, busy.max(axis=0)) * (1 - 1e-9)


def candidate_splits(table: np.ndarray, which: np.ndarray, comm: np.ndarray, pps: np.ndarray,
                     segment_lengths: Sequence[int], known: dict | None = None) -> list[list[tuple[tuple, tuple]]]:
    """fasop2024_minmax.fasop_minmax_splits of every plan (rows as in `plan_splits`): its candidate
    splits as (reported, scheduled) counts, in its order -- one stage: every layer; one segment:
    the min-max split; an encoder and a decoder: per number of encoder stages pe (those with a
    decoder of fewer stages than its layers), the two min-max splits joined (reported both). The
    problems of all rows solved together (minmax_many), move for move the same."""
    problems = _Problems(table, segment_lengths[0], known)
    found: list[list[tuple[tuple, tuple]]] = [[] for _ in range(len(pps))]
    groups = []
    for pp in sorted(set(pps.tolist())):
        rows = np.flatnonzero(pps == pp)
        if pp == 1:
            for r in rows.tolist():
                found[r] = [((sum(segment_lengths),), (sum(segment_lengths),))]
            continue
        w, c = which[rows, :pp], comm[rows, :pp - 1]
        if len(segment_lengths) == 1:
            groups.append((rows, [(0, problems.add(w, middle_extra(c, pp)), None)]))
        else:
            n_enc, n_dec = segment_lengths
            groups.append((rows, [(pe, problems.add(w[:, :pe], middle_extra(c, pe)),
                                   problems.add(w[:, pe:], middle_extra(c, pp - pe)))
                                  for pe in range(1, min(pp, n_enc)) if pp - pe <= n_dec - 1]))
    problems.solve()
    for rows, tickets in groups:
        for _, first, second in tickets:
            reported, scheduled = problems[first]
            if second is None:
                pairs = zip(map(tuple, reported.tolist()), map(tuple, scheduled.tolist()))
            else:
                decoder = map(tuple, problems[second][0].tolist())
                joined = [a + b for a, b in zip(map(tuple, reported.tolist()), decoder)]
                pairs = zip(joined, joined)
            for r, pair in zip(rows.tolist(), pairs):
                found[r].append(pair)
    return found
