"""The analytic estimator against measured FSDP / HSDP runs (PyTorch FSDP1 and FSDP2 stacks), and the
FSDP pieces it charges, each computed by hand.

The sets are documented in tests/data/VALIDATION_SOURCES.md ("FSDP"). One parameter set for all; a row
states its plan and the software the run had (eager or compiled elementwise kernels, FlashAttention,
the cluster's network and reduce dtype where the source gives them). The bounds are the figures
measured with `fasop validate tests/data/<set>.csv`, a little above: they keep the figures from
getting worse. The IBM and torchtitan-docs sets are within the issue's 10 % on time, #929's one compiled
run is not (docs/validate.md says what is left: the estimate still leans fast, most on IBM's H100 cluster).
"""

from dataclasses import replace
from pathlib import Path

import pytest

from fasop.estimators.analytic import cost as C
from fasop.estimators.analytic import layers as L
from fasop.estimators.analytic import parallel as P
from fasop.estimators.analytic.eager import eager_extra_bytes
from fasop.estimators.analytic.hardware import Link, StageHardware, shard_links
from fasop.estimators.analytic.layers import Recipe, Workload
from conftest import without_columns
from fasop.report.validate import validate
from fasop.specs.architecture import gpt_architecture
from fasop.specs.catalog import default_params, find_gpu

DATA = Path(__file__).resolve().parent / "data"

# set, time MAPE bound %, time max bound %, memory MAPE bound % (None: no memory measured), rows
SETS = [
    ("fsdp_ibm_pytorch_blog.csv", 7.5, 18, None, 10),         # 128 A100 / 96 H100, FSDP1, FSDP and HSDP
    ("fsdp_torchtitan_docs_a100.csv", 6.5, 10.5, None, 8),    # 64 A100, FSDP2, torchtitan docs
    ("fsdp_torchtitan_issue929_a100.csv", 11, 11, 7.5, 1),    # 8 A100, FSDP2 compiled, peak memory (reserved)
    ("fsdp_torchtitan_issues_memory.csv", 8, 36, 4.5, 13),    # 8-128 A100 ... GB200, FSDP2, peak memory (reserved)
]


@pytest.mark.parametrize("name, mape, worst, mem_mape, rows", SETS)
def test_fsdp_set_within_its_bound(name, mape, worst, mem_mape, rows):
    report = validate(DATA / name)
    assert len(report.predictions) == rows
    assert all(p.row["zero"] == 3 for p in report.predictions)
    assert report.mape <= mape, f"{name}: MAPE {report.mape:.1f} % above {mape} %"
    assert report.max_error <= worst, f"{name}: max |error| {report.max_error:.1f} % above {worst} %"
    if mem_mape is not None:
        mem = 100 * sum(abs(e) for e in report.memory_errors) / len(report.memory_errors)
        assert mem <= mem_mape, f"{name}: memory MAPE {mem:.1f} % above {mem_mape} %"


def _llama(**kw):
    base = dict(num_layers=2, hidden_size=64, num_attention_heads=8, num_kv_heads=2, vocab_size=100,
                ffn_hidden_size=160, gated_mlp=True)
    return gpt_architecture(**{**base, **kw})


def test_eager_elementwise_bytes_by_hand():
    # b 1, s 10, h 64, q 64, kv 16 (8 heads of 8, 2 KV heads), f 160, bf16 (e 2), t 1, per token:
    # two norms 2 x (28 + 4e - 2e) x h = 2 x 32 x 64 = 4096; rotary (16 + 2e - 2e)(q + kv) = 16 x 80 = 1280;
    # SwiGLU (5e - 3e) f = 4 x 160 = 640; output contiguous 2e q = 256; repeat_kv 2e (kv + q) = 4 x 80 = 320
    a = _llama()
    assert a.kv_width == 16 and a.q_width == 64
    assert eager_extra_bytes(a, 1, 10, 1, False, 2) == 10 * (4096 + 1280 + 640 + 256 + 320)
    # TP 2 with SP: everything / 2; without SP the norms stay whole
    assert eager_extra_bytes(a, 1, 10, 2, True, 2) == 10 * (4096 + 1280 + 640 + 256 + 320) / 2
    assert eager_extra_bytes(a, 1, 10, 2, False, 2) == 10 * (4096 + (1280 + 640 + 256 + 320) / 2)
    # MHA (kv = q): no repeat_kv copies
    assert eager_extra_bytes(_llama(num_kv_heads=8), 1, 10, 1, False, 2) == 10 * (4096 + 16 * 128 + 640 + 256)
    # IBM FMS's RoPE (`matrix`): float() 2 + 4, mul read 4 write 8, sum(5) read 8 write 4, type_as 4 + 2 = 36 per
    # Q / K element, 32 beyond the fused 2e = 4: 32 x 80 = 2560 instead of 1280
    assert eager_extra_bytes(a, 1, 10, 1, False, 2, "matrix") == 10 * (4096 + 2560 + 640 + 256 + 320)


