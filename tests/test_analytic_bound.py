"""The analytic estimator's quick_bound (fasop/estimators/analytic/bound.py): on generated small
catalogs (node types of the aws catalog with GPUs per node, memory and links drawn) it is never
above the step time of any fitting plan of its degrees, in any node order and recipe, and inf
only where no order fits; with one GPU type and v = 1 it is the 1F1B step of equal stages; the
pruned composition sweep gives the exhaustive sweep's frontier (the pruning it drives is exact).
"""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fasop.estimators import make_estimator
from fasop.estimators.analytic import cost as C
from fasop.estimators.analytic.bound import ROUNDING
from fasop.pareto.executors import SerialExecutor
from fasop.pareto.frontier import analyse
from fasop.pareto.pruning import pruned_sweep
from fasop.pareto.sweep import compositions, sweep_job
from fasop.plans.enumerate import all_placements, degree_list
from fasop.plans.plan import Plan
from fasop.search.engine import parse_nodes
from fasop.specs.load import load_cluster, load_model

TINY = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
        "hidden_size": 1024, "intermediate_size": 2816, "num_attention_heads": 16, "num_key_value_heads": 4,
        "num_hidden_layers": 8, "vocab_size": 32000, "max_position_embeddings": 2048,
        "tie_word_embeddings": False, "rms_norm_eps": 1e-5}
TYPES = ("p5", "p4de", "g6e", "g6")


def _model(tmp_path, layers: int, tied: bool, gbs: int):
    path = tmp_path / f"tiny-{layers}-{tied}.json"
    path.write_text(json.dumps(TINY | {"num_hidden_layers": layers, "tie_word_embeddings": tied}))
    return dataclasses.replace(load_model(str(path)), global_batch_size=gbs)


def _cluster(gpus_per_node: int, memory: dict, links: dict, overlap: bool):
    cluster = load_cluster("aws")
    types = {name: dataclasses.replace(n, gpus_per_node=gpus_per_node,
                                       memory_limit_bytes=n.memory_limit_bytes * memory.get(name, 1.0),
                                       inter_node_bytes_per_s=n.inter_node_bytes_per_s * links.get(name, 1.0))
             for name, n in cluster.node_types.items()}
    params = dataclasses.replace(cluster.analytic, overlap_grad_reduce=overlap)
    return dataclasses.replace(cluster, node_types=types, analytic=params)


worlds = st.fixed_dictionaries({
    "counts": st.dictionaries(st.sampled_from(TYPES), st.integers(1, 2), min_size=1, max_size=3),
    "gpus_per_node": st.sampled_from([1, 2, 4]),
    "memory": st.dictionaries(st.sampled_from(TYPES), st.sampled_from([0.002, 0.01, 0.05, 1.0])),
    "links": st.dictionaries(st.sampled_from(TYPES), st.sampled_from([0.1, 1.0, 10.0])),
    "overlap": st.booleans(),
    "layers": st.sampled_from([4, 6, 8]),
    "tied": st.booleans(),
    "gbs": st.sampled_from([8, 16]),
    "recipes": st.sampled_from([{}, {"recompute": ("none", "full"), "zero": (0, 3), "virtual_stages": (1, 2)},
                                {"sequence_parallel": (False, True), "zero": (1, 2)}]),
})


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(world=worlds)
def test_quick_bound_is_never_above_a_fitting_plan(world, tmp_path):
    """Every (tp, dp, pp, mbs) and every node order: quick_bound <= the step time of the plan's
    estimate when it fits; inf only when no order of the degrees fits."""
    model = _model(tmp_path, world["layers"], world["tied"], world["gbs"])
    cluster = _cluster(world["gpus_per_node"], world["memory"], world["links"], world["overlap"])
    inventory = parse_nodes(",".join(f"{k}={n}" for k, n in world["counts"].items()), cluster)
    estimator = make_estimator(model, cluster, inventory, **world["recipes"])
    combos = degree_list(inventory, tp_degrees=estimator.tp_degrees(), global_batch_size=model.global_batch_size,
                         num_transformer_layers=model.num_transformer_layers)
    orders = list(all_placements(inventory))[:24]
    for tp, dp, pp, mbs, *_ in combos:  # cp = ep = etp = 1: a dense model at a short sequence
        plan = lambda order: Plan(tp=tp, dp=dp, pp=pp, mbs=mbs,  # noqa: E731
                                  global_batch_size=model.global_batch_size, placement=order)
        bound = estimator.quick_bound(plan(inventory))
        fitting = [e.step_time_s for e in map(estimator.estimate, map(plan, orders)) if not e.memory.is_oom]
        assert all(bound <= s for s in fitting), (tp, dp, pp, mbs, bound, min(fitting))
        if fitting:
            assert bound < math.inf


