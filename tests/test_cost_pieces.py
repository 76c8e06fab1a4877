"""Each cost piece of the fasop-2024 estimator against cases worked out by hand (docs/estimators.md §2-§8).

Fixtures are built here from small round numbers (a 4-entry model, nodes of 2 GPUs with
bandwidths that are powers of two), so every expected value below is exact and its arithmetic is
shown next to it. Nothing here reads the shipped specs.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from fasop.costs.compute import ProfileCompute
from fasop.costs.memory import stage_elements
from fasop.estimators.fasop2024 import comm as fasop2024_comm
from fasop.estimators.fasop2024.estimator import PARAM_BYTES
from fasop.estimators.fasop2024.layout import fasop_limit_node, stage_limits
from fasop.estimators.fasop2024.memory import estimate_memory
from fasop.estimators.fasop2024.minmax import minmax
from fasop.plans.enumerate import cyclic_placements, degrees
from fasop.plans.space import divisors
from fasop.plans.plan import Plan
from fasop.schedule.pipeline import one_f_one_b
from fasop.specs.types import ClusterSpec, ModelSpec, NodeType
from fasop.specs.types import Profile, ScalingTable

f32 = np.float32


# ----------------------------------------------------------------------------- fixtures
def node(name: str = "a", *, gpus: int = 2, inter: float = 128.0, intra: float = 512.0, shared: bool = False,
         memory_bytes: float = 1e12) -> NodeType:
    """Bandwidths in bytes/s: tiny, so that transfer times of a few bytes are round seconds."""
    return NodeType(name=name, instance=f"{name}.box", gpu=name.upper(), gpus_per_node=gpus,
                    memory_limit_bytes=memory_bytes, intra_node_bytes_per_s=intra, inter_node_bytes_per_s=inter,
                    intra_node_shared=shared, usd_per_hour=1.0, spot_usd_per_hour=None)


CLUSTER = ClusterSpec(path="cluster.yaml", estimator="fasop-2024", node_types={"a": node()},
                      p2p_inter_node_divisor=2.0, p2p_intra_node_divisor=4.0, memory_overhead_factor=1.25)

ONE = ScalingTable(points=((1, (1.0,)),), beyond="constant")
KINDS = ("embedding", "transformer", "transformer", "head")


def model(*, kinds=KINDS, forward=(0.001, 0.002, 0.002, 0.004), scaling=None, fwd_bwd_factor=3.0, tie=True,
          gbs=8) -> ModelSpec:
    """h=8, s=4, v=16, a=2 heads, 2 bytes per element, one GPU type `G` at tp=1."""
    profile = Profile(forward_s={("G", 1): tuple(forward)}, fwd_bwd_factor=fwd_bwd_factor,
                      scaling=scaling or {("G", k): ONE for k in set(kinds)})
    return ModelSpec(path="model.yaml", name="tiny", hidden_size=8, num_attention_heads=2, vocab_size=16,
                     sequence_length=4, global_batch_size=gbs, tie_word_embeddings=tie, bytes_per_element=2,
                     layer_kinds=tuple(kinds), layer_segments=("model",) * len(kinds), profile=profile)


def plan(tp: int, dp: int, pp: int, *nodes: NodeType, mbs: int = 1, gbs: int = 8) -> Plan:
    return Plan(tp=tp, dp=dp, pp=pp, mbs=mbs, global_batch_size=gbs, placement=nodes)


# ----------------------------------------------------------------------------- specs.ScalingTable
def test_scaling_points_and_proportional_tail():
    """docs/estimators.md §3 tables: the value at the largest point <= b, then x b/last point past the end.
    {1: 1, 4: 2} proportional: f(3) = 1, f(4) = 2, f(6) = 2*6/4 = 3, f(8) = 2*8/4 = 4."""
    table = ScalingTable(points=((1, (1.0,)), (4, (2.0,))), beyond="proportional")
    assert [table.factor(b) for b in (1, 2, 3, 4, 6, 8)] == [1.0, 1.0, 1.0, 2.0, 3.0, 4.0]


def test_scaling_constant_tail():
    """`constant` keeps the last value: {1: 1, 4: 2} gives f(8) = 2, not 4."""
    table = ScalingTable(points=((1, (1.0,)), (4, (2.0,))), beyond="constant")
    assert table.factor(8) == 2.0 and table.factor(64) == 2.0


def test_scaling_single_point_is_linear():
    """A single point {1: 1} proportional is FASOP's `b` (e.g. the BERT head): f(b) = 1*b/1."""
    table = ScalingTable(points=((1, (1.0,)),), beyond="proportional")
    assert [table.factor(b) for b in (1, 2, 16)] == [1.0, 2.0, 16.0]


def test_scaling_product_lists_multiply_left_to_right():
    """A list is a product, taken left to right as FASOP writes it: [1.2, 1.2, 1.4, 1.6] ->
    ((1.2*1.2)*1.4)*1.6 = 3.2256, which differs in the last ulp from 1.2*(1.2*(1.4*1.6)).
    Past the end: 3.2256 * 32/16."""
    table = ScalingTable(points=((1, (1.0,)), (2, (1.5, 2.0)), (16, (1.2, 1.2, 1.4, 1.6))), beyond="proportional")
    assert table.factor(2) == 3.0  # 1.5 * 2.0
    assert table.factor(15) == 3.0
    assert table.factor(16) == 1.2 * 1.2 * 1.4 * 1.6 != 1.2 * (1.2 * (1.4 * 1.6))
    assert table.factor(32) == 1.2 * 1.2 * 1.4 * 1.6 * 32 / 16