def test_eager_rope_names_are_the_catalogs():
    from fasop.estimators.analytic.eager import EAGER_ROPE_BYTES
    from fasop.specs.catalog import EAGER_ROPES
    assert tuple(EAGER_ROPE_BYTES) == EAGER_ROPES and default_params().eager_rope == "complex"


def test_fms_rope_makes_the_ibm_rows_slower_only(tmp_path):
    # the IBM clusters state `eager_rope: matrix`; the same rows with the complex RoPE are faster by the
    # 16 bytes per Q / K element more than FMS's implementation moves
    from fasop.specs.load import load_cluster
    text = (DATA / "ibm_h100_800g_cluster.yaml").read_text()
    assert load_cluster(str(DATA / "ibm_h100_800g_cluster.yaml")).analytic.eager_rope == "matrix"
    (tmp_path / "ibm_h100_800g_cluster.yaml").write_text(text.replace("eager_rope: matrix", "eager_rope: complex"))
    rows = (DATA / "fsdp_ibm_pytorch_blog.csv").read_text().splitlines()
    (tmp_path / "runs.csv").write_text("\n".join([rows[0], rows[8]]) + "\n")
    complex_s = validate(tmp_path / "runs.csv").predictions[0].row["predicted_seconds_per_iter"]
    matrix_s = validate(DATA / "fsdp_ibm_pytorch_blog.csv").predictions[7].row["predicted_seconds_per_iter"]
    assert matrix_s > complex_s


def test_fms_fsdp_optimizer_step_by_hand():
    # fms-fsdp's torch.optim.AdamW (foreach): 8 passes of 8, 12, 8, 12, 8, 8, 8, 16 bytes = 80, and FSDP's
    # clip_grad_norm_ (norm read 4, grad.mul_ read 4 write 4) = 92 a parameter of the GPU's shard
    from fasop.specs.load import load_cluster
    for name in ("ibm_a100_400g_cluster.yaml", "ibm_h100_800g_cluster.yaml"):
        params = load_cluster(str(DATA / name)).analytic
        assert params.optimizer_step_bytes["bf16"] == 8 + 12 + 8 + 12 + 8 + 8 + 8 + 16 + 12 == 92
    params = load_cluster(str(DATA / "ibm_a100_400g_cluster.yaml")).analytic
    gpu = find_gpu("A100-SXM4-80GB")
    # HSDP over 8 ranks of one node (dp 16): 8e9 parameters, 1e9 a GPU, 92 GB at 0.9 x 2039 GB/s
    w = Workload(arch=_llama(), seq=16, mbs=1, tp=1, dp=16, pp=1, num_microbatches=1,
                 recipe=Recipe(zero=3, hsdp=True), params=params, shard=8)
    assert C.optimizer_s(w, 8e9, gpu) == pytest.approx(1e9 * 92 / (0.9 * 2039e9))


def test_a_bad_eager_rope_is_one_clear_error(tmp_path):
    from fasop.core.errors import SpecError
    from fasop.specs.load import load_cluster
    path = tmp_path / "c.yaml"
    path.write_text((DATA / "ibm_a100_400g_cluster.yaml").read_text().replace("eager_rope: matrix", "eager_rope: real"))
    with pytest.raises(SpecError, match=r"analytic\.eager_rope: .*complex, matrix.*real"):
        load_cluster(str(path))


def test_eager_kernels_make_a_layer_slower():
    a, gpu = _llama(num_layers=4, hidden_size=1024, num_attention_heads=8, num_kv_heads=8, ffn_hidden_size=2816), \
        find_gpu("A100-SXM4-80GB")
    w = lambda fused: Workload(arch=a, seq=2048, mbs=1, tp=1, dp=8, pp=1, num_microbatches=1,
                               recipe=Recipe(zero=3), params=replace(default_params(), fused_elementwise=fused))
    link = Link(1e11, 1e-5)
    assert sum(C.layer_s(w(False), gpu, link)) > sum(C.layer_s(w(True), gpu, link))


