"""The analytic estimator against measured mixture-of-experts runs (Megatron-Bridge, 2026).

Each set is documented in tests/data/VALIDATION_SOURCES.md; the models are HF config.json files in
tests/data/hf/ named by the rows' `model` column. One parameter set (cluster_specs/catalog/
analytic.yaml + gpus.yaml) for all of them; a row states only its plan and the software the run had
(`moe_dispatcher`, `ep_overlap` where the source says). The bounds are what the model reaches
today (measured with `fasop validate tests/data/<set>.csv`), a little above: they keep the figures
from getting worse; the H100 set's is inside the issue's 10 %, the others are not yet -- docs/validate.md lists what the
model leaves out (CUDA graphs and other per-iteration framework costs of small runs, what else
makes the hybrid Mamba-2 steps slow beyond the scan's Blackwell rate, latent MoE).
"""

import os
from pathlib import Path

import pytest

from conftest import without_columns
from fasop.report.validate import validate

DATA = Path(__file__).resolve().parent / "data"

# set, MAPE bound %, max |error| bound %, rows
SETS = [
    # GB200 / GB300, MXFP8, EP 8-64 (performance-summary.md); its rows state the recipes' EP overlap and
    # HybridEP, GPT-OSS's unfused YaRN RoPE, bf16 dispatch, the Mamba scan's backward kernels and layout copies,
    # Blackwell's layer GEMM shares, the head's too, the Mamba scan at Hopper's rate on Blackwell, GPT-OSS's
    # 64-wide heads at cuDNN's rate for them, experts reduced over their EDP rings (9.8 % MAPE, max 21.2 %, mean -2.3 %;
    # issue: <= 10 %): docs/validate.md
    ("moe_megatron_bridge_perf_summary.csv", 10.0, 21.5, 10),
    ("moe_megatron_bridge_docs_h100.csv", 7.8, 16.5, 12),   # H100, Qwen3-30B-A3B EP16 and Nemotron-3-Nano EP8 (issue: <= 10 %)
    # H100, Moonlight-16B-A3B TP2 EP8, one micro-batch: host-bound, the counted host ops reach 68.7 % (max 70.3 %)
    ("moe_megatron_bridge_moonlight_h100.csv", 69.0, 70.5, 6),
    # Bridge model verification cards (examples/model_verification_cards/, runs not in the performance summary):
    # DeepSeek-V3 1024 H100 BF16 (+2.3 %: its node-limited routing), GPT-OSS-120B 64 GB200 BF16 (-38.8 %: eager,
    # alltoall), Qwen3-30B-A3B 32-256 GB300 MXFP8 weak scaling (16.0 % MAPE, max 38.9 %, mean +0.5 %)
    ("moe_megatron_bridge_verification_cards.csv", 16.5, 39.5, 5),
    # the cards' functional runs on real data with natural (unbalanced) routing, which fasop does not model: Qwen3-30B
    # H100 EP16 -36.4 %, GB200 EP8 MXFP8 -46.7 %, Moonlight H100 EP8 +2.6 % (28.6 % MAPE, mean -26.8 %)
    ("moe_megatron_bridge_cards_natural_routing.csv", 29, 47.5, 3),
    # NeMo AutoModel performance summary: PyTorch FSDP2 + EP (DeepEP, round-robin benchmark routing) on 8-256 H100
    # BF16, DeepSeek-V3, Kimi K2, Qwen3-30B, GPT-OSS 20B / 120B, Nemotron-3-Nano; fast on GPT-OSS (-19.9, -21.0 %),
    # which fasop says do not fit in 80 GB (14.3 % MAPE, max 21.0 %, mean -4.9 %)
    ("moe_automodel_h100.csv", 14.5, 21.5, 6),
    # NeMo 25.02 / 25.04 performance summaries: Mixtral-8x7B EP8 and Mixtral-8x22B TP2 PP4 CP8 EP8 at 64K on
    # B200 / GB200, FP8; the recipes drop and pad to capacity 1.0, balanced work (18.5 % MAPE, max 25.1 %, mean -18.5 %)
    ("moe_nemo_perf_summary.csv", 18.8, 25.5, 4),
    # latent MoE: Nemotron-3 Super on 64 H100 / GB200 / GB300 (BF16, MXFP8, NVFP4 with its recipe's 14 BF16 layers;
    # its BF16 modules are not expressible) and Ultra on 256 GB200 / GB300 (16.1 % MAPE, max 26.6 %, mean -14.2 %)
    ("moe_latent_megatron_bridge.csv", 16.5, 27, 9),
]


