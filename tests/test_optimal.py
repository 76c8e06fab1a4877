"""The `optimal` partitioner is exact: on random small cases it finds the same lowest estimated
step time as brute force over every composition of the layers into stages, it never loses to
FASOP's greedy split, and it only returns splits that fit in memory when one exists."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from fasop.costs.memory import stage_fits
from fasop.estimators.fasop2024.batch import Prepared
from fasop.estimators.fasop2024.estimator import PARAM_BYTES, Fasop2024Estimator
from fasop.estimators.fasop2024.layout import stage_limits
from fasop.partition.splits import Split
from fasop.plans.plan import Plan
from fasop.specs.types import GIB, ClusterSpec, ModelSpec, NodeType
from fasop.specs.types import Profile, ScalingTable


def _node(name, gpu, inter, intra, memory_gib, shared):
    return NodeType(name=name, instance=name, gpu=gpu, gpus_per_node=2, memory_limit_bytes=memory_gib * GIB,
                    intra_node_bytes_per_s=intra, inter_node_bytes_per_s=inter, intra_node_shared=shared,
                    usd_per_hour=1.0, spot_usd_per_hour=None)


def _case(seed: int, memory_gib: float = 1000.0):
    """A random model of 4..12 entries (embedding, transformers, head) with random per-layer
    times on two GPU types, and a 2-type cluster with random links."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(4, 13))
    kinds = ("embedding",) + ("transformer",) * (n - 2) + ("head",)
    forward = {(gpu, tp): tuple(float(x) for x in rng.uniform(1e-3, 5e-3, n)) for gpu in ("G1", "G2") for tp in (1, 2)}
    one = ScalingTable(points=((1, (1.0,)),), beyond="proportional")
    profile = Profile(forward_s=forward, fwd_bwd_factor=3.0,
                      scaling={(g, k): one for g in ("G1", "G2") for k in set(kinds)})
    model = ModelSpec(path="random.yaml", name="random", hidden_size=256, num_attention_heads=4, vocab_size=1000,
                      sequence_length=128, global_batch_size=16, tie_word_embeddings=True, bytes_per_element=2,
                      layer_kinds=kinds, layer_segments=("model",) * n, profile=profile)
    fast = _node("fast", "G1", float(rng.uniform(1e9, 5e9)), float(rng.uniform(1e10, 5e10)), memory_gib, False)
    slow = _node("slow", "G2", float(rng.uniform(1e9, 5e9)), float(rng.uniform(1e10, 5e10)), memory_gib, True)
    cluster = ClusterSpec(path="random.yaml", estimator="fasop-2024", node_types={"fast": fast, "slow": slow},
                          p2p_inter_node_divisor=1.05, p2p_intra_node_divisor=3.5, memory_overhead_factor=1.1)
    order = [fast, slow, slow, fast]
    rng.shuffle(order)
    return model, cluster, tuple(order), rng


def _brute_force(est: Fasop2024Estimator, plan: Plan, respect_memory: bool) -> float:
    p = est.prepare(plan) if est.partitioner == "fasop-minmax" else None
    n = len(est.model.layer_kinds)
    splits = []
    for cuts in itertools.combinations(range(1, n), plan.pp - 1):
        counts = tuple(b - a for a, b in zip((0,) + cuts, cuts + (n,)))
        edges = (0,) + cuts + (n,)
        if respect_memory and not all(stage_fits(plan, est.model, est.cluster, est.model.layer_kinds[edges[i]:edges[i + 1]],
                                                      stage_limits(plan)[i],
                                                      param_bytes=PARAM_BYTES)
                                      for i in range(plan.pp)):
            continue
        splits.append(Split(counts, counts))
    probe = Prepared(plan, p.stage_types, p.costs, p.p2p, splits)
    ends = est._schedule_all([probe])[0]
    return min(float(est._step(plan, p.stage_types, s.reported[0], e)[0]) for s, e in zip(splits, ends))


@pytest.mark.parametrize("seed", range(40))
def test_optimal_equals_brute_force(seed):
    model, cluster, order, rng = _case(seed)
    greedy = Fasop2024Estimator(model, cluster, order, "fasop-minmax")
    exact = Fasop2024Estimator(model, cluster, order, "optimal")
    n = len(model.layer_kinds)
    checked = 0
    for tp, dp, pp in [(1, 2, 4), (1, 4, 2), (2, 1, 4), (1, 1, 8), (2, 2, 2)]:
        if pp > min(4, n - 2) or tp * dp * pp != 8:
            continue
        for mbs in (1, 2, 4):
            plan = Plan(tp=tp, dp=dp, pp=pp, mbs=mbs, global_batch_size=model.global_batch_size, placement=order)
            best = _brute_force(greedy, plan, respect_memory=True)
            found = exact.estimate(plan)
            assert found.step_time_s == pytest.approx(best, rel=1e-12), (tp, dp, pp, mbs)
            checked += 1
    assert checked > 0


