"""Pipeline schedules: when does every stage finish its last backward pass?

`one_f_one_b` is FASOP's event-level 1F1B simulation (MODEL.md §5), written as recurrences
over (stage, micro-batch) on arrays whose last axis is a batch of independent pipelines with
the same stage count and micro-batch count — so one Python loop schedules many plans at once.
Every event end is (max of the events it waits for) + its duration, so results are
bit-identical to the per-plan simulation.

Which events wait for which depends only on (pp, m), not on the times. `one_f_one_b` therefore
runs the recurrences once per (pp, m) on symbols (`_program`), recording each event as
(its inputs, its duration); events are then grouped into levels (an event's level is one more
than its latest input's) and evaluated level by level, each level one vectorised numpy step
over all its events and all pipelines of the batch. The operations per event are the same (a
maximum, exact, then one addition), so the values are bit for bit those of `_run` on arrays
(`one_f_one_b_reference`), with a few hundred numpy steps instead of ~10 per event.

For one pipeline or a few (the optimal partitioner's seeds and critical paths), the same events
also run as compiled straight-line Python on floats (`_Program.values`), ~0.1 us per event; the
critical path (`critical_path`, a cut for the partitioner) backtracks those values.

With the compiled kernels (fasop/_native.c) neither is traced nor compiled: `one_f_one_b` runs
the recurrences in C, and `critical_path` reads the chain from a traced C run (the same events,
each maximum naming its inputs in `_run`'s order, so the same chain through ties). Compiling a
(pp, m) program costs ~15 us per event, which on the optimal partitioner's deep pipelines made
most of a `fasop search`'s time (1.1 s of t5 on a10=8's 2.1 s).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Literal

import numpy as np

from fasop import native

COMPILE_EVENTS = 30000
"""Schedules of more events (e.g. pp = 32, m = 128) are always evaluated level by level."""
SCALAR_PER_LEVEL = 35
"""`one_f_one_b` runs the compiled straight-line code once per pipeline while pipelines x events
< this x levels (one event in Python takes ~0.1 us, one numpy step per level ~3.5 us), else one
numpy step per level for the whole batch."""

FLOAT_PIPELINES = 3
"""Untraced schedules (reuse=False) of at most this many pipelines run one pipeline at a time on
Python floats (~0.2 us per event) rather than on arrays of the batch (~2 us per event, nearly
whatever the batch)."""


def one_f_one_b(fwd: np.ndarray, bwd: np.ndarray, send_fwd: np.ndarray, send_bwd: np.ndarray,
                num_microbatches: int, *, reuse: bool = True) -> np.ndarray:
    """Stage end times, shape (pp, batch).

    fwd, bwd: compute seconds of one micro-batch per stage, shape (pp, batch).
    send_fwd[i]: seconds stage i spends sending activations forward; send_bwd[i]: sending
    gradients backward (FASOP charges only stage 0's forward and the last stage's backward).
    Stage i runs w_i = min(pp-i-1, m) warm-up forwards, then alternates one forward and one
    backward, then drains the remaining backwards.
    reuse=False: the caller schedules this (pp, m) once, so tracing a program would not pay:
    the recurrences run untraced, on Python floats for up to FLOAT_PIPELINES pipelines, else on
    the arrays (as `one_f_one_b_reference`, sends that are 0 throughout not added). Each event is
    the same maximum and addition either way.
    """
    pp, batch = fwd.shape
    if native.kernels is not None:  # the compiled recurrences: the same operations, the same bits
        return _compiled(fwd, bwd, send_fwd, send_bwd, num_microbatches)
    if not reuse:  # the caller schedules this (pp, m) once: tracing would not pay
        if batch <= FLOAT_PIPELINES:  # the recurrences on Python floats, one pipeline at a time
            ends = [_run(d[:pp], d[pp:2 * pp], d[2 * pp:3 * pp], d[3 * pp:], num_microbatches, 0.0, max)
                    for d in _rows(fwd, bwd, send_fwd, send_bwd)]
            return np.array(ends, dtype=float).T.reshape(pp, batch)
        # the recurrences on the arrays, skipping the additions of sends that are 0 in every pipeline
        # (FASOP's middle stages: p2p-ends-only), ~20% of the operations
        send_fwd, send_bwd = ([_NOTHING if not row.any() else row for row in rows] for rows in (send_fwd, send_bwd))
        return np.array(_run(list(fwd), list(bwd), send_fwd, send_bwd, num_microbatches, np.zeros(batch), np.maximum))
    program = _program(pp, num_microbatches)
    if program.compiles and batch * program.num_values < SCALAR_PER_LEVEL * len(program.levels):
        # few pipelines: the straight-line code, one at a time
        outputs = program.outputs.tolist()
        ends = [[values[k] for k in outputs] for values in map(program.values, _rows(fwd, bwd, send_fwd, send_bwd))]
        return np.array(ends).T.reshape(pp, batch)
    return program.run(np.concatenate([fwd, bwd, send_fwd, send_bwd], axis=0))[program.outputs]


# ---------------------------------------------------------------------------- one pipeline as an object
EventKind = Literal["fwd", "bwd", "send_fwd", "send_bwd"]


@dataclass(frozen=True)
class Event:
    """One event of a 1F1B schedule: a stage's forward or backward compute of one micro-batch,
    or its send of that micro-batch's activations forward (`send_fwd`, to stage + 1) or
    gradients backward (`send_bwd`, to stage - 1)."""

    stage: int
    microbatch: int
    kind: EventKind
    start_s: float
    end_s: float


class Schedule:
    """The 1F1B schedule of one pipeline: per-stage durations in; stage end times, every
    event's start and end (a timeline), micro-batches in flight per stage, and lower bounds out.

    fwd_s[i], bwd_s[i]: stage i's forward and backward seconds for one micro-batch;
    send_fwd_s[i] / send_bwd_s[i]: its seconds sending a micro-batch forward / backward (default
    0; only sends that exist, i < pp - 1 forward and i > 0 backward, are events). The values are
    those of `one_f_one_b` (the same recurrences, the same float operations, bit for bit)."""

    def __init__(self, fwd_s, bwd_s, num_microbatches: int, send_fwd_s=None, send_bwd_s=None):
        self.fwd_s, self.bwd_s = tuple(map(float, fwd_s)), tuple(map(float, bwd_s))
        pp = len(self.fwd_s)
        if pp < 1 or len(self.bwd_s) != pp or num_microbatches < 1:
            raise ValueError(f"Schedule: need pp >= 1 stages of fwd and bwd and m >= 1, got {pp}, "
                             f"{len(self.bwd_s)}, {num_microbatches}")
        self.send_fwd_s = tuple(map(float, send_fwd_s)) if send_fwd_s is not None else (0.0,) * pp
        self.send_bwd_s = tuple(map(float, send_bwd_s)) if send_bwd_s is not None else (0.0,) * pp
        self.num_stages, self.num_microbatches = pp, num_microbatches

    def _columns(self) -> tuple[np.ndarray, ...]:
        return tuple(np.array(v, dtype=float)[:, None] for v in (self.fwd_s, self.bwd_s, self.send_fwd_s,
                                                                 self.send_bwd_s))

    @cached_property
    def stage_end_s(self) -> tuple[float, ...]:
        """When each stage ends its last backward (`one_f_one_b`)."""
        return tuple(one_f_one_b(*self._columns(), self.num_microbatches, reuse=False)[:, 0].tolist())

    @property
    def pipeline_time_s(self) -> float:
        """Stage 0's end: the pipeline's time."""
        return self.stage_end_s[0]

    @cached_property
    def events(self) -> tuple[Event, ...]:
        """Every event, in the order the recurrences compute them (`_run` on floats)."""
        pp, m = self.num_stages, self.num_microbatches
        recorded: list[Event] = []
        counts: dict[tuple[int, str], int] = {}

        def timed(kind: str, values: tuple[float, ...]) -> list["_Timed"]:
            return [_Timed(value, stage, kind, recorded, counts) for stage, value in enumerate(values)]

        _run(timed("fwd", self.fwd_s), timed("bwd", self.bwd_s), timed("send_fwd", self.send_fwd_s),
             timed("send_bwd", self.send_bwd_s), m, 0.0, max)
        return tuple(recorded)

    def stage_events(self, stage: int) -> tuple[Event, ...]:
        """Stage `stage`'s events by start time (computes, then sends, at equal starts)."""
        order = {"fwd": 0, "bwd": 0, "send_fwd": 1, "send_bwd": 1}
        return tuple(sorted((e for e in self.events if e.stage == stage),
                            key=lambda e: (e.start_s, order[e.kind], e.end_s)))

    @cached_property
    def in_flight(self) -> tuple[int, ...]:
        """Per stage, the most micro-batches at once whose forward has started and whose backward
        has not ended (the activations it holds): w_i + 1 = min(pp - i, m) for 1F1B."""
        most = []
        for stage in range(self.num_stages):
            held = peak = 0
            for e in self.stage_events(stage):
                if e.kind == "fwd":
                    held += 1
                    peak = max(peak, held)
                elif e.kind == "bwd":
                    held -= 1
            most.append(peak)
        return tuple(most)

    @cached_property
    def lower_bound_s(self) -> float:
        """A pipeline time the schedule never beats, from its durations alone: the larger of
        micro-batch 0's round trip (every forward, backward and send) and, per stage, what
        reaches it, its m forwards and m backwards, and the way its last gradient drains back."""
        f, b, sf, sb, m = self.fwd_s, self.bwd_s, self.send_fwd_s, self.send_bwd_s, self.num_microbatches
        pp = self.num_stages
        trip = sum(f) + sum(b) + sum(sf[:pp - 1]) + sum(sb[1:])
        busy = max(sum(f[j] + sf[j] + b[j] + sb[j + 1] for j in range(i)) + m * (f[i] + b[i]) for i in range(pp))
        return max(trip, busy)


