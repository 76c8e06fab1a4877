"""How many copies of a routed token the MoE dispatch sends, by routing and dispatcher, computed by hand;
PyTorch FSDP's state bytes per parameter; a validate row's `moe_routing` cell."""

import math
import random
from dataclasses import replace
from pathlib import Path

import pytest

from fasop.core.errors import FasopError
from fasop.estimators.analytic import memory as M
from fasop.estimators.analytic import parallel as P
from fasop.estimators.analytic.layers import Recipe, Workload
from fasop.estimators.analytic.moe_kernels import dispatch_copies
from fasop.report.validate import validate
from fasop.specs.architecture import gpt_architecture
from fasop.specs.catalog import default_params

DATA = Path(__file__).resolve().parent / "data"


def test_per_expert_copies_do_not_depend_on_routing():
    # alltoall: one copy per expert; top-8 of EP 16 on two nodes of 8: 8 x 7/16 inside, 8 x 8/16 across
    for routing in ("uniform", "round_robin"):
        assert dispatch_copies(8, 128, 16, 8, routing, False, False) == pytest.approx((3.5, 4.0))


def test_uniform_routing_deduplicated_by_hand():
    # a remote node holds one of the 8 experts with probability 1 - (1/2)^8; a rank of the 16, 1 - (15/16)^8
    inside, outside = dispatch_copies(8, 128, 16, 8, "uniform", True, True)
    assert outside == pytest.approx(1 - 0.5 ** 8)
    assert inside == pytest.approx(7 * (1 - (15 / 16) ** 8))
    # HybridEP (node dedup only) keeps one copy per expert inside the node
    assert dispatch_copies(8, 128, 16, 8, "uniform", True, False)[0] == pytest.approx(3.5)


def test_round_robin_routing_by_hand():
    # Qwen3-30B-A3B on EP 8 (one node): 128 experts, 16 a rank; token t takes experts 8t .. 8t+7 mod 128,
    # always one rank: DeepEP sends it to that rank only, 7 times in 8 not its own
    assert dispatch_copies(8, 128, 8, 8, "round_robin", True, True) == pytest.approx((7 / 8, 0.0))
    # DeepSeek-V3 on EP 64 over 8 nodes: 256 experts, 4 a rank; 8 neighbours span 2 ranks of one node:
    # across the network 7/8 copies (the node is another in 7 cases of 8), inside 2 x 7/64
    assert dispatch_copies(8, 256, 64, 8, "round_robin", True, True) == pytest.approx((2 * 7 / 64, 7 / 8))
    # top-3 of 8 experts on EP 4 (2 a rank): offsets 0,3,6,1,4,7,2,5 span 2,2,2,2,2,2,2,2 ranks
    # (experts 6,7,0 -> ranks 3, 0): two ranks a token, each another than the sender's in 3 of 4
    assert dispatch_copies(3, 8, 4, 4, "round_robin", True, True)[0] == pytest.approx(2 * 3 / 4)


