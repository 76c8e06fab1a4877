"""The analytic estimator behind the seam: `fasop search` / `fasop pareto` on catalog clusters."""

import csv

import pytest

from fasop.cli.command import main

RECIPE = ("recompute", "zero", "sequence_parallel", "virtual_stages", "precision", "compute_source", "misfit")


def _rows(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.fixture(scope="module")
def llama_on_p5_and_g6(tmp_path_factory):
    out = tmp_path_factory.mktemp("s") / "s.csv"
    assert main(["search", "--model", "llama-3-8b", "--cluster", "aws", "--nodes", "p5=2,g6=4", "--heterogeneous",
                 "--no-progress", "--out", str(out)]) == 0
    return _rows(out)


def test_llama_3_8b_on_h100_and_l4_has_fitting_analytic_plans(llama_on_p5_and_g6):
    rows = llama_on_p5_and_g6
    fitting = [r for r in rows if r["is_oom"] == "False"]
    assert fitting and all(r["compute_source"] == "analytic" for r in rows)
    assert {r["stage_gpu_types"] for r in fitting} >= {"L4-L4-H100-SXM"} or any("L4" in r["stage_gpu_types"]
                                                                                for r in fitting)
    assert all(c in rows[0] for c in RECIPE)


def test_every_fitting_plan_fits_every_stage(llama_on_p5_and_g6):
    """Each stage's memory (weights, gradients, optimizer, activations, overhead) is below its GPU's capacity."""
    for r in llama_on_p5_and_g6:
        used = [float(x) for x in r["stage_memory_gib"].split("-")]
        limits = [float(x) for x in r["stage_memory_limit_gib"].split("-")]
        assert len(used) == len(limits) == int(r["pp"])
        if r["is_oom"] == "False":
            assert all(u < c for u, c in zip(used, limits)), r
            assert r["misfit"] == ""
        else:
            assert r["misfit"] in ("weights", "activations", "both")


def test_recipe_flags_become_columns(tmp_path, capsys):
    out = tmp_path / "r.csv"
    assert main(["search", "--model", "qwen2.5-7b", "--cluster", "aws", "--nodes", "p4de=1", "--recompute",
                 "none,full", "--zero", "0,3", "--sequence-parallel", "off", "--precision", "bf16",
                 "--no-progress", "--out", str(out)]) == 0
    rows = _rows(out)
    assert {r["recompute"] for r in rows} <= {"none", "full"} and {r["zero"] for r in rows} <= {"0", "3"}
    assert {r["sequence_parallel"] for r in rows} == {"False"}
    assert "not fitting in memory, by what alone exceeds it" in capsys.readouterr().out


def test_recipe_flags_refused_on_a_fasop_cluster(tmp_path, capsys):
    assert main(["search", "--model", "bert", "--cluster", "fasop-paper", "--nodes", "a100=1", "--zero", "1",
                 "--out", str(tmp_path / "x.csv")]) == 2
    assert "--zero: the fasop-2024 estimator" in capsys.readouterr().err


def test_a_fasop_model_on_a_catalog_cluster_is_refused_in_one_line(tmp_path, capsys):
    assert main(["search", "--model", "bert", "--cluster", "aws", "--nodes", "p4d=1",
                 "--out", str(tmp_path / "x.csv")]) == 2
    assert "the analytic estimator needs the model's architecture" in capsys.readouterr().err


def test_pareto_runs_on_the_catalog(tmp_path):
    prefix = tmp_path / "p"
    assert main(["pareto", "--model", "llama-3-8b", "--cluster", "aws", "--max-nodes", "p5=2,g6=4",
                 "--no-progress", "--workers", "1", "--out-prefix", str(prefix)]) == 0
    rows = _rows(tmp_path / "p_pareto.csv")
    assert any(r["on_frontier"] == "True" for r in rows)
    assert all(r["compute_source"] in ("analytic", "") for r in rows)


def test_order_tree_finds_the_listed_top_k():
    """--top K over 126 node orders goes through the analytic prefix bounds (orders.OrderSearch);
    its K step times are the K fastest fitting ones of the full listing."""
    from fasop.search.engine import parse_nodes, search
    from fasop.specs.load import load_cluster, load_model

    model, cluster = load_model("qwen2.5-7b"), load_cluster("aws")
    inventory = parse_nodes("p5=5,g6=4", cluster)
    options = {"recompute": ("selective", "full"), "zero": (1,)}
    tree = search(model, cluster, inventory, heterogeneous=True, top=4, estimator_options=options)
    listed = search(model, cluster, inventory, heterogeneous=True, estimator_options=options)
    assert tree.num_pruned > 0
    assert [e.step_time_s for e in tree.estimates] == \
        sorted(e.step_time_s for e in listed.estimates if not e.memory.is_oom)[:4]
