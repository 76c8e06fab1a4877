"""Exact ties between node orders (fasop/estimators/analytic/order_classes.py and the order tree's
rule 3, fasop/search/orders.py): where a class bound is certified, every order with those first
and last node kinds is estimated at exactly it or does not fit; where an interior stage's place
changes its hardware nothing is certified; and the tree that cuts ties by it writes the very rows
of the full listing. Worlds: one node per pipeline stage on AWS p5 (H100) and p6-b200 (B200)
nodes, whose networks are alike, so that stages of one kind tie wherever they stand.
"""

from __future__ import annotations

import dataclasses

import pytest

from fasop.estimators import make_estimator
from fasop.plans.enumerate import all_placements, combo_plan, degree_list
from fasop.report import results as report
from fasop.search import engine as search_module
from fasop.search import orders as orders_module
from fasop.search.engine import parse_nodes, search
from fasop.specs.load import load_cluster

from test_analytic_orders import _world as analytic_world

RECIPES = {"recompute": ("none", "full"), "zero": (0, 1, 3), "virtual_stages": (1, 2)}


def _world(tmp_path, nodes: str, gbs: int, model: str = "tiny", gpus_per_node: int | None = None):
    return analytic_world(model, nodes, gbs, gpus_per_node, tmp_path)


def _shapes(model, inventory, estimator):
    gbs = model.global_batch_size
    combos = degree_list(inventory, tp_degrees=estimator.tp_degrees(), global_batch_size=gbs,
                         num_transformer_layers=model.num_transformer_layers)
    return [combo_plan(c, global_batch_size=gbs, placement=inventory) for c in combos]


def _classes(estimator, shape, inventory):
    kinds = list({n.name: n for n in inventory}.values())
    counts = tuple(sum(n.name == k.name for n in inventory) for k in kinds)
    bounds = estimator.prefix_bounds(shape, kinds)
    return kinds, {(f, l): bounds.class_bound(counts, (f,), l) for f in range(len(kinds)) for l in range(len(kinds))
                   if counts[f] and counts[l] and (f != l or counts[f] > 1)}


@pytest.mark.parametrize("nodes, gbs, model, gpus_per_node", [
    ("p5=3,p6-b200=3", 64, "tiny", None), ("p5=2,p6-b200=4", 32, "tiny", None),
    ("p5=3,p6-b200=2", 64, "llama-3-8b", 4), ("p5=2,p6-b200=3", 32, "qwen3-30b-a3b", None),
    ("p5=3,p6-b200=3", 1024, "llama-3-70b", None)])
def test_every_order_is_estimated_at_each_bound_that_covers_it(tmp_path, nodes, gbs, model, gpus_per_node):
    """For every shape with one node a stage, every order and every prefix of it with a certified bound
    for its last kind: the order is estimated at exactly that bound (the same bits) or does not fit.
    Llama-3-70B at global batch 1,024: some classes are certified only past a prefix (a B200 stage
    early in the pipeline would hold fewer layers than the split gives it)."""
    spec, cluster, inventory = _world(tmp_path, nodes, gbs, model, gpus_per_node)
    estimator = make_estimator(spec, cluster, inventory, **RECIPES)
    orders = list(all_placements(inventory))
    certified = checked = restricted = 0
    for shape in _shapes(spec, inventory, estimator):
        if shape.tp * shape.cp * shape.dp != inventory[0].gpus_per_node:
            continue
        kinds = list({n.name: n for n in inventory}.values())
        counts = tuple(sum(n.name == k.name for n in inventory) for k in kinds)
        bounds = estimator.prefix_bounds(shape, kinds)
        for order in orders:
            ks = tuple(kinds.index(n) for n in order)
            e = None
            for d in range(1, len(order) + 1):
                t = bounds.class_bound(counts, ks[:d], ks[-1])
                if t is None:
                    continue
                certified += d == 1
                restricted += d > 1 and bounds.class_bound(counts, ks[:1], ks[-1]) is None
                e = e or estimator.estimate(dataclasses.replace(shape, placement=order))
                assert e.memory.is_oom or e.step_time_s == t, (shape, [n.name for n in order], d, e.step_time_s, t)
                checked += 1
    assert certified >= 2 and checked > 50   # not vacuous
    assert (restricted > 0) == (model == "llama-3-70b")


