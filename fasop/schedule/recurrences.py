"""The 1F1B recurrences (docs/estimators.md §5), written once, and their Python evaluation: the
fallback where the compiled kernels (fasop/schedule/_native.c) are not built, and the reference they are
tested against.

`run` states the recurrences over any values with + and a maximum. fasop runs it on two kinds:

- `stage_ends`: each stage's end for a batch of pipelines, on numpy arrays (one column per
  pipeline, np.maximum), or on Python floats for a few pipelines (FLOAT_PIPELINES);
- `trace`: one pipeline on floats that remember the event they end and, for each event, the
  event its start waited for (the first of its latest inputs, in the order `run` names them):
  every event's start and end, and each stage's critical chain (`chain`).

Every event ends at (the largest of its inputs) + its duration, one exact maximum and one float
addition whatever the values, so both give the same bits, and so do the kernels.
"""

from __future__ import annotations

import numpy as np

FLOAT_PIPELINES = 3
"""`stage_ends` runs batches of at most this many pipelines one at a time on Python floats
(~0.2 us per event) rather than on arrays of the batch (~2 us per event, nearly whatever the
batch)."""
KINDS = ("fwd", "bwd", "send_fwd", "send_bwd")
"""The four kinds of events, in the order of the duration rows (F, B, SF, SB)."""


def run(F: list, B: list, SF: list, SB: list, m: int, zero, mx) -> list:
    """The 1F1B recurrences over any values supporting + and mx (floats, arrays, traced times):
    each stage's last backward end. The events in this order: the warm-up forwards, then per
    micro-batch one forward and one backward of every stage, then the cool-down backwards."""
    pp = len(F)
    # per stage and micro-batch: forward compute end, forward send end, forward received, ready to
    # receive the next forward; the same for backwards
    grids = tuple([[zero] * m for _ in range(pp)] for _ in range(8))
    warm = [min(pp - i - 1, m) for i in range(pp)]
    _warm_up(grids, F, SF, m, warm, zero, mx)
    _steady(grids, F, B, SF, SB, m, warm, zero, mx)
    _cool_down(grids, B, SB, m, warm, mx)
    bce = grids[4]
    return [bce[i][m - 1] for i in range(pp)]


def _backward_send(grids: tuple, SB: list, i: int, j: int, mx) -> None:
    """Stage i's backward send of micro-batch j: when its compute ends and stage i - 1 is ready."""
    bce, bse, bre, brs = grids[4:]
    bse[i][j] = bre[i - 1][j] = mx(bce[i][j], brs[i - 1][j]) + SB[i]


def _warm_up(grids: tuple, F: list, SF: list, m: int, warm: list[int], zero, mx) -> None:
    """Stage i's first warm[i] forwards, and their sends (a send starts when the compute ends and
    the next stage is ready to receive)."""
    fce, fse, fre, frs = grids[:4]
    pp = len(F)
    for j in range(m):
        for i in range(pp):
            if j >= warm[i]:
                continue
            if i == 0:
                start = zero if j == 0 else fse[0][j - 1]
            else:
                start = fre[i][j] if j == 0 else mx(fse[i][j - 1], fre[i][j])
            fce[i][j] = start + F[i]
            if i > 0 and j < warm[i] - 1:
                frs[i][j + 1] = fce[i][j]
            if i < pp - 1:
                end = fce[i][j] + SF[i] if j == 0 else mx(fce[i][j], frs[i + 1][j]) + SF[i]
                fse[i][j] = fre[i + 1][j] = end


def _steady(grids: tuple, F: list, B: list, SF: list, SB: list, m: int, warm: list[int], zero, mx) -> None:
    """The steady state: per micro-batch j, every stage's next forward, then (last stage first)
    every stage's backward of j."""
    fce, fse, fre, frs, bce, bse, bre, brs = grids
    pp = len(F)
    for j in range(m):
        for i in range(pp):
            f = j + warm[i]
            if f > m - 1:
                continue
            if j == 0:
                start = mx(zero if f == 0 else fse[i][f - 1], fre[i][f])
            else:
                start = bce[0][j - 1] if i == 0 else mx(bse[i][j - 1], fre[i][f])
            fce[i][f] = start + F[i]
            if i < pp - 1:
                brs[i][j] = fce[i][f]
                ready = zero if (j == 0 and f == 0) else frs[i + 1][f]
                fse[i][f] = fre[i + 1][f] = mx(fce[i][f], ready) + SF[i]
        for i in range(pp - 1, -1, -1):
            if j > m - warm[i] - 1:
                continue
            g = j + warm[i]
            start = mx(mx(zero if i == 0 else fse[i][g], bre[i][j]), fce[i][g])
            bce[i][j] = start + B[i]
            if i > 0:
                if g + 1 < m:
                    frs[i][g + 1] = bce[i][j]
                elif j + 1 < m:
                    brs[i][j + 1] = bce[i][j]
                _backward_send(grids, SB, i, j, mx)
            elif j == m - 1 - warm[0] and j + 1 < m:
                brs[0][j + 1] = bce[0][j]


