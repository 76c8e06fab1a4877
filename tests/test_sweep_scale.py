"""fasop pareto at catalog scale: pruning across compositions, buyer limits, resume, executors.

What is protected here:
- pruning is exact: on random catalogs (prices, links and a third node type drawn at random) the
  pruned sweep's frontier rows, knee and deadline / budget answers are those of the exhaustive
  sweep, and the rows of compositions it searched are the exhaustive rows byte for byte;
- the composition bound it prunes with is at most the step time of every plan of the
  composition (every placement strategy), and search's cutoff keeps exactly the plans at most it;
- the output depends on the inputs only: not on --workers, the executor, or interruptions
  (Ctrl-C, kill -9 at random points, a worker process that dies) followed by --resume;
- buyer limits leave compositions out before any search.
"""

from __future__ import annotations

import dataclasses
import math
import os
import random
import signal
import subprocess
import sys
import time

import pytest

import fasop.pareto.sweep
from conftest import REPO
from fasop.cli.command import main
from fasop.core.errors import FasopError
from fasop.pareto.buyer import BuyerLimits, within
from fasop.pareto.checkpoint import VERSION
from fasop.pareto.executors import PoolExecutor, SerialExecutor
from fasop.pareto.frontier import analyse
from fasop.pareto.pruning import Found, pruned_sweep
from fasop.pareto.sweep import compositions, sweep_job
from fasop.report.results import csv_text, pareto_rows
from fasop.search import search
from fasop.specs.files import shipped_folder
from fasop.specs.load import load_cluster, load_model

ITERATIONS = 1_000_000


def _catalog(seed: int):
    """fasop-paper's a100 and a10 with prices and inter-node links drawn at random, and a third
    type `a10x` (A10 GPUs, its own price and links)."""
    rng = random.Random(seed)
    cluster = load_cluster("fasop-paper")
    a100, a10 = cluster.node_types["a100"], cluster.node_types["a10"]
    types = {
        "a100": dataclasses.replace(a100, usd_per_hour=a100.usd_per_hour * rng.uniform(0.3, 2.0),
                                    inter_node_bytes_per_s=a100.inter_node_bytes_per_s * rng.choice([0.5, 1, 4])),
        "a10": dataclasses.replace(a10, usd_per_hour=a10.usd_per_hour * rng.uniform(0.3, 2.0)),
        "a10x": dataclasses.replace(a10, name="a10x", usd_per_hour=a10.usd_per_hour * rng.uniform(0.3, 2.0),
                                    intra_node_bytes_per_s=a10.intra_node_bytes_per_s * rng.choice([1, 4]),
                                    inter_node_bytes_per_s=a10.inter_node_bytes_per_s * rng.choice([0.5, 2])),
    }
    return dataclasses.replace(cluster, node_types=types)


def _sweep(model, cluster, comps, *, prune, round_size=1, workers=1, partitioner="optimal",
           placements="cyclic", deadline=None, budget=None):
    job = sweep_job(model, cluster, comps, placements=placements, partitioner=partitioner, iterations=ITERATIONS,
                    spot=False, top=1, partition_budget=1000)
    executor = SerialExecutor(job) if workers == 1 else PoolExecutor(job, workers)
    results = dict(pruned_sweep(job, comps, executor, prune=prune, round_size=round_size))
    return analyse([results[i] for i in range(len(comps))], deadline_hours=deadline, budget_usd=budget)


def _rows(analysis, names) -> list[str]:
    columns, rows = pareto_rows(analysis, 128, names)
    return csv_text(columns, rows).splitlines()


def _unranked(lines: list[str]) -> list[str]:
    """CSV lines without the `rank` column (the 17th)."""
    return [",".join(cells[:16] + cells[17:]) for cells in (line.split(",") for line in lines)]