def test_fsdp2_copies_by_hand():
    # 1e9 parameters, bf16 weights, fp32 reduction: forward copy-out read + write 2 + 2 = 4 GB; backward
    # the same again, plus the gradients' chunk_cat into the reduce-scatter input, read 2 + write 4
    assert P.fsdp_copy_bytes(1e9, 2, 4) == (4e9, 4e9 + 6e9)
    # FSDP1: parameters are views of the flat parameter (nothing copied forward); the backward of the
    # split concatenates the gradients into the flat gradient, read + write: 2 x 4 bytes in an fp32 run
    assert P.fsdp1_copy_bytes(1e9, 4, 4, 8) == (0.0, 8e9)
    # bf16 over a shard of 8: the concatenation 2 + 2; each all-gather first casts the GPU's fp32 eighth to
    # bf16 (read 4 + write 2 = 6 x 1.25e8), forward and again backward; the bf16 reduced gradient shard is
    # cast back to fp32 (read 2 + write 4 = 6 x 1.25e8): forward 0.75e9, backward 0.75e9 + 4e9 + 0.75e9
    assert P.fsdp1_copy_bytes(1e9, 2, 2, 8) == (0.75e9, 0.75e9 + 4e9 + 0.75e9)
    assert P.fsdp1_copy_bytes(1e9, 2, 4, 8) == (0.75e9, 0.75e9 + 4e9)   # fp32 reduction: no gradient cast


def test_fsdp1_gradient_division_by_hand():
    # FSDP1 divides by ~sqrt(world) before the reduce-scatter and by the rest after it: pre doubles while it
    # divides the world and world / pre > pre (FairScale's rule). 128: 2, 4, 8, 16 (128 / 16 = 8 < 16): (16, 8);
    # 96: (16, 6); 8: 2, 4 (8 / 4 = 2 < 4): (4, 2); 2: (2, 1), no post-division; 3: (2, 1.5)
    assert [P.fsdp1_divide_factors(n) for n in (128, 96, 8, 2, 3, 1)] == \
        [(16, 8.0), (16, 6.0), (4, 2.0), (2, 1.0), (2, 1.5), (1, 1.0)]
    # 1e9 parameters, bf16 reduction, shard 8 of a world of 128 (HSDP): as above, plus the in-place division of
    # the whole unsharded bf16 gradient (read + write 2 x 2 x 1e9) and of the GPU's 1/8 shard (2 x 2 x 1.25e8)
    assert P.fsdp1_copy_bytes(1e9, 2, 2, 8, 128) == (0.75e9, 0.75e9 + 4e9 + 0.75e9 + 4.5e9)
    # a world of 2: the pre-division only (fp32 reduction: read + write 2 x 4 x 1e9)
    assert P.fsdp1_copy_bytes(1e9, 4, 4, 2, 2) == (0.0, 8e9 + 8e9)


def test_fsdp_unsharded_working_set_by_hand():
    # two units of 1e9 parameters: bf16 gathered weights (2) and fp32 unsharded gradients (4)
    assert P.fsdp_unsharded_bytes(1e9, 2, 4) == 12e9
    assert P.fsdp_unsharded_bytes(1e9, 2, 2) == 8e9     # bf16 reduction (fms-fsdp's bfSixteen policy)


def _stage(node_bytes: float = 50e9) -> StageHardware:
    groups = P.GroupLinks(intra_bytes_per_s=200e9, node_bytes_per_s=node_bytes, intra_latency_s=1e-5,
                          inter_latency_s=2e-5, gpus_per_node=8)
    return StageHardware(gpu=find_gpu("A100-SXM4-80GB"), tp_link=Link(200e9, 1e-5), dp_link=Link(node_bytes, 2e-5),
                         next_link=None, memory_limit_bytes=80e9, groups=groups)


def test_hsdp_links_by_hand():
    hw = _stage()
    # a block (tp x shard ranks) wider than the node: the stage's DP link for both
    assert shard_links(hw, 128) == (hw.dp_link, hw.dp_link)
    assert shard_links(hw, 16)[0] == hw.dp_link
    # HSDP 8 x 16: the shard group is one node (NVLink); 8 replicate all-reduces leave each node at once,
    # each over 1/8 of its 50 GB/s NIC
    shard, across = shard_links(hw, 8)
    assert shard == Link(200e9, 1e-5) and across == Link(50e9 / 8, 2e-5)
    # TP 2 x shard 4 fills the node: every one of its 8 GPUs is in a replicate ring of its own
    assert shard_links(hw, 2 * 4)[1] == Link(50e9 / 8, 2e-5)
    # a 2-rank block: the node's 4 blocks chain into 2 replicate rings (one per block position), each crossing the NIC
    assert shard_links(hw, 2)[1] == Link(50e9 / 2, 2e-5)
    # the whole DP group inside the node (its DP link is NVLink): all NVLink
    inside = replace(hw, dp_link=Link(200e9, 1e-5))
    assert shard_links(inside, 2) == (Link(200e9, 1e-5), Link(200e9, 1e-5))


