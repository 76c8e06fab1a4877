"""The backward sweep's completion table (fasop/schedule/bounds.py: sweep_completion) is computed
over the runs of layers that fit, as pairs grouped by first layer: it must be the table of the
dense formulation over every (first layer, length) of each stage -- clipped lengths and runs
that do not fit included, masked to inf -- bit for bit, on pipelines with memory caps (runs that
do not fit), end sends, and more micro-batches than sweep points."""

from __future__ import annotations

import numpy as np
import pytest

from fasop.schedule import native
from fasop.schedule.bounds import first_layers, sweep_completion, sweep_unit_sends, sweep_unit_weights


def _dense(times, m, fwd_bwd_factor, send_fwd, send_bwd) -> np.ndarray:
    """The table as written before the pairs: every (first, length) of a stage, masked."""
    pp, size, _ = times.shape
    weights = sweep_unit_weights(pp, m, fwd_bwd_factor=fwd_bwd_factor)
    waits = sweep_unit_sends(m, send_fwd, send_bwd)
    longest, reachable = first_layers(times)
    table = np.full((pp + 1, size, weights.shape[1]), np.inf)
    table[pp, size - 1] = -np.inf
    table[pp, size - 1, 0] = 0.0
    for k in range(pp - 1, -1, -1):
        first = np.arange(*reachable[k])[:, None]
        if not longest[k] or not len(first):
            continue
        stop = np.minimum(first + np.arange(1, longest[k] + 1)[None, :], size - 1)
        t = times[k][first, stop]
        fits = np.isfinite(t) & (stop > first)
        t = np.where(fits, t, 0.0)[:, :, None]
        g, h = weights[k][None, None, :], waits[k][None, None, :]
        entering = np.maximum.accumulate(table[k + 1][stop] - t * g - h, axis=2)
        table[k, first[:, 0]] = np.where(fits[:, :, None], entering + t * (g + 1.0) + h, np.inf).min(axis=1)
    return table


def _times(rng, pp: int, layers: int, cap: int) -> np.ndarray:
    """Stage times of contiguous runs (per-layer costs summed), inf past `cap` layers on some
    stages (a memory cap)."""
    per_layer = rng.uniform(0.5, 2.0, (pp, layers)) * rng.uniform(0.5, 3.0, (pp, 1))
    edges = np.concatenate([np.zeros((pp, 1)), np.cumsum(per_layer, axis=1)], axis=1)
    times = edges[:, None, :] - edges[:, :, None]
    a, b = np.meshgrid(np.arange(layers + 1), np.arange(layers + 1), indexing="ij")
    times = np.where(b > a, times, np.inf)
    capped = rng.random(pp) < 0.5
    return np.where(capped[:, None, None] & (b - a > cap), np.inf, times)


@pytest.mark.parametrize("seed", range(12))
def test_sweep_table_equals_the_dense_formulation(seed):
    rng = np.random.default_rng(seed)
    pp = int(rng.integers(2, 9))
    layers = int(rng.integers(pp, 3 * pp + 6))
    m = int(rng.choice([1, 2, 4, 7, 40]))  # 40 > the 33 sweep points
    times = _times(rng, pp, layers, cap=int(rng.integers(2, 6)))
    send_fwd, send_bwd = np.zeros(pp), np.zeros(pp)
    send_fwd[0], send_bwd[-1] = rng.uniform(0, 0.5, 2)
    got = sweep_completion(times, m, fwd_bwd_factor=3.0, send_fwd=send_fwd, send_bwd=send_bwd)
    want = _dense(times, m, 3.0, send_fwd, send_bwd)
    assert got.shape == want.shape
    assert np.array_equal(got, want)  # inf and -inf included, bit for bit
    assert np.isfinite(got[0, 0]).any() == np.isfinite(want[0, 0]).any()


