"""The hardware catalog and the catalog clusters (cluster_specs/catalog/, aws.yaml, gcp.yaml)."""

from pathlib import Path

import pytest

from fasop.core.errors import SpecError
from fasop.specs.catalog import canonical, find_gpu, load_gpus
from fasop.specs.files import shipped_folder
from fasop.specs.load import load_cluster

REPO = Path(__file__).resolve().parent.parent
ISSUE_GPUS = ("A100-SXM4-40GB", "A100-SXM4-80GB", "H100-SXM", "H100-PCIe", "H200", "B200", "L4", "L40S", "A10",
              "A10G", "T4", "V100-SXM2", "MI300X",
              # issue 28: the GPUs mixed clusters are made of
              "V100-SXM2-16GB", "V100-SXM2-32GB", "V100-PCIe", "P100", "RTX-2080-Ti", "TITAN-RTX", "RTX-3090",
              "RTX-4090", "RTX-A6000", "A40", "MI250X", "GH200", "B300", "GB200", "GB300")


def test_the_catalog_holds_exactly_the_named_gpus():
    assert sorted(g.name for g in load_gpus().values()) == sorted(ISSUE_GPUS)


@pytest.mark.parametrize("spelling", ["h100-sxm", "H100 SXM", "h100_sxm", "H100SXM"])
def test_lookup_ignores_case_dashes_underscores_spaces(spelling):
    assert find_gpu(spelling).name == "H100-SXM"


def test_unknown_gpu_names_the_catalog():
    with pytest.raises(SpecError, match="unknown GPU type 'H300'.*H100-SXM"):
        find_gpu("H300")


def test_every_number_in_the_catalog_has_a_source_comment():
    for path in (shipped_folder("cluster_specs") / "catalog").glob("*.yaml"):
        for n, line in enumerate(path.read_text().splitlines(), start=1):
            body = line.split("#")[0]
            if any(ch.isdigit() for ch in body.split(":", 1)[-1]) and ":" in body:
                assert "#" in line, f"{path.name}:{n}: {line!r} has no source comment"


def test_peaks_and_units():
    h100 = find_gpu("H100-SXM")
    assert h100.peak_flops == {"bf16": 989e12, "fp16": 989e12, "fp8": 1979e12, "fp32": 67e12, "tf32": 494.5e12}
    assert h100.matmul_flops("bf16") == pytest.approx(794.5e12, rel=1e-3)  # MAMF
    assert find_gpu("T4").matmul_flops("bf16") == find_gpu("T4").matmul_flops("fp16")  # no BF16: fp16 peak
    assert find_gpu("A100-SXM4-80GB").matmul_flops("fp8") == find_gpu("A100-SXM4-80GB").matmul_flops("bf16")
    assert h100.intra_node_bytes_per_s == 450e9


def test_fp32_and_tf32_peaks():
    """fp32 runs on the CUDA cores; tf32 on the tensor cores where there are TF32 units, else at the
    fp32 rate (Volta, Turing: no TF32); both x the GPU's matmul efficiency."""
    a100, t4 = find_gpu("A100-SXM4-80GB"), find_gpu("T4")
    assert a100.matmul_flops("tf32") == pytest.approx(156e12 * a100.matmul_efficiency)
    assert a100.matmul_flops("fp32") == pytest.approx(19.5e12 * a100.matmul_efficiency)
    assert t4.matmul_flops("tf32") == t4.matmul_flops("fp32") == pytest.approx(8.1e12 * t4.matmul_efficiency)
    assert find_gpu("GB200").nvlink_domain_gpus == 72 and find_gpu("B200").nvlink_domain_gpus is None


def test_a_narrower_type_is_never_slower_in_the_catalog(tmp_path):
    text = (shipped_folder("cluster_specs") / "catalog" / "gpus.yaml").read_text()
    start = text.index("\nT4:") + 1
    entry = text[start:text.index("\nV100-SXM2:")]
    bad = tmp_path / "gpus.yaml"
    bad.write_text(entry.replace("fp32_tflops: 8.1 ", "fp32_tflops: 81  "))
    with pytest.raises(SpecError, match="fp32_tflops.*above fp16_tflops"):
        load_gpus(str(bad))


@pytest.mark.parametrize("name, types", [
    ("aws", ("p5", "p5en", "p4d", "p4de", "g5", "g6", "g6e", "p6-b200", "p3", "g4dn")),
    ("gcp", ("a3-highgpu-8g", "a2-ultragpu-8g")),
])
def test_catalog_clusters(name, types):
    cluster = load_cluster(name)
    assert cluster.estimator == "analytic" and tuple(cluster.node_types) == types
    text = (shipped_folder("cluster_specs") / f"{name}.yaml").read_text()
    assert text.count("price_date:") == text.count("price_source:") == len(types)
    for node in cluster.node_types.values():
        gpu = find_gpu(node.gpu)
        assert node.memory_limit_bytes == gpu.memory_bytes and node.usd_per_hour > 0
        assert node.intra_node_shared == (gpu.intra_node_link == "pcie")
    assert canonical(cluster.node_types[types[0]].gpu) in load_gpus()


