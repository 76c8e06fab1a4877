"""schedule.Schedule: one pipeline's 1F1B timeline, against hand-computed cases, the batch
recurrences (bit for bit) and invariants over random durations; critical paths as cuts."""

from __future__ import annotations

import numpy as np
import pytest

from fasop.schedule.pipeline import Schedule, critical_path, one_f_one_b, stage_chains
from fasop.schedule.recurrences import FLOAT_PIPELINES, stage_ends


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
    # one micro-batch: every event is on stage 0's critical path, in this order; stage 1's ends at its backward
    assert [(s.events[k].stage, s.events[k].kind) for k in s.critical_path(0)] == [
        (0, "fwd"), (0, "send_fwd"), (1, "fwd"), (1, "bwd"), (1, "send_bwd"), (0, "bwd")]
    assert [(s.events[k].stage, s.events[k].kind) for k in s.critical_path(1)] == [
        (0, "fwd"), (0, "send_fwd"), (1, "fwd"), (1, "bwd")]


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
    ends = stage_ends(*columns, m)[:, 0].tolist()
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
    from fasop.search.engine import parse_nodes, search
    from fasop.estimators import make_estimator
    from fasop.specs.load import load_cluster, load_model

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


@pytest.mark.parametrize("pp,m", [(2, 1), (2, 40), (5, 2), (8, 9), (13, 5), (24, 8)])
def test_a_batch_schedules_each_pipeline_as_it_would_alone(pp, m):
    """stage_ends runs a few pipelines one at a time on floats and more on arrays of the batch
    (sends that are 0 in every pipeline not added): each pipeline's ends are the ones it gets
    alone, to the bit -- ties included (stage times on a coarse grid tie often)."""
    rng = np.random.default_rng(pp * 10 + m)
    for t in (rng.uniform(0.1, 1.0, (pp, 6)), np.round(rng.uniform(1, 2, (pp, 6)) * 4) / 4):
        ends_only = np.zeros((2, pp, 6))
        ends_only[0, 0], ends_only[1, -1] = rng.uniform(0, 0.3, 6), rng.uniform(0, 0.3, 6)
        anywhere = rng.uniform(0, 0.3, (2, pp, 6)) * (rng.uniform(size=(2, pp, 6)) < 0.5)
        for sf, sb in (tuple(ends_only), tuple(ends_only * 0), tuple(anywhere)):
            args = (t / 3, 2 * t / 3, sf, sb)
            alone = np.concatenate([stage_ends(*(x[:, [c]] for x in args), m) for c in range(6)], axis=1)
            for batch in (FLOAT_PIPELINES, FLOAT_PIPELINES + 1, 6):
                assert np.array_equal(stage_ends(*(x[:, :batch] for x in args), m), alone[:, :batch])


@pytest.mark.parametrize("pp,m", [(2, 1), (2, 40), (5, 2), (8, 9), (13, 5), (24, 8)])
def test_critical_paths_are_exact_at_their_own_times_and_cuts_elsewhere(pp, m, kernels):
    """critical_path's chain sums to stage 0's end at the times it was traced on (weights . t +
    const, to rounding), its end is one_f_one_b's to the bit, and at other stage times the same
    chain is a lower bound (a path of the same event graph); stage_chains does the same for every
    stage of one pipeline."""
    rng = np.random.default_rng(pp * 1000 + m)
    for t in (rng.uniform(0.1, 1.0, (pp, 5)), np.round(rng.uniform(1, 2, (pp, 5)) * 4) / 4):
        sf, sb = np.zeros_like(t), np.zeros_like(t)
        sf[0], sb[-1] = rng.uniform(0, 0.3, 5), rng.uniform(0, 0.3, 5)
        end, weights, const = critical_path(t, sf, sb, m, fwd_bwd_factor=3.0)
        assert np.array_equal(end, one_f_one_b(t / 3, 2 * t / 3, sf, sb, m)[0])
        assert np.allclose((weights * t).sum(axis=0) + const, end, rtol=1e-12)
        other = rng.uniform(0.1, 1.0, (pp, 5))
        assert ((weights * other).sum(axis=0) + const <= one_f_one_b(other / 3, 2 * other / 3, sf, sb, m)[0]
                * (1 + 1e-12)).all()
        ends, w, c = stage_chains(t[:, 0], sf[:, 0], sb[:, 0], m, fwd_bwd_factor=3.0)
        assert np.array_equal(ends, one_f_one_b(t[:, :1] / 3, 2 * t[:, :1] / 3, sf[:, :1], sb[:, :1], m)[:, 0])
        assert np.allclose(w @ t[:, 0] + c, ends, rtol=1e-12)
        assert (w @ other[:, 0] + c <= one_f_one_b(other[:, :1] / 3, 2 * other[:, :1] / 3, sf[:, :1], sb[:, :1],
                                                     m)[:, 0] * (1 + 1e-12)).all()
