"""Expert, context and fully-sharded data parallelism (fasop/estimators/analytic/parallel.py):
groups against Megatron-Core's rule on hand-made grids, volumes computed by hand, memory by mode."""

from dataclasses import replace
from pathlib import Path

import pytest

from fasop.estimators.analytic import memory as M
from fasop.estimators.analytic import parallel as P
from fasop.estimators.analytic.layers import Recipe, Workload
from fasop.plans.plan import Plan
from fasop.specs.architecture import MoE, gpt_architecture, Architecture
from fasop.specs.catalog import default_params, find_gpu


def small_moe(**kw) -> Architecture:
    """4 layers, h 64, 8 heads (2 KV), 8 experts top-2 of width 32, gated."""
    return Architecture(family="mixtral", num_layers=4, hidden_size=64, num_attention_heads=8, num_kv_heads=2,
                        head_dim=8, ffn_hidden_size=128, vocab_size=1000, gated_mlp=True, tied_embeddings=False,
                        linear_bias=False, norm="rmsnorm", position="rotary", dropout=False,
                        moe=MoE(num_experts=8, experts_per_token=2, expert_ffn_hidden_size=32), **kw)


# ----------------------------------------------------------------------------- groups
def test_expert_data_parallel_is_megatron_cores_rule():
    # EDP = world / (ETP*EP*PP) = tp*cp*dp/(ep*etp) per stage (parallel_state.py:874-880)
    assert P.expert_data_parallel(tp=2, cp=1, dp=4, ep=4, etp=1) == 2
    assert P.expert_data_parallel(tp=1, cp=8, dp=1, ep=8, etp=1) == 1   # README: CP=8, EP=8 on 8 GPUs (folding)
    assert P.expert_data_parallel(tp=4, cp=2, dp=2, ep=8, etp=2) == 1
    with pytest.raises(ValueError):
        P.expert_data_parallel(tp=2, cp=1, dp=3, ep=4, etp=1)


def test_valid_expert_degrees():
    assert P.valid_expert_degrees(2, 1, 4, 8, 1, num_experts=8)
    assert not P.valid_expert_degrees(2, 1, 4, 8, 1, num_experts=6)    # ep must divide the experts
    assert not P.valid_expert_degrees(1, 1, 4, 8, 1, num_experts=8)    # ep*etp must divide tp*cp*dp


def test_expert_groups_on_a_hand_made_grid():
    # 8 ranks of a stage, ETP 2 x EP 2 x EDP 2 in the order tp-ep-dp (RankGenerator, parallel_state.py:887-896)
    g = P.expert_rank_groups(tp=2, cp=2, dp=2, ep=2, etp=2)
    assert g["etp"] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert g["ep"] == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert g["edp"] == [[0, 4], [1, 5], [2, 6], [3, 7]]
    # EP 4 over tp 2 x dp 2, ETP 1: contiguous EP groups, no expert data parallelism
    g = P.expert_rank_groups(tp=2, cp=1, dp=2, ep=4, etp=1)
    assert g["ep"] == [[0, 1, 2, 3]] and g["edp"] == [[0], [1], [2], [3]]
    # every rank in exactly one group of each kind
    for kind in ("etp", "ep", "edp"):
        assert sorted(r for grp in P.expert_rank_groups(2, 2, 4, 4, 2)[kind] for r in grp) == list(range(16))


# ----------------------------------------------------------------------------- volumes
def test_alltoall_volume_by_hand():
    # 1024 tokens, top-2, h 4096, bf16, EP 8: 1024*2*4096*2 * 7/8 = 14,680,064 bytes to other ranks
    assert P.dispatch_bytes(1024, 2, 4096, 2, 8) == 1024 * 2 * 4096 * 2 * 7 / 8 == 14_680_064
    assert P.dispatch_bytes(1024, 2, 4096, 1, 8) == 7_340_032                 # 1-byte elements: half
    assert P.dispatch_bytes(1024, 2, 4096, 2, 1) == 0


def test_alltoall_seconds_split_between_nvlink_and_nic():
    links = P.GroupLinks(intra_bytes_per_s=100.0, node_bytes_per_s=80.0, intra_latency_s=0.0,
                         inter_latency_s=0.0, gpus_per_node=8)
    # EP 8 inside a node: all 700 bytes over NVLink
    assert P.alltoall_s(700.0, 8, 1, links) == pytest.approx(7.0)
    # EP 16 over 2 nodes: 7 of 15 peers on NVLink, 8 across at 80/8 = 10 B/s per GPU; concurrent
    assert P.alltoall_s(1500.0, 16, 1, links) == pytest.approx(max(700 / 100, 800 / 10))


