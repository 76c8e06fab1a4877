"""Issue 29's model families from their HF config.json: parameter counts against the published
totals and active counts, FLOPs of a hand-made MoE, refusals (docs/models.md)."""

from pathlib import Path

import pytest

from fasop.core.errors import SpecError
from fasop.estimators.analytic import blocks as B
from fasop.estimators.analytic import layers as L
from fasop.specs.hf_config import architecture_from_config, read_config
from fasop.specs.load import load_model

HF = Path(__file__).resolve().parents[1] / "fasop" / "data" / "model_specs" / "hf"


def arch(name):
    file = HF / f"{name}.json"
    return architecture_from_config(read_config(file), str(file))


# (model, published total, published active, does the publisher count the input embedding as active,
#  tolerance): the sources and the gaps are in docs/models.md "Published counts".
PUBLISHED = [
    ("mixtral-8x7b", 46.7e9, 12.9e9, True, 0.01),         # Mistral AI release post
    ("mixtral-8x22b", 141e9, 39e9, True, 0.01),           # Mistral AI post (rounded)
    ("qwen3-30b-a3b", 30.5e9, 3.3e9, True, 0.02),         # model card: 30.5B / 3.3B (rounded to 0.1B)
    ("qwen3-235b-a22b", 235e9, 22e9, True, 0.02),         # model card (rounded)
    ("qwen2-57b-a14b", 57e9, 14e9, True, 0.02),           # Qwen2 report Table 1 (rounded: 57.4B / 14.2B)
    ("deepseek-v3", 671e9, 37e9, False, 0.015),           # README: 671B / 37B main model, MTP apart
    ("kimi-k2", 1.04e12, 32e9, False, 0.015),             # model card: 1.04T / 32B
    ("gpt-oss-120b", 116.83e9, 5.13e9, False, 0.001),     # gpt-oss model card (arXiv 2508.10925)
    ("gpt-oss-20b", 20.91e9, 3.61e9, False, 0.001),
    ("llama-4-scout", 107.77e9, 17e9, True, 0.02),        # text model; Meta's 109B adds the vision encoder
    ("llama-4-maverick", 400e9, 17e9, True, 0.02),
    ("nemotron-3-nano-30b-a3b", 31.6e9, 3.6e9, True, 0.01),  # NVIDIA card: 31.6B, 3.6B incl. embeddings
    ("nemotron-3-super-120b-a12b", 120e9, 12e9, True, 0.065),  # Bridge docs: "12B active ... 120B in total" (rounded)
    ("nemotron-3-ultra-550b-a55b", 550e9, 55e9, True, 0.02),   # the name's 550B / A55B (rounded)
    ("qwen3-8b", 8.2e9, 8.2e9, True, 0.01),               # model card: 8.2B dense
]


@pytest.mark.parametrize("name,total,active,with_embedding,tol", PUBLISHED)
def test_parameter_counts_match_published(name, total, active, with_embedding, tol):
    a = arch(name)
    assert L.total_params(a) == pytest.approx(total, rel=tol)
    assert L.active_params(a, input_embedding=with_embedding) == pytest.approx(active, rel=tol)


DATA_HF = Path(__file__).resolve().parent / "data" / "hf"
"""Real configs the tests read but fasop does not ship by name (tests/data/VALIDATION_SOURCES.md)."""


def data_arch(name):
    file = DATA_HF / f"{name}.json"
    return architecture_from_config(read_config(file), str(file))


@pytest.mark.parametrize("name,total,active,with_embedding,tol", [
    ("moonlight-16b-a3b", 16e9, 3e9, True, 0.05),          # model card: 16B total, 3B activated (to the billion)
    ("nemotron-h-56b-base-8k", 56e9, 56e9, True, 0.01),    # arXiv 2504.03624: Nemotron-H-56B (dense hybrid)
    ("deepseek-v2", 236e9, 21e9, False, 0.01),             # arXiv 2405.04434: 236B total, 21B activated a token
])
def test_parameter_counts_of_the_other_families_match_published(name, total, active, with_embedding, tol):
    a = data_arch(name)
    assert L.total_params(a) == pytest.approx(total, rel=tol)
    assert L.active_params(a, input_embedding=with_embedding) == pytest.approx(active, rel=tol)