def _cool_down(grids: tuple, B: list, SB: list, m: int, warm: list[int], mx) -> None:
    """The backwards left after the steady state (index j-1 wraps to m-1 at j = 0, as in FASOP)."""
    bce, bse, bre, brs = grids[4:]
    for j in range(m):
        for i in range(len(B) - 1, -1, -1):
            if j < m - warm[i]:
                continue
            start = mx(mx(bce[i][j - 1], bre[i][j]), bse[i][j - 1])
            bce[i][j] = start + B[i]
            if j < m - 1:
                brs[i][j + 1] = bce[i][j]
            if i > 0:
                _backward_send(grids, SB, i, j, mx)


def stage_ends(fwd: np.ndarray, bwd: np.ndarray, send_fwd: np.ndarray, send_bwd: np.ndarray,
               num_microbatches: int) -> np.ndarray:
    """Each stage's end, shape (pp, batch), of a batch of pipelines: fwd, bwd, send_fwd,
    send_bwd of shape (pp, batch), seconds of one micro-batch per stage (float64)."""
    fwd, bwd, send_fwd, send_bwd = (np.asarray(x, dtype=float) for x in (fwd, bwd, send_fwd, send_bwd))
    pp, batch = fwd.shape
    m = num_microbatches
    if batch <= FLOAT_PIPELINES:  # one pipeline at a time, on Python floats
        rows = np.concatenate([fwd, bwd, send_fwd, send_bwd], axis=0).T.tolist()
        ends = [run(d[:pp], d[pp:2 * pp], d[2 * pp:3 * pp], d[3 * pp:], m, 0.0, max) for d in rows]
        return np.array(ends, dtype=float).T.reshape(pp, batch)
    # on the arrays, skipping the additions of sends that are 0 in every pipeline (FASOP's middle
    # stages: p2p-ends-only), ~20% of the operations
    send_fwd, send_bwd = ([_NOTHING if not row.any() else row for row in rows] for rows in (send_fwd, send_bwd))
    return np.array(run(list(fwd), list(bwd), send_fwd, send_bwd, m, np.zeros(batch), np.maximum))


class _Nothing:
    """A duration that is 0 in every pipeline of a batch: `values + it` is `values`, without an
    addition. The same bits: x + 0.0 (or -0.0) is x for every x the recurrences compute (sums
    and maxima of non-negative durations from +0.0, never -0.0)."""

    __array_ufunc__ = None  # ndarray + it -> it.__radd__

    def __radd__(self, values):
        return values


_NOTHING = _Nothing()


# ---------------------------------------------------------------------------- one pipeline, traced
TracedEvent = tuple[int, str, int, float, float, int]
"""(stage, kind, micro-batch, start, end, the index of the event whose end its start is, -1 for 0)."""


def trace(fwd, bwd, send_fwd, send_bwd, num_microbatches: int) -> tuple[list[TracedEvent], list[int]]:
    """(events, last) of one pipeline (per-stage seconds; sends as in `run`): every event in the
    order the recurrences compute them (micro-batches counted per stage and kind in that order),
    and last[i], the index of stage i's last backward."""
    events: list[TracedEvent] = []
    durations = [[_Step(float(s), i, kind, events) for i, s in enumerate(values)]
                 for kind, values in zip(KINDS, (fwd, bwd, send_fwd, send_bwd))]
    ends = run(*durations, num_microbatches, _At(0.0, -1), _later)
    return events, [end.event for end in ends]


def chain(events: list[TracedEvent], last: int) -> list[int]:
    """Indices of the events that set event `last`'s end, first event first: from it back to the
    start, each event's start is the end of the one before."""
    out = []
    while last >= 0:
        out.append(last)
        last = events[last][5]
    return out[::-1]


class _At:
    """A time and the index of the event that ends at it (-1: the start, 0 s)."""

    __slots__ = ("t", "event")

    def __init__(self, t: float, event: int):
        self.t, self.event = t, event


def _later(a: _At, b: _At) -> _At:
    """The maximum as Python's max takes it on floats: the first of equals."""
    return b if b.t > a.t else a


class _Step:
    """A duration that records the event it ends: `start + it` is start.t + its seconds (the
    same float addition) and appends the event to `events` (one _Step per stage and kind, so it
    counts that stage's micro-batches of its kind: the recurrences take them in order)."""

    __slots__ = ("seconds", "stage", "kind", "events", "count")

    def __init__(self, seconds: float, stage: int, kind: str, events: list):
        self.seconds, self.stage, self.kind, self.events, self.count = seconds, stage, kind, events, 0

    def __radd__(self, start: _At) -> _At:
        end = start.t + self.seconds
        events = self.events
        events.append((self.stage, self.kind, self.count, start.t, end, start.event))
        self.count += 1
        return _At(end, len(events) - 1)
