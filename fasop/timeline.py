"""The events of an estimate's 1F1B pipeline, for its timeline (Gantt) figure and `fasop explain`.

The events are those of `schedule.Schedule` (stage, micro-batch, kind, start_s, end_s; kind
`fwd`, `bwd`, `send_fwd`, `send_bwd`) as the estimator schedules the estimate (its
`schedule_of(estimate)`: its own forward / backward split and the sends it charges), so stage 0's
last event ends where the estimator's pipeline does. Sends of 0 seconds are left out. After the pipeline
come the all-reduces as events of micro-batch -1: `dp_sync` after each stage's end and
`embedding_sync` ending at the step time.

The critical path is the chain of events that sets stage 0's end: from its last backward, each
event's predecessor is the input its start waited for (the first of the latest, in the order the
recurrences name them, as schedule.critical_path chooses). It is read by running the schedule's
own recurrences (`recurrences.run`) once more on times that remember their last event.
"""

from __future__ import annotations

from dataclasses import dataclass


from fasop import recurrences
from fasop.schedule import Event, Schedule


@dataclass(frozen=True)
class Timeline:
    events: tuple[Event, ...]
    critical: tuple[int, ...]
    """Indices into `events` of the critical path, first event first."""
    pipeline_time_s: float
    step_time_s: float
    num_stages: int
    num_microbatches: int
    stage_end_s: tuple[float, ...] = ()
    """Each stage's last pipeline event's end in this schedule."""


def timeline(estimate, schedule: Schedule) -> Timeline:
    """The pipeline events of an estimate, then the all-reduces of each stage after its end.
    schedule: the estimator's own (`schedule_of(estimate)`)."""
    pp, m = estimate.plan.pp, estimate.plan.num_microbatches
    sched = schedule
    events = [e for e in sched.events if e.end_s > e.start_s or e.kind in ("fwd", "bwd")]
    index = {(e.stage, e.kind, e.microbatch): k for k, e in enumerate(events)}
    chain = [index[key] for key in _chain(sched) if key in index]
    ends = list(sched.stage_end_s)
    events += _syncs(estimate, ends)
    return Timeline(tuple(events), tuple(chain), pipeline_time_s=ends[0], step_time_s=estimate.step_time_s,
                    num_stages=pp, num_microbatches=m, stage_end_s=tuple(ends))


class _Time:
    """A time that remembers the event it ends (`key`, `before`: the chain so far)."""

    __slots__ = ("t", "chain")

    def __init__(self, t: float, chain):
        self.t, self.chain = t, chain


class _Duration:
    __slots__ = ("seconds", "stage", "kind", "counts")

    def __init__(self, seconds: float, stage: int, kind: str, counts: dict):
        self.seconds, self.stage, self.kind, self.counts = seconds, stage, kind, counts

    def __radd__(self, start: _Time) -> _Time:
        key = (self.stage, self.kind)
        microbatch = self.counts.get(key, 0)  # numbered as Schedule numbers them
        self.counts[key] = microbatch + 1
        return _Time(start.t + self.seconds, ((self.stage, self.kind, microbatch), start.chain))


def _later(a: _Time, b: _Time) -> _Time:
    """max as the recurrences take it on floats (Python's max: the first of equals)."""
    return b if b.t > a.t else a


def _chain(sched: Schedule) -> list[tuple[int, str, int]]:
    """(stage, kind, micro-batch) of the events on the critical path, first first."""
    counts: dict = {}
    durations = [[_Duration(v, i, kind, counts) for i, v in enumerate(values)]
                 for kind, values in (("fwd", sched.fwd_s), ("bwd", sched.bwd_s), ("send_fwd", sched.send_fwd_s),
                                      ("send_bwd", sched.send_bwd_s))]
    end = recurrences.run(*durations, sched.num_microbatches, _Time(0.0, None), _later)[0]
    keys, link = [], end.chain
    while link is not None:
        keys.append(link[0])
        link = link[1]
    return keys[::-1]


def _syncs(estimate, ends: list[float]) -> list[Event]:
    """The DP all-reduce after each stage's end and the embedding all-reduce before the step's
    end, on the first and last stages. The estimate keeps the DP all-reduce of the stage that sets
    the step time; stages differ in it only by their bus (docs/estimators.md §7), so it is drawn on the
    stages of that stage's bus only."""
    out = []
    dp, emb = estimate.dp_allreduce_s, estimate.embedding_allreduce_s
    if dp > 0:
        last = min(range(len(ends)), key=lambda i: (abs(ends[i] + dp + emb - estimate.step_time_s), i))
        bus = estimate.stage_node_types[last].intra_node_shared
        out += [Event(i, -1, "dp_sync", end, end + dp) for i, end in enumerate(ends)
                if estimate.stage_node_types[i].intra_node_shared == bus]
    if emb > 0:
        start = estimate.step_time_s - emb
        out += [Event(i, -1, "embedding_sync", start, estimate.step_time_s) for i in (0, len(ends) - 1)]
    return out
