"""Pre-Ampere GPUs on Ethernet (V100 and T4 cloud nodes, GPT-2-medium class, fp16): the physics of
fasop/estimators/analytic/overheads.py and the V100/T4 catalog facts, through `fasop validate` rows
in the mixed-cluster format (aws.yaml's p3 = p3.8xlarge, g4dn = g4dn.12xlarge), uncalibrated.

The sanity band for one T4 (test_one_t4_lands_in_the_band_of_published_rates), per sequence of
GPT-2 medium (L 24, h 1024, a 16, s 1024, V 50257), fp16, forward + backward:
  FLOPs F = 3 [L (24 s h^2 + 4 s^2 h) + 2 s h V] = 2.48 TFLOP (unfused core: all s x s scores).
  low  = F at T4's sustained 24 TFLOP/s (cuBLAS 4096^3 fp16 run continuously, NVIDIA developer
         forum t/264462: the 70 W cap) = 103 ms, + the s x s score bytes Megatron's fused
         scale-mask-softmax moves (13 forward + 26 backward bytes a score, a s^2 scores a layer)
         at the nominal 320 GB/s = 49 ms: 152 ms;
  high = F at 22 TFLOP/s (the sustained rate less wave quantisation on 1024-wide GEMMs) = 113 ms,
         + HF-eager PyTorch's unfused bytes at the measured 240 GB/s copy rate (chsasank/device-
         benchmarks): scores 68 B, gelu_new 36 x 3 B an element, fp32 LayerNorms, fp32 loss
         (~200 ms), + the optimizer step: ~330 ms.
A Megatron-style fp16 run (what fasop's constants describe) must land inside [152, 330] ms.
"""

import csv
import io

import pytest

from fasop.estimators.analytic import overheads
from fasop.report.validate import validate
from fasop.specs.catalog import default_params, find_gpu
from fasop.specs.load import load_cluster

HEADER = ("name,num_layers,hidden_size,num_attention_heads,seq_len,vocab_size,ffn_hidden_size,tied_embeddings,"
          "gpu,cluster,nodes,num_gpus,tp,pp,dp,global_batch_size,micro_batch_size,precision,recompute,"
          "fused_attention,layers_per_stage,stage_gpus,measured_seconds_per_iter")
GPT2M = "24,1024,16,1024,50257,4096,1"
FAST = """\
estimator: analytic
node_types:
  p3:
    instance: p3-on-100g
    gpu: V100-SXM2-16GB
    gpus_per_node: 4
    inter_node_gbit_per_s: 100
    usd_per_hour: 0
    price_date: 2025-01-01
    price_source: none
  g4dn:
    instance: g4dn-on-100g
    gpu: T4
    gpus_per_node: 4
    inter_node_gbit_per_s: 100
    usd_per_hour: 0
    price_date: 2025-01-01
    price_source: none
"""


def row(name, nodes="", n=1, tp=1, pp=1, dp=1, mbs=1, split="", stages="", gpu="", cluster="aws", fused=""):
    where = f'{gpu},,,' if gpu else f'{gpu},{cluster},"{nodes}",'
    return (f"{name},{GPT2M},{where}{n},{tp},{pp},{dp},32,{mbs},fp16,none,{fused},{split},{stages},1.0")


def predict(tmp_path, *rows) -> dict[str, float]:
    (tmp_path / "fast.yaml").write_text(FAST)
    path = tmp_path / "runs.csv"
    path.write_text("\n".join([HEADER, *rows]) + "\n")
    return {p.row["name"]: p.row["predicted_seconds_per_iter"] for p in validate(path).predictions}


def test_aws_has_the_p3_and_g4dn_nodes():
    aws = load_cluster("aws")
    p3, g4dn = aws.node_types["p3"], aws.node_types["g4dn"]
    assert (p3.gpu, p3.gpus_per_node, p3.inter_node_bytes_per_s) == ("V100-SXM2-16GB", 4, 10e9 / 8)
    assert (g4dn.gpu, g4dn.gpus_per_node, g4dn.inter_node_bytes_per_s) == ("T4", 4, 50e9 / 8)
    assert p3.usd_per_hour == 12.24 and g4dn.usd_per_hour == 3.912


def test_one_t4_lands_in_the_band_of_published_rates(tmp_path):
    """Seconds per sequence of GPT-2 medium on one T4, micro-batch 1-8 (module docstring: the band),
    the time per sequence not rising with the micro-batch (fuller waves, the same fixed costs)."""
    t = predict(tmp_path, *(row(f"b{b}", gpu="T4", mbs=b) for b in (1, 2, 4, 8)))
    per_seq = [t[f"b{b}"] / 32 for b in (1, 2, 4, 8)]
    assert all(0.152 <= s <= 0.330 for s in per_seq), per_seq
    assert per_seq == sorted(per_seq, reverse=True)