class _Timed:
    """A duration that records the event it ends: `start + it` is start + its seconds, as a
    float (the same addition), and appends (stage, micro-batch, kind, start, end) to `recorded`
    (micro-batches count up per stage and kind: the recurrences take them in order)."""

    __slots__ = ("seconds", "stage", "kind", "recorded", "counts")

    def __init__(self, seconds: float, stage: int, kind: str, recorded: list, counts: dict):
        self.seconds, self.stage, self.kind, self.recorded, self.counts = seconds, stage, kind, recorded, counts

    def __radd__(self, start: float) -> float:
        end = start + self.seconds
        key = (self.stage, self.kind)
        microbatch = self.counts.get(key, 0)
        self.counts[key] = microbatch + 1
        self.recorded.append(Event(self.stage, microbatch, self.kind, start, end))
        return end


def _compiled(fwd: np.ndarray, bwd: np.ndarray, send_fwd: np.ndarray, send_bwd: np.ndarray,
              num_microbatches: int) -> np.ndarray:
    """`one_f_one_b` by the compiled recurrences (fasop/_native.c)."""
    pp, batch = fwd.shape
    durations = _durations(fwd, bwd, send_fwd, send_bwd)
    ends = np.empty((batch, pp))
    native.kernels.one_f_one_b(durations, pp, num_microbatches, ends)
    return ends.T


