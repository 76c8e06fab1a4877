"""Block recompute (Megatron --recompute-method block --recompute-num-layers N): only N layers of each
model chunk recompute their forward. Hand-computed mixes, memory, and `fasop validate`'s use of it
(H100 rows: NeMo / Megatron-Bridge recipes tune N to what memory needs)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from fasop.estimators.analytic import block_recompute as BR
from fasop.estimators.analytic import cost as C
from fasop.estimators.analytic.layers import Recipe, activation_bytes
from fasop.report.validate import validate
from fasop.specs.architecture import gpt_architecture
from fasop.specs.catalog import default_params, find_gpu

PARAMS = default_params()
ARCH = gpt_architecture(num_layers=8, hidden_size=1024, num_attention_heads=16, vocab_size=32000, max_positions=1024)
LINK = C.Link(100e9, 0.0)
DATA = Path(__file__).parent / "data"


def _w(recompute="full", layers=None, pp=2, v=2, precision="fp8"):
    recipe = Recipe(recompute=recompute, recompute_layers=layers, virtual_stages=v, precision=precision)
    return C.Workload(arch=ARCH, seq=1024, mbs=2, tp=1, dp=1, pp=pp, num_microbatches=4, recipe=recipe, params=PARAMS)


def test_recomputed_share_by_hand():
    # 8 layers over pp 2 x v 2: chunks of 2 layers
    assert BR.chunk_layers(_w()) == 2
    assert BR.recomputed_share(_w(layers=None)) == 1.0      # uniform: every layer
    assert BR.recomputed_share(_w(layers=1)) == 0.5
    assert BR.recomputed_share(_w(layers=0)) == 0.0
    assert BR.recomputed_share(_w(layers=5)) == 1.0         # more than a chunk holds: all
    assert BR.recomputed_share(_w(recompute="selective", layers=1)) == 0.0
    assert BR.recomputed_share(_w(layers=1, pp=1, v=1)) == 1 / 8


def test_layer_time_is_the_mix_of_both_ends():
    gpu = find_gpu("H100-SXM")
    none = C.layer_s(_w(recompute="none"), gpu, LINK)
    full = C.layer_s(_w(layers=None), gpu, LINK)
    half = C.layer_s(_w(layers=1), gpu, LINK)
    assert full[1] > none[1] and full[0] == pytest.approx(none[0])    # recompute costs a forward in the backward
    assert half == pytest.approx(((none[0] + full[0]) / 2, (none[1] + full[1]) / 2))
    assert C.layer_s(_w(layers=0), gpu, LINK) == pytest.approx(none)
    assert C.layer_s(_w(layers=2), gpu, LINK) == pytest.approx(full)


def test_stored_activations_mix():
    # the workloads are FP8: the layers that keep their activations keep the matmul inputs in 1 byte
    keep = activation_bytes(ARCH, 2, 1024, 1, Recipe(precision="fp8"), PARAMS.fused_attention, stored=1.0)
    input_only = 2 * 1024 * 2 * 1024                        # full recompute keeps 2sbh (Korthikanti et al. 2022)
    assert activation_bytes(ARCH, 2, 1024, 1, Recipe(recompute="full"), PARAMS.fused_attention) == input_only
    assert BR.activation_bytes(_w(layers=1)) == pytest.approx((keep + input_only) / 2)
    assert BR.activation_bytes(_w(layers=None)) == input_only
    w = _w(layers=1)
    assert C.stage_memory(w, 4, 0).activations < C.stage_memory(_w(layers=0), 4, 0).activations


def test_a_low_precision_runs_16_bit_layers_mix_by_hand():
    """2 of the 8 layers kept 16-bit (Megatron-Core num_layers_at_end_in_bf16 2) in an FP8 run: the mean
    layer is 3/4 the FP8 layer and 1/4 the BF16 one, in time and in stored activations; none in a 16-bit run."""
    gpu = find_gpu("H100-SXM")
    fp8, bf16 = _w(recompute="none"), _w(recompute="none", precision="bf16")
    mixed = dataclasses.replace(fp8, recipe=dataclasses.replace(fp8.recipe, bf16_layers=2))
    assert BR.bf16_share(mixed) == 0.25
    assert BR.bf16_share(dataclasses.replace(bf16, recipe=dataclasses.replace(bf16.recipe, bf16_layers=2))) == 0.0
    low, high = C.layer_s(fp8, gpu, LINK), C.layer_s(bf16, gpu, LINK)
    assert high[0] > low[0] and high[1] > low[1]          # FP8 matmuls are the faster ones on H100
    assert C.layer_s(mixed, gpu, LINK) == pytest.approx((0.75 * low[0] + 0.25 * high[0], 0.75 * low[1] + 0.25 * high[1]))
    acts = lambda w: C.stage_memory(w, 4, 0).activations  # noqa: E731 (FP8 keeps 1-byte matmul inputs)
    assert acts(fp8) < acts(mixed) < acts(bf16)
    assert acts(mixed) == pytest.approx(0.75 * acts(fp8) + 0.25 * acts(bf16))
    with pytest.raises(ValueError, match="bf16_layers"):
        Recipe(precision="fp8", bf16_layers=-1)


def test_fewest_layers_that_fit():
    w = _w(layers=None)
    limit = C.stage_memory(dataclasses.replace(w, recipe=dataclasses.replace(w.recipe, recompute_layers=1)), 4, 0).total
    fits = lambda x: C.stage_memory(x, 4, 0).total <= limit
    assert BR.fewest_layers_that_fit(w, fits) == 1
    assert BR.fewest_layers_that_fit(w, lambda x: False) is None
    assert BR.fewest_layers_that_fit(w, lambda x: True) == 0


HEADER = ("name,num_layers,hidden_size,num_attention_heads,num_kv_heads,seq_len,vocab_size,ffn_hidden_size,gated_mlp,"
          "gpu,num_gpus,gpus_per_node,tp,pp,dp,global_batch_size,precision,recompute,sequence_parallel,"
          "distributed_optimizer,micro_batch_size,virtual_pp,recompute_num_layers,measured_seconds_per_iter\n")
ROW = "{name},96,12288,96,,2048,51200,49152,0,{gpu},128,8,4,8,4,256,fp8,full,1,1,1,12,{n},5.6\n"


def test_validate_full_rows(tmp_path):
    """An H100 "full" row without a count recomputes the fewest layers that fit (here none: the GPT-3
    175B FP8 128-GPU plan of nemo_gpt3_175b_h100.csv fits without), as fast as recompute none; a row
    stating the count is taken at its word; a stated count of every layer is uniform recompute."""
    f = tmp_path / "runs.csv"
    f.write_text(HEADER + ROW.format(name="fit", gpu="H100-SXM", n="") + ROW.format(name="all", gpu="H100-SXM", n=1)
                 + ROW.format(name="none", gpu="H100-SXM", n=0).replace(",full,", ",none,"))
    fit, every, none = (p.row for p in validate(f).predictions)
    assert "recompute_num_layers=0" in fit["picked"]
    assert fit["predicted_seconds_per_iter"] == pytest.approx(none["predicted_seconds_per_iter"])
    assert every["predicted_seconds_per_iter"] > 1.2 * fit["predicted_seconds_per_iter"]
    assert set(fit) == set(none)                             # the output columns do not change


def test_a100_rows_recompute_every_layer(tmp_path):
    """A100's published runs (SC'21, Korthikanti et al. 2022) recomputed every layer: no block default."""
    f = tmp_path / "runs.csv"
    row = ROW.replace("fp8", "bf16")
    f.write_text(HEADER + row.format(name="a", gpu="A100-SXM4-80GB", n="") + row.format(name="b", gpu="A100-SXM4-80GB", n=1))
    a, b = (p.row for p in validate(f).predictions)
    assert a["predicted_seconds_per_iter"] == pytest.approx(b["predicted_seconds_per_iter"])
    assert "recompute_num_layers" not in a["picked"]


BASELINE = {  # time MAPE, max |error| (%) before block recompute (main at f5838be): must not get worse
    "megatron_sc21.csv": (5.6, 8.6), "korthikanti2022.csv": (2.9, 6.4), "nemo_gpt3_175b_h100.csv": (1.5, 3.9),
    "nemo_perf_summary_h100_fp8.csv": (5.1, 14.1), "nemotron4_15b_h100.csv": (3.5, 6.7)}


@pytest.mark.parametrize("name", sorted(BASELINE))
def test_existing_sets_no_worse(name):
    report = validate(DATA / name)
    mape, worst = BASELINE[name]
    assert report.mape <= mape + 0.05 and report.max_error <= worst + 0.05   # percent, printed to 0.1