def test_a_catalog_cluster_with_an_unknown_gpu_is_refused(tmp_path):
    text = (shipped_folder("cluster_specs") / "gcp.yaml").read_text().replace("gpu: H100-SXM", "gpu: H300")
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(SpecError, match=r"node_types\.a3-highgpu-8g\.gpu: unknown GPU type 'H300'"):
        load_cluster(str(path))


def test_analytic_overrides_in_a_cluster(tmp_path):
    text = (shipped_folder("cluster_specs") / "gcp.yaml").read_text() + "analytic:\n  dp_overlap: 0.5\n"
    path = tmp_path / "over.yaml"
    path.write_text(text)
    params = load_cluster(str(path)).analytic
    assert params.dp_overlap == 0.5 and params.link_efficiency["network"] == 0.9
    path.write_text(text.replace("dp_overlap: 0.5", "dp_overlap: 2"))
    with pytest.raises(SpecError, match=r"analytic\.dp_overlap: must be in \[0, 1\], got 2"):
        load_cluster(str(path))
    # a run that overlaps TP communication (NeMo's H100 recipes) and does not fuse gradient accumulation
    path.write_text(text.replace("dp_overlap: 0.5", "tp_overlap: 0.5\n  gradient_accumulation_fusion: false"))
    params = load_cluster(str(path)).analytic
    assert params.tp_overlap == 0.5 and not params.gradient_accumulation_fusion and params.fp8_cast_bytes == 4
    path.write_text(text.replace("dp_overlap: 0.5", "tp_overlap: 1.5"))
    with pytest.raises(SpecError, match=r"analytic\.tp_overlap: must be in \[0, 1\], got 1.5"):
        load_cluster(str(path))


def test_validate_software_is_read_and_checked(tmp_path):
    """A GPU's `validate_software` names only analytic.yaml switches a validate row may state."""
    assert load_gpus()[canonical("A100-SXM4-80GB")].validate_software == {
        "fused_attention": False, "overlap_grad_reduce": False, "sequence_parallel": False}
    assert load_gpus()[canonical("H100-SXM")].validate_software == {
        "tp_overlap": 0.5, "block_recompute": True,
        "moe_software": {"moe_dispatcher": "deepep", "main_grads": "bf16", "cuda_graphs": {"other": "none"},
                         "ep_overlap": {"other": 0}}}
    gb = load_gpus()[canonical("GB200")].validate_software["moe_software"]
    assert gb["cuda_graphs"] == {"mxfp8": "full_iteration", "other": "attn,moe_router,moe_preprocess"}
    assert gb["ep_overlap"] == {"mxfp8": 1, "other": 0}
    text = (shipped_folder("cluster_specs") / "catalog" / "gpus.yaml").read_text()
    bad = text.replace("    fused_attention: false    # FlashAttention(-2)", "    colour: false    # FlashAttention(-2)")
    assert bad != text
    path = tmp_path / "gpus.yaml"
    path.write_text(bad)
    with pytest.raises(SpecError, match=r"V100-SXM2\.validate_software\.colour: unknown key"):
        load_gpus(str(path))
    for before, after, message in (
            ("      moe_dispatcher: hybridep  # the flex HybridEP backend: 22 of 27",
             "      moe_dispatcher: nccl  # the flex HybridEP backend: 22 of 27",
             r"B300\.validate_software\.moe_software\.moe_dispatcher: must be one of alltoall, alltoall_seq, allgather, flex, deepep, "
             r"hybridep, got 'nccl'"),
            ("        mxfp8: 1              # the full-iteration DeepSeek-V3, Qwen3, GPT-OSS-120B recipes (5 of 8)\n"
             "        other: 0              # no other (19 of 20)",
             "        mxfp9: 1              # the full-iteration DeepSeek-V3, Qwen3, GPT-OSS-120B recipes (5 of 8)\n"
             "        other: 0              # no other (19 of 20)",
             r"GB200\.validate_software\.moe_software\.ep_overlap: unknown precision 'mxfp9'"),
            ("        other: 0              # no other (19 of 20)", "        other: 2              # no other",
             r"GB200\.validate_software\.moe_software\.ep_overlap: other: must be a share in \[0, 1\], got 2"),
            ("      ep_overlap: 0           # EP all-to-all overlap off in 21 of 25",
             "      ep_overlap: 3           # EP all-to-all overlap off in 21 of 25",
             r"B200\.validate_software\.moe_software\.ep_overlap: must be a share in \[0, 1\], got 3"),
            ("        other: none           # (4 of 7, 3 of 5)", "        bf16: none           # (4 of 7, 3 of 5)",
             r"B300\.validate_software\.moe_software\.cuda_graphs: a precision map needs an `other` entry"),
            ("        other: none           # (4 of 7, 3 of 5)", "        other: everything     # (4 of 7, 3 of 5)",
             r"B300\.validate_software\.moe_software\.cuda_graphs: other: must be none or a comma list")):
        assert text.count(before) == 1, before
        path.write_text(text.replace(before, after))
        with pytest.raises(SpecError, match=message):
            load_gpus(str(path))