@pytest.mark.parametrize("name,non_embedding,tol", [
    ("gemma-2-27b", 26_047_480_320, 0.0),   # Gemma 2 report (arXiv 2408.00118) Table 2, to the parameter
    ("gemma-3-27b-it", 25_600e6, 0.0005),   # Gemma 3 report (arXiv 2503.19786) Table 1: 25,600M (in millions)
])
def test_gemma_non_embedding_counts_match_the_reports(name, non_embedding, tol):
    """Gemma ties its head to its embedding: the reports count the vocab x hidden table apart."""
    a = data_arch(name)
    assert a.tied_embeddings
    assert L.total_params(a) - a.vocab_size * a.hidden_size == pytest.approx(non_embedding, rel=tol)


def test_gemma_3s_config_takes_transformers_defaults_and_plans_its_language_model():
    """google/gemma-3-27b-it's text_config names neither vocab_size nor max_position_embeddings: transformers'
    Gemma3TextConfig defaults (262,208; 131,072) apply; five sliding-window layers of 1,024 to one global."""
    a = data_arch("gemma-3-27b-it")
    assert (a.vocab_size, a.max_positions, a.window, a.head_dim) == (262_208, 131_072, 1024, 128)
    assert a.windowed_layers == tuple(i for i in range(62) if (i + 1) % 6)
    assert a.notes == ("the language model only: the vision tower is not modelled",)


def test_a_gemma_config_naming_only_what_differs_takes_transformers_defaults():
    """A Gemma 3 text_config naming only the 4B's sizes that differ from Gemma3TextConfig's defaults (hidden 2560,
    FFN 10240, 34 layers; 8 heads, 4 KV heads of 256 and the 1,024-token window are the defaults' and the 4B's):
    the Gemma 3 report's (Table 1) 3,209M non-embedding parameters; nothing refused, no head count guessed."""
    cfg = {"model_type": "gemma3", "text_config": {"model_type": "gemma3_text", "hidden_size": 2560,
                                                  "intermediate_size": 10240, "num_hidden_layers": 34,
                                                  "sliding_window": 1024}, "vision_config": {}}
    a = architecture_from_config(cfg, "gemma-3-4b")
    assert (a.num_attention_heads, a.num_kv_heads, a.head_dim, a.vocab_size) == (8, 4, 256, 262_208)
    assert L.total_params(a) - a.vocab_size * a.hidden_size == pytest.approx(3_209e6, rel=0.0005)
    bare = architecture_from_config({"model_type": "gemma2", "hidden_size": 2304}, "gemma-2-2b")
    assert (bare.num_layers, bare.logit_softcap, bare.window) == (26, 30.0, 4096)


def test_qwen3_vl_plans_its_qwen3_moe_language_model():
    """Qwen3-VL-30B-A3B's text_config (model_type qwen3_vl_moe_text) is Qwen3-30B-A3B's shape: the same counts,
    untied as its top-level tie_word_embeddings says, and the vision tower's note."""
    a, lm = data_arch("qwen3-vl-30b-a3b-instruct"), arch("qwen3-30b-a3b")
    assert (L.total_params(a), L.active_params(a, input_embedding=True)) == (L.total_params(lm), L.active_params(lm, input_embedding=True))
    assert not a.tied_embeddings and a.moe.num_experts == 128
    assert a.notes == ("the language model only: the vision tower is not modelled",)


def test_deepseek_v3_mtp_module_counted_apart():
    """README: the Hub weights are 671B main + 14B MTP, of which 11.5B unique (embedding and head
    shared); fasop's MTP module (one MoE layer, the 2h x h projection, three norms) is 11.6B."""
    a = arch("deepseek-v3")
    assert a.mtp_layers == 1 and B.mtp_params(a) == pytest.approx(11.5e9, rel=0.015)
    assert a.kinds[:3] == ("dense",) * 3 and set(a.kinds[3:]) == {"moe"}