def test_cp_exchange_volume_by_hand():
    # b 1, s 8192, cp 4, 8 KV heads x 128, tp 2, bf16: |KV| = 1*2048*(1024/2)*2*2 = 4 MiB
    kv = P.cp_kv_bytes(1, 8192, 4, 1024, 2, 2)
    assert kv == 4 * 2 ** 20
    assert P.cp_exchange_bytes(1, 8192, 4, 1024, 2, 2) == (3 * kv, 6 * kv)
    assert P.exposed_s(3.0, 5.0) == 0.0 and P.exposed_s(5.0, 3.0) == 2.0


def test_fsdp_gather_volume_by_hand():
    # 1e9 parameters in bf16 over 8 shards: each rank receives 7/8 of 2 GB
    assert P.fsdp_gather_bytes(1e9, 8, 2) == 1.75e9
    # prefetch: first gather exposed, later ones only past the previous layer's compute
    assert P.fsdp_exposed_s(3.0, 1.0, 4) == 3.0 + 3 * 2.0
    assert P.fsdp_exposed_s(1.0, 3.0, 4) == 1.0


# ----------------------------------------------------------------------------- memory parts per mode
@pytest.mark.parametrize("zero, expected", [
    (0, (2 * 300, 4 * 300, 12 * 300)),
    (1, (2 * 300, 4 * 300, 12 * 100 / 4 + 12 * 200 / 2)),
    (2, (2 * 300, 4 * 100 / 4 + 4 * 200 / 2, 12 * 100 / 4 + 12 * 200 / 2)),
    (3, (2 * 100 / 4 + 2 * 200 / 2, 4 * 100 / 4 + 4 * 200 / 2, 12 * 100 / 4 + 12 * 200 / 2)),
])
def test_state_bytes_by_zero_stage(zero, expected):
    # 100 dense parameters sharded over DP x CP = 4, 200 expert parameters over EDP = 2
    s = P.state_bytes(dense=100, experts=200, zero=zero, dense_shard=4, expert_shard=2, weight_bytes=2,
                      grad_bytes=4, adam_bytes=12)
    assert (s.weights, s.gradients, s.optimizer) == pytest.approx(expected)


def _workload(arch, **kw):
    base = dict(arch=arch, seq=1024, mbs=1, tp=1, dp=8, pp=1, num_microbatches=4, recipe=Recipe(),
                params=default_params())
    return Workload(**{**base, **kw})


def test_experts_are_held_one_ep_etp_share():
    a = small_moe()
    routed = 8 * 64 * 32 * 3
    assert P.routed_expert_params(a) == routed
    for ep, etp in ((1, 1), (2, 1), (8, 1), (4, 2)):
        _, experts = M.stage_param_split(_workload(a, ep=ep, etp=etp), 4, False, False)
        assert experts == 4 * routed / (ep * etp)


def test_cp_divides_activations_and_shards_states_over_dp_cp():
    a = gpt_architecture(num_layers=4, hidden_size=256, num_attention_heads=8, vocab_size=1000, gated_mlp=True)
    one = M.stage_memory(_workload(a, dp=2, cp=1, recipe=Recipe(zero=1)), 4, 0)
    four = M.stage_memory(_workload(a, dp=2, cp=4, recipe=Recipe(zero=1)), 4, 0)
    layer_acts = lambda m: m.activations
    assert layer_acts(four) < layer_acts(one) / 3.9
    assert four.optimizer == pytest.approx(one.optimizer / 4)       # distributed optimizer over DP x CP
    assert four.weights == one.weights