class _Nothing:
    """A duration that is 0 in every pipeline of a batch: `values + it` is `values`, without an
    addition. The same bits: x + 0.0 (or -0.0) is x for every x the recurrences compute (sums
    and maxima of non-negative durations from +0.0, never -0.0)."""

    __array_ufunc__ = None  # ndarray + it -> it.__radd__

    def __radd__(self, values):
        return values


_NOTHING = _Nothing()


def _durations(fwd: np.ndarray, bwd: np.ndarray, send_fwd: np.ndarray, send_bwd: np.ndarray) -> np.ndarray:
    """Per pipeline, its durations as one C-contiguous float64 row: the 4 pp rows F, B, SF, SB
    (`_Program`'s order, and the compiled kernels')."""
    return np.ascontiguousarray(np.concatenate([fwd, bwd, send_fwd, send_bwd], axis=0).T, dtype=float)


def _rows(fwd: np.ndarray, bwd: np.ndarray, send_fwd: np.ndarray, send_bwd: np.ndarray) -> list[list[float]]:
    """`_durations` as lists of floats."""
    return _durations(fwd, bwd, send_fwd, send_bwd).tolist()


def one_f_one_b_reference(fwd: np.ndarray, bwd: np.ndarray, send_fwd: np.ndarray, send_bwd: np.ndarray,
                          num_microbatches: int) -> np.ndarray:
    """`one_f_one_b` computed by running the recurrences on the arrays directly, event by event
    in FASOP's order: the definition the traced program is tested against."""
    return np.array(_run(list(fwd), list(bwd), list(send_fwd), list(send_bwd), num_microbatches,
                         np.zeros(fwd.shape[1]), np.maximum))