def test_nemotron_3_super_checkpoint_elements():
    """Megatron-Bridge's verification card (examples/model_verification_cards/nemotron-3-super-120b-a12b/
    card.yaml, hf_to_megatron_gpu): the HF checkpoint holds 123,611,033,088 elements "including the 41 FP32
    router correction-bias tensors" -- one of E = 512 per MoE layer (40 in the decoder, 1 in the MTP module),
    which fasop does not count. The rest is the model, latent projections and MTP module included."""
    a = arch("nemotron-3-super-120b-a12b")
    assert a.moe.latent_size == 1024 and a.mtp_layers == 1 and a.mtp_kinds == ("attention", "experts")
    assert L.total_params(a) + B.mtp_params(a) + 41 * 512 == 123_611_033_088


def test_latent_moe_by_hand():
    """SMALL_HYBRID's experts layer (h 8, E 2, k 1, f_e 4, relu²: up 1) on latent tokens of 2: router 2·8,
    experts 2 x (2·4 + 4·2), projections 8·2 + 2·8, one norm 8."""
    a = architecture_from_config({**SMALL_HYBRID, "moe_latent_size": 2}, "h.json")
    assert B.kind_params(a, "experts") == 8 + 16 + 2 * 16 + 32
    assert B.expert_params(a, "experts") == 2 * 16
    # the grouped GEMM reads latent rows; the projections are dense matmuls of every token (bs / t rows)
    gemms = B.kind_gemms(a, "experts", 1, 4, 1, ep=1)
    assert (2, 2, 4, 2) in gemms and (2, 2, 2, 4) in gemms      # E/ep experts, bs·k·ep/E rows, n, k
    assert (1, 4, 2, 8) in gemms and (1, 4, 8, 2) in gemms      # fc1_latent_proj h -> l, fc2_latent_proj l -> h


def test_grok1_as_a_mixtral_style_config():
    """Grok-1 in the Mixtral-style form of its HF ports (tests/data/hf/grok-1.json: `Grok1ModelForCausalLM`, no
    model_type; the shape of xai-org/grok-1's README -- 64 layers, 48 query / 8 KV heads, 6,144 wide, 8 experts, 2 a
    token, 131,072 tokens -- with the ports' Grok1Config defaults, intermediate 32,768 and tied embeddings):
    xai-org/grok-1 README, 314B; fasop 315.7B (four RMSNorms a layer, gated experts)."""
    file = Path(__file__).resolve().parent / "data" / "hf" / "grok-1.json"
    grok = architecture_from_config(read_config(file), str(file))
    assert grok.family == "grok-1" and grok.layer_norms == 4 and grok.tied_embeddings
    assert L.total_params(grok) == pytest.approx(314e9, rel=0.01)


def tiny_moe(**over):
    cfg = {"model_type": "mixtral", "hidden_size": 8, "num_hidden_layers": 2, "num_attention_heads": 2,
           "num_key_value_heads": 1, "intermediate_size": 4, "vocab_size": 16, "num_local_experts": 4,
           "num_experts_per_tok": 2}
    cfg.update(over)
    return architecture_from_config(cfg, "tiny.json")


def test_tiny_moe_by_hand():
    """h 8, 2 heads of 4, 1 KV head, E 4, k 2, f_e 4, SwiGLU.
    attention 8·8 + 2·8·4 + 8·8 = 192; router 4·8 = 32; expert 3·8·4 = 96; norms 16.
    Layer: 192 + 32 + 4·96 + 16 = 624; active: 192 + 32 + 2·96 + 16 = 432."""
    a = tiny_moe()
    assert L.layer_params(a) == 624
    assert L.total_params(a) == 2 * 624 + 16 * 8 + 8 + 16 * 8
    assert L.active_params(a) == 2 * 432 + 16 * 8 + 8 + 16 * 8
    # forward matmul FLOPs for b·s = 3 tokens on one rank: 2 per active weight per token,
    # router included: 2·3·(192 - 0 + 32 + 2·96) = 2·3·416 (attention weights 8·16 + 8·8 = 192)
    assert L.layer_linear_flops(a, 1, 3, 1) == pytest.approx(2 * 3 * 416)
    # TP 2 halves all but the router (replicated): 2·3·(384/2 + 32)
    assert L.layer_linear_flops(a, 1, 3, 2) == pytest.approx(2 * 3 * (384 / 2 + 32))
    # expert parallelism moves work between ranks, not its total
    gemms = L.layer_gemms(a, 1, 4, 1, ep=2)
    assert sum(c * 2 * m * n * k for c, m, n, k in gemms) == pytest.approx(L.layer_linear_flops(a, 1, 4, 1))