def test_hsdp_shards_over_its_shard_degree():
    a = gpt_architecture(num_layers=4, hidden_size=256, num_attention_heads=8, vocab_size=1000, gated_mlp=True)
    w_full, w_hsdp = _workload(a, dp=8, recipe=Recipe(zero=3)), _workload(a, dp=8, recipe=Recipe(zero=3), shard=4)
    full, hsdp = M.stage_memory(w_full, 4, 0), M.stage_memory(w_hsdp, 4, 0)
    # beside the shards, both hold the same unsharded working set: 2 units x (2 + 4 bytes) per layer parameter,
    # and the root unit (the embedding here) kept gathered: the 16-bit rest beside its shard, 7/8 or 3/4 of it
    unit = 2 * M.stage_params(_workload(a), 1, False, False) * (2 + 4)
    root = M.root_params(w_full, 0)
    assert root == M.root_params(w_hsdp, 0) > 0
    assert hsdp.weights - unit - root * 2 * 3 / 4 == pytest.approx(2 * (full.weights - unit - root * 2 * 7 / 8))
    assert hsdp.optimizer == pytest.approx(2 * full.optimizer)


# ----------------------------------------------------------------------------- times
def test_moe_layer_costs_grow_with_cross_node_ep_and_fp8_dispatches_16_bit_tokens():
    a, gpu = small_moe(), find_gpu("H100-SXM")
    links = P.GroupLinks(450e9 * 0.65, 400e9 / 8 * 0.9 * 8, 1e-5, 2e-5, 8)
    w = lambda ep, precision="bf16": _workload(a, seq=4096, mbs=2, dp=16, ep=ep, recipe=Recipe(precision=precision))
    inside, across = P.moe_s(w(8), gpu, links), P.moe_s(w(16), gpu, links)
    assert across[0] > inside[0]
    # Megatron-Core's dispatchers (alltoall, DeepEP, HybridEP) send bf16 tokens in an FP8 / MXFP8 run too:
    # the all-to-alls are the same, only the experts' matmuls (and their casts) run faster
    assert P.dispatch_value_bytes(Recipe(precision="mxfp8")) == P.dispatch_value_bytes(Recipe()) == 2
    low = P.moe_s(w(8, "fp8"), gpu, links)
    compute = P.expert_compute_s(w(8, "fp8"), gpu) - P.expert_compute_s(w(8), gpu)
    assert low[0] - inside[0] == pytest.approx(compute)         # forward: one pass of the experts
    assert low[1] - inside[1] == pytest.approx(2 * compute)     # backward: two
    assert P.moe_s(_workload(gpt_architecture(num_layers=2, hidden_size=64, num_attention_heads=8, vocab_size=10)),
                   gpu, links) == (0.0, 0.0)


def test_cp_ring_is_hidden_behind_long_attention():
    a, links = small_moe(), P.GroupLinks(1e12, 1e11, 0.0, 0.0, 8)
    w = _workload(a, seq=8192, cp=4)
    assert P.cp_s(w, links, attention_fwd_s=1.0, attention_bwd_s=2.5) == (0.0, 0.0)
    kv = P.cp_kv_bytes(1, 8192, 4, a.kv_width, 1, 2)
    fwd, _ = P.cp_s(w, links, attention_fwd_s=0.0, attention_bwd_s=0.0)
    assert fwd == pytest.approx(3 * kv / 1e12)


def test_plan_keys_and_gpus():
    dense = Plan(tp=2, dp=4, pp=2, mbs=1, global_batch_size=8, placement=())
    assert dense.expert_key == "" and dense.num_gpus == 16
    moe = Plan(tp=2, dp=4, pp=2, mbs=1, global_batch_size=8, placement=(), cp=2, ep=8)
    assert moe.expert_key == "-cp2-ep8" and moe.num_gpus == 32 and moe.num_microbatches == 2
    assert moe.rank(stage=1, d=1, t=1, c=1) == 1 + 2 * 1 + 4 * 1 + 16 * 1


