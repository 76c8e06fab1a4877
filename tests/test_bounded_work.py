"""Work that grows with a user's number is capped with a message saying what to change
(fasop/core/limits.py), or computed so that it does not grow: each case here hung, ran out of memory
or raised a traceback before the caps (issue 18)."""

from __future__ import annotations

import time

import pytest

from fasop.cli.command import main
from fasop.core import limits
from test_bad_input import CLUSTER, MODEL

NODE = """\
  t{i}:
    instance: box{i}
    gpu: A10
    gpus_per_node: 2
    memory_limit_gib: 20
    intra_node_gbit_per_s: 128
    inter_node_gbit_per_s: 40
    intra_node_shared: true
    usd_per_hour: {price}
"""


def refused(capsys, argv: list[str]) -> str:
    start = time.monotonic()
    assert main(argv) == 2
    assert time.monotonic() - start < 10
    err = capsys.readouterr().err
    assert err.startswith("fasop: error: ") and err.count("\n") == 1, err
    return err


def search(*extra: str, nodes: str = "a10=2") -> list[str]:
    return ["search", "--model", "model.yaml", "--cluster", "cluster.yaml", "--nodes", nodes, "--out", "o.csv",
            "--no-progress", *extra]


@pytest.mark.parametrize("nodes", ["a10=10000000000", "a10=99999999999999999999", "a10=" + "9" * 5000,
                                   f"a10={limits.NODES + 1}", f"a100={limits.NODES},a10=1"])
def test_node_counts_past_the_ceiling(tiny_specs, capsys, nodes):
    assert f"{limits.NODES:,}" in refused(capsys, search("--heterogeneous", nodes=nodes))


def test_gpus_past_the_ceiling(tiny_specs, capsys):
    (tiny_specs / "cluster.yaml").write_text(CLUSTER.replace("gpus_per_node: 2", "gpus_per_node: 1024"))
    assert f"{limits.GPUS:,} GPUs" in refused(capsys, search(nodes="a10=65"))


@pytest.mark.parametrize("old,new", [("global_batch_size: 4", "global_batch_size: 1000000000000000000"),
                                     ("global_batch_size: 4", "global_batch_size: 1000003"),
                                     ("count: 2}", "count: 1000000000}"),
                                     ("hidden_size: 64", "hidden_size: 1000000000000000000000000000000"),
                                     ("sequence_length: 16", "sequence_length: 1000000000000000000000000000000")])
def test_spec_numbers_past_the_ceiling(tiny_specs, capsys, old, new):
    (tiny_specs / "model.yaml").write_text(MODEL.replace(old, new))
    assert "fasop's ceiling (README: Limits)" in refused(capsys, search())


def test_compositions_past_the_ceiling(tiny_specs, capsys):
    argv = ["pareto", "--model", "model.yaml", "--cluster", "cluster.yaml", "--max-nodes", "a100=200,a10=200",
            "--workers", "1", "--no-progress"]
    assert "compositions, more than fasop's ceiling of 10,000" in refused(capsys, argv)


def test_grouped_orders_of_many_types_are_refused(tiny_specs, capsys):
    """k node types have k! grouped orders: 10 types, 3.6 million, listed, would not end."""
    types = "".join(NODE.format(i=i, price=i + 1) for i in range(10))
    (tiny_specs / "cluster.yaml").write_text(CLUSTER + types)
    (tiny_specs / "model.yaml").write_text(MODEL.replace("global_batch_size: 4", "global_batch_size: 20"))  # dp = 20
    nodes = ",".join(f"t{i}=1" for i in range(10))
    message = refused(capsys, search("--heterogeneous", "--placements", "grouped", nodes=nodes))
    assert "--placements grouped: 10 node types have 3.6e+06 orders" in message


def test_long_or_unprintable_text_in_a_spec(tiny_specs, capsys):
    (tiny_specs / "model.yaml").write_text(MODEL.replace("name: tiny", "name: '" + "x" * 5000 + "'"))
    assert "printable text of at most 1,000 characters" in refused(capsys, search())
    (tiny_specs / "model.yaml").write_text(MODEL.replace("name: tiny", 'name: "a\\tb"'))
    assert "printable text" in refused(capsys, search())


@pytest.mark.parametrize("counts", [(1,), (3,), (2, 2), (1, 3, 2), (2, 1, 1, 2), (4, 1)])
def test_all_placements_is_every_distinct_order_in_lexicographic_order(counts):
    """The iterative enumeration (constant stack: 1,024 nodes overflowed the recursive one) lists
    the multiset permutations of the type indices exactly once each, in lexicographic order."""
    import itertools

    from fasop.plans.enumerate import all_placements, count_orders
    from fasop.specs.types import NodeType

    types = [NodeType(name=f"t{k}", instance="x", gpu="G", gpus_per_node=1, memory_limit_bytes=1.0,
                      intra_node_bytes_per_s=1.0, inter_node_bytes_per_s=1.0, intra_node_shared=False,
                      usd_per_hour=1.0, spot_usd_per_hour=None) for k in range(len(counts))]
    nodes = [t for t, c in zip(types, counts) for _ in range(c)]
    got = [tuple(types.index(n) for n in order) for order in all_placements(nodes)]
    expected = sorted(set(itertools.permutations([types.index(n) for n in nodes])))
    assert got == expected and len(got) == count_orders(nodes)


def test_all_placements_of_a_thousand_nodes(tiny_specs):
    from fasop.plans.enumerate import all_placements
    from fasop.specs.load import load_cluster

    a10 = load_cluster("cluster.yaml").node_types["a10"]
    assert next(all_placements([a10] * 1024)) == (a10,) * 1024