def test_stages_whose_links_differ_certify_nothing(tmp_path):
    """p4de's network is a quarter of p5's: a stage's link to the next depends on the next node's
    kind, so its place matters and no class is certified."""
    spec, cluster, inventory = _world(tmp_path, "p5=3,p4de=3", 64)
    estimator = make_estimator(spec, cluster, inventory, **RECIPES)
    shapes = [s for s in _shapes(spec, inventory, estimator) if s.tp * s.cp * s.dp == 8 and s.pp == 6]
    assert shapes
    for shape in shapes:
        assert set(_classes(estimator, shape, inventory)[1].values()) == {None}


def test_stages_spanning_nodes_certify_nothing(tmp_path):
    """Two nodes a stage: an order is not its stages' kinds, so no class is certified."""
    spec, cluster, inventory = _world(tmp_path, "p5=2,p6-b200=2", 64)
    estimator = make_estimator(spec, cluster, inventory, **RECIPES)
    shape = next(s for s in _shapes(spec, inventory, estimator) if s.tp * s.cp * s.dp == 16)
    assert set(_classes(estimator, shape, inventory)[1].values()) == {None}


@pytest.mark.parametrize("nodes, gbs, top", [("p5=4,p6-b200=4", 64, 12), ("p5=3,p6-b200=5", 64, 60)])
def test_the_tree_that_cuts_ties_writes_the_listed_rows(tmp_path, monkeypatch, nodes, gbs, top):
    """--placements all --top K through the order tree (forced past TREE_ORDERS) cuts whole classes of
    tied orders and still gives the CSV text of the K fastest fitting plans of the exhaustive listing,
    tied orders and their order included."""
    spec, cluster, inventory = _world(tmp_path, nodes, gbs)
    listed = search(spec, cluster, inventory, heterogeneous=True, estimator_options=RECIPES)
    trees = []

    class Recorded(orders_module.OrderSearch):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            trees.append(self)

    monkeypatch.setattr(search_module, "TREE_ORDERS", 1)
    monkeypatch.setattr(search_module, "OrderSearch", Recorded)
    tree = search(spec, cluster, inventory, heterogeneous=True, top=top, estimator_options=RECIPES, seed_orders=False)
    assert sum(t.tied for t in trees) > 0   # rule 3 cut something
    fitting = tuple(e for e in listed.estimates if not e.memory.is_oom)[:top]
    steps = [e.step_time_s for e in fitting]
    assert len(set(steps)) < len(steps)   # the kept plans include exact ties
    expected = report.csv_text(*report.search_rows(dataclasses.replace(listed, estimates=fitting), spec.sequence_length))
    assert report.csv_text(*report.search_rows(tree, spec.sequence_length)) == expected


def test_a_prefix_is_cut_as_ties_only_behind_the_kth_kept_plan():
    """Rule 3 by hand: with the K-th kept plan at 5.0 s and index 10, a prefix whose every class is
    bound at 5.0 s is cut only when its first plan's index is above 10; at 5.1 s always; at 4.9 s, or
    with a class not certified, or before K plans are kept (under an infinite threshold), never."""
    cluster = load_cluster("aws")
    inventory = parse_nodes("p5=2,p6-b200=2", cluster)
    p5, b200 = inventory[0], inventory[-1]

    def tree(kth, threshold=5.0):
        return orders_module.OrderSearch(None, inventory, [], lambda: threshold, kth=lambda: kth)

    at = lambda value: (lambda counts, first, last: value)  # noqa: E731
    left = (1, 2)   # one p5 and both B200 nodes still to place: either kind can be last
    assert tree((5.0, 10)).ties_out(at(5.0), (p5,), left, 11)
    assert not tree((5.0, 10)).ties_out(at(5.0), (p5,), left, 10)
    assert not tree((5.0, 10)).ties_out(at(5.0), (p5,), left, 9)
    assert tree((5.0, 10)).ties_out(at(5.1), (p5,), left, 0)
    assert not tree((5.0, 10)).ties_out(at(4.9), (p5,), left, 11)
    assert not tree((5.0, 10)).ties_out(lambda counts, first, last: 5.0 if last == 0 else None, (p5,), left, 11)
    assert tree((5.0, 10)).ties_out(lambda counts, first, last: 5.0 if last == 1 else None, (p5, p5), (0, 2), 11)
    assert not tree(None, float("inf")).ties_out(at(5.0), (p5,), left, 11)
    assert tree(None, 4.0).ties_out(at(5.0), (b200,), left, 0)   # above a cutoff with fewer than K kept
