"""HSDP in the search (issue 29, item 2): the default tries FSDP also as HSDP (states sharded over
one node's or NVLink domain's ranks, replicated across them), the shard group's gathers then run
on NVLink and only the replicas' all-reduce crosses nodes; shard degrees by hand."""

from __future__ import annotations

import csv

import pytest

from fasop.cli.command import main
from fasop.estimators.analytic import cost as C
from fasop.estimators.analytic import groups as G
from fasop.estimators.analytic import hardware as H
from fasop.estimators.analytic.layers import Recipe, Workload
from fasop.estimators.analytic.recipes import parse_recipes
from fasop.plans.plan import Plan
from fasop.specs.catalog import default_params, find_gpu
from fasop.specs.types import NodeType


def _node(gpu: str, per_node: int, name: str = "n") -> NodeType:
    g = find_gpu(gpu)
    return NodeType(name=name, instance="i", gpu=gpu, gpus_per_node=per_node, memory_limit_bytes=g.memory_bytes,
                    intra_node_bytes_per_s=g.intra_node_bytes_per_s, inter_node_bytes_per_s=400e9,
                    intra_node_shared=False, usd_per_hour=0.0, spot_usd_per_hour=None)


@pytest.mark.parametrize("options, hsdp, stages", [
    ({}, (False,), (3,)),                                   # default zero 1: no HSDP
    ({"zero": (3,)}, (False, True), (3,)),                   # FSDP allowed: also as HSDP
    ({"zero": (1, 3)}, (False, True), (3,)),                 # ... with ZeRO 3 only
    ({"zero": (3,), "hsdp": (False,)}, (False,), (1, 2, 3)),  # --hsdp off: never
    ({"zero": (1,), "hsdp": (True,)}, (True,), (1, 2, 3)),    # --hsdp on: with any ZeRO stage
])
def test_default_tries_hsdp_where_fsdp_is_allowed(options, hsdp, stages):
    r = parse_recipes(options)
    assert r["hsdp"] == hsdp and r["hsdp_stages"] == stages


def test_shard_degree_by_hand():
    nodes = (_node("H100-SXM", 8),) * 4
    plan = lambda tp, cp, dp, pp=1: Plan(tp=tp, dp=dp, pp=pp, mbs=1, global_batch_size=dp * 4,  # noqa: E731
                                         placement=nodes, cp=cp)
    assert G.dp_shard(plan(1, 1, 32), False) == 32
    assert G.dp_shard(plan(1, 1, 32), True) == 8          # 8 GPUs a node
    assert G.dp_shard(plan(2, 2, 8), True) == 2           # tp 2 x cp 2 x 2 = a node
    assert G.dp_shard(plan(8, 2, 2), True) == 2           # cp spans nodes: no node-sized group, FSDP
    # GB200 trays of 4 in NVL72 domains: the most DP ranks whose tp x cp x d divides 72
    trays = (_node("GB200", 4),) * 16
    tray = lambda tp, dp: Plan(tp=tp, dp=dp, pp=1, mbs=1, global_batch_size=dp, placement=trays)  # noqa: E731
    assert G.dp_shard(tray(1, 64), True) == 4                     # without the domain: one tray
    assert G.dp_shard(tray(1, 64), True, domain_gpus=72) == 8     # 8 | 72, 16 does not
    assert G.dp_shard(tray(4, 16), True, domain_gpus=72) == 2     # 4 x 2 = 8 | 72; 4 x 4 = 16 does not


