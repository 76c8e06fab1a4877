"""Pipeline schedules: when does every stage finish its last backward pass?

`Schedule` is one 1F1B pipeline as an object: per-stage durations in; stage ends, every event's
start and end (a timeline), micro-batches in flight per stage, the chain of events that sets a
stage's end, and a lower bound out. For many pipelines at once (the estimators' batches):
`one_f_one_b` (stage ends), `critical_path` (stage 0's chain as a linear function of the stage
times: a cut for the optimal partitioner) and `stage_chains` (every stage's, for the MILP
certificate). All of them run the 1F1B recurrences of fasop/schedule/recurrences.py (docs/estimators.md
§5): in C where the compiled kernels are built (fasop/schedule/_native.c), else the Python reference
there, with the same bits either way. fasop/schedule/bounds.py bounds stage 0's end from stage
times (`steady_weights`, `one_f_one_b_bound`, re-exported here). Stage times split into forward
and backward by a factor (`split_stage_times`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Literal

import numpy as np

from fasop.schedule import native
from fasop.schedule.bounds import one_f_one_b_bound, round_trip_weights, steady_weights  # noqa: F401 -- re-exported
from fasop.schedule.recurrences import KINDS, chain, stage_ends, trace


def one_f_one_b(fwd: np.ndarray, bwd: np.ndarray, send_fwd: np.ndarray, send_bwd: np.ndarray,
                num_microbatches: int) -> np.ndarray:
    """Stage end times, shape (pp, batch).

    fwd, bwd: compute seconds of one micro-batch per stage, shape (pp, batch).
    send_fwd[i]: seconds stage i spends sending activations forward; send_bwd[i]: sending
    gradients backward (FASOP charges only stage 0's forward and the last stage's backward).
    Stage i runs w_i = min(pp-i-1, m) warm-up forwards, then alternates one forward and one
    backward, then drains the remaining backwards.
    """
    if native.kernels is None:
        return stage_ends(fwd, bwd, send_fwd, send_bwd, num_microbatches)
    pp, batch = fwd.shape
    ends = np.empty((batch, pp))
    native.kernels.one_f_one_b(_durations(fwd, bwd, send_fwd, send_bwd), pp, num_microbatches, ends)
    return ends.T


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
    event's start and end (a timeline), micro-batches in flight per stage, critical chains and a
    lower bound out.

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

    @cached_property
    def _trace(self):
        return trace(self.fwd_s, self.bwd_s, self.send_fwd_s, self.send_bwd_s, self.num_microbatches)

    @cached_property
    def events(self) -> tuple[Event, ...]:
        """Every event, in the order the recurrences compute them."""
        return tuple(Event(stage, microbatch, kind, start, end) for stage, kind, microbatch, start, end, _ in self._trace[0])

    @cached_property
    def stage_end_s(self) -> tuple[float, ...]:
        """When each stage ends its last backward."""
        events, last = self._trace
        return tuple(events[k][4] for k in last)

    @property
    def pipeline_time_s(self) -> float:
        """Stage 0's end: the pipeline's time."""
        return self.stage_end_s[0]

    def critical_path(self, stage: int = 0) -> tuple[int, ...]:
        """Indices into `events` of the chain that sets `stage`'s end, first event first: from its
        last backward back to the start, each event's start is the end of the one before (the
        first of its latest inputs, in the order the recurrences name them)."""
        events, last = self._trace
        return tuple(chain(events, last[stage]))

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


# ---------------------------------------------------------------------------- critical paths as cuts
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
    recurrences name them); weights and const add up the chain's durations in event order. The
    chain comes from the compiled kernels' traced run when they are built, else from
    recurrences.trace and chain: the same chain, the same bits (tests/test_native.py).
    """
    pp, batch = comp.shape
    rows = _durations(*split_stage_times(comp, fwd_bwd_factor), send_fwd, send_bwd)
    ends, weights, const = np.empty(batch), np.zeros((pp, batch)), np.zeros(batch)
    kernels = native.kernels
    compiled = kernels is not None and pp * num_microbatches <= kernels.TRACE_MAX_CELLS  # int32 event ids
    stage_ends_ = np.empty(pp)
    for col, durations in enumerate(rows):
        if compiled:
            path = kernels.one_f_one_b_traced(durations, pp, num_microbatches, stage_ends_)
            ends[col] = stage_ends_[0]
        else:
            events, last = trace(*durations.reshape(4, pp), num_microbatches)
            path = _rows(events, chain(events, last[0]), pp)
            ends[col] = events[last[0]][4]
        weights[:, col], const[col] = _chain_sums(path, durations.tolist(), pp, fwd_bwd_factor)
    return ends, weights, const


def stage_chains(comp: np.ndarray, send_fwd: np.ndarray, send_bwd: np.ndarray, num_microbatches: int, *,
                 fwd_bwd_factor: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For one pipeline (comp, send_fwd, send_bwd of shape (pp,); fwd, bwd = split_stage_times):
    (ends, weights, const) with ends[i] = weights[i] . comp + const[i] the end of stage i along
    its critical chain of events (as `critical_path` for stage 0, for every stage). The graph is
    the same whatever the times, so weights[i] . comp' + const[i] <= stage i's end under any
    other comp': the paths the MILP certificate (split_milp) adds as rows."""
    pp = len(comp)
    fwd, bwd = split_stage_times(np.asarray(comp, dtype=float), fwd_bwd_factor)
    durations = np.concatenate([fwd, bwd, np.asarray(send_fwd, dtype=float), np.asarray(send_bwd, dtype=float)])
    events, last = trace(*durations.reshape(4, pp), num_microbatches)
    ends, weights, const = np.empty(pp), np.zeros((pp, pp)), np.zeros(pp)
    for i, end in enumerate(last):
        ends[i] = events[end][4]
        weights[i], const[i] = _chain_sums(_rows(events, chain(events, end), pp), durations.tolist(), pp,
                                           fwd_bwd_factor)
    return ends, weights, const


def _rows(events: list, path: list[int], pp: int) -> list[int]:
    """The duration rows (kind x pp + stage, the order of `_durations`) of a chain of traced events."""
    kind_row = {kind: k * pp for k, kind in enumerate(KINDS)}
    return [kind_row[events[k][1]] + events[k][0] for k in path]


def _chain_sums(chain_rows: list[int], durations: list[float], pp: int, k: float) -> tuple[list[float], float]:
    """(weights, const) of a chain of events (their duration rows, first event first): 1/k of a
    stage's time per forward, (k - 1)/k per backward (k: the fwd_bwd_factor), the sends'
    seconds; added in chain order. (Sends of 0 seconds, events the compiled run skips, add 0.0:
    no change.)"""
    w, c = [0.0] * pp, 0.0
    third, two_thirds = 1 / k, (k - 1) / k
    for row in chain_rows:
        kind, stage = divmod(row, pp)
        if kind == 0:
            w[stage] += third
        elif kind == 1:
            w[stage] += two_thirds
        else:
            c += durations[row]
    return w, c


def _durations(fwd: np.ndarray, bwd: np.ndarray, send_fwd: np.ndarray, send_bwd: np.ndarray) -> np.ndarray:
    """Per pipeline, its durations as one C-contiguous float64 row: the 4 pp rows F, B, SF, SB
    (the compiled kernels' order)."""
    return np.ascontiguousarray(np.concatenate([fwd, bwd, send_fwd, send_bwd], axis=0).T, dtype=float)
