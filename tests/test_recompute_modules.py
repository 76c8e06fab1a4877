"""Selective recompute by Megatron-Core module (`--recompute-modules`, modules.py): what each module
drops from the stored activations and what its forward costs again, hand-computed on Moonlight-16B
(h 2048, 16 MLA heads of d_qk 192 / d_v 128, 64 experts top-6 of width 1408, 2 shared, first layer
dense of width 11264), and the Moonlight runs of tests/data that measure them."""

from __future__ import annotations

from pathlib import Path

import pytest

from fasop.estimators.analytic import block_recompute as BR
from fasop.estimators.analytic import cost as C
from fasop.estimators.analytic import modules as M
from fasop.estimators.analytic.layers import Recipe, activation_bytes
from fasop.report.validate import validate
from fasop.specs.catalog import default_params, find_gpu
from fasop.specs.hf_config import architecture_from_config, read_config

DATA = Path(__file__).parent / "data"
MOON = architecture_from_config(read_config(DATA / "hf" / "moonlight-16b-a3b.json"), "moonlight")
H100 = find_gpu("H100-SXM")
PARAMS = default_params()


@pytest.mark.parametrize("kind, modules, want", [
    ("moe", ("mla_up_proj",), (0.0, 16 * (4 * 192 + 2 * 128) / 2048)),       # Q, K, V: 8.0
    ("moe", ("moe_act",), (0.0, 2 * 6 * 1408 / 2048)),                        # fc2 input of 6 copies: 8.25
    ("moe", ("layernorm",), (2 * 2, 0.0)),                                     # two norm outputs
    ("dense", ("mlp",), (0.0, 6 * 11264 / 2048)),                              # gated inner: 33.0
    ("moe", ("mlp",), (0.0, 0.0)),                                             # mlp is the dense MLP only
    ("moe", ("shared_experts",), (0.0, 6 * 2816 / 2048)),                      # 8.25
    # the whole block: k (4 + 6 f_e/h) + 6 f_s/h split, fp32 router probs 4E/h; moe_act inside it once
    ("moe", ("moe", "moe_act", "shared_experts"), (4 * 64 / 2048, 6 * (4 + 6 * 1408 / 2048) + 6 * 2816 / 2048)),
    ("moe", ("core_attn",), (0.0, 0.0)),                                       # the core term: activation_bytes
])
def test_saved_terms_by_hand(kind, modules, want):
    assert M.saved_terms(MOON, kind, modules) == pytest.approx(want)


def test_activations_drop_by_the_saved_terms():
    # b 1, s 4096, t 2 with SP: every term / t; 26 of the 27 layers are MoE layers
    sbh_t = 4096 * 2048 / 2
    none = activation_bytes(MOON, 1, 4096, 2, Recipe(sequence_parallel=True), fused_attention=True)
    for modules, per_moe_layer in ((("moe_act",), 8.25), (("mla_up_proj",), 8.0), (("layernorm",), 4.0)):
        r = Recipe(recompute="selective", recompute_modules=modules, sequence_parallel=True)
        less = activation_bytes(MOON, 1, 4096, 2, r, fused_attention=True)
        # mla_up_proj and layernorm act on the dense first layer too (it has MLA and two norms)
        layers = 26 if modules == ("moe_act",) else 27
        assert none - less == pytest.approx(sbh_t * per_moe_layer * layers / 27)


def _w(modules=(), recompute="selective"):
    r = Recipe(recompute=recompute, recompute_modules=modules, sequence_parallel=True)
    return C.Workload(arch=MOON, seq=4096, mbs=1, tp=2, dp=4, pp=1, num_microbatches=1, recipe=r,
                      params=PARAMS, ep=8)


def test_moe_act_reruns_the_activation_bytes():
    # SwiGLU again: read gate + up (2 f_e), write f_e, for 6 copies of 4096 tokens, 2 bytes, / t
    moved = 3 * 2 * 4096 * 6 * 1408 / 2 * 26 / 27
    rate = H100.memory_bytes_per_s * H100.memory_share(PARAMS)
    assert BR.modules_rerun_s(_w(("moe_act",)), H100, 1.0, 1.0) == pytest.approx(moved / rate)


def test_core_attn_and_moe_rerun_what_the_layer_hands_them():
    assert BR.modules_rerun_s(_w(("core_attn",)), H100, 0.25, 9.0) == pytest.approx(0.25)
    moe_only = BR.modules_rerun_s(_w(("moe",)), H100, 0.25, 9.0)
    assert moe_only > 9.0                      # the routed forward, plus shared experts and permutation


def test_each_module_costs_time_and_saves_memory_in_the_step():
    layer = lambda w: sum(C.layer_s(w, H100, C.Link(100e9, 0.0)))
    base = layer(_w(recompute="none"))
    for m in M.MODULES:
        assert layer(_w((m,))) >= base, m
    assert layer(_w(("mla_up_proj", "mlp"))) > layer(_w(("mla_up_proj",)))


def test_a_module_list_needs_selective_and_known_names():
    with pytest.raises(ValueError, match="recompute_modules"):
        Recipe(recompute="full", recompute_modules=("moe_act",))
    with pytest.raises(ValueError, match="recompute_modules"):
        Recipe(recompute="selective", recompute_modules=("attn",))


