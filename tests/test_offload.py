"""Activation offloading (Megatron-Core --cpu-offloading-num-layers; estimators/analytic/offload.py): the
activations a stage keeps, the host copies' exposed seconds, the fewest offloaded layers that fit, the host link
rates of the catalog, and `fasop validate`'s use of them on Megatron-FSDP rows."""

from __future__ import annotations

from dataclasses import replace

import pytest

from fasop.core.errors import FasopError, SpecError
from fasop.estimators.analytic import block_recompute as BR
from fasop.estimators.analytic import cost as C
from fasop.estimators.analytic import offload as OF
from fasop.estimators.analytic.layers import Recipe
from fasop.report.validate import validate
from fasop.specs.architecture import gpt_architecture
from fasop.specs.catalog import default_params, find_gpu, load_gpus
from fasop.specs.files import shipped_folder

ARCH = gpt_architecture(num_layers=8, hidden_size=1024, num_attention_heads=16, vocab_size=32000, max_positions=1024)
PARAMS = default_params()
LINK = C.Link(100e9, 0.0)


def _w(offload=0, mbs=2):
    return C.Workload(arch=ARCH, seq=1024, mbs=mbs, tp=1, dp=8, pp=1, num_microbatches=4,
                      recipe=Recipe(offload_layers=offload, zero=3), params=PARAMS)


def test_offloaded_layers_leave_the_gpu_but_one_in_transit():
    assert OF.offloaded_share(_w(0)) == 0.0 and OF.offloaded_share(_w(2)) == 0.25
    assert OF.offloaded_share(_w(20)) == 1.0                      # more than the chunk holds: all of it
    assert OF.kept_layers(_w(0), 8) == 8
    assert OF.kept_layers(_w(2), 8) == 8 * 0.75 + 1              # 6 kept, one offloaded layer being copied
    per_layer = BR.activation_bytes(_w(0))
    kept = C.stage_memory(_w(0), 8, 0).activations - C.stage_memory(_w(2), 8, 0).activations
    assert kept == pytest.approx(per_layer * (2 - 1))


def test_host_copies_cost_only_what_the_pass_does_not_cover():
    gb200, h100 = find_gpu("GB200"), find_gpu("H100-SXM")
    assert gb200.host_link_bytes_per_s == 184e9                   # NVLink-C2C, a Grace shared by 2 GPUs
    assert OF.host_bytes_per_s(h100) == OF.PCIE_HOST_BYTES_PER_S == 55.2e9   # a PCIe Gen5 x16 slot
    w = _w(2)
    copy = 0.25 * BR.activation_bytes(w) / 55.2e9                 # q x A / R a mean layer, each way
    assert OF.with_offload(w, h100, 1.0, 2.0) == (1.0, 2.0)       # compute covers the copies
    assert OF.with_offload(w, h100, copy / 4, copy / 2) == pytest.approx((copy, copy))
    assert OF.with_offload(_w(0), h100, 1e-9, 1e-9) == (1e-9, 1e-9)
    f0, b0 = C.layer_s(_w(0), h100, LINK)
    f2, b2 = C.layer_s(w, h100, LINK)
    assert (f2, b2) == pytest.approx((max(f0, copy), max(b0, copy)))


def test_fewest_offloaded_layers_that_fit_bisects():
    w = _w()
    seen = []

    def fits(x):
        seen.append(x.recipe.offload_layers)
        return x.recipe.offload_layers >= 5

    assert OF.fewest_that_fit(w, fits) == 5
    assert max(seen) == 7                                        # a chunk of 8 keeps at least one layer
    assert OF.fewest_that_fit(w, lambda x: False) is None
    assert OF.fewest_that_fit(w, lambda x: True) == 0


def _rows(tmp_path, body, header="name,model,gpu,num_gpus,tp,pp,cp,dp,zero,global_batch_size,micro_batch_size,"
                                  "virtual_pp,seq_len,precision,recompute,measured_seconds_per_iter"):
    path = tmp_path / "runs.csv"
    path.write_text(header + "\n" + body + "\n")
    return path


def test_a_megatron_fsdp_row_offloads_rather_than_recomputes(tmp_path):
    """Llama 3 70B BF16, FSDP over 64 GB200, micro-batch 1, recompute empty: without recompute it needs more
    than 185 GiB, so the row offloads the fewest layers that fit (Megatron-Bridge's recipe offloads 20 of 80,
    perf_recipes/llama/gb200/llama3.py), faster than full recompute; a stated full recompute stays."""
    path = _rows(tmp_path, "70B,llama-3-70b,GB200,64,1,1,1,64,3,256,1,1,8192,bf16,,10\n"
                           "70B full,llama-3-70b,GB200,64,1,1,1,64,3,256,1,1,8192,bf16,full,10")
    picked, full = validate(path).predictions
    n = int(picked.row["picked"].split("offload_layers=")[1].split()[0])
    assert 0 < n < 80 and picked.row["recompute"] == "none" and picked.row["fits"]
    assert picked.row["predicted_seconds_per_iter"] < 0.85 * full.row["predicted_seconds_per_iter"]
    assert "offload_layers" not in full.row["picked"]