# ----------------------------------------------------------------------------- compute
def test_profile_layer_costs_scale_by_kind():
    """fwd+bwd = fwd_bwd_factor x profiled forward x micro-batch factor of the layer's kind (§3).
    At b=2 with embedding f=b (single point), transformer {1: 1, 2: 1.5}, head constant 1:
    embedding 3*0.001*2 = 0.006, transformer 3*0.002*1.5 = 0.009, head 3*0.004*1 = 0.012."""
    scaling = {("G", "embedding"): ScalingTable(points=((1, (1.0,)),), beyond="proportional"),
               ("G", "transformer"): ScalingTable(points=((1, (1.0,)), (2, (1.5,))), beyond="constant"),
               ("G", "head"): ONE}
    compute = ProfileCompute(model(scaling=scaling))
    assert compute.layer_costs("G", 1, 2).seconds == pytest.approx((0.006, 0.009, 0.009, 0.012), rel=1e-12)
    assert compute.layer_costs("G", 1, 1).seconds == pytest.approx((0.003, 0.006, 0.006, 0.012), rel=1e-12)


def test_stage_sum_is_sequential_left_to_right():
    """A stage's time is its layers summed left to right in float64 (§4), which decides ties in
    the balancing: (1 + 1e-16) + 1e-16 = 1.0 exactly, whereas 1 + (1e-16 + 1e-16) = 1 + 2.2e-16.
    An empty run costs 0; a run of one layer is that layer."""
    costs = ProfileCompute(model(forward=(1.0, 1e-16, 1e-16, 0.5), fwd_bwd_factor=1.0)).layer_costs("G", 1, 1)
    assert costs.stage(0, 3) == 1.0
    assert costs.stage(1, 3) == 2e-16
    assert costs.stage(0, 4) == 1.5
    assert costs.stage(2, 2) == 0.0
    assert costs.stage(3, 4) == 0.5
    assert costs.total == costs.stage(0, 4)


# ----------------------------------------------------------------------------- comm: p2p
# Volume per boundary = mbs * s * h * 2 bytes = 1*4*8*2 = 64 bytes.
def test_p2p_intra_node():
    """Both stages on one node: bw = intra / 4 = 512/4 = 128 B/s -> 64/128 = 0.5 s; mbs=2 -> 1.0 s."""
    assert fasop2024_comm.p2p_seconds(plan(1, 1, 2, node()), model(), CLUSTER) == (0.5,)
    assert fasop2024_comm.p2p_seconds(plan(1, 1, 2, node(), mbs=2), model(), CLUSTER) == (1.0,)


def test_p2p_inter_node_uses_slower_node_and_divisor():
    """Stages on two nodes (inter 128 and 256 B/s): bw = min(128, 256)/dp/tp/2 = 64 -> 1.0 s,
    whichever node comes first."""
    a, b = node(inter=128.0), node("b", inter=256.0)
    assert fasop2024_comm.p2p_seconds(plan(1, 1, 2, node(gpus=1, inter=128.0), node("b", gpus=1, inter=256.0)),
                            model(), CLUSTER) == (1.0,)
    assert fasop2024_comm.p2p_seconds(plan(1, 2, 2, a, b), model(), CLUSTER) == (2.0,)
    assert fasop2024_comm.p2p_seconds(plan(1, 2, 2, b, a), model(), CLUSTER) == (2.0,)


def test_p2p_inter_node_shared_by_dp_and_tp():
    """Replicas and TP lanes share the NICs: tp=1 dp=2 -> 128/2/1/2 = 32 B/s -> 2.0 s;
    tp=2 dp=1 -> 128/1/2/2 = 32 -> 2.0 s; tp=2 dp=2 on four nodes -> 128/2/2/2 = 16 -> 4.0 s."""
    n = node()
    assert fasop2024_comm.p2p_seconds(plan(1, 2, 2, n, n), model(), CLUSTER) == (2.0,)
    assert fasop2024_comm.p2p_seconds(plan(2, 1, 2, n, n), model(), CLUSTER) == (2.0,)
    assert fasop2024_comm.p2p_seconds(plan(2, 2, 2, n, n, n, n), model(), CLUSTER) == (4.0,)


def test_p2p_per_boundary():
    """pp=4 on two 2-GPU nodes: boundaries 0->1 and 2->3 inside a node (0.5 s), 1->2 across
    (128/1/1/2 = 64 B/s -> 1.0 s)."""
    n = node()
    assert fasop2024_comm.p2p_seconds(plan(1, 1, 4, n, n), model(), CLUSTER) == (0.5, 1.0, 0.5)
    assert fasop2024_comm.p2p_seconds(plan(1, 1, 1, n), model(), CLUSTER) == ()


def test_p2p_boundary_waits_for_slowest_pair():
    """3-GPU nodes, tp=1 dp=2: pair 0->2 is intra (128 B/s), pair 1->3 is inter
    (128/2/1/2 = 32 B/s): the boundary takes the slower, 64/32 = 2.0 s."""
    n = node(gpus=3)
    assert fasop2024_comm.p2p_seconds(plan(1, 2, 2, n, n), model(), CLUSTER) == (2.0,)


# ----------------------------------------------------------------------------- comm: DP ring
def test_dp_ring_bandwidth_is_slowest_hop():
    """Stage 0's ring: inside one node -> intra 512; dp=4 over two nodes hops 0-1 (intra), 1-2
    (inter), 2-3 (intra), 3-0 (inter) -> min inter of the two nodes, 128; tp=2 dp=2: lane t=1
    links ranks 1 and 3 on different nodes -> 128."""
    assert fasop2024_comm.dp_ring_bandwidth(plan(1, 2, 1, node())) == 512.0
    assert fasop2024_comm.dp_ring_bandwidth(plan(1, 4, 1, node(inter=256.0), node("b", inter=128.0))) == 128.0
    assert fasop2024_comm.dp_ring_bandwidth(plan(2, 2, 1, node(), node())) == 128.0


