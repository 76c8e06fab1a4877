"""Pipeline schedules: when does every stage finish its last backward pass?

`one_f_one_b` runs the 1F1B recurrences (recurrences.run, docs/estimators.md §5) on arrays
whose last axis is a batch of independent pipelines with the same stage count and micro-batch
count -- so one call schedules many plans at once: in C where the compiled kernels are built
(fasop/_native.c), else as a traced program (recurrences.program: levels of events, one numpy
step per level, or straight-line Python for one pipeline), else on the arrays directly. Every
event end is (max of the events it waits for) + its duration, so every runner gives the bits
of the recurrences on floats (`one_f_one_b_reference`, the definition tests compare with).

`Schedule` is one pipeline as an object: its events' start and end times (a timeline), its
micro-batches in flight per stage and a lower bound. `critical_path` is the chain of events that
sets stage 0's end, as a linear function of the stage times (a cut for the optimal
partitioner); fasop/schedule_bounds.py bounds stage 0's end from stage times (`steady_weights`,
`one_f_one_b_bound`, re-exported here). Stage times split into forward and backward by a factor (`split_stage_times`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Literal

import numpy as np

from fasop import native
from fasop.recurrences import SCALAR_PER_LEVEL, run
from fasop.recurrences import program as program_of
from fasop.schedule_bounds import one_f_one_b_bound, round_trip_weights, steady_weights  # noqa: F401 -- re-exported

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
            ends = [run(d[:pp], d[pp:2 * pp], d[2 * pp:3 * pp], d[3 * pp:], num_microbatches, 0.0, max)
                    for d in _rows(fwd, bwd, send_fwd, send_bwd)]
            return np.array(ends, dtype=float).T.reshape(pp, batch)
        # the recurrences on the arrays, skipping the additions of sends that are 0 in every pipeline
        # (FASOP's middle stages: p2p-ends-only), ~20% of the operations
        send_fwd, send_bwd = ([_NOTHING if not row.any() else row for row in rows] for rows in (send_fwd, send_bwd))
        return np.array(run(list(fwd), list(bwd), send_fwd, send_bwd, num_microbatches, np.zeros(batch), np.maximum))
    program = program_of(pp, num_microbatches)
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
        """Every event, in the order the recurrences compute them (`recurrences.run` on floats)."""
        pp, m = self.num_stages, self.num_microbatches
        recorded: list[Event] = []
        counts: dict[tuple[int, str], int] = {}

        def timed(kind: str, values: tuple[float, ...]) -> list["_Timed"]:
            return [_Timed(value, stage, kind, recorded, counts) for stage, value in enumerate(values)]

        run(timed("fwd", self.fwd_s), timed("bwd", self.bwd_s), timed("send_fwd", self.send_fwd_s),
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
    (`recurrences.Program`'s order, and the compiled kernels')."""
    return np.ascontiguousarray(np.concatenate([fwd, bwd, send_fwd, send_bwd], axis=0).T, dtype=float)


def _rows(fwd: np.ndarray, bwd: np.ndarray, send_fwd: np.ndarray, send_bwd: np.ndarray) -> list[list[float]]:
    """`_durations` as lists of floats."""
    return _durations(fwd, bwd, send_fwd, send_bwd).tolist()


def one_f_one_b_reference(fwd: np.ndarray, bwd: np.ndarray, send_fwd: np.ndarray, send_bwd: np.ndarray,
                          num_microbatches: int) -> np.ndarray:
    """`one_f_one_b` computed by running the recurrences on the arrays directly, event by event
    in FASOP's order: the definition the traced program is tested against."""
    return np.array(run(list(fwd), list(bwd), list(send_fwd), list(send_bwd), num_microbatches,
                         np.zeros(fwd.shape[1]), np.maximum))