def test_one_v100_is_faster_than_one_t4_by_their_rates(tmp_path):
    """V100: 0.67 x 125 = 84 TFLOP/s, 765 GB/s achieved; T4: 24 TFLOP/s, 240 GB/s: 2.5-3.5x faster
    on every part of the step (GEMMs 3.5x, memory-bound 3.2x, less wave loss on T4's 40 SMs)."""
    t = predict(tmp_path, row("v", gpu="V100-SXM2-16GB", mbs=4), row("t", gpu="T4", mbs=4))
    assert 2.5 <= t["t"] / t["v"] <= 3.6


def test_no_flash_attention_below_sm80(tmp_path):
    """A T4 or V100 row that does not state fused_attention runs the unfused path (the s x s scores
    through memory): the same as stating 0, slower than stating 1 (FlashAttention-1 / xformers)."""
    t = predict(tmp_path, row("empty", gpu="T4"), row("off", gpu="T4", fused="0"), row("on", gpu="T4", fused="1"))
    assert t["empty"] == t["off"] > 1.1 * t["on"]
    params = default_params()
    assert params.fused_attention
    assert not overheads.job_params(params, [find_gpu("A100-SXM4-80GB"), find_gpu("T4")]).fused_attention
    assert overheads.job_params(params, [find_gpu("A100-SXM4-80GB"), find_gpu("MI300X")]) is params


def test_search_runs_the_unfused_path_on_a_cluster_with_t4():
    from fasop.estimators.analytic.estimator import AnalyticEstimator
    from fasop.search.engine import parse_nodes
    from fasop.specs.load import load_model
    model, aws = load_model("qwen2.5-7b"), load_cluster("aws")
    with_t4 = AnalyticEstimator(model, aws, parse_nodes("p4d=1,g4dn=1", aws), {})
    a100_only = AnalyticEstimator(model, aws, parse_nodes("p4d=2", aws), {})
    assert not with_t4.params.fused_attention and a100_only.params.fused_attention


def test_tcp_sockets_on_slow_ethernet():
    """<= 50 Gbit/s: NCCL's socket transport, ~40 us a step, at most ~4 GB/s a node; faster networks
    keep analytic.yaml's (RDMA) figures."""
    p = default_params()
    eff = p.link_efficiency["network"]
    assert overheads.network_bytes_per_s(p, 10e9 / 8) == pytest.approx(10e9 / 8 * eff)
    assert overheads.network_bytes_per_s(p, 50e9 / 8) == overheads.SOCKET_MAX_BYTES_PER_S
    assert overheads.network_bytes_per_s(p, 100e9 / 8) == pytest.approx(100e9 / 8 * eff)
    assert overheads.network_latency_s(p, 10e9 / 8) == overheads.SOCKET_LATENCY_S
    assert overheads.network_latency_s(p, 400e9 / 8) == p.inter_node_latency_s


def test_a_mixed_stage_runs_at_its_t4_replicas_pace(tmp_path):
    """p3 then g4dn, dp 8: the one stage's replicas 0-3 on V100, 4-7 on T4. Never faster than all
    replicas on T4 with the same links (stage_gpus), and slower than all on V100."""
    plan = dict(nodes="p3=1,g4dn=1", n=8, dp=8, mbs=1)
    t = predict(tmp_path, row("mixed", **plan), row("t4", stages="T4", **plan),
                row("v100", stages="V100-SXM2-16GB", **plan))
    assert t["mixed"] >= t["t4"] * (1 - 1e-12) and t["mixed"] > t["v100"]


def test_a_pipeline_of_v100_then_t4_stages(tmp_path):
    """pp 2 over p3 then g4dn: the stated split with fewer blocks on the T4 stage is faster than the
    even split and than the same plan all on T4 (whose even split runs at the T4 stage's pace, like the
    mixed even split, but sends its activations over g4dn's 50 Gbit/s, not p3's 10)."""
    plan = dict(nodes="p3=1,g4dn=1", n=8, tp=4, pp=2, mbs=2)
    t = predict(tmp_path, row("16-8", split="16-8", **plan), row("12-12", split="12-12", **plan),
                row("all-t4", nodes="g4dn=2", n=8, tp=4, pp=2, mbs=2, split="12-12"))
    assert t["16-8"] < min(t["12-12"], t["all-t4"])
    assert t["12-12"] == pytest.approx(t["all-t4"], rel=0.05)


def test_network_bound_plans_gain_most_from_a_faster_network(tmp_path):
    """Pure data parallelism over 4 nodes all-reduces 0.71 GB of fp16 gradients over the network
    (2 (n-1)/n x 0.71 GB / 1.125 GB/s ~ 1.2 s on 10 GbE, ~0.1 s on 100 GbE); a 16-stage pipeline sends
    2 MB activations. Both are slower on 10 GbE than on 100 GbE, the data-parallel plan by far more."""
    t = predict(tmp_path,
                row("dp16-10g", nodes="p3=3,g4dn=1", n=16, dp=16),
                row("dp16-100g", nodes="p3=3,g4dn=1", n=16, dp=16, cluster="fast.yaml"),
                row("pp16-10g", nodes="p3=3,g4dn=1", n=16, pp=16),
                row("pp16-100g", nodes="p3=3,g4dn=1", n=16, pp=16, cluster="fast.yaml"))
    dp_gain, pp_gain = t["dp16-10g"] - t["dp16-100g"], t["pp16-10g"] - t["pp16-100g"]
    assert dp_gain > 0.5 and pp_gain > 0 and dp_gain > 10 * pp_gain


