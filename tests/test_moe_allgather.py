"""Megatron-Core's allgather token dispatcher (its default `moe_token_dispatcher_type`): every rank of the
ep x etp group all-gathers the group's tokens, keeps those of its local experts, and reduce-scatters the
unpermuted outputs back (MoEAllGatherTokenDispatcher, token_dispatcher.py @d98e8a6). Volumes, seconds and
memory by hand, and a `fasop validate` row that names it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from fasop.core.errors import FasopError
from fasop.estimators.analytic import memory as M
from fasop.estimators.analytic import moe_kernels as MK
from fasop.estimators.analytic import parallel as P
from fasop.estimators.analytic.layers import Recipe, Workload
from fasop.report.validate import validate
from fasop.specs.architecture import MoE, Architecture
from fasop.specs.catalog import default_params, find_gpu

LINKS = P.GroupLinks(intra_bytes_per_s=100e9, node_bytes_per_s=80e9, intra_latency_s=0.0, inter_latency_s=0.0,
                     gpus_per_node=8)


def small_moe(k: int = 2) -> Architecture:
    """4 layers, h 64, 8 heads (2 KV), 8 experts top-k of width 32, gated."""
    return Architecture(family="mixtral", num_layers=4, hidden_size=64, num_attention_heads=8, num_kv_heads=2,
                        head_dim=8, ffn_hidden_size=128, vocab_size=1000, gated_mlp=True, tied_embeddings=False,
                        linear_bias=False, norm="rmsnorm", position="rotary", dropout=False,
                        moe=MoE(num_experts=8, experts_per_token=k, expert_ffn_hidden_size=32))


def workload(allgather: bool = True, k: int = 2, **kw) -> Workload:
    params = replace(default_params(), moe_allgather=allgather, **kw.pop("params", {}))
    base = dict(arch=small_moe(k), seq=4096, mbs=1, tp=1, dp=8, pp=1, ep=8, num_microbatches=4, recipe=Recipe(),
                params=params)
    return Workload(**{**base, **kw})


def test_allgather_volume_by_hand():
    # 1024 tokens of h 4096 in 2-byte values, 8 experts: the dispatch gathers the tokens (1024 x 4096 x 2),
    # their probabilities (1024 x 8 x 2) and routing map (1024 x 8 x 1); the combine scatters the outputs
    assert MK.allgather_bytes(1024, 4096, 8, 2) == (1024 * (8192 + 24), 1024 * 8192) == (8_413_184, 8_388_608)


def test_allgather_rings_over_the_ep_group_inside_a_node():
    # EP 8 in one node of 8: each collective is 7 ring steps over NVLink (100 GB/s), whatever top-k and
    # the imbalance: T = 4096 tokens, dispatch 4096 x (64 x 2 + 8 x 3) = 622,592 bytes a step, combine 524,288
    to, back = P.moe_alltoalls_s(workload(), LINKS)
    assert to == pytest.approx(7 * 622_592 / 100e9)
    assert back == pytest.approx(7 * 524_288 / 100e9)
    assert P.moe_alltoalls_s(workload(k=4, params={"moe_load_imbalance": 1.5}), LINKS) == (to, back)
    # the alltoall sends k copies of (ep-1)/ep of its tokens: 4096 x 2 x 128 x 7/8 = 917,504 bytes at once
    assert P.moe_alltoalls_s(workload(False), LINKS)[0] == pytest.approx(917_504 / 100e9)


def test_allgather_across_nodes_takes_the_nic_and_etp_joins_the_group():
    # EP 16 over two nodes of 8: 15 steps, each over the node's NIC (80 GB/s, one ring crosses it)
    to, back = P.moe_alltoalls_s(workload(dp=16, ep=16, arch=replace(small_moe(), moe=MoE(num_experts=16, experts_per_token=2, expert_ffn_hidden_size=32))), LINKS)
    assert to == pytest.approx(15 * 4096 * (128 + 16 * 3) / 80e9)
    assert back == pytest.approx(15 * 4096 * 128 / 80e9)
    # ETP 2 x EP 4: the group is the same 8 ranks (tp_ep), and no separate ETP all-gather is charged
    w, gpu = workload(ep=4, etp=2), find_gpu("H100-SXM")
    to, back = P.moe_alltoalls_s(w, LINKS)
    assert to == pytest.approx(7 * 622_592 / 100e9)
    share, compute = P.moe_layer_share(w.arch), P.expert_compute_s(w, gpu)
    bw = gpu.memory_bytes_per_s * gpu.memory_share(w.params)
    extra = 7 * 4096 * 64 * 2 / bw            # the unpermutation's rows for the group's every token
    fwd, bwd = P.moe_s(w, gpu, LINKS)
    assert fwd == pytest.approx(share * (compute + extra + to + back))
    assert bwd == pytest.approx(share * (2 * compute + extra + to + back))


def test_the_unpermutation_writes_the_gathered_shape():
    # free links: allgather - alltoall = the unpermutation's (n - 1) x T x h x B more rows each pass
    # (ep 8 of 8 experts: one local expert, so the alltoall sorts nothing)
    gpu = find_gpu("H100-SXM")
    ag, a2a = P.moe_s(workload(), gpu, P.FREE_LINKS), P.moe_s(workload(False), gpu, P.FREE_LINKS)
    extra = P.moe_layer_share(small_moe()) * 7 * 4096 * 64 * 2 / (
        gpu.memory_bytes_per_s * gpu.memory_share(default_params()))
    assert ag[0] - a2a[0] == pytest.approx(extra)
    assert ag[1] - a2a[1] == pytest.approx(extra)


def test_the_gathered_buffers_are_held_once_a_stage():
    # the gathered tokens and the unpermuted output, 8 x 4096 x 64 x 2 bytes each, once (not per layer)
    ag, a2a = M.stage_memory(workload(), 4, 0), M.stage_memory(workload(False), 4, 0)
    assert ag.activations - a2a.activations == pytest.approx(2 * 8 * 4096 * 64 * 2)
    assert (ag.weights, ag.gradients, ag.optimizer) == (a2a.weights, a2a.gradients, a2a.optimizer)


HEAD = ("name,model,gpu,num_gpus,tp,pp,cp,dp,ep,etp,zero,seq_len,global_batch_size,micro_batch_size,"
        "moe_dispatcher,ep_overlap,precision,recompute,measured_seconds_per_iter\n")


def _rows(tmp_path: Path, *rows: str) -> Path:
    (tmp_path / "r.csv").write_text(HEAD + "".join(rows))
    return tmp_path / "r.csv"


def test_a_validate_row_names_the_allgather_dispatcher(tmp_path):
    # Mixtral-8x7B EP 8 on 64 B200 (8 experts, top-2): gathering every rank's tokens moves 7 / 1.75 = 4x the
    # alltoall's bytes; the row says what it ran and is estimated so
    plan = "mixtral-8x7b,B200,64,1,1,1,64,8,1,1,4096,256,2"
    path = _rows(tmp_path, f"ag,{plan},allgather,,bf16,none,1\n", f"a2a,{plan},alltoall,,bf16,none,1\n",
                 f"AG,{plan},AllGather,0,bf16,none,1\n")
    t = {p.row["name"]: p.row["predicted_seconds_per_iter"] for p in validate(path).predictions}
    assert t["ag"] > t["a2a"]
    assert t["AG"] == t["ag"]


def test_allgather_with_ep_overlap_is_refused_and_the_recipes_overlap_dropped(tmp_path):
    plan = "mixtral-8x7b,GB200,64,1,1,1,64,8,1,1,4096,256,2"
    with pytest.raises(FasopError, match=r"line 2: ep_overlap: 1: .*alltoall or flex dispatcher only"):
        validate(_rows(tmp_path, f"x,{plan},allgather,1,bf16,none,1\n"))
    # GB200's MXFP8 MoE recipes run the overlap (gpus.yaml moe_software): an allgather row cannot have had it
    (p,) = validate(_rows(tmp_path, f"x,{plan},allgather,,mxfp8,none,1\n")).predictions
    assert "ep_overlap=0 (recipe)" in p.row["picked"]


def test_alltoall_seq_is_the_alltoall_without_permute_fusion(tmp_path):
    # Megatron-Core's alltoall before 0.9, kept as `alltoall_seq` until 0.13 (Megatron-LM 9e3adb5), which refused
    # permute fusion: estimated as the alltoall with the unfused permutation; a stated fusion is refused
    head = HEAD.replace("moe_dispatcher,", "moe_dispatcher,moe_permute_fusion,")
    plan = "mixtral-8x7b,H100,64,2,1,1,32,8,2,1,4096,256,1"
    (tmp_path / "r.csv").write_text(head + f"seq,{plan},alltoall_seq,,,bf16,none,1\n"
                                    + f"a2a,{plan},alltoall,0,,bf16,none,1\n" + f"fused,{plan},alltoall,1,,bf16,none,1\n")
    t = {p.row["name"]: p.row["predicted_seconds_per_iter"] for p in validate(tmp_path / "r.csv").predictions}
    assert t["seq"] == t["a2a"] > t["fused"]
    (tmp_path / "r.csv").write_text(head + f"seq,{plan},alltoall_seq,1,,bf16,none,1\n")
    with pytest.raises(FasopError, match=r"line 2: moe_permute_fusion: 1: .*alltoall_seq .*without permute fusion"):
        validate(tmp_path / "r.csv")
    (tmp_path / "r.csv").write_text(head + f"seq,{plan},alltoall_seq,,1,bf16,none,1\n")
    with pytest.raises(FasopError, match=r"ep_overlap: 1: .* not alltoall_seq"):
        validate(tmp_path / "r.csv")
