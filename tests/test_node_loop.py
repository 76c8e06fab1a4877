"""The optimal partitioner's node loop compiled (fasop/partition/compiled.py, kernel
`branch_and_bound` in fasop/schedule/_node_loop.h) against its Python loop, the reference
(partition.splits._Search.loop): on generated pipelines, with every bound the loop knows (the
chains with and without the round trips, raised to the backward sweep and to the zigzag chains;
the reverse sweep over the flipped stages), budgets that stop the search, cuts, the settle mode,
one to three last stages, a finite `above`; and on FASOP's two mixed experiments: the same nodes
visited, the same splits sent to be evaluated in the same batches, the same result, bit for bit.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

from conftest import layer_time_table

import fasop.estimators.fasop2024.optimal as split_search
from fasop.cli.command import main
from fasop.partition import compiled
from fasop.partition.splits import optimal
from fasop.partition.zigzag import ZigzagBound, with_zigzag, zigzag_completion
from fasop.schedule import native
from fasop.schedule.bounds import SweepBound, one_f_one_b_bound, steady_weights, sweep_completion, with_sweep
from fasop.schedule.pipeline import critical_path, one_f_one_b
from fasop.schedule.reverse_sweep import ReverseSweepBound, flipped_bound, sweep_prefix_completion

needs_kernels = pytest.mark.skipif(native.kernels is None, reason="compiled kernels not built")
f32 = np.float32


def _pipeline(seed: int) -> dict:
    """A random pipeline (per-layer seconds per stage, most layers per stage, end sends, a float32
    DP all-reduce by stage 0's layers) and partition.optimal's callbacks on it: the objective is
    the simulated 1F1B end + that all-reduce, in float32 as FASOP's estimate; cuts its critical
    chain. Coarse times on odd seeds (ties)."""
    rng = np.random.default_rng(900 + seed)
    pp = int(rng.integers(1, 9))
    layers = int(rng.integers(pp + 1, 3 * pp + 8))
    m = int(rng.integers(1, 12))
    times, span = layer_time_table(rng, pp, layers, coarse=bool(seed % 2))
    caps = rng.integers(max(2, -(-layers // pp)), layers + 1, pp)
    fitting = np.where(span[None] <= caps[:, None, None], times, np.inf)
    send_fwd, send_bwd = np.zeros((pp, 1)), np.zeros((pp, 1))
    send_fwd[0], send_bwd[pp - 1] = rng.uniform(0, 0.3, 2)
    dp = np.concatenate([[0.0], np.cumsum(rng.uniform(0, 0.2, layers))]).astype(f32)

    def stage_times(split):
        edges = np.concatenate([[0], np.cumsum(split)])
        return fitting[np.arange(pp), edges[:-1], edges[1:]]

    def evaluate(many):
        comp = np.stack([stage_times(s) for s in many], axis=1)
        ones = np.ones(len(many))
        ends = one_f_one_b(comp / 3, 2 * comp / 3, send_fwd * ones, send_bwd * ones, m).astype(f32)
        return [float(x) for x in (ends.max(axis=0) + np.array([dp[s[0]] for s in many]))]

    def cut(split):
        _, w, const = critical_path(stage_times(split)[:, None], send_fwd, send_bwd, m, fwd_bwd_factor=3.0)
        return w[:, 0], float(const[0])

    weights = steady_weights(pp, m, fwd_bwd_factor=3.0)
    sends = {"send_first": float(send_fwd[0, 0]), "send_last": float(send_bwd[-1, 0])}
    return {"fitting": fitting, "pp": pp, "m": m, "layers": layers, "sends": sends, "evaluate": evaluate, "cut": cut,
            "extra": lambda n: float(dp[n]), "weights": weights, "send_fwd": send_fwd[:, 0], "send_bwd": send_bwd[:, 0],
            "chains": functools.partial(one_f_one_b_bound, num_stages=pp, num_microbatches=m, weights=weights, **sends)}


def _bound(case: dict, kind: str):
    """(times, bound) of one composition the compiled loop knows, on `case`."""
    fitting, m, sends = case["fitting"], case["m"], case["sends"]
    per_stage = {"send_fwd": case["send_fwd"], "send_bwd": case["send_bwd"]}
    chains = case["chains"]
    if kind == "chains":
        return fitting, functools.partial(chains, round_trips=False)
    tight = functools.partial(chains, round_trips=True)
    if kind == "tight":
        return fitting, tight
    sweep = SweepBound(sweep_completion(fitting, m, fwd_bwd_factor=3.0, **per_stage), num_microbatches=m,
                       fwd_bwd_factor=3.0, **sends, **per_stage)
    if kind == "sweep":
        return fitting, with_sweep(tight, sweep)
    if kind == "zigzag":
        zigzag = ZigzagBound(zigzag_completion(fitting), num_microbatches=m, fwd_bwd_factor=3.0, **sends)
        return fitting, with_zigzag(with_sweep(tight, sweep), zigzag)
    flipped = np.ascontiguousarray(fitting[::-1, ::-1, ::-1].transpose(0, 2, 1))
    reverse = ReverseSweepBound(sweep_prefix_completion(fitting, m, fwd_bwd_factor=3.0, **per_stage),
                                num_microbatches=m, fwd_bwd_factor=3.0, **sends, **per_stage)
    return flipped, flipped_bound(reverse, case["pp"], case["layers"])


def _recording(record: list):
    """partition.optimal that appends to `record` every batch of splits it has evaluated and, at
    its end, the nodes it visited."""
    def recorded(times, **kwargs):
        evaluate = kwargs["evaluate"]

        def evaluated(many):
            record.append(list(many))
            return evaluate(many)
        found = optimal(times, **(kwargs | {"evaluate": evaluated}))
        record.append(None if found is None else found.visited)
        return found
    return recorded


def _recorded(monkeypatch, use_compiled: bool, call):
    """(call's result, what `_recording` recorded, whether each search ran in C) with the compiled
    loop on or off; call(record) runs the searches."""
    record, in_c, compiled_run = [], [], compiled.run

    def recording_compiled(search, max_nodes):
        got = compiled_run(search, max_nodes)
        in_c.append(got is not None)
        return got

    with monkeypatch.context() as patch:
        patch.setattr(compiled, "run", recording_compiled)
        patch.setattr(compiled, "ENABLED", use_compiled)
        result = call(record)
    return result, record, in_c


OPTIONS = [
    {},
    {"max_nodes": 3},
    {"max_nodes": 40, "max_cuts": 2},
    {"max_cuts": 2, "cuts_after": 5},
    {"settle": True, "last_stages": 3, "max_cuts": 8, "max_nodes": 200},
    {"settle": True, "max_cuts": 2},
    {"batch": 1, "max_cuts": 1},
]


@needs_kernels
@pytest.mark.parametrize("kind", ["chains", "tight", "sweep", "zigzag", "reverse"])
@pytest.mark.parametrize("seed", range(12))
def test_compiled_loop_visits_the_python_loops_nodes(seed, kind, monkeypatch):
    case = _pipeline(seed)
    times, bound = _bound(case, kind)
    flip = (lambda s: s[::-1]) if kind == "reverse" else (lambda s: s)
    kwargs = {"bound": bound, "evaluate": lambda many: case["evaluate"]([flip(s) for s in many]),
              "cut": lambda s: tuple(x[::-1].copy() if kind == "reverse" and np.ndim(x) else x
                                     for x in case["cut"](flip(s))),
              "extra": case["extra"], "stage_weights": case["weights"]}
    seeds = [(case["layers"] - case["pp"] + 1,) + (1,) * (case["pp"] - 1)]
    for options in OPTIONS + [{"above": 0.0}, {"above": 1e9}]:
        def call(record):
            return _recording(record)(times, seeds=seeds, tables={}, **(kwargs | options))
        python, ours = _recorded(monkeypatch, False, call), _recorded(monkeypatch, True, call)
        assert ours[:2] == python[:2], options
        assert python[2] == [False] * len(python[2]) and ours[2] == [True] * len(ours[2]), options
    above = float(np.nextafter(python[0].objective, 0)) if python[0] and np.isfinite(python[0].objective) else None
    if above is not None:  # just below the optimum: stops once every open node is above
        def below(record):
            return _recording(record)(times, seeds=seeds, tables={}, above=above, **kwargs)
        assert _recorded(monkeypatch, True, below)[:2] == _recorded(monkeypatch, False, below)[:2]


@needs_kernels
def test_a_bound_the_loop_does_not_know_runs_in_python(monkeypatch):
    case = _pipeline(3)
    bound = case["chains"]
    def call(record):
        return optimal(case["fitting"], bound=lambda *a: bound(*a), evaluate=case["evaluate"], cut=case["cut"],
                       extra=case["extra"], stage_weights=case["weights"])
    assert _recorded(monkeypatch, True, call)[2] == [False]


@needs_kernels
@pytest.mark.parametrize("model_name", ["gpt2xl", "t5"])
def test_mixed_experiments_search_the_same_nodes_both_ways(model_name, tmp_path, monkeypatch):
    """FASOP's mixed experiments with the default search (every split proven: every pass of the
    proof, the first, settle, reverse, legs and close passes): the same batches evaluated, the
    same nodes visited per search, the same CSV bytes."""
    argv = ["search", "--model", model_name, "--cluster", "fasop-paper", "--nodes", "a100=1,a10=7",
            "--heterogeneous", "--no-progress"]
    got = []
    for use in (True, False):
        out = tmp_path / f"{use}.csv"

        def call(record):
            monkeypatch.setattr(split_search, "optimal", _recording(record))
            return main(argv + ["--out", str(out)])
        status, record, in_c = _recorded(monkeypatch, use, call)
        assert status == 0 and any(in_c) == use
        got.append((out.read_bytes(), record))
    assert got[0] == got[1]


@needs_kernels
def test_the_kernel_rejects_buffers_of_the_wrong_size_and_unknown_bounds():
    case = _pipeline(5)
    n, size = case["pp"], case["layers"] + 1
    chain = compiled.parts(case["chains"], n, case["layers"])[0]
    tables = [np.zeros((n + 1) * size)] * 3
    options = (1e-6, False, np.inf, 0.0, 16, 2, -1, False)
    state = (np.inf, np.zeros((0, n)), np.zeros(0), np.zeros((0, n + 1, size)))

    def call(least_sum, parts):
        callbacks = (case["extra"], lambda *a: state, case["evaluate"], [], np.full(size, np.nan))
        return native.kernels.branch_and_bound(case["fitting"], n, size, least_sum, *tables[1:], np.zeros(0),
                                               np.zeros(0), parts, options, callbacks, state)

    with pytest.raises(ValueError, match="least_sum"):
        call(np.zeros(size), (chain, None, None, None))
    with pytest.raises(ValueError, match="reverse sweep alone"):
        call(tables[0], (None, None, None, None))
