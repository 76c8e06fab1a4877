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
    # their probabilities (1024 x 8 x 2) and routing map (1024 x 8 x 1), three collectives; the combine scatters
    # the outputs
    assert MK.allgather_bytes(1024, 4096, 8, 2) == ((8_388_608, 16_384, 8_192), 8_388_608)


def test_allgather_rings_over_the_ep_group_inside_a_node():
    # EP 8 in one node of 8: each collective is 7 ring steps over NVLink (100 GB/s, 1 us a step), whatever top-k
    # and the imbalance: T = 4096 tokens, dispatch 4096 x 64 x 2 + 4096 x 8 x 2 + 4096 x 8 bytes a step in three
    # collectives, combine 4096 x 64 x 2 in one
    links = replace(LINKS, intra_latency_s=1e-6)
    to, back = P.moe_alltoalls_s(workload(), links)
    assert to == pytest.approx(7 * (4096 * (128 + 16 + 8) / 100e9 + 3e-6))
    assert back == pytest.approx(7 * (4096 * 128 / 100e9 + 1e-6))
    assert P.moe_alltoalls_s(workload(k=4, params={"moe_load_imbalance": 1.5}), links) == (to, back)
    # the alltoall sends k copies of (ep-1)/ep of its tokens: 4096 x 2 x 128 x 7/8 = 917,504 bytes at once, so
    # top-2 over 8 ranks the gather moves 7 / 1.75 = 4x the bytes of the hidden states
    assert P.moe_alltoalls_s(workload(False), LINKS)[0] == pytest.approx(917_504 / 100e9)
    assert P.moe_alltoalls_s(workload(), LINKS)[1] / P.moe_alltoalls_s(workload(False), LINKS)[1] == pytest.approx(4)
    # a group of one gathers nothing
    assert P.moe_alltoalls_s(workload(ep=1), links) == (0.0, 0.0)


def test_allgather_across_nodes_takes_the_nic_and_etp_joins_the_group():
    # EP 16 over two nodes of 8: 15 steps, each over the node's NIC (80 GB/s, one ring crosses it)
    to, back = P.moe_alltoalls_s(workload(dp=16, ep=16, arch=replace(
        small_moe(), moe=MoE(num_experts=16, experts_per_token=2, expert_ffn_hidden_size=32))), LINKS)
    assert to == pytest.approx(15 * 4096 * (128 + 16 * 3) / 80e9)
    assert back == pytest.approx(15 * 4096 * 128 / 80e9)
    # TP 2 with ETP 2 x EP 4: T = 4096 / 2 tokens a rank (sequence parallel), the group the same 8 ranks (tp_ep), and
    # no separate ETP all-gather; the experts take etp x T x k = 8192 rows, the dense path counts T x k = 4096
    w, gpu = workload(tp=2, dp=4, ep=4, etp=2), find_gpu("H100-SXM")
    to, back = P.moe_alltoalls_s(w, LINKS)
    assert to == pytest.approx(7 * 2048 * (128 + 24) / 100e9)
    assert back == pytest.approx(7 * 2048 * 128 / 100e9)
    share, compute = P.moe_layer_share(w.arch), P.expert_compute_s(w, gpu)
    bw = gpu.memory_bytes_per_s * gpu.memory_share(w.params)
    extra = 2 * (7 * 2048 + (8192 - 4096)) * 64 * 2 / bw
    fwd, bwd = P.moe_s(w, gpu, LINKS)
    assert fwd == pytest.approx(share * (compute + extra + to + back))
    assert bwd == pytest.approx(share * (2 * compute + extra + to + back))


def test_the_permutation_reads_and_the_unpermutation_writes_the_gathered_shape():
    # free links: allgather - alltoall = the permutation's and unpermutation's 2 (n - 1) T h B more each pass
    # (ep 8 of 8 experts: one local expert, so the alltoall sorts nothing)
    gpu = find_gpu("H100-SXM")
    ag, a2a = P.moe_s(workload(), gpu, P.FREE_LINKS), P.moe_s(workload(False), gpu, P.FREE_LINKS)
    extra = P.moe_layer_share(small_moe()) * 2 * 7 * 4096 * 64 * 2 / (
        gpu.memory_bytes_per_s * gpu.memory_share(default_params()))
    assert ag[0] - a2a[0] == pytest.approx(extra)
    assert ag[1] - a2a[1] == pytest.approx(extra)


def test_the_gathered_buffers_are_held_once_a_stage():
    # the gathered tokens and the unpermuted output, n x T x h x 2 bytes each, once (not per layer): EP 4 x ETP 2
    # is a group of 8; a group of one gathers nothing
    ag, a2a = M.stage_memory(workload(ep=4, etp=2), 4, 0), M.stage_memory(workload(False, ep=4, etp=2), 4, 0)
    assert ag.activations - a2a.activations == pytest.approx(2 * 8 * 4096 * 64 * 2)
    assert (ag.weights, ag.gradients, ag.optimizer) == (a2a.weights, a2a.gradients, a2a.optimizer)
    assert M.stage_memory(workload(ep=1), 4, 0).activations == M.stage_memory(workload(False, ep=1), 4, 0).activations


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
    # GB200's MXFP8 MoE recipes run the overlap and graph the whole iteration (gpus.yaml moe_software): an allgather
    # row cannot have had either -- it runs as the same row stating no overlap and the recipes' other scopes
    (p, q) = validate(_rows(tmp_path, f"x,{plan},allgather,,mxfp8,none,1\n",
                            f"y,{plan},allgather,0,mxfp8,none,1\n")).predictions
    assert "ep_overlap" not in p.row["picked"] and "cuda_graphs=attn,moe_router,moe_preprocess (recipe)" in p.row["picked"]
    assert p.row["predicted_seconds_per_iter"] == q.row["predicted_seconds_per_iter"]
    # a stated whole-iteration or moe-scope graph is refused
    head = HEAD.replace("moe_dispatcher,", "moe_dispatcher,cuda_graphs,")
    for scopes in ("full_iteration", '"attn,moe"'):
        (tmp_path / "g.csv").write_text(head + f"x,{plan},allgather,{scopes},,mxfp8,none,1\n")
        with pytest.raises(FasopError, match=r"line 2: cuda_graphs: .*copies its token counts to the host"):
            validate(tmp_path / "g.csv")


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
    with pytest.raises(FasopError, match=r"ep_overlap: 1: .* after alltoall_seq was removed"):
        validate(tmp_path / "r.csv")
    # it ran the experts at the attention's TP (Megatron-Core raised "not support different TP size")
    (tmp_path / "r.csv").write_text(head + f"seq,{plan.replace(',8,2,1,4096', ',8,1,1,4096')},alltoall_seq,,,bf16,none,1\n")
    with pytest.raises(FasopError, match=r"line 2: etp: 1: the alltoall_seq dispatcher ran its experts at the "
                                         r"attention's TP only \(tp = 2\)"):
        validate(tmp_path / "r.csv")
