"""The kernels over one plan's splits (fasop/schedule/_splits.h) against the numpy code they
replace, bit for bit: split_ends (the stage times of many splits read from the plan's table,
split into forward and backward, the 1F1B recurrences with the sends) under
SplitSearch.evaluate (fasop/estimators/fasop2024/optimal.py: then FASOP's float32 step time, + the
DP all-reduce by stage 0's layers and the embedding's), and polish_moves under
partition.polish.move_rows."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from conftest import layer_time_table

from fasop.estimators.fasop2024.optimal import SplitSearch
from fasop.schedule import native
from fasop.schedule.pipeline import split_stage_times

compiled = pytest.mark.skipif(native.kernels is None, reason="the compiled kernels were not built")
f32 = np.float32


def _search(seed: int) -> tuple[SplitSearch, list[tuple[int, ...]]]:
    """A SplitSearch with only what `evaluate` reads (a random table of stage times and of those
    that fit, sends, DP rows, embedding) and a few random splits of it. Coarse times and memory
    caps on odd seeds (ties; splits that do not fit, which the kernel evaluates on every stage
    time, as numpy does)."""
    rng = np.random.default_rng(4100 + seed)
    pp = int(rng.integers(1, 13))
    layers = int(rng.integers(pp, 3 * pp + 8))
    m = int(rng.integers(1, 3 * pp + 3))
    size = layers + 1
    s = object.__new__(SplitSearch)
    s.every, span = layer_time_table(rng, pp, layers, coarse=bool(seed % 2))  # `times`
    caps = rng.integers(-(-layers // pp), layers + 1, pp) if seed % 2 else np.full(pp, layers)
    s.fitting = np.where(span[None] <= caps[:, None, None], s.every, np.inf)  # odd seeds: some splits do not fit
    s.pp, s.m, s.stages, s.values = pp, m, np.arange(pp), {}
    factor = float(rng.choice([3.0, 2.5]))
    s.e = SimpleNamespace(fwd_bwd_factor=factor, split=lambda comp: split_stage_times(comp, factor))
    s.send_first, s.send_last = (0.0, 0.0) if seed % 3 == 0 else tuple(rng.uniform(0, 0.3, 2).tolist())
    s.sends_fwd, s.sends_bwd = np.zeros((pp, 1)), np.zeros((pp, 1))
    s.sends_fwd[0], s.sends_bwd[pp - 1] = s.send_first, s.send_last
    s.dp_rows = np.ascontiguousarray(rng.uniform(0, 0.2, (size, pp)).astype(f32))
    s.embedding = float(rng.uniform(0, 0.05))
    splits = []
    for _ in range(int(rng.integers(1, 11))):
        cuts = np.sort(rng.choice(np.arange(1, layers), pp - 1, replace=False)) if pp > 1 else np.zeros(0, int)
        splits.append(tuple(np.diff(np.concatenate([[0], cuts, [layers]])).tolist()))
    return s, splits


@compiled
@pytest.mark.parametrize("seed", range(40))
def test_split_ends_give_evaluate_numpys_step_times(seed, monkeypatch):
    """Every split's step time, for batches of 1..10 splits (the kernel runs 4 lanes, padding the
    last group), pp 1..12, micro-batches on both sides of pp, sends or none: the same float32."""
    ours, splits = _search(seed)
    theirs, _ = _search(seed)
    got = ours.evaluate(splits)
    monkeypatch.setattr(native, "kernels", None)
    want = theirs.evaluate(splits)
    assert np.array(got, dtype=f32).tobytes() == np.array(want, dtype=f32).tobytes()
    assert all(type(v) is float for v in got)


@compiled
def test_split_ends_rejects_splits_that_leave_the_table():
    """A split whose counts do not cover the layers, or a buffer of the wrong size, is a
    ValueError, not a read past a buffer."""
    s, _ = _search(2)
    times, pp = s.every, s.pp
    size = times.shape[1]
    sends = (np.zeros(pp), np.zeros(pp))
    with pytest.raises(ValueError, match="sum to size - 1"):
        native.kernels.split_ends(times, size, np.full((1, pp), size, dtype=np.int64), pp, s.m, 3.0, *sends,
                                  np.empty((1, pp)))
    with pytest.raises(ValueError, match="ends"):
        native.kernels.split_ends(times, size, np.ones((1, pp), dtype=np.int64), pp, s.m, 3.0, *sends,
                                  np.empty((2, pp)))


@compiled
@pytest.mark.parametrize("seed", range(30))
def test_polish_moves_are_move_rows_numpy(seed, monkeypatch):
    """partition.polish.move_rows by the kernel polish_moves: the same rows (one layer moved from
    stage i to stage j, in numpy's order, stages left empty and runs that do not fit dropped) and
    the same stage times, on tables with memory caps and splits with one-layer stages."""
    from fasop.partition.polish import move_rows

    s, splits = _search(seed)
    rng = np.random.default_rng(seed)
    pp, size = s.every.shape[:2]
    a, b = np.meshgrid(np.arange(size), np.arange(size), indexing="ij")
    caps = rng.integers(1, size, pp)
    fitting = np.where((b - a)[None] <= caps[:, None, None], s.every, np.inf)
    got = [move_rows(split, fitting) for split in splits]
    monkeypatch.setattr(native, "kernels", None)
    for split, (counts, times) in zip(splits, got):
        want_counts, want_times = move_rows(split, fitting)
        assert counts.dtype == want_counts.dtype and np.array_equal(counts, want_counts)
        assert times.tobytes() == want_times.tobytes()


@compiled
def test_polish_moves_rejects_a_split_outside_the_table():
    """Counts that are not >= 1 or that pass the table's layers are a ValueError, not a read
    past a buffer."""
    times = np.zeros((2, 5, 5))
    rows = (np.empty((2, 2), dtype=np.int64), np.empty((2, 2)))
    for split in ([9, -5], [0, 4], [3, 2]):
        with pytest.raises(ValueError, match="sum to size - 1"):
            native.kernels.polish_moves(np.array(split, dtype=np.int64), times, 5, *rows)