@pytest.mark.parametrize("name, mape, worst, rows", SETS)
def test_moe_set_within_its_bound(name, mape, worst, rows):
    report = validate(DATA / name)
    assert len(report.predictions) == rows
    assert report.mape <= mape, f"{name}: MAPE {report.mape:.1f} % above {mape} %"
    assert report.max_error <= worst, f"{name}: max |error| {report.max_error:.1f} % above {worst} %"


def test_node_deduplicated_dispatch_is_faster_across_nodes():
    # the same Qwen3-30B-A3B EP16 plan on two H100 nodes: HybridEP (flex) below the plain alltoall,
    # and EP overlap below no overlap, as the measured 24.7 s / 41.3 s and 21.0 s / 24.7 s are
    report = validate(DATA / "moe_megatron_bridge_docs_h100.csv")
    by = {p.row["name"]: p.row["predicted_seconds_per_iter"] for p in report.predictions}
    flex_off = by["Qwen3-30B-A3B H100x16 HybridEP EP-overlap off"]
    assert flex_off < by["Qwen3-30B-A3B H100x16 alltoall no overlap no CUDA graphs"]
    assert by["Qwen3-30B-A3B H100x16 HybridEP EP-overlap on (validation)"] < flex_off


HEADER = ("name,model,gpu,num_gpus,tp,pp,cp,dp,ep,etp,zero,seq_len,global_batch_size,micro_batch_size,"
          "precision,recompute,measured_seconds_per_iter")


def _csv(tmp_path, row: str, header: str = HEADER) -> Path:
    (tmp_path / "hf").mkdir(parents=True, exist_ok=True)
    (tmp_path / "hf" / "qwen3-30b-a3b.json").write_bytes((DATA / "hf" / "qwen3-30b-a3b.json").read_bytes())
    path = tmp_path / "runs.csv"
    path.write_text(header + "\n" + row + "\n")
    return path


def test_a_model_row_plans_its_config_with_cp_ep_and_fsdp(tmp_path):
    # Qwen3-30B-A3B on 16 H100: TP1 CP2 DP8, EP 16 carved out of cp x dp (Megatron-Core folding), FSDP
    report = validate(_csv(tmp_path, "q,hf/qwen3-30b-a3b.json,H100-SXM,16,1,1,2,8,16,1,3,8192,64,1,bf16,full,10"))
    (p,) = report.predictions
    assert (p.row["cp"], p.row["ep"], p.row["zero"], p.row["model"]) == (2, 16, 3, "hf/qwen3-30b-a3b.json")
    assert p.row["predicted_seconds_per_iter"] > 0