def test_tensor_parallelism_over_t4_pcie_costs_its_collectives(tmp_path):
    """Four T4s without P2P (0.35 of PCIe Gen3 x16 = 5.6 GB/s): tp 4 all-reduces 4 x b s h x 2 bytes a
    layer through host memory, so it is slower than dp 4 on the same node; on a p3 node (NVLink) tp 4
    costs far less against dp 4."""
    t = predict(tmp_path, row("t4-tp4", nodes="g4dn=1", n=4, tp=4, mbs=4), row("t4-dp4", nodes="g4dn=1", n=4, dp=4),
                row("v-tp4", nodes="p3=1", n=4, tp=4, mbs=4), row("v-dp4", nodes="p3=1", n=4, dp=4))
    assert t["t4-tp4"] > 1.3 * t["t4-dp4"]
    assert t["t4-tp4"] / t["t4-dp4"] > t["v-tp4"] / t["v-dp4"]


def test_the_stack_of_v100_and_t4_rows(tmp_path):
    """Rows that leave the plan's software empty get the 2021-22 stack: no sequence parallelism, no
    distributed optimizer (reported as the catalog's), gradients reduced after the backward."""
    path = tmp_path / "runs.csv"
    path.write_text(HEADER + "\n" + row("r", nodes="p3=1,g4dn=1", n=8, tp=2, pp=2, dp=2, mbs=2, split="14-10") + "\n")
    out = validate(path).predictions[0].row
    assert "sequence_parallel=0 (catalog)" in out["picked"] and "distributed_optimizer=0 (catalog)" in out["picked"]
    assert not find_gpu("T4").validate_software["overlap_grad_reduce"]
    assert not find_gpu("V100-SXM2-16GB").validate_software["overlap_grad_reduce"]


def test_sanity_table_is_printable(tmp_path, capsys):
    """The plans the hidden V100 + T4 runs look like, printed for the record (`pytest -s`)."""
    plans = [row("T4 x1 b4", gpu="T4", mbs=4),
             row("g4dn=1 dp4", nodes="g4dn=1", n=4, dp=4),
             row("g4dn=2 pp8", nodes="g4dn=2", n=8, pp=8),
             row("g4dn=4 dp4 pp4", nodes="g4dn=4", n=16, pp=4, dp=4, mbs=2),
             row("p3=1+g4dn=1 tp4 pp2 16-8", nodes="p3=1,g4dn=1", n=8, tp=4, pp=2, mbs=2, split="16-8"),
             row("p3=3+g4dn=1 pp4 dp4 7-7-7-3", nodes="p3=3,g4dn=1", n=16, pp=4, dp=4, split="7-7-7-3"),
             row("p3=3+g4dn=1 dp16", nodes="p3=3,g4dn=1", n=16, dp=16),
             row("p3=3+g4dn=1 pp16", nodes="p3=3,g4dn=1", n=16, pp=16)]
    t = predict(tmp_path, *plans)
    buf = io.StringIO()
    csv.writer(buf).writerows(sorted(t.items()))
    print(buf.getvalue())
    assert all(0.3 < v < 10 for v in t.values())


def test_gpus_without_bf16_search_in_fp16_by_default(tmp_path, monkeypatch, capsys):
    """V100 and T4 have no BF16 (catalog bf16_tflops null): a search without --precision trains in
    fp16 and says so in one note; --precision bf16 there is one line, exit 2; an A100 search stays
    bf16 with no note."""
    from fasop.cli import main

    monkeypatch.chdir(tmp_path)
    nodes = ["--model", "gpt2-medium", "--cluster", "aws", "--no-progress", "--top", "3"]
    assert main(["search", *nodes, "--nodes", "p3=1,g4dn=1", "--heterogeneous", "--out", "v.csv"]) == 0
    out = capsys.readouterr().out
    assert "note: precision fp16 with loss scaling: T4, V100-SXM2-16GB have no BF16" in out
    assert {r["precision"] for r in csv.DictReader(open("v.csv"))} == {"fp16"}
    assert main(["search", *nodes, "--nodes", "p3=1", "--precision", "bf16", "--out", "b.csv"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "V100-SXM2-16GB has no BF16 tensor cores" in err[0] and "--precision fp16" in err[0]
    assert not (tmp_path / "b.csv").exists()
    assert main(["search", *nodes, "--nodes", "p4d=1", "--out", "a.csv"]) == 0
    assert "precision fp16" not in capsys.readouterr().out
    assert {r["precision"] for r in csv.DictReader(open("a.csv"))} == {"bf16"}
