"""Node orders past search.MAX_ORDERS (issue 3): the branch and bound over order prefixes
(orders.OrderSearch) keeps exactly the plans a full enumeration keeps, its prefix bounds never
exceed a completion's estimate, and the coupled chain floor (partition.least_chain) is a floor.

Fixtures are the small random worlds of test_search (three node types, random links and
per-layer times, 2 GPUs per node).
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest

from fasop.cli.command import main
from fasop.core.errors import FasopError
from fasop.estimators.fasop2024.estimator import Fasop2024Estimator
from fasop.partition.splits import least_chain, least_completions
from fasop.plans.enumerate import all_placements, degree_list
from fasop.plans.plan import Plan
from fasop.search import engine as search_module
from fasop.search import search
from fasop.search.orders import OrderSearch

from test_search import _inventory, _world


def _kept(result) -> list[tuple]:
    return [(e.plan.key(), e.step_time_s, e.partition, e.memory.is_oom) for e in result.estimates]


@pytest.mark.parametrize("seed, counts, top", [
    (0, {"x": 2, "y": 2, "z": 1}, 1), (1, {"x": 2, "y": 2, "z": 1}, 5), (2, {"x": 1, "y": 3, "z": 2}, 3),
    (3, {"x": 3, "y": 3}, 4), (4, {"x": 2, "y": 1, "z": 2}, 12)])
def test_order_search_keeps_what_the_full_enumeration_keeps(seed, counts, top):
    model, cluster, types = _world(seed, layers=12)
    inventory = _inventory(types, **counts)
    full = search(model, cluster, inventory, heterogeneous=True, top=top)
    tree = search(model, cluster, inventory, heterogeneous=True, top=top, max_orders=0)
    assert _kept(tree) == _kept(full) and len(full.estimates) == top
    assert tree.num_candidates == full.num_candidates
    assert tree.num_duplicates + tree.num_pruned + tree.num_estimated == tree.num_candidates


def test_order_search_is_the_same_with_two_workers():
    model, cluster, types = _world(5, layers=12)
    inventory = _inventory(types, x=2, y=2, z=2)
    one = search(model, cluster, inventory, heterogeneous=True, top=3, max_orders=0)
    two = search(model, cluster, inventory, heterogeneous=True, top=3, max_orders=0, workers=2)
    assert _kept(one) == _kept(two)


@pytest.mark.parametrize("seed, counts", [(0, {"x": 2, "y": 1, "z": 2}), (1, {"x": 2, "y": 1, "z": 2}),
                                          (2, {"x": 1, "y": 2, "z": 1}), (3, {"x": 2, "y": 2})])
def test_prefix_bounds_never_exceed_a_completion(seed, counts):
    """For every prefix of every order, the bound is at most every completion's step time
    (stages spanning nodes, sharing a node, one per node and several per node)."""
    model, cluster, types = _world(seed, layers=10)
    inventory = _inventory(types, **counts)
    combos = degree_list(inventory, tp_degrees=(1, 2), global_batch_size=model.global_batch_size,
                         num_transformer_layers=model.num_transformer_layers)
    assert _check_prefix_bounds(model, cluster, inventory, combos) > 200


def _check_prefix_bounds(model, cluster, inventory, combos) -> int:
    """Asserts that for every prefix of every order of `inventory`, for each (tp, dp, pp, mbs)
    of `combos`, the order tree's bound is at most every completion's step time; returns how
    many prefixes it checked."""
    estimator = Fasop2024Estimator(model, cluster, inventory, "optimal", None)
    tree = OrderSearch(estimator, inventory, combos, lambda: np.inf)
    orders = list(all_placements(inventory))
    gbs = model.global_batch_size
    checked = 0
    for tp, dp, pp, mbs in combos:
        shape = Plan(tp=tp, dp=dp, pp=pp, mbs=mbs, global_batch_size=gbs, placement=inventory)
        prefixes = estimator.prefix_bounds(shape, tree.kinds)
        steps = {order: estimator.estimate(Plan(tp=tp, dp=dp, pp=pp, mbs=mbs, global_batch_size=gbs,
                                                placement=order)).step_time_s for order in orders}
        for order in orders:
            state, left = prefixes.start(), list(tree.counts)
            for q, node in enumerate(order):
                state = prefixes.extend(state, q, node)
                left[tree.kinds.index(node)] -= 1
                bound = prefixes.bound(state, q + 1, tuple(left))
                least = min(step for other, step in steps.items() if other[:q + 1] == order[:q + 1])
                assert bound <= least, (tp, dp, pp, mbs, order[:q + 1])
                checked += 1
    return checked


def _inverted_world(seed: int):
    """test_search's world with a global batch of 12 and GPU type G2 slowest over the whole
    layer list through one layer only (it is the fastest on every other): which type is slowest
    on a stage's own layers is then often not the one slowest in total."""
    model, cluster, types = _world(seed, layers=10, gbs=12)
    rng = np.random.default_rng(seed)
    base = rng.uniform(1e-3, 3e-3, 10)
    times = {"G1": base * rng.uniform(0.9, 1.1, 10), "G2": base * 0.5, "G3": base * rng.uniform(0.6, 1.4, 10)}
    times["G2"][int(rng.integers(0, 10))] = base.sum() * rng.uniform(0.6, 1.5)
    forward = {(g, tp): tuple(float(x) for x in t * (1.0 if tp == 1 else 0.6)) for g, t in times.items() for tp in (1, 2)}
    return dataclasses.replace(model, profile=dataclasses.replace(model.profile, forward_s=forward)), cluster, types