def test_sliding_window_scores_by_hand():
    """GPT-OSS-style: layer 0 windowed (w = 2), layer 1 full; s = 4, fused causal kernel.
    Window keys 1 + 2 + 2 + 2 = 7 ~ s·w - w²/2 = 6 (the continuous count); full: s²/2 = 8;
    2 FLOPs per key and per (q·k + p·v) element pair: 2·keys·(2·a·d), the mean of the two layers."""
    a = tiny_moe(model_type="gpt_oss", sliding_window=2, layer_types=["sliding_attention", "full_attention"])
    width = 2 * a.q_width
    expect = (2 * width * (4 * 2 - 2) + 2 * width * 8) / 2
    assert L.attention_core_flops(a, 1, 4, 1, 0.5) == pytest.approx(expect)
    assert L.attention_core_flops(a, 1, 4, 1, 1.0) == pytest.approx(2 * 16 * width)  # unfused: all scores


def test_mla_params_by_hand():
    cfg = {"model_type": "deepseek_v3", "hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
           "intermediate_size": 8, "moe_intermediate_size": 4, "vocab_size": 10, "n_routed_experts": 4,
           "num_experts_per_tok": 1, "n_shared_experts": 1, "q_lora_rank": 6, "kv_lora_rank": 4,
           "qk_nope_head_dim": 2, "qk_rope_head_dim": 1, "v_head_dim": 3, "first_k_dense_replace": 1}
    a = architecture_from_config(cfg, "mla.json")
    q = 16 * 6 + 6 + 6 * 2 * 3
    kv = 16 * (4 + 1) + 4 + 4 * 2 * (2 + 3)
    o = 2 * 3 * 16
    assert B.attention_params(a) == q + kv + o
    assert L.layer_params(a) == q + kv + o + 3 * 16 * 8 + 2 * 16   # the one layer is dense


SMALL_HYBRID = {"model_type": "nemotron_h", "hidden_size": 8, "hybrid_override_pattern": "M*-E", "num_attention_heads": 2,
                "num_key_value_heads": 1, "intermediate_size": 4, "vocab_size": 10, "mamba_num_heads": 2,
                "mamba_head_dim": 4, "ssm_state_size": 3, "n_groups": 1, "conv_kernel": 4, "chunk_size": 2,
                "n_routed_experts": 2, "num_experts_per_tok": 1, "moe_intermediate_size": 4}
"""A Nemotron-H config small enough to count by hand: h 8, one layer of each kind (Mamba-2, attention,
MLP, experts), I = 8 (2 heads x 4), G = 1, N = 3, Q = 2."""


def test_mamba_params_by_hand():
    a = architecture_from_config(SMALL_HYBRID, "h.json")
    assert a.kinds == ("mamba", "attention", "mlp", "experts")
    d_in = 8
    in_proj = 8 * (2 * d_in + 2 * 3 + 2)
    conv = (d_in + 6) * 4 + (d_in + 6)
    assert B.mamba_params(a) == in_proj + conv + 3 * 2 + d_in + d_in * 8
    assert B.kind_params(a, "mlp") == 8 + 2 * 8 * 4                 # relu² MLP, one norm


