"""The chains out and back (fasop/schedule/legs.py) and the legs pass of the optimal partitioner
(fasop/estimators/fasop2024/optimal.py: SplitSearch.legged), on generated small pipelines
(tests/test_split_milp.py's `_case`: <= 12 layers, <= 4 stages, heterogeneous stage speeds and
memory caps, end sends, a DP all-reduce by stage 0's layers):

- at every partial split the legs bound is at most the least stage 0 end over the splits that
  complete it, and along some full splits it is that end exactly (a bound 1 % larger would
  fail the first test);
- with sends on every stage (not only FASOP's end sends) it is still below the simulation;
- the branch and bound with it returns the brute-force optimum, and so does the settle pass run
  once per layer count of the last stage (`by_last_stage`), as the legs pass runs it;
- the backward sweep relaxed on the free first stages (schedule_bounds.ReverseSweepBound) is a
  bound at every partial split fixed from the last stage, and the reverse settle pass
  (SplitSearch.reverse) on the reversed problem proves the brute-force optimum.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from fasop.estimators.fasop2024.optimal import by_last_stage, reversed_times
from fasop.partition.splits import optimal
from fasop.schedule.bounds import first_layers
from fasop.schedule.reverse_sweep import ReverseSweepBound, sweep_prefix_completion
from fasop.schedule.legs import LegBound, Legs, leg_completion, with_legs
from fasop.schedule.pipeline import one_f_one_b
from test_split_milp import _case, _edges, _kwargs


def _legs(fitting, m, send_fwd, send_bwd) -> LegBound:
    legs = Legs(fitting.shape[0], m, fwd_bwd_factor=3.0, send_fwd=send_fwd, send_bwd=send_bwd)
    return LegBound(leg_completion(fitting, legs), legs)


def _end(t, m, send_fwd, send_bwd) -> float:
    return float(one_f_one_b(t[:, None] / 3, 2 * t[:, None] / 3, send_fwd[:, None], send_bwd[:, None], m)[0, 0])


def _along(bound: LegBound, times: np.ndarray, split) -> list[float]:
    """The bound at each stage of `split` (stages 0..k fixed)."""
    first, stop = _edges(split)
    state, before, found = None, 0.0, []
    for k in range(len(split)):
        t = np.array([times[k, first[k], stop[k]]])
        value, states = bound(k, state, t, np.array([stop[k]]), before)
        state, before = states[0], before + t[0]
        found.append(float(value[0]))
    return found


def _splits(fitting):
    pp, layers = fitting.shape[0], fitting.shape[1] - 1
    splits = [tuple(y - x for x, y in zip((0,) + cuts, cuts + (layers,)))
              for cuts in itertools.combinations(range(1, layers), pp - 1)]
    return [s for s in splits if np.isfinite(fitting[np.arange(pp), *_edges(s)]).all()]


def _simulated(seed):
    """A generated case's stage times, its (m, sends), every fitting split and each one's
    simulated stage-0 end."""
    fitting, _, _, _, _, (pp, m, sends_fwd, sends_bwd, _) = _case(seed)
    send_fwd, send_bwd = sends_fwd[:, 0], sends_bwd[:, 0]
    splits = _splits(fitting)
    ends = {s: _end(fitting[np.arange(pp), *_edges(s)], m, send_fwd, send_bwd) for s in splits}
    return fitting, (m, send_fwd, send_bwd), splits, ends


def bound_ratios(make_bound, along, seeds=range(60)) -> list[float]:
    """On generated cases: the bound that make_bound(fitting, m, send_fwd, send_bwd) makes, read
    `along` each split's prefixes, is at most the least simulated end of the splits sharing the
    prefix (asserted); returns its value / the simulated end at every whole split."""
    ratios = []
    for seed in seeds:
        fitting, (m, send_fwd, send_bwd), splits, ends = _simulated(seed)
        bound = make_bound(fitting, m, send_fwd, send_bwd)
        for split in splits:
            for k, value in enumerate(along(bound, fitting, split)):
                least = min(v for s, v in ends.items() if s[:k + 1] == split[:k + 1])
                assert value <= least * (1 + 1e-12)
            ratios.append(value / ends[split])
    return ratios


def test_legs_bound_is_below_every_completion_and_reaches_the_end():
    ratios = bound_ratios(_legs, _along)
    assert max(ratios) > 1 / 1.01 and sum(r > 1 - 1e-12 for r in ratios) > len(ratios) // 4


@pytest.mark.parametrize("seed", range(100))
def test_legs_bound_with_sends_everywhere_is_below_the_simulation(seed):
    rng = np.random.default_rng(seed)
    pp, m = int(rng.integers(2, 7)), int(rng.integers(1, 12))
    layers = pp + int(rng.integers(0, 4))
    sums = np.concatenate([np.zeros((pp, 1)), np.cumsum(rng.uniform(0.1, 1, (pp, layers)), axis=1)], axis=1)
    a, b = np.meshgrid(np.arange(layers + 1), np.arange(layers + 1), indexing="ij")
    times = np.where(b > a, sums[:, None, :] - sums[:, :, None], np.inf)
    sf, sb = rng.uniform(0, 0.3, pp), rng.uniform(0, 0.3, pp)
    bound = _legs(times, m, sf, sb)
    for split in _splits(times)[::3]:
        assert _along(bound, times, split)[-1] <= _end(times[np.arange(pp), *_edges(split)], m, sf, sb) * (1 + 1e-12)


@pytest.mark.parametrize("seed", range(40))
def test_branch_and_bound_with_legs_is_the_brute_force_optimum(seed):
    fitting, extra, objective, _, brute, (pp, m, sends_fwd, sends_bwd, stage_times) = _case(seed)
    if not np.isfinite(brute):
        return
    kwargs = _kwargs(pp, m, sends_fwd, sends_bwd, stage_times, extra, objective)
    legs = Legs(pp, m, fwd_bwd_factor=3.0, send_fwd=sends_fwd[:, 0], send_bwd=sends_bwd[:, 0])
    exact = optimal(fitting, **(kwargs | {"bound": with_legs(kwargs["bound"], _legs(fitting, m, legs.sf, legs.sb))}))
    assert exact.proven and exact.objective == pytest.approx(brute, rel=1e-12)
    # the legs pass's second step: the settle pass once per last stage, above the best so far
    best = max(_splits(fitting), key=objective)  # start from the slowest split
    value = objective(best)
    for only in by_last_stage(fitting, best):
        part = optimal(only, settle=True, above=value, seeds=[best],
                       **(kwargs | {"bound": with_legs(kwargs["bound"], _legs(only, m, legs.sf, legs.sb))}))
        assert part is None or part.proven
        if part is not None and part.split and part.objective < value:
            best, value = part.split, part.objective
    assert brute <= value <= brute * (1 + 1e-6)


# ------------------------------------------------------------------ the sweep from the last stage
def _reverse(fitting, m, send_fwd, send_bwd) -> ReverseSweepBound:
    sends = {"send_fwd": send_fwd, "send_bwd": send_bwd}
    table = sweep_prefix_completion(fitting, m, fwd_bwd_factor=3.0, **sends)
    return ReverseSweepBound(table, num_microbatches=m, fwd_bwd_factor=3.0, send_first=float(send_fwd[0]),
                             send_last=float(send_bwd[-1]), **sends)


def test_reverse_sweep_is_below_every_completion_and_reaches_the_end():
    """schedule_bounds.ReverseSweepBound with the last stages fixed: at most the least stage 0
    end over the splits of the free first stages; along some full splits that end exactly (a
    bound 1 % larger would fail)."""
    ratios = []
    for seed in range(60):
        fitting, (m, send_fwd, send_bwd), splits, ends = _simulated(seed)
        bound = _reverse(fitting, m, send_fwd, send_bwd)
        for split in splits:
            first, stop = _edges(split)
            after = None
            for j in range(len(split) - 1, -1, -1):
                value, rows = bound(j, after, np.array([fitting[j, first[j], stop[j]]]), np.array([first[j]]))
                after = rows[0]
                least = min(v for s, v in ends.items() if s[j:] == split[j:])
                assert value[0] <= least * (1 + 1e-12)
            ratios.append(value[0] / ends[split])
    assert max(ratios) > 1 / 1.01 and sum(r > 1 - 1e-12 for r in ratios) > len(ratios) // 4


@pytest.mark.parametrize("seed", range(40))
def test_reverse_settle_is_the_brute_force_optimum(seed):
    """The reverse settle pass as SplitSearch.reverse runs it (the stages and layers reversed,
    stage 0's extra at its least, the cuts reversed), from the slowest split: proven, the
    brute-force optimum within the margin."""
    fitting, extra, objective, _, brute, (pp, m, sends_fwd, sends_bwd, stage_times) = _case(seed)
    if not np.isfinite(brute):
        return
    kwargs = _kwargs(pp, m, sends_fwd, sends_bwd, stage_times, extra, objective)
    sweep = _reverse(fitting, m, sends_fwd[:, 0], sends_bwd[:, 0])
    layers = fitting.shape[1] - 1
    least = float(extra[1:layers - pp + 2, 0].min())
    flipped = reversed_times(fitting)
    assert np.array_equal(reversed_times(flipped), fitting)

    def cut(split):
        weights, const = kwargs["cut"](split[::-1])
        return weights[::-1].copy(), const

    start = max(_splits(fitting), key=objective)
    found = optimal(flipped, bound=lambda k, before, chain, t, rest: sweep(pp - 1 - k, chain, t, layers - rest.stops),
                    evaluate=lambda splits: [objective(s[::-1]) for s in splits], cut=cut, extra=lambda n: least,
                    seeds=[start[::-1]], settle=True)
    assert found.proven and brute <= found.objective <= brute * (1 + 1e-6)
    assert objective(found.split[::-1]) == found.objective


def test_first_layers_hold_every_fitting_split():
    """schedule_bounds.first_layers: every stage of every split that fits starts inside its
    range and holds at most its longest run (the completion tables are computed only there)."""
    for seed in range(40):
        fitting, *_ = _case(seed)
        longest, reachable = first_layers(fitting)
        for split in _splits(fitting):
            first, _ = _edges(split)
            assert all(lo <= a < hi for a, (lo, hi) in zip(first, reachable))
            assert all(c <= most for c, most in zip(split, longest))
