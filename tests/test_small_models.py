"""The small models mixed clusters of older GPUs train (issue 28): GPT-2, OPT and GPT-Neo from their
HF config.json, by name. Parameter counts against the published totals (docs/models.md), the OPT
and GPT-Neo readings, and the catalog listing and a search on aws's V100 + T4 nodes."""

import csv
from pathlib import Path

import pytest

from fasop.cli.command import main
from fasop.core.errors import SpecError
from fasop.estimators.analytic import layers as L
from fasop.specs.hf_config import architecture_from_config, read_config
from fasop.specs.load import load_model

HF = Path(__file__).resolve().parents[1] / "fasop" / "data" / "model_specs" / "hf"
SMALL = ("gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl", "opt-350m", "opt-1.3b", "opt-2.7b", "opt-6.7b",
         "gpt-neo-1.3b", "gpt-neo-2.7b")

# (model, published total, tolerance). The exact counts of the HF checkpoints (sum of numel over
# the state dict, tied head once), reproduced by hand below, asserted exactly (GPT-Neo's Q/K/V
# projections have no bias: modeling_gpt_neo.py q_proj/k_proj/v_proj bias=False).
PUBLISHED = [
    ("gpt2", 124_439_808, 0),           # GPT-2 paper Table 2 "117M", HF card 124M
    ("gpt2-medium", 354_823_168, 0),    # "345M" in the paper, HF 355M
    ("gpt2-large", 774_030_080, 0),     # 762M in the paper, HF 774M
    ("gpt2-xl", 1_557_611_200, 0),      # 1542M in the paper, HF 1.5B
    ("opt-350m", 331_196_416, 0),       # OPT Table 1 "350M"; HF 331M (the narrower 512 embedding)
    ("opt-1.3b", 1_315_758_080, 0),
    ("opt-2.7b", 2_651_596_800, 0),
    ("opt-6.7b", 6_658_473_984, 0),
    ("gpt-neo-1.3b", 1_315_575_808, 0),
    ("gpt-neo-2.7b", 2_651_307_520, 0),
]


def arch(name):
    file = HF / f"{name}.json"
    return architecture_from_config(read_config(file), str(file))


@pytest.mark.parametrize("name,total,tol", PUBLISHED)
def test_parameter_counts_match_published(name, total, tol):
    """By hand, h hidden, L layers, V vocab, P positions, every linear with a bias, LayerNorm (2h):
    a layer = 4h² + 4h (attention) + 8h² + 5h (MLP, 4h inner) + 4h (two norms) = 12h² + 13h.
    GPT-2 (V 50257, P 1024): L(12h² + 13h) + Vh + Ph + 2h (final norm), head tied.
      124M: h 768, L 12: 12·7,087,872 + 38,597,376 + 786,432 + 1,536 = 124,439,808.
      355M: h 1024, L 24: 24·12,596,224 + 51,463,168 + 1,048,576 + 2,048 = 354,823,168.
      774M: h 1280, L 36: 36·19,677,440 + 64,328,960 + 1,310,720 + 2,560 = 774,030,080.
    OPT (V 50272, positions 2048 + 2 offset rows, ffn 4h, tied):
      350M: h 1024, L 24, embedding 512 wide: 24·12,596,224 + 50272·512 + 2050·1024
            + 2·512·1024 (project_in, project_out) + 0 (post-LN: no final norm) = 331,196,416.
      1.3B: h 2048, L 24: 24·50,358,272 + 102,957,056 + 4,198,400 + 4,096 = 1,315,758,080.
      2.7B: h 2560, L 32: 32·78,676,480 + 128,696,320 + 5,248,000 + 5,120 = 2,651,596,800.
      6.7B: h 4096, L 32: 32·201,379,840 + 205,914,112 + 8,396,800 + 8,192 = 6,658,473,984.
    GPT-Neo (V 50257, P 2048, no Q/K/V bias: a layer 12h² + 10h):
      1.3B: h 2048, L 24: 24·50,352,128 + 102,926,336 + 4,194,304 + 4,096 = 1,315,575,808.
      2.7B: h 2560, L 32: 32·78,668,800 + 128,657,920 + 5,242,880 + 5,120 = 2,651,307,520."""
    n = L.total_params(arch(name))
    assert n == total if tol == 0 else n == pytest.approx(total, rel=tol)


def test_opt_350m_narrow_embedding_and_post_ln():
    """word_embed_proj_dim 512 != hidden 1024: a 512-wide (tied) table, project_in and project_out of
    512·1024 each; do_layer_norm_before false: no final norm; positions 2048 + 2 rows."""
    a = arch("opt-350m")
    assert (a.embed_width, a.projection_params, a.final_norm) == (512, 512 * 1024, False)
    assert L.embedding_params(a) == 50272 * 512 + 2050 * 1024 + 512 * 1024
    assert L.head_params(a) == 512 * 1024 + 50272 * 512
    wide = arch("opt-1.3b")
    assert (wide.embed_width, wide.projection_params, wide.final_norm) == (2048, 0, True)
    assert not a.gated_mlp and a.linear_bias and a.position == "learned" and a.tied_embeddings


def test_gpt_neo_attention_biases():
    """q/k/v_proj without bias, out_proj and the MLP with: a layer is 12h² + 13h - 3h."""
    a = arch("gpt-neo-1.3b")
    h = 2048
    assert (a.qkv_biased, a.linear_bias) == (False, True)
    assert L.layer_params(a) == 12 * h * h + 10 * h
    assert arch("gpt2").qkv_biased and L.layer_params(arch("gpt2")) == 12 * 768 * 768 + 13 * 768