@pytest.mark.parametrize("cfg,key", [
    ({"model_type": "nemotron_h", "hybrid_override_pattern": "MX"}, "hybrid_override_pattern"),
    ({"model_type": "mixtral", "moe_latent_size": 1024}, "moe_latent_size"),
    ({**SMALL_HYBRID, "hybrid_override_pattern": "M" * 100_000}, "hybrid_override_pattern"),
    ({**SMALL_HYBRID, "num_nextn_predict_layers": 1, "mtp_hybrid_override_pattern": "*E" * 100_000},
     "mtp_hybrid_override_pattern"),
    ({"model_type": "deepseek_v3", "moe_layer_freq": 2}, "moe_layer_freq"),
    ({"model_type": "llama", "num_local_experts": 8}, "num_local_experts"),
    ({"model_type": "deepseek_v4"}, "model_type"),
    ({"model_type": {}}, "model_type"),                           # was a TypeError (unhashable), a traceback
    ({"architectures": "Grok1ModelForCausalLM"}, "architectures"),  # a name, not a list of them
    ({"model_type": "gemma2", "final_logit_softcapping": [1, 2]}, "final_logit_softcapping"),  # was float([1, 2])
    ({"model_type": "gemma2", "final_logit_softcapping": float("nan")}, "final_logit_softcapping"),
    ({**SMALL_HYBRID, "rope_scaling": {"rope_type": "yarn", "factor": float("nan")}}, "rope_scaling.factor"),
])
def test_refusals_name_the_key(cfg, key):
    with pytest.raises(SpecError) as e:
        architecture_from_config(cfg, "bad.json")
    assert key in str(e.value) and "bad.json" in str(e.value) and "\n" not in str(e.value)


def test_text_config_plans_the_language_model_with_a_note():
    a = arch("llama-4-scout")
    assert any("vision tower" in n for n in a.notes)
    assert a.kinds == ("moe",) * 48 and a.moe.shared_experts == 1


@pytest.mark.parametrize("name", ["deepseek-v3", "qwen3-30b-a3b", "qwen3-235b-a22b", "mixtral-8x7b",
                                  "gpt-oss-120b", "llama-4-scout", "nemotron-3-nano-30b-a3b", "kimi-k2",
                                  "nemotron-3-super-120b-a12b", "nemotron-3-ultra-550b-a55b"])
def test_shipped_by_name(name):
    spec = load_model(name)
    assert spec.architecture is not None and spec.name == name


def test_mamba_scan_bytes_by_hand():
    # the small config of test_mamba_params_by_hand: I = 8 (2 heads x 4), G = 1, N = 3, Q = 2, H = 2
    a = architecture_from_config(SMALL_HYBRID, "h.json")
    e, i, gn, s = 2, 8, 3, 8 * 3 / 2          # S = I*N/Q chunk-state elements per token
    # x read by chunk_state and chunk_scan, z read, out and out_x written; B and C read twice each
    x_z_y_b_c = e * (2 * i + i + 2 * i + 2 * gn + 2 * gn)
    states = 4 * s + 4 * s + e * s + e * s      # fp32 written, fp32 read, 16-bit written, 16-bit read
    cb = 4 * 1 * 2 * 2                          # C.B^T in fp32 (G*Q per token), written and read
    dt = 4 * 4 * 2                              # dt / cumsum, fp32, 4 passes of H
    assert B.scan_bytes_per_token(a, 2) == x_z_y_b_c + states + cb + dt == 104 + 144 + 16 + 32
    # the mamba layer's elementwise bytes carry it on every token, split over TP like the heads; one
    # sequence a micro-batch: no layout copies
    with_scan = B.kind_elementwise_bytes(a, "mamba", 1, 4, 2, False, 2)
    conv_norm = 2 * 4 * (2 * (8 + 6) + 2 * 8) / 2 + 5 * 2 * 4 * 8
    assert with_scan == pytest.approx(conv_norm + 4 * 296 / 2)