@pytest.mark.parametrize("dp,expected", [(2, 2.0), (4, 3.0), (8, 3.5)])
def test_dp_ring_moves_2_dp_minus_1_over_dp_of_the_buffer(dp, expected):
    """Ring all-reduce of P=100 16-bit gradients (200 bytes) at 100 B/s: 2(dp-1)/dp x 200/100:
    dp=2 -> 1 x 2 = 2.0 s, dp=4 -> 1.5 x 2 = 3.0 s, dp=8 -> 1.75 x 2 = 3.5 s (tp=1, tp*dp >= M)."""
    cost = fasop2024_comm.dp_allreduce_seconds(plan(1, dp, 1, node()), f32(100), f32(100), False, 2)
    assert cost == pytest.approx(expected, rel=1e-6)


def test_dp_allreduce_single_replica_is_free():
    assert fasop2024_comm.dp_allreduce_seconds(plan(1, 1, 4, node(), node()), f32(100), f32(100), True, 2) == 0.0


def test_dp_allreduce_contention_divisions():
    """§7: tp*dp >= M: the TP lanes share the ring: tp=2 dp=2 M=2 -> bw 100/2 = 50 ->
    2*1*100*2/(2*50) = 4.0 s. tp*dp < M with tp > 1 on a shared bus: M=8 tp=2 dp=2 ->
    bw 100/(8/2) = 25 -> 8.0 s; not shared -> 2.0 s; tp=1 never divides -> 2.0 s."""
    params, bw = f32(100), f32(100)
    assert fasop2024_comm.dp_allreduce_seconds(plan(2, 2, 1, node()), params, bw, False, 2) == pytest.approx(4.0, rel=1e-6)
    wide = node(gpus=8)
    assert fasop2024_comm.dp_allreduce_seconds(plan(2, 2, 1, wide), params, bw, True, 2) == pytest.approx(8.0, rel=1e-6)
    assert fasop2024_comm.dp_allreduce_seconds(plan(2, 2, 1, wide), params, bw, False, 2) == pytest.approx(2.0, rel=1e-6)
    assert fasop2024_comm.dp_allreduce_seconds(plan(1, 2, 1, wide), params, bw, True, 2) == pytest.approx(2.0, rel=1e-6)


# ----------------------------------------------------------------------------- comm: embedding
# Tied embedding: h*v*2 = 8*16*2 = 256 bytes.
def test_embedding_allreduce_hand_cases():
    """Stage 0 and the last stage on one node: 256/(512/min(1,2)*1) = 0.5 s. On two nodes with
    dp=2: bw = 128/min(2, 2) = 64 -> 256/64 = 4.0 s. tp=2 dp=1: 256/(128/1 * 2) = 1.0 s."""
    n = node()
    assert fasop2024_comm.embedding_allreduce_seconds(plan(1, 1, 2, n), model()) == 0.5
    assert fasop2024_comm.embedding_allreduce_seconds(plan(1, 2, 2, n, n), model()) == 4.0
    assert fasop2024_comm.embedding_allreduce_seconds(plan(2, 1, 2, n, n), model()) == 1.0


def test_embedding_allreduce_only_for_a_tied_head_on_another_stage():
    """pp=1 (one stage holds both), no head (T5's layer list), untied: nothing to sync."""
    n = node()
    assert fasop2024_comm.embedding_allreduce_seconds(plan(1, 2, 1, n), model()) == 0.0
    no_head = model(kinds=("embedding", "encoder", "embedding", "decoder"))
    assert fasop2024_comm.embedding_allreduce_seconds(plan(1, 1, 2, n), no_head) == 0.0
    assert fasop2024_comm.embedding_allreduce_seconds(plan(1, 1, 2, n), model(tie=False)) == 0.0


# ----------------------------------------------------------------------------- schedule
def schedule(fwd, bwd, send_fwd, send_bwd, m):
    col = lambda x: np.asarray(x, dtype=float).reshape(-1, 1)  # noqa: E731
    return one_f_one_b(col(fwd), col(bwd), col(send_fwd), col(send_bwd), m)[:, 0]


def test_1f1b_two_stages_one_microbatch():
    """pp=2, m=1 (warm-up w_0 = 1, w_1 = 0), from the recurrences (fasop.schedule.recurrences.run, docs/estimators.md §5):
    stage 0 forward ends F0, its send ends F0+sf0 = fre_1; stage 1 forward ends F0+sf0+F1 and its
    backward E1 = F0+sf0+F1+B1; its send ends E1+sb1 = bre_0; stage 0's backward
    E0 = F0+sf0+F1+B1+sb1+B0. With F=(1,3), B=(2,6), sf0=0.5, sb1=0.25:
    E1 = 1+0.5+3+6 = 10.5, E0 = 10.5+0.25+2 = 12.75."""
    ends = schedule([1, 3], [2, 6], [0.5, 0], [0, 0.25], 1)
    assert ends.tolist() == [12.75, 10.5]


@pytest.mark.parametrize("pp,m", [(2, 1), (2, 3), (3, 3), (4, 2), (4, 8), (5, 4)])
def test_1f1b_equal_stages_take_the_textbook_time(pp, m):
    """Equal stages (F=1, B=2), free sends: stage 0 ends at (m + pp - 1)(F + B) — m slots of
    work plus a pp-1 slot bubble — and each later stage one backward earlier:
    E_i = (m+pp-1)*3 - 2i. E.g. pp=2 m=3: 4*3 = 12 and 10."""
    ends = schedule([1] * pp, [2] * pp, [0] * pp, [0] * pp, m)
    assert ends.tolist() == [(m + pp - 1) * 3 - 2 * i for i in range(pp)]