def test_one_type_is_the_equal_stage_1f1b_step(tmp_path):
    """p5 x 4, tp 8, dp 1, pp 4: the pipeline floor is (m + p - 1) x L x t / p plus the embedding
    and head once, the optimizer step over a quarter of the parameters and nothing for DP (dp = 1);
    t and the embedding at the p5's own GPU link (the TP group is inside a node)."""
    model = _model(tmp_path, 8, False, 16)
    cluster = load_cluster("aws")
    inventory = parse_nodes("p5=4", cluster)
    estimator = make_estimator(model, cluster, inventory, recompute=("none",))
    plan = Plan(tp=8, dp=1, pp=4, mbs=1, global_batch_size=16, placement=tuple(inventory))
    (_, w), = estimator.workloads(plan)
    gpu = estimator.gpus["p5"]
    nvlink = C.Link(gpu.intra_node_bytes_per_s * gpu.intra_node_share(w.params), w.params.intra_node_latency_s)
    t = sum(C.layer_s(w, gpu, nvlink))
    ends = sum(C.embedding_s(w, gpu, nvlink)) + sum(C.head_s(w, gpu))
    params = C.stage_params(w, 8, True, False) + C.stage_params(w, 0, False, True)
    want = (16 - 1) * 8 * t / 4 + 8 * t + ends + C.optimizer_s(w, params / 4, gpu)
    assert estimator.quick_bound(plan) == pytest.approx(want * (1 - ROUNDING), rel=1e-12)
    assert estimator.quick_bound(plan) <= estimator.estimate(plan).step_time_s


def test_a_composition_too_small_for_the_model_states_has_an_infinite_bound(tmp_path):
    """Memory floor: nodes whose memory cannot hold the layers at any split get inf, and the
    search finds no fitting plan there either."""
    model = _model(tmp_path, 8, False, 16)
    cluster = _cluster(8, {"g6": 0.002}, {}, False)
    inventory = parse_nodes("g6=2", cluster)
    estimator = make_estimator(model, cluster, inventory)
    combos = degree_list(inventory, tp_degrees=estimator.tp_degrees(), global_batch_size=16, num_transformer_layers=8)
    for tp, dp, pp, mbs, *_ in combos:  # cp = ep = etp = 1: a dense model at a short sequence
        plan = Plan(tp=tp, dp=dp, pp=pp, mbs=mbs, global_batch_size=16, placement=tuple(inventory))
        assert estimator.quick_bound(plan) == math.inf
        assert estimator.estimate(plan).memory.is_oom and estimator.estimate_below(plan, math.inf) is None


@pytest.mark.parametrize("limits,memory", [({"p5": 2, "p4de": 2, "g6": 2}, {"g6": 0.05}),
                                           ({"p5": 1, "g6e": 2, "g6": 3}, {"p5": 0.02})])
