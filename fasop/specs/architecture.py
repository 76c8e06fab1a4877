"""The shape of a Transformer, as the analytic estimator needs it (no profile, no framework).

A decoder-only or encoder-only stack of identical layers, with an input embedding and an
output head. Filled from a HuggingFace `config.json` (`fasop.specs.hf_config`), from the columns of a
`fasop validate` row, or from a FASOP model spec (GPT-style defaults). Sizes are counts of
elements; nothing here knows about bytes, GPUs or parallelism.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True, kw_only=True)
class MoE:
    """A mixture-of-experts MLP (Mixtral, Qwen2/3-MoE, DeepSeek-V2/V3, GPT-OSS, Llama 4, ...): a
    router picks `experts_per_token` of `num_experts` routed experts per token; `shared_experts`
    run on every token. Each expert is an MLP of `expert_ffn_hidden_size` (gated like the dense MLP)."""
    num_experts: int
    experts_per_token: int
    expert_ffn_hidden_size: int
    shared_experts: int = 0
    shared_ffn_hidden_size: int = 0
    """Width of the shared experts' MLP taken together (0: shared_experts x expert_ffn_hidden_size)."""


@dataclass(frozen=True, kw_only=True)
class Architecture:
    family: str
    """HF `model_type` (`llama`, `qwen2`, `gpt2`, ...) or `gpt` for a shape given by columns."""
    num_layers: int
    """Transformer layers (encoder + decoder layers for an encoder-decoder model)."""
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    """Key/value heads: = heads for multi-head attention, fewer for grouped-query attention."""
    head_dim: int
    """Width of one attention head (usually hidden / heads; explicit in some configs)."""
    ffn_hidden_size: int
    """Width of the MLP's inner layer (per matrix, so a gated MLP has 3 matrices of h x f)."""
    vocab_size: int
    gated_mlp: bool = False
    """SwiGLU/GeGLU: gate and up projections (3 matrices) instead of 2."""
    tied_embeddings: bool = True
    """The output head reuses the input embedding matrix (synchronised across first/last stage)."""
    qkv_bias: bool = False
    """Bias on the Q, K and V projections (Qwen2)."""
    linear_bias: bool = True
    """Bias on every linear layer (GPT-2, BERT, GPT-3); False for the Llama family."""
    norm: Literal["layernorm", "rmsnorm"] = "layernorm"
    position: Literal["learned", "rotary", "relative"] = "learned"
    """Learned position embeddings add max_positions x hidden parameters to the first stage."""
    max_positions: int = 0
    dropout: bool = True
    """Dropout after attention, after the MLP and on the attention probabilities (its masks
    are stored activations, Korthikanti et al. 2022 §4.1); False for the Llama family."""
    moe: MoE | None = None
    """The experts of the layers whose `layer_kinds` entry is an MoE one (None: a dense model)."""
    layer_kinds: tuple[str, ...] = ()
    """Per transformer layer, in order: "dense" (attention + MLP), "moe" (attention + experts),
    "mamba" (a Mamba-2 mixer, no attention), "mamba-moe"/"attention-only"/... as a family needs;
    empty: every layer "dense" (or "moe" when `moe` is set)."""

    def __post_init__(self):
        bad = [f"{k}={v}" for k, v in (("num_layers", self.num_layers), ("hidden_size", self.hidden_size),
                                       ("num_attention_heads", self.num_attention_heads),
                                       ("num_kv_heads", self.num_kv_heads), ("head_dim", self.head_dim),
                                       ("ffn_hidden_size", self.ffn_hidden_size), ("vocab_size", self.vocab_size))
               if not (isinstance(v, int) and v >= 1)]
        if bad:
            raise ValueError(f"architecture sizes must be integers >= 1: {', '.join(bad)}")
        if self.num_attention_heads % self.num_kv_heads:
            raise ValueError(f"num_attention_heads={self.num_attention_heads} is not a multiple of "
                             f"num_kv_heads={self.num_kv_heads}")

    @property
    def q_width(self) -> int:
        """Width of the query projection's output (heads x head_dim)."""
        return self.num_attention_heads * self.head_dim

    @property
    def kv_width(self) -> int:
        """Width of the key (and of the value) projection's output."""
        return self.num_kv_heads * self.head_dim


def gpt_architecture(*, num_layers: int, hidden_size: int, num_attention_heads: int, vocab_size: int,
                     ffn_hidden_size: int = 0, num_kv_heads: int = 0, gated_mlp: bool = False,
                     tied_embeddings: bool = True, max_positions: int = 0) -> Architecture:
    """A Megatron GPT shape (LayerNorm, biases, dropout, learned positions) from table columns;
    0 means the default: ffn = 4 x hidden, kv heads = heads."""
    heads = num_attention_heads
    if gated_mlp:
        # a gated MLP without learned positions is the Llama recipe (RMSNorm, RoPE, no biases)
        return Architecture(family="llama", num_layers=num_layers, hidden_size=hidden_size,
                            num_attention_heads=heads, num_kv_heads=num_kv_heads or heads,
                            head_dim=hidden_size // heads, ffn_hidden_size=ffn_hidden_size or 4 * hidden_size,
                            vocab_size=vocab_size, gated_mlp=True, tied_embeddings=tied_embeddings,
                            linear_bias=False, norm="rmsnorm", position="rotary", dropout=False)
    return Architecture(family="gpt", num_layers=num_layers, hidden_size=hidden_size, num_attention_heads=heads,
                        num_kv_heads=num_kv_heads or heads, head_dim=hidden_size // heads,
                        ffn_hidden_size=ffn_hidden_size or 4 * hidden_size, vocab_size=vocab_size,
                        tied_embeddings=tied_embeddings, max_positions=max_positions)