def test_a_step_with_ep_cp_and_fsdp_runs_on_two_nodes():
    """The whole analytic step on 2 H100 nodes: CP and EP groups inside a stage's nodes, FSDP gathers."""
    from fasop.estimators.analytic import cost as C
    from fasop.specs.types import NodeType
    node = NodeType(name="p5", instance="p5", gpu="H100-SXM", gpus_per_node=8, memory_limit_bytes=80e9,
                    intra_node_bytes_per_s=450e9, inter_node_bytes_per_s=400e9, intra_node_shared=False,
                    usd_per_hour=1.0, spot_usd_per_hour=None)
    gpu, a = find_gpu("H100-SXM"), small_moe()
    times = {}
    for cp, ep, zero in ((1, 1, 1), (2, 8, 1), (2, 16, 3)):
        stages = C.stage_hardware(1, cp * (16 // cp), 1, (node, node), (gpu, gpu), default_params())
        w = _workload(a, seq=8192, dp=16 // cp, cp=cp, ep=ep, num_microbatches=2, recipe=Recipe(zero=zero))
        times[(cp, ep, zero)] = C.step(w, stages, (4,)).step_s
    assert all(t > 0 for t in times.values())
    # the stage spans 2 nodes: an EP group of 16 crosses the NIC, one of 8 stays on NVLink
    assert stages[0].groups.gpus_per_node == 8


# ----------------------------------------------------------------------------- dispatch dedup, NVLink domains
def test_remote_copies_by_hand():
    # top-8 over EP 16 on two nodes of 8: alltoall sends 8 x 8/16 = 4 copies across; deduplicated, a
    # token crosses once unless all 8 experts are on its own node: 1 - (1/2)^8
    def remote_copies(k, ep, n_in, dedup):
        return P.dispatch_copies(k, 0, ep, n_in, "uniform", dedup, False)[1]
    assert remote_copies(8, 16, 8, dedup=False) == 4.0
    assert remote_copies(8, 16, 8, dedup=True) == pytest.approx(1 - 0.5 ** 8)
    # one node: nothing crosses either way
    assert remote_copies(8, 8, 8, dedup=False) == 0.0 == remote_copies(8, 8, 8, dedup=True)


def test_deduplicated_alltoall_shrinks_only_the_network_part():
    links = P.GroupLinks(intra_bytes_per_s=100.0, node_bytes_per_s=80.0, intra_latency_s=0.0,
                         inter_latency_s=0.0, gpus_per_node=8)
    plain = P.alltoall_s(1500.0, 16, 1, links, k=8)
    dedup = P.alltoall_s(1500.0, 16, 1, links, k=8, dedup=True)
    assert plain == pytest.approx(800 / 10)
    assert dedup == pytest.approx(max(700 / 100, 800 * (1 - 0.5 ** 8) / 4 / 10))


def test_groups_inside_an_nvl72_domain_use_nvlink():
    # GB200 trays of 4 GPUs, 72 GPUs an NVLink domain: EP 16 over 4 trays is all NVLink; a node of 8
    # (no domain) sends 8 of 16 peers over the NIC
    rack = P.GroupLinks(intra_bytes_per_s=100.0, node_bytes_per_s=80.0, intra_latency_s=0.0,
                        inter_latency_s=0.0, gpus_per_node=4, domain_gpus=72)
    assert P.alltoall_s(1500.0, 16, 1, rack) == pytest.approx(15.0)
    assert P.ring_step_s(10.0, 16, 1, rack) == pytest.approx(0.1)
    from fasop.estimators.analytic import hardware as H
    from fasop.specs.types import NodeType
    gpu = find_gpu("GB200")
    tray = NodeType(name="tray", instance="t", gpu="GB200", gpus_per_node=4, memory_limit_bytes=gpu.memory_bytes,
                    intra_node_bytes_per_s=gpu.intra_node_bytes_per_s, inter_node_bytes_per_s=200e9,
                    intra_node_shared=False, usd_per_hour=0.0, spot_usd_per_hour=None)
    (stage,) = H.stage_hardware(8, 4, 1, (tray,) * 8, (gpu,) * 8, default_params())
    assert stage.tp_link.bytes_per_s == stage.dp_link.bytes_per_s > 200e9   # TP 8 and DP over 8 trays: NVLink
    assert stage.groups.nvlink_gpus == 72


def test_dp_rings_across_nvl72_domains_share_the_stage_trays_networks():
    """A DP ring enters and leaves each node once, over whichever NIC, so the min(tp, G) rings crossing a
    node share its whole network; across NVLink domains (NVL72: 18 trays of 4) the stage's part of a
    domain plays the node: its n trays' networks shared by min(tp, 4n) rings, at most the GPU link."""
    from fasop.estimators.analytic.hardware import Link, dp_link
    inside = Link(800e9, 1e-6)
    inter = lambda ks, share: Link(200e9 / share, 5e-6)  # noqa: E731  (a tray's 200 GB/s / share)
    assert dp_link(range(18), 4, 72, 4, inside, inter) == inside          # one domain: NVLink
    # trays 16-19: 2 in each domain, tp 4: min(4, 8) / 2 = 2 rings a tray's network -> 100 GB/s
    assert dp_link(range(16, 20), 4, 72, 4, inside, inter) == Link(100e9, 5e-6)
    # 32 trays, 18 + 14: tp 2 shares 14 trays' networks (1.4 TB/s): capped at the GPU link
    assert dp_link(range(32), 4, 72, 2, inside, inter) == Link(800e9, 5e-6)
    # a plain 8-GPU node (its own domain): the node's network over min(tp, 8) rings, as before
    assert dp_link(range(4), 8, 8, 2, inside, inter) == Link(100e9, 5e-6)
    assert dp_link(range(4), 8, 8, 16, inside, inter) == Link(25e9, 5e-6)


def test_the_per_replica_path_takes_the_same_dp_rings():
    """fasop validate's per-replica hardware (mixed.replica_stages, for rows naming stage GPUs) and the uniform
    path (hardware.stage_hardware) give a stage spanning two NVL72 domains the same DP link."""
    from fasop.estimators.analytic import hardware as H
    from fasop.estimators.analytic import mixed
    from fasop.specs.types import NodeType
    gpu = find_gpu("GB200")
    tray = NodeType(name="tray", instance="t", gpu="GB200", gpus_per_node=4, memory_limit_bytes=gpu.memory_bytes,
                    intra_node_bytes_per_s=gpu.intra_node_bytes_per_s, inter_node_bytes_per_s=200e9,
                    intra_node_shared=False, usd_per_hour=0.0, spot_usd_per_hour=None)
    (uniform,) = H.stage_hardware(2, 64, 1, (tray,) * 32, (gpu,) * 32, default_params())
    replicas = mixed.replica_stages(2, 64, 1, (tray,) * 32, (gpu,) * 32, default_params())
    assert uniform.dp_link.bytes_per_s > 200e9                     # 18 + 14 trays: capped at NVLink, not a NIC
    assert all(r[0].dp_link == uniform.dp_link for r in replicas)

def test_ep_overlap_pairs_megatron_cores_three_phases():
    # one all-to-all: dispatch 3 s, combine 2 s; experts' forward 0.5 s; attention 1 s forward, 4 s backward
    # phase 1: B combine-backward (2) | F attention (1)                  -> 1 exposed, the backward's
    # phase 2: F dispatch + B dispatch-backward (6) | experts 3 x 0.5    -> 4.5, half to each pass
    # phase 3: F combine (2) | B attention backward (4)                 -> 0, the forward's
    assert P.ep_overlap_exposed(3.0, 2.0, 0.5, (1.0, 4.0), 1.0) == (2.25, 1.0 + 2.25)
    # a share s = 0.5 of each compute hides: phase 1 2 - 0.5, phase 2 6 - 0.75, phase 3 2 - 2
    assert P.ep_overlap_exposed(3.0, 2.0, 0.5, (1.0, 4.0), 0.5) == (2.625, 1.5 + 2.625)
    # enough compute in every phase: nothing exposed
    assert P.ep_overlap_exposed(1.0, 1.0, 1.0, (1.0, 1.0), 1.0) == (0.0, 0.0)
    # a HybridEP kernel holding 16 of 132 SMs (Megatron-Core moe_hybridep_num_sms): the compute keeps
    # 116/132 of its rate while the transfer runs, so a phase whose compute would have hidden it
    # still exposes 16/132 of it: phase 1: 1 s of comm, 4 s of compute -> 16/132 s
    assert P.exposed_s(1.0, 4.0, 116 / 132) == pytest.approx(16 / 132)
    assert P.exposed_s(1.0, 0.5, 116 / 132) == 0.5              # less compute than 116/132 of the comm: as before
    # half the SMs kept: phase 2's 2 s of comm hide only 1 s of its 3 s of compute's work (0.5 each pass),
    # phases 1 and 3 expose 1 - 0.5 each
    assert P.ep_overlap_exposed(1.0, 1.0, 1.0, (1.0, 1.0), 1.0, 0.5) == (0.5 + 0.5, 0.5 + 0.5)


def test_hybridep_overlap_loses_the_sms_its_kernels_hold(tmp_path):
    # the Qwen3-30B-A3B EP16 H100 row with EP overlap: the same plan with `hybridep` (16 SMs held) is
    # slower than with `flex` (no backend named: no SMs counted), both faster than no overlap
    from fasop.report.validate import validate
    data = Path(__file__).parent / "data"
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "q.json").write_bytes((data / "hf" / "qwen3-30b-a3b.json").read_bytes())
    head = ("name,model,gpu,num_gpus,tp,pp,cp,dp,ep,etp,zero,seq_len,global_batch_size,micro_batch_size,"
            "moe_dispatcher,ep_overlap,precision,recompute,measured_seconds_per_iter\n")
    rows = [f"{d}{o},hf/q.json,H100-SXM,16,1,1,1,16,16,1,1,4096,1024,1,{d},{o},bf16,none,20\n"
            for d, o in (("flex", 1), ("hybridep", 1), ("hybridep", 0))]
    (tmp_path / "r.csv").write_text(head + "".join(rows))
    t = {p.row["name"]: p.row["predicted_seconds_per_iter"] for p in validate(tmp_path / "r.csv").predictions}
    assert t["flex1"] < t["hybridep1"] < t["hybridep0"]


def test_alltoall_sorts_the_received_rows_by_local_expert():
    # 10 rows of h = 4 in 2-byte values: sorted after the dispatch and restored before the combine,
    # each read + written: 2 x 2 x 10 x 4 x 2 = 320 bytes; one local expert: no sort
    assert P.local_sort_bytes(10, 4, 2, local_experts=2) == 320
    assert P.local_sort_bytes(10, 4, 2, local_experts=1) == 0.0
    # in moe_s: the small MoE (8 experts, top-2, h 64) at ep 4 holds 2 local experts; free links, so the
    # difference between the alltoall and a flex dispatcher is the sort: rows = 1 x 4096 x 2, once per pass
    a, gpu = small_moe(), find_gpu("H100-SXM")
    w = lambda dedup: _workload(a, seq=4096, dp=4, ep=4, params=replace(default_params(), moe_node_dedup=dedup))
    plain, flex = P.moe_s(w(False), gpu, P.FREE_LINKS), P.moe_s(w(True), gpu, P.FREE_LINKS)
    share = P.moe_layer_share(a)
    sort = share * 4 * 4096 * 2 * 64 * 2 / (gpu.memory_bytes_per_s * gpu.memory_share(default_params()))
    assert plain[0] - flex[0] == pytest.approx(sort)
    assert plain[1] - flex[1] == pytest.approx(sort)


def test_ep_overlap_pairs_only_the_steady_state_passes():
    # Megatron-LM combined_1f1b.py / schedules.py: pp 1 runs the first forward and the last backward
    # alone, (m - 1)/m paired; interleaved p 4, v 2, m 8: W = (4 - 1) + (2 - 1) * 4 + 1 = 8 warm-up
    # forwards of the 16 chunk passes (the mean over the ranks), half paired; pp > 1 without virtual
    # stages, full recompute and ep 1: Megatron refuses the overlap, none paired
    a = small_moe()
    assert P.ep_overlap_paired_share(_workload(a, ep=2, num_microbatches=4)) == 0.75
    assert P.ep_overlap_paired_share(_workload(a, num_microbatches=4)) == 0.0
    assert P.ep_overlap_paired_share(_workload(a, ep=2, pp=4, num_microbatches=8, recipe=Recipe(virtual_stages=2))) == 0.5
    assert P.ep_overlap_paired_share(_workload(a, ep=2, pp=4, num_microbatches=2, recipe=Recipe(virtual_stages=2))) == 0.0
    assert P.ep_overlap_paired_share(_workload(a, ep=2, pp=4, num_microbatches=8)) == 0.0
    assert P.ep_overlap_paired_share(_workload(a, ep=2, num_microbatches=8, recipe=Recipe(recompute="full"))) == 0.0


def test_ep_overlap_exposes_the_unpaired_passes_in_full():
    # free compute cover, so a paired pass exposes (almost) nothing beyond its own exposure; with m = 1 no
    # pass is paired: the overlap changes nothing; with m = 4, 1/4 of the passes expose the plain all-to-alls
    a, gpu = small_moe(), find_gpu("H100-SXM")
    links = P.GroupLinks(100e9, 400e9, 0.0, 0.0, 8)
    on = replace(default_params(), ep_overlap=1.0, moe_node_dedup=True)
    w = lambda m, params: _workload(a, seq=4096, dp=16, ep=8, num_microbatches=m, params=params)
    off = P.moe_s(w(4, replace(on, ep_overlap=0.0)), gpu, links, (1.0, 1.0))
    assert P.moe_s(w(1, on), gpu, links, (1.0, 1.0)) == off
    full = P.moe_s(w(10 ** 6, on), gpu, links, (1.0, 1.0))
    quarter = P.moe_s(w(4, on), gpu, links, (1.0, 1.0))
    for k in (0, 1):
        assert quarter[k] == pytest.approx(full[k] + (off[k] - full[k]) / 4, rel=1e-5)


def test_nccl_alltoall_overlap_slows_the_compute_beside_it():
    # NCCL's alltoall under EP overlap: the compute keeps 1 / (1 + overlap_slowdown) of its rate (Lee et al.
    # 2025, as a DP bucket's reduction); a HybridEP kernel holding 32 of 132 SMs leaves it 100/132
    gpu = find_gpu("H100-SXM")
    nccl = _workload(small_moe(), params=replace(default_params(), overlap_slowdown=0.25))
    assert P.overlap_kept_share(nccl, gpu) == 0.8
    flex = _workload(small_moe(), params=replace(default_params(), moe_node_dedup=True, moe_comm_sms=32))
    assert P.overlap_kept_share(flex, gpu) == pytest.approx(100 / 132)


def test_unfused_permutation_moves_its_extra_rows():
    # N = 10 rows of h = 4 in 2-byte values: forward 3N·h·B (N - T more rows read, the probability
    # product read + written, the zero-filled output), backward 4N·h·B: 7 x 80 / 2 = 280 bytes a pass
    assert P.unfused_permute_bytes(10, 4, 2) == 280
    # in moe_s: the same plan with moe_permute_fusion false is slower by rows = T·k = 4096 x 2 of h 64 each pass
    a, gpu = small_moe(), find_gpu("H100-SXM")
    w = lambda fused: _workload(a, seq=4096, dp=4, ep=4, params=replace(default_params(), moe_permute_fusion=fused))
    fused, unfused = P.moe_s(w(True), gpu, P.FREE_LINKS), P.moe_s(w(False), gpu, P.FREE_LINKS)
    extra = P.moe_layer_share(a) * 3.5 * 4096 * 2 * 64 * 2 / (gpu.memory_bytes_per_s * gpu.memory_share(default_params()))
    assert unfused[0] - fused[0] == pytest.approx(extra)
    assert unfused[1] - fused[1] == pytest.approx(extra)


def test_grouped_gemm_tiles_each_expert_then_runs_whole_waves():
    # 4 experts of 100 rows, n 256, tile 128 x 256 on 8 SMs: each expert's 100 rows fill one 128-row tile
    # (100/128), 4 tiles in one wave of 8 slots: 4 x 100 x 256 / (8 x 128 x 256) = 0.390625
    assert P.grouped_wave_efficiency(100, 256, 4, 8, (128, 256)) == pytest.approx(400 / 1024)
    # full tiles and full waves: 1; no SM count or a 1 x 1 tile: 1
    assert P.grouped_wave_efficiency(256, 256, 4, 8, (128, 256)) == 1.0
    assert P.grouped_wave_efficiency(100, 256, 4, 0, (128, 256)) == 1.0
    assert P.grouped_wave_efficiency(100, 256, 4, 8, (1, 1)) == 1.0
    # the same rows over more local experts: each expert's last tile emptier, the GEMM slower
    a, gpu = small_moe(), find_gpu("H100-SXM")
    tiled = replace(default_params(), matmul_tile=(128, 256))
    few, many = (P.expert_compute_s(_workload(a, seq=256, dp=8, ep=ep, params=tiled), gpu) for ep in (8, 1))
    assert few < many


def test_an_overlapped_all_to_all_runs_longer_beside_the_compute():
    # the HybridEP A/B's Nsight profile: 8.25 s of communication kernels with the overlap off, 10.83 s on
    # (9.079 ms = 0.11 %, 3,958.997 ms = 36.55 % of it concurrent with GEMM and attention): x 1.31
    assert 3958.997 / 0.3655 / (9.079 / 0.0011) - 1 == pytest.approx(P.EP_A2A_OVERLAP_SLOWDOWN, abs=0.005)
    # wiring: with the overlap, moe_s exposes ep_overlap_exposed of the 1.31 x longer all-to-alls on the
    # paired passes (here all but 1 in 10**6), NCCL's compute at 1 / (1 + overlap_slowdown)
    a, gpu = small_moe(), find_gpu("H100-SXM")
    links = P.GroupLinks(100e9, 400e9, 0.0, 0.0, 8)
    w = _workload(a, seq=4096, dp=16, ep=8, num_microbatches=10 ** 6,   # 1 local expert: no sort
                  params=replace(default_params(), ep_overlap=1.0))
    to = back = P.alltoall_s(P.dispatch_bytes(4096, 2, 64, 2, 8), 8, 1, links, 2, False)
    compute = P.expert_compute_s(w, gpu)
    f, b = P.ep_overlap_exposed(1.31 * to, 1.31 * back, compute, (0.5e-3, 1e-3), 1.0, 1 / 1.189)
    share = P.moe_layer_share(a)
    got = P.moe_s(w, gpu, links, (0.5e-3, 1e-3))
    assert got[0] == pytest.approx(share * (compute + f), rel=1e-4)
    assert got[1] == pytest.approx(share * (2 * compute + b), rel=1e-4)


def _node(gpu: str, per_node: int, name: str = "n"):
    from fasop.specs.types import NodeType
    g = find_gpu(gpu)
    return NodeType(name=name, instance="i", gpu=gpu, gpus_per_node=per_node, memory_limit_bytes=g.memory_bytes,
                    intra_node_bytes_per_s=g.intra_node_bytes_per_s, inter_node_bytes_per_s=400e9,
                    intra_node_shared=False, usd_per_hour=0.0, spot_usd_per_hour=None)


def test_expert_states_move_over_their_own_rings_by_hand():
    """Two 8-GPU H100 nodes, tp 1, dp 16, ep 8: the dense DP ring (tp = 1 apart) may take a node's
    whole network; the expert data-parallel groups (EDP 2, members ep = 8 ranks apart: one GPU a
    node) are 8 rings crossing the node at once, each with 1/8 of it. FSDP reduce-scatters each
    part's gradients and gathers its weights over its own group."""
    from fasop.estimators.analytic import data_parallel as D
    from fasop.estimators.analytic import hardware as H
    params, gpu = default_params(), find_gpu("H100-SXM")
    (stage,) = H.stage_hardware(1, 16, 1, (_node("H100-SXM", 8),) * 2, (gpu,) * 2, params)
    net = stage.groups.node_bytes_per_s
    assert stage.dp_link.bytes_per_s == pytest.approx(net)               # min(tp 1, 8) = 1 ring a node
    experts_link = H.ring_link(stage, 8)
    assert experts_link.bytes_per_s == pytest.approx(net / 8)
    assert H.ring_link(stage, 1) == stage.dp_link
    assert H.ring_link(stage, 32).bytes_per_s == pytest.approx(net / 8)  # at most G rings a node
    w = _workload(small_moe(), seq=4096, dp=16, ep=8, recipe=Recipe(zero=3))
    assert D.expert_rings(w, stage) == (2, experts_link)
    dense, experts = 1e9, 3e9
    reduce, value = params.gradient_reduce_bytes["bf16"], 2

    def scatter(size, group, link, buckets=1):
        return (group - 1) / group * size / link.bytes_per_s + (group - 1 + buckets - 1) * link.latency_s

    buckets = lambda n: -(-n * reduce // params.gradient_bucket_bytes)  # noqa: E731
    expected = scatter(dense * reduce, 16, stage.dp_link, buckets(dense)) \
        + scatter(experts * reduce, 2, experts_link, buckets(experts))
    assert D.stage_sync_s(w, dense, experts, stage) == pytest.approx(expected)
    # each layer's weights gathered the same way, dense over 16 ranks, experts over their 2
    assert D.zero3_busy_s(w, dense + experts, stage, 0.0, experts) == pytest.approx(
        scatter(dense * value, 16, stage.dp_link) + scatter(experts * value, 2, experts_link))
    # HSDP: its shard links for all; one node: every ring on NVLink
    assert D.expert_rings(_workload(small_moe(), seq=4096, dp=16, ep=8, recipe=Recipe(zero=3, hsdp=True),
                                    shard=8), stage) is None
    (inside,) = H.stage_hardware(1, 8, 1, (_node("H100-SXM", 8),), (gpu,), params)
    assert H.ring_link(inside, 8) == inside.dp_link