@pytest.mark.parametrize("row, message", [
    ("q,hf/qwen3-30b-a3b.json,H100-SXM,16,1,1,2,4,16,1,1,8192,64,1,bf16,full,10", "num_gpus: tp x pp x cp x dp = 8"),
    ("q,hf/qwen3-30b-a3b.json,H100-SXM,16,1,1,1,16,12,1,1,8192,64,1,bf16,full,10", "ep: ep = 12"),
    ("q,hf/qwen3-30b-a3b.json,B300,16,1,1,1,16,16,1,1,8192,64,1,nvfp4x,full,10", "precision: expected one of"),
    ("q,hf/qwen3-30b-a3b.json,H100-SXM,16,1,1,1,16,16,1,1,8192,64,1,mxfp8,full,10", "H100-SXM has no MXFP8"),
    ("q,hf/missing.json,H100-SXM,16,1,1,1,16,16,1,1,8192,64,1,bf16,full,10", "line 2: model:"),
    ("q,hf/qwen3-30b-a3b.json,H100-SXM,16,1,1,1,16,16,1,1,8192,64,1,bf16,selective:attn,10", "unknown module 'attn'"),
    ("q,hf/qwen3-30b-a3b.json,H100-SXM,16,1,1,1,16,16,1,1,8192,64,1,bf16,full,10,4",
     "bf16_layers: 4 needs a low-precision row (fp8, mxfp8, nvfp4), the row's precision is bf16"),
    ("q,hf/qwen3-30b-a3b.json,H100-SXM,16,1,1,1,16,16,1,1,8192,64,1,fp8,full,10,49", "bf16_layers: 49: the model has 48"),
    ("q,hf/qwen3-30b-a3b.json,H100-SXM,16,1,1,1,16,16,1,1,8192,64,1,fp8,full,10,-1", "bf16_layers"),
])
def test_a_bad_moe_row_is_one_clear_error(tmp_path, row, message):
    from fasop.core.errors import FasopError
    header = HEADER + ",bf16_layers" if row.count(",") > HEADER.count(",") else HEADER
    with pytest.raises(FasopError, match=None) as err:
        validate(_csv(tmp_path, row, header))
    assert message in str(err.value)


def test_a_model_row_names_a_config_its_folder_or_a_hub_id(tmp_path, monkeypatch):
    # the same Qwen3-30B-A3B four ways: config.json beside the CSV, the folder holding it (a Hub snapshot's
    # layout), the shipped spec's name, its Hub repository id (no such path: the spec named as its last part)
    (tmp_path / "snapshots" / "qwen3").mkdir(parents=True)
    (tmp_path / "snapshots" / "qwen3" / "config.json").write_bytes((DATA / "hf" / "qwen3-30b-a3b.json").read_bytes())
    monkeypatch.chdir(tmp_path.parent)   # the folder is found beside the CSV, not in the working directory
    plan = ",H100-SXM,16,1,1,1,16,16,1,1,4096,64,1,bf16,full,10"
    rows = "\n".join(f"{m}{plan}".replace(",", f"{i},", 1) for i, m in enumerate(
        ("q,hf/qwen3-30b-a3b.json", "q,snapshots/qwen3", "q,qwen3-30b-a3b", "q,Qwen/Qwen3-30B-A3B")))
    seconds = {p.row["predicted_seconds_per_iter"] for p in validate(_csv(tmp_path, rows)).predictions}
    assert len(seconds) == 1


@pytest.mark.parametrize("model, message", [
    ("hf/missing.json", "hf/missing.json: no such file or folder (a `model` path is read from the CSV's folder)"),
    ("hf", "hf: folder holds no config.json"),
    ("moonshotai/Kimi-K2-Instruct", "moonshotai/Kimi-K2-Instruct: no such file or folder (a `model` path is read from "
                                    "the CSV's folder), nor a shipped model named 'Kimi-K2-Instruct' (fasop list models)"),
    ("/nonexistent/config.json", "/nonexistent/config.json: no such file or folder"),
    ("a" * 300, "no such file or folder"),              # a name the file system refuses (ENAMETOOLONG): no traceback
])
def test_a_model_cell_that_names_nothing_says_where_it_looked(tmp_path, model, message):
    from fasop.core.errors import FasopError
    path = _csv(tmp_path, f"q,{model},H100-SXM,16,1,1,1,16,16,1,1,4096,64,1,bf16,full,10")
    (tmp_path / "hf" / "qwen3-30b-a3b.json").unlink()
    with pytest.raises(FasopError) as err:
        validate(path)
    assert message in str(err.value) and "line 2: model:" in str(err.value) and "\n" not in str(err.value)
    assert "CSV's folder" not in str(err.value) or not model.startswith("/")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