def test_hsdp_gathers_on_nvlink_and_all_reduces_across_nodes():
    """Two 8-GPU H100 nodes, tp 1, dp 16: the stage's DP link is the NIC (shared by min(8, tp) = 1);
    HSDP's shard group (8 ranks) is one node: NVLink; its replica rings (8 a node) share the NIC."""
    params = default_params()
    gpu = find_gpu("H100-SXM")
    (stage,) = H.stage_hardware(1, 16, 1, (_node("H100-SXM", 8),) * 2, (gpu,) * 2, params)
    nvlink = H.Link(stage.groups.intra_bytes_per_s, stage.groups.intra_latency_s)
    assert stage.dp_link.bytes_per_s < nvlink.bytes_per_s
    shard, replica = H.shard_links(stage, 8)
    assert shard == nvlink
    assert replica.bytes_per_s == pytest.approx(stage.groups.node_bytes_per_s / 8)
    assert H.shard_links(stage, 16) == (stage.dp_link, stage.dp_link)   # a block of two nodes: plain FSDP
    # the gradient reduction by hand: reduce-scatter of G bytes over 8 on NVLink + all-reduce of G/8 over 2
    w = Workload(arch=None, seq=1024, mbs=1, tp=1, dp=16, pp=1, num_microbatches=4, recipe=Recipe(zero=3, hsdp=True),
                 params=params, shard=8)
    assert C.state_links(w, stage) == (shard, replica)
    grad = 1e9 * params.gradient_reduce_bytes["bf16"]
    buckets = -(-grad // params.gradient_bucket_bytes)
    expected = 7 / 8 * grad / shard.bytes_per_s + (7 + buckets - 1) * shard.latency_s \
        + 2 * (1 / 2) * (grad / 8) / replica.bytes_per_s + 2 * replica.latency_s
    assert C.dp_sync_s(w, 1e9, *C.state_links(w, stage)) == pytest.approx(expected)


def _rows(tmp_path, *flags):
    out = tmp_path / f"o{len(flags)}.csv"
    assert main(["search", "--model", "llama-3-8b", "--cluster", "aws", "--nodes", "p5=4", "--no-progress",
                 "--top", "5", "--out", str(out), *flags]) == 0
    with open(out) as f:
        return list(csv.DictReader(f))


def test_default_fsdp_search_finds_hsdp_plans_at_least_as_fast(tmp_path):
    default = _rows(tmp_path, "--zero", "3")
    fsdp = _rows(tmp_path, "--zero", "3", "--hsdp", "off")
    assert all(r["dp_replicate"] == "1" for r in fsdp)
    assert any(int(r["dp_replicate"]) > 1 for r in default)
    # HSDP only added: the best plan is never slower
    assert float(default[0]["step_time_s"]) <= float(fsdp[0]["step_time_s"])
    for r in default:
        assert int(r["dp_shard"]) * int(r["dp_replicate"]) == int(r["dp"])


@pytest.mark.parametrize("ep, moe, admitted", [(8, True, True), (16, True, False), (8, False, True)])
def test_hsdp_replicas_must_divide_the_experts_data_parallel_group(ep, moe, admitted):
    """16 DP ranks on two 8-GPU nodes: HSDP shards over a node's 8, 2 replicas. Megatron-Core asserts the
    expert data-parallel size (tp x cp x dp / (ep x etp): 2 at ep 8, 1 at ep 16) divisible by them."""
    import types

    node = _node("H100-SXM", 8)
    plan = Plan(tp=1, dp=16, pp=1, mbs=1, global_batch_size=64, placement=(node, node), ep=ep)
    arch = types.SimpleNamespace(moe=object() if moe else None)
    assert G.dp_shard(plan, True) == 8
    assert G.hsdp_flags(plan, arch) == (True, admitted)


def test_an_moe_models_tp_plans_keep_sequence_parallelism(tmp_path, capsys, monkeypatch):
    """Megatron-Core's MoE layer refuses tp > 1 without sequence parallelism: --sequence-parallel off
    leaves an MoE model's tp > 1 plans with it, and says so."""
    monkeypatch.chdir(tmp_path)
    assert main(["search", "--model", "mixtral-8x7b", "--cluster", "aws", "--nodes", "p5=2", "--sequence-parallel", "off",
                 "--every-plan", "--no-progress", "--out", "m.csv"]) == 0
    assert "plans with tp > 1 keep sequence parallelism" in capsys.readouterr().out
    rows = list(csv.DictReader(open("m.csv")))
    assert {r["sequence_parallel"] for r in rows if r["tp"] != "1"} == {"True"}
    assert {r["sequence_parallel"] for r in rows if r["tp"] == "1"} == {"False"}