@pytest.mark.parametrize("seed", range(4))
def test_pruned_sweep_gives_the_exhaustive_frontier_on_random_catalogs(seed):
    model, cluster = load_model("bert"), _catalog(seed)
    limits = {"a100": 2, "a10": 2, "a10x": 2} if seed % 2 else {"a10": 3, "a100": 2, "a10x": 1}
    comps = compositions(limits)
    full = _sweep(model, cluster, comps, prune=False)
    times = sorted(r.train_time_h for r in full.results if r.status == "ok")
    costs = sorted(r.train_cost_usd for r in full.results if r.status == "ok")
    deadline, budget = times[len(times) // 2], costs[len(costs) // 3]
    full = _sweep(model, cluster, comps, prune=False, deadline=deadline, budget=budget)
    pruned = _sweep(model, cluster, comps, prune=True, deadline=deadline, budget=budget)
    assert sum(r.status == "pruned" for r in pruned.results) > 0  # the test tells something apart
    assert pruned.frontier == full.frontier and pruned.knee == full.knee
    assert (pruned.deadline, pruned.budget) == (full.deadline, full.budget) != (None, None)
    # a pareto CSV's rank is its rank in the file among the compositions whose time it states:
    # a pruned sweep states fewer, so ranks differ; every other cell is compared byte for byte
    mine, theirs = (_unranked(_rows(s, list(limits))) for s in (pruned, full))
    assert mine[0] == theirs[0]
    for i, r in enumerate(pruned.results):
        if i in full.frontier:
            assert mine[i + 1] == theirs[i + 1]  # frontier rows: byte for byte
        if r.status in ("ok", "oom", "no_plan"):  # searched in full: the exhaustive row
            assert mine[i + 1].split(",")[:-4] == theirs[i + 1].split(",")[:-4]
            assert r.status == full.results[i].status
        else:  # pruned: its bound is at most every plan's step time, and it is off the frontier
            assert i not in full.frontier and full.results[i].status != "no_plan"
            if full.results[i].best is not None:
                assert r.step_time_bound_s <= full.results[i].best.step_time_s


@pytest.mark.parametrize("placements", ["cyclic", "all", "grouped"])
def test_composition_bound_is_below_every_plan(placements):
    """The bound pruning uses (least quick_bound over degree combinations) is at most the step
    time of every plan of the composition, fitting or not, for every placement strategy."""
    model, cluster = load_model("bert"), _catalog(7)
    job = sweep_job(model, cluster, (), placements=placements, partitioner="optimal", iterations=ITERATIONS,
                    spot=False, top=1, partition_budget=1000)
    for comp in compositions({"a100": 1, "a10": 1, "a10x": 2} if placements == "all" else {"a100": 2, "a10x": 2}):
        bound, usd_per_hour = job.quick_bound(comp)
        result = search(model, cluster, comp.inventory(cluster), heterogeneous=True, placements=placements,
                        partitioner="optimal", partition_budget=1000)
        assert bound <= min(e.step_time_s for e in result.estimates), comp.label
        assert usd_per_hour == result.usd_per_hour


def test_search_cutoff_keeps_exactly_the_plans_at_most_it():
    model, cluster = load_model("bert"), _catalog(3)
    inventory = compositions({"a100": 1, "a10x": 2})[-1].inventory(cluster)
    best = search(model, cluster, inventory, heterogeneous=True, top=1).best_fitting
    for cutoff, kept in ((best.step_time_s, True), (best.step_time_s * 1.5, True),
                         (math.nextafter(best.step_time_s, 0), False), (best.step_time_s / 2, False)):
        got = search(model, cluster, inventory, heterogeneous=True, top=1, cutoff=cutoff).best_fitting
        assert (got == best) if kept else (got is None), cutoff
    with pytest.raises(ValueError):
        search(model, cluster, inventory, heterogeneous=True, cutoff=1.0)


def test_found_cutoff_is_the_least_covered_step_time():
    """Found.cutoff(i, price): its point is covered and the next smaller float's is not, unless
    an earlier composition's tie covers it (analyse's duplicates rule)."""
    found = Found(ITERATIONS)
    fake = dataclasses.make_dataclass("R", ["status", "train_time_h", "train_cost_usd"])
    found.add(3, fake("ok", 10.0, 100.0))
    found.add(5, fake("ok", 20.0, 50.0))
    found.add(6, fake("ok", 30.0, 60.0))  # covered by the point of 5: dropped
    assert [p[2] for p in found.points] == [3, 5]
    for index, price in ((4, 10.0), (4, 2.5), (1, 10.0), (2, 5.0)):
        cut = found.cutoff(index, price)
        assert found.covers(index, cut, price) and not found.covers(index, math.nextafter(cut, 0), price)
    assert found.cutoff(0, 1.0) < math.inf and not found.covers(4, 0.0, 1.0)


def test_pruned_output_does_not_depend_on_workers():
    model, cluster = load_model("bert"), _catalog(1)
    comps = compositions({"a100": 2, "a10": 2, "a10x": 1})
    one = _sweep(model, cluster, comps, prune=True, round_size=2)
    two = _sweep(model, cluster, comps, prune=True, round_size=2, workers=2)
    assert _rows(one, ["a100", "a10", "a10x"]) == _rows(two, ["a100", "a10", "a10x"])


# ============================================================================ buyer limits
def test_limits_leave_compositions_out():
    cluster = load_cluster("fasop-paper")  # 4 GPUs a node; a100 $32.7726/h, 39.59 GiB; a10 $8.144/h, 22.2 GiB
    comps = compositions({"a100": 2, "a10": 3})
    prices = {"a100": 32.7726, "a10": 8.144}
    kept, out = within(comps, BuyerLimits(max_gpus=12), cluster, prices)
    assert all(c.num_nodes * 4 <= 12 for c in kept) and out == {"--max-gpus": len(comps) - len(kept)}
    kept, _ = within(comps, BuyerLimits(max_usd_per_hour=50), cluster, prices)
    assert {c.label for c in kept} == {"1xa10", "2xa10", "3xa10", "1xa100", "1xa100+1xa10", "1xa100+2xa10"}
    kept, _ = within(comps, BuyerLimits(min_gpu_memory_gib=30), cluster, prices)
    assert {c.label for c in kept} == {"1xa100", "2xa100"}
    kept, _ = within(comps, BuyerLimits(min_total_memory_gib=4 * 39.59 + 4 * 22.2), cluster, prices)
    assert "1xa100+1xa10" in {c.label for c in kept} and "1xa100" not in {c.label for c in kept}
    with pytest.raises(FasopError, match="--max-gpus"):
        within(comps, BuyerLimits(max_gpus=2), cluster, prices)
    with pytest.raises(FasopError, match="--max-usd-per-hour: must be a positive number"):
        BuyerLimits(max_usd_per_hour=-1.0)


def _argv(prefix, max_nodes="a100=2,a10=2", *extra):
    return ["pareto", "--model", str(shipped_folder("model_specs") / "bert.yaml"), "--cluster",
            str(shipped_folder("cluster_specs") / "fasop-paper.yaml"), "--max-nodes", max_nodes, "--iterations",
            str(ITERATIONS), "--out-prefix", str(prefix), "--no-progress", *extra]


def test_cli_limits_note_and_rows(tmp_path, capsys):
    prefix = tmp_path / "bert"
    assert main(_argv(prefix, "a100=2,a10=2", "--max-gpus", "12", "--workers", "1")) == 0
    captured = capsys.readouterr()
    assert "note: 1 of 8 compositions outside the limits were not searched (--max-gpus: 1)" in captured.err
    assert "2xa100+2xa10" not in (tmp_path / "bert_pareto.csv").read_text()


# ============================================================================ resume
def _full_bytes(tmp_path, extra=()):
    prefix = tmp_path / "full" / "bert"
    assert main(_argv(prefix, "a100=2,a10=3", "--round-size", "2", "--workers", "1", *extra)) == 0
    return prefix.with_name("bert_pareto.csv").read_bytes()


@pytest.mark.parametrize("k", [1, 4])
def test_resume_after_ctrl_c_gives_the_same_bytes(tmp_path, capsys, monkeypatch, k):
    want = _full_bytes(tmp_path)
    calls, real = [], fasop.pareto.sweep.search

    def interrupting(*args, **kwargs):
        calls.append(1)
        if len(calls) > k:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(fasop.pareto.sweep, "search", interrupting)
    prefix = tmp_path / "cut" / "bert"
    argv = _argv(prefix, "a100=2,a10=3", "--round-size", "2", "--workers", "1")
    assert main(argv) == 130
    assert "rerun with --resume" in capsys.readouterr().err
    assert main(argv) == 2  # a checkpoint is there: not overwritten without --resume
    assert "add --resume to continue it" in capsys.readouterr().err
    monkeypatch.setattr(fasop.pareto.sweep, "search", real)
    assert main(argv + ["--resume"]) == 0
    assert f"note: --resume: {k} compositions taken from the checkpoint" in capsys.readouterr().err
    assert prefix.with_name("bert_pareto.csv").read_bytes() == want
    assert not prefix.with_name("bert_pareto.checkpoint").exists()


def test_resume_refuses_a_checkpoint_of_other_inputs(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(fasop.pareto.sweep, "search", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt))
    prefix = tmp_path / "bert"
    checkpoint = prefix.with_name("bert_pareto.checkpoint")
    checkpoint.write_text(f'{{"fasop_checkpoint": {VERSION}, "fingerprint": "other"}}\n')
    assert main(_argv(prefix, "a100=1,a10=1", "--resume")) == 2
    err = capsys.readouterr().err
    assert err.startswith("fasop: error: --resume: ") and "other inputs" in err and err.count("\n") == 1


def test_resume_after_kill_9_at_random_points(tmp_path):
    """kill -9 of the whole process group at random moments of the run, then --resume until it
    finishes: the CSV is the uninterrupted one, byte for byte (the checkpoint's last line may be
    cut short)."""
    env = dict(os.environ, PYTHONPATH=str(REPO))

    def command(folder: str, *extra: str) -> list[str]:
        return [sys.executable, "-m", "fasop", *_argv(tmp_path / folder / "bert", "a100=3,a10=4", "--round-size", "2",
                                                      "--workers", "2", *extra)]

    subprocess.run(command("full"), cwd=tmp_path, env=env, check=True, stdout=subprocess.DEVNULL)
    want = (tmp_path / "full" / "bert_pareto.csv").read_bytes()
    rng = random.Random(19)
    checkpoint = tmp_path / "k" / "bert_pareto.checkpoint"
    kills = []
    for attempt in range(4):  # three kills at random moments of the sweep, then a run to the end
        process = subprocess.Popen(command("k", *(["--resume"] if attempt else [])), cwd=tmp_path, env=env,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        target = _records(checkpoint) + rng.randint(1, 4)
        while attempt < 3 and process.poll() is None and _records(checkpoint) < target:
            time.sleep(0.005)
        if process.poll() is None and attempt < 3:
            time.sleep(rng.uniform(0, 0.05))
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            kills.append(_records(checkpoint))
            continue
        assert process.wait(timeout=600) == 0, process.stderr.read()
        break
    assert (tmp_path / "k" / "bert_pareto.csv").read_bytes() == want
    assert not checkpoint.exists()
    assert kills and all(k > 0 for k in kills), kills  # killed mid-sweep, after some compositions


def _records(checkpoint) -> int:
    """Whole records in a checkpoint (lines after the header)."""
    return max(0, checkpoint.read_bytes().count(b"\n") - 1) if checkpoint.exists() else 0


def test_a_dead_worker_process_is_replaced(tmp_path, capsys, monkeypatch):
    """A worker process killed while it searches (out of memory, say): its composition runs
    again on a new pool, and the output is that of an undisturbed sweep."""
    want = _full_bytes(tmp_path, ("--workers", "2"))
    flag = tmp_path / "died"
    real = fasop.pareto.sweep.search

    def dying(*args, **kwargs):
        if not flag.exists():
            flag.write_text("")
            os.kill(os.getpid(), signal.SIGKILL)
        return real(*args, **kwargs)

    monkeypatch.setattr(fasop.pareto.sweep, "search", dying)
    prefix = tmp_path / "dead" / "bert"
    assert main(_argv(prefix, "a100=2,a10=3", "--round-size", "2", "--workers", "2")) == 0
    assert flag.exists()
    assert prefix.with_name("bert_pareto.csv").read_bytes() == want


# ============================================================================ fasop search defaults
def test_search_default_keeps_the_exact_best_plans_past_the_plan_limit(tmp_path, capsys, monkeypatch):
    """Past AUTO_TOP_PLANS plans, `fasop search` without --top keeps the AUTO_TOP fastest that
    fit, found by branch and bound over node orders, and says so: they are the fastest fitting
    rows of --every-plan (the exhaustive search), in the same order, cell for cell but the rank."""
    import fasop.search.engine as search_module

    base = ["search", "--model", "gpt2xl-scaled", "--cluster", "mixed-64", "--nodes", "h100=1,a100_80gb=1,l4=2",
            "--heterogeneous", "--no-progress"]
    monkeypatch.setattr(search_module, "AUTO_TOP_PLANS", 100)
    monkeypatch.setattr(search_module, "TREE_ORDERS", 3)  # 12 orders: by the order tree
    assert main(base + ["--out", str(tmp_path / "auto.csv")]) == 0
    out = capsys.readouterr().out
    assert "more than 100: kept the 5 fastest that fit, found exactly by branch and bound" in out
    assert main(base + ["--every-plan", "--out", str(tmp_path / "all.csv")]) == 0
    assert "kept the" not in capsys.readouterr().out

    def rows(name):
        import csv

        with open(tmp_path / name, newline="") as fh:
            return [{k: v for k, v in r.items() if k != "rank"} for r in csv.DictReader(fh)]

    every = [r for r in rows("all.csv") if r["is_oom"] == "False"]
    assert len(every) > 5 and rows("auto.csv") == every[:5]
    monkeypatch.setattr(search_module, "AUTO_TOP_PLANS", 10**9)  # under the limit: every plan, as before
    assert main(base + ["--out", str(tmp_path / "under.csv")]) == 0
    assert (tmp_path / "under.csv").read_bytes() == (tmp_path / "all.csv").read_bytes()
