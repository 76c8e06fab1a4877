"""Per-layer-kind arithmetic of the models that are not a stack of identical dense layers:
mixture-of-experts, multi-head latent attention, windowed attention, Mamba-2 mixers.

`layers.py` keeps the dense Transformer's formulas (Narayanan et al. 2021, Korthikanti et al.
2022) and asks this module for every other kind; the estimator sees one *mean* layer (the sum
over a model's layers / their count), so totals are exact and a stage of n layers is costed as n
mean layers (docs/models.md says what that leaves out). Notation as layers.py, plus E routed
experts, k experts per token, f_e expert width, f_s shared-expert width (shared_experts x f_e
unless given), and for MLA r_q, r_kv the query / KV ranks, d_n, d_r, d_v the no-RoPE, RoPE and
value head dims.

Parameters (shared/reference/ecosystem/07_moe_cp_fsdp.md §1.2, each term one projection of the
HF modeling code):
  GQA   h·ad + 2h·gd + ad·h (+ biases, + 2d QK-norm, + a sinks)
  MLA   h·r_q + r_q + r_q·a(d_n+d_r) + h(r_kv+d_r) + r_kv + r_kv·a(d_n+d_v) + a·d_v·h
        (no r_q: h·a(d_n+d_r))
  MoE   router E·h + E experts of h·f_e·(3 gated, 2 not) + shared h·f_s·(3 or 2) (+ Qwen2-MoE's h gate)
  Mamba-2  in_proj h(2·d_in + 2·G·N + H), conv (d_in + 2GN)·K (+ bias), dt bias, A, D (3H),
        gated RMSNorm d_in, out_proj d_in·h   (HF NemotronHMamba2Mixer)
Active parameters replace E by k. Forward FLOPs of the weight matmuls: 2 per active weight per
token (router included; Megatron's count leaves it out, 07 §2.1). Attention scores: 2·s·a(d_qk +
d_v) per token over the keys each query sees (all s, unfused; s/2 causal; a window w: w - w²/2s
sliding, w/2 chunked). The Mamba-2 chunked scan (Dao and Gu 2024 §6, its four matmul steps over
chunks of Q tokens): 2·Q·G·N (C·Bᵀ) + 2·Q·H·P (scores × x) + 4·H·P·N (chunk states and their
outputs) per token.
"""

from __future__ import annotations

from collections import Counter
from functools import lru_cache

from fasop.specs.architecture import ATTENTION_KINDS, MOE_KINDS, Architecture


def _up(a: Architecture) -> int:
    return 3 if a.gated_mlp else 2


# ----------------------------------------------------------------------------- parameters
def attention_params(a: Architecture) -> int:
    h, m = a.hidden_size, a.mla
    if m is not None:
        heads = a.num_attention_heads
        q = h * heads * m.qk_head_dim if not m.q_lora_rank else \
            h * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * heads * m.qk_head_dim
        kv = h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank + \
            m.kv_lora_rank * heads * (m.qk_nope_head_dim + m.v_head_dim)
        return q + kv + heads * m.v_head_dim * h
    n = h * a.q_width + 2 * h * a.kv_width + a.q_width * h
    n += (a.q_width + 2 * a.kv_width if a.qkv_biased else 0) + (h if a.linear_bias or a.o_bias else 0)
    return n + (2 * a.head_dim if a.qk_norm else 0) + (a.num_attention_heads if a.attention_sinks else 0)


def mlp_params(a: Architecture, f: int) -> int:
    bias = f * (2 if a.gated_mlp else 1) + a.hidden_size if a.linear_bias else 0
    return a.hidden_size * f * _up(a) + bias


def moe_params(a: Architecture, active: bool) -> int:
    """Router + routed experts (all E, or the k a token uses) + shared experts of one MoE layer."""
    e, h = a.moe, a.hidden_size
    r = e.routed_width(h)
    expert = r * e.expert_ffn_hidden_size * _up(a)
    router = e.num_experts * h
    if e.expert_bias:
        expert += e.expert_ffn_hidden_size * (_up(a) - 1) + r
        router += e.num_experts
    shared = h * e.shared_width * _up(a) + (h if e.shared_gate and e.shared_width else 0)
    latent = 2 * h * e.latent_size   # latent MoE: fc1_latent_proj h -> l, fc2_latent_proj l -> h (no bias)
    return router + (e.experts_per_token if active else e.num_experts) * expert + shared + latent