def test_mamba_backward_bytes_by_hand():
    # _mamba_chunk_scan_combined_bwd kernel by kernel (blocks.scan_backward_bytes_per_token), same config
    a = architecture_from_config(SMALL_HYBRID, "h.json")
    e, i, gn, s, gq, h = 2, 8, 3, 12, 2, 2
    recompute = e * 2 * gn + 4 * gq + e * (i + gn) + 4 * s + 4 * s + 4 * s     # C.B^T, chunk states, passed states
    grads = (6 * e * i + e * (gn + i) + 4 * s + 8 * s + 2 * e * s              # dz, dstates, state_passing_bwd
             + e * (3 * i + s + gn) + 4 * gq + 2 * e * (i + s + 2 * gn)        # dx; dB, dC
             + 2 * e * i + 4 * gq + 2 * (3 * e * gn + 4 * gq) + 2 * e * i + 4 * gq)   # dcb, 2 bmm_bwd, ddAcs
    # the closed form e(17I + 15GN) + S(24 + 5e) + 24GQ + 32H
    assert B.scan_backward_bytes_per_token(a, 2) == recompute + grads + 32 * h == 362 + 408 + 48 + 64 == 882
    # layout copies: none for one sequence; for two, zxBCdt and y forward (2e(W + I)), dzxbcdt backward (2eW)
    w_in = 2 * 8 + 2 * 3 + 2
    assert B.layout_copy_bytes(a, 1, 2) == (0.0, 0.0)
    assert B.layout_copy_bytes(a, 2, 2) == (4 * (w_in + 8), 4 * w_in) == (128, 96)
    # the conv's backward (mamba_ssm MambaSplitConv1dScanCombinedFn.backward): its forward run again on xBC
    # (read + write W = I + 2GN = 14 wide, 2eW) then causal_conv1d_bwd (read xBC and dxBC, write dxBC: 3eW),
    # 5eW against the 4eW twice the forward charges: eW = 28 bytes a token more
    assert B.conv_backward_extra_bytes(a, 2) == 2 * (8 + 2 * 3) == 28
    # the backward beyond 2 x forward, one Mamba layer of four, 2 x 4 tokens, TP 2
    extra = 882 + 96 - 2 * (296 + 128) + 28
    assert B.mamba_backward_extra_bytes(a, 2, 4, 2, 2) == pytest.approx(8 * extra / 2 / 4)
    assert B.mamba_backward_extra_bytes(arch("qwen3-30b-a3b"), 2, 4, 1, 2) == 0.0


def test_nemotron_h_attention_has_no_position_embedding():
    # NoPE: Megatron-Bridge's nemotron_h_bridge sets position_embedding_type "none" (Megatron-Core HybridModel's
    # default); the attention layer's elementwise bytes carry no RoPE term (blocks.kind_elementwise_bytes)
    a = architecture_from_config(SMALL_HYBRID, "h.json")
    assert a.position == "none"
    bs, h, e = 4, 8, 2
    assert B.kind_elementwise_bytes(a, "attention", 1, 4, 1, False, e) == 5 * e * bs * h   # norm + residual only
    assert arch("qwen3-30b-a3b").position == "rotary"


def test_mamba_scan_flops_by_hand():
    # the small config above: Q = 2, G = 1, N = 3, I = 8; per token 2QGN + 2QI + 4IN = 12 + 32 + 96
    a = architecture_from_config(SMALL_HYBRID, "h.json")
    assert B.scan_flops(a, 1, 4, 2) == 4 * 140 / 2       # 4 tokens, heads split over TP 2
    assert B.mean_scan_flops(a, 1, 4, 1) == 4 * 140 / 4  # one Mamba layer of four
    assert B.mean_scan_flops(arch("qwen3-30b-a3b"), 1, 4, 1) == 0.0


SCAN_HYBRID = {"model_type": "nemotron_h", "hidden_size": 2048, "hybrid_override_pattern": "M*-",
               "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 128, "intermediate_size": 8192,
               "vocab_size": 1000, "mamba_num_heads": 32, "mamba_head_dim": 64, "ssm_state_size": 128, "n_groups": 8,
               "conv_kernel": 4, "chunk_size": 128}
"""A Mamba / attention / MLP hybrid whose one Mamba layer of three scans 8192 tokens a micro-batch."""
SCAN_HYBRID_FLOPS = 8192 * (2 * 128 * 8 * 128 + 2 * 128 * 2048 + 4 * 2048 * 128) / 3   # per token 2QGN + 2QI + 4IN