def test_1f1b_batches_pipelines_independently():
    """Many pipelines in one call (last axis) give bit-identical results to one call each: the
    vectorised schedule must not mix columns."""
    rng = np.random.default_rng(7)
    pp, m, batch = 3, 5, 4
    comp = rng.uniform(0.5, 2.0, (pp, batch))
    send_fwd, send_bwd = np.zeros((pp, batch)), np.zeros((pp, batch))
    send_fwd[0], send_bwd[-1] = rng.uniform(0, 0.3, batch), rng.uniform(0, 0.3, batch)
    together = one_f_one_b(comp / 3, 2 * comp / 3, send_fwd, send_bwd, m)
    for k in range(batch):
        alone = one_f_one_b(comp[:, k:k + 1] / 3, 2 * comp[:, k:k + 1] / 3, send_fwd[:, k:k + 1], send_bwd[:, k:k + 1], m)
        assert together[:, k].tolist() == alone[:, 0].tolist()
    assert len({tuple(together[:, k]) for k in range(batch)}) == batch  # the columns really differ


# ----------------------------------------------------------------------------- partition
def uniform(per_layer: float, n: int):
    """Stage costs where every layer takes `per_layer` seconds."""
    return ProfileCompute(model(kinds=("transformer",) * n, forward=(per_layer,) * n, fwd_bwd_factor=1.0)
                          ).layer_costs("G", 1, 1)


def test_minmax_even_split_for_equal_costs():
    """12 equal layers on 3 equal stages: 4-4-4 (balanced from the start, nothing moves)."""
    costs = uniform(1.0, 12)
    assert minmax((costs,) * 3, 12, (0.0,)).reported == (4, 4, 4)


def test_minmax_remainder_goes_to_one_stage():
    """10 equal layers on 3 stages: 3-3-3 plus one; any move keeps a 4-layer stage, so the
    largest stage holds 4 and no stage fewer than 3."""
    split = minmax((uniform(1.0, 10),) * 3, 10, (0.0,))
    assert sorted(split.reported) == [3, 3, 4] and split.scheduled == split.reported


def test_minmax_slow_stage_gets_fewer_layers():
    """8 layers; stage 1 is 3x slower per layer. 4-4 (4 s, 12 s) -> 5-3 (5, 9) -> 6-2 (6, 6);
    7-1 (7, 3) would be worse. Result 6-2."""
    assert minmax((uniform(1.0, 8), uniform(3.0, 8)), 8, ()).reported == (6, 2)


def test_minmax_counts_middle_stage_comm():
    """9 equal layers on 3 stages; the middle stage also pays 3 s of p2p in the balancing:
    3-3-3 (3, 6, 3) -> 4-2-3 (4, 5, 3) -> 4-1-4 (4, 4, 4)."""
    assert minmax((uniform(1.0, 9),) * 3, 9, (3.0,)).reported == (4, 1, 4)


def test_minmax_early_stop_quirk():
    """docs/estimators.md §6, minmax-early-stop: 6 layers, stage 1 10x slower. 3-3 (3, 30) -> 4-2 (4, 20); now the max
    is the last stage holding 2 layers: stop, but (quirk) report 3-3 while scheduling 4-2."""
    split = minmax((uniform(1.0, 6), uniform(10.0, 6)), 6, ())
    assert split.scheduled == (4, 2)
    assert split.reported == (3, 3)


def _random_costs(rng: np.random.Generator, n_layers: int, coarse: bool):
    """Stage costs of n_layers layers: per-layer times on a coarse grid (ties) or not."""
    forward = np.round(rng.uniform(1, 3, n_layers) * 2) / 2 if coarse else rng.uniform(0.5, 3.0, n_layers)
    return ProfileCompute(model(kinds=("transformer",) * n_layers, fwd_bwd_factor=1.0,
                                forward=tuple(float(x) for x in forward))).layer_costs("G", 1, 1)


@pytest.mark.parametrize("seed", range(6))
def test_stage_times_are_the_stage_sums(seed):
    """compute.stage_times: each stage's seconds are its layers' seconds added left to right from
    0.0 (the order FASOP adds them), to the bit; empty stages 0."""
    import functools
    import operator

    from fasop.costs.compute import stage_times

    rng = np.random.default_rng(seed)
    pool = [_random_costs(rng, 30, seed % 2 == 0) for _ in range(3)]
    for _ in range(20):
        counts = [int(c) for c in rng.integers(0, 6, int(rng.integers(1, 7)))]
        stages = [pool[int(k)] for k in rng.integers(0, len(pool), len(counts))]
        edges = np.concatenate([[0], np.cumsum(counts)])
        expected = [functools.reduce(operator.add, s.seconds[a:b], 0.0) for s, a, b in zip(stages, edges, edges[1:])]
        assert stage_times(stages, counts) == expected


@pytest.mark.parametrize("seed", range(12))
def test_minmax_rows_move_as_the_reference(seed):
    """Kernel against its oracle: fasop2024_minmax.minmax_rows, the batched form of FASOP's
    min-max (every problem of a chunk moving in lockstep on arrays, as the compiled 1F1B runs
    many pipelines at once), against minmax, its one reference (one problem at a time: the
    hand-computed cases above state its behaviour). Each split must be minmax's. 200 problems
    drawn from 3 layer counts, 1 to 9 stages (at
    most the layers), stage costs from a pool of 4 that cover more layers than balanced (as the
    encoder of an encoder-decoder), ties included, repeats included."""
    from fasop.estimators.fasop2024.minmax import middle_extra, minmax_rows

    rng = np.random.default_rng(seed)
    coarse = seed % 2 == 0
    pool = [_random_costs(rng, 40, coarse) for _ in range(4)]
    table = np.stack([c.matrix for c in pool])
    for n_layers in (3, 12, 24):
        n_stages = int(rng.integers(1, min(9, n_layers) + 1))
        which = rng.integers(0, len(pool), (200, n_stages))
        comm = rng.uniform(0, 2, (200, max(n_stages - 1, 1)))
        comm = np.round(comm * 2) / 2 if coarse else comm
        reported, scheduled = minmax_rows(table, which, middle_extra(comm, n_stages), n_layers)
        for k in range(200):
            expected = minmax(tuple(pool[int(i)] for i in which[k]), n_layers,
                                        tuple(comm[k, :max(n_stages - 2, 0)].tolist()))
            assert (tuple(reported[k].tolist()), tuple(scheduled[k].tolist())) == (expected.reported,
                                                                                  expected.scheduled)