def test_moonlight_rows_rank_by_memory_as_measured():
    # tests/data/moe_megatron_bridge_moonlight_h100.csv: core_attn saves nothing under the fused
    # kernel (36.618 -> 36.614 GiB), mla_up_proj and moe_act save ~0.7 GiB each
    report = validate(DATA / "moe_megatron_bridge_moonlight_h100.csv")
    mem = {p.row["recompute"]: p.row["predicted_peak_mem_gib"] for p in report.predictions}
    time = {p.row["recompute"]: p.row["predicted_seconds_per_iter"] for p in report.predictions}
    assert mem["selective:core_attn"] == mem["none"]
    assert 0.5 < mem["none"] - mem["selective:mla_up_proj"] < 1.0
    assert 0.5 < mem["none"] - mem["selective:moe_act"] < 1.0
    assert all(t > time["none"] for k, t in time.items() if k != "none")


def test_bf16_gradients_and_moments_by_hand(tmp_path):
    # bf16 gradients (Megatron grad_reduce_in_fp32 false) and Megatron-Core's precision-aware optimizer
    # (bf16 moments): 2 + 2 + 8 bytes a parameter of gradients, weights and Adam where fp32 gives 2 + 4 + 12;
    # the step's 38 bytes: -2 x 2 for the two reads of a 2-byte gradient, -8 for 2-byte m and v read
    # and written, -4 for the master weight no longer re-read for the 16-bit copy
    from fasop.estimators.analytic import memory
    from fasop.estimators.analytic.memory import state_dtypes
    bf16 = state_dtypes(PARAMS, True, True)
    assert state_dtypes(PARAMS, False, False) is PARAMS
    assert [state_dtypes(PARAMS, g, m).optimizer_step_bytes["bf16"] for g, m in ((1, 0), (0, 1), (1, 1))] == [34, 26, 22]
    w = _w(recompute="none")
    wb = C.Workload(**{**{f: getattr(w, f) for f in ("arch", "seq", "mbs", "tp", "dp", "pp", "num_microbatches",
                                                      "recipe", "ep")}, "params": bf16})
    assert (memory.optimizer_bytes(w), memory.optimizer_bytes(wb)) == (12, 8)
    assert (bf16.gradient_reduce_bytes["bf16"], bf16.gradient_reduce_bytes["fp32"]) == (2, 4)
    full, half = C.stage_memory(w, 27, 0), C.stage_memory(wb, 27, 0)
    assert half.gradients == pytest.approx(full.gradients / 2)
    assert half.optimizer == pytest.approx(full.optimizer * 8 / 12)
    assert half.weights == full.weights and half.activations == full.activations


def test_moonlight_peak_memory_with_its_recipes_optimizer():
    # the recipe's bf16 gradients and moments: predicted peak within 2 % of every measured row
    report = validate(DATA / "moe_megatron_bridge_moonlight_h100.csv")
    errors = [abs(p.mem_error) for p in report.predictions]
    assert len(errors) == 6 and sum(errors) / 6 < 0.01 and max(errors) < 0.02


@pytest.mark.parametrize("kind, modules, want", [
    # the attention sublayer's fused norm output (2); the MoE block: 6 copies' fc1 and fc2 inputs
    # 6(2 + 2 f_e/h), the shared experts' fc2 input 2 f_s/h (MLA's latents and the attention output: below)
    ("moe", (), (2.0, 6 * (2 + 2 * 1408 / 2048) + 2 * 2816 / 2048)),
    ("moe", ("moe_act",), (2.0, 6 * 2 + 2 * 2816 / 2048)),
    ("moe", ("moe",), (2.0, 0.0)),
    ("moe", ("layernorm", "shared_experts"), (0.0, 6 * (2 + 2 * 1408 / 2048))),
    ("dense", (), (4.0, 2 * 11264 / 2048)),
    ("dense", ("mlp",), (4.0, 0.0)),
])
def test_quantized_terms_by_hand(kind, modules, want):
    assert M.quantized_terms(MOON, kind, modules) == pytest.approx(want)


def test_the_attention_output_stays_16_bit_beside_its_quantized_copy():
    """FlashAttention keeps its 16-bit output for its own backward (flash-attn: save_for_backward(q, k, v,
    out_padded, ...)); the FP8 output projection keeps its 1-byte copy beside it: + out x 1/2. Where the
    core is recomputed (or unfused, whose backward needs the softmax, not the output) only the copy stays."""
    out = 2 * 16 * 128 / 2048                                                # MLA: 16 heads x d_v 128
    assert M.output_term(MOON, "moe") == out and M.output_term(MOON, "mlp") == 0.0
    quantized = M.quantized_terms(MOON, "moe")
    assert M.stored_input_delta(MOON, "moe", (), 2.0, True) == (0.0, 0.0)   # a 16-bit run: nothing changes
    assert M.stored_input_delta(MOON, "moe", (), 1.0, True) == pytest.approx(
        (-quantized[0] / 2, -quantized[1] / 2 + out / 2))
    assert M.stored_input_delta(MOON, "moe", (), 1.0, False) == pytest.approx(
        (-quantized[0] / 2, -(quantized[1] + out) / 2))