def test_mamba_scan_runs_at_its_measured_share_of_flash_attention(monkeypatch):
    # SSD_FLASH_RATIO = 0.42 (docs/models.md "Mamba-2 scan rate"): the scan's forward takes
    # scan / (FA rate x 0.42) where it took scan / FA rate; the backward 2.5x that (2x + the fused
    # core's half); the attention layers' core is untouched
    from fasop.estimators.analytic import cost as C
    from fasop.specs.catalog import default_params, find_gpu
    a = architecture_from_config(SCAN_HYBRID, "h.json")
    params, gpu = default_params(), find_gpu("H100-SXM")
    w = C.Workload(arch=a, seq=8192, mbs=1, tp=1, dp=1, pp=1, num_microbatches=1, recipe=L.Recipe(), params=params)
    assert B.SSD_FLASH_RATIO == 0.42
    C.layer_s.cache_clear()     # layer_s remembers its answers: time each ratio afresh
    f, b = C.layer_s(w, gpu, C.Link(100e9, 0.0))
    monkeypatch.setattr(B, "SSD_FLASH_RATIO", 1.0)
    C.layer_s.cache_clear()
    f1, b1 = C.layer_s(w, gpu, C.Link(100e9, 0.0))
    C.layer_s.cache_clear()
    scan = SCAN_HYBRID_FLOPS
    rate = gpu.peak_flops["bf16"] * gpu.attention_share(params)
    extra = scan / rate * (1 / 0.42 - 1)
    assert f - f1 == pytest.approx(extra) and b - b1 == pytest.approx(2.5 * extra)


def test_mamba_scan_on_blackwell_runs_at_hoppers_rate():
    # gpus.yaml GB200 ssd_scan_efficiency 0.0545 (docs/models.md "Mamba-2 scan rate", state-spaces/mamba#904):
    # the scan's forward takes scan / (2500 TFLOP/s x 0.0545) = scan / 136.25 TFLOP/s, not scan / (0.42 x the
    # FlashAttention rate); by hand against the same GPU with the share taken away
    from dataclasses import replace
    from fasop.estimators.analytic import cost as C
    from fasop.specs.catalog import default_params, find_gpu
    a = architecture_from_config(SCAN_HYBRID, "h.json")
    params, gb200 = default_params(), find_gpu("GB200")
    assert gb200.ssd_scan_efficiency == 0.0545 and find_gpu("H100-SXM").ssd_scan_efficiency is None
    w = C.Workload(arch=a, seq=8192, mbs=1, tp=1, dp=1, pp=1, num_microbatches=1, recipe=L.Recipe(), params=params)
    link = C.Link(100e9, 0.0)
    f, b = C.layer_s(w, gb200, link)
    f0, b0 = C.layer_s(w, replace(gb200, ssd_scan_efficiency=None), link)
    scan = SCAN_HYBRID_FLOPS
    flash = 2500e12 * gb200.attention_share(params)
    extra = scan / (2500e12 * 0.0545) - scan / (flash * 0.42)
    assert f - f0 == pytest.approx(extra) and b - b0 == pytest.approx(2.5 * extra)


def test_mamba_backward_bytes_reach_the_layer_backward_only(monkeypatch):
    # cost._layer_s adds blocks.mamba_backward_extra_bytes to the backward at the memory rate; the forward
    # does not change
    from fasop.estimators.analytic import cost as C
    from fasop.specs.catalog import default_params, find_gpu
    from dataclasses import replace
    a = architecture_from_config(SMALL_HYBRID, "h.json")
    params, gpu = replace(default_params(), kernel_launch_s=0.0), find_gpu("H100-SXM")   # no host floor
    w = C.Workload(arch=a, seq=4096, mbs=2, tp=1, dp=1, pp=1, num_microbatches=1, recipe=L.Recipe(), params=params)
    extra = B.mamba_backward_extra_bytes(a, 2, 4096, 1, 2)
    assert extra > 0
    C.layer_s.cache_clear()
    f, b = C.layer_s(w, gpu, C.Link(100e9, 0.0))
    monkeypatch.setattr(B, "mamba_backward_extra_bytes", lambda *args: 0.0)
    C.layer_s.cache_clear()
    f0, b0 = C.layer_s(w, gpu, C.Link(100e9, 0.0))
    C.layer_s.cache_clear()
    assert f == f0 and b - b0 == pytest.approx(extra / (gpu.memory_bytes_per_s * gpu.memory_share(params)))