@pytest.mark.skipif(native.kernels is None, reason="the compiled kernels were not built")
@pytest.mark.parametrize("seed", range(20))
def test_compiled_sweep_table_is_the_python_one(seed):
    """The compiled table (_native.c: sweep_completion) against the numpy loop it replaces
    (native.kernels = None), bit for bit: memory caps, coarse stage times (ties), sends at the
    ends, anywhere or none, more micro-batches than sweep points, one-stage pipelines."""
    rng = np.random.default_rng(100 + seed)
    pp = int(rng.integers(1, 9))
    layers = int(rng.integers(pp, 3 * pp + 6))
    m = int(rng.choice([1, 2, 3, 4, 7, 40]))
    times = _times(rng, pp, layers, cap=int(rng.integers(1, 6)))
    if seed % 3 == 1:
        times = np.round(times * 2) / 2  # ties
    send_fwd, send_bwd = np.zeros(pp), np.zeros(pp)
    if seed % 3 == 0:
        send_fwd[0], send_bwd[-1] = rng.uniform(0, 0.5, 2)
    elif seed % 3 == 1:
        send_fwd, send_bwd = rng.uniform(0, 0.3, (2, pp)) * (rng.random((2, pp)) < 0.5)
    for sends in ({"send_fwd": send_fwd, "send_bwd": send_bwd}, {}):
        got = sweep_completion(times, m, fwd_bwd_factor=3.0, **sends)
        kernels, native.kernels = native.kernels, None
        try:
            want = sweep_completion(times, m, fwd_bwd_factor=3.0, **sends)
        finally:
            native.kernels = kernels
        assert np.array_equal(got, want), (pp, layers, m)


@pytest.mark.skipif(native.kernels is None, reason="the compiled kernels were not built")
@pytest.mark.parametrize("seed", range(10))
def test_compiled_sweep_bound_at_a_node_is_the_python_one(seed):
    """SweepBound.at (the settle passes' sweep at one node) with the compiled kernel
    (_native.c: sweep_at) and with numpy (native.kernels = None): the same bounds and prefixes,
    bit for bit, from the first stage (the start's -inf points) down a random split, on tables
    with unreachable (inf) entries."""
    from fasop.partition.splits import Rest
    from fasop.schedule.bounds import SweepBound

    rng = np.random.default_rng(200 + seed)
    pp = int(rng.integers(2, 9))
    layers = int(rng.integers(pp, 3 * pp + 6))
    m = int(rng.choice([2, 4, 7, 40]))
    times = _times(rng, pp, layers, cap=int(rng.integers(2, 6)))
    send_fwd, send_bwd = np.zeros(pp), np.zeros(pp)
    send_fwd[0], send_bwd[-1] = rng.uniform(0, 0.5, 2)
    sends = {"num_microbatches": m, "fwd_bwd_factor": 3.0, "send_first": send_fwd[0], "send_last": send_bwd[-1],
             "send_fwd": send_fwd, "send_bwd": send_bwd}
    sweep = SweepBound(sweep_completion(times, m, fwd_bwd_factor=3.0, send_fwd=send_fwd, send_bwd=send_bwd), **sends)
    kernels = native.kernels
    first, before = 0, (None, None)
    for k in range(pp):
        stops = np.arange(first + 1, layers + 1)
        t = times[k, first, stops]
        stops, t = stops[np.isfinite(t)], t[np.isfinite(t)]
        if not len(stops):
            break
        floor = rng.uniform(0, 2, len(t)) * t.sum() if k % 2 else np.full(len(t), -np.inf)
        got = sweep.at(k, before[0], Rest(stops, t, t, t, t, None, None, None), floor)
        native.kernels = None
        try:
            want = sweep.at(k, before[1], Rest(stops, t, t, t, t, None, None, None), floor)
        finally:
            native.kernels = kernels
        assert all(np.array_equal(a, b) for a, b in zip(got, want)), (k, pp, m)
        i = int(rng.integers(len(stops)))
        first, before = int(stops[i]), (got[1][i], want[1][i])
        if first >= layers:
            break
