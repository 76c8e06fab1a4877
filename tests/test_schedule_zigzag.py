"""The zigzag chains (fasop/partition/zigzag.py) and the close step of the optimal partitioner
(fasop/estimators/fasop2024/optimal.py: SplitSearch.closed), on random pipelines and on generated
small cases (tests/test_split_milp.py's `_case`: <= 12 layers, <= 4 stages, heterogeneous stage
speeds and memory caps, end sends, a DP all-reduce by stage 0's layers):

- every zigzag chain Z(i, j, i') of a pipeline is at most its simulated stage 0 end, with sends
  on every stage too; on about half of the deep pipelines with a slow early stage the longest
  one is that end exactly while it turns forward (j > i), longer than every chain without the
  turn (so a bound 1 % larger, or one with the forward turn left out, would not be one);
- at every partial split the zigzag bound is at most the least stage 0 end over the splits that
  complete it, and along some full splits it is that end exactly (a bound 1 % larger would fail);
- the branch and bound with it returns the brute-force optimum, and its settle pass from the
  slowest split proves the brute-force optimum within the margin.
"""

from __future__ import annotations

import numpy as np
import pytest

from fasop.partition.splits import Rest, completion, optimal
from fasop.partition.zigzag import ZigzagBound, with_zigzag, zigzag_coefficients, zigzag_completion
from fasop.schedule.bounds import SweepBound, sweep_completion, with_sweep
from fasop.schedule.pipeline import one_f_one_b
from test_schedule_legs import _simulated, _splits, bound_ratios
from test_split_milp import MARGIN, _case, _edges, _kwargs


def _end(t, m, send_fwd, send_bwd) -> float:
    return float(one_f_one_b(t[:, None] / 3, 2 * t[:, None] / 3, send_fwd[:, None], send_bwd[:, None], m)[0, 0])


def _chains(t, m, sends) -> dict[tuple[int, int, int], float]:
    """Every zigzag chain Z(i, j, i') of stage times t (fwd_bwd_factor 3): the formula of
    fasop/partition/zigzag.py, written out."""
    pp = len(t)
    warm = [min(pp - 1 - i, m) for i in range(pp)]
    found = {}
    for i in range(pp):
        for j in range(i, pp):
            for i2 in range(i + 1):
                if warm[i] <= m - 2 and warm[j] <= m - 1:
                    found[i, j, i2] = (t.sum() + sends + (m - 1 - warm[i]) * t[i] + t[i + 1:j + 1].sum()
                                       + warm[j] * 2 / 3 * t[i2])
    return found


def test_coefficients_are_the_formula():
    steady, turn = zigzag_coefficients(5, 3, fwd_bwd_factor=3.0)  # warm-up forwards 3, 3, 2, 1, 0
    assert steady.tolist() == [-np.inf, -np.inf, -np.inf, 1.0, 2.0]  # m - 1 - w_i where w_i <= m - 2
    assert turn.tolist() == [-np.inf, -np.inf, 4 / 3, 2 / 3, 0.0]  # w_j (k - 1)/k where w_j <= m - 1


def test_zigzag_chains_are_below_the_simulation():
    for seed in range(400):
        rng = np.random.default_rng(seed)
        pp, m = int(rng.integers(2, 9)), int(rng.integers(1, 14))
        t = rng.uniform(0.05, 1.0, pp) ** 2
        sf, sb = np.zeros(pp), np.zeros(pp)
        if seed % 2:  # sends on every stage: the chains count only the end ones, still below
            sf, sb = rng.uniform(0, 0.2, pp), rng.uniform(0, 0.2, pp)
        else:
            sf[0], sb[-1] = rng.uniform(0, 0.2, 2)
        end = _end(t, m, sf, sb)
        assert all(z <= end * (1 + 1e-12) for z in _chains(t, m, sf[0] + sb[-1]).values())


