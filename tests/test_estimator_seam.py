"""The estimator seam: a closed-form toy estimator, registered here, runs through `fasop search`
(listing, `--top`, `--placements all`) and `fasop pareto` without any FASOP code knowing it.

The toy's model (hand-checkable): every entry of the layer list costs LAYER_S x mbs / tp seconds
(forward + backward of one micro-batch) on a node with a private bus, twice that on a shared one
(`intra_node_shared`); a stage runs at its slowest node; the list is split as evenly as it goes,
earlier stages taking the extra entry; pipeline = (m + pp - 1) x the slowest stage (GPipe's
closed form); step = pipeline + DP_S x (dp - 1) / dp. A stage needs BYTES_PER_ENTRY / tp bytes per
GPU of each entry it holds and is out of memory past its nodes' least limit.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from fasop.cli.command import main
from fasop.core.errors import SpecError
from fasop.costs.estimate import Estimate
from fasop.costs.memory import MemoryEstimate
from fasop.estimators import Estimator, make_estimator, names, register, unregister
from fasop.plans.plan import Plan
from fasop.search import engine as search_module
from fasop.specs.files import shipped_folder
from fasop.specs.load import load_cluster, load_model
from fasop.specs.types import GIB

TOY = "toy-closed-form"
LAYER_S = 1e-3
DP_S = 0.5
BYTES_PER_ENTRY = 1.5 * GIB
REPO = Path(__file__).resolve().parent.parent


class ToyEstimator:
    def __init__(self, model, cluster, inventory, **options):
        self.model, self.cluster, self.inventory = model, cluster, tuple(inventory)
        self.usd_per_s = sum(n.usd_per_hour for n in self.inventory) / 3600

    def tp_degrees(self):
        return (1, 2, 4)

    def _stages(self, plan: Plan):
        """(entries per stage, slowest node per stage, least memory limit per stage)."""
        n, pp = len(self.model.layer_kinds), plan.pp
        split = tuple(n // pp + (i < n % pp) for i in range(pp))
        nodes = [[plan.placement[q] for q in span] for span in plan.stage_node_indices]
        slowest = tuple(next((x for x in group if x.intra_node_shared), group[0]) for group in nodes)
        limits = tuple(min(x.memory_limit_bytes for x in group) for group in nodes)
        return split, slowest, limits

    def signature(self, plan):
        split, slowest, limits = self._stages(plan)
        return plan.tp, plan.dp, plan.pp, plan.mbs, tuple(x.intra_node_shared for x in slowest), limits

    def estimate(self, plan):
        split, slowest, limits = self._stages(plan)
        layer = LAYER_S * plan.mbs / plan.tp
        compute = tuple(k * layer * (2 if x.intra_node_shared else 1) for k, x in zip(split, slowest))
        pipeline = (plan.num_microbatches + plan.pp - 1) * max(compute)
        dp = DP_S * (plan.dp - 1) / plan.dp
        step = pipeline + dp
        stage_bytes = tuple(k * BYTES_PER_ENTRY / plan.tp for k in split)
        oom = any(b > limit for b, limit in zip(stage_bytes, limits))
        memory = MemoryEstimate(stage_bytes=stage_bytes, stage_zero_bytes=stage_bytes, is_oom=oom,
                                oom_gpumem_gib=max(stage_bytes) / GIB, is_zero_oom=oom,
                                zero_oom_gpumem_gib=max(stage_bytes) / GIB)
        return Estimate(plan=plan, partition=split, stage_node_types=slowest, stage_compute_s=compute,
                        p2p_s=(0.0,) * (plan.pp - 1), stage_end_s=(pipeline,) * plan.pp, pipeline_time_s=pipeline,
                        dp_allreduce_s=dp, embedding_allreduce_s=0.0, step_time_s=step, memory=memory,
                        usd_per_step=self.usd_per_s * step, partitioner="even")

    def estimate_many(self, plans, progress=None):
        return [self.estimate(p) for p in plans]

    def estimate_below(self, plan, cutoff):
        e = self.estimate(plan)
        return None if e.memory.is_oom or not e.step_time_s <= cutoff else e

    def lower_bound(self, plan, above=float("inf")):
        return self.estimate(plan).step_time_s

    def quick_bound(self, plan):  # every node at the fast pace
        pp, n = plan.pp, len(self.model.layer_kinds)
        return (plan.num_microbatches + pp - 1) * -(-n // pp) * LAYER_S * plan.mbs / plan.tp


@pytest.fixture(autouse=True)
def toy():
    register(TOY)(ToyEstimator)
    yield
    unregister(TOY)


@pytest.fixture
def spec(tmp_path) -> str:
    """fasop-paper's cluster with `estimator: toy-closed-form`."""
    text = (shipped_folder("cluster_specs") / "fasop-paper.yaml").read_text()
    path = tmp_path / "toy.yaml"
    path.write_text(text.replace("estimator: fasop-2024", f"estimator: {TOY}"))
    return str(path)