def _counted(k, experts, ep, n_in):
    """The round-robin pattern counted token by token over one period: (ranks, domains) a token spans."""
    local, period = experts // ep, experts // math.gcd(k, experts)
    spans = [{(t * k + j) % experts // local for j in range(k)} for t in range(period)]
    return (sum(len(s) for s in spans) / period, sum(len({r // n_in for r in s}) for s in spans) / period)


def test_round_robin_closed_form_equals_the_pattern_counted():
    rng = random.Random(7)
    for _ in range(500):
        ep = rng.choice([1, 2, 4, 8, 16, 32, 64])
        experts = ep * rng.randint(1, 12)
        k, n_in = rng.randint(1, min(experts, 24)), rng.choice([d for d in (1, 2, 4, 8, 16) if ep % d == 0])
        ranks, domains = _counted(k, experts, ep, n_in)
        n = ep // n_in
        assert dispatch_copies(k, experts, ep, n_in, "round_robin", True, True) == pytest.approx(
            (ranks * (n_in - 1) / ep, domains * (n - 1) / n))
    # a config's expert count is bounded only by the width ceiling: the closed form needs no pass over it
    assert dispatch_copies(8, 1 << 26, 8, 8, "round_robin", True, True) == pytest.approx((7 / 8, 0.0))


def test_alltoall_spread_scales_each_link_by_its_copies():
    links = P.GroupLinks(intra_bytes_per_s=100.0, node_bytes_per_s=80.0, intra_latency_s=0.0,
                         inter_latency_s=0.0, gpus_per_node=8)
    # 1500 bytes for 8 copies over 15 peers: 700 inside, 800 across (10 a GPU's NIC share)
    plain = P.alltoall_s(1500.0, 16, 1, links, k=8)
    assert plain == pytest.approx(80.0)
    rr = P.alltoall_s(1500.0, 16, 1, links, 8, True, (128, "round_robin", True, 1, 1))
    # round robin on 16 ranks of 8 experts: one rank a token; inside 7/16 of a copy (700 x (7/16)/3.5),
    # across 8/16 (800 x 0.5/4)
    assert rr == pytest.approx(max(700 * (7 / 16) / 3.5 / 100, 800 * 0.5 / 4 / 10))


def _llama_fsdp(megatron_fsdp: bool, precision: str = "bf16") -> Workload:
    a = gpt_architecture(num_layers=2, hidden_size=64, num_attention_heads=8, vocab_size=100)
    params = replace(default_params(), megatron_fsdp=megatron_fsdp)
    return Workload(arch=a, mbs=1, seq=16, tp=1, dp=4, pp=1, num_microbatches=1,
                    recipe=Recipe(zero=3, precision=precision), params=params)


def test_torch_fsdp_keeps_sixteen_bytes_a_sharded_parameter():
    # PyTorch FSDP: fp32 parameter shard (the master), fp32 gradient, Adam's two moments: the 16-bit weight
    # exists only gathered; Megatron-FSDP keeps a 16-bit shard beside the master: 2 bytes more a parameter
    torch, megatron = _llama_fsdp(False), _llama_fsdp(True)
    assert M.torch_fsdp_master(torch) and not M.torch_fsdp_master(megatron)
    params = sum(M.stage_param_split(torch, 2, True, True))
    t, m = M.stage_memory(torch, 2, 0), M.stage_memory(megatron, 2, 0)
    assert t.optimizer == m.optimizer == pytest.approx(params * 12 / 4)
    assert t.gradients == m.gradients
    # the same gathered units either way; the root (embedding and head here) kept whole under PyTorch FSDP
    root = M.root_params(torch, 0)
    assert m.weights - t.weights == pytest.approx(params * 2 / 4 - root * 2 / 4)
    # an fp32 run's weights are its master: 4 bytes a sharded parameter either way
    assert not M.torch_fsdp_master(_llama_fsdp(False, "fp32"))


def test_validate_routing_cell(tmp_path):
    text = (DATA / "moe_automodel_h100.csv").read_text().replace("hf/", str(DATA / "hf") + "/")
    (tmp_path / "rr.csv").write_text(text)
    (tmp_path / "uniform.csv").write_text(text.replace(",round_robin,", ",uniform,"))
    (tmp_path / "bad.csv").write_text(text.replace(",round_robin,", ",roundrobin,", 1))
    rr, uniform = validate(tmp_path / "rr.csv"), validate(tmp_path / "uniform.csv")
    by = lambda r: {p.row["name"]: p.row["predicted_seconds_per_iter"] for p in r.predictions}
    # Qwen3-30B on one node: round robin sends a token to one rank, uniform to ~5 of the 8: faster
    name = "Qwen3 MoE 30B H100 8 BF16 FSDP2 EP8"
    assert by(rr)[name] < by(uniform)[name]
    with pytest.raises(FasopError, match=r"moe_routing: expected one of uniform, round_robin, got 'roundrobin'"):
        validate(tmp_path / "bad.csv")
