"""`fasop search --offload-layers N[,N]` and `--recompute-layers N[,N]`: activation offloading (Megatron-Core's
--cpu-offloading-num-layers), tried only where Megatron-Core allows it -- one pipeline stage, no recompute,
fewer layers than the model's --, and block recompute (full recompute of the first N layers of each model
chunk, --recompute-method block) as recipe dimensions, carried into the CSV, explain and the exports."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from fasop.cli.command import main
from fasop.estimators.analytic.recipes import parse_recipes, recipe_grid
from fasop.plans.plan import Plan

CLUSTER = str(Path(__file__).parent / "data" / "gb200_nvl72_cluster.yaml")
# Llama 3 70B FP8 with FSDP on 64 GB200 (NeMo's 25.04 plan, fsdp_nemo_perf_summary.csv, at 10K tokens: PyTorch FSDP
# keeps 16 state bytes a parameter, so at its 8K every top plan fits without offloading)
SEARCH = ["search", "--model", "llama-3-70b", "--cluster", CLUSTER, "--nodes", "gb200=16", "--zero", "3",
          "--precision", "fp8", "--seq-len", "10240", "--global-batch-size", "128", "--recompute", "none,full"]


def _plan(tp, dp, pp, mbs=1):
    from fasop.specs.load import load_cluster
    node = load_cluster(CLUSTER).node_types["gb200"]
    return Plan(tp=tp, dp=dp, pp=pp, mbs=mbs, placement=(node,) * (tp * dp * pp // 4), global_batch_size=128)


def test_offloading_is_tried_only_where_megatron_core_allows_it():
    r = parse_recipes({"offload_layers": (0, 20, 80), "recompute": ("none", "full"), "zero": (3,)})
    one = list(recipe_grid(r, _plan(1, 64, 1), 80, False))
    assert {(x.recompute, x.offload_layers) for x in one} == {("none", 0), ("full", 0), ("none", 20)}  # 80: not < 80
    two = list(recipe_grid(r, _plan(1, 32, 2), 80, False))
    assert {x.offload_layers for x in two} == {0}                           # pp 2: Megatron-Core refuses it


def test_a_plan_that_fits_only_with_offloading_is_found_and_exported(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(SEARCH + ["--offload-layers", "0,10,20,30,40", "--top", "5", "--out", "o.csv"]) == 0
    rows = list(csv.DictReader(open("o.csv")))
    offloaded = [r for r in rows if r["offload_layers"] not in ("", "0")]
    assert offloaded and all(r["pp"] == "1" and r["recompute"] == "none" for r in offloaded)
    assert main(SEARCH + ["--top", "5", "--out", "n.csv"]) == 0               # without it: none of those plans
    plain = {(r["tp"], r["dp"], r["mbs"], r["recompute"]) for r in csv.DictReader(open("n.csv"))}
    assert all((r["tp"], r["dp"], r["mbs"], "none") not in plain for r in offloaded)
    rank = offloaded[0]["rank"]
    capsys.readouterr()
    assert main(["export", "--from", "o.csv", "--rank", rank, "--target", "megatron"]) == 0
    assert f"--cpu-offloading-num-layers {offloaded[0]['offload_layers']}" in capsys.readouterr().out
    assert main(["export", "--from", "o.csv", "--rank", rank, "--target", "torchtitan"]) == 0
    assert "torchtitan offloads no activations" in capsys.readouterr().err
    assert main(["explain", "--from", "o.csv", "--rank", rank, "--json"]) == 0
    import json
    assert json.loads(capsys.readouterr().out)["step_time_s"] == pytest.approx(float(offloaded[0]["step_time_s"]), rel=1e-5)


@pytest.mark.parametrize("flags, message", [
    (["--offload-layers", "10", "--cuda-graphs", "attn"], "--offload-layers: Megatron-Core offloads no activations"),
    (["--offload-layers", "x"], "--offload-layers"),
])
def test_offloading_the_run_cannot_do_is_one_line(tmp_path, monkeypatch, capsys, flags, message):
    monkeypatch.chdir(tmp_path)
    try:
        code = main(SEARCH + flags + ["--top", "1"])
    except SystemExit as exc:   # argparse's own refusal of a value
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_a_csv_cell_no_search_could_write_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(SEARCH + ["--top", "1", "--out", "o.csv"]) == 0
    rows = list(csv.DictReader(open("o.csv")))
    rows[0]["offload_layers"] = "80"
    with open("bad.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    capsys.readouterr()
    assert main(["export", "--from", "bad.csv", "--target", "megatron"]) == 2
    err = capsys.readouterr().err
    assert "offload_layers" in err and "'80'" in err and err.count("\n") == 1


def test_block_recompute_is_tried_beside_every_layers_full_recompute():
    r = parse_recipes({"recompute_layers": (5, 20, 40), "recompute": ("none", "full"), "zero": (1,)})
    one = {(x.recompute, x.recompute_layers) for x in recipe_grid(r, _plan(1, 64, 1), 80, False)}
    assert one == {("none", None), ("full", None), ("full", 5), ("full", 20), ("full", 40)}
    four = {(x.recompute, x.recompute_layers) for x in recipe_grid(r, _plan(1, 16, 4), 80, False)}
    assert four == {("none", None), ("full", None), ("full", 5)}      # chunks of 20 layers: 20 and 40 are all


def test_a_block_recompute_plan_is_exported_as_megatrons_block_method(tmp_path, monkeypatch, capsys):
    import json
    monkeypatch.chdir(tmp_path)
    argv = ["search", "--model", "llama-3-70b", "--cluster", "aws", "--nodes", "p5=8", "--recompute", "none,full",
            "--recompute-layers", "5,10,20,40", "--top", "5", "--out", "b.csv"]
    assert main(argv) == 0
    rows = [r for r in csv.DictReader(open("b.csv")) if r["recompute_layers"]]
    assert rows and all(r["recompute"] == "full" for r in rows)
    rank, n = rows[0]["rank"], rows[0]["recompute_layers"]
    capsys.readouterr()
    assert main(["export", "--from", "b.csv", "--rank", rank, "--target", "megatron"]) == 0
    assert f"--recompute-method block\n    --recompute-num-layers {n}" in capsys.readouterr().out
    assert main(["explain", "--from", "b.csv", "--rank", rank, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["step_time_s"] == pytest.approx(float(rows[0]["step_time_s"]), rel=1e-5)
    capsys.readouterr()
    assert main(argv[:-8] + ["--recompute", "none", "--recompute-layers", "5", "--top", "1"]) == 2
    err = capsys.readouterr().err
    assert "--recompute-layers" in err and err.count("\n") == 1
