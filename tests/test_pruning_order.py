"""The pruned Pareto sweep's output does not depend on the order worker results arrive in.

What is protected here: fasop.pareto.pruning forms round r of compositions from what rounds 0..r-2
found, whatever else has arrived by then, so which compositions are pruned, the cutoffs they are
searched with and the `step_time_bound_s` reported are functions of the inputs alone. An executor
that hands results back in shuffled or reversed order (a later round's before an earlier one's,
as a busy process pool does) must give the CSV of the serial executor byte for byte, and so must
a pool of 2 workers; the frontier stays the exhaustive sweep's.
"""

from __future__ import annotations

import random

import pytest

from fasop.pareto.executors import PoolExecutor, SerialExecutor
from fasop.pareto.frontier import analyse
from fasop.pareto.pruning import pruned_sweep
from fasop.pareto.sweep import compositions, sweep_job
from fasop.report.results import csv_text, pareto_rows
from fasop.specs.load import load_model
from test_sweep_scale import ITERATIONS, _catalog

LIMITS = {"a100": 2, "a10": 3, "a10x": 2}


class ShuffledExecutor(SerialExecutor):
    """Runs any pending task next, not the oldest: the one a seeded random draw picks (seed None:
    always the newest, i.e. results in reverse submission order)."""

    def __init__(self, job, seed: int | None):
        super().__init__(job)
        self.rng = None if seed is None else random.Random(seed)

    def next_result(self):
        k = len(self.queue) - 1 if self.rng is None else self.rng.randrange(len(self.queue))
        index, comp, cutoff = self.queue[k]
        del self.queue[k]
        return index, self.job(comp, cutoff)


def _csv(job, comps, executor, *, round_size: int, prune: bool = True) -> str:
    results = dict(pruned_sweep(job, comps, executor, prune=prune, round_size=round_size))
    analysis = analyse([results[i] for i in range(len(comps))])
    return csv_text(*pareto_rows(analysis, 128, list(LIMITS)))


@pytest.fixture(scope="module")
def sweep():
    model, cluster = load_model("bert"), _catalog(1)
    comps = compositions(LIMITS)
    job = sweep_job(model, cluster, comps, placements="cyclic", partitioner="optimal", iterations=ITERATIONS,
                    spot=False, top=1, partition_budget=1000)
    return job, comps


@pytest.mark.parametrize("round_size", [1, 3])
def test_pruned_csv_is_the_same_whatever_order_results_arrive_in(sweep, round_size):
    job, comps = sweep
    want = _csv(job, comps, SerialExecutor(job), round_size=round_size)
    assert ",pruned," in want  # the sweep prunes: the test tells orders apart
    for seed in (None, 0, 1, 2, 3):
        assert _csv(job, comps, ShuffledExecutor(job, seed), round_size=round_size) == want, seed


def test_bounds_computed_by_the_workers_are_this_process_ones_in_order(sweep):
    from fasop.pareto.pruning import bounds

    job, comps = sweep
    pool = PoolExecutor(job, 2)
    try:
        assert pool.bounds(comps) == bounds(job, comps)
        assert pool.bounds(comps[:1]) == bounds(job, comps[:1]) and pool.bounds([]) == []
    finally:
        pool.close()


def test_pruned_csv_with_two_workers_is_the_serial_one(sweep):
    job, comps = sweep
    want = _csv(job, comps, SerialExecutor(job), round_size=1)
    assert _csv(job, comps, PoolExecutor(job, 2), round_size=1) == want


def test_shuffled_pruned_frontier_is_the_exhaustive_one(sweep):
    job, comps = sweep
    full = _csv(job, comps, SerialExecutor(job), round_size=1, prune=False).splitlines()
    for seed in (None, 5):
        mine = _csv(job, comps, ShuffledExecutor(job, seed), round_size=3).splitlines()
        frontier = [i for i, line in enumerate(full) if line.split(",")[-4] == "True"]  # on_frontier
        assert frontier and len(mine) == len(full)
        unranked = lambda line: line.split(",")[:16] + line.split(",")[17:]  # noqa: E731  (rank: in its file)
        assert [unranked(mine[i]) for i in frontier] == [unranked(full[i]) for i in frontier], seed


@pytest.mark.parametrize("stop", [3, 9])
def test_resume_from_a_checkpoint_written_out_of_order(sweep, stop):
    """A sweep stopped after `stop` results that arrived in shuffled order (its checkpoint holds
    later rounds' compositions without earlier ones), resumed with another order: the bytes of
    the uninterrupted serial sweep, and the checkpointed searches are not run again."""
    job, comps = sweep
    want = _csv(job, comps, SerialExecutor(job), round_size=3)
    done: dict = {}
    sweep_ = pruned_sweep(job, comps, ShuffledExecutor(job, 11), round_size=3,
                          record=lambda i, cutoff, result: done.__setitem__(i, (cutoff, result)))
    for _ in zip(range(stop), sweep_):
        pass
    sweep_.close()
    assert len(done) >= 2
    executor = ShuffledExecutor(job, 12)
    ran = []
    executor.submit = lambda tasks: (ran.extend(t[0] for t in tasks), SerialExecutor.submit(executor, tasks))
    results = dict(pruned_sweep(job, comps, executor, round_size=3, done=done))
    analysis = analyse([results[i] for i in range(len(comps))])
    assert csv_text(*pareto_rows(analysis, 128, list(LIMITS))) == want
    assert not set(ran) & set(done)