def mamba_params(a: Architecture) -> int:
    m, h = a.mamba, a.hidden_size
    conv = m.conv_width * m.conv_kernel + (m.conv_width if m.conv_bias else 0)
    bias = (m.in_proj_width + h) if m.proj_bias else 0
    return h * m.in_proj_width + conv + 3 * m.num_heads + m.inner + m.inner * h + bias


def kind_params(a: Architecture, kind: str, active: bool = False) -> int:
    """Parameters of one layer of `kind` (all experts, or with `active` those a token uses)."""
    h = a.hidden_size
    sub = 1 if kind in ("mamba", "attention", "mlp", "experts") else 2
    norms = max(a.layer_norms, sub) if sub == 2 else 1
    n = norms * (h if a.norm == "rmsnorm" else 2 * h)
    if kind in ATTENTION_KINDS:
        n += attention_params(a)
    if kind in ("dense", "mlp"):
        n += mlp_params(a, a.ffn_hidden_size)
    if kind in MOE_KINDS:
        n += moe_params(a, active)
    if kind == "mamba":
        n += mamba_params(a)
    return n


def expert_params(a: Architecture, kind: str) -> int:
    """The routed experts' share of kind_params (what expert parallelism shards)."""
    if kind not in MOE_KINDS:
        return 0
    e = a.moe
    r = e.routed_width(a.hidden_size)
    one = r * e.expert_ffn_hidden_size * _up(a)
    if e.expert_bias:
        one += e.expert_ffn_hidden_size * (_up(a) - 1) + r
    return e.num_experts * one


def mtp_module_params(a: Architecture) -> tuple[int, int]:
    """(dense, routed experts) parameters of one multi-token-prediction module (DeepSeek-V3 §2.2):
    two norms, the 2h x h projection, its block's layers (Architecture.mtp_kinds: DeepSeek-V3 one MoE
    layer) and a final norm; embedding and head shared with the main model."""
    h = a.hidden_size
    norms = 3 * (h if a.norm == "rmsnorm" else 2 * h)
    dense = norms + 2 * h * h + sum(kind_params(a, k) - expert_params(a, k) for k in a.mtp_kinds)
    return dense, sum(expert_params(a, k) for k in a.mtp_kinds)


def mtp_params(a: Architecture) -> int:
    """The config's MTP modules' parameters (counted apart from the published totals)."""
    return a.mtp_layers * sum(mtp_module_params(a)) if a.mtp_layers and a.mtp_kinds else 0


# ----------------------------------------------------------------------------- matmuls and scores
def kind_gemms(a: Architecture, kind: str, b: int, s: int, t: int, ep: int = 1, routed: bool = True) -> tuple:
    """(count, m, n, k) of one layer's forward weight matmuls on one TP rank. MLA's down
    projections are replicated over TP (Megatron-Core); the router too; routed experts are a
    grouped GEMM of E/ep experts of bs·k·ep/E tokens each (balanced routing, 07 §2.2). Without
    `routed`, the router and the routed experts are left out (the estimator costs them per EP
    rank: parallel.moe_s)."""
    h, bs, up = a.hidden_size, b * s, _up(a) - 1
    out = []
    if kind in ATTENTION_KINDS:
        m, heads = a.mla, a.num_attention_heads
        if m is None:
            out += [(1, bs, (a.q_width + 2 * a.kv_width) / t, h), (1, bs, h, a.q_width / t)]
        else:
            if m.q_lora_rank:
                out += [(1, bs, m.q_lora_rank, h), (1, bs, heads * m.qk_head_dim / t, m.q_lora_rank)]
            else:
                out += [(1, bs, heads * m.qk_head_dim / t, h)]
            out += [(1, bs, m.kv_lora_rank + m.qk_rope_head_dim, h),
                    (1, bs, heads * (m.qk_nope_head_dim + m.v_head_dim) / t, m.kv_lora_rank),
                    (1, bs, h, heads * m.v_head_dim / t)]
    if kind in ("dense", "mlp"):
        f = a.ffn_hidden_size
        out += [(1, bs, up * f / t, h), (1, bs, h, f / t)]
    if kind in MOE_KINDS:
        e = a.moe
        fe, fs, rows = e.expert_ffn_hidden_size, e.shared_width, bs * e.experts_per_token * ep / e.num_experts
        r = e.routed_width(h)
        if routed:
            out += [(1, bs, e.num_experts, h), (e.num_experts / ep, rows, up * fe / t, r),
                    (e.num_experts / ep, rows, r, fe / t)]
        if e.latent_size:   # the latent projections, duplicated over TP: each rank its own bs / t tokens
            out += [(1, bs / t, e.latent_size, h), (1, bs / t, h, e.latent_size)]
        if fs:
            out += [(1, bs, up * fs / t, h), (1, bs, h, fs / t)]
    if kind == "mamba":
        mb = a.mamba
        out += [(1, bs, mb.in_proj_width / t, h), (1, bs, h, mb.inner / t)]
    return tuple(out)