def test_zero3_gradient_reduction_is_covered_by_the_backward_only():
    a = _llama()
    free = replace(default_params(), overlap_slowdown=0.0)     # overlap that costs the compute nothing
    w = lambda zero: Workload(arch=a, seq=16, mbs=1, tp=1, dp=8, pp=1, num_microbatches=1,
                              recipe=Recipe(zero=zero), params=free)
    # reduce-scatter 3 s behind a 4 s backward, weight all-gather 2 s behind the next 2 s forward:
    # ZeRO 1 hides all of it ...
    assert C.dp_exposed_s(w(1), 3.0, 2.0, 4.0, gather=2.0) == 0.0
    # ... FSDP only the backward, less the 1.5 s its own weight gathers hold the link: 5 - (4 - 1.5)
    assert C.dp_exposed_s(w(3), 5.0, 2.0, 4.0, busy=1.5) == 2.5


def test_overlapped_compute_slowdown_by_hand():
    # compute at 1/1.25 of its rate while a transfer is in flight (overlap_slowdown 0.25, share 0.8): 4 s of
    # compute beside a 2 s transfer -- the 2 s do 1.6 s of the work, 2.4 s remain: 4.4 s, 0.4 s more
    assert P.exposed_s(2.0, 4.0, 1 / 1.25) == pytest.approx(0.4)
    # a transfer longer than the slowed compute (6 s > 4 x 1.25): the pair takes the transfer, 2 s more
    assert P.exposed_s(6.0, 4.0, 1 / 1.25) == pytest.approx(2.0)
    # FSDP's gathers, 3 layers of 1 s compute, 0.5 s gathers: the first exposed 0.5, then 0.5 x 0.2 each
    assert P.fsdp_exposed_s(0.5, 1.0, 3, 1 / 1.25) == pytest.approx(0.5 + 2 * 0.1)
    assert P.fsdp_exposed_s(0.5, 1.0, 3) == 0.5                     # free overlap: only the first


def test_overlapped_gradient_reduction_slows_the_backward_by_hand():
    a = _llama()
    params = replace(default_params(), overlap_slowdown=0.25)
    w = lambda zero: Workload(arch=a, seq=16, mbs=1, tp=1, dp=8, pp=1, num_microbatches=1,
                              recipe=Recipe(zero=zero), params=params)
    # DDP: a 2 s all-reduce under a 4 s backward adds 2 x 0.25 / 1.25 = 0.4 s
    assert C.dp_exposed_s(w(0), 2.0, 1.0, 4.0) == pytest.approx(0.4)
    # FSDP: 2 s of reduce-scatters under the 4 - 1.5 s of backward its gathers leave: 0.4 s again
    assert C.dp_exposed_s(w(3), 2.0, 1.0, 4.0, busy=1.5) == pytest.approx(0.4)
    # a sync longer than the slowed cover (5 s > 2.5 x 1.25): only what the cover cannot hide, 2.5 s
    assert C.dp_exposed_s(w(3), 5.0, 1.0, 4.0, busy=1.5) == pytest.approx(2.5)
    # the catalog's constant is Lee et al. 2025's measured mean (analytic.yaml)
    assert default_params().overlap_slowdown == 0.189


def test_a_cluster_states_its_overlap_slowdown(tmp_path):
    from fasop.core.errors import SpecError
    from fasop.specs.load import load_cluster
    text = (DATA / "ibm_a100_400g_cluster.yaml").read_text()
    path = tmp_path / "c.yaml"
    path.write_text(text.replace("analytic:\n", "analytic:\n  overlap_slowdown: 0\n", 1))
    assert load_cluster(str(path)).analytic.overlap_slowdown == 0.0
    path.write_text(text.replace("analytic:\n", "analytic:\n  overlap_slowdown: 1.5\n", 1))
    with pytest.raises(SpecError, match=r"analytic\.overlap_slowdown: must be in \[0, 1\], got 1.5"):
        load_cluster(str(path))


ROW_HEADER = ("name,num_layers,hidden_size,num_attention_heads,seq_len,vocab_size,gpu,num_gpus,tp,pp,dp,zero,"
              "global_batch_size,micro_batch_size,recompute,recompute_num_layers,fused_elementwise,"
              "measured_seconds_per_iter")