def test_offload_layers_with_pipeline_stages_is_refused(tmp_path):
    path = _rows(tmp_path, "r,llama-3-70b,GB200,64,1,2,1,32,3,256,1,1,8192,bf16,none,10,4",
                 "name,model,gpu,num_gpus,tp,pp,cp,dp,zero,global_batch_size,micro_batch_size,virtual_pp,seq_len,"
                 "precision,recompute,measured_seconds_per_iter,offload_layers")
    with pytest.raises(FasopError, match=r"offload_layers: 4: the row.s pp is 2"):
        validate(path)


def test_a_stated_offload_count_is_estimated_as_given(tmp_path):
    header = ("name,model,gpu,num_gpus,tp,pp,cp,dp,zero,global_batch_size,micro_batch_size,virtual_pp,seq_len,"
              "precision,recompute,measured_seconds_per_iter,offload_layers")
    path = _rows(tmp_path, "a,llama-3-70b,GB200,64,1,1,1,64,3,256,1,1,8192,bf16,none,10,20\n"
                           "b,llama-3-70b,GB200,64,1,1,1,64,3,256,1,1,8192,bf16,none,10,0", header)
    a, b = validate(path).predictions
    assert a.row["fits"] and not b.row["fits"]
    assert a.row["predicted_peak_mem_gib"] < b.row["predicted_peak_mem_gib"]


def test_a_bad_host_link_in_the_catalog_names_gpu_key_and_value(tmp_path):
    text = (shipped_folder("cluster_specs") / "catalog" / "gpus.yaml").read_text()
    before = "  host_link_gbyte_per_s: 184   # NVLink-C2C to the Grace as measured, shared"
    assert text.count(before) == 2
    path = tmp_path / "gpus.yaml"
    path.write_text(text.replace(before, before.replace("184", "0.5"), 1))
    with pytest.raises(SpecError, match=r"GB200\.host_link_gbyte_per_s.*\[1, 10000\].*0\.5"):
        load_gpus(str(path))


@pytest.mark.parametrize("cells, message", [
    ("70B,llama-3-70b,GB200,64,1,1,1,64,3,256,1,1,8192,bf16,full,10,20,",
     r"offload_layers: 20 needs recompute none"),
    ("70B,llama-3-70b,GB200,64,1,1,1,64,3,256,1,1,8192,bf16,selective:moe_act,10,20,",
     r"offload_layers: 20 needs recompute none"),
    ("70B,llama-3-70b,GB200,64,1,1,1,64,3,256,1,1,8192,bf16,,10,80,",
     r"offload_layers: 80: the model has 80 layers"),
    ("70B,llama-3-70b,GB200,64,1,1,1,64,3,256,1,1,8192,bf16,,10,20,attn",
     r"offload_layers: 20: the row captures per-layer CUDA graphs \(attn"),
])
def test_offloading_megatron_core_refuses_is_refused(tmp_path, cells, message):
    """Megatron-Core TransformerConfig: cpu_offloading_num_layers below num_layers, no recomputation, no CUDA
    graphs but full_iteration (transformer_config.py @d98e8a64dd, lines 1884-1899 and 2800)."""
    header = ("name,model,gpu,num_gpus,tp,pp,cp,dp,zero,global_batch_size,micro_batch_size,virtual_pp,seq_len,"
              "precision,recompute,measured_seconds_per_iter,offload_layers,cuda_graphs")
    with pytest.raises(FasopError, match=message):
        validate(_rows(tmp_path, cells, header))


def test_a_stated_offload_count_fixes_an_empty_recompute_to_none(tmp_path):
    header = ("name,model,gpu,num_gpus,tp,pp,cp,dp,zero,global_batch_size,micro_batch_size,virtual_pp,seq_len,"
              "precision,recompute,measured_seconds_per_iter,offload_layers,cuda_graphs")
    (p,) = validate(_rows(tmp_path, "70B,llama-3-70b,GB200,64,1,1,1,64,3,256,1,1,8192,bf16,,10,20,full_iteration",
                          header)).predictions
    assert p.row["recompute"] == "none" and p.row["fits"]
