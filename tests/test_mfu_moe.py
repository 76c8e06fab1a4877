"""MFU of an MoE model counts the FLOPs a token makes -- its k routed experts, not all E -- the way
Narayanan et al. 2021 Eq. 3 counts a dense model's (2 per parameter a matmul uses, the scores over
all s keys); a dense model keeps Eq. 3 as it was."""

import pytest

from fasop.report.explain import active_flop_per_token, model_flop_per_sample
from fasop.specs.architecture import Architecture, MoE
from fasop.specs.load import load_model


def small_moe() -> Architecture:
    """4 layers, h 64, 8 heads (2 KV) of 8, 8 experts top-2 of width 32, gated, untied, RMSNorm."""
    return Architecture(family="mixtral", num_layers=4, hidden_size=64, num_attention_heads=8, num_kv_heads=2,
                        head_dim=8, ffn_hidden_size=128, vocab_size=1000, gated_mlp=True, tied_embeddings=False,
                        linear_bias=False, norm="rmsnorm", position="rotary", dropout=False,
                        moe=MoE(num_experts=8, experts_per_token=2, expert_ffn_hidden_size=32))


def test_active_flops_by_hand():
    """A layer uses: attention 64·64 + 2·64·16 + 64·64 = 10,240, two RMSNorms 128, the router 8·64 =
    512, 2 of the 8 experts 2·(3·64·32) = 12,288: 23,168; the head 64 (norm) + 1000·64 = 64,064;
    4 layers: 156,736 parameters, x2 = 313,472 FLOPs. Scores at s = 1024: 4·1024·64 a layer, x4 =
    1,048,576. All eight experts would add 4·6·3·64·32 x2 = 294,912 more."""
    assert active_flop_per_token(small_moe(), 1024) == 313_472 + 1_048_576


@pytest.mark.parametrize("name, active, tolerance", [
    ("mixtral-8x7b", 12.9e9, 0.02),       # Mixtral report: 13B active of 47B (12.9B)
    ("qwen3-30b-a3b", 3.3e9, 0.05),       # Qwen3 report: 3.3B active of 30.5B
])
def test_moe_model_flops_follow_the_active_parameters(name, active, tolerance):
    """6 FLOPs per active parameter and token (fwd + bwd) plus the attention scores: within the
    published active count (which includes the input embedding, a lookup: left out here)."""
    model = load_model(name)
    a, s = model.architecture, model.sequence_length
    from fasop.estimators.analytic import blocks as B
    scores = 3 * a.num_layers * B.core_flops(a, 1, s, 1, 1.0)
    matmuls = (model_flop_per_sample(model) - scores) / (6 * s)
    embedding = a.vocab_size * a.hidden_size
    assert matmuls + embedding == pytest.approx(active, rel=tolerance)


def test_dense_models_keep_eq_3():
    model = load_model("llama-3-8b")
    h, s, v, n = model.hidden_size, model.sequence_length, model.vocab_size, model.architecture.num_layers
    assert model_flop_per_sample(model) == 3.0 * (n * (24 * h * h + 4 * s * h) + 2 * h * v) * s