def _run(tmp_path, *rows):
    path = tmp_path / "runs.csv"
    path.write_text(ROW_HEADER + "\n" + "\n".join(rows) + "\n")
    return {p.row["name"]: p.row["predicted_seconds_per_iter"] for p in validate(path).predictions}


def test_a_zero3_full_row_recomputes_every_layer_and_eager_kernels_cost(tmp_path):
    # H100's validate_software picks the fewest recomputed layers that fit for a "full" row (NeMo's
    # recipes); a ZeRO-3 row is a PyTorch FSDP stack whose full AC checkpoints every block
    by = _run(tmp_path, "empty,8,2048,16,4096,32000,H100-SXM,8,1,1,8,3,8,1,full,,1,1.0",
              "all,8,2048,16,4096,32000,H100-SXM,8,1,1,8,3,8,1,full,8,1,1.0",
              "eager,8,2048,16,4096,32000,H100-SXM,8,1,1,8,3,8,1,full,8,0,1.0")
    assert by["empty"] == by["all"]
    assert by["eager"] > by["all"]


def test_a_bad_fused_elementwise_cell_is_one_clear_error(tmp_path):
    from fasop.core.errors import FasopError
    with pytest.raises(FasopError) as err:
        _run(tmp_path, "x,8,2048,16,4096,32000,H100-SXM,8,1,1,8,3,8,1,full,8,2,1.0")
    assert "fused_elementwise" in str(err.value) and "line 2" in str(err.value)


def test_fsdp_root_unit_by_hand():
    # PyTorch FSDP wraps each block; the embedding, final norm and head stay in the root unit: 32000 x 1024
    # embedding + 32000 x 1024 head + 1024 norm. Gathered before anything computes, kept for the backward
    # (not re-gathered), reduced once the whole backward is done.
    a = _llama(num_layers=4, hidden_size=1024, num_attention_heads=8, num_kv_heads=8, ffn_hidden_size=2816,
               vocab_size=32000, tied_embeddings=False)
    params = replace(default_params(), overlap_slowdown=0.0)   # prefetched gathers hidden outright
    w = Workload(arch=a, seq=2048, mbs=1, tp=1, dp=8, pp=1, num_microbatches=1, recipe=Recipe(zero=3), params=params)
    root = C.fsdp_root_params(w, 0)
    assert root == 32000 * 1024 * 2 + 1024
    assert C.fsdp_root_params(replace(w, recipe=Recipe(zero=1)), 0) == 0.0
    assert C.fsdp_root_params(replace(w, arch=replace(a, tied_embeddings=True)), 0) == 32000 * 1024 + 1024   # one table
    stage = C.stage_params(w, 4, True, True)
    assert stage == 4 * 12847104 + root
    link = Link(1e11, 0.0)
    ring = lambda size: 7 / 8 * size / 1e11   # all-gather / reduce-scatter over 8 ranks, no latency
    one = ring(12847104 * 2)                  # one block's bf16 weights
    # forward: the root's gather and the first block's exposed, the three later ones behind 1 s of compute;
    # backward: the first block's gather only
    fwd, bwd = C.zero3_gather_s(w, stage, link, 4, 1.0, 1.0, root)
    assert fwd == pytest.approx(ring(root * 2) + one) and bwd == pytest.approx(one)
    # gradients (fp32, 4 bytes): the blocks' reduce-scatters hide in 1 s of backward, the root's does not
    hw = StageHardware(gpu=find_gpu("A100-SXM4-80GB"), tp_link=link, dp_link=link, next_link=None,
                       memory_limit_bytes=80e9)
    assert params.gradient_reduce_bytes["bf16"] == 4
    total, exposed = C.fsdp_sync_s(w, stage, root, 1.0, 1.0, hw)
    assert total == pytest.approx(ring(stage * 4)) and exposed == pytest.approx(ring(root * 4))


def test_compiled_complex_rope_by_hand():
    # torch.compile leaves a complex-multiply RoPE (torchtitan's view_as_complex) to eager aten kernels: the
    # eager complex count, 16 bytes per Q / K element beyond the fused kernel's read and write.
    # b 1, s 10, q 64, kv 16: 16 x 10 x 80 = 12800
    from fasop.estimators.analytic.eager import compiled_rope_extra_bytes
    assert compiled_rope_extra_bytes(_llama(), 1, 10, 1) == 16 * 10 * 80
    assert compiled_rope_extra_bytes(_llama(), 1, 10, 2) == 16 * 10 * 80 / 2       # heads split over tp 2
    a, gpu = _llama(num_layers=4, hidden_size=1024, num_attention_heads=8, num_kv_heads=2, ffn_hidden_size=2816), \
        find_gpu("A100-SXM4-80GB")
    w = lambda flag: Workload(arch=a, seq=2048, mbs=1, tp=1, dp=8, pp=1, num_microbatches=1, recipe=Recipe(zero=3),
                              params=replace(default_params(), compiled_rope=flag))
    link = Link(1e11, 1e-5)
    (f0, b0), (f1, b1) = C.layer_s(w(False), gpu, link), C.layer_s(w(True), gpu, link)
    bandwidth = gpu.memory_bytes_per_s * gpu.memory_share(w(True).params)
    extra = 16 * 2048 * (1024 + 256) / bandwidth    # q 1024, kv 2 heads of 128
    assert f1 - f0 == pytest.approx(extra) and b1 - b0 == pytest.approx(2 * extra)   # backward: twice the bytes