@pytest.mark.parametrize("precision, measured_s", [("bf16", 13.102e-3), ("fp8", 6.812e-3), ("mxfp8", 7.161e-3),
                                                   ("nvfp4", 3.764e-3)])
def test_blackwell_layer_gemms_take_the_te_tutorials_measured_time(precision, measured_s):
    """gpus.yaml `layer_gemm_share`: Transformer Engine's GEMM profiling tutorial times the 12 GEMMs of one
    layer (h 4096, ffn 16384, 32 heads, M = 31 x 512 tokens) kernel-only on a B300; fasop's weight matmuls
    of that layer (cost.linear_s: MAMF-based rate x share, wave-quantised) take those times."""
    from dataclasses import replace
    from fasop.estimators.analytic import cost as C
    from fasop.estimators.analytic.layers import Recipe
    from fasop.specs.architecture import gpt_architecture
    from fasop.specs.catalog import default_params
    a = gpt_architecture(num_layers=24, hidden_size=4096, num_attention_heads=32, vocab_size=32000, ffn_hidden_size=16384)
    w = C.Workload(arch=a, seq=512, mbs=31, tp=1, dp=1, pp=1, num_microbatches=1, recipe=Recipe(precision=precision),
                   params=default_params())
    b300 = find_gpu("B300")
    assert sum(C.linear_s(w, b300)) == pytest.approx(measured_s, rel=1e-3)
    # the share is what separates it from the MAMF-based rate; GPUs without a measured share keep theirs
    assert sum(C.linear_s(w, replace(b300, layer_gemm_share={}))) == pytest.approx(
        measured_s * b300.layer_gemm_share[precision], rel=1e-3)
    assert find_gpu("H100-SXM").gemm_flops("bf16") == find_gpu("H100-SXM").matmul_flops("bf16")


def test_a_layer_gemm_share_above_one_is_refused(tmp_path):
    text = (shipped_folder("cluster_specs") / "catalog" / "gpus.yaml").read_text()
    bad = text.replace("layer_gemm_share: {bf16: 0.853, fp8: 0.866, mxfp8: 0.823, nvfp4: 0.824}  # [TE-GEMM]",
                       "layer_gemm_share: {bf16: 1.853, fp8: 0.866, mxfp8: 0.823, nvfp4: 0.824}  # [TE-GEMM]")
    assert bad != text
    path = tmp_path / "gpus.yaml"
    path.write_text(bad)
    with pytest.raises(SpecError, match=r"B300\.layer_gemm_share\.bf16.*in \(0, 1\]"):
        load_gpus(str(path))


def test_the_output_heads_logits_gemm_takes_the_bf16_share_under_mxfp8():
    """cost.head_s: the logits matmul stays 16-bit in an MXFP8 run and is a weight GEMM at its training shape:
    its time grows by 1 / layer_gemm_share['bf16'] on a Blackwell GPU; the loss bytes do not change."""
    from dataclasses import replace
    from fasop.estimators.analytic import cost as C
    from fasop.estimators.analytic import layers as L
    from fasop.estimators.analytic.layers import Recipe
    from fasop.specs.architecture import gpt_architecture
    from fasop.specs.catalog import default_params
    a = gpt_architecture(num_layers=2, hidden_size=2880, num_attention_heads=64, vocab_size=201088)
    w = C.Workload(arch=a, seq=4096, mbs=4, tp=1, dp=1, pp=1, num_microbatches=1, recipe=Recipe(precision="mxfp8"),
                   params=default_params())
    gb200 = find_gpu("GB200")
    flops = L.head_forward_flops(a, 4, 4096, 1)
    with_share, without = C.head_s(w, gb200)[0], C.head_s(w, replace(gb200, layer_gemm_share={}))[0]
    assert with_share - without == pytest.approx(flops / gb200.matmul_flops("bf16") * (1 / 0.853 - 1))
