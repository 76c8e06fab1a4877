"""The analytic estimator's prefix bounds (fasop/estimators/analytic/orders.py): every prefix's
bound is at most the step time of every completion that fits, prefixes of equal states have
completions of equal signatures, and the order tree they drive
(`--placements all --top K`) writes the very CSV rows of the K fastest fitting plans of the full
listing. Worlds: catalog node types with the GPUs per node cut down so that stages span nodes,
fill one node or share a node, with memory that binds (L4) and that does not (H100, A100-80GB).
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from fasop.estimators import make_estimator
from fasop.plans.enumerate import all_placements, degree_list
from fasop.plans.plan import Plan
from fasop.report import results as report
from fasop.search import engine as search_module
from fasop.search.engine import parse_nodes, search
from fasop.search.orders import OrderSearch
from fasop.specs.load import load_cluster, load_model

EVERY_RECIPE = {"recompute": ("none", "selective", "full"), "zero": (0, 1, 2, 3),
                "sequence_parallel": (True, False), "virtual_stages": (1, 2)}
TINY_LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
              "hidden_size": 2048, "intermediate_size": 5632, "num_attention_heads": 16, "num_key_value_heads": 4,
              "num_hidden_layers": 12, "vocab_size": 32000, "max_position_embeddings": 4096,
              "tie_word_embeddings": False, "rms_norm_eps": 1e-5}


def _world(model: str, nodes: str, gbs: int, gpus_per_node: int | None, tmp_path=None):
    if model == "tiny":
        path = tmp_path / "config.json"
        path.write_text(json.dumps(TINY_LLAMA))
        model = str(path)
    spec = dataclasses.replace(load_model(model), global_batch_size=gbs)
    cluster = load_cluster("aws")
    if gpus_per_node is not None:
        cluster = dataclasses.replace(cluster, node_types={
            name: dataclasses.replace(n, gpus_per_node=gpus_per_node) for name, n in cluster.node_types.items()})
    return spec, cluster, parse_nodes(nodes, cluster)


WORLDS = [("tiny", "p5=2,p4de=2", 64, None), ("tiny", "p5=3,g6=2", 32, 2),
          ("llama-3-8b", "p5=2,g6=2", 64, None), ("llama-3-8b", "p5=3,g6=2", 32, 2),
          ("qwen2.5-7b", "p5=2,g6=1,p4de=2", 32, 2), ("llama-3-8b", "p5=2,p4de=2", 64, 4)]
MOE_WORLDS = [("qwen3-30b-a3b", "p5=2,p4de=2", 64, 4), ("mixtral-8x7b", "p5=1,p4de=2", 32, 4)]


@pytest.mark.parametrize("world", WORLDS + MOE_WORLDS)
def test_prefix_bounds_never_exceed_a_fitting_completion(world, tmp_path):
    """For every prefix of every node order and every (tp, dp, pp, mbs, ep): the bound is at most the
    step time of each completion whose estimate fits in memory (those are the plans --top keeps). With
    experts, the floor's optimizer step counts the routed experts' states over their own shard group."""
    model, cluster, inventory = _world(*world, tmp_path)
    estimator = make_estimator(model, cluster, inventory, **EVERY_RECIPE)
    gbs, moe = model.global_batch_size, estimator.arch.moe
    combos = degree_list(inventory, tp_degrees=estimator.tp_degrees(), global_batch_size=gbs,
                         num_transformer_layers=model.num_transformer_layers)
    tree = OrderSearch(estimator, inventory, combos, lambda: np.inf)
    orders = list(all_placements(inventory))
    checked = tight = merged = 0
    shapes = [(tp, dp, pp, mbs, ep) for tp, dp, pp, mbs in combos for ep in (1, 2, 4, 8)
              if ep == 1 or (moe is not None and (tp * dp) % ep == 0 and moe.num_experts % ep == 0)]
    for tp, dp, pp, mbs, ep in shapes:
        prefixes = estimator.prefix_bounds(Plan(tp=tp, dp=dp, pp=pp, mbs=mbs, ep=ep, global_batch_size=gbs,
                                                placement=inventory), tree.kinds)
        plan = lambda order: Plan(tp=tp, dp=dp, pp=pp, mbs=mbs, ep=ep, global_batch_size=gbs, placement=order)  # noqa: E731
        steps = {}
        for order in orders:
            e = estimator.estimate(plan(order))
            steps[order] = np.inf if e.memory.is_oom else e.step_time_s
        first_with: dict = {}
        for order in orders:
            state, left = prefixes.start(), list(tree.counts)
            for q, node in enumerate(order):
                state = prefixes.extend(state, q, node)
                left[tree.kinds.index(node)] -= 1
                bound = prefixes.bound(state, q + 1, tuple(left))
                least = min(s for other, s in steps.items() if other[:q + 1] == order[:q + 1])
                assert bound <= least, (tp, dp, pp, mbs, ep, [n.name for n in order[:q + 1]], bound, least)
                checked += 1
                tight += least < np.inf and bound > 0.5 * least
                # equal states: the completions' signatures are equal (the tree skips the later)
                other = first_with.setdefault((q, state, tuple(left)), order[:q + 1])
                if other != order[:q + 1]:
                    merged += 1
                    assert estimator.signature(plan(other + order[q + 1:])) == estimator.signature(plan(order))
    assert checked > 300 and tight > checked / 10  # not vacuous: many bounds are within 2x
    g = inventory[0].gpus_per_node
    if any(tp * dp >= 3 * g for tp, dp, _, _ in combos):  # stages of 3+ nodes: orders of their first nodes merge
        assert merged > 0, "no equal states"


@pytest.mark.parametrize("world", WORLDS[:5])
def test_order_tree_writes_the_listed_top_k_rows(world, tmp_path, monkeypatch):
    """--placements all --top K through the order tree (forced past TREE_ORDERS) gives the CSV
    text of the K fastest fitting plans of the exhaustive listing (every plan estimated)."""
    model, cluster, inventory = _world(*world, tmp_path)
    top = 15
    listed = search(model, cluster, inventory, heterogeneous=True, estimator_options=EVERY_RECIPE)
    monkeypatch.setattr(search_module, "TREE_ORDERS", 1)
    tree = search(model, cluster, inventory, heterogeneous=True, top=top, estimator_options=EVERY_RECIPE)
    assert tree.num_pruned > 0
    fitting = tuple(e for e in listed.estimates if not e.memory.is_oom)[:top]
    assert len(fitting) == top
    expected = report.csv_text(*report.search_rows(dataclasses.replace(listed, estimates=fitting), model.sequence_length))
    assert report.csv_text(*report.search_rows(tree, model.sequence_length)) == expected


@pytest.mark.parametrize("world", WORLDS[:4] + [("qwen3-30b-a3b", "p5=2,p4de=2", 64, 4)])
def test_seeded_order_tree_keeps_the_same_plans(world, tmp_path, monkeypatch):
    """The grouped orders' K fastest seed the tree's threshold and visiting order (engine.grouped_seed):
    the rows are those of the unseeded tree, and the seed's threshold is the K-th of K real plans."""
    model, cluster, inventory = _world(*world, tmp_path)
    top = 6
    monkeypatch.setattr(search_module, "TREE_ORDERS", 1)
    runs = [search(model, cluster, inventory, heterogeneous=True, top=top, estimator_options=EVERY_RECIPE,
                   seed_orders=seeded) for seeded in (True, False)]
    texts = [report.csv_text(*report.search_rows(r, model.sequence_length)) for r in runs]
    assert texts[0] == texts[1] and len(runs[0].estimates) == top
    grouped = search(model, cluster, inventory, heterogeneous=True, top=top, placements="grouped",
                     estimator_options=EVERY_RECIPE)
    threshold, first = search_module.grouped_seed(model, cluster, inventory, heterogeneous=True, top=top,
                                           cutoff=float("inf"), estimator_options=EVERY_RECIPE)
    steps = [e.step_time_s for e in grouped.estimates]
    assert threshold == (max(steps) if len(steps) == top else float("inf"))
    assert threshold >= max(e.step_time_s for e in runs[0].estimates)  # the K-th kept is at most the seed's
    assert min(first.values(), default=float("inf")) == min(steps, default=float("inf"))
    tight, _ = search_module.grouped_seed(model, cluster, inventory, heterogeneous=True, top=top,
                                   cutoff=min(steps) / 2, estimator_options=EVERY_RECIPE)
    assert tight == min(steps) / 2  # fewer than K grouped plans under the cutoff: the cutoff stays