def keys_fraction(a: Architecture, layer: int, s: int, causal_fraction: float) -> float:
    """Share of the s x s scores layer `layer` computes: `causal_fraction` (1 unfused, 1/2 a
    causal kernel), or with a fused kernel on a windowed layer the window's share."""
    w = a.window
    if causal_fraction == 1.0 or not w or layer not in a.windowed_layers or w >= s:
        return causal_fraction
    if a.window_kind == "chunked":
        return w / (2 * s)
    return (s * w - w * w / 2) / (s * s)


def scan_flops(a: Architecture, b: int, s: int, t: int) -> float:
    """Forward FLOPs of one Mamba-2 layer's chunked scan on one TP rank (heads split over t)."""
    m = a.mamba
    per_token = 2 * m.chunk_size * m.groups * m.state_size + 2 * m.chunk_size * m.inner \
        + 4 * m.inner * m.state_size
    return b * s * per_token / t


SSD_FLASH_RATIO = 0.42
"""Share of FlashAttention-2's FLOP rate that Mamba-2's chunked scan reaches on the same GPU, both in
this module's FLOP count (docs/models.md "Mamba-2 scan rate"). Measured: mamba_ssm 2.2.6's Triton
`_chunk_scan_fwd` on H800 SXM (tile-ai/tilelang benchmark/mamba2, README and its bar chart: batch 8,
80 heads, 1 group, chunk 256, head dim 64, state 128, seq 8192) ran 90.8 TFLOP/s in that benchmark's
count, Q·H·P (causal half of the intra-chunk scores x x) + 2·H·P·N per token; this module counts the
same kernel's work as 2·Q·H·P + 2·H·P·N, 1.5x as many (Q = 256, P = 64, N = 128), so 136.2 TFLOP/s,
0.138 of the 989 TFLOP/s 16-bit peak, against FlashAttention-2's measured 0.33 on the same die
(gpus.yaml H100-SXM): 0.138 / 0.33 = 0.42. The other scan kernels (bmm_chunk, chunk_state) are
taken to run at the same rate (not measured)."""


def mean_scan_flops(a: Architecture, b: int, s: int, t: int) -> float:
    """Mean over the layers of the Mamba-scan FLOPs on one TP rank (core_flops' scan part)."""
    if a.mamba is None:
        return 0.0
    return sum(1 for kind in a.kinds if kind == "mamba") * scan_flops(a, b, s, t) / a.num_layers


@lru_cache(maxsize=256)
def core_flops(a: Architecture, b: int, s: int, t: int, causal_fraction: float) -> float:
    """Mean over the layers of the attention-score and Mamba-scan FLOPs on one TP rank."""
    if a.mla is not None:
        width = a.num_attention_heads * (a.mla.qk_head_dim + a.mla.v_head_dim)
    else:
        width = 2 * a.q_width
    total = 0.0
    for i, kind in enumerate(a.kinds):
        if kind in ATTENTION_KINDS:
            total += 2 * b * s * s * width * keys_fraction(a, i, s, causal_fraction) / t
        elif kind == "mamba":
            total += scan_flops(a, b, s, t)
    return total / a.num_layers


