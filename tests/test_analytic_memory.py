"""Memory of the analytic estimator against Korthikanti et al. 2022 (arXiv 2205.05198), hand-computed.

GPT-3 175B shape: s = 2048, h = 12288, a = 96, L = 96, micro-batch b = 1, tp t = 8, 16-bit.
sbh = 2048 x 12288 = 25,165,824; 5as/h = 5 x 96 x 2048 / 12288 = 80.
Activation bytes of one layer (Table 2):
  no recompute  TP      sbh (10 + 24/t + 5as/(ht)) = sbh x 23      = 578,813,952
                TP+SP   sbh/t (34 + 5as/h)         = sbh x 14.25   = 358,612,992
  selective     TP      sbh (10 + 24/t)            = sbh x 13      = 327,155,712
                TP+SP   34 sbh/t                   = sbh x 4.25    = 106,954,752
  full          TP      2 sbh                                      =  50,331,648
                TP+SP   2 sbh/t                                    =   6,291,456
Weights + gradients + Adam of one layer: 12h^2 + 13h = 1,812,099,072 parameters, /t = 226,512,384
per GPU, x 18 bytes (2 + 4 + 12) = 4,077,222,912; with the optimizer sharded over d = 4 (ZeRO-1):
x (6 + 12/4) = 2,038,611,456.
"""

import dataclasses

import pytest

from fasop.estimators.analytic import cost as C
from fasop.estimators.analytic.layers import Recipe, activation_bytes, layer_params
from fasop.specs.architecture import gpt_architecture
from fasop.specs.catalog import default_params

GPT3 = gpt_architecture(num_layers=96, hidden_size=12288, num_attention_heads=96, vocab_size=51200,
                        max_positions=2048)
UNFUSED = dataclasses.replace(default_params(), fused_attention=False)


@pytest.mark.parametrize("recompute, sp, expected", [
    ("none", False, 578_813_952), ("none", True, 358_612_992),
    ("selective", False, 327_155_712), ("selective", True, 106_954_752),
    ("full", False, 50_331_648), ("full", True, 6_291_456),
])
def test_activations_per_layer_are_korthikanti_table_2(recompute, sp, expected):
    recipe = Recipe(recompute=recompute, sequence_parallel=sp)
    assert activation_bytes(GPT3, 1, 2048, 8, recipe, fused_attention=False) == expected
    # the stage's memory grows by exactly that per layer (one micro-batch in flight with pp = 1)
    w = C.Workload(arch=GPT3, seq=2048, mbs=1, tp=8, dp=1, pp=1, num_microbatches=4, recipe=recipe, params=UNFUSED)
    one, none = C.stage_memory(w, 1, 0), C.stage_memory(w, 0, 0)
    assert one.activations - none.activations == expected


def test_weights_gradients_optimizer_per_layer():
    assert layer_params(GPT3) == 12 * 12288**2 + 13 * 12288 == 1_812_099_072
    for zero, dp, expected in ((0, 1, 4_077_222_912), (1, 4, 2_038_611_456)):
        w = C.Workload(arch=GPT3, seq=2048, mbs=1, tp=8, dp=dp, pp=1, num_microbatches=4,
                       recipe=Recipe(zero=zero), params=UNFUSED)
        one, none = C.stage_memory(w, 1, 0), C.stage_memory(w, 0, 0)
        states = lambda m: m.weights + m.gradients + m.optimizer  # noqa: E731
        assert states(one) - states(none) == expected


def test_flash_attention_drops_the_s_squared_term():
    """A fused (FlashAttention) kernel keeps no s x s tensor: no recompute then equals selective."""
    none = activation_bytes(GPT3, 1, 2048, 8, Recipe(recompute="none"), fused_attention=True)
    assert none == activation_bytes(GPT3, 1, 2048, 8, Recipe(recompute="selective"), fused_attention=False)


