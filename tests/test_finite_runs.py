"""The partitioner's compiled tables read only where a stage's times are finite
(partition.tables.finite_runs, kernel finite_runs in fasop/schedule/_native.c): the same tables
and the same balanced split, bit for bit, as the kernels reading every entry and as the numpy
code, on generated stage times with runs that do not fit, rows with nothing finite, finite
entries anywhere and NaN (the ranges are exact for any input, not only for
partition.optimal's)."""

from __future__ import annotations

import numpy as np
import pytest

from fasop.partition.tables import bottleneck_split, capped_completion, completion, finite_runs, steady_caps
from fasop.schedule import native
from fasop.schedule.bounds import first_layers, sweep_completion

compiled = pytest.mark.skipif(native.kernels is None, reason="the compiled kernels were not built")


def _times(seed: int) -> np.ndarray:
    """Stage times (n, size, size): runs a..b-1 summed, inf below the diagonal and beyond a
    random memory cap; on some seeds NaN or finite entries at random places, a stage that fits
    nothing, coarse values (ties)."""
    rng = np.random.default_rng(7300 + seed)
    n = int(rng.integers(1, 9))
    layers = int(rng.integers(n, 3 * n + 8))
    size = layers + 1
    work = rng.uniform(0.5, 2.0, (n, layers))
    if seed % 2:
        work = np.round(work * 2) / 2
    sums = np.concatenate([np.zeros((n, 1)), np.cumsum(work, axis=1)], axis=1)
    a, b = np.meshgrid(np.arange(size), np.arange(size), indexing="ij")
    times = np.where(b > a, sums[:, None, :] - sums[:, :, None], np.inf)
    caps = rng.integers(1, layers + 1, n)
    times = np.where((b - a)[None] <= caps[:, None, None], times, np.inf)
    if seed % 3 == 0:
        times[rng.uniform(size=times.shape) < 0.03] = np.nan
    if seed % 4 == 1:
        spots = rng.uniform(size=times.shape) < 0.02
        times[spots] = rng.uniform(0.1, 3.0, int(spots.sum()))
    if seed % 5 == 2:
        times[int(rng.integers(n))] = np.inf
    return np.ascontiguousarray(times)


@compiled
@pytest.mark.parametrize("seed", range(40))
def test_finite_runs_bound_every_finite_entry(seed):
    """runs[k, a] = [first, last + 1) of the finite entries of times[k, a] ([0, 0): none)."""
    times = _times(seed)
    runs = finite_runs(times)
    finite = np.isfinite(times)
    for k, a in np.ndindex(times.shape[:2]):
        where = np.flatnonzero(finite[k, a])
        expected = (where[0], where[-1] + 1) if len(where) else (0, 0)
        assert tuple(runs[k, a]) == expected


@compiled
@pytest.mark.parametrize("seed", range(40))
def test_tables_over_the_runs_are_the_full_and_numpy_tables(seed, monkeypatch):
    """completion (sums, maxima, weighted, weight 0), capped_completion and bottleneck_split:
    with the runs, without them, and in numpy, the same bits (with NaN times, outside
    partition.optimal's inputs, the kernels skip them where numpy propagates them: there the
    two kernel runs agree)."""
    times = _times(seed)
    rng = np.random.default_rng(seed)
    n = times.shape[0]
    weights = [np.ones(n), rng.uniform(0.5, 3.0, n), np.zeros(n)]
    caps = steady_caps(1.0, 8.0, 6)
    runs, shared = finite_runs(times), {}
    assert finite_runs(times, shared) is shared["runs"] and finite_runs(times, shared) is shared["runs"]

    def all_tables(runs):
        return ([completion(times, w, largest, runs) for w in weights for largest in (False, True)]
                + [capped_completion(times, w, caps, runs) for w in weights[:2]], bottleneck_split(times, runs))

    with_runs, without = all_tables(runs), all_tables(None)
    monkeypatch.setattr(native, "kernels", None)
    in_numpy = all_tables(None)
    for other in (without,) if np.isnan(times).any() else (without, in_numpy):
        assert with_runs[1] == other[1]
        assert all(x.tobytes() == y.tobytes() for x, y in zip(with_runs[0], other[0]))


@compiled
def test_runs_outside_the_table_are_refused():
    """A runs buffer of the wrong size, or a range past the table, is a ValueError, not a read
    past a buffer."""
    times = _times(1)
    n, size, _ = times.shape
    table = np.empty((n + 1, size))
    with pytest.raises(ValueError, match="runs"):
        native.kernels.completion(times, n, size, np.ones(n), False, np.zeros(3, dtype=np.int64), table)
    bad = finite_runs(times).copy()
    bad[0, 0] = (0, size + 1)
    with pytest.raises(ValueError, match="outside"):
        native.kernels.completion(times, n, size, np.ones(n), False, bad, table)


@compiled
@pytest.mark.parametrize("seed", range(40))
def test_first_layers_from_the_runs_are_those_from_the_times(seed):
    """schedule.bounds.first_layers (the longest run each stage fits, where each can start) read
    from the runs is the one read from the times; so is the sweep's table built on it."""
    times = _times(seed)
    runs = finite_runs(times)
    assert first_layers(times, runs) == first_layers(times)
    m = seed % 7 + 1
    sends = {"send_fwd": np.full(len(times), 0.05), "send_bwd": np.full(len(times), 0.07)}
    assert (sweep_completion(times, m, fwd_bwd_factor=3.0, runs=runs, **sends).tobytes()
            == sweep_completion(times, m, fwd_bwd_factor=3.0, **sends).tobytes())


@compiled
@pytest.mark.parametrize("seed", range(20))
def test_fit_table_is_numpys_masked_stack_and_its_runs(seed):
    """The kernel fit_table (SplitSearch's table of the stage times that fit): the planes of each
    stage stacked, inf where need > the stage's limit (numpy's where(~(need > limits), ...)), NaN
    needs fitting as in numpy, and finite_runs of the result."""
    rng = np.random.default_rng(8800 + seed)
    size = int(rng.integers(3, 30))
    a, b = np.meshgrid(np.arange(size), np.arange(size), indexing="ij")
    table = np.where(b > a, rng.uniform(0.1, 2.0, (4, size, size)), np.inf)
    pp = int(rng.integers(1, 9))
    planes = rng.integers(0, 4, pp)
    need = np.where(b > a, (b - a) * rng.uniform(0.5, 1.5, (size, size)), 0.0)
    need[rng.uniform(size=need.shape) < 0.02] = np.nan
    limits = rng.uniform(1.0, size, pp)
    fitting, runs = np.empty((pp, size, size)), np.empty((pp, size, 2), dtype=np.int64)
    native.kernels.fit_table(table, size, planes.astype(np.int64), need, limits, fitting, runs)
    want = np.where(~(need[None] > limits[:, None, None]), np.stack([table[p] for p in planes]), np.inf)
    assert fitting.tobytes() == want.tobytes()
    assert runs.tobytes() == finite_runs(want).tobytes()
    with pytest.raises(ValueError, match="plane outside"):
        native.kernels.fit_table(table, size, np.array([4] * pp, dtype=np.int64), need, limits, fitting, runs)