def test_a_forward_turn_sets_the_end_of_deep_pipelines():
    """Deep pipelines with a slow early stage and fast last stages (as FASOP's heterogeneous
    ones, e.g. gpt2xl on a100=1,a10=7 with 16 stages): on about half, the longest zigzag chain is
    the simulated end exactly and turns forward (j > i), longer by > 1e-9 than every chain
    without the turn."""
    turned = 0
    for seed in range(100):
        rng = np.random.default_rng(seed)
        pp = int(rng.integers(6, 17))
        m = int(rng.integers(pp // 2, 2 * pp + 1))
        t = rng.uniform(0.6, 1.0, pp)
        t[int(rng.integers(0, pp // 2))] = 1.1
        t[-2:] *= 0.6
        sf, sb = np.zeros(pp), np.zeros(pp)
        sf[0], sb[-1] = rng.uniform(0, 0.1, 2)
        end = _end(t, m, sf, sb)
        chains = _chains(t, m, sf[0] + sb[-1])
        assert all(z <= end * (1 + 1e-12) for z in chains.values())
        back = max((z for (i, j, _), z in chains.items() if j == i), default=-np.inf)
        longest = max(chains.values(), default=-np.inf)
        turned += longest > end * (1 - 1e-12) and longest > back * (1 + 1e-9)
    assert turned >= 40


def _along(bound: ZigzagBound, fitting: np.ndarray, split) -> list[float]:
    """The zigzag bound at each stage of `split` (stages 0..k fixed; the free stages' least sum
    from partition_tables.completion), stage 0's extra left out."""
    pp = len(split)
    least = completion(fitting, np.ones(pp))
    first, stop = _edges(split)
    chain, before, found = None, 0.0, []
    for k in range(pp):
        t = np.array([fitting[k, first[k], stop[k]]])
        stops = np.array([stop[k]])
        rest = Rest(stops, t, least[k + 1, stops], t * 0, t * 0, None, None, None)
        value, (turns, fixed, top) = bound(k, chain, t, rest)  # without the stages before k
        found.append(before + float(value[0]))
        chain, before = (turns[0], float(fixed[0]), float(top[0])), before + t[0]
    return found


def _zigzag(fitting, m, send_fwd, send_bwd) -> ZigzagBound:
    return ZigzagBound(zigzag_completion(fitting), num_microbatches=m, fwd_bwd_factor=3.0,
                       send_first=float(send_fwd[0]), send_last=float(send_bwd[-1]))


def test_zigzag_bound_is_below_every_completion_and_reaches_the_end():
    ratios = bound_ratios(_zigzag, _along)
    assert max(ratios) > 1 / 1.01 and sum(r > 1 - 1e-12 for r in ratios) >= 50


def test_zigzag_completion_is_the_least_weighted_sum():
    """table[j, k, a]: the least over the splits of layers a.. into stages k.. of their sum + the
    sum of stages k..j, by brute force over the splits of generated cases."""
    for seed in range(20):
        fitting, *_ = _simulated(seed)
        pp, layers = fitting.shape[0], fitting.shape[1] - 1
        table = zigzag_completion(fitting)
        for j in range(pp):
            values = [sum((1 + (k <= j)) * fitting[k, a, b] for k, (a, b) in enumerate(zip(*_edges(s))))
                      for s in _splits(fitting)]
            assert table[j, 0, 0] == pytest.approx(min(values, default=np.inf), rel=1e-12)
            assert table[j, pp, layers] == 0.0


@pytest.mark.parametrize("seed", range(40))
def test_branch_and_bound_with_zigzag_is_the_brute_force_optimum(seed):
    fitting, extra, objective, _, brute, (pp, m, sends_fwd, sends_bwd, stage_times) = _case(seed)
    if not np.isfinite(brute):
        return
    kwargs = _kwargs(pp, m, sends_fwd, sends_bwd, stage_times, extra, objective)
    sends = {"send_fwd": sends_fwd[:, 0], "send_bwd": sends_bwd[:, 0]}
    sweep = SweepBound(sweep_completion(fitting, m, fwd_bwd_factor=3.0, **sends), num_microbatches=m,
                       fwd_bwd_factor=3.0, send_first=float(sends_fwd[0, 0]), send_last=float(sends_bwd[-1, 0]),
                       **sends)
    kwargs["bound"] = with_zigzag(with_sweep(kwargs["bound"], sweep),
                                  _zigzag(fitting, m, sends_fwd[:, 0], sends_bwd[:, 0]))  # as the close step
    exact = optimal(fitting, **kwargs)
    assert exact.proven and exact.objective == pytest.approx(brute, rel=1e-12)
    slowest = max(_splits(fitting), key=objective)
    settled = optimal(fitting, settle=True, last_stages=3, **(kwargs | {"seeds": [slowest]}))
    assert settled.proven and brute <= settled.objective <= brute * (1 + MARGIN)


@pytest.mark.parametrize("seed", range(20))
def test_compiled_zigzag_and_reverse_sweep_are_the_python_ones(seed):
    """ZigzagBound.__call__ and ReverseSweepBound.__call__ at the nodes of random partial splits
    (every feasible choice of the stage at once) with the compiled kernels (_native.c: zigzag,
    reverse_sweep) and with numpy (native.kernels = None): the same values and chains, bit for
    bit."""
    from fasop.schedule import native
    from fasop.schedule.reverse_sweep import ReverseSweepBound, sweep_prefix_completion

    if native.kernels is None:
        pytest.skip("the compiled kernels were not built")
    kernels, rng = native.kernels, np.random.default_rng(seed)
    fitting, (m, send_fwd, send_bwd), _, _ = _simulated(seed)
    pp, layers = fitting.shape[0], fitting.shape[1] - 1
    least = completion(fitting, np.ones(pp))
    zigzag = _zigzag(fitting, m, send_fwd, send_bwd)
    sends = {"send_fwd": send_fwd, "send_bwd": send_bwd}
    reverse = ReverseSweepBound(sweep_prefix_completion(fitting, m, fwd_bwd_factor=3.0, **sends), num_microbatches=m,
                                fwd_bwd_factor=3.0, send_first=float(send_fwd[0]), send_last=float(send_bwd[-1]), **sends)

    def both(call):
        got = call()
        native.kernels = None
        try:
            return got, call()
        finally:
            native.kernels = kernels

    chains, first = (None, None), 0
    for k in range(pp):
        stops = np.arange(first + 1, layers + 1)
        stops = stops[np.isfinite(fitting[k, first, stops]) & np.isfinite(least[k + 1, stops])]
        if not len(stops):
            break
        t = fitting[k, first, stops]
        (value, (turns, fixed, top)), (want, (w_turns, w_fixed, w_top)) = both(lambda: zigzag(
            k, chains[0] if native.kernels else chains[1], t, Rest(stops, t, least[k + 1, stops], t, t, None, None, None)))
        assert all(np.array_equal(a, b) for a, b in ((value, want), (turns, w_turns), (fixed, w_fixed), (top, w_top)))
        i = int(rng.integers(len(stops)))
        chains, first = ((turns[i], float(fixed[i]), float(top[i])), (w_turns[i], float(w_fixed[i]), float(w_top[i]))), int(stops[i])
    afters, stop = (None, None), layers
    for j in range(pp - 1, -1, -1):
        firsts = np.arange(0, stop)
        firsts = firsts[np.isfinite(fitting[j, firsts, stop])]
        if not len(firsts):
            break
        t = fitting[j, firsts, stop]
        (value, rows), (want, w_rows) = both(lambda: reverse(j, afters[0] if native.kernels else afters[1], t, firsts))
        assert np.array_equal(value, want) and np.array_equal(rows, w_rows), (j, pp, m)
        i = int(rng.integers(len(firsts)))
        afters, stop = (rows[i], w_rows[i]), int(firsts[i])


@pytest.mark.parametrize("seed", range(40))
def test_searches_with_and_without_the_kernels_are_the_same(seed):
    """The whole branch and bound (partition.optimal: the chains, the sweep, the zigzag chains and
    the cuts at every node, the compiled kernels of _native.c or numpy) on generated cases, first
    pass and settle pass as fasop runs them: the same split, objective, proof and bound, to the
    bit, with the kernels and without (native.kernels = None)."""
    from fasop.schedule import native

    if native.kernels is None:
        pytest.skip("the compiled kernels were not built")
    fitting, extra, objective, _, brute, (pp, m, sends_fwd, sends_bwd, stage_times) = _case(seed)
    if not np.isfinite(brute):
        return
    kernels, found = native.kernels, []
    for way in (kernels, None):
        native.kernels = way
        try:
            kwargs = _kwargs(pp, m, sends_fwd, sends_bwd, stage_times, extra, objective)
            sends = {"send_fwd": sends_fwd[:, 0], "send_bwd": sends_bwd[:, 0]}
            sweep = SweepBound(sweep_completion(fitting, m, fwd_bwd_factor=3.0, **sends), num_microbatches=m,
                               fwd_bwd_factor=3.0, send_first=float(sends_fwd[0, 0]),
                               send_last=float(sends_bwd[-1, 0]), **sends)
            first = optimal(fitting, **(kwargs | {"max_nodes": 5}))
            closer = with_zigzag(with_sweep(kwargs["bound"], sweep), _zigzag(fitting, m, sends_fwd[:, 0],
                                                                             sends_bwd[:, 0]))
            found.append((first, optimal(fitting, **(kwargs | {"bound": closer})),
                          optimal(fitting, settle=True, last_stages=3, **(kwargs | {"bound": closer, "seeds": [
                              max(_splits(fitting), key=objective)]}))))
        finally:
            native.kernels = kernels
    assert found[0] == found[1]