def test_in_flight_micro_batches_follow_1f1b():
    """Stage i of a 1F1B pipeline holds min(p - i, m) micro-batches; interleaving x (1 + (p-1)/(p v))."""
    w = C.Workload(arch=GPT3, seq=2048, mbs=1, tp=8, dp=1, pp=4, num_microbatches=8, recipe=Recipe(), params=UNFUSED)
    assert [C.in_flight(w, i) for i in range(4)] == [4, 3, 2, 1]
    few = dataclasses.replace(w, num_microbatches=2)
    assert [C.in_flight(few, i) for i in range(4)] == [2, 2, 2, 1]
    inter = dataclasses.replace(w, recipe=Recipe(virtual_stages=2))
    assert C.in_flight(inter, 0) == 4 * (1 + 3 / 8)


def test_misfit_names_the_part_that_alone_exceeds():
    parts = C.MemoryParts(weights=10, gradients=10, optimizer=10, activations=50, overhead=5)
    assert parts.misfit(100) == ""
    assert parts.misfit(40) == "activations"   # states + overhead 35 <= 40; activations + overhead 55 > 40
    assert parts.misfit(30) == "both"          # 35 > 30 and 55 > 30
    assert C.MemoryParts(weights=50, gradients=0, optimizer=0, activations=1, overhead=0).misfit(40) == "weights"
    assert C.MemoryParts(weights=1, gradients=0, optimizer=0, activations=50, overhead=0).misfit(40) == "activations"


def test_fp8_keeps_the_matmul_inputs_in_one_byte():
    """Transformer Engine keeps a quantized matmul's input for the backward in its quantized format
    (module/linear.py: the column-wise copy only). GPT-3 per layer, unfused attention: the QKV and fc1
    inputs (2 + 2, replicated) and the O and fc2 inputs (2h/h + 2·4h/h = 10, split) in 1 byte instead of 2:
    TP without SP sbh (23 - 4/2 - 10/(2·8)) = sbh x 20.375; MXFP8 adds its 1/32 scales."""
    sbh = 2048 * 12288
    fp8 = Recipe(precision="fp8")
    assert fp8.stored_input_bytes(UNFUSED) == 1.0
    assert activation_bytes(GPT3, 1, 2048, 8, fp8, fused_attention=False,
                            stored=1.0) == pytest.approx(sbh * 20.375)
    mx = Recipe(precision="mxfp8").stored_input_bytes(UNFUSED)
    assert mx == 1 + 1 / 32
    assert activation_bytes(GPT3, 1, 2048, 8, Recipe(precision="mxfp8"), fused_attention=False, stored=mx) \
        == pytest.approx(sbh * (23 - 4 * (1 - mx / 2) - 10 * (1 - mx / 2) / 8))
    # under FlashAttention its 16-bit output stays for its own backward and the projection's 1-byte copy adds
    # to it: TP without SP, selective-equivalent 13 sbh -> replicated 10 - 4/2, split 24 - 8/2 + 2/2: 8 + 21/8
    assert activation_bytes(GPT3, 1, 2048, 8, fp8, fused_attention=True, stored=1.0) == pytest.approx(sbh * 10.625)
    # a 16-bit run, and a stack that keeps the 16-bit input (torchao), store 2 bytes
    assert Recipe(precision="bf16").stored_input_bytes(UNFUSED) == 2.0
    assert fp8.stored_input_bytes(dataclasses.replace(UNFUSED, quantized_activations=False)) == 2.0
    # the stage's memory follows: an FP8 stage holds less per layer than a bf16 one, by exactly that
    w = lambda r, p=UNFUSED: C.Workload(arch=GPT3, seq=2048, mbs=1, tp=8, dp=1, pp=1,  # noqa: E731
                                        num_microbatches=4, recipe=r, params=p)
    per_layer = lambda x: C.stage_memory(x, 1, 0).activations - C.stage_memory(x, 0, 0).activations  # noqa: E731
    assert per_layer(w(fp8)) == pytest.approx(sbh * 20.375)
    assert per_layer(w(fp8, dataclasses.replace(UNFUSED, quantized_activations=False))) == 578_813_952
