"""Issue 30, item 7: the small things a new user met.

- a catalog model on a FASOP (profiled) cluster is one line, not a traceback;
- `fasop prices --out` keeps the date of a price it did not update, and writes nothing (exit 2)
  when no node type got a price (a mistyped --region); --price-date is a real date, not in the future;
- "1 micro-batch", not "1 micro-batches";
- a mistyped flag gets "did you mean";
- the torchtitan recipe's docstring names no other model's recipe.
"""

from __future__ import annotations

import pytest

from fasop.cli.command import main
from fasop.specs.load import load_cluster
from test_bad_input import CLUSTER, MODEL, PROFILE

VMS = """\
InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,Region,AvailabilityZone
p5.48xlarge,H100,8,192,2048,,55.04,,us-east-1,us-east-1a
"""
SPEC = """\
estimator: analytic
node_types:
  p5:
    instance: p5.48xlarge
    gpu: H100-SXM
    gpus_per_node: 8
    inter_node_gbit_per_s: 3200
    usd_per_hour: 50.0
    spot_usd_per_hour: 20.0     # fetched long ago
    price_date: 2025-06
    price_source: by hand
"""


def _one_line(capsys, *words) -> None:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and all(w in err for w in words), err


def test_catalog_model_on_a_fasop_cluster_is_one_line(tmp_path, capsys):
    assert main(["search", "--model", "llama-3-8b", "--cluster", "fasop-paper", "--nodes", "a100=1", "--out",
                 str(tmp_path / "o.csv"), "--no-progress"]) == 2
    _one_line(capsys, "needs a model with a profile")


@pytest.fixture
def priced(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "spec.yaml").write_text(SPEC)
    (tmp_path / "vms.csv").write_text(VMS)
    return ["prices", "--cluster", "spec.yaml", "--from", "vms.csv", "--out", "new.yaml"]


def test_prices_keep_the_date_of_a_price_not_updated(priced, tmp_path):
    assert main(priced + ["--price-date", "2026-11-25"]) == 0
    text = (tmp_path / "new.yaml").read_text()
    assert "price_date: 2025-06" in text and "price_date: 2026" not in text  # the spot price is still 2025-06's
    assert "fetched 2026-11-25" in text  # the new on-demand price says when it was fetched
    p5 = load_cluster(str(tmp_path / "new.yaml")).node_types["p5"]
    assert (p5.usd_per_hour, p5.spot_usd_per_hour) == (55.04, 20.0)


@pytest.mark.parametrize("extra, words", [
    (["--region", "us-eats-1"], ("no node type", "us-eats-1", "nothing written")),
    (["--price-date", "9999-99"], ("--price-date", "not a calendar date")),
    (["--price-date", "2024-02-30"], ("--price-date", "not a calendar date")),
    (["--price-date", "9999-12-31"], ("--price-date", "after today")),
])
def test_prices_refuse_what_cannot_be_right(priced, tmp_path, capsys, extra, words):
    assert main(priced + extra) == 2
    _one_line(capsys, *words)
    assert not (tmp_path / "new.yaml").exists()


def test_one_micro_batch_and_no_other_models_recipe(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name, text in (("model.yaml", MODEL), ("cluster.yaml", CLUSTER), ("tiny.profile.csv", PROFILE)):
        (tmp_path / name).write_text(text)
    assert main(["search", "--model", "model.yaml", "--cluster", "cluster.yaml", "--nodes", "a10=2", "--out", "r.csv",
                 "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["explain", "--from", "r.csv", "--model", "model.yaml", "--cluster", "cluster.yaml"]) == 0
    out = capsys.readouterr().out
    assert "1 micro-batch a step" in out and "1 micro-batches" not in out
    assert main(["export", "--from", "r.csv", "--model", "model.yaml", "--cluster", "cluster.yaml",
                 "--target", "torchtitan"]) == 0
    out = capsys.readouterr().out
    assert "llama3_8b" not in out and "the recipe of tiny" in out and "1 micro-batch per step" in out


@pytest.mark.parametrize("argv, close", [
    (["search", "--model", "bert", "--cluster", "fasop-paper", "--nodes", "a10=1", "--partitoner", "optimal"],
     "--partitioner"),
    (["pareto", "--model", "bert", "--cluster", "fasop-paper", "--max-nodes", "a10=1", "--budgetusd", "3"],
     "--budget-usd"),
    # no abbreviations: argparse took these as --out-dir (a directory named q.png) and --out-prefix
    (["plot", "--from", "x.csv", "--out", "q.png"], "--out-dir"),
    (["pareto", "--model", "bert", "--cluster", "fasop-paper", "--max-nodes", "a10=1", "--out", "p.csv"],
     "--out-prefix"),
])
def test_a_mistyped_flag_gets_did_you_mean(capsys, argv, close, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    _one_line(capsys, f"did you mean {close}?")
    assert list(tmp_path.iterdir()) == []  # nothing written