def test_validate_compiled_fsdp_row_keeps_complex_rope_eager(tmp_path):
    # a compiled (fused_elementwise 1) ZeRO-3 row is a PyTorch FSDP stack: a complex RoPE is charged (Inductor
    # runs complex ops as aten kernels), a real-valued one (FMS's matrix) fuses; the same row as a
    # Megatron-style ZeRO-1 run is charged neither way
    rows = (DATA / "fsdp_ibm_pytorch_blog.csv").read_text().splitlines()
    header, cells = rows[0].split(","), rows[1].split(",")
    cells[header.index("fused_elementwise")] = "1"
    text = (DATA / "ibm_a100_400g_cluster.yaml").read_text().replace("fused_elementwise: false", "fused_elementwise: true")

    def predicted(rope, zero):
        (tmp_path / f"{rope}.yaml").write_text(text.replace("eager_rope: matrix", f"eager_rope: {rope}"))
        row = list(cells)
        row[header.index("cluster")], row[header.index("zero")] = f"{rope}.yaml", zero
        row[header.index("dp_shard")] = "8" if zero == "3" else ""
        (tmp_path / "runs.csv").write_text("\n".join([rows[0], ",".join(row)]) + "\n")
        return validate(tmp_path / "runs.csv").predictions[0].row["predicted_seconds_per_iter"]

    assert predicted("complex", "3") > predicted("matrix", "3")
    assert predicted("complex", "1") == predicted("matrix", "1")


def test_the_root_unit_stays_gathered_in_memory_too():
    """FSDP's root unit (embedding, final norm, head: torchtitan's fully_shard(model)) is gathered before
    the forward and kept through the backward: beside its shard, the rest of it in 16-bit on every GPU.
    Llama-3-8B (V 128,256, h 4,096, untied): 2 V h + h = 1,050,677,248 parameters, whole in 16 bits on every GPU
    (PyTorch FSDP's shard is the fp32 master, counted with the optimizer: no 16-bit shard of it besides)."""
    from dataclasses import replace
    from fasop.estimators.analytic import memory as M
    from fasop.estimators.analytic.layers import Recipe, Workload
    from fasop.specs.catalog import default_params
    from fasop.specs.load import load_model
    a = load_model("llama-3-8b").architecture
    w = Workload(arch=a, seq=8192, mbs=1, tp=1, dp=8, pp=1, num_microbatches=1, recipe=Recipe(zero=3),
                 params=default_params())
    root = 2 * 128_256 * 4_096 + 4_096
    assert M.root_params(w, 0) == root
    one = replace(w, recipe=Recipe(zero=1))
    fsdp, zero1 = M.stage_memory(w, 32, 0).weights, M.stage_memory(one, 32, 0).weights
    unit = sum(M.stage_param_split(w, 1, False, False))
    # no 16-bit shards: the gathered units and the root only
    assert fsdp == pytest.approx(2 * unit * (2 + w.params.gradient_reduce_bytes["bf16"]) + root * 2)
    assert zero1 == pytest.approx(M.stage_params(w, 32, True, True) * 2)   # ZeRO 1: every weight, nothing gathered


FSDP_ROW = ("name,num_layers,hidden_size,num_attention_heads,num_kv_heads,seq_len,vocab_size,ffn_hidden_size,"
            "gated_mlp,gpu,num_gpus,tp,pp,dp,zero,global_batch_size,micro_batch_size,precision,recompute{extra},"
            "measured_seconds_per_iter\n"
            "r,32,4096,32,8,8192,128256,14336,1,A100-SXM4-80GB,16,{tp},1,{dp},{zero},{gbs},1,bf16,none{cells},3.0\n")