@pytest.mark.parametrize("model", ["pipe.json", "pipe"])
def test_a_model_cell_naming_a_pipe_says_so(tmp_path, model):
    """A FIFO (or a device) is there but holds no config to read: not 'no such file', and never a read that blocks."""
    from fasop.core.errors import FasopError
    path = _csv(tmp_path, f"q,{model},H100-SXM,16,1,1,1,16,16,1,1,4096,64,1,bf16,full,10")
    os.mkfifo(tmp_path / model)
    with pytest.raises(FasopError, match=f"line 2: model: .*{model}: not a regular file or folder$"):
        validate(path)


def test_a_model_cell_is_never_read_from_the_working_directory(tmp_path, monkeypatch):
    # a folder `Qwen/Qwen3-30B-A3B` in the working directory holding another model's config does not stand in
    # for the cell: not beside the CSV, the cell is the shipped spec its Hub id names
    work = tmp_path / "work"
    (work / "Qwen" / "Qwen3-30B-A3B").mkdir(parents=True)
    (work / "Qwen" / "Qwen3-30B-A3B" / "config.json").write_bytes((DATA / "hf" / "qwen3-235b-a22b.json").read_bytes())
    monkeypatch.chdir(work)
    plan = ",H100-SXM,16,1,1,1,16,16,1,1,4096,64,1,bf16,full,10"
    rows = f"a,Qwen/Qwen3-30B-A3B{plan}\nb,qwen3-30b-a3b{plan}"
    seconds = [p.row["predicted_seconds_per_iter"] for p in validate(_csv(tmp_path / "csv", rows)).predictions]
    assert seconds[0] == seconds[1]


def test_a_model_row_leaves_the_architecture_columns_empty(tmp_path):
    from fasop.core.errors import FasopError
    path = _csv(tmp_path, "q,hf/qwen3-30b-a3b.json,H100-SXM,16,1,1,1,16,16,1,1,8192,64,1,bf16,full,10,48",
                HEADER + ",num_layers")
    with pytest.raises(FasopError, match="num_layers: a row naming a `model` leaves the architecture columns empty"):
        validate(path)


def test_gb200_rows_default_to_the_flex_dispatcher_their_recipes_ran(tmp_path):
    # gpus.yaml GB200 moe_software: Megatron-Bridge's GB200 recipes run the flex HybridEP dispatcher; a row that
    # leaves moe_dispatcher empty is costed as one that says hybridep, not as alltoall
    row = "q,hf/qwen3-30b-a3b.json,GB200,8,1,1,1,8,8,1,1,4096,64,1,bf16,none,10,full_iteration"
    predicted = lambda header, r: validate(_csv(tmp_path, r, header)).predictions[0].row["predicted_seconds_per_iter"]
    empty = predicted(HEADER + ",cuda_graphs", row)
    flex = predicted(HEADER + ",cuda_graphs,moe_dispatcher", row + ",hybridep")
    plain = predicted(HEADER + ",cuda_graphs,moe_dispatcher", row + ",alltoall")
    assert empty == flex < plain     # the alltoall adds its sort of the received rows by local expert (16 each)
    eager = predicted(HEADER + ",cuda_graphs,moe_dispatcher", row.rsplit(",", 1)[0] + ",none,alltoall")
    assert eager > plain  # eager on the Grace host, the layer's kernel issue outlasts its GPU work


SOFTWARE = ",moe_dispatcher,ep_overlap,cuda_graphs,main_grads"


