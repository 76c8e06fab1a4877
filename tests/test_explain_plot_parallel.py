"""What a user carries out of explain and plot for the plans of issue 29 (MoE / CP / HSDP): an MoE
plan at ep 1 exchanges nothing, so explain prints no per-micro-batch lines of zeros; an HSDP plan
names its shard group as dp_shard x cp (not dp x cp, which is shard x replicate ranks); the memory
table's title says what the ZeRO stage shards; plot titles and breakdown labels state the cp, ep
and etp degrees, so two plans differing only in ep are told apart."""

from __future__ import annotations

import csv
import re

import pytest

from fasop.cli.command import main
from fasop.plans.rowplan import plan_of_row
from fasop.specs.load import load_cluster, load_model


def _search(tmp_path, name, argv) -> list[dict]:
    out = tmp_path / name
    assert main(["search", "--cluster", "aws", "--out", str(out), "--no-progress", "--show", "0", *argv]) == 0
    return [r for r in csv.DictReader(open(out, newline="")) if r["rank"]]


def _explain(path, rank, capsys) -> list[str]:
    capsys.readouterr()
    assert main(["explain", "--from", str(path), "--rank", rank]) == 0
    return capsys.readouterr().out.splitlines()


@pytest.fixture(scope="module")
def moe(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("moe")
    rows = _search(tmp, "q.csv", ["--model", "qwen3-30b-a3b", "--nodes", "p5=1", "--ep", "1,2", "--top", "5"])
    return tmp / "q.csv", rows


def test_an_moe_plan_at_ep_1_prints_no_lines_of_zeros(moe, capsys):
    path, rows = moe
    by_ep = {r["ep"]: r for r in rows}
    assert set(by_ep) == {"1", "2"}
    plain = _explain(path, by_ep["1"]["rank"], capsys)
    assert [ln for ln in plain if ln.startswith("groups")]  # the groups still shown
    assert not [ln for ln in plain if ln.startswith("per mb")], plain
    experts = _explain(path, by_ep["2"]["rank"], capsys)
    per_mb = [ln for ln in experts if ln.startswith("per mb")]
    assert len(per_mb) == int(by_ep["2"]["pp"]) and all("all-to-all" in ln and "exposed" in ln for ln in per_mb)


def test_hsdp_names_its_shard_group_and_the_memory_title_what_is_sharded(tmp_path, capsys):
    rows = _search(tmp_path, "h.csv", ["--model", "llama-3-8b", "--nodes", "p5=2", "--zero", "3", "--hsdp", "on",
                                       "--top", "3"])
    row = next(r for r in rows if int(r["dp_replicate"]) > 1)
    text = _explain(tmp_path / "h.csv", row["rank"], capsys)
    groups = next(ln for ln in text if ln.startswith("groups"))
    shard, replicate = map(int, re.search(r"sharded over (\d+) ranks \(dp_shard x cp\), replicated (\d+)x \(HSDP\)",
                                          groups).groups())
    assert (shard, replicate) == (int(row["dp_shard"]) * int(row["cp"]), int(row["dp_replicate"]))
    assert shard * replicate == int(row["dp"]) * int(row["cp"])
    assert "memory GiB per GPU (weights, gradients and optimizer sharded as the groups line says, ZeRO-3)" in text


def test_a_dense_zero_1_title_is_unchanged(tmp_path, capsys):
    _search(tmp_path, "d.csv", ["--model", "llama-3-8b", "--nodes", "p5=1", "--top", "1", "--zero", "1"])
    assert "memory GiB per GPU (optimizer sharded over dp, ZeRO-1)" in _explain(tmp_path / "d.csv", "1", capsys)


def test_plot_titles_and_labels_state_the_expert_degree(moe, tmp_path):
    path, rows = moe
    row = next(r for r in rows if r["ep"] == "2")
    plan = plan_of_row(row, "row", load_model("qwen3-30b-a3b"), load_cluster("aws")).plan
    grid = plan.grid()
    assert grid == f"tp {row['tp']}, ep 2, dp {row['dp']}, pp {row['pp']}"
    assert main(["plot", "--from", str(path), "--rank", row["rank"], "--out-dir", str(tmp_path),
                 "--figures", "memory,breakdown"]) == 0
    memory = (tmp_path / f"q_rank{row['rank']}_memory.svg").read_text()
    breakdown = (tmp_path / f"q_rank{row['rank']}_breakdown.svg").read_text()
    assert f"{grid}, mbs {row['mbs']}" in memory
    for r in rows:  # every plan of the top 5 labelled with its ep where not 1
        ep = "" if r["ep"] == "1" else f" ep{r['ep']}"
        assert f"#{r['rank']} tp{r['tp']}{ep} dp{r['dp']} pp{r['pp']} mbs{r['mbs']}" in breakdown


def test_a_dense_plans_grid_is_as_before():
    plan = plan_of_row({"tp": "2", "dp": "4", "pp": "1", "mbs": "1", "node_placement": "p5", "partition": "34"},
                       "row", load_model("llama-3-8b"), load_cluster("aws")).plan
    assert plan.grid() == "tp 2, dp 4, pp 1" and plan.grid(" ", "") == "tp2 dp4 pp1"


def test_pareto_answer_line_states_the_expert_degree(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["pareto", "--model", "qwen3-30b-a3b", "--cluster", "aws", "--max-nodes", "p5=1,p4de=1",
                 "--budget-usd", "200000", "--out-prefix", "pq", "--no-progress"]) == 0
    answer = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("fastest within"))
    row = next(r for r in csv.DictReader(open("pq_pareto.csv", newline="")) if r["on_frontier"] == "True")
    grid = ", ".join(f"{k} {row[k]}" for k in ("tp", "cp", "ep", "etp", "dp", "pp")
                     if k in ("tp", "dp", "pp") or row[k] != "1")
    assert row["ep"] != "1" and f"({grid}, mbs {row['mbs']})" in answer, answer