def _fsdp_row(tmp_path, name: str, *, zero: int = 3, tp: int = 1, cells: str = "", gpu: str = "") -> dict:
    extra = ",fused_attention,overlap_grad_reduce,fused_elementwise" if cells else ""
    path = tmp_path / name
    text = FSDP_ROW.format(extra=extra, tp=tp, dp=16 // tp, zero=zero, gbs=16 // tp, cells="," + cells if cells else "")
    path.write_text(text.replace("A100-SXM4-80GB", gpu) if gpu else text)
    return validate(path).predictions[0].row


def test_a_zero3_row_without_software_cells_is_the_pytorch_fsdp_stack(tmp_path):
    # A100's validate_software is its Megatron-era runs' (no FlashAttention, reduction after the backward);
    # an FSDP row leaving the cells empty ran torchtitan / fms-fsdp: SDPA flash, overlapped
    # reduce-scatter, eager elementwise -- the same estimate as the row that states 1, 1, 0
    bare = _fsdp_row(tmp_path, "bare.csv")
    stated = _fsdp_row(tmp_path, "stated.csv", cells="1,1,0")
    assert bare["predicted_seconds_per_iter"] == stated["predicted_seconds_per_iter"]
    old = _fsdp_row(tmp_path, "old.csv", cells="0,0,0")
    assert old["predicted_seconds_per_iter"] > 1.05 * bare["predicted_seconds_per_iter"]


def test_a_zero1_row_keeps_the_gpus_published_software(tmp_path):
    # the same row as ZeRO 1 is a Megatron run: A100's validate_software (unfused attention, no overlap)
    bare = _fsdp_row(tmp_path, "bare.csv", zero=1)
    megatron_era = _fsdp_row(tmp_path, "era.csv", zero=1, cells="0,0,1")
    assert bare["predicted_seconds_per_iter"] == megatron_era["predicted_seconds_per_iter"]


def test_a_zero3_row_with_tp_is_sequence_parallel(tmp_path):
    # torchtitan's TP shards the norms' sequence by default; A100's "sequence_parallel: false" is not it
    assert _fsdp_row(tmp_path, "tp.csv", tp=2)["sequence_parallel"] == 1
    assert _fsdp_row(tmp_path, "tp1.csv", tp=2, zero=1)["sequence_parallel"] == 0


def test_a_zero3_row_on_blackwell_is_megatron_fsdp(tmp_path):
    # gpus.yaml GB200 `megatron_fsdp`: Megatron-Bridge's FSDP recipes there shard with Megatron-FSDP, whose
    # Transformer Engine layers keep fused kernels -- not the PyTorch stack's eager elementwise ops
    bare = _fsdp_row(tmp_path, "bare.csv", gpu="GB200")
    assert bare["predicted_seconds_per_iter"] == _fsdp_row(tmp_path, "te.csv", gpu="GB200",
                                                           cells="1,1,1")["predicted_seconds_per_iter"]
    assert bare["predicted_seconds_per_iter"] < _fsdp_row(tmp_path, "eager.csv", gpu="GB200",
                                                          cells="1,1,0")["predicted_seconds_per_iter"]


def test_an_eager_pytorch_loss_holds_twelve_bytes_a_logit_by_hand():
    """torchtitan's eager F.cross_entropy(pred.float(), ...) keeps the fp32 log-softmax and, in its backward, the
    fp32 gradient in and out: 12 bytes a logit on the last stage where Megatron-Core's in-place vocab-parallel
    loss keeps 4 (Korthikanti). Llama-3-8B, MBS 2 x 8192 tokens, V 128,256: 8 x 2 x 8192 x 128,256 bytes more,
    15.66 GiB -- what the H100 rows of fsdp_torchtitan_issues_memory.csv measure above the model without it."""
    from fasop.estimators.analytic import memory as M
    from fasop.specs.load import load_model
    a = load_model("llama-3-8b").architecture
    eager = replace(default_params(), fused_elementwise=False)
    w = Workload(arch=a, seq=8192, mbs=2, tp=1, dp=16, pp=1, num_microbatches=1, recipe=Recipe(zero=3), params=eager)
    compiled = replace(w, params=replace(eager, fused_elementwise=True))
    megatron = replace(w, params=replace(eager, megatron_fsdp=True))
    zero1 = replace(w, recipe=Recipe(zero=1))
    assert (M.loss_bytes(w), M.loss_bytes(compiled), M.loss_bytes(megatron), M.loss_bytes(zero1)) == (12, 4, 4, 4)
    extra = M.stage_memory(w, 32, 0).activations - M.stage_memory(compiled, 32, 0).activations
    assert extra == 8 * 2 * 8192 * 128_256
    assert extra / 2**30 == pytest.approx(15.66, abs=0.01)


def test_a_zero3_row_that_runs_eager_is_pytorch_fsdp_on_blackwell_too(tmp_path):
    """GB200's FSDP rows default to Megatron-FSDP (the published recipes'), but a row stating eager elementwise
    ops (fused_elementwise 0) ran PyTorch's stack -- Megatron-Core's kernels are Transformer Engine's fused ones:
    its eager loss (12 bytes a logit) and the fp32 master shard as the parameter (torchtitan on Crusoe's GB200)."""
    path = tmp_path / "runs.csv"
    rows = (DATA / "fsdp_torchtitan_issues_memory.csv").read_text().splitlines()
    first = next(r for r in rows if "68xGB200" in r)
    path.write_text("\n".join([rows[0], first, first.replace(",1,1,0,pretrain,", ",1,1,1,pretrain,")]) + "\n")
    eager, fused = validate(path).predictions
    gib = 8 * 5 * 8192 * 128_256 / 2**30      # 8 bytes a logit more, MBS 5 (the shards differ by < 1 GiB)
    assert eager.row["predicted_peak_mem_gib"] - fused.row["predicted_peak_mem_gib"] == pytest.approx(gib, abs=1.0)
    assert eager.row["predicted_peak_mem_gib"] == pytest.approx(158.61, rel=0.02)


def test_a_zero3_row_with_tp_on_h100_does_not_overlap_its_tp_collectives(tmp_path):
    # H100's validate_software tp_overlap 0.5 is NeMo's userbuffers; torchtitan's async TP is off by default
    fsdp = _fsdp_row(tmp_path, "fsdp.csv", tp=2, gpu="H100-SXM")
    path = tmp_path / "stated.csv"
    path.write_text((tmp_path / "fsdp.csv").read_text().replace("recompute,", "recompute,tp_overlap,")
                    .replace("bf16,none,", "bf16,none,0,"))
    assert validate(path).predictions[0].row["predicted_seconds_per_iter"] == fsdp["predicted_seconds_per_iter"]
    path.write_text((tmp_path / "fsdp.csv").read_text().replace("recompute,", "recompute,tp_overlap,")
                    .replace("bf16,none,", "bf16,none,0.5,"))
    assert validate(path).predictions[0].row["predicted_seconds_per_iter"] < fsdp["predicted_seconds_per_iter"]


def test_megatron_fsdp_copies_nothing(tmp_path, monkeypatch):
    # Megatron-FSDP (a ZeRO-3 row on GB200) gathers into its buckets and accumulates into its reduce-scatter
    # buffer: the row costs what the same FSDP2 row costs with FSDP2's copy-out / copy-in taken away
    from fasop.estimators.analytic import cost as C
    megatron = _fsdp_row(tmp_path, "m.csv", gpu="GB200")["predicted_seconds_per_iter"]
    monkeypatch.setattr(C.P, "fsdp_copy_bytes", lambda *a: (0.0, 0.0))
    monkeypatch.setattr(C.P, "fsdp1_copy_bytes", lambda *a, **k: (1e30, 1e30))   # must not be charged either
    C.layer_s.cache_clear()
    assert _fsdp_row(tmp_path, "m2.csv", gpu="GB200")["predicted_seconds_per_iter"] == megatron
    monkeypatch.undo()
    C.layer_s.cache_clear()
    a100 = _fsdp_row(tmp_path, "a.csv", cells="1,1,1")["predicted_seconds_per_iter"]
    monkeypatch.setattr(C.P, "fsdp_copy_bytes", lambda *a: (0.0, 0.0))
    C.layer_s.cache_clear()
    assert _fsdp_row(tmp_path, "a2.csv", cells="1,1,1")["predicted_seconds_per_iter"] < a100   # PyTorch FSDP2 copies
    C.layer_s.cache_clear()


@pytest.mark.parametrize("name, mape", [("fsdp_ibm_pytorch_blog.csv", 7.5), ("fsdp_torchtitan_docs_a100.csv", 6.5)])
def test_the_eager_fsdp_sets_without_software_cells_are_predicted_alike(tmp_path, name, mape):
    # their rows state the PyTorch FSDP stack's software (FlashAttention, overlapped reduction, eager elementwise);
    # with those cells dropped the rows take FSDP_STACK and predict the same (before: A100's Megatron-era
    # validate_software, 24.8 % and 17.2 %)
    bare_set = without_columns(name, ("fused_attention", "overlap_grad_reduce", "fused_elementwise"), tmp_path)
    bare, stated = validate(bare_set).mape, validate(DATA / name).mape
    assert bare == pytest.approx(stated) and bare <= mape
