"""The host's issue time of a Megatron-Core layer from its counted modules (analytic.yaml `host_ops`,
docs/validate.md "Host ops of a Megatron-Core MLA + MoE layer"), priced per op and per TE call
(docs/estimators.md §A3.1b), split at a MoE dispatcher's host wait, less what CUDA graphs captured:
hand-computed cases on Moonlight-16B-A3B's layers and a dense GQA layer."""

from dataclasses import replace
from pathlib import Path

import pytest

from fasop.core.errors import FasopError
from fasop.estimators.analytic import host as H
from fasop.report.validate import validate
from fasop.specs.architecture import gpt_architecture
from fasop.specs.catalog import PARAM_KEYS, default_params, find_gpu, read_params
from fasop.core.errors import SpecError
from fasop.specs.hf_config import architecture_from_config, read_config
from fasop.specs.host_ops import graph_scopes
from fasop.specs.reader import Reader

DATA = Path(__file__).resolve().parent / "data"
MOON = architecture_from_config(read_config(DATA / "hf" / "moonlight-16b-a3b.json"), "moonlight")
P, H100 = default_params(), find_gpu("H100-SXM")
OP, TE = 8e-6, 13.48e-6


def test_the_shipped_counts_are_the_documented_table():
    # validate.md: the MoE layer 11 TE calls + 241 ops forward, 11 + 165 backward; the dense GQA layer
    # 5 + 17 / 5 + 13. The yaml holds the differences from the dense block, module by module.
    counts = dict(P.host.modules)
    moe = [sum(counts[m][i] for m in ("mla_attention", "unfused_rope", "moe_router", "moe_dispatch", "moe_combine",
                                     "grouped_experts", "shared_experts")) for i in range(4)]
    assert [17 + moe[0], 13 + moe[1], 5 + moe[2], 5 + moe[3]] == [241, 165, 11, 11]
    assert P.host.te_module_call_s == TE


def test_a_moonlight_moe_layer_by_hand():
    # before the wait: half the dense block (10 kernels) + MLA 15 + RoPE 32 + router 48 + dispatch 40 ops,
    # MLA's 3 TE calls; after: 10 kernels + combine 34 + experts 25 + shared 30 ops, 1 + 2 TE calls;
    # backward: 40 kernels + 11 + 30 + 30 + 30 + 39 + 12 ops, 6 TE calls at TE + one launch
    before, after, bwd = H.kind_issue_s(P, H100, MOON, "moe")
    assert before == pytest.approx(10 * OP + 135 * OP + 3 * TE)
    assert after == pytest.approx(10 * OP + 89 * OP + 3 * TE)
    assert bwd == pytest.approx(40 * OP + 152 * OP + 6 * (TE + OP))
    assert before + after == pytest.approx(2.033e-3, abs=1e-6) and bwd == pytest.approx(1.665e-3, abs=1e-6)
    # Moonlight's first layer is dense: MLA and its RoPE only
    assert H.kind_issue_s(P, H100, MOON, "dense") == pytest.approx((10 * OP + 47 * OP + 3 * TE, 10 * OP,
                                                                     40 * OP + 41 * OP + 3 * (TE + OP)))
    mean = H.mean_issue_s(P, H100, MOON)
    assert mean[2] == pytest.approx((26 * bwd + H.kind_issue_s(P, H100, MOON, "dense")[2]) / 27)


def test_a_dense_gqa_layer_keeps_the_dense_block_alone():
    llama = gpt_architecture(num_layers=4, hidden_size=1024, num_attention_heads=8, vocab_size=1000, max_positions=128)
    assert H.layer_modules(llama, "dense") == ()
    assert H.issue_s(P, H100, llama) == H.issue_s(P, H100) == (20 * OP, 40 * OP)


def test_a_grace_host_prices_te_calls_at_its_own_ratio():
    gh200 = find_gpu("GH200")
    ratio = gh200.kernel_launch_s / OP
    before, _, _ = H.kind_issue_s(P, gh200, MOON, "moe")
    assert before == pytest.approx(ratio * (145 * OP + 3 * TE))


def test_after_a_wait_the_gpu_work_before_it_and_the_host_issue_after_it_serialise():
    # GPU-heavy piece first, host-heavy second: the host issues the second while the GPU runs the first
    assert H.after_wait_s(((1.0, 0.2), (0.5, 1.0))) == pytest.approx(1.5)     # = max(1.5, 1.2)
    # host-heavy first: the GPU idles while it is issued, then runs the heavy piece: 1.0 + 1.0, not max(1.1, 1.1)
    assert H.after_wait_s(((0.1, 1.0), (1.0, 0.1))) == pytest.approx(2.0)
    assert H.after_wait_s(()) == 0.0