def test_an_interrupt_while_seeding_returns_what_it_found(tmp_path, monkeypatch):
    """Ctrl-C during the grouped orders' search (the seed) is kept like one during the tree: an
    interrupted result (the CLI writes it, marked incomplete), no exception."""
    model, cluster, inventory = _world(*WORLDS[0], tmp_path)
    monkeypatch.setattr(search_module, "TREE_ORDERS", 1)
    real = search_module.estimate_chunks

    def interrupted(*args, **kwargs):
        yield from real(*args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(search_module, "estimate_chunks", interrupted)
    result = search(model, cluster, inventory, heterogeneous=True, top=5, estimator_options=EVERY_RECIPE,
                    keep_on_interrupt=True)
    assert result.interrupted is not None and result.num_done == 0
    assert result.num_candidates == search_module.count_orders(inventory) * len(
        degree_list(inventory, tp_degrees=make_estimator(model, cluster, inventory).tp_degrees(),
                    global_batch_size=model.global_batch_size, num_transformer_layers=model.num_transformer_layers))
    with pytest.raises(KeyboardInterrupt):
        search(model, cluster, inventory, heterogeneous=True, top=5, estimator_options=EVERY_RECIPE)


@pytest.mark.parametrize("world", WORLDS)
def test_a_subtree_no_completion_of_which_fits_is_cut_before_k_plans_are_kept(world, tmp_path, monkeypatch):
    """With --top above the plans that fit, the threshold stays inf; a prefix whose bound is inf (no completion
    fits: the stages' layer caps hold fewer than the model's layers) is cut all the same, as only plans that fit
    are kept -- the rows are the listing's fitting plans. (Kimi-K2 on 8 p5 + 8 p6-b200, where none fits: more
    than 300 s, every order walked, before; 3 s.)"""
    model, cluster, inventory = _world(*world, tmp_path)
    from fasop.estimators.analytic.estimator import AnalyticEstimator

    listed = search(model, cluster, inventory, heterogeneous=True, estimator_options=EVERY_RECIPE)
    monkeypatch.setattr(search_module, "TREE_ORDERS", 1)
    asked = []
    below = AnalyticEstimator.estimate_below
    monkeypatch.setattr(AnalyticEstimator, "estimate_below", lambda self, plan, cutoff: asked.append(plan) or
                        below(self, plan, cutoff))
    tree = search(model, cluster, inventory, heterogeneous=True, top=10 ** 6, estimator_options=EVERY_RECIPE,
                  seed_orders=False)
    fitting = tuple(e for e in listed.estimates if not e.memory.is_oom)
    expected = report.csv_text(*report.search_rows(dataclasses.replace(listed, estimates=fitting), model.sequence_length))
    assert report.csv_text(*report.search_rows(tree, model.sequence_length)) == expected
    assert len(fitting) <= len(asked) <= len(listed.estimates)
    if len(fitting) < len(listed.estimates):   # some plans do not fit: subtrees of them are cut, not estimated
        assert len(asked) < len(listed.estimates)

