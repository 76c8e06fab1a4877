"""A cluster whose `analytic:` section states MoE software (`moe_node_dedup`: the flex dispatcher's once-per-node
dispatch; `ep_overlap`: Megatron-Core's EP A2A overlap) is estimated with it, so its exports launch it: Megatron-LM's
`--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend hybridep` and `--overlap-moe-expert-parallel-comm`
where Megatron-Core runs the overlap (transformer_config.py's asserts), a warning and no credit where it refuses it.
Before, every export said `alltoall` and no overlap: a plan 10 % slower than estimated (Qwen3-30B-A3B on 4 GB200 trays)."""

from __future__ import annotations

import csv
import re
from dataclasses import replace
from pathlib import Path

import pytest

from fasop.cli.command import main
from fasop.estimators.analytic import parallel as P
from fasop.estimators.analytic.layers import Recipe, Workload
from fasop.specs.catalog import default_params
from fasop.specs.architecture import Architecture, MoE

DATA = Path(__file__).parent / "data"
STOCK, HYBRIDEP = DATA / "gb200_nvl72_cluster.yaml", DATA / "gb200_nvl72_hybridep_cluster.yaml"
SEARCH = ["search", "--model", "qwen3-30b-a3b", "--nodes", "gb200=4", "--no-progress"]


def _search(tmp_path, capsys, cluster: Path, out: str, *flags: str) -> list[dict]:
    assert main([*SEARCH, "--cluster", str(cluster), "--out", str(tmp_path / out), *flags]) == 0
    capsys.readouterr()
    with open(tmp_path / out, newline="") as f:
        return list(csv.DictReader(f))


def _export(tmp_path, capsys, out: str, target: str, *row: str) -> tuple[str, str]:
    assert main(["export", "--from", str(tmp_path / out), "--target", target, *row]) == 0
    captured = capsys.readouterr()
    return captured.out, captured.err


def test_the_megatron_export_launches_the_moe_software_the_plan_was_estimated_with(tmp_path, capsys):
    (row,) = _search(tmp_path, capsys, HYBRIDEP, "h.csv", "--top", "1")
    assert int(row["ep"]) > 1
    text, _ = _export(tmp_path, capsys, "h.csv", "megatron")
    assert "--moe-token-dispatcher-type flex" in text and "--moe-flex-dispatcher-backend hybridep" in text
    assert "--overlap-moe-expert-parallel-comm" in text and "alltoall" not in text
    # HybridEP on the SMs the estimate left it (Megatron-Bridge's 32), the fused permutation the estimate costed
    assert "--moe-flex-dispatcher-num-sms 32" in text and "--moe-permute-fusion" in text
    # re-estimated as exported: the cluster's analytic section read back from the flags scores the same plan alike
    dedup = "--moe-token-dispatcher-type flex" in text
    overlap = 1.0 if "--overlap-moe-expert-parallel-comm" in text else 0.0
    sms = int(re.search(r"--moe-flex-dispatcher-num-sms (\d+)", text).group(1)) if dedup else 0
    fusion = "--moe-permute-fusion" in text
    spec = STOCK.read_text().replace("estimator: analytic\n", f"estimator: analytic\nanalytic:\n  moe_node_dedup: "
                                     f"{str(dedup).lower()}\n  ep_overlap: {overlap}\n", 1)
    assert (sms, fusion) == (32, True)   # what a cluster that turns the flex dispatcher on estimates (analytic.md)
    (tmp_path / "read_back.yaml").write_text(spec)
    again = _search(tmp_path, capsys, tmp_path / "read_back.yaml", "a.csv", "--ep", row["ep"], "--every-plan")
    same = [r for r in again if all(r[k] == row[k] for k in ("tp", "dp", "pp", "mbs", "ep", "partition"))]
    assert [r["step_time_s"] for r in same] == [row["step_time_s"]]
    # the stock rack (alltoall, no overlap) scores that plan slower: what the alltoall export launched
    stock = _search(tmp_path, capsys, STOCK, "s.csv", "--ep", row["ep"], "--every-plan")
    (plain,) = [r for r in stock if all(r[k] == row[k] for k in ("tp", "dp", "pp", "mbs", "ep", "partition"))]
    assert float(plain["step_time_s"]) > 1.05 * float(row["step_time_s"])
    text, _ = _export(tmp_path, capsys, "s.csv", "megatron", "--row", str(stock.index(plain) + 1))
    args = text.split("MODEL_PARALLEL_ARGS=(")[1]
    assert "--moe-token-dispatcher-type alltoall" in args and "overlap-moe" not in text and "flex" not in args


def test_a_plan_megatron_refuses_the_overlap_for_is_exported_without_it(tmp_path, capsys):
    # pp > 1 without virtual stages: Megatron-Core asserts virtual_pipeline_model_parallel_size under the overlap
    rows = _search(tmp_path, capsys, HYBRIDEP, "e.csv", "--every-plan", "--virtual-stages", "1")
    k = next(i for i, r in enumerate(rows) if int(r["pp"]) > 1 and int(r["ep"]) > 1 and r["is_oom"] == "False")
    text, err = _export(tmp_path, capsys, "e.csv", "megatron", "--row", str(k + 1))
    args = text.split("MODEL_PARALLEL_ARGS=(")[1]
    assert "--overlap-moe-expert-parallel-comm" not in args and "--moe-token-dispatcher-type flex" in args
    assert "refuses --overlap-moe-expert-parallel-comm with a pipeline without virtual stages" in err