@pytest.mark.parametrize("seed", range(6))
def test_minmax_many_pads_problems_of_fewer_stages(seed):
    """Kernel against its oracle, as above: fasop2024_minmax.minmax_many solves sets of problems
    of different stage counts in one lockstep run per range of counts, padding the smaller
    ones; each split must still be minmax's. Sets of 2 to 12 stages over 24 layers, 30 problems
    each."""
    from fasop.estimators.fasop2024.minmax import middle_extra, minmax_many

    rng = np.random.default_rng(100 + seed)
    pool = [_random_costs(rng, 24, seed % 2 == 0) for _ in range(3)]
    table = np.stack([c.matrix for c in pool])
    sizes = [int(n) for n in rng.permutation(np.arange(2, 13))]
    sets = [(rng.integers(0, len(pool), (30, n)), rng.uniform(0, 0.5, (30, n - 1))) for n in sizes]
    solved = minmax_many(table, [(w, middle_extra(c, w.shape[1])) for w, c in sets], 24, [None] * len(sets))
    for (which, comm), (reported, scheduled) in zip(sets, solved):
        n = which.shape[1]
        for k in range(len(which)):
            expected = minmax(tuple(pool[int(i)] for i in which[k]), 24, tuple(comm[k, :max(n - 2, 0)].tolist()))
            assert (tuple(reported[k].tolist()), tuple(scheduled[k].tolist())) == (expected.reported,
                                                                                  expected.scheduled)


@pytest.mark.parametrize("seed", range(4))
def test_minmax_rows_compare_seen_counts_in_full(seed, monkeypatch):
    """Kernel against its oracle, as above, with every row's hash of its counts equal
    (fasop2024_lockstep.HASH all 0): the hash only picks the earlier counts worth comparing, and
    a repeated split (steps 2/3) is still told from a different one entry by entry."""
    from fasop.estimators.fasop2024 import lockstep as fasop2024_lockstep
    from fasop.estimators.fasop2024.minmax import middle_extra, minmax_rows

    monkeypatch.setattr(fasop2024_lockstep, "HASH", np.zeros(64, dtype=np.uint64))
    rng = np.random.default_rng(50 + seed)
    pool = [_random_costs(rng, 24, True) for _ in range(3)]
    table = np.stack([c.matrix for c in pool])
    which, comm = rng.integers(0, len(pool), (200, 6)), np.round(rng.uniform(0, 2, (200, 5)) * 2) / 2
    reported, scheduled = minmax_rows(table, which, middle_extra(comm, 6), 24)
    for k in range(200):
        expected = minmax(tuple(pool[int(i)] for i in which[k]), 24, tuple(comm[k, :4].tolist()))
        assert (tuple(reported[k].tolist()), tuple(scheduled[k].tolist())) == (expected.reported, expected.scheduled)


@pytest.mark.parametrize("limit", [5, 1 << 18])
def test_minmax_rows_keep_results_for_later_calls(limit, monkeypatch):
    """Kernel against its oracle, as above, through a fasop2024_minmax.Known kept across calls
    (a pareto sweep's compositions): problems solved before are read back, new ones solved and
    added, the same splits either way; one that holds only `limit` results starts over and still
    gives them."""
    from fasop.estimators.fasop2024 import minmax as fasop2024_minmax
    from fasop.estimators.fasop2024.minmax import Known, middle_extra, minmax_rows

    monkeypatch.setattr(fasop2024_minmax, "MINMAX_KNOWN", limit)
    rng = np.random.default_rng(7)
    pool = [_random_costs(rng, 24, True) for _ in range(3)]
    table = np.stack([c.matrix for c in pool])
    known = Known()
    which, comm = rng.integers(0, len(pool), (60, 5)), np.round(rng.uniform(0, 2, (60, 4)) * 2) / 2
    for rows in (slice(0, 20), slice(10, 40), slice(0, 60), slice(30, 33)):  # some seen, some new
        reported, scheduled = minmax_rows(table, which[rows], middle_extra(comm[rows], 5), 24, known)
        for k, row in enumerate(range(60)[rows]):
            expected = minmax(tuple(pool[int(i)] for i in which[row]), 24, tuple(comm[row, :3].tolist()))
            assert (tuple(reported[k].tolist()), tuple(scheduled[k].tolist())) == (expected.reported,
                                                                                  expected.scheduled)
    assert len(known.at) <= max(limit, 60)


