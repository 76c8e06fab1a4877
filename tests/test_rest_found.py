"""The rest of what issue 30 found (item 7): --partitioner / --partition-budget on analytic
clusters say they do nothing; `balanced` is documented; `fasop prices` with a region that prices
nothing is exit 2 and keeps the date of a price it did not update; the shipped specs agree on an
instance's price; one micro-batch is "1 micro-batch"; the torchtitan recipe names the plan's model.
(Interrupted searches: tests/test_signals.py. Did-you-mean: tests/test_cli_habits.py.)
"""

from __future__ import annotations

import re

import pytest

from conftest import REPO
from fasop.cli.command import main
from fasop.specs.load import load_cluster


@pytest.mark.parametrize("flags", [["--partitioner", "fasop-minmax"], ["--partition-budget", "100"]])
def test_partition_flags_on_an_analytic_cluster_say_they_do_nothing(tmp_path, capsys, flags):
    out = tmp_path / "x.csv"
    assert main(["search", "--model", "llama-3-8b", "--cluster", "aws", "--nodes", "p4d=1", "--out", str(out),
                 "--no-progress", *flags]) == 0
    notes = [line for line in capsys.readouterr().out.splitlines() if flags[0] in line]
    assert len(notes) == 1 and "do nothing with the analytic estimator" in notes[0]
    assert {line.split(",")[21] for line in out.read_text().splitlines()[1:]} == {"balanced"}  # partition_method


def test_no_note_without_the_flags_or_on_a_fasop_cluster(tmp_path, capsys):
    assert main(["search", "--model", "llama-3-8b", "--cluster", "aws", "--nodes", "p4d=1", "--out",
                 str(tmp_path / "a.csv"), "--no-progress"]) == 0
    assert main(["search", "--model", "gpt2xl", "--cluster", "fasop-paper", "--nodes", "a100=1", "--out",
                 str(tmp_path / "b.csv"), "--no-progress", "--partitioner", "fasop-minmax"]) == 0
    assert "do nothing" not in capsys.readouterr().out


def test_balanced_is_in_the_column_table():
    table = (REPO / "docs" / "specs.md").read_text()
    row = next(line for line in table.splitlines() if line.startswith("| `partition_method`"))
    assert "`balanced`" in row


VMS = """InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,Region,AvailabilityZone
p5.48xlarge,H100,8,192,2048,,60.0,,us-east-1,us-east-1a
"""
SPEC = """estimator: analytic
node_types:
  p5:
    instance: p5.48xlarge
    gpu: H100-SXM
    gpus_per_node: 8
    inter_node_gbit_per_s: 3200
    usd_per_hour: 50.0
    spot_usd_per_hour: 20.0
    price_date: 2025-06
    price_source: by hand
"""


def test_prices_region_that_prices_nothing_is_exit_2(tmp_path, capsys):
    (tmp_path / "vms.csv").write_text(VMS)
    (tmp_path / "spec.yaml").write_text(SPEC)
    for out in ([], ["--out", str(tmp_path / "o.yaml")]):
        assert main(["prices", "--cluster", str(tmp_path / "spec.yaml"), "--from", str(tmp_path / "vms.csv"),
                     "--region", "us-east1", *out]) == 2
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1 and "--region" in err[0] and "'us-east1'" in err[0]
    assert not (tmp_path / "o.yaml").exists()


def test_prices_keep_the_date_of_a_spot_price_they_did_not_update(tmp_path, capsys):
    """The vms.csv has no spot price: the spec's spot price keeps its date (2025-06), and the new
    on-demand price says when it was fetched."""
    (tmp_path / "vms.csv").write_text(VMS)
    (tmp_path / "spec.yaml").write_text(SPEC)
    out = tmp_path / "o.yaml"
    assert main(["prices", "--cluster", str(tmp_path / "spec.yaml"), "--from", str(tmp_path / "vms.csv"),
                 "--region", "us-east-1", "--out", str(out), "--price-date", "2026-01-02"]) == 0
    text = out.read_text()
    assert re.search(r"^\s+price_date: 2025-06\s*$", text, re.M)
    assert re.search(r"usd_per_hour: 60\.0.*fetched 2026-01-02", text)
    assert re.search(r"spot_usd_per_hour: 20\.0", text)
    node = load_cluster(str(out)).node_types["p5"]
    assert (node.usd_per_hour, node.spot_usd_per_hour) == (60.0, 20.0)


def test_shipped_specs_agree_on_an_instances_price():
    """mixed-64.yaml and aws.yaml price the same AWS instances alike (p5: $98.32 against $55.04 before)."""
    aws = {n.instance: n for n in load_cluster("aws").node_types.values()}
    mixed = load_cluster("mixed-64").node_types.values()
    shared = [n for n in mixed if n.instance in aws]
    assert {n.instance for n in shared} >= {"p5.48xlarge", "p4de.24xlarge", "g5.48xlarge", "g6.48xlarge"}
    for n in shared:
        assert (n.usd_per_hour, n.spot_usd_per_hour) == \
            (aws[n.instance].usd_per_hour, aws[n.instance].spot_usd_per_hour), n.instance


def test_one_micro_batch_is_singular(capsys):
    argv = ["--model", "llama-3-8b", "--cluster", "aws", "--placement", "p5", "--tp", "8", "--mbs", "4",
            "--global-batch-size", "4"]
    assert main(["explain", *argv]) == 0
    out = capsys.readouterr().out
    assert "1 micro-batch a step" in out and "1 micro-batches" not in out
    assert main(["export", *argv, "--target", "megatron"]) == 0
    out = capsys.readouterr().out
    assert "1 micro-batch per step" in out and "1 micro-batches" not in out


def test_torchtitan_recipe_names_the_plans_model(tmp_path, capsys):
    argv = ["--model", "llama-3-70b", "--cluster", "aws", "--placement", "p5-p5", "--tp", "8", "--pp", "2"]
    assert main(["export", *argv, "--target", "torchtitan"]) == 0
    out = capsys.readouterr().out
    assert "llama3_8b" not in out and "the recipe of llama-3-70b" in out
