"""The compiled kernels (fasop/schedule/_native.c) against fasop's own Python loops, bit for bit.

The kernels are generic (1F1B recurrences over given durations, the partitioner's tables) and
must give the same values as the Python code they replace, to the last bit: FASOP's
encoder-decoder choices and the ranking turn on last-ulp ties. Every test here compares the two
on random inputs built in code (ties included: times on a coarse grid), or runs an estimate both
ways (the `kernels` fixture: compiled, then native.kernels = None).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from fasop.cli.command import main
from fasop.estimators.fasop2024.estimator import Fasop2024Estimator
from fasop.plans.enumerate import all_placements, degree_list, plans
from fasop.schedule import native
from fasop.schedule.recurrences import stage_ends
from fasop.specs.files import shipped_folder
from fasop.specs.types import GIB, ClusterSpec, ModelSpec, NodeType
from fasop.specs.types import Profile, ScalingTable

compiled = pytest.mark.skipif(native.kernels is None, reason="the compiled kernels were not built")


def test_compiled_kernels_are_built():
    """CI sets FASOP_REQUIRE_NATIVE=1: there the extension must have been built (pip install .
    with a C compiler), or fasop would silently run its Python loops, ~20x slower in FASOP mode."""
    if not os.environ.get("FASOP_REQUIRE_NATIVE") or os.environ.get("FASOP_PURE_PYTHON"):
        pytest.skip("FASOP_REQUIRE_NATIVE is not set")
    assert native.kernels is not None, "fasop._native was not built: is a C compiler installed?"


# ----------------------------------------------------------------------------- 1F1B
def _pipelines(rng, pp: int, batch: int, coarse: bool, sends: str):
    """Stage times (uniform, or on a coarse grid so that event times tie) and sends: FASOP's
    (stage 0 forward, last stage backward), none, or anywhere and 0 in some pipelines only."""
    t = np.round(rng.uniform(1, 2, (pp, batch)) * 4) / 4 if coarse else rng.uniform(0.1, 1.0, (pp, batch))
    sf, sb = np.zeros_like(t), np.zeros_like(t)
    if sends == "ends":
        sf[0], sb[-1] = rng.uniform(0, 0.3, batch), rng.uniform(0, 0.3, batch)
    elif sends == "anywhere":
        sf, sb = rng.uniform(0, 0.3, (2, pp, batch)) * (rng.uniform(size=(2, pp, batch)) < 0.5)
    return t / 3, 2 * t / 3, sf, sb


@compiled
@pytest.mark.parametrize("seed", range(30))
def test_one_f_one_b_kernel_is_the_recurrences(seed):
    """Every stage's end, for batches of 1..9 pipelines (the kernel runs 4 lanes, padding the
    last group), pp up to 12 and m up to 20, on both sides of pp = m."""
    rng = np.random.default_rng(seed)
    pp, m, batch = int(rng.integers(1, 13)), int(rng.integers(1, 21)), int(rng.integers(1, 10))
    for coarse in (False, True):
        for sends in ("ends", "none", "anywhere"):
            fwd, bwd, sf, sb = _pipelines(rng, pp, batch, coarse, sends)
            durations = np.ascontiguousarray(np.concatenate([fwd, bwd, sf, sb]).T)
            ends = np.empty((batch, pp))
            native.kernels.one_f_one_b(durations, pp, m, ends)
            assert np.array_equal(ends.T, stage_ends(fwd, bwd, sf, sb, m)), (pp, m, coarse, sends)


@compiled
@pytest.mark.parametrize("seed", range(10))
def test_one_f_one_b_many_is_the_recurrences_per_pipeline(seed):
    """one_f_one_b_many: pipelines of their own (pp, m) in one call, rows padded to a width;
    each row's first pp ends are the recurrences' on its first pp entries of each block, bit
    for bit, and the rest of its row is left as it was."""
    from fasop.schedule.recurrences import run

    rng = np.random.default_rng(seed)
    n, width = int(rng.integers(1, 40)), int(rng.integers(1, 10))
    pps, ms = rng.integers(1, width + 1, n), rng.integers(1, 20, n)
    durations = rng.uniform(0, 1, (n, 4 * width))
    if seed % 2:  # times on a coarse grid: ties
        durations = np.round(durations * 4) / 4
    durations[:, 2 * width:] *= rng.uniform(size=(n, 2 * width)) < 0.3  # some sends 0
    ends = np.full((n, width), -1.0)
    native.kernels.one_f_one_b_many(durations, width, pps.astype(np.int64), ms.astype(np.int64), ends)
    for row, pp, m, end in zip(durations, pps.tolist(), ms.tolist(), ends):
        blocks = [row[b * width:b * width + pp].tolist() for b in range(4)]
        assert end[:pp].tolist() == run(*blocks, m, 0.0, max)
        assert (end[pp:] == -1.0).all()


@compiled
@pytest.mark.parametrize("pp", [1, 2, 3, 5, 8, 13])
def test_one_f_one_b_reads_only_the_cells_it_zeroes_or_writes(pp):
    """The kernel zeroes only the cells of its arrays that the recurrences read before they
    write them (fasop.schedule.recurrences.run starts from arrays of zeros). With the other cells poisoned
    (1e300 at the start of every run) the ends are still the recurrences', for every m from 1 to
    3 pp + 2 (warm-up longer and shorter than the batch), all sends present."""
    rng = np.random.default_rng(pp)
    native.kernels._set_poison(True)
    try:
        for m in range(1, 3 * pp + 3):
            fwd, bwd, sf, sb = _pipelines(rng, pp, 5, False, "anywhere")
            sf, sb = sf + 0.01, sb + 0.01
            ends = np.empty((5, pp))
            native.kernels.one_f_one_b(np.ascontiguousarray(np.concatenate([fwd, bwd, sf, sb]).T), pp, m, ends)
            assert np.array_equal(ends.T, stage_ends(fwd, bwd, sf, sb, m)), (pp, m)
    finally:
        native.kernels._set_poison(False)


@compiled
@pytest.mark.parametrize("seed", range(30))
def test_traced_run_is_the_python_trace(seed):
    """one_f_one_b_traced (the proven-split search's cuts, schedule.pipeline.critical_path) against
    its Python reference (recurrences.trace and chain): its ends are the recurrences', bit for
    bit; its critical path is the Python chain's duration rows, less the sends of 0 s the kernel
    does not add (ties on a coarse grid included, so the first-of-equals rule is checked);
    summed in path order, the durations give the stage-0 end exactly, and for other durations
    with the same zero sends the sum is at most their stage-0 end. Poisoned cells too; and
    critical_path gives the same bits with the kernel and without."""
    from fasop.schedule.pipeline import critical_path
    from fasop.schedule.recurrences import KINDS, chain, trace

    rng = np.random.default_rng(seed)
    pp, m = int(rng.integers(1, 13)), int(rng.integers(1, 21))
    for poisoned in (False, True):
        native.kernels._set_poison(poisoned)
        try:
            for coarse in (False, True):
                for sends in ("ends", "none", "anywhere"):
                    fwd, bwd, sf, sb = _pipelines(rng, pp, 1, coarse, sends)
                    durations = np.concatenate([fwd, bwd, sf, sb])[:, 0].copy()
                    ends = np.empty(pp)
                    path = native.kernels.one_f_one_b_traced(durations, pp, m, ends)
                    assert np.array_equal(ends, stage_ends(fwd, bwd, sf, sb, m)[:, 0]), (pp, m)
                    events, last = trace(*durations.reshape(4, pp), m)
                    rows = [KINDS.index(events[e][1]) * pp + events[e][0] for e in chain(events, last[0])]
                    assert path == [r for r in rows if r < 2 * pp or durations[r] != 0.0], (pp, m, coarse, sends)
                    total = 0.0
                    for k in path:
                        total += durations[k]
                    assert total == ends[0]
                    for _ in range(5):  # other pipelines of the same events
                        o_fwd, o_bwd, _, _ = _pipelines(rng, pp, 1, coarse, "none")
                        o_sf, o_sb = (np.where(x > 0, rng.uniform(0.01, 0.3, x.shape), 0.0) for x in (sf, sb))
                        other = np.concatenate([o_fwd, o_bwd, o_sf, o_sb])[:, 0].copy()
                        total = 0.0
                        for k in path:
                            total += other[k]
                        assert total <= stage_ends(o_fwd, o_bwd, o_sf, o_sb, m)[0, 0]
        finally:
            native.kernels._set_poison(False)
    comp = rng.uniform(0.1, 1.0, (pp, 6))
    comp[:, :3] = np.round(comp[:, :3] * 4) / 4
    send_fwd, send_bwd = np.zeros_like(comp), np.zeros_like(comp)
    send_fwd[0], send_bwd[-1] = 0.05, rng.uniform(0, 0.2, 6)
    with_kernel = critical_path(comp, send_fwd, send_bwd, m, fwd_bwd_factor=3.0)
    kernels, native.kernels = native.kernels, None
    try:
        without = critical_path(comp, send_fwd, send_bwd, m, fwd_bwd_factor=3.0)
    finally:
        native.kernels = kernels
    for a, b in zip(with_kernel, without):
        assert np.array_equal(a, b)


@compiled
@pytest.mark.parametrize("seed", range(20))
def test_chain_bounds_at_nodes_are_the_python_ones(seed):
    """one_f_one_b_bound (the partitioner's chains at a node: _native.c chain_terms and
    chain_bounds) with the kernels and with numpy (native.kernels = None), down random partial
    splits: the same bounds and chains, bit for bit, with and without the capped tables (inf
    entries included), the round trips on and off, sends at the ends, coarse times (ties)."""
    from fasop.partition.splits import Rest
    from fasop.schedule.bounds import one_f_one_b_bound, steady_weights

    rng = np.random.default_rng(300 + seed)
    pp, m = int(rng.integers(1, 10)), int(rng.integers(1, 40))
    sends = {"send_first": float(rng.uniform(0, 0.3)), "send_last": float(rng.uniform(0, 0.3))}
    weights = steady_weights(pp, m, fwd_bwd_factor=3.0)
    caps = int(rng.integers(0, 5))
    kernels = native.kernels

    def rest(n):
        t = rng.uniform(0.5, 2.0, n)
        if seed % 2:
            t = np.round(t * 2) / 2
        capped = rng.uniform(1, 20, (caps, n)) if caps else None
        if caps:
            capped[rng.random((caps, n)) < 0.3] = np.inf
        return (t, rng.uniform(0, 30, n), rng.uniform(0, 3, n), rng.uniform(0, 9, n), capped,
                np.sort(rng.uniform(0, 9, caps)) if caps else None)

    chains, before = [None, None], 0.0
    for k in range(pp):
        n = int(rng.integers(1, 12))
        t, total, most, wmax, capped, below = rest(n)
        got = []
        for way in (kernels, None):
            native.kernels = way
            try:
                node = Rest(np.arange(n), t, total, most, wmax, capped, below, None)
                got.append(one_f_one_b_bound(k, before, chains[len(got)], t, node, num_stages=pp, num_microbatches=m,
                                             weights=weights, round_trips=bool(seed % 3), **sends))
            finally:
                native.kernels = kernels
        (bounds, new), (want, want_new) = got
        assert np.array_equal(bounds, want), (k, pp, m)
        for i in range(n):
            assert new[i] == want_new[i]
        i = int(rng.integers(n))
        chains, before = [new[i], want_new[i]], before + float(t[i])


@compiled
@pytest.mark.parametrize("seed", range(10))
def test_cut_raise_is_child_bounds_numpy(seed):
    """cut_raise (partition.splits' child bounds raised to the learnt cuts, plus stage 0's extra)
    against child_bounds' numpy expression, bit for bit: 0..3 cuts, an extra per child or one for
    all, ties on a coarse grid, infinite entries."""
    rng = np.random.default_rng(400 + seed)
    for cuts in range(4):
        n = int(rng.integers(1, 30))
        lb, extra = rng.uniform(0, 10, n), rng.uniform(0, 1, n)
        dots, rows = rng.uniform(0, 5, cuts), rng.uniform(0, 10, (cuts, n))
        if seed % 2:
            lb, rows = np.round(lb), np.round(rows)
        rows[rng.random((cuts, n)) < 0.1] = np.inf
        for per_child in (True, False):
            out = np.empty(n)
            native.kernels.cut_raise(lb, dots, rows, extra if per_child else np.zeros(0), 0.0 if per_child else 0.25,
                                     out)
            want = np.maximum(lb, (dots[:, None] + rows).max(axis=0)) if cuts else lb
            assert np.array_equal(out, want + (extra if per_child else 0.25))


# ----------------------------------------------------------------------------- whole estimates
def _node(name: str, gpu: str, rng, shared: bool, memory_gib: float) -> NodeType:
    return NodeType(name=name, instance=f"{name}.box", gpu=gpu, gpus_per_node=2, memory_limit_bytes=memory_gib * GIB,
                    intra_node_bytes_per_s=float(rng.uniform(1e10, 5e10)),
                    inter_node_bytes_per_s=float(rng.uniform(1e9, 5e9)), intra_node_shared=shared,
                    usd_per_hour=float(rng.uniform(1, 10)), spot_usd_per_hour=None)


def _world(seed: int, encoder_decoder: bool, memory_gib: float):
    """A model of 12 entries (embedding, 10 transformers, head; or embedding, 5 encoders,
    embedding, 5 decoders) with random per-layer times on two GPU types, scaling with the
    micro-batch, and a cluster of two node types of 2 GPUs (one on a shared bus), memory tight
    enough for some plans not to fit."""
    rng = np.random.default_rng(seed)
    if encoder_decoder:
        kinds = ("embedding",) + ("encoder",) * 5 + ("embedding",) + ("decoder",) * 5
        segments = ("encoder",) * 6 + ("decoder",) * 6
    else:
        kinds, segments = ("embedding",) + ("transformer",) * 10 + ("head",), ("model",) * 12
    gpus = ("G1", "G2")
    forward = {(g, tp): tuple(float(x) for x in np.round(rng.uniform(1, 5, 12)) * 1e-3)
               for g in gpus for tp in (1, 2)}
    scale = ScalingTable(points=((1, (1.0,)), (2, (1.5,))), beyond="proportional")
    profile = Profile(forward_s=forward, fwd_bwd_factor=3.0, scaling={(g, k): scale for g in gpus for k in set(kinds)})
    model = ModelSpec(path="m.yaml", name="rand", hidden_size=256, num_attention_heads=4, vocab_size=1000,
                      sequence_length=128, global_batch_size=16, tie_word_embeddings=not encoder_decoder,
                      bytes_per_element=2, layer_kinds=kinds, layer_segments=segments, profile=profile)
    types = {"x": _node("x", "G1", rng, False, memory_gib), "y": _node("y", "G2", rng, True, memory_gib / 2)}
    cluster = ClusterSpec(path="c.yaml", estimator="fasop-2024", node_types=types, p2p_inter_node_divisor=1.05,
                          p2p_intra_node_divisor=3.5, memory_overhead_factor=1.1)
    return model, cluster, types


@compiled
@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("encoder_decoder", [False, True], ids=["decoder", "encoder-decoder"])
def test_fasop_estimates_are_the_same_both_ways(seed, encoder_decoder, monkeypatch):
    """estimate_many with fasop-minmax, its schedules by the compiled recurrences or the Python
    ones, gives every field of every estimate alike, on every plan of 4 nodes in every order
    (stages spanning nodes of both types, OOM plans, pp = 1 included)."""
    model, cluster, types = _world(seed, encoder_decoder, memory_gib=0.05 if seed % 2 else 1000.0)
    nodes = (types["x"], types["y"], types["x"], types["y"])
    combos = degree_list(nodes, tp_degrees=(1, 2), global_batch_size=16, num_transformer_layers=10)
    candidates = list(plans(all_placements(nodes), combos, global_batch_size=16))
    ours = Fasop2024Estimator(model, cluster, nodes).estimate_many(candidates)
    monkeypatch.setattr(native, "kernels", None)
    theirs = Fasop2024Estimator(model, cluster, nodes).estimate_many(candidates)
    assert ours == theirs
    assert any(e.memory.is_oom for e in ours) == bool(seed % 2)
    assert any(e.plan.pp == 1 for e in ours) and any(len(set(e.stage_node_types)) > 1 for e in ours)


@compiled
@pytest.mark.parametrize("model_name,nodes", [("bert", "a100=1,a10=3"), ("gpt2xl", "a10=8"), ("t5", "a100=1,a10=7")])
def test_fasop_experiments_write_the_same_bytes_both_ways(tmp_path, capsys, monkeypatch, model_name, nodes):
    """FASOP's choices on three of its experiments: the compiled and the Python path write the
    same CSV, byte for byte."""
    argv = ["search", "--model", model_name, "--cluster", "fasop-paper", "--nodes", nodes, "--heterogeneous",
            "--placements", "cyclic", "--partitioner", "fasop-minmax", "--no-progress"]
    assert main(argv + ["--out", str(tmp_path / "compiled.csv")]) == 0
    monkeypatch.setattr(native, "kernels", None)
    assert main(argv + ["--out", str(tmp_path / "python.csv")]) == 0
    assert (tmp_path / "compiled.csv").read_bytes() == (tmp_path / "python.csv").read_bytes()


@compiled
def test_optimal_partitioner_gives_the_same_bytes_both_ways(tmp_path, capsys, monkeypatch):
    """The optimal partitioner schedules its candidate splits with the compiled recurrences or the
    Python ones: the same CSV."""
    argv = ["search", "--model", "bert", "--cluster", "fasop-paper", "--nodes", "a10=4", "--no-progress"]
    assert main(argv + ["--out", str(tmp_path / "compiled.csv")]) == 0
    monkeypatch.setattr(native, "kernels", None)
    assert main(argv + ["--out", str(tmp_path / "python.csv")]) == 0
    assert (tmp_path / "compiled.csv").read_bytes() == (tmp_path / "python.csv").read_bytes()


# ----------------------------------------------------------------------------- helpers, errors
@compiled
def test_plans_of_equal_kernel_inputs_are_scheduled_once_and_estimated_alike(monkeypatch, repo):
    """FASOP's rotations of one A100 among A10 nodes give some plans the same stage planes,
    sends, pp and micro-batches (pp = 1, stages spanning the A100's node alike): the chunk
    partitions and schedules once for each such group, and every plan's estimate is the one
    with the Python recurrences."""
    from fasop.plans.enumerate import cyclic_placements
    from fasop.estimators.fasop2024.batch import Chunk
    from fasop.search.engine import parse_nodes
    from fasop.specs.load import load_cluster, load_model

    model, cluster = load_model(shipped_folder("model_specs") / "bert.yaml"), load_cluster(shipped_folder("cluster_specs") / "fasop-paper.yaml")
    nodes = parse_nodes("a100=1,a10=3", cluster)
    estimator = Fasop2024Estimator(model, cluster, nodes)
    combos = degree_list(nodes, tp_degrees=estimator.compute.tp_degrees(estimator.gpus),
                         global_batch_size=model.global_batch_size, num_transformer_layers=model.num_transformer_layers)
    candidates = list(plans(cyclic_placements(nodes), combos, global_batch_size=model.global_batch_size))
    chunk = Chunk(estimator, candidates)
    assert len(set(chunk.unique.tolist())) < len(candidates) // 2 + len(candidates) // 4  # 356 plans: 239 runs
    assert (chunk.which[chunk.unique][chunk.inverse] == chunk.which).all()
    assert (chunk.p2p[chunk.unique][chunk.inverse] == chunk.p2p).all()
    ours = estimator.estimate_many(candidates)
    monkeypatch.setattr(native, "kernels", None)
    assert ours == Fasop2024Estimator(model, cluster, nodes).estimate_many(candidates)


@compiled
def test_kernels_reject_buffers_of_the_wrong_size():
    """A caller's mistake is a ValueError, not a read past a buffer."""
    with pytest.raises(ValueError, match="ends"):
        native.kernels.one_f_one_b(np.zeros((3, 8)), 2, 4, np.empty((3, 3)))
    with pytest.raises(ValueError, match="pp <= width"):
        native.kernels.one_f_one_b_many(np.zeros((1, 8)), 2, np.array([3]), np.array([4]), np.empty((1, 2)))
    with pytest.raises(ValueError, match="durations"):
        native.kernels.one_f_one_b_many(np.zeros((1, 7)), 2, np.array([2]), np.array([4]), np.empty((1, 2)))
