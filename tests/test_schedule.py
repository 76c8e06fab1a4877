"""schedule.Schedule: one pipeline's 1F1B timeline, against hand-computed cases, the batch
recurrences (bit for bit) and invariants over random durations."""

from __future__ import annotations

import numpy as np
import pytest

from fasop.schedule import Schedule, one_f_one_b, one_f_one_b_reference


def test_one_stage_runs_its_microbatches_back_to_back():
    s = Schedule([1.0], [2.0], 4)
    assert s.stage_end_s == (12.0,) and s.in_flight == (1,)
    assert [(e.kind, e.microbatch, e.start_s, e.end_s) for e in s.stage_events(0)] == [
        (kind, j, start, start + d) for j in range(4) for kind, d, start in (("fwd", 1.0, 3.0 * j), ("bwd", 2.0, 3.0 * j + 1))]


def test_two_stages_one_microbatch_by_hand():
    """f = (1, 2), b = (3, 4), sends 0.5 forward from stage 0 and 0.25 back from stage 1:
    stage 1 starts at 1.5, ends its backward at 1.5 + 2 + 4 = 7.5; the gradient arrives at
    7.75; stage 0 ends at 10.75 = the round trip, which is also the lower bound."""
    s = Schedule([1.0, 2.0], [3.0, 4.0], 1, [0.5, 0.0], [0.0, 0.25])
    assert s.stage_end_s == (10.75, 7.5)
    assert s.lower_bound_s == 10.75
    kinds = {(e.stage, e.kind): (e.start_s, e.end_s) for e in s.events}
    assert kinds == {(0, "fwd"): (0.0, 1.0), (0, "send_fwd"): (1.0, 1.5), (1, "fwd"): (1.5, 3.5),
                     (1, "bwd"): (3.5, 7.5), (1, "send_bwd"): (7.5, 7.75), (0, "bwd"): (7.75, 10.75)}


def test_rejects_mismatched_durations():
    with pytest.raises(ValueError):
        Schedule([1.0, 1.0], [1.0], 2)
    with pytest.raises(ValueError):
        Schedule([1.0], [1.0], 0)


@pytest.mark.parametrize("seed", range(12))
def test_timeline_matches_the_recurrences_and_holds_its_invariants(seed):
    rng = np.random.default_rng(seed)
    pp, m = int(rng.integers(1, 7)), int(rng.integers(1, 10))
    f, b = rng.uniform(0.1, 2, pp), rng.uniform(0.1, 4, pp)
    sf, sb = rng.uniform(0, 0.5, pp) * (rng.random(pp) < 0.7), rng.uniform(0, 0.5, pp) * (rng.random(pp) < 0.7)
    s = Schedule(f, b, m, sf, sb)
    columns = [v[:, None] for v in (f, b, sf, sb)]
    ends = one_f_one_b_reference(*columns, m)[:, 0].tolist()
    assert list(s.stage_end_s) == ends  # bit for bit
    assert list(s.stage_end_s) == one_f_one_b(*columns, m)[:, 0].tolist()
    seconds = {"fwd": f, "bwd": b, "send_fwd": sf, "send_bwd": sb}
    assert len(s.events) == 2 * pp * m + 2 * (pp - 1) * m
    for e in s.events:
        assert e.end_s == e.start_s + seconds[e.kind][e.stage] and 0 <= e.microbatch < m
    by = {(e.stage, e.kind, e.microbatch): e for e in s.events}
    for i in range(pp):
        computes = [e for e in s.stage_events(i) if e.kind in ("fwd", "bwd")]
        assert all(a.end_s <= c.start_s for a, c in zip(computes, computes[1:]))  # one at a time
        assert max(e.end_s for e in computes) == s.stage_end_s[i] == by[(i, "bwd", m - 1)].end_s
        for j in range(m):
            assert by[(i, "fwd", j)].end_s <= by[(i, "bwd", j)].start_s
            if i > 0:  # a micro-batch moves forward after its send, its gradient back after its send
                assert by[(i - 1, "send_fwd", j)].end_s <= by[(i, "fwd", j)].start_s
                assert by[(i, "send_bwd", j)].end_s <= by[(i - 1, "bwd", j)].start_s
        assert s.in_flight[i] == min(pp - i, m)
    assert s.lower_bound_s <= s.pipeline_time_s


@pytest.mark.parametrize("nodes", ["a10=4", "a100=1,a10=3"])
def test_fasop_estimates_replay_as_timelines(nodes):
    """The fasop-2024 estimator's `schedule_of` rebuilds each estimate's pipeline as a Schedule
    whose stage ends are the estimate's, bit for bit (pp > 1), and whose events fill each stage's
    compute time m times over."""
    from fasop.search import parse_nodes, search
    from fasop.estimators import make_estimator
    from fasop.specs import load_cluster, load_model

    model, cluster = load_model("bert"), load_cluster("fasop-paper")
    inventory = parse_nodes(nodes, cluster)
    result = search(model, cluster, inventory, heterogeneous=True, placements="cyclic", partitioner="fasop-minmax")
    estimator = make_estimator(model, cluster, inventory, partitioner="fasop-minmax")
    checked = 0
    for e in result.estimates:
        timeline = estimator.schedule_of(e)
        if e.plan.pp > 1:
            assert timeline.stage_end_s == e.stage_end_s
            checked += 1
        else:
            assert timeline.pipeline_time_s == pytest.approx(e.pipeline_time_s, rel=1e-6)
        m = e.plan.num_microbatches
        for i, comp in enumerate(e.stage_compute_s):
            busy = sum(ev.end_s - ev.start_s for ev in timeline.stage_events(i) if ev.kind in ("fwd", "bwd"))
            assert busy == pytest.approx(m * comp, rel=1e-9)
    assert checked > 10