@pytest.mark.parametrize("gpu, precision, recipe", [
    # Megatron-Bridge's performance recipes for the GPU and precision (gpus.yaml moe_software; the survey in
    # tests/data/VALIDATION_SOURCES.md): MXFP8 on GB200 is the full-iteration recipe with EP overlap; H100 / B200,
    # whose recipes split, Megatron-Bridge's MoE playbook's DeepEP
    ("GB200", "mxfp8", "hybridep,1,full_iteration,bf16"),
    ("GB300", "bf16", 'hybridep,0,"attn,moe_router,moe_preprocess",bf16'),
    ("B300", "mxfp8", "hybridep,0,full_iteration,bf16"),
    ("B300", "bf16", "hybridep,0,none,bf16"),
    ("B200", "mxfp8", "deepep,0,none,bf16"),
    ("H100-SXM", "fp8", "deepep,0,none,bf16"),
    ("H200", "bf16", "deepep,0,none,bf16"),
    ("A100-SXM4-80GB", "bf16", "alltoall,0,none,fp32"),   # no recipe: Megatron-Core's defaults
])
def test_an_moe_row_that_does_not_say_runs_its_gpus_recipe(tmp_path, gpu, precision, recipe):
    # Qwen3-30B-A3B EP 16 over two nodes (four GB trays): the dispatcher, the EP overlap and the gradient dtype all move it
    nodes = "16,1,1,1,16,16,1,1,4096,64,1"
    row = f"q,hf/qwen3-30b-a3b.json,{gpu},{nodes},{precision},none,10"
    predicted = lambda header, r: validate(_csv(tmp_path, r, header)).predictions[0].row["predicted_seconds_per_iter"]
    assert predicted(HEADER + SOFTWARE, row + ",,,,") == predicted(HEADER + SOFTWARE, row + "," + recipe)
    other = "alltoall,0,none,fp32" if recipe != "alltoall,0,none,fp32" else "hybridep,0,none,bf16"
    assert predicted(HEADER + SOFTWARE, row + ",,,,") != predicted(HEADER + SOFTWARE, row + "," + other)


def test_multi_token_prediction_is_trained_as_the_recipes_say(tmp_path):
    # Nemotron-3.5-Lightning's config: one MTP module whose block is attention + experts
    # (mtp_layers_block_type); DeepSeek-V3's: one MoE layer. Megatron-Bridge's Lightning recipe trains it
    # as 2 depths of a repeated layer (mtp_num_layers 2), DeepSeek-V3's as 1: each depth runs the block,
    # the 2h -> h projection and the output head with its loss on the last stage (cost.mtp_s)
    from dataclasses import replace
    from fasop.estimators.analytic import cost as C
    from fasop.estimators.analytic.layers import Recipe
    from fasop.specs.catalog import default_params, find_gpu
    from fasop.specs.hf_config import architecture_from_config, read_config
    light = architecture_from_config(read_config(DATA / "hf" / "nemotron-3.5-lightning-30b-a3b.json"), "l")
    deep = architecture_from_config(read_config(DATA / "hf" / "deepseek-v3.json"), "d")
    assert (light.mtp_layers, light.mtp_kinds, deep.mtp_layers, deep.mtp_kinds) == (1, ("attention", "experts"), 1, ("moe",))
    from fasop.estimators.analytic import hardware as H
    from fasop.specs.types import NodeType
    gpu = find_gpu("GB200")
    tray = NodeType(name="tray", instance="t", gpu="GB200", gpus_per_node=4, memory_limit_bytes=gpu.memory_bytes,
                    intra_node_bytes_per_s=gpu.intra_node_bytes_per_s, inter_node_bytes_per_s=200e9,
                    intra_node_shared=False, usd_per_hour=0.0, spot_usd_per_hour=None)
    (stage,) = H.stage_hardware(1, 8, 1, (tray,) * 2, (gpu,) * 2, default_params())
    w = C.Workload(arch=light, seq=8192, mbs=2, tp=1, dp=8, pp=1, num_microbatches=32, recipe=Recipe(precision="mxfp8"),
                   params=default_params(), ep=8)
    one, two = C.mtp_s(replace(w, mtp=1), stage), C.mtp_s(replace(w, mtp=2), stage)
    assert C.mtp_s(w, stage) == (0.0, 0.0)
    assert two == pytest.approx((2 * one[0], 2 * one[1]))
    head = C.head_s(w, gpu)
    assert one[0] > head[0] and one[1] > head[1]


