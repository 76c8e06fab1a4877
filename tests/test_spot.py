"""Spot prices: the shipped catalog clusters carry one per node type, `fasop search --spot` charges
them (the same plans, only the cost columns change), and a node type without one is refused."""

from __future__ import annotations

import csv

import pytest

from fasop.cli.command import main
from fasop.specs.files import resolve
from fasop.specs.load import load_cluster
from fasop.specs.reader import read_yaml


def _rows(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.mark.parametrize("name", ["aws", "gcp"])
def test_every_catalog_node_type_has_a_dated_sourced_spot_price(name):
    raw = read_yaml(resolve(name, "cluster_specs"))["node_types"]
    for node in load_cluster(name).node_types.values():
        assert node.spot_usd_per_hour is not None and 0 < node.spot_usd_per_hour <= node.usd_per_hour, node.name
        assert raw[node.name]["price_date"] and raw[node.name]["price_source"], node.name


def test_search_spot_charges_spot_and_keeps_the_plans(tmp_path, capsys):
    args = ["search", "--model", "llama-3-8b", "--cluster", "aws", "--nodes", "p5=1,g6=1", "--heterogeneous",
            "--top", "3", "--no-progress"]
    assert main(args + ["--out", str(tmp_path / "od.csv")]) == 0
    assert main(args + ["--spot", "--out", str(tmp_path / "spot.csv")]) == 0
    assert "note: --spot" in capsys.readouterr().out
    od, spot = _rows(tmp_path / "od.csv"), _rows(tmp_path / "spot.csv")
    nodes = load_cluster("aws").node_types
    spot_per_hour = nodes["p5"].spot_usd_per_hour + nodes["g6"].spot_usd_per_hour
    assert len(od) == len(spot) == 3
    for a, b in zip(od, spot):
        assert (a["node_placement"], a["partition"], a["step_time_s"]) == (b["node_placement"], b["partition"],
                                                                          b["step_time_s"])
        assert float(b["usd_per_hour"]) == pytest.approx(spot_per_hour)
        assert float(b["usd_per_step"]) == pytest.approx(spot_per_hour * float(b["step_time_s"]) / 3600, rel=1e-5)
        assert float(b["usd_per_step"]) < float(a["usd_per_step"])


def test_search_spot_refuses_a_node_type_without_a_spot_price(tmp_path, capsys):
    out = tmp_path / "x.csv"
    assert main(["search", "--model", "bert", "--cluster", "fasop-paper", "--nodes", "a100=1", "--spot",
                 "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "fasop-paper.yaml: spot_usd_per_hour: none for a100" in err
    assert not out.exists()
