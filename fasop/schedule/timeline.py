"""The events of an estimate's 1F1B pipeline, for its timeline (Gantt) figure and `fasop explain`.

The events are those of `schedule.Schedule` (stage, micro-batch, kind, start_s, end_s; kind
`fwd`, `bwd`, `send_fwd`, `send_bwd`) as the estimator schedules the estimate (its
`schedule_of(estimate)`: its own forward / backward split and the sends it charges), so stage 0's
last event ends where the estimator's pipeline does. Sends of 0 seconds are left out. After the pipeline
come the all-reduces as events of micro-batch -1: `dp_sync` after each stage's end and
`embedding_sync` ending at the step time.

The critical path is the chain of events that sets stage 0's end (`Schedule.critical_path`):
from its last backward, each event's predecessor is the input its start waited for (the first of
the latest, in the order the recurrences name them).
"""

from __future__ import annotations

from dataclasses import dataclass

from fasop.schedule.pipeline import Event, Schedule


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
    chain = [index[(e.stage, e.kind, e.microbatch)] for e in (sched.events[k] for k in sched.critical_path(0))
             if (e.stage, e.kind, e.microbatch) in index]
    ends = list(sched.stage_end_s)
    events += _syncs(estimate, ends)
    return Timeline(tuple(events), tuple(chain), pipeline_time_s=ends[0], step_time_s=estimate.step_time_s,
                    num_stages=pp, num_microbatches=m, stage_end_s=tuple(ends))


def _syncs(estimate, ends: list[float]) -> list[Event]:
    """The DP all-reduce and the embedding all-reduce before the step's end, on the first and last
    stages. An estimate that states the DP sync's part not overlapped with the backward (its
    step_parts' `DP sync not overlapped`: the analytic estimator) has the all-reduce end that long
    after each stage's end, so it is drawn where the step time puts it (over the backward's tail
    when overlapped, not past the step's end). Otherwise (fasop-2024) it follows each stage's end. The estimate keeps the DP all-reduce of the stage that sets
    the step time; stages differ in it only by their bus (docs/estimators.md §7), so it is drawn on the
    stages of that stage's bus only."""
    out = []
    dp, emb = estimate.dp_allreduce_s, estimate.embedding_allreduce_s
    exposed = dict(getattr(estimate, "step_parts", ()) or ()).get("DP sync not overlapped")
    if dp > 0 and exposed is not None:  # overlapped with the backward: it ends `exposed` after the stage's end
        out += [Event(i, -1, "dp_sync", end + exposed - dp, end + exposed) for i, end in enumerate(ends)]
    elif dp > 0:
        last = min(range(len(ends)), key=lambda i: (abs(ends[i] + dp + emb - estimate.step_time_s), i))
        bus = estimate.stage_node_types[last].intra_node_shared
        out += [Event(i, -1, "dp_sync", end, end + dp) for i, end in enumerate(ends)
                if estimate.stage_node_types[i].intra_node_shared == bus]
    if emb > 0:
        start = estimate.step_time_s - emb
        out += [Event(i, -1, "embedding_sync", start, estimate.step_time_s) for i in (0, len(ends) - 1)]
    return out