@pytest.mark.parametrize("mtp, message", [("3", None), ("x", "mtp_layers: expected an integer")])
def test_a_row_states_the_mtp_depths_it_trained(tmp_path, mtp, message):
    from fasop.core.errors import FasopError
    row = "q,hf/qwen3-30b-a3b.json,GB200,8,1,1,1,8,8,1,1,4096,64,1,bf16,none,10"
    path = _csv(tmp_path, row + "," + mtp, HEADER + ",mtp_layers")
    with pytest.raises(FasopError) as err:       # Qwen3 has no MTP module
        validate(path)
    assert (message or "mtp_layers: 3: the model has no multi-token-prediction module") in str(err.value)


def test_a_row_without_fused_permutation_is_slower(tmp_path):
    # moe_permute_fusion 0 (the alltoall A/B runs of Megatron-Bridge's docs disabled it): the unfused
    # PyTorch permutation moves more bytes; a bad cell is one clear error
    head = HEADER + ",moe_dispatcher,moe_permute_fusion"
    row = "q,hf/qwen3-30b-a3b.json,H100-SXM,16,1,1,1,16,16,1,1,4096,64,1,bf16,none,10,alltoall,"
    fused = validate(_csv(tmp_path, row + "1", head)).predictions[0].row["predicted_seconds_per_iter"]
    unfused = validate(_csv(tmp_path, row + "0", head)).predictions[0].row["predicted_seconds_per_iter"]
    assert unfused > fused
    from fasop.core.errors import FasopError
    with pytest.raises(FasopError) as err:
        validate(_csv(tmp_path, row + "maybe", head))
    assert "moe_permute_fusion: expected 0 or 1" in str(err.value)


def test_blackwell_ultra_runs_attention_faster_at_the_same_matmul_peaks():
    # GB300 / B300 double the softmax exponential rate: the forward-only gain 1.105 on the Blackwell
    # share (docs/estimators.md "Blackwell Ultra attention"); GB300's matmul shares are GB200's x the
    # B300 / B200 measured MAMF ratios (BF16 1769.0 / 1745, FP8 3353.3 / 3432.5)
    from fasop.specs.catalog import default_params, find_gpu
    p = default_params()
    gb200, gb300, b200, b300 = (find_gpu(n) for n in ("GB200", "GB300", "B200", "B300"))
    assert gb300.attention_share(p) == pytest.approx(gb200.attention_share(p) * 1.105, abs=6e-4)
    assert b300.attention_share(p) == pytest.approx(b200.attention_share(p) * 1.105, abs=6e-4)
    assert gb300.matmul_efficiency == pytest.approx(gb200.matmul_efficiency * 1769.0 / 1745, abs=6e-4)
    assert gb300.fp8_matmul_efficiency == pytest.approx(gb200.fp8_matmul_efficiency * 3353.3 / 3432.5, abs=6e-4)


def test_the_same_attention_heavy_plan_is_faster_on_gb300_than_on_gb200(tmp_path):
    # Qwen3-30B-A3B at 16k tokens, BF16 (attention in 16 bits, matmul shares 0.739 against 0.729)
    rows = [f"{g},hf/qwen3-30b-a3b.json,{g},8,1,1,1,8,8,1,1,16384,64,1,bf16,none,10" for g in ("GB200", "GB300")]
    path = _csv(tmp_path, "\n".join(rows))
    gb200, gb300 = (p.row["predicted_seconds_per_iter"] for p in validate(path).predictions)
    assert gb300 < gb200


@pytest.mark.parametrize("gpu", ["B200", "B300", "GB200", "GB300"])
def test_nvfp4_gemms_run_at_the_measured_ratio_to_mxfp8(gpu):
    # Transformer Engine's GEMM profiling tutorial (B300, kernel only): one h 4096 / ffn 16384 layer in
    # 7.161 ms MXFP8 and 3.764 ms NVFP4 -- 1.90x, not the 3.33x (B300) or 2x (B200) of the peaks
    from fasop.specs.catalog import find_gpu
    g = find_gpu(gpu)
    assert g.matmul_flops("nvfp4") / g.matmul_flops("mxfp8") == pytest.approx(7.161 / 3.764, rel=2e-3)


