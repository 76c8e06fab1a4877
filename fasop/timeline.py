"""The events of an estimate's 1F1B pipeline, for its timeline (Gantt) figure.

Each event is (stage, micro-batch, kind, start, end), kind one of `fwd`, `bwd`, `send_fwd`,
`send_bwd`, with the times the estimate's schedule computed: the pipeline is FASOP's
(schedule.py, MODEL.md §5), run on the estimate's own durations (fwd = compute/3, bwd =
2 compute/3, the sends the estimator charges), so the last event of stage 0 ends at the
estimate's pipeline time, bit for bit. After the pipeline, each stage's DP all-reduce and the
embedding all-reduce (`sync` events, micro-batch -1) end at the step time.

The events are read from the schedule's own recurrences (`schedule._run`), run once on values
that record each addition as an event: no second simulator. The critical path is the chain of
events that sets stage 0's end, each event's predecessor being the input its start waited for
(the first of the latest, as the recurrences choose).
"""

from __future__ import annotations

from dataclasses import dataclass

from fasop import schedule


@dataclass(frozen=True)
class Event:
    stage: int
    microbatch: int
    """0-based; -1 for the all-reduces after the pipeline."""
    kind: str
    """fwd, bwd, send_fwd, send_bwd, dp_sync or embedding_sync."""
    start: float
    end: float


@dataclass(frozen=True)
class Timeline:
    events: tuple[Event, ...]
    critical: tuple[int, ...]
    """Indices into `events` of the critical path, first event first."""
    pipeline_time_s: float
    step_time_s: float
    num_stages: int
    num_microbatches: int


class _Duration:
    __slots__ = ("kind", "stage", "seconds")

    def __init__(self, kind: str, stage: int, seconds: float):
        self.kind, self.stage, self.seconds = kind, stage, seconds


class _Recorder:
    """Collects events; `value(t, k)` is a time whose last event is events[k] (-1: none)."""

    def __init__(self):
        self.events: list[list] = []  # [kind, stage, start, end, predecessor]

    def zero(self) -> "_Time":
        return _Time(0.0, -1, self)


class _Time:
    __slots__ = ("t", "last", "rec")

    def __init__(self, t: float, last: int, rec: _Recorder):
        self.t, self.last, self.rec = t, last, rec

    def __add__(self, d: _Duration) -> "_Time":
        end = self.t + d.seconds
        self.rec.events.append([d.kind, d.stage, self.t, end, self.last])
        return _Time(end, len(self.rec.events) - 1, self.rec)


def _later(a: _Time, b: _Time) -> _Time:
    """max as the recurrences take it (Python's max: the first of equals)."""
    return b if b.t > a.t else a


def timeline(estimate) -> Timeline:
    """The pipeline events of an estimate (FASOP's schedule: p2p-ends-only sends), then the
    all-reduces of each stage after its end."""
    pp, m = estimate.plan.pp, estimate.plan.num_microbatches
    comp = estimate.stage_compute_s
    sends_fwd, sends_bwd = [0.0] * pp, [0.0] * pp
    if pp > 1:  # p2p-ends-only (MODEL.md §5): stage 0's forward and the last stage's backward sends
        sends_fwd[0], sends_bwd[pp - 1] = estimate.p2p_s[0], estimate.p2p_s[-1]
    rec = _Recorder()
    durations = [[_Duration(kind, i, secs[i]) for i in range(pp)]
                 for kind, secs in (("fwd", [c / 3 for c in comp]), ("bwd", [2 * c / 3 for c in comp]),
                                    ("send_fwd", sends_fwd), ("send_bwd", sends_bwd))]
    if pp == 1:  # no pipeline: m micro-batches back to back
        t = rec.zero()
        for _ in range(m):
            t = t + durations[0][0]
            t = t + durations[1][0]
        ends = [t]
    else:
        ends = schedule._run(*durations, m, rec.zero(), _later)
    counters: dict[tuple[str, int], int] = {}
    keep, events = {}, []
    for k, (kind, stage, start, end, _) in enumerate(rec.events):
        if kind.startswith("send") and end == start:
            continue  # a send of 0 seconds (middle stages under p2p-ends-only)
        mb = counters.get((kind, stage), 0)
        counters[(kind, stage)] = mb + 1
        keep[k] = len(events)
        events.append(Event(stage, mb, kind, start, end))
    chain, k = [], ends[0].last
    while k >= 0:
        if k in keep:
            chain.append(keep[k])
        k = rec.events[k][4]
    events += _syncs(estimate, [e.t for e in ends])
    return Timeline(tuple(events), tuple(reversed(chain)), pipeline_time_s=ends[0].t,
                    step_time_s=estimate.step_time_s, num_stages=pp, num_microbatches=m)


def _syncs(estimate, ends: list[float]) -> list[Event]:
    """The DP all-reduce after each stage's end and the embedding all-reduce before the step's
    end, on the first and last stages. The estimate keeps the DP all-reduce of the stage that sets
    the step time; stages differ in it only by their bus (MODEL.md §7), so it is drawn on the
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