def critical_path(comp: np.ndarray, send_fwd: np.ndarray, send_bwd: np.ndarray,
                  num_microbatches: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`one_f_one_b` (fwd = comp/3, bwd = 2 comp/3) that also returns, for each pipeline of the
    batch, the chain of events that sets stage 0's end: (E_0, weights, const) with E_0 =
    weights . comp + const, weights of shape (pp, batch). As every chain is a path of the same
    dependency graph whatever the stage times, weights . comp' + const <= E_0(comp') for every
    other comp' (same pp, m and sends): a linear lower bound (a cut) for the partitioner.

    Where an event waits for several, the chain follows the first of the latest (in the order the
    recurrences name them); weights and const add up the chain's durations in event order, so
    they are bit for bit those of `critical_path_reference`. The chain comes from the compiled
    kernels' traced run when they are built, else from the traced program.
    """
    pp, batch = comp.shape
    rows = _durations(comp / 3, 2 * comp / 3, send_fwd, send_bwd)
    ends, weights, const = np.empty(batch), np.zeros((pp, batch)), np.zeros(batch)
    if native.kernels is not None and pp * num_microbatches <= native.kernels.TRACE_MAX_CELLS:
        # the compiled traced run: the same events, values and chain (the first of equal inputs in
        # _run's order), without a program to trace and compile per (pp, m)
        stage_ends = np.empty(pp)
        for col, durations in enumerate(rows):
            chain = native.kernels.one_f_one_b_traced(durations, pp, num_microbatches, stage_ends)
            ends[col] = stage_ends[0]
            weights[:, col], const[col] = _chain_sums(chain, durations.tolist(), pp)
        return ends, weights, const
    program = _program(pp, num_microbatches)  # no kernels, or more cells than their int32 event ids cover
    for col, durations in enumerate(rows.tolist()):
        values = program.values(durations) if program.compiles else \
            program.run(np.array(durations)[:, None])[:, 0].tolist()
        ends[col] = values[program.outputs[0]]
        weights[:, col], const[col] = _chain_sums(program.chain(values, int(program.outputs[0])), durations, pp)
    return ends, weights, const


def stage_chains(comp: np.ndarray, send_fwd: np.ndarray, send_bwd: np.ndarray,
                 num_microbatches: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For one pipeline (comp, send_fwd, send_bwd of shape (pp,); fwd = comp/3, bwd = 2 comp/3):
    (ends, weights, const) with ends[i] = weights[i] . comp + const[i] the end of stage i along
    its critical chain of events (as `critical_path` for stage 0, for every stage). The graph is
    the same whatever the times, so weights[i] . comp' + const[i] <= stage i's end under any
    other comp': the paths the MILP certificate (split_milp) adds as rows."""
    pp = len(comp)
    comp = np.asarray(comp, dtype=float)[:, None]
    rows = _durations(comp / 3, 2 * comp / 3, np.asarray(send_fwd, dtype=float)[:, None],
                      np.asarray(send_bwd, dtype=float)[:, None])[0]
    program = _program(pp, num_microbatches)
    values = program.run(rows[:, None])[:, 0].tolist()
    durations = rows.tolist()
    ends, weights, const = np.empty(pp), np.zeros((pp, pp)), np.zeros(pp)
    for i, out in enumerate(program.outputs.tolist()):
        ends[i] = values[out]
        weights[i], const[i] = _chain_sums(program.chain(values, out), durations, pp)
    return ends, weights, const


