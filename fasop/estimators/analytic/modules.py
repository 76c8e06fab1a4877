"""Selective recompute of Megatron-Core's named sub-modules (`--recompute-modules`): what each one
drops from a layer's stored activations and what its forward costs again in the backward.

Megatron-Core `TransformerConfig.recompute_modules` (megatron/core/transformer/transformer_config.py):
"core_attn", "mlp", "moe" and "shared_experts" use normal checkpointing (the module's input kept, its
inside recomputed), "moe_act", "layernorm" and "mla_up_proj" output-discarding checkpointing (the
module's output freed once consumed, recomputed before the backward needs it). Per module, per layer
of a kind (terms per s·b·h element, 16-bit, as blocks.kind_activation_terms counts them):

| module | drops | recomputes (forward, once more in the backward) |
|---|---|---|
| core_attn | the s×s core terms (none under a fused kernel: it keeps Q, K, V and the output anyway) | the attention core (the fused kernel's forward) |
| layernorm | each sublayer's norm output, the first matmul's input: 2 a sublayer (not Mamba mixers) | the norm: read + write b·s·h |
| mla_up_proj | MLA's Q, K, V from the up projections: heads(4 d_qk + 2 d_v)/h | the Q and KV up projections and RoPE |
| mlp | a dense MLP's inner activations: 6f/h gated, 4f/h not | the MLP's matmuls and activation |
| moe | the MoE block's stored terms (k permuted copies, expert inner activations, router probs, shared) | the whole MoE block: router, dispatch, experts, combine, shared experts |
| moe_act | the routed experts' activation output, fc2's input: 2·k·f_e/h | the activation: read the fc1 output, write its result |
| shared_experts | the shared experts' inner activations: 6f_s/h gated, 4f_s/h | the shared experts' matmuls and activation |

`moe` includes what `moe_act` and `shared_experts` would drop (they are inside it): a list naming
both is costed once. Sources and the Moonlight-16B runs that measure them: docs/estimators.md,
"Selective recompute by module".
"""

from __future__ import annotations

from fasop.specs.architecture import ATTENTION_KINDS, MOE_KINDS, Architecture

MODULES = ("core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts")
"""Megatron-LM's --recompute-modules names (megatron/core/transformer/transformer_config.py)."""


def split_recompute(value: str) -> tuple[str, tuple[str, ...]]:
    """(mode, modules) of a recompute value: `selective:<module>,<module>` -> ("selective", the modules
    deduplicated and sorted, one spelling per set: Megatron-Core applies them as a set); none, selective,
    full -> (value, ()). ValueError naming an unknown module, or a `selective:` listing none."""
    if not value.startswith("selective:"):
        return value, ()
    listed = [m.strip() for m in value[len("selective:"):].split(",")]
    odd = [m for m in listed if m not in MODULES]
    if odd:
        raise ValueError(f"{value!r} " + ("lists no module" if not any(listed) else f"unknown module {odd[0][:40]!r}")
                         + f" (Megatron-LM --recompute-modules: {', '.join(MODULES)})")
    names = tuple(sorted(set(listed)))
    return "selective", names


def recompute_text(modules: tuple[str, ...], mode: str = "selective") -> str:
    """The CSV's recompute cell: `selective:<modules>` (as given: split_recompute's order) or the mode."""
    return f"selective:{','.join(modules)}" if modules else mode


def _sublayers(kind: str) -> int:
    return 1 if kind in ("mamba", "attention", "mlp", "experts") else 2


def _inner(a: Architecture) -> int:
    return 6 if a.gated_mlp else 4


def saved_terms(a: Architecture, kind: str, modules: tuple[str, ...]) -> tuple[float, float]:
    """(replicated, split) bytes per s·b·h element a layer of `kind` no longer keeps when `modules`
    recompute (the core term apart: core_attn drops it whole, activation_bytes does that)."""
    h, replicated, split = a.hidden_size, 0.0, 0.0
    if "layernorm" in modules and kind != "mamba":
        replicated += 2 * _sublayers(kind)
    if "mla_up_proj" in modules and kind in ATTENTION_KINDS and a.mla is not None:
        m = a.mla
        split += a.num_attention_heads * (4 * m.qk_head_dim + 2 * m.v_head_dim) / h
    if "mlp" in modules and kind in ("dense", "mlp"):
        split += _inner(a) * a.ffn_hidden_size / h
    if kind in MOE_KINDS:
        x = a.moe
        if "moe" in modules:
            split += x.experts_per_token * (4 * x.routed_width(h) / h + _inner(a) * x.expert_ffn_hidden_size / h) \
                + _inner(a) * x.shared_width / h + 2 * x.latent_size / h
            replicated += 4 * x.num_experts / h
        else:
            if "moe_act" in modules:
                split += 2 * x.experts_per_token * x.expert_ffn_hidden_size / h
            if "shared_experts" in modules:
                split += _inner(a) * x.shared_width / h
    return replicated, split