@pytest.mark.parametrize("seed", range(8))
def test_optimal_respects_memory_and_falls_back(seed):
    """With a tight memory limit, the optimum is taken over fitting splits only; when none
    fits, the fastest split overall is returned and flagged OOM."""
    model, cluster, order, _ = _case(seed, memory_gib=0.01)
    greedy = Fasop2024Estimator(model, cluster, order, "fasop-minmax")
    exact = Fasop2024Estimator(model, cluster, order, "optimal")
    plan = Plan(tp=1, dp=2, pp=4 if len(model.layer_kinds) >= 6 else 2, mbs=1,
                global_batch_size=model.global_batch_size, placement=order)
    got = exact.estimate(plan)
    try:
        best = _brute_force(greedy, plan, respect_memory=True)
        assert not got.memory.is_oom
    except ValueError:  # min() of nothing: no split fits
        best = _brute_force(greedy, plan, respect_memory=False)
        assert got.memory.is_oom
    assert got.step_time_s == pytest.approx(best, rel=1e-12)


def _stage_times(rng, n: int, layers: int, coarse: bool) -> np.ndarray:
    """times[k, a, b] as `optimal` reads them: layers a..b-1 on stage k, inf where b <= a and
    where a run does not fit (at random); on a coarse grid, many ties."""
    size = layers + 1
    t = rng.integers(1, 4, (n, size, size)).astype(float) if coarse else rng.uniform(0.1, 2.0, (n, size, size))
    a, b = np.meshgrid(np.arange(size), np.arange(size), indexing="ij")
    t = np.where(b > a, t * (b - a), np.inf)
    t[rng.random(t.shape) < 0.15] = np.inf
    return t


@pytest.mark.parametrize("seed", range(40))
def test_partition_tables_are_the_same_compiled_and_in_numpy(seed, monkeypatch):
    """completion (sums and largest, stage weights 0, 1 and others), capped_completion and
    bottleneck_split in C (fasop/schedule/_native.c) give numpy's tables and split to the bit, ties and
    infeasible runs included."""
    from fasop.schedule import native
    from fasop.partition import splits as partition

    if native.kernels is None:
        pytest.skip("the compiled kernels were not built")
    rng = np.random.default_rng(seed)
    n, layers = int(rng.integers(1, 6)), int(rng.integers(1, 14))
    times = _stage_times(rng, n, layers, coarse=seed % 2 == 0)
    weights = [np.ones(n), np.zeros(n), rng.choice([0.0, 1.0, 2.5, 1 / 3], n)]
    finite = times[np.isfinite(times)]
    caps = np.append(np.sort(rng.choice(finite, 5) if len(finite) else np.ones(5)), np.inf)  # stage times: ties at a cap

    def tables():
        return ([partition.completion(times, w, largest) for w in weights for largest in (False, True)],
                [partition.capped_completion(times, w, caps) for w in weights], partition.bottleneck_split(times))

    compiled = tables()
    monkeypatch.setattr(native, "kernels", None)
    numpy_ = tables()
    for ours, theirs in zip(compiled[0] + compiled[1], numpy_[0] + numpy_[1]):
        assert ours.shape == theirs.shape and np.array_equal(ours, theirs)
    assert compiled[2] == numpy_[2]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("encoder_decoder", [False, True], ids=["decoder", "encoder-decoder"])
def test_a_chunks_seeds_are_each_plans_greedy_splits(seed, encoder_decoder):
    """finish.greedy_splits (the optimal partitioner's seeds of a chunk of plans, its min-max
    problems solved together on arrays) gives every plan the candidate splits its own min-max
    gives (prepare with fasop-minmax: fasop_minmax_splits), in order: every plan of 4 nodes in
    every order, pp = 1 and encoder-decoder splits included."""
    from fasop.estimators.fasop2024.finish import greedy_splits
    from fasop.plans.enumerate import all_placements, degree_list, plans
    from test_native import _world

    model, cluster, types = _world(seed, encoder_decoder, memory_gib=1000.0)
    nodes = (types["x"], types["y"], types["x"], types["y"])
    combos = degree_list(nodes, tp_degrees=(1, 2), global_batch_size=16, num_transformer_layers=10)
    candidates = list(plans(all_placements(nodes), combos, global_batch_size=16))
    est = Fasop2024Estimator(model, cluster, nodes)
    assert greedy_splits(est, candidates, {}) == [est.prepare(p).splits for p in candidates]
    assert any(p.pp == 1 for p in candidates) and any(p.pp == 4 for p in candidates)