# ----------------------------------------------------------------------------- bytes
def kind_elementwise_bytes(a: Architecture, kind: str, b: int, s: int, t: int, sp: bool, e: int) -> float:
    """Bytes the memory-bound kernels of one non-dense layer read and write (layers.py's dense
    terms, per sublayer): norm and residual add per sublayer, the MLP activation over the active
    width, the permutation of k copies of each token in and out of the experts (read + write),
    RoPE, the Mamba conv and gated norm."""
    bs, h = b * s, a.hidden_size
    sub = 1 if kind in ("mamba", "attention", "mlp", "experts") else 2
    replicated = sub * 5 * e * bs * h
    split = 0.0
    if kind in ATTENTION_KINDS and a.position == "rotary":
        m = a.mla
        rope = (a.num_attention_heads + 1) * m.qk_rope_head_dim if m else a.q_width + a.kv_width
        split += 2 * e * bs * rope
    if kind in ("dense", "mlp"):
        split += _up(a) * e * bs * a.ffn_hidden_size
    if kind in MOE_KINDS:
        x = a.moe
        split += _up(a) * e * bs * (x.experts_per_token * x.expert_ffn_hidden_size + x.shared_width)
        replicated += 2 * 2 * e * bs * x.experts_per_token * x.routed_width(h)
    if kind == "mamba":   # conv read + written, the (ungated) RMSNorm read + written, the scan, the layout copies
        split += e * bs * (2 * a.mamba.conv_width + 2 * a.mamba.inner) + bs * scan_bytes_per_token(a, e) \
            + bs * layout_copy_bytes(a, b, e)[0]
    return replicated / (t if sp else 1) + split / t


FP32 = 4


def scan_bytes_per_token(a: Architecture, e: int) -> float:
    """Bytes the Mamba-2 chunked scan's kernels move per token in the forward, on all heads. Megatron-Core's
    MambaMixer trains through mamba_ssm's `mamba_split_conv1d_scan_combined` (`_ssm_training`, the
    memory-efficient path) without its RMSNorm weight, so z goes into the scan (`_mamba_chunk_scan_combined_fwd`
    with z: chunk_scan gates y by silu(z) and also writes the ungated `out_x` it saves for the backward), and
    the mixer's RMSNorm follows ungated. With I = d_inner, G groups of N states, H heads, chunks of Q tokens
    and S = I·N/Q chunk-state elements per token: chunk_state reads x and B and writes the chunk states in
    fp32 (`states_in_fp32=True`); state_passing reads them and writes the passed states in the 16-bit
    dtype; bmm_chunk reads C and B and writes C·Bᵀ in fp32 (G·Q per token); chunk_scan reads C·Bᵀ, x, z, C
    and the passed states and writes out and out_x; chunk_cumsum and the scans read and write dt and its
    cumulative sum (fp32, H per token, 4 passes). Per token:
        e(5I + 4GN) [x read twice, z read, out and out_x written, B and C read twice each] + S(4 + 4 + 2e)
        + 8GQ + 16H.
    The backward's kernels are counted on their own (scan_backward_bytes_per_token)."""
    m = a.mamba
    i, gn, h = m.inner, m.groups * m.state_size, m.num_heads
    states = i * m.state_size / m.chunk_size
    return e * (5 * i + 4 * gn) + states * (2 * FP32 + 2 * e) + 2 * FP32 * m.groups * m.chunk_size + 4 * FP32 * h