@pytest.mark.parametrize("seed", range(3))
def test_prefix_bounds_hold_where_stages_share_a_node(seed):
    """Stages of 3 GPUs on nodes of 2 (tp 1, dp 3; 6 nodes, global batch 12): consecutive stages
    share a node, and a type slower over the whole layer list is faster on a stage's own layers.
    For every prefix of every order, the bound is at most every completion's step time. (The
    floor once assumed the shared node's stage ran at the type it counted there: thousands of
    violations on these worlds; found by review.)"""
    model, cluster, types = _inverted_world(seed)
    inventory = _inventory(types, x=2, y=2, z=2)
    combos = [c for c in degree_list(inventory, tp_degrees=(1, 2), global_batch_size=12,
                                     num_transformer_layers=model.num_transformer_layers) if c[0] * c[1] == 3]
    spans = Plan(tp=1, dp=3, pp=4, mbs=1, global_batch_size=12, placement=inventory).stage_node_indices
    assert combos and any(set(a) & set(b) for a, b in zip(spans, spans[1:]))  # stages do share nodes
    assert _check_prefix_bounds(model, cluster, inventory, combos) > 1000


def test_past_the_order_limit_without_top_is_one_clear_error():
    model, cluster, types = _world(0)
    with pytest.raises(FasopError, match=r"--placements all: 30 distinct node orders .* add --top K"):
        search(model, cluster, _inventory(types, x=2, y=2, z=1), heterogeneous=True, max_orders=10)


def test_orders_past_the_tree_limit_are_one_clear_error(tmp_path, capsys):
    argv = ["search", "--model", "gpt2xl-scaled", "--cluster", "mixed-64", "--heterogeneous", "--top", "5",
            "--nodes", "h100=16,a100_80gb=16,a10g=16,l4=16", "--out", str(tmp_path / "o.csv"), "--no-progress"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "6.6e+35 distinct node orders" in err and "grouped" in err
    assert not (tmp_path / "o.csv").exists()


def test_cli_searches_orders_past_the_limit_with_top(tmp_path, monkeypatch, capsys):
    base = ["search", "--model", "gpt2xl-scaled", "--cluster", "mixed-64", "--nodes", "h100=1,a100_80gb=1,l4=2",
            "--heterogeneous", "--no-progress"]
    monkeypatch.setattr(search_module, "MAX_ORDERS", 3)  # 12 orders: searched by prefixes
    assert main(base + ["--top", "3", "--out", str(tmp_path / "tree.csv")]) == 0
    assert main(base + ["--out", str(tmp_path / "no-top.csv")]) == 2
    assert "add --top K" in capsys.readouterr().err
    assert not (tmp_path / "no-top.csv").exists()
    monkeypatch.setattr(search_module, "MAX_ORDERS", 100_000)  # listed
    assert main(base + ["--top", "3", "--out", str(tmp_path / "listed.csv")]) == 0
    tree = (tmp_path / "tree.csv").read_bytes()
    assert tree == (tmp_path / "listed.csv").read_bytes() and tree.count(b"\n") == 4


def test_least_chain_is_a_floor_of_the_coupled_chain():
    """least_chain's first value lies between the uncoupled floor and the true least of
    sum t_i + max w_i t_i over all splits (brute force)."""
    rng = np.random.default_rng(7)
    for _ in range(200):
        layers, pp = int(rng.integers(2, 9)), int(rng.integers(1, 5))
        pp = min(pp, layers)
        seconds = rng.uniform(0.1, 1.0, (pp, layers)) ** rng.uniform(0.5, 3)
        times = np.full((pp, layers + 1, layers + 1), np.inf)
        for i, a in itertools.product(range(pp), range(layers)):
            times[i, a, a + 1:] = np.cumsum(seconds[i, a:])
        weights = rng.uniform(0, 5, pp) * (rng.random(pp) < 0.8)
        exact = np.inf
        for cuts in itertools.combinations(range(1, layers), pp - 1):
            edges = (0,) + cuts + (layers,)
            t = np.array([times[i, edges[i], edges[i + 1]] for i in range(pp)])
            exact = min(exact, t.sum() + (weights * t).max())
        chain, _ = least_chain(times, weights)
        least_sum, _, least_steady = least_completions(times, weights)
        assert least_sum + least_steady <= chain * (1 + 1e-12) and chain <= exact * (1 + 1e-12)