def _chain_sums(chain: list[int], durations: list[float], pp: int) -> tuple[list[float], float]:
    """(weights, const) of a chain of events (their duration rows, first event first): 1/3 of a
    stage's time per forward, 2/3 per backward, the sends' seconds; added in chain order. (Sends
    of 0 seconds, events of _run that the compiled run skips, add 0.0: no change.)"""
    w, c = [0.0] * pp, 0.0
    third, two_thirds = 1 / 3, 2 / 3
    for row in chain:
        kind, stage = divmod(row, pp)
        if kind == 0:
            w[stage] += third
        elif kind == 1:
            w[stage] += two_thirds
        else:
            c += durations[row]
    return w, c


def critical_path_reference(comp: np.ndarray, send_fwd: np.ndarray, send_bwd: np.ndarray,
                            num_microbatches: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`critical_path` computed by running the recurrences on augmented arrays (time, weights,
    const) event by event: the definition it is tested against."""
    pp, batch = comp.shape
    unit = np.eye(pp)[:, :, None]  # unit[i] has a 1 in row i

    def augment(times: np.ndarray, weight: np.ndarray, const: np.ndarray) -> np.ndarray:
        # rows: 0 = time, 1..pp = weight of each stage's comp, pp+1 = constant seconds
        return np.concatenate([times[None, :], weight, const[None, :]], axis=0)

    zeros = np.zeros(batch)
    fwd = [augment(comp[i] / 3, unit[i] / 3 * np.ones(batch), zeros) for i in range(pp)]
    bwd = [augment(2 * comp[i] / 3, unit[i] * 2 / 3 * np.ones(batch), zeros) for i in range(pp)]
    sf = [augment(send_fwd[i], np.zeros((pp, batch)), send_fwd[i]) for i in range(pp)]
    sb = [augment(send_bwd[i], np.zeros((pp, batch)), send_bwd[i]) for i in range(pp)]

    def mx(a, b):
        return np.where(a[0] >= b[0], a, b)

    ends = _run(fwd, bwd, sf, sb, num_microbatches, np.zeros((pp + 2, batch)), mx)
    return ends[0][0], ends[0][1:pp + 1], ends[0][pp + 1]


def _run(F: list, B: list, SF: list, SB: list, m: int, zero, mx) -> list:
    """The 1F1B recurrences over any values supporting + and mx (arrays, augmented arrays)."""
    pp = len(F)

    def grid():
        return [[zero] * m for _ in range(pp)]

    fce, fse, fre, frs = grid(), grid(), grid(), grid()
    bce, bse, bre, brs = grid(), grid(), grid(), grid()
    warm = [min(pp - i - 1, m) for i in range(pp)]

    def forward_send(i: int, j: int, end_compute, first: bool) -> None:
        # sends start when the compute ends and the next stage is ready to receive
        end = end_compute + SF[i] if first else mx(end_compute, frs[i + 1][j]) + SF[i]
        fse[i][j] = fre[i + 1][j] = end

    def backward_send(i: int, j: int) -> None:
        end = mx(bce[i][j], brs[i - 1][j]) + SB[i]
        bse[i][j] = bre[i - 1][j] = end

    # warm-up forwards
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
                forward_send(i, j, fce[i][j], j == 0)

    # steady state: one forward, then one backward
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
                backward_send(i, j)
            elif j == m - 1 - warm[0] and j + 1 < m:
                brs[0][j + 1] = bce[0][j]

    # cool-down backwards (index j-1 wraps to m-1 at j = 0, as in FASOP)
    for j in range(m):
        for i in range(pp - 1, -1, -1):
            if j < m - warm[i]:
                continue
            start = mx(mx(bce[i][j - 1], bre[i][j]), bse[i][j - 1])
            bce[i][j] = start + B[i]
            if j < m - 1:
                brs[i][j + 1] = bce[i][j]
            if i > 0:
                backward_send(i, j)

    return [bce[i][m - 1] for i in range(pp)]


def steady_weights(num_stages: int, num_microbatches: int) -> np.ndarray:
    """c_i with stage 0's end >= (all stage times + both end sends) + c_i t_i for every stage i:
    the larger of two chains of events that run one after another (f = t/3, b = 2t/3).

    - Steady: micro-batch 0 forward to stage i (f_j, j < i, and f_i), on through the later
      stages and back (t_j, j > i, and the sends), then stage i's first backward b_i; after it
      stage i still runs m-1 backwards and m-1-w_i forwards (w_i = min(pp-i-1, m) warm-up
      forwards), and the last gradient drains back (b_j, j < i): sum_j t_j + sends +
      (m - 1 - w_i/3) t_i. Valid when m > w_i.
    - Backwards: micro-batch 0 forward through every stage and back to stage i, stage i's m
      backwards in a row, the last gradient drains back: sum_j t_j + sends + (m-1) 2 t_i / 3.
      Valid for every stage; the larger where w_i >= m - 1 (short pipelines of few micro-batches).
    """
    m, pp = num_microbatches, num_stages
    warm = np.minimum(pp - 1 - np.arange(pp), m)
    return np.maximum(np.where(m > warm, m - 1 - warm / 3, 0.0), 2 * (m - 1) / 3)


def one_f_one_b_bound(k: int, before: float, chain, t: np.ndarray, rest: dict, *, num_stages: int,
                      num_microbatches: int, send_first: float, send_last: float,
                      weights: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Lower bounds on stage 0's end time (of `one_f_one_b`) over pipelines whose stages < k take
    `before` seconds in all, stage k takes t (an array of choices), and the stages after k sum to
    at least rest["sum"] with a largest stage of at least rest["max"] and a largest
    steady_weights-weighted stage of at least rest["wmax"]. Each term is a chain of events that
    must run one after another:

    - micro-batch 0 forward through every stage and back: all stage times + the two sends;
    - stage i: micro-batch 0 reaches it (the stages before it), it runs m forwards and m
      backwards, the last gradient drains back through the stages before it: sum_{j<i} t_j +
      m t_i (+ the sends on that way); `chain` carries the largest such term over stages < k;
    - the slowest stage after k likewise: everything before it + m x rest["max"];
    - every stage's steady chain (`steady_weights`): all stage times + sends + c_i t_i; with
      rest["capped"] and rest["below"] (partition.capped_completion) the rest's sum and its
      largest c_i t_i are bounded together rather than each at its least.
    - stage i's two round trips (`round_trip_weights`): micro-batch 0 reaches stage i, goes on
      through the later stages and back; stage i runs its steady forwards and backwards up to
      its last forward; micro-batch m-1 goes through the later stages and back; stage i's last
      backward; the gradient drains back: sum_{j<i} t_j + 2 sum_{j>i} t_j + (m - w_i) t_i (+ the
      sends), i.e. 2 (all stage times) + a_i t_i - sum_{j<i} t_j with a_i = m - w_i - 2 >= 0.
      The balanced splits of a homogeneous pipeline end on this chain through an early stage.
    `chain` carries (largest own chain, largest c_i t_i, largest a_i t_i - sum_{j<i} t_j + sends)
    over stages < k (None at the start).
    `weights`: steady_weights(pp, m), if the caller has it already.
    Returns (bounds, chains including stage k, one row per choice of t).
    """
    m, pp = num_microbatches, num_stages
    own_before, steady_before, trips_before = (0.0, 0.0, -np.inf) if chain is None else chain
    shared = rest.get("_1f1b")
    if shared is None:  # what every node with these choices shares (rest is the partitioner's per-node cache)
        c = (steady_weights(pp, m) if weights is None else weights)[k]
        steady = c * t
        sends = send_first + send_last
        everything = t + rest["sum"] + sends  # + before: micro-batch 0 through every stage and back
        busy = m * t + ((send_first if k > 0 else 0.0) + (send_last if k == pp - 1 else 0.0))  # + before: own chain
        chain = everything + np.maximum(steady, rest["wmax"])
        if rest.get("capped") is not None:
            # the rest's sum and its largest weighted stage together: a rest whose largest lies in
            # (below[j], cap j] sums to at least capped[j] (partition.capped_completion)
            largest = np.maximum(np.maximum(steady[None, :], rest["below"][:, None]), rest["wmax"][None, :])
            chain = np.maximum(chain, t + sends + (rest["capped"] + largest).min(axis=0))
        terms = np.maximum(chain, busy)
        if k < pp - 1:  # the slowest later stage's own chain
            terms = np.maximum(terms, t + send_first + m * rest["max"])
        twice = 2 * (t + rest["sum"])  # + 2 before: every stage time twice
        a = round_trip_weights(pp, m)[k]
        trips = np.full_like(t, -np.inf)
        if a >= 0:  # stage k's two round trips: + before - before
            trips = a * t + ((send_first if k > 0 else 0.0) + (send_last if k < pp - 1 else 0.0))
            terms = np.maximum(terms, twice + trips)
        shared = rest["_1f1b"] = (steady, everything, busy, terms, float(np.maximum(steady, rest["wmax"]).min()),
                                  float(terms.min()), twice, trips)
    steady, everything, busy, terms, least_steady, least_terms, twice, trips = shared
    if steady_before > least_steady:  # an earlier stage's steady chain is the longer for some choices
        terms = np.maximum(terms, everything + steady_before)
    bounds = before + terms
    if trips_before > -np.inf:  # an earlier stage's two round trips
        bounds = np.maximum(bounds, 2 * before + twice + trips_before)
    if own_before > before + least_terms:  # an earlier stage's own chain is the longer for some choices
        bounds = np.maximum(bounds, own_before)
    return bounds, _Chains(before, busy, own_before, steady, steady_before, trips - before, trips_before)


class _Chains:
    """The `chain` of each choice of one_f_one_b_bound: (largest own chain, largest c_i t_i,
    largest a_i t_i - sum_{j<i} t_j + sends)."""

    __slots__ = ("before", "busy", "own_before", "steady", "steady_before", "trips", "trips_before")

    def __init__(self, before: float, busy: np.ndarray, own_before: float, steady: np.ndarray, steady_before: float,
                 trips: np.ndarray, trips_before: float):
        self.before, self.busy, self.own_before = before, busy, own_before
        self.steady, self.steady_before = steady, steady_before
        self.trips, self.trips_before = trips, trips_before

    def __getitem__(self, i: int) -> tuple[float, float, float]:
        return (max(self.own_before, self.before + float(self.busy[i])), max(self.steady_before, float(self.steady[i])),
                max(self.trips_before, float(self.trips[i])))


def round_trip_weights(num_stages: int, num_microbatches: int) -> np.ndarray:
    """a_i = m - w_i - 2 (w_i = min(pp-i-1, m) warm-up forwards), -1 where negative: stage 0's
    end >= sends + 2 (all stage times) + a_i t_i - sum_{j<i} t_j for every stage with a_i >= 0
    (`one_f_one_b_bound`, the two round trips). Stage i's steady part between micro-batch 0's
    backward and micro-batch m-1's forward is m-1-w_i forwards and m-2-w_i backwards."""
    warm = np.minimum(num_stages - 1 - np.arange(num_stages), num_microbatches)
    a = num_microbatches - warm - 2.0
    return np.where(a >= 0, a, -1.0)


# ---------------------------------------------------------------------------- traced program
class _Program:
    """The 1F1B recurrences of one (pp, m) as levels of events: for each level, (input value
    indices per input slot, duration row per event, output value index per event); and the same
    events as straight-line Python on floats, for one pipeline at a time (`values`)."""

    def __init__(self, num_values: int, levels: list, outputs: np.ndarray, events: list):
        self.num_values, self.levels, self.outputs = num_values, levels, outputs
        self.events = events
        """events[k-1] = (input value indices, duration row) of value k; value 0 is zero."""
        self.rows = [0] + [row for _, row in events]
        self.compiles = len(events) <= min(COMPILE_EVENTS, SCALAR_PER_LEVEL * len(levels))
        """Compiled `values` pays: not too big to compile (~15 us per event), and quicker for one
        pipeline than the levels (~0.1 us per event against ~3.5 us per level)."""

    def run(self, durations: np.ndarray) -> np.ndarray:
        """Every value for a batch of pipelines, level by level: durations has the 4 pp rows F, B,
        SF, SB and a column per pipeline; the result a row per value."""
        values = np.zeros((self.num_values, durations.shape[1]))
        for inputs, duration, out in self.levels:
            latest = values[inputs[0]] if inputs[0].ndim == 1 else values[inputs[0]].max(axis=1)
            values[out] = latest + durations[duration]
        return values

    @cached_property
    def values(self) -> Callable[[list[float]], list[float]]:
        """durations (the 4 pp rows F, B, SF, SB of one pipeline) -> every value (0: zero,
        k: event k), as floats: each event is (the largest of its inputs) + its duration, the same
        two float operations as the level-by-level evaluation, so the same bits. Compiled
        straight-line code: ~0.1 us per event, once compiled (~15 us per event)."""
        lines = ["def values(d):", " v0 = 0.0"]
        for k, (inputs, row) in enumerate(self.events, start=1):
            latest = f"v{inputs[0]}"
            if len(inputs) == 2:
                latest = f"(v{inputs[0]} if v{inputs[0]} >= v{inputs[1]} else v{inputs[1]})"
            elif len(inputs) > 2:
                latest = "max(" + ", ".join(f"v{i}" for i in inputs) + ")"
            lines.append(f" v{k} = {latest} + d[{row}]")
        lines.append(" return [" + ", ".join(f"v{k}" for k in range(self.num_values)) + "]")
        namespace: dict = {}
        exec(compile("\n".join(lines), f"<1f1b pp={len(self.outputs)}>", "exec"), namespace)
        return namespace["values"]

    def chain(self, values: list[float], end: int) -> list[int]:
        """Duration rows of the chain of events that sets value `end`, first event first: from
        `end` back to zero, each event's first latest input (the order the recurrences name them,
        as `critical_path_reference`'s comparisons choose)."""
        rows, k = [], end
        while k:
            rows.append(self.rows[k])
            inputs = self.events[k - 1][0]
            latest = max(values[i] for i in inputs)
            k = next(i for i in inputs if values[i] == latest)
        rows.reverse()
        return rows


class _Symbol:
    """A value of the traced recurrences: index into the value table."""

    __slots__ = ("index", "tape")

    def __init__(self, index: int, tape: "_Tape"):
        self.index, self.tape = index, tape

    def __add__(self, duration: "_Duration") -> "_Symbol":
        return self.tape.event((self.index,), duration.row)


class _Latest:
    """The maximum of some values, before its duration is added."""

    __slots__ = ("inputs", "tape")

    def __init__(self, inputs: tuple, tape: "_Tape"):
        self.inputs, self.tape = inputs, tape

    def __add__(self, duration: "_Duration") -> "_Symbol":
        return self.tape.event(self.inputs, duration.row)


class _Duration:
    __slots__ = ("row",)

    def __init__(self, row: int):
        self.row = row


class _Tape:
    def __init__(self):
        self.events: list[tuple[tuple[int, ...], int]] = []  # value k+1 = event k; value 0 = zero

    def event(self, inputs: tuple[int, ...], row: int) -> _Symbol:
        self.events.append((tuple(dict.fromkeys(inputs)), row))
        return _Symbol(len(self.events), self)

    def latest(self, a, b) -> _Latest:
        inputs = (a.inputs if isinstance(a, _Latest) else (a.index,)) + \
                 (b.inputs if isinstance(b, _Latest) else (b.index,))
        return _Latest(inputs, self)


@lru_cache(maxsize=256)
def _program(pp: int, m: int) -> _Program:
    tape = _Tape()
    durations = [[_Duration(kind * pp + i) for i in range(pp)] for kind in range(4)]  # F, B, SF, SB
    ends = _run(*durations, m, _Symbol(0, tape), tape.latest)
    level = [0] * (len(tape.events) + 1)
    by_level: dict[int, list[int]] = {}
    for k, (inputs, _) in enumerate(tape.events, start=1):
        level[k] = 1 + max(level[i] for i in inputs)
        by_level.setdefault(level[k], []).append(k)
    levels = []
    for lv in sorted(by_level):
        members = by_level[lv]
        arity = max(len(tape.events[k - 1][0]) for k in members)
        slots = [np.array([tape.events[k - 1][0][min(s, len(tape.events[k - 1][0]) - 1)] for k in members])
                 for s in range(arity)]  # short input lists repeat their last input: max unchanged
        slots = slots if arity == 1 else [np.stack(slots, axis=1)]
        rows = np.array([tape.events[k - 1][1] for k in members])
        levels.append((slots, rows, np.array(members)))
    return _Program(len(tape.events) + 1, levels, np.array([e.index for e in ends]), tape.events)