def rerun_gemms(a: Architecture, kind: str, b: int, s: int, t: int, modules: tuple[str, ...]) -> tuple:
    """(count, m, n, k) of the weight matmuls a layer of `kind` runs again (routed experts apart:
    the estimator costs them per EP rank, parallel.moe_s)."""
    bs, h, up, out = b * s, a.hidden_size, (3 if a.gated_mlp else 2) - 1, []
    if "mla_up_proj" in modules and kind in ATTENTION_KINDS and a.mla is not None:
        m, heads = a.mla, a.num_attention_heads
        if m.q_lora_rank:
            out.append((1, bs, heads * m.qk_head_dim / t, m.q_lora_rank))
        out.append((1, bs, heads * (m.qk_nope_head_dim + m.v_head_dim) / t, m.kv_lora_rank))
    if "mlp" in modules and kind in ("dense", "mlp"):
        f = a.ffn_hidden_size
        out += [(1, bs, up * f / t, h), (1, bs, h, f / t)]
    if kind in MOE_KINDS and a.moe.shared_width and ({"moe", "shared_experts"} & set(modules)):
        fs = a.moe.shared_width
        out += [(1, bs, up * fs / t, h), (1, bs, h, fs / t)]
    return tuple(out)


def rerun_bytes(a: Architecture, kind: str, b: int, s: int, t: int, sp: bool, e: int,
                modules: tuple[str, ...]) -> float:
    """Bytes the memory-bound kernels a layer of `kind` runs again read and write on one TP rank
    (blocks.kind_elementwise_bytes's terms of the recomputed modules)."""
    bs, h, up = b * s, a.hidden_size, 3 if a.gated_mlp else 2
    replicated, split = 0.0, 0.0
    if "layernorm" in modules and kind != "mamba":
        replicated += _sublayers(kind) * 2 * e * bs * h
    if "mla_up_proj" in modules and kind in ATTENTION_KINDS and a.mla is not None and a.position == "rotary":
        split += 2 * e * bs * (a.num_attention_heads + 1) * a.mla.qk_rope_head_dim
    if "mlp" in modules and kind in ("dense", "mlp"):
        split += up * e * bs * a.ffn_hidden_size
    if kind in MOE_KINDS:
        x, whole = a.moe, "moe" in modules
        if whole or "moe_act" in modules:
            split += up * e * bs * x.experts_per_token * x.expert_ffn_hidden_size
        if whole or "shared_experts" in modules:
            split += up * e * bs * x.shared_width
        if whole:   # the router's input and the permutation of k copies in and out
            replicated += 2 * 2 * e * bs * x.experts_per_token * x.routed_width(h)
    return replicated / (t if sp else 1) + split / t


def rerun_routed(a: Architecture, modules: tuple[str, ...]) -> bool:
    """Whether the routed part of the MoE block (router, dispatch, experts, combine) runs again."""
    return a.moe is not None and "moe" in modules


def quantized_terms(a: Architecture, kind: str, modules: tuple[str, ...] = ()) -> tuple[float, float]:
    """(replicated, split) terms of a layer of `kind` (per s·b·h element, 16-bit, as
    blocks.kind_activation_terms counts them) that are weight matmuls' inputs no other module keeps, which
    Transformer Engine keeps for the backward in the run's quantized format (layers.stored_input_bytes) only,
    less those `modules` drop: each sublayer's first matmul input (the fused norm's output; an MoE block's feeds
    its 16-bit router instead), an MLP's fc2 input (2f/h), each routed copy's fc1 input and fc2 input
    (k(2r/h + 2f_e/h), r the routed width: h, or a latent MoE's latent size) and the shared experts' fc2 input, a
    latent MoE's fc2_latent_proj input (2·latent/h), a Mamba mixer's out_proj input (its gated norm's output,
    2·inner/h). Not MLA's latents: their fused norm keeps its 16-bit input too. The attention output: output_term."""
    h, replicated, split = a.hidden_size, 0.0, 0.0
    if "layernorm" not in modules or kind == "mamba":
        replicated = 2.0 * {"dense": 2, "moe": 1, "attention": 1, "mlp": 1, "mamba": 1}.get(kind, 0)
    if kind in ("dense", "mlp") and "mlp" not in modules:
        split += 2 * a.ffn_hidden_size / h
    if kind in MOE_KINDS and "moe" not in modules:
        x = a.moe
        split += x.experts_per_token * (2 * x.routed_width(h) / h
                                        + (0 if "moe_act" in modules else 2 * x.expert_ffn_hidden_size / h))
        split += 0 if "shared_experts" in modules else 2 * x.shared_width / h
        split += 2 * x.latent_size / h   # a latent MoE's fc2_latent_proj input (the combined latent tokens)
    if kind == "mamba":
        split += 2 * a.mamba.inner / h
    return replicated, split


def output_term(a: Architecture, kind: str) -> float:
    """The attention output (the output projection's input) of a layer of `kind`, per s·b·h element, 16-bit:
    2·q_width/h (MLA 2·heads·d_v/h) on attention kinds, else 0."""
    if kind not in ATTENTION_KINDS:
        return 0.0
    return 2 * (a.q_width if a.mla is None else a.num_attention_heads * a.mla.v_head_dim) / a.hidden_size


def stored_input_delta(a: Architecture, kind: str, modules: tuple[str, ...], stored: float,
                       output_kept: bool) -> tuple[float, float]:
    """(replicated, split) change of a layer's 16-bit terms when its weight matmuls keep their inputs in
    `stored` bytes an element (2: none): quantized_terms shrink to stored / 2 of themselves; the attention
    output shrinks too where only the projection keeps it (unfused or recomputed attention), and where the
    attention kernel keeps its own 16-bit output for its backward (FlashAttention's `out`, fused and not
    recomputed) the projection's quantized copy adds stored / 2 of it."""
    if stored == 2:
        return 0.0, 0.0
    cut, (replicated, split), out = 1 - stored / 2, quantized_terms(a, kind, modules), output_term(a, kind)
    return -cut * replicated, -cut * split + (out * stored / 2 if output_kept else -cut * out)