def scan_backward_bytes_per_token(a: Architecture, e: int) -> float:
    """Bytes the chunked scan's backward kernels move per token, on all heads: mamba_ssm ssd_combined.py
    `_mamba_chunk_scan_combined_bwd` (z given, as the forward), kernel by kernel, notation as
    scan_bytes_per_token. It first recomputes the forward's C·Bᵀ (reads C, B: 2eGN; writes 4GQ), chunk
    states (reads x, B: e(I + GN); writes 4S) and passed states (reads 4S, writes them in fp32: 4S), then
    chunk_scan_bwd_dz (reads x, z, out_x, dout; writes dz and the gated dout: 6eI), chunk_scan_bwd_dstates
    (reads C, dout: e(GN + I); writes dstates in fp32: 4S), state_passing_bwd (reads states and dstates: 8S;
    writes both in 16 bits: 2eS), chunk_scan_chunk_state_bwd_dx (reads x, C·Bᵀ, dout, dstates, B; writes dx:
    e(3I + S + GN) + 4GQ), chunk_state_bwd_db (reads x, dstates, B; writes dB: e(I + S + 2GN)),
    chunk_scan_bwd_dC (reads states, dout, C; writes dC: e(I + S + 2GN)), chunk_scan_bwd_dcb (reads x, dout:
    2eI; writes dC·B in fp32: 4GQ), the two bmm_chunk_bwd (each reads C or B, dCB and the residual, writes
    dB or dC: 2(3eGN + 4GQ)) and chunk_scan_bwd_ddAcs_stable (reads x, dout, C·Bᵀ: 2eI + 4GQ); the dt
    recompute and gradient kernels read and write dt-sized fp32 rows twice the forward's (32H). Per token:
        e(17I + 15GN) + S(24 + 5e) + 24GQ + 32H.
    Nemotron-3-Nano (I 4096, G 8, N 128, Q 128, H 64), bf16: 335,872 bytes, against the 2 x 107,520 of the
    forward's that the old rule (backward = 2 x forward) charged."""
    m = a.mamba
    i, gn, h = m.inner, m.groups * m.state_size, m.num_heads
    states = i * m.state_size / m.chunk_size
    return e * (17 * i + 15 * gn) + states * (6 * FP32 + 5 * e) + 6 * FP32 * m.groups * m.chunk_size + 8 * FP32 * h


def layout_copy_bytes(a: Architecture, b: int, e: int) -> tuple[float, float]:
    """(forward, backward) bytes per token of Megatron-Core's MambaMixer layout copies. The model's
    activations are [s, b, h]; the scan takes [b, s, ...]: `_ssm_training` copies the in_proj output
    (`rearrange(zxBCdt, "l b d -> b l d").contiguous()`, W = in_proj width) and the scan's output back
    (`rearrange(y, "b l d -> l b d").contiguous()`, I wide), each read and written: 2e(W + I). The
    backward's permuted dzxbcdt is copied once more before the in_proj's weight and input gradients
    (Transformer Engine's Linear takes a contiguous gradient): 2eW; dy needs none (its last dimension
    stays contiguous, which the scan's kernels accept). With one sequence a micro-batch (b = 1) the
    [s, 1, d] -> [1, s, d] view is already contiguous and nothing is copied."""
    if b <= 1:
        return 0.0, 0.0
    m = a.mamba
    return 2 * e * (m.in_proj_width + m.inner), 2 * e * m.in_proj_width


def conv_backward_extra_bytes(a: Architecture, e: int) -> float:
    """Bytes per token the causal conv1d's backward moves beyond twice its forward's (read xBC, write the
    conv output: 2e·W, W = conv_width). mamba_ssm's `MambaSplitConv1dScanCombinedFn.backward` (ssd_combined.py,
    the fused path Megatron-Core's `_ssm_training` calls) saves only zxbcdt, so it first runs the conv's
    forward again (`causal_conv1d_fwd` on xBC: 2e·W) to recompute x, B, C for the scan's backward, then
    `causal_conv1d_bwd` reads xBC and dxBC and writes dxBC into dzxbcdt (3e·W; the SiLU is recomputed inside
    it): 5e·W against the 4e·W of twice the forward, e·W more."""
    return e * a.mamba.conv_width


def mamba_backward_extra_bytes(a: Architecture, b: int, s: int, t: int, e: int) -> float:
    """Bytes the Mamba layers' backward moves beyond the 2 x forward bytes cost._layer_s charges every
    layer's backward, averaged over the layers, on one TP rank (heads split over t): the scan's backward
    kernels, the conv's recomputed forward and the layout copy of dzxbcdt against twice the scan's, the
    conv's and the copies' forward bytes."""
    if a.mamba is None:
        return 0.0
    fwd, bwd = layout_copy_bytes(a, b, e)
    per_token = scan_backward_bytes_per_token(a, e) + bwd - 2 * (scan_bytes_per_token(a, e) + fwd) \
        + conv_backward_extra_bytes(a, e)
    return sum(1 for kind in a.kinds if kind == "mamba") * b * s * per_token / t / a.num_layers


