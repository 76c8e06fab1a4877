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
    expert_bias: bool = False
    """Biases on every expert's matrices and on the router (GPT-OSS)."""
    shared_gate: bool = False
    """A sigmoid gate Linear(h, 1) on the shared expert's output (Qwen2-MoE)."""
    latent_size: int = 0
    """Latent MoE (Nemotron 3 Super / Ultra, `moe_latent_size`): the routed experts work on tokens
    projected h -> latent_size before the dispatch and back after the combine (Megatron-Core
    moe_layer.py fc1_latent_proj / fc2_latent_proj); router and shared experts see h. 0: none."""
    router_groups: int = 1
    """Group-limited routing (DeepSeek-V2/V3 `n_group`, Megatron-Core --moe-router-num-groups): the
    experts in this many equal contiguous groups, of which each token picks `router_group_topk`
    (`topk_group`) and its k experts only within them (DeepSeek-V3's node-limited routing). 1: none."""
    router_group_topk: int = 1
    """The groups each token's experts lie in (`topk_group`, --moe-router-group-topk): 1 to router_groups,
    at most experts_per_token (the config loader checks)."""

    @property
    def shared_width(self) -> int:
        return self.shared_ffn_hidden_size or self.shared_experts * self.expert_ffn_hidden_size

    def routed_width(self, hidden_size: int) -> int:
        """The width of a routed token: what the dispatch sends and the experts' fc1 reads."""
        return self.latent_size or hidden_size


@dataclass(frozen=True, kw_only=True)
class MLA:
    """DeepSeek's multi-head latent attention (DeepSeek-V2 §2.1): queries through a rank
    `q_lora_rank` bottleneck (0: a plain h -> heads x (nope + rope) projection), keys and values
    through a shared `kv_lora_rank` latent plus one `qk_rope_head_dim` RoPE key shared by all heads."""
    q_lora_rank: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim


@dataclass(frozen=True, kw_only=True)
class Mamba:
    """A Mamba-2 mixer (Dao and Gu 2024, "Transformers are SSMs"): `num_heads` heads of `head_dim`
    channels (d_inner = heads x head_dim), `groups` groups of B and C of `state_size` each, a
    depthwise causal conv of `conv_kernel` taps over x, B and C, scanned in chunks of `chunk_size`."""
    num_heads: int
    head_dim: int
    state_size: int
    groups: int
    conv_kernel: int
    chunk_size: int
    conv_bias: bool = True
    proj_bias: bool = False

    @property
    def inner(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def in_proj_width(self) -> int:
        """z, x, B, C and dt: 2 d_inner + 2 groups x state + heads."""
        return 2 * self.inner + 2 * self.groups * self.state_size + self.num_heads

    @property
    def conv_width(self) -> int:
        return self.inner + 2 * self.groups * self.state_size


MOE_KINDS = ("moe", "experts")
"""Layer kinds whose MLP is a mixture of experts."""
ATTENTION_KINDS = ("dense", "moe", "attention")
"""Layer kinds with an attention mixer."""
LAYER_KINDS = ("dense", "moe", "mamba", "attention", "mlp", "experts")
"""dense: attention + MLP; moe: attention + experts (one Transformer layer each); mamba: a Mamba-2
mixer alone; attention, mlp, experts: one sublayer alone (Nemotron-H's '*', '-', 'E' blocks)."""


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
    qkv_bias: bool | None = None
    """Bias on the Q, K and V projections: None as the other linears (`linear_bias`, or with
    `o_bias`); True alone (Qwen2); False beside biased output and MLP linears (GPT-Neo's q/k/v_proj
    have none, its out_proj and MLP do). `qkv_biased` resolves it."""
    linear_bias: bool = True
    """Bias on every linear layer (GPT-2, BERT, GPT-3); False for the Llama family."""
    norm: Literal["layernorm", "rmsnorm"] = "layernorm"
    position: Literal["learned", "rotary", "relative", "none"] = "learned"
    """Learned position embeddings add max_positions x hidden parameters to the first stage; rotary
    ones (RoPE) cost elementwise bytes on Q and K; none: the attention sees no positions (NoPE:
    Nemotron-H's hybrids, whose Mamba layers carry the order)."""
    max_positions: int = 0
    position_offset: int = 0
    """Extra rows of the learned position table (OPT: 2, its positions start at index 2)."""
    embedding_width: int = 0
    """Width of the token embedding when it differs from hidden_size (OPT-350M's word_embed_proj_dim
    512): project_in (e x h) and project_out (h x e) linears, no bias, sit between it and the layers;
    0: the embedding is hidden_size wide."""
    final_norm: bool = True
    """A norm after the last layer (False: OPT-350M, post-LN, has none)."""
    dropout: bool = True
    """Dropout after attention, after the MLP and on the attention probabilities (its masks
    are stored activations, Korthikanti et al. 2022 §4.1); False for the Llama family."""
    moe: MoE | None = None
    """The experts of the layers whose `layer_kinds` entry is an MoE one (None: a dense model)."""
    layer_kinds: tuple[str, ...] = ()
    """Per transformer layer, in order: "dense" (attention + MLP), "moe" (attention + experts),
    "mamba" (a Mamba-2 mixer, no attention), "mamba-moe"/"attention-only"/... as a family needs;
    empty: every layer "dense" (or "moe" when `moe` is set)."""
    mla: MLA | None = None
    """Multi-head latent attention in place of GQA (DeepSeek-V2/V3, Kimi-K2, Moonlight)."""
    mamba: Mamba | None = None
    """The Mamba-2 mixer of the "mamba" layers (Nemotron-H, Nemotron 3)."""
    o_bias: bool = False
    """Bias on the attention output projection too (GPT-OSS `attention_bias`)."""
    qk_norm: bool = False
    """RMSNorm over head_dim on queries and keys (Qwen3, Gemma-3): 2 x head_dim parameters a layer."""
    attention_sinks: bool = False
    """One learned logit per head added to the softmax (GPT-OSS): heads parameters a layer."""
    rope_mscale: float = 1.0
    """YaRN's attention (concentration) factor on RoPE's cos / sin, as Megatron-Core computes it from
    the config's `rope_scaling` (yarn_rotary_pos_embedding.py: 0.1 ln(factor) + 1, or the ratio of
    the `mscale` / `mscale_all_dim` ones; GPT-OSS 1.35, DeepSeek-V3 1.0). Not 1: Megatron-Core
    applies RoPE unfused (rope_utils.py), costed in eager.unfused_rope_extra_bytes."""
    layer_norms: int = 2
    """Norms per transformer layer (Gemma-2/3, Grok-1: 4; a Nemotron-H block: 1)."""
    window: int = 0
    """Tokens a windowed attention layer sees (0: none)."""
    window_kind: Literal["sliding", "chunked"] = "sliding"
    """sliding: each query sees the last `window` tokens; chunked: the tokens of its own chunk (Llama 4)."""
    windowed_layers: tuple[int, ...] = ()
    """Indices of the layers whose attention is windowed."""
    mtp_layers: int = 0
    """Multi-token-prediction modules (DeepSeek-V3 §2.2; Nemotron-H `num_nextn_predict_layers`): counted
    apart (not in the published totals); trained on the last stage by a `fasop validate` row by default
    (its `mtp_layers`), by a search with --mtp-layers (estimators.md)."""
    mtp_kinds: tuple[str, ...] = ()
    """The layer kinds of one MTP module's block (DeepSeek-V3: one MoE layer; Nemotron-H: its
    `mtp_layers_block_type`)."""
    logit_softcap: float = 0.0
    """Gemma-2's tanh soft-capping of the final logits (elementwise; 0: none)."""
    notes: tuple[str, ...] = ()
    """One line each on what of the config is not modelled (a vision tower, an MTP module)."""

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
        if self.layer_kinds and len(self.layer_kinds) != self.num_layers:
            raise ValueError(f"{len(self.layer_kinds)} layer kinds for num_layers={self.num_layers}")
        odd = sorted(set(self.layer_kinds) - set(LAYER_KINDS))
        if odd:
            raise ValueError(f"unknown layer kind {odd[0]!r} (one of {', '.join(LAYER_KINDS)})")
        if any(k in MOE_KINDS for k in self.kinds) and self.moe is None:
            raise ValueError("MoE layers without the experts' shape (moe)")
        if "mamba" in self.kinds and self.mamba is None:
            raise ValueError("Mamba layers without the mixer's shape (mamba)")

    def mtp_problem(self, depths: int, name: str = "the model") -> str:
        """Why the last stage cannot train `depths` multi-token-prediction depths of this model ('' when it
        can): no module whose block is known, or more depths than layers. `name` the model, in the message."""
        if depths and not self.mtp_kinds:
            return f"{depths}: {name} has no multi-token-prediction module"
        return f"{depths} is more than {name}'s {self.num_layers} layers" if depths > self.num_layers else ""

    def cp_comm_problem(self, tp: int, cp: int, comm: str) -> str:
        """Why Transformer Engine refuses context parallelism's exchange `comm` (p2p: the ring; a2a: Ulysses; all_gather:
        K and V gathered whole) for this attention at tp x cp ('' where it runs it; TE @d0067d0 context_parallel.py
        `attn_forward_func_with_cp` and `AttnFuncWithCPAndQKVOA2A`): the ring runs no sliding window, ring and
        all-gather no softmax but the vanilla one (attention sinks); a2a needs the query and key / value heads of a TP
        rank to divide by cp (docs/parallelism.md)."""
        if cp <= 1:
            return ""
        name = {"p2p": "CP ring (p2p)", "all_gather": "CP all-gather (all_gather)"}.get(comm)
        if name:
            if comm == "p2p" and self.window and self.window_kind == "sliding" and self.windowed_layers:
                return f"Transformer Engine's {name} does not run sliding-window attention"
            return f"Transformer Engine's {name} runs only the vanilla softmax, not attention sinks" \
                if self.attention_sinks else ""
        heads, kv = self.num_attention_heads, self.num_attention_heads if self.mla is not None else self.num_kv_heads
        if heads % (tp * cp) or kv % (tp * cp):
            return (f"a2a (Ulysses) CP needs the query and key/value heads a TP rank holds ({heads // tp} and "
                    f"{kv // tp} at tp {tp}) to divide by cp {cp}")
        return ""

    @property
    def hybrid(self) -> bool:
        """Whether some layer is other than attention + MLP / experts (Mamba, lone sublayers: Nemotron-H)."""
        return bool(set(self.layer_kinds) - {"dense", "moe"})

    @property
    def kinds(self) -> tuple[str, ...]:
        """Each layer's kind (`layer_kinds`, or all "dense" / all "moe")."""
        return self.layer_kinds or ("moe" if self.moe else "dense",) * self.num_layers

    @property
    def embed_width(self) -> int:
        """Width of the token embedding (and of a tied head's matrix)."""
        return self.embedding_width or self.hidden_size

    @property
    def qkv_biased(self) -> bool:
        """Whether the Q, K and V projections have biases (qkv_bias resolved)."""
        return self.linear_bias or self.o_bias if self.qkv_bias is None else self.qkv_bias

    @property
    def projection_params(self) -> int:
        """One of the two embedding projections (project_in or project_out): e x h, 0 without."""
        return self.embed_width * self.hidden_size if self.embed_width != self.hidden_size else 0

    @property
    def q_width(self) -> int:
        """Width of the query projection's output (heads x head_dim)."""
        return self.num_attention_heads * self.head_dim

    @property
    def kv_width(self) -> int:
        """Width of the key (and of the value) projection's output."""
        return self.num_kv_heads * self.head_dim

    @property
    def attention_widths(self) -> tuple[int, int, int, int]:
        """Widths of one token's Q, K, V and context at the attention core, all heads: MLA's keys per head,
        up-projected (d_nope + d_rope), its values and context d_v wide (Megatron-Core passes them so)."""
        if self.mla is None:
            return self.q_width, self.kv_width, self.kv_width, self.q_width
        heads, m = self.num_attention_heads, self.mla
        return heads * m.qk_head_dim, heads * m.qk_head_dim, heads * m.v_head_dim, heads * m.v_head_dim


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