def _rows(path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def _search(spec, tmp_path, name, *flags) -> list[dict]:
    out = tmp_path / f"{name}.csv"
    assert main(["search", "--model", "bert", "--cluster", spec, "--no-progress", "--out", str(out), *flags]) == 0
    return _rows(out)


def test_the_toy_is_an_estimator_and_registered():
    assert TOY in names() and "fasop-2024" in names()
    model, cluster = load_model("bert"), load_cluster("fasop-paper")
    assert isinstance(make_estimator(model, cluster, list(cluster.node_types.values())), Estimator)


def test_search_ranks_the_toys_closed_form(spec, tmp_path):
    rows = _search(spec, tmp_path, "all", "--nodes", "a100=1,a10=2", "--heterogeneous")
    model = load_model("bert")
    n = len(model.layer_kinds)
    assert rows and all(r["partition_method"] == "even" for r in rows)
    for r in rows:  # each row's step time from its own columns, by hand
        tp, dp, pp, mbs = (int(r[k]) for k in ("tp", "dp", "pp", "mbs"))
        m = model.global_batch_size // (dp * mbs)
        split = [int(k) for k in r["partition"].split("-")]
        assert split == [n // pp + (i < n % pp) for i in range(pp)]
        slowest = max(k * (2 if gpu == "A10" else 1) for k, gpu in zip(split, r["stage_gpu_types"].split("-")))
        step = (m + pp - 1) * slowest * LAYER_S * mbs / tp + DP_S * (dp - 1) / dp
        assert float(r["step_time_s"]) == pytest.approx(step, rel=1e-12)
    steps = [float(r["step_time_s"]) for r in rows]
    assert steps == sorted(steps)


def test_top_keeps_the_fastest_that_fit(spec, tmp_path):
    every = _search(spec, tmp_path, "all", "--nodes", "a100=1,a10=2", "--heterogeneous")
    top = _search(spec, tmp_path, "top", "--nodes", "a100=1,a10=2", "--heterogeneous", "--top", "4")
    fitting = [r for r in every if r["is_oom"] == "False"]
    assert [r["step_time_s"] for r in top] == [r["step_time_s"] for r in fitting[:4]]


def test_all_placements_without_prefix_bounds_are_listed(spec, tmp_path, monkeypatch):
    """The toy has no `prefix_bounds`: past TREE_ORDERS its orders are listed (same top-K as
    listing them); past MAX_ORDERS the search is refused, naming the estimator."""
    monkeypatch.setattr(search_module, "TREE_ORDERS", 2)
    flags = ["--nodes", "a100=2,a10=2", "--heterogeneous", "--placements", "all"]
    every = _search(spec, tmp_path, "all", *flags)
    top = _search(spec, tmp_path, "top", *flags, "--top", "3")
    fitting = [r for r in every if r["is_oom"] == "False"]
    assert [(r["step_time_s"], r["node_placement"]) for r in top] == \
           [(r["step_time_s"], r["node_placement"]) for r in fitting[:3]]
    monkeypatch.setattr(search_module, "MAX_ORDERS", 3)
    with pytest.raises(Exception) as refused:
        search_module.search(load_model("bert"), load_cluster(spec), list(load_cluster(spec).node_types.values()) * 2,
                             heterogeneous=True, top=3)
    assert TOY in str(refused.value) and "--placements grouped or cyclic" in str(refused.value)


def test_pareto_runs_on_the_toy(spec, tmp_path):
    prefix = tmp_path / "toy"
    assert main(["pareto", "--model", "bert", "--cluster", spec, "--max-nodes", "a100=1,a10=2", "--iterations", "1000",
                 "--out-prefix", str(prefix), "--no-progress", "--workers", "1"]) == 0
    rows = _rows(f"{prefix}_pareto.csv")
    assert any(r["on_frontier"] == "True" for r in rows)
    for r in rows:  # each composition's best plan is the best of its own search
        if r["status"] != "ok":
            continue
        nodes = ",".join(f"{k}={r[f'num_nodes_{k}']}" for k in ("a100", "a10") if int(r[f"num_nodes_{k}"]))
        best = _search(spec, tmp_path, "one", "--nodes", nodes, "--heterogeneous", "--placements", "cyclic",
                       "--top", "1")
        assert r["step_time_s"] == best[0]["step_time_s"]


def test_an_unknown_estimator_is_one_line_naming_file_key_and_value(spec, tmp_path, capsys):
    Path(spec).write_text(Path(spec).read_text().replace(TOY, "no-such-model"))
    assert main(["search", "--model", "bert", "--cluster", spec, "--nodes", "a10=1", "--no-progress",
                 "--out", str(tmp_path / "x.csv")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"{spec}: estimator: unknown estimator 'no-such-model'" in err
    assert not (tmp_path / "x.csv").exists()
    with pytest.raises(SpecError):
        make_estimator(load_model("bert"), load_cluster(spec), [])


def test_explain_shows_what_an_estimate_without_parts_states(spec, tmp_path, capsys):
    """The toy states no `parts` and no `schedule_of`: `fasop explain` breaks its step down as
    the Estimate's contract says (latest stage end + DP all-reduce + embedding all-reduce), shows
    each stage's memory as a total against its node's limit, and says why there is no timeline."""
    rows = _search(spec, tmp_path, "explained", "--nodes", "a100=1,a10=2", "--heterogeneous")
    capsys.readouterr()
    assert main(["explain", "--from", str(tmp_path / "explained.csv"), "--model", "bert", "--cluster", spec,
                 "--rank", "1", "--json"]) == 0
    x = json.loads(capsys.readouterr().out)
    row = rows[0]
    dp = int(row["dp"])
    assert [k for k, _ in x["step_parts"]] == [f"stage {x['last_stage']}'s end", "DP all-reduce",
                                                 "embedding all-reduce"]
    assert x["step_parts"][1][1] == pytest.approx(DP_S * (dp - 1) / dp, rel=1e-12)
    assert sum(v for _, v in x["step_parts"]) == pytest.approx(float(row["step_time_s"]), rel=1e-12)
    assert "no schedule_of" in x["schedule_note"]
    split = [int(k) for k in row["partition"].split("-")]
    for s, entries in zip(x["stages"], split):
        assert s["weights_bytes"] is None and s["overhead_factor"] == 1.0
        assert s["memory_bytes"] == pytest.approx(entries * BYTES_PER_ENTRY / int(row["tp"]), rel=1e-12)