def test_pruned_analytic_sweep_gives_the_exhaustive_frontier(limits, memory, tmp_path):
    model = _model(tmp_path, 8, False, 16)
    cluster = _cluster(2, memory, {}, False)
    comps = compositions(limits)
    analyses = []
    for prune in (False, True):
        job = sweep_job(model, cluster, comps, placements="all", partitioner="optimal", iterations=1000,
                        spot=False, top=1, partition_budget=None)
        results = dict(pruned_sweep(job, comps, SerialExecutor(job), prune=prune, round_size=1))
        analyses.append(analyse([results[i] for i in range(len(comps))]))
    full, pruned = analyses
    assert sum(r.status == "pruned" for r in pruned.results) > 0  # the bound tells compositions apart
    assert pruned.frontier == full.frontier and pruned.knee == full.knee
    for r, f in zip(pruned.results, full.results):
        if r.status != "pruned":
            assert (r.status, r.best) == (f.status, f.best)
        elif f.best is not None:
            assert r.step_time_bound_s <= f.best.step_time_s


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 5).flatmap(lambda p: st.tuples(
    st.lists(st.lists(st.integers(0, 6), min_size=3, max_size=3), min_size=p, max_size=p),
    st.lists(st.integers(0, p), min_size=2, max_size=2).filter(lambda c: sum(c) <= p))))
def test_assignment_ceiling_is_at_least_every_assignment(case):
    """Brute force over every assignment of the stage limits (counts of each, largest first) to stages."""
    import itertools

    import numpy as np

    from fasop.estimators.analytic.bound import assignment_ceiling

    rows, (a, b) = case
    caps = np.array([sorted(r, reverse=True) for r in rows])
    counts = [a, b, len(rows) - a - b]
    limits = [0] * a + [1] * b + [2] * counts[2]
    best = max(sum(caps[i, j] for i, j in enumerate(order)) for order in set(itertools.permutations(limits)))
    assert assignment_ceiling(caps, counts) >= best


@pytest.mark.parametrize("name, nodes, seq, options", [
    ("qwen3-30b-a3b", "p5=1,g6e=1", None, {}),                                         # MoE: ep over the experts
    ("llama-3-8b", "p5=1,p4de=1", 65536, {"cp": (1, 2, 4, 8), "zero": (1, 3), "hsdp": (False, True)}),  # CP, FSDP, HSDP
])
def test_the_bound_holds_with_expert_and_context_parallelism(name, nodes, seq, options):
    """Plans with ep / cp / HSDP degrees (their all-to-alls, rings and shard groups are left out of
    the floor's fixed terms): quick_bound is never above a fitting plan of its degrees, in any order."""
    from fasop.plans.enumerate import combo_plan
    from fasop.plans.space import split_options

    model = load_model(name)
    if seq:
        model = dataclasses.replace(model, sequence_length=seq, global_batch_size=16)
    cluster = load_cluster("aws")
    inventory = parse_nodes(nodes, cluster)
    space, rest = split_options(model, options)
    estimator = make_estimator(model, cluster, inventory, **rest)
    gbs = model.global_batch_size
    combos = degree_list(inventory, tp_degrees=estimator.tp_degrees(), global_batch_size=gbs,
                         num_transformer_layers=model.num_transformer_layers, space=space)
    assert any(c[4] > 1 or c[5] > 1 for c in combos)   # cp or ep is searched
    for combo in combos:
        bound = estimator.quick_bound(combo_plan(combo, global_batch_size=gbs, placement=tuple(inventory)))
        for order in all_placements(inventory):
            e = estimator.estimate(combo_plan(combo, global_batch_size=gbs, placement=order))
            assert e.memory.is_oom or bound <= e.step_time_s * (1 + 1e-12), (combo, bound, e.step_time_s)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0.05, 20.0), min_size=1, max_size=4), st.integers(1, 10))
def test_integer_level_is_the_least_whole_layer_split(rates, layers):
    """Brute force over every split of the layers into whole counts (zeros allowed): the least
    slowest stage, count / rate, is integer_level's (its `layers`-th smallest slot k / r)."""
    import itertools

    from fasop.estimators.analytic.bound import integer_level

    best = min(max(c / r for c, r in zip(counts, rates))
               for counts in itertools.product(range(layers + 1), repeat=len(rates)) if sum(counts) == layers)
    runs = [(r, 1) for r in rates]
    assert integer_level(runs, layers) <= best * (1 + 1e-12)
    assert integer_level(runs, layers) >= best * (1 - 1e-12)
    # a run of stages of one rate is those stages one by one
    assert integer_level([(rates[0], 3)], layers) == integer_level([(rates[0], 1)] * 3, layers)