def unfused_score_bytes(e: int) -> int:
    """Bytes per s x s score of unfused attention, dropout apart: QK^T written, the masked softmax read and
    written, AV's input read (4e); fp32 values add a masked_fill pass (+2e): Megatron's FusedScaleMaskSoftmax
    fuses mask and softmax for 16-bit input only (fused_softmax.py is_kernel_available, forward_torch_softmax)."""
    return 6 * e if e >= 4 else 4 * e


def kind_gemm_bytes(a: Architecture, kind: str, b: int, s: int, t: int, e: int, operand: float,
                    routed: bool = True) -> float:
    """Inputs, weights and outputs of one layer's weight matmuls (kind_gemms), plus the attention
    core's Q, K, V reads and context write."""
    total = 0.0
    for c, m, n, k in kind_gemms(a, kind, b, s, t, routed=routed):
        total += c * (operand * (m * k + n * k) + e * m * n)
    if kind in ATTENTION_KINDS:
        ml = a.mla
        qkv = a.num_attention_heads * (2 * ml.qk_head_dim + ml.v_head_dim) if ml else a.q_width + 2 * a.kv_width
        ctx = a.num_attention_heads * ml.v_head_dim if ml else a.q_width
        total += b * s * (operand * qkv + e * ctx) / t
    return total


def kind_cast_elements(a: Architecture, kind: str, b: int, s: int, t: int, routed: bool = True) -> float:
    """Matmul inputs an FP8 run casts (the m x k operand of every weight matmul)."""
    return sum(c * m * k for c, m, n, k in kind_gemms(a, kind, b, s, t, routed=routed))


def kind_activation_terms(a: Architecture, kind: str, s: int) -> tuple[float, float, float]:
    """(replicated, split, core) bytes per s·b·h element of one non-dense layer's stored
    activations, 16-bit, term by term as layers.py generalises Korthikanti et al. 2022 Table 2:
    each sublayer keeps its norm input and its first matmul's input (4); an attention its Q, K, V
    and the output projection's input (MLA: also the two latent inputs); an MLP its inner
    activations (6f/h gated, 4f/h not); MoE the k permuted copies of a token, their inner
    activations and outputs, the fp32 router probabilities and the shared expert; Mamba-2 the
    in_proj output, the conv output, the scan output and the gated norm's output."""
    h, mask = a.hidden_size, 1 if a.dropout else 0
    inner = 6 if a.gated_mlp else 4
    sub = 1 if kind in ("mamba", "attention", "mlp", "experts") else 2
    replicated, split, core = sub * (4 + mask), 0.0, 0.0
    if kind in ATTENTION_KINDS:
        m = a.mla
        if m is None:
            split += (4 * a.q_width + 4 * a.kv_width) / h
        else:
            heads = a.num_attention_heads
            split += (2 * m.q_lora_rank + 2 * m.kv_lora_rank
                      + heads * (4 * m.qk_head_dim + 4 * m.v_head_dim)) / h
        core = (2 + 3 * mask) * a.num_attention_heads * s / h
    if kind in ("dense", "mlp"):
        split += inner * a.ffn_hidden_size / h
    if kind in MOE_KINDS:
        x = a.moe
        split += x.experts_per_token * (4 * x.routed_width(h) / h + inner * x.expert_ffn_hidden_size / h) \
            + inner * x.shared_width / h + 2 * x.latent_size / h   # + fc2_latent_proj's input
        replicated += 4 * x.num_experts / h
    if kind == "mamba":
        mb = a.mamba
        split += 2 * (mb.in_proj_width + mb.conv_width + 2 * mb.inner) / h
    return replicated, split, core


def mean_over_kinds(a: Architecture, fn) -> float:
    """fn(kind) averaged over the layers; fn's own value when every layer is of one kind."""
    counts = Counter(a.kinds)
    if len(counts) == 1:
        return fn(next(iter(counts)))
    return sum(n * fn(kind) for kind, n in sorted(counts.items())) / a.num_layers