@pytest.mark.parametrize("seed", range(6))
def test_plan_splits_choose_among_fasop_minmax_splits(seed):
    """Batched path against its oracle: fasop2024_plans.plan_splits balances and schedules a
    chunk of plans on arrays (minmax_many, then one 1F1B call for all); each plan's choice must
    be that of the per-plan reference, fasop_minmax_splits (minmax's candidates) scheduled one
    split at a time
    (schedule.Schedule, forward t/3 and backward 2t/3, sends at the ends only): the candidate
    with the lowest stage-0 end, the first of equals. One or two segments (encoder-decoder),
    one to twelve stages."""
    from fasop.estimators.fasop2024.minmax import fasop_minmax_splits
    from fasop.estimators.fasop2024.plans import plan_splits
    from fasop.schedule.pipeline import Schedule

    rng = np.random.default_rng(seed)
    pool = [_random_costs(rng, 24, seed % 2 == 0) for _ in range(3)]
    table = np.stack([c.matrix for c in pool])
    for lengths in ([12], [6, 6], [12, 12]):
        pps = rng.integers(1, min(12, sum(lengths) // 2) + 1, 40)
        if len(lengths) == 2:
            pps = np.maximum(pps, 2)
        ms = rng.integers(1, 9, 40)
        which, comm = rng.integers(0, 3, (40, 12)), rng.uniform(0, 0.5, (40, 12))
        reported, scheduled, times, ends = plan_splits(table, which, comm, pps, ms, lengths, 3.0)
        for k in range(40):
            pp, m = int(pps[k]), int(ms[k])
            stages = tuple(pool[int(i)] for i in which[k, :pp])
            candidates = fasop_minmax_splits(stages, lengths, tuple(comm[k, :pp - 1].tolist()))
            best = None
            for split in candidates:
                t = np.array([s.stage(a, b) for s, a, b in zip(stages, np.cumsum((0,) + split.scheduled),
                                                                 np.cumsum(split.scheduled))])
                sf, sb = np.zeros(pp), np.zeros(pp)
                if pp > 1:
                    sf[0], sb[-1] = comm[k, 0], comm[k, pp - 2]
                    end = Schedule(t / 3.0, 2.0 * t / 3.0, m, sf, sb).stage_end_s
                else:
                    end = (float(np.float32(m * t[0])),)
                if best is None or end[0] < best[1][0]:
                    best = (split, end, t)
            split, end, t = best
            assert tuple(reported[k, :pp].tolist()) == split.reported
            assert tuple(scheduled[k, :pp].tolist()) == split.scheduled
            assert tuple(ends[k, :pp].tolist()) == end and tuple(times[k, :pp].tolist()) == tuple(t.tolist())


@pytest.mark.parametrize("seed", range(20))
def test_minmax_counts_sum_to_layer_count(seed):
    rng = np.random.default_rng(seed)
    n_layers, n_stages = int(rng.integers(4, 30)), int(rng.integers(2, 6))
    n_stages = min(n_stages, n_layers)
    stages = tuple(uniform(float(rng.uniform(0.5, 3.0)), n_layers) for _ in range(n_stages))
    comm_times = tuple(float(x) for x in rng.uniform(0, 2.0, max(n_stages - 2, 0)))
    split = minmax(stages, n_layers, comm_times)
    assert len(split.reported) == len(split.scheduled) == n_stages
    assert sum(split.reported) == sum(split.scheduled) == n_layers
    assert min(split.scheduled) >= 1


# ----------------------------------------------------------------------------- enumerate
@pytest.mark.parametrize("nodes,gpus,gbs,layers", [(4, 4, 256, 24), (8, 4, 64, 48), (3, 2, 12, 5), (2, 8, 16, 48)])
def test_degrees_invariants(nodes, gpus, gbs, layers):
    """Every (tp, dp, pp, mbs) uses all W GPUs, dp divides the batch, mbs the per-replica batch,
    pp <= layers, tp stays inside a node; no duplicates; and nothing valid is missing (compared
    with a brute force over all tuples)."""
    world = nodes * gpus
    found = list(degrees(num_nodes=nodes, gpus_per_node=gpus, tp_degrees=(1, 2, 4), global_batch_size=gbs,
                         num_transformer_layers=layers))
    assert len(found) == len(set(found)) > 0
    for tp, dp, pp, mbs in found:
        assert tp * dp * pp == world and gbs % dp == 0 and (gbs // dp) % mbs == 0 and pp <= layers and gpus % tp == 0
    brute = {(tp, dp, pp, mbs) for tp, dp, pp, mbs in itertools.product((1, 2, 4), divisors(world), divisors(world),
                                                                        divisors(gbs))
             if tp * dp * pp == world and gpus % tp == 0 and gbs % dp == 0 and (gbs // dp) % mbs == 0 and pp <= layers}
    assert set(found) == brute
    assert found == sorted(found, key=lambda c: (c[0], c[1], c[3]))  # FASOP's order: tp, dp, mbs


@pytest.mark.parametrize("nodes,gbs,layers,homogeneous,heterogeneous", [
    (4, 256, 24, 89, 356),   # bert: 4 nodes, global batch 256, 24 layers
    (8, 64, 48, 74, 592),    # gpt2xl: 8 nodes, 64, 48
    (8, 128, 48, 89, 712),   # t5: 8 nodes, 128, 24 encoder + 24 decoder
])
def test_candidate_counts_of_the_six_experiments(nodes, gbs, layers, homogeneous, heterogeneous):
    """The row counts of FASOP's six outputs: (tp, dp, pp, mbs) tuples for 4-GPU nodes and TP
    degrees 1, 2, 4; heterogeneous = one A100 node + A10s, estimated on all N rotations."""
    count = len(list(degrees(num_nodes=nodes, gpus_per_node=4, tp_degrees=(1, 2, 4), global_batch_size=gbs,
                             num_transformer_layers=layers)))
    assert count == homogeneous
    a100, a10 = node("a100", gpus=4), node("a10", gpus=4)
    assert len(cyclic_placements([a10] * nodes)) == 1
    assert count * len(cyclic_placements([a100] + [a10] * (nodes - 1))) == heterogeneous


def test_cyclic_placements_are_rotations():
    a, b = node("a"), node("b")
    assert cyclic_placements([a, b, b]) == [(a, b, b), (b, b, a), (b, a, b)]


# ----------------------------------------------------------------------------- memory
# h=8, s=4, v=16, a=2, tp=1, mbs=1; p = pp if m > pp else m micro-batches in flight.
#   embedding:   params h*v = 128,  act s*b*h*pp*p = 4*1*8*pp*p
#   transformer: params 12h^2 = 768, act s*b*p*h*(10 + 24 + 5*a*s/h) = 32p * 39 = 1248p
#   head:        params h*v = 128,  act 4*s*b*h + 4*s*b*v = 128 + 256 = 384
def test_stage_elements_hand_case():
    """pp=2, dp=2, gbs=8 -> m = 8/(2*1) = 4 > pp -> p = 2. Stage [embedding, transformer]:
    params 128+768 = 896, act 4*8*2*2 + 1248*2 = 128 + 2496 = 2624. Stage [transformer, head]:
    params 896, act 2496 + 384 = 2880."""
    p = plan(1, 2, 2, node(), node())
    assert stage_elements(p, model(), ("embedding", "transformer")) == (896.0, 2624.0)
    assert stage_elements(p, model(), ("transformer", "head")) == (896.0, 2880.0)


def test_stage_elements_in_flight_microbatches():
    """gbs=2, dp=2 -> m = 1 <= pp = 2 -> p = m = 1: transformer act 1248*1; embedding
    4*1*8*pp(2)*p(1) = 64."""
    p = plan(1, 2, 2, node(), node(), gbs=2)
    assert stage_elements(p, model(gbs=2), ("transformer",)) == (768.0, 1248.0)
    assert stage_elements(p, model(gbs=2), ("embedding",)) == (128.0, 64.0)


@pytest.mark.parametrize("limit,is_oom,is_zero_oom", [
    (23760.0, False, False),  # 1.25 * 19008 = 23760: at the limit is not over it
    (23759.0, True, False),
    (13632.0, True, False),   # ZeRO bytes of stage 1 = 13632, compared without the 1.25 factor
    (13631.0, True, True),
])
def test_estimate_memory_oom_threshold(limit, is_oom, is_zero_oom):
    """Partition 2-2 of the stages above (dp=2): bytes = 18*896 + act -> 16128 + 2624 = 18752 and
    16128 + 2880 = 19008; ZeRO (6 + 12//2)*896 + act -> 13376 and 13632. OOM when
    1.25 x bytes > limit; ZeRO OOM when ZeRO bytes > limit (§8)."""
    n = node(memory_bytes=limit)
    p = plan(1, 2, 2, n, n)
    memory = estimate_memory(p, model(), CLUSTER, (2, 2), stage_limits(p), param_bytes=PARAM_BYTES)
    assert memory.stage_bytes == (18752.0, 19008.0)
    assert memory.stage_zero_bytes == (13376.0, 13632.0)
    assert (memory.is_oom, memory.is_zero_oom) == (is_oom, is_zero_oom)


def test_memory_limit_node_lookup():
    """§8: pp = N -> node i; pp > N -> node i // (pp/N); pp < N -> (i+1)*N/pp - 2, FASOP's
    second-to-last node of the span (N=8, pp=2: stages read nodes 2 and 6)."""
    n = node()
    assert [fasop_limit_node(plan(1, 1, 2, n, n), i) for i in range(2)] == [0, 1]
    assert [fasop_limit_node(plan(1, 1, 4, n, n), i) for i in range(4)] == [0, 0, 1, 1]
    assert [fasop_limit_node(plan(1, 4, 2, *[n] * 8), i) for i in range(2)] == [2, 6]
    assert [fasop_limit_node(plan(1, 2, 2, *[n] * 4), i) for i in range(2)] == [0, 2]


def test_memory_limit_node_when_the_nodes_do_not_divide_the_stages():
    """pp > N where N does not divide pp (6 nodes of 4 GPUs, tp 1, dp 3: pp 8), which FASOP's
    i // (pp // N) reads past the last node for: the node holding the stage's first rank,
    i * N // pp (stage i starts at rank 3i). It equals FASOP's reading wherever N divides pp."""
    n = node(gpus=4)
    assert [fasop_limit_node(plan(1, 3, 8, *[n] * 6, gbs=48), i) for i in range(8)] == [0, 0, 1, 2, 3, 3, 4, 5]
    assert [3 * i // 4 for i in range(8)] == [0, 0, 1, 2, 3, 3, 4, 5]  # rank 3i on node (3i) // 4
    for nodes, pp in [(2, 4), (2, 8), (3, 6), (4, 16)]:
        assert [fasop_limit_node(plan(1, 1, pp, *[node(gpus=pp // nodes)] * nodes), i) for i in range(pp)] == \
            [i // (pp // nodes) for i in range(pp)]


def test_search_on_nodes_that_do_not_divide_the_stages():
    """The plans of 6 nodes of 4 GPUs with a global batch of 48 include tp 1, dp 3, pp 8: every
    one is estimated (it raised IndexError before the limit node was defined for it)."""
    from fasop.search import search

    nodes = tuple(node("g", gpus=4) for _ in range(6))
    tiny = model(kinds=("embedding",) + ("transformer",) * 8 + ("head",), forward=(0.001,) * 10, gbs=48)
    result = search(tiny, CLUSTER, nodes, placements="cyclic", partitioner="fasop-minmax")
    assert any((e.plan.tp, e.plan.dp, e.plan.pp) == (1, 3, 8) for e in result.estimates)
    assert len(result.estimates) == result.num_candidates


# ----------------------------------------------------------------------------- plan
@pytest.mark.parametrize("tp,dp,pp,gpus,nodes,expected", [
    (1, 1, 4, 2, 2, ((0,), (0,), (1,), (1,))),  # two stages per 2-GPU node
    (1, 4, 1, 2, 2, ((0, 1),)),                  # one stage over both nodes
    (2, 2, 2, 2, 4, ((0, 1), (2, 3))),           # each stage's 4 ranks on two nodes
    (1, 3, 2, 2, 3, ((0, 1), (1, 2))),           # ranks 0-2 and 3-5 straddle node 1
])
def test_stage_node_indices(tp, dp, pp, gpus, nodes, expected):
    """Stage p holds ranks [p*tp*dp, (p+1)*tp*dp); node k holds ranks [k*M, (k+1)*M)."""
    p = plan(tp, dp, pp, *[node(gpus=gpus)] * nodes)
    assert p.stage_node_indices == expected
    for stage, indices in enumerate(expected):  # agrees with rank() and node_of_rank()
        ranks = [p.rank(stage, d, t) for d in range(dp) for t in range(tp)]
        assert sorted({r // gpus for r in ranks}) == list(indices)


def test_plan_counts_and_key():
    p = plan(2, 2, 2, node("a"), node("b"), mbs=2, gbs=16)
    assert (p.num_gpus, p.num_microbatches, p.gpus_per_node) == (8, 4, 2)
    assert p.key() == "tp2-dp2-pp2-mbs2@a-b"
    assert p.rank(1, 1, 0) == 0 + 2 * 1 + 2 * 2 * 1


@pytest.mark.parametrize("maker_after", [0, 10**9], ids=["written maker", "dict updates"])
def test_trusted_many_makes_what_init_makes(monkeypatch, maker_after):
    """plan.trusted_many: instances equal to __init__'s (fields, equality, hash, still frozen),
    list and constant columns alike, whatever the fields are called (even like the names its
    maker uses), before and after it writes their maker."""
    import dataclasses

    from fasop.plans import plan as plan_module
    from fasop.plans.plan import trusted_many

    monkeypatch.setattr(plan_module, "WRITE_MAKER_AFTER", maker_after)

    @dataclasses.dataclass(frozen=True)
    class Odd:
        new: int
        cls: str
        d: tuple
        obj: float = 0.5

    made = trusted_many(Odd, 3, new=[1, 2, 3], cls="c", d=[(), (1,), (1, 2)], obj=2.0)
    assert made == [Odd(k, "c", d, 2.0) for k, d in zip((1, 2, 3), [(), (1,), (1, 2)])]
    assert [hash(o) for o in made] == [hash(Odd(k, "c", d, 2.0)) for k, d in zip((1, 2, 3), [(), (1,), (1, 2)])]
    with pytest.raises(dataclasses.FrozenInstanceError):
        made[0].new = 5
    assert trusted_many(Odd, 0, new=[], cls="c", d=[], obj=1.0) == []


def test_first_of_ints_numbers_keys_in_order_of_appearance():
    """fasop2024_batch.first_of_ints: the first index of each distinct key in order of
    appearance, and each key's number in that order (a hand case, then random keys against
    first_of's dictionary)."""
    from fasop.estimators.fasop2024.batch import first_of, first_of_ints

    first, of = first_of_ints(np.array([7, 3, 7, 9, 3, 3]))
    assert first.tolist() == [0, 1, 3] and of.tolist() == [0, 1, 0, 2, 1, 1]
    rng = np.random.default_rng(3)
    for size in (1, 2, 50, 700):
        keys = rng.integers(0, max(2, size // 3), size)
        first, of = first_of_ints(keys)
        expected_first, expected_of = first_of(keys.tolist())
        assert first.tolist() == expected_first and of.tolist() == expected_of.tolist()


def test_rounded_is_pythons_round():
    """memory.rounded (on arrays, round() only near a half) gives round(v, 4) bit for bit: random
    GiB-like values over many magnitudes, values a few ulps from every kind of half, float32
    values (what FASOP rounds), zeros, negatives, huge and non-finite values."""
    import math

    from fasop.costs.memory import rounded

    rng = np.random.default_rng(7)
    values = [rng.uniform(0, 10.0 ** e, 2000) for e in range(-6, 9)]
    halves = (rng.integers(0, 10**7, 3000) + 0.5) / 1e4  # the double nearest each half
    values += [halves, np.nextafter(halves, np.inf), np.nextafter(halves, -np.inf), -halves]
    values += [rng.uniform(0, 100, 3000).astype(np.float32).astype(float)]
    values += [np.array([0.0, -0.0, 1e300, -1e300, 2.0**30 / 1e4, np.inf, -np.inf, 5e-5, 1.00005, 2.5e-4])]
    for v in values:
        ours, theirs = rounded(v, 4), [round(x, 4) for x in v.tolist()]
        assert [math.copysign(1, x) for x in ours] == [math.copysign(1, x) for x in theirs]
        assert np.array_equal(np.array(ours), np.array(theirs))
    assert math.isnan(rounded(np.array([np.nan]), 4)[0])


def test_divisors_ascending():
    assert all(divisors(n) == [d for d in range(1, n + 1) if n % d == 0] for n in range(1, 3000))


@pytest.mark.parametrize("most", [3, 4096])
def test_element_tables_are_the_stage_sums_however_they_grow(most, monkeypatch):
    """memory.element_tables of plans met one by one (their planes added a few at a time, the
    stack grown by doubling, started over past MAX_ELEMENT_TABLES): entry [a, b] is
    stage_elements of layers a..b-1, bit for bit, and a table handed out earlier never changes."""
    from fasop.costs import memory

    monkeypatch.setattr(memory, "MAX_ELEMENT_TABLES", most)
    m = model(kinds=("embedding",) + ("transformer",) * 5 + ("head",), forward=(0.001,) * 7, gbs=16)
    plans = [plan(tp, 1, pp, *([node(gpus=tp)] * pp), mbs=mbs, gbs=16)
             for mbs, tp, pp in itertools.product((1, 2), (1, 2), (1, 2, 3))]
    kept = []
    for p in plans + plans[::-1]:  # the second time round: planes added long before
        params, act = memory.element_tables(p, m)
        kept.append((params.copy(), act.copy(), params, act))
        for a, b in itertools.combinations(range(len(m.layer_kinds) + 1), 2):
            assert (params[a, b], act[a, b]) == memory.stage_elements(p, m, m.layer_kinds[a:b])
    assert all(np.array_equal(x, y) and np.array_equal(u, w) for x, u, y, w in kept)