def test_gb_rows_without_a_cuda_graphs_cell_run_graphed_as_their_recipes(tmp_path):
    # gpus.yaml GB200 / GB300 validate_software cuda_graphs: an empty cell is full_iteration (the Bridge
    # recipes' capture); `none` states an eager run, whose Grace host issues each kernel at 19.7 us
    row = "q,hf/qwen3-30b-a3b.json,GB200,8,1,1,1,8,8,1,1,4096,512,1,mxfp8,none,6"
    predicted = lambda header, r: validate(_csv(tmp_path, r, header)).predictions[0].row["predicted_seconds_per_iter"]
    empty = predicted(HEADER + ",cuda_graphs", row + ",")
    graphed = predicted(HEADER + ",cuda_graphs", row + ",full_iteration")
    eager = predicted(HEADER + ",cuda_graphs", row + ",none")
    assert empty == graphed < eager
    h100 = row.replace("GB200", "H100-SXM").replace("mxfp8", "fp8")
    assert predicted(HEADER + ",cuda_graphs", h100 + ",") == predicted(HEADER + ",cuda_graphs", h100 + ",none")


def test_gb_hybrid_rows_without_a_cuda_graphs_cell_capture_their_recipes_scopes(tmp_path):
    # validate_defaults.RECIPE_GRAPHS: Megatron-Bridge's GB200 / GB300 Nemotron 3 recipes capture attn, mamba,
    # moe_router and moe_preprocess (the experts and the dispatcher stay eager), NemotronH 56B mamba and attn;
    # at one sequence a micro-batch the eager run is host-bound on the Grace host and slower
    import json
    (tmp_path / "hf").mkdir()
    nano = json.loads((DATA / "hf" / "nemotron-3-nano-30b-a3b.json").read_text())
    (tmp_path / "hf" / "nano.json").write_text(json.dumps(nano))
    dense = dict(nano, hybrid_override_pattern="M*M*", num_hidden_layers=4)
    (tmp_path / "hf" / "dense.json").write_text(json.dumps(dense))
    header = HEADER + ",cuda_graphs"

    def predicted(model, graphs, ep=8):
        path = tmp_path / "runs.csv"
        path.write_text(header + "\n" + f"n,hf/{model}.json,GB200,8,1,1,1,8,{ep},1,1,8192,64,1,mxfp8,none,6,{graphs}\n")
        return validate(path).predictions[0].row["predicted_seconds_per_iter"]

    stated = predicted("nano", '"attn,mamba,moe_router,moe_preprocess"')
    assert predicted("nano", "") == stated < predicted("nano", "none")
    assert predicted("dense", "", 1) == predicted("dense", '"attn,mamba"', 1)


SOFTWARE_CELLS = ("moe_dispatcher", "ep_overlap", "cuda_graphs", "main_grads", "optimizer_states", "mtp_layers",
                  "moe_permute_fusion")


@pytest.mark.parametrize("name, mape, worst", [("moe_megatron_bridge_perf_summary.csv", 11.5, 24),
                                              ("moe_megatron_bridge_verification_cards.csv", 17.5, 36.5)])
def test_sets_without_their_software_cells_are_predicted_as_their_recipes_run(tmp_path, name, mape, worst):
    # a row in only the schema (no software cells) takes its GPU's moe_software: the GB200 / GB300 set with
    # every software column dropped stays near the set that states them (11.1 % against 10.3 %; before moe_software,
    # 22.2 % / max 50.7 % -- eager alltoall without EP overlap); the verification cards, not used to set the
    # defaults, 17.0 % / 35.8 % (37.0 % / 40.0 % before)
    report = validate(without_columns(name, SOFTWARE_CELLS, tmp_path))
    assert report.mape <= mape and report.max_error <= worst