def test_opt_350m_projections_cost_their_matmuls():
    """project_in (e x h) after the lookup, project_out (h x e) before a logits matmul that is e wide:
    forward FLOPs on one rank 2bs·e·h each and 2bs·e·V for the logits (e 512, h 1024, V 50272)."""
    a, b, s = arch("opt-350m"), 2, 2048
    assert L.embedding_forward_flops(a, b, s, 1) == 2 * b * s * 512 * 1024
    assert L.head_forward_flops(a, b, s, 2) == 2 * b * s * (512 * 50272 + 512 * 1024) / 2
    wide = arch("opt-1.3b")
    assert L.embedding_forward_flops(wide, b, s, 1) == 0
    assert L.head_forward_flops(wide, b, s, 1) == 2 * b * s * 2048 * 50272
    # bytes of the head's matmuls: logits (input b·s·e, e x V weight, b·s·V out) + project_out's
    e = 2
    logits = b * s * 512 + 512 * 50272 + b * s * 50272
    projection = b * s * 1024 + 512 * 1024 + b * s * 512
    assert L.head_gemm_bytes(a, b, s, 1, e) == e * (logits + projection)


def test_gpt_neo_local_layers_are_windowed():
    """attention_types [[["global", "local"], 12]]: layers 1, 3, ..., 23 see the last 256 tokens."""
    a = arch("gpt-neo-1.3b")
    assert a.window == 256 and a.windowed_layers == tuple(range(1, 24, 2))
    assert a.ffn_hidden_size == 4 * 2048 and a.kinds == ("dense",) * 24


def neo(**over):
    cfg = {"model_type": "gpt_neo", "hidden_size": 8, "num_layers": 2, "num_heads": 2, "vocab_size": 16,
           "attention_types": [[["global", "local"], 1]], "max_position_embeddings": 32}
    cfg.update(over)
    return architecture_from_config(cfg, "neo.json")


@pytest.mark.parametrize("types", [[[["global", "local"], 2]], [[["global", "sliding"], 1]], "global",
                                   [[["global", "local"], "1"]], [[["global"], 10 ** 12]]])
def test_gpt_neo_bad_attention_types_name_the_key(types):
    with pytest.raises(SpecError, match="attention_types"):
        neo(attention_types=types)


def test_gpt_neo_attention_layers_without_types():
    assert neo(attention_types=None, attention_layers=["local", "global"]).windowed_layers == (0,)


def test_opt_refuses_weightless_layernorm():
    cfg = read_config(HF / "opt-1.3b.json") | {"layer_norm_elementwise_affine": False}
    with pytest.raises(SpecError, match="layer_norm_elementwise_affine"):
        architecture_from_config(cfg, "opt.json")


def test_specs_training_defaults():
    """GPT-2: 512 x 1024 (GPT-2 paper §2.3); OPT Table 1: 0.5M / 1M / 1M / 2M tokens at 2048."""
    got = {n: (load_model(n).global_batch_size, load_model(n).sequence_length) for n in SMALL}
    assert got["gpt2-medium"] == (512, 1024)
    assert [got[n][0] * got[n][1] for n in ("opt-350m", "opt-1.3b", "opt-2.7b", "opt-6.7b")] == \
        [2 ** 19, 2 ** 20, 2 ** 20, 2 ** 21]


def test_list_models_shows_them(capsys):
    assert main(["list", "models"]) == 0
    listed = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    for name in SMALL:
        assert name in listed and "does not load" not in listed[name]
    assert "profiled" in listed["gpt2xl"]   # FASOP's profiled GPT-2 XL is kept beside gpt2-xl


def test_gpt2_medium_on_v100_and_t4(tmp_path):
    """aws p3 (4x V100) + g4dn (4x T4), heterogeneous: fitting plans, analytic, on both GPU types."""
    out = tmp_path / "s.csv"
    assert main(["search", "--model", "gpt2-medium", "--cluster", "aws", "--nodes", "p3=1,g4dn=1",
                 "--heterogeneous", "--no-progress", "--out", str(out)]) == 0
    with open(out, newline="") as fh:
        rows = list(csv.DictReader(fh))
    fitting = [r for r in rows if r["is_oom"] == "False"]
    assert fitting and all(r["compute_source"] == "analytic" for r in rows)
    best = min(fitting, key=lambda r: float(r["step_time_s"]))
    assert "V100" in best["stage_gpu_types"] and "T4" in best["stage_gpu_types"]


def test_a_one_stage_plan_holds_every_parameter_once():
    """A single stage holds the embedding and the tied head: its table (V x e, 512 wide on OPT-350M)
    once, so the stage's parameters are the model's total."""
    from fasop.estimators.analytic import memory as M
    from fasop.estimators.analytic.layers import Recipe, Workload
    from fasop.specs.catalog import default_params
    for name in ("opt-350m", "opt-1.3b", "gpt-neo-1.3b"):
        a = arch(name)
        w = Workload(arch=a, seq=2048, mbs=1, tp=1, dp=1, pp=1, num_microbatches=1, recipe=Recipe(),
                     params=default_params())
        assert M.stage_param_split(w, a.num_layers, True, True) == (L.total_params(a), 0)