def test_a_moe_forward_between_two_waits():
    # GPU-bound: the pass is its GPU time, bit for bit
    assert H.moe_forward_s(P, 3e-3, 1e-3, (0.5e-3, 0.5e-3)) == 3e-3
    # Moonlight's forward (validate, H100): GPU 1.403 ms, 0.776 of it after the wait; host 1.200 / 0.832 ms
    # after the wait: max(0.776, 0.832) = 0.832; then the attention side from 0.832: max(0.832 + 0.627, 2.032)
    assert H.moe_forward_s(P, 1.403e-3, 0.776e-3, (1.200e-3, 0.832e-3)) == pytest.approx(2.032e-3)
    # a host-bound after-wait part followed by GPU-bound attention: 0.8 + 1.0, where max(G, H) says 1.2
    assert H.moe_forward_s(P, 1.2e-3, 0.2e-3, (0.2e-3, 0.8e-3)) == pytest.approx(1.8e-3)
    assert H.moe_forward_s(replace(P, micro_batch_sync=True), 1.2e-3, 0.2e-3, (0.2e-3, 0.8e-3)) == pytest.approx(2.2e-3)


@pytest.mark.parametrize("scopes, expected", [
    (("full_iteration",), (0.0, 0.0, 0.0)),
    (("attn",), (5 * OP + 88 * OP, 5 * OP + 89 * OP + 3 * TE, 20 * OP + 111 * OP + 3 * (TE + OP))),
    (("moe_router", "moe_preprocess"), (10 * OP + 47 * OP + 3 * TE, 10 * OP + 89 * OP + 3 * TE,
                                        40 * OP + 122 * OP + 6 * (TE + OP))),
])
def test_cuda_graphs_drop_what_they_captured(scopes, expected):
    graphed = replace(P, host=replace(P.host, graphed=scopes))
    assert H.kind_issue_s(graphed, H100, MOON, "moe") == pytest.approx(expected)


def test_graph_scope_cells():
    assert graph_scopes("attn, moe_router") == ("attn", "moe_router")
    assert graph_scopes("none") == () and graph_scopes("NONE") == ()
    assert graph_scopes("attention") is None and graph_scopes(",") is None


def test_a_bad_cuda_graphs_cell_is_one_clear_error(tmp_path):
    lines = (DATA / "moe_megatron_bridge_moonlight_h100.csv").read_text().splitlines()
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "moonlight-16b-a3b.json").write_text((DATA / "hf" / "moonlight-16b-a3b.json").read_text())
    (tmp_path / "runs.csv").write_text(f"{lines[0]},cuda_graphs\n{lines[1]},attn+mlp\n")
    with pytest.raises(FasopError, match=r"line 2: cuda_graphs: expected none or a comma list of full_iteration"):
        validate(tmp_path / "runs.csv")
    (tmp_path / "runs.csv").write_text(f"{lines[0]},cuda_graphs\n{lines[1]},full_iteration\n")
    graphed = validate(tmp_path / "runs.csv").predictions[0]
    eager = validate(DATA / "moe_megatron_bridge_moonlight_h100.csv").predictions[0]
    assert graphed.error < eager.error      # the forward's host floor gone


@pytest.mark.parametrize("section, message", [
    ({"host_ops": {"moe_router": [1, 2, 3]}}, "host_ops.moe_router: must be [forward ops"),
    ({"host_ops": {"router": [1, 2, 3, 4]}}, "host_ops.router: unknown key"),
    ({"te_module_call_s": 1.0}, "te_module_call_s: must be in [0, 0.001]"),
])
def test_a_bad_host_ops_section_names_its_key(tmp_path, section, message):
    with pytest.raises(SpecError, match=message.replace("[", r"\[")):
        read_params(Reader(tmp_path / "c.yaml", section, "analytic", PARAM_KEYS), P)


def test_a_cluster_overrides_one_module():
    p = read_params(Reader(Path("c.yaml"), {"host_ops": {"moe_router": [1, 2, 3, 4]}}, "analytic", PARAM_KEYS), P)
    assert dict(p.host.modules)["moe_router"] == (1, 2, 3, 4)
    assert dict(p.host.modules)["moe_combine"] == dict(P.host.modules)["moe_combine"]