def test_a_recipes_zero_ep_overlap_beats_the_clusters_constant(tmp_path):
    # H100's moe_software says no EP overlap: a row that leaves the cell empty runs with 0 even where its
    # cluster's `analytic:` section sets ep_overlap 0.5 (the recipe is what the published run had); with
    # --as-searched (a run of a plan fasop searched there) the cluster's 0.5, as the search estimated it
    (tmp_path / "c.yaml").write_text(
        "estimator: analytic\nanalytic:\n  ep_overlap: 0.5\nnode_types:\n  h:\n    instance: h\n    gpu: H100-SXM\n"
        "    gpus_per_node: 8\n    inter_node_gbit_per_s: 3200\n    usd_per_hour: 0\n    price_date: 2025-06\n"
        "    price_source: none\n")
    header = ("name,model,cluster,nodes,num_gpus,tp,pp,cp,dp,ep,etp,zero,seq_len,global_batch_size,micro_batch_size,"
              "precision,recompute,measured_seconds_per_iter,ep_overlap")
    row = "q,hf/qwen3-30b-a3b.json,c.yaml,h=2,16,1,1,1,16,16,1,1,4096,64,1,bf16,none,10,"
    predicted = lambda cell, searched=False: validate(_csv(tmp_path, row + cell, header),
                                                      as_searched=searched).predictions[0].row
    assert predicted("")["predicted_seconds_per_iter"] == predicted("0")["predicted_seconds_per_iter"] \
        > predicted("0.5")["predicted_seconds_per_iter"]
    assert "ep_overlap=0 (recipe)" in predicted("")["picked"] and "ep_overlap" not in predicted("0")["picked"]
    assert predicted("", True)["predicted_seconds_per_iter"] == predicted("0.5", True)["predicted_seconds_per_iter"] \
        < predicted("0", True)["predicted_seconds_per_iter"]
    assert "(recipe)" not in predicted("", True)["picked"]


def test_a_pytorch_fsdp_moe_row_keeps_megatron_cores_defaults(tmp_path):
    # a ZeRO-3 MoE row on H100 is PyTorch FSDP (torchtitan), not a Megatron-Bridge recipe: fp32 gradient
    # reduction (the H100 recipe's bf16 is not assumed); on GB200 (Megatron-FSDP) the recipe applies
    header = HEADER + ",main_grads"
    row = "q,hf/qwen3-30b-a3b.json,{gpu},16,2,1,1,8,8,1,3,4096,64,1,bf16,none,10,"
    predicted = lambda gpu, cell: validate(_csv(tmp_path, row.format(gpu=gpu) + cell, header)).predictions[0].row
    assert predicted("H100-SXM", "")["predicted_seconds_per_iter"] == predicted("H100-SXM", "fp32")["predicted_seconds_per_iter"]
    assert "(recipe)" not in predicted("H100-SXM", "")["picked"]
    assert predicted("GB200", "")["predicted_seconds_per_iter"] == predicted("GB200", "bf16")["predicted_seconds_per_iter"]
    assert "main_grads=bf16 (recipe)" in predicted("GB200", "")["picked"]


@pytest.mark.parametrize("zero, shards, refused", [("0", "1", True), ("1", "0", True), ("1", "1", False),
                                                   ("0", "0", False), ("3", "0", False), ("3", "1", False),
                                                   ("2", "1", False)])
def test_distributed_optimizer_beside_zero(tmp_path, zero, shards, refused):
    """distributed_optimizer 1 is zero 1: beside zero 0 or 1 the two must agree (one line naming the column); beside
    zero 2 / 3 either is a fact of the run (Megatron-FSDP runs the distributed optimizer, PyTorch FSDP does not),
    and the row is predicted as its zero says."""
    from fasop.core.errors import FasopError
    row = f"q,hf/qwen3-30b-a3b.json,H100-SXM,16,1,1,1,16,8,1,{zero},4096,64,1,bf16,full,10,{shards}"
    path = _csv(tmp_path, row, HEADER + ",distributed_optimizer")
    if refused:
        with pytest.raises(FasopError, match=f"line 2: distributed_optimizer: {shards} contradicts zero {zero}"):
            validate(path)
    else:
        bare = validate(_csv(tmp_path / "bare", row.rsplit(",", 1)[0])).predictions[0].row
        assert validate(path).predictions[0].row["predicted_seconds_per_iter"] == bare["predicted_seconds_per_iter"]