def split_stage_times(comp: np.ndarray, fwd_bwd_factor: float) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) seconds of stage times `comp` (forward + backward) whose whole is
    `fwd_bwd_factor` x the forward: comp / k and (k - 1) comp / k."""
    return comp / fwd_bwd_factor, (fwd_bwd_factor - 1) * comp / fwd_bwd_factor


def critical_path(comp: np.ndarray, send_fwd: np.ndarray, send_bwd: np.ndarray, num_microbatches: int, *,
                  fwd_bwd_factor: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`one_f_one_b` (fwd, bwd = split_stage_times(comp, fwd_bwd_factor)) that also returns, for each pipeline of the
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
    rows = _durations(*split_stage_times(comp, fwd_bwd_factor), send_fwd, send_bwd)
    ends, weights, const = np.empty(batch), np.zeros((pp, batch)), np.zeros(batch)
    if native.kernels is not None and pp * num_microbatches <= native.kernels.TRACE_MAX_CELLS:
        # the compiled traced run: the same events, values and chain (the first of equal inputs in
        # recurrences.run's order), without a program to trace and compile per (pp, m)
        stage_ends = np.empty(pp)
        for col, durations in enumerate(rows):
            chain = native.kernels.one_f_one_b_traced(durations, pp, num_microbatches, stage_ends)
            ends[col] = stage_ends[0]
            weights[:, col], const[col] = _chain_sums(chain, durations.tolist(), pp, fwd_bwd_factor)
        return ends, weights, const
    program = program_of(pp, num_microbatches)  # no kernels, or more cells than their int32 event ids cover
    for col, durations in enumerate(rows.tolist()):
        values = program.values(durations) if program.compiles else \
            program.run(np.array(durations)[:, None])[:, 0].tolist()
        ends[col] = values[program.outputs[0]]
        weights[:, col], const[col] = _chain_sums(program.chain(values, int(program.outputs[0])), durations, pp,
                                                  fwd_bwd_factor)
    return ends, weights, const


def stage_chains(comp: np.ndarray, send_fwd: np.ndarray, send_bwd: np.ndarray, num_microbatches: int, *,
                 fwd_bwd_factor: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For one pipeline (comp, send_fwd, send_bwd of shape (pp,); fwd, bwd = split_stage_times):
    (ends, weights, const) with ends[i] = weights[i] . comp + const[i] the end of stage i along
    its critical chain of events (as `critical_path` for stage 0, for every stage). The graph is
    the same whatever the times, so weights[i] . comp' + const[i] <= stage i's end under any
    other comp': the paths the MILP certificate (split_milp) adds as rows."""
    pp = len(comp)
    comp = np.asarray(comp, dtype=float)[:, None]
    rows = _durations(*split_stage_times(comp, fwd_bwd_factor), np.asarray(send_fwd, dtype=float)[:, None],
                      np.asarray(send_bwd, dtype=float)[:, None])[0]
    program = program_of(pp, num_microbatches)
    values = program.run(rows[:, None])[:, 0].tolist()
    durations = rows.tolist()
    ends, weights, const = np.empty(pp), np.zeros((pp, pp)), np.zeros(pp)
    for i, out in enumerate(program.outputs.tolist()):
        ends[i] = values[out]
        weights[i], const[i] = _chain_sums(program.chain(values, out), durations, pp, fwd_bwd_factor)
    return ends, weights, const


def _chain_sums(chain: list[int], durations: list[float], pp: int, k: float) -> tuple[list[float], float]:
    """(weights, const) of a chain of events (their duration rows, first event first): 1/k of a
    stage's time per forward, (k - 1)/k per backward (k: the fwd_bwd_factor), the sends'
    seconds; added in chain order. (Sends of 0 seconds, events of _run that the compiled run
    skips, add 0.0: no change.)"""
    w, c = [0.0] * pp, 0.0
    third, two_thirds = 1 / k, (k - 1) / k
    for row in chain:
        kind, stage = divmod(row, pp)
        if kind == 0:
            w[stage] += third
        elif kind == 1:
            w[stage] += two_thirds
        else:
            c += durations[row]
    return w, c


def critical_path_reference(comp: np.ndarray, send_fwd: np.ndarray, send_bwd: np.ndarray, num_microbatches: int, *,
                            fwd_bwd_factor: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`critical_path` computed by running the recurrences on augmented arrays (time, weights,
    const) event by event: the definition it is tested against."""
    pp, batch = comp.shape
    unit = np.eye(pp)[:, :, None]  # unit[i] has a 1 in row i

    def augment(times: np.ndarray, weight: np.ndarray, const: np.ndarray) -> np.ndarray:
        # rows: 0 = time, 1..pp = weight of each stage's comp, pp+1 = constant seconds
        return np.concatenate([times[None, :], weight, const[None, :]], axis=0)

    zeros = np.zeros(batch)
    k = fwd_bwd_factor
    fwd = [augment(comp[i] / k, unit[i] / k * np.ones(batch), zeros) for i in range(pp)]
    bwd = [augment((k - 1) * comp[i] / k, unit[i] * (k - 1) / k * np.ones(batch), zeros) for i in range(pp)]
    sf = [augment(send_fwd[i], np.zeros((pp, batch)), send_fwd[i]) for i in range(pp)]
    sb = [augment(send_bwd[i], np.zeros((pp, batch)), send_bwd[i]) for i in range(pp)]

    def mx(a, b):
        return np.where(a[0] >= b[0], a, b)

    ends = run(fwd, bwd, sf, sb, num_microbatches, np.zeros((pp + 2, batch)), mx)
    return ends[0][0], ends[0][1:pp + 1], ends[0][pp + 1]