@pytest.mark.parametrize("model, flags, why", [
    ("qwen3-30b-a3b", ["--recompute", "full"], "full recompute"),
    ("qwen3-30b-a3b", ["--recompute", "selective:moe"], "moe recompute"),
    ("nemotron-3-nano-30b-a3b", [], "a hybrid Mamba model"),              # HybridModel builds no schedule plan
    ("qwen3-30b-a3b", ["--zero", "3", "--cuda-graphs", "attn,moe_router"],  # mcore_fsdp_adapter.py
     "Megatron-FSDP and per-layer CUDA graphs"),
])
def test_where_megatron_refuses_the_overlap_the_estimate_does_not_count_it(tmp_path, capsys, model, flags, why):
    # the HybridEP rack with the overlap scores the plan as the same rack without it, and its export says why
    off = tmp_path / "off.yaml"
    off.write_text(HYBRIDEP.read_text().replace("ep_overlap: 1.0", "ep_overlap: 0.0"))
    plan = ["--model", model, "--ep", "8", "--top", "1", *flags]
    (on_row,) = _search(tmp_path, capsys, HYBRIDEP, "on.csv", *plan)
    (off_row,) = _search(tmp_path, capsys, off, "off.csv", *plan)
    assert int(on_row["ep"]) == 8 and on_row["step_time_s"] == off_row["step_time_s"]
    text, err = _export(tmp_path, capsys, "on.csv", "megatron")
    assert f"refuses --overlap-moe-expert-parallel-comm with {why}" in err
    assert "--overlap-moe-expert-parallel-comm" not in text.split("MODEL_PARALLEL_ARGS=(")[1]


def test_torchtitan_export_says_what_it_cannot_launch(tmp_path, capsys):
    _search(tmp_path, capsys, HYBRIDEP, "h.csv", "--top", "1")
    text, err = _export(tmp_path, capsys, "h.csv", "torchtitan")
    assert "moe_node_dedup" in err and "HybridEPTokenDispatcher" in err and "ep_overlap" in err
    _search(tmp_path, capsys, STOCK, "s.csv", "--top", "1", "--ep", "8")
    _, err = _export(tmp_path, capsys, "s.csv", "torchtitan")
    assert "moe_node_dedup" not in err and "ep_overlap" not in err


def small_moe() -> Architecture:
    return Architecture(family="mixtral", num_layers=4, hidden_size=64, num_attention_heads=8, num_kv_heads=2,
                        head_dim=8, ffn_hidden_size=128, vocab_size=1000, gated_mlp=True, tied_embeddings=False,
                        linear_bias=False, norm="rmsnorm", position="rotary", dropout=False,
                        moe=MoE(num_experts=8, experts_per_token=2, expert_ffn_hidden_size=32))


@pytest.mark.parametrize("change", [
    {"recipe": Recipe(recompute="selective", recompute_modules=("moe",))},   # "disable moe in recompute_modules"
    {"mtp": 2},                                                               # "MTP supports at most one layer"
    {"recipe": Recipe(precision="fp32")},                                     # "only supported with bf16 or fp16"
    {"graphed": ("attn", "moe")},                                             # "CUDA graph scope on moe and mlp"
    {"graphed": ("mlp",)},
    {"recipe": Recipe(zero=3), "graphed": ("attn",)},                       # "1F1B overlap with FSDP ... per-layer"
])
def test_the_estimate_credits_no_overlap_megatron_refuses(change):
    # pp 1, 4 micro-batches: 3/4 of the passes paired; none where Megatron-Core asserts against the overlap
    params = default_params()
    graphed = change.pop("graphed", None)
    if graphed:
        params = replace(params, host=replace(params.host, graphed=graphed))
    base = dict(arch=small_moe(), seq=1024, mbs=1, tp=1, dp=8, pp=1, ep=8, num_microbatches=4, recipe=Recipe(),
                params=default_params())
    assert P.ep_overlap_paired_share(Workload(**base)) == 0.75
    assert P.ep_overlap_paired_share(Workload(**{**base, "params": params, **change})) == 0.0
    # a graphed scope Megatron allows beside the overlap (attn, the router) keeps it
    kept = replace(default_params(), host=replace(default_params().host, graphed=("attn", "moe_router")))
    assert P.ep_overlap_paired_share(Workload(**{**base, "params": kept})) == 0.75


def test_the_flex_backend_is_one_megatron_lm_takes():
    # the flags themselves are checked against Megatron-LM's parser by test_export_stock (its HybridEP plan);
    # the backend's value against TransformerConfig's Literal
    import subprocess
    repo = Path("/work/.mirror/NVIDIA+Megatron-LM/repo")
    if not repo.exists():
        pytest.skip("no Megatron-LM mirror")
    config = subprocess.run(["git", "-C", str(repo), "show", "HEAD:megatron/core/transformer/transformer_config.py"],
                            capture_output=True, text=True, check=True).stdout
    assert re.search(r"moe_flex_dispatcher_backend: Literal\[[^\]]*'hybridep'", config)
    assert re.search(r"moe_token_dispatcher_type: Literal\[[^\]]*'flex'", config)
