"""Per-layer arithmetic of a Transformer: parameters, FLOPs, bytes moved and activation bytes.

Pure functions of an :class:`~fasop.specs.architecture.Architecture`, a micro-batch of `b` sequences of `s` tokens,
the tensor-parallel degree `t` and a :class:`Recipe` (recompute, sequence parallelism, ZeRO stage, virtual stages,
precision). Counts are per GPU of a TP group. Notation (Narayanan et al. 2021; Korthikanti et al. 2022): h hidden,
a heads, g kv heads, d head dim, f ffn width, V vocabulary, t tensor-parallel degree.

Parameters of one layer: Q, K, V, O projections h(ad) + 2h(gd) + (ad)h, the MLP h·f·(2, or 3 when gated), norms (2h
RMSNorm, 4h LayerNorm) and biases (GPT: 3 projections + O + 2 MLP; Qwen2: QKV only). GPT-3 175B: 12h² + 13h a layer.

Forward FLOPs of one layer (2 FLOPs per multiply-add; Narayanan et al. 2021, Eq. 3 derivation):
  projections 2bs·h·(ad + 2gd) + 2bs·(ad)·h, MLP 2bs·h·f·(2 or 3), attention core 2·2·b·s²·(ad) times the share
  of the s×s scores computed: 1 for an unfused kernel that masks after computing all scores, 1/2 for a causal
  kernel that skips masked blocks (FlashAttention). Backward = 2 × forward.
Output head: 2bs·h·V forward; the loss is elementwise over b·s·V logits. Elementwise bytes (memory-bound kernels,
read + write, fused as Megatron-LM fuses them): two norms 2·2bsh, two bias-dropout-adds 2·3bsh (+ 1-byte masks), the
activation 2bsf (3bsf gated), rotary 2bs(ad + gd), and for an unfused attention the s×s scores: written by QK^T,
read and written by the scale-mask-softmax, read by scores×V (4·abs²), and the dropout (2 + 1)·abs². Norms and
residual kernels run on every TP rank unless sequence parallelism splits them. Backward moves 2 × the forward bytes.

Activation bytes of one layer, 16-bit (Korthikanti et al. 2022, §4.1 and Table 2):
  no parallelism  sbh(34 + 5as/h);  TP  sbh(10 + 24/t + 5as/(ht));  TP+SP  sbh/t (34 + 5as/h);
  selective recompute drops the 5as²b attention-core terms;  full recompute keeps 2sbh (/t with SP).
The 34 and 24 are generalised term by term to GQA, explicit head_dim, any ffn width, gated MLPs and
models without dropout (a dropout mask is 1 byte an element; without dropout there is none):
  replicated 4 (norm inputs) + 2 (QKV input) + 2 (MLP input) + 2·[dropout] (two masks),
  split      2ad/h (Q) + 4gd/h (K, V) + 2ad/h (O input) + 4f/h, or 6f/h gated (MLP inner),
  core       (2 + 3·[dropout]) as/h  (softmax output, dropout mask and output).
A quantized run keeps the matmul inputs among them in Recipe.stored_input_bytes (modules.stored_input_delta). With
f = 4h, g = a, ad = h and dropout these are exactly 10, 24 and 5 of Table 2.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from fasop.estimators.analytic import blocks as B
from fasop.estimators.analytic import modules as M
from fasop.plans.space import CP_COMMS
from fasop.specs.architecture import Architecture
from fasop.specs.catalog import AnalyticParams

RECOMPUTES = ("none", "selective", "full")
PRECISIONS = ("bf16", "fp16", "fp8", "fp32", "tf32", "mxfp8", "nvfp4")
LOW_PRECISIONS = ("fp8", "mxfp8", "nvfp4")
"""Precisions whose weight matmuls run on 8- or 4-bit tensor cores (Transformer Engine: FP8 with per-tensor scales,
MXFP8 and NVFP4 block-scaled on Blackwell) while weights, activations and gradients stay as a 16-bit run keeps
them (but the matmul inputs kept for the backward: Recipe.stored_input_bytes); the attention core stays 16-bit."""
OPERAND_BYTES = {"fp8": 1.0, "mxfp8": 1.0 + 1 / 32, "nvfp4": 0.5 + 1 / 16}
"""Bytes a low-precision matmul reads per input or weight element: the value plus its share of the
block scale (MXFP8: one 1-byte E8M0 scale a 32-element block; NVFP4: one 1-byte E4M3 scale a 16-element
block; NVIDIA, "Pretraining LLMs with NVFP4", arXiv 2509.25149 §2)."""
FULL_PRECISIONS = ("fp32", "tf32")
"""Precisions keeping weights, activations and gradients in fp32 (no 16-bit copy, no master weights)."""
ZERO_STAGES = (0, 1, 2, 3)


@dataclass(frozen=True, kw_only=True)
class Recipe:
    """How a plan trains, beyond its degrees: what the analytic estimator varies."""

    recompute: Literal["none", "selective", "full"] = "none"
    """Activation recomputation (Korthikanti et al. 2022): none, the attention core only, or the whole layer."""
    sequence_parallel: bool = False
    """Megatron sequence parallelism: norms/dropouts split over the TP group, RS + AG instead of AR."""
    zero: int = 0
    """ZeRO stage: 1 shards optimizer states (Megatron's distributed optimizer), 2 also gradients, 3 also weights."""
    virtual_stages: int = 1
    """Model chunks per pipeline rank (interleaved 1F1B, Narayanan et al. 2021 §2.2.2)."""
    precision: Literal["bf16", "fp16", "fp8", "fp32", "tf32", "mxfp8", "nvfp4"] = "bf16"
    """Matmul precision; weights, activations and gradients are kept as a 16-bit mixed-precision run keeps
    them, or all in fp32 (fp32, tf32)."""
    recompute_layers: int | None = None
    """With full recompute: the first N layers of each model chunk recompute (Megatron-LM --recompute-method
    block --recompute-num-layers N); None: every layer (--recompute-method uniform). block_recompute.py."""
    recompute_modules: tuple[str, ...] = ()
    """With selective recompute: Megatron-Core's --recompute-modules (modules.MODULES; modules.py); () is the
    attention core as Korthikanti et al. 2022 recompute it (free under a fused kernel)."""
    offload_layers: int = 0
    """Layers of the model whose activations go to host memory between forward and backward (Megatron-Core
    --cpu-offloading-num-layers N; offload.py)."""
    hsdp: bool = False
    """Hybrid sharding (zero >= 1): states sharded inside a node, replicated across nodes (torchtitan)."""
    bf16_layers: int = 0
    """A low-precision run's layers kept 16-bit (Megatron-Core num_layers_at_{start,end}_in_bf16; cost.layer_s)."""
    cp_comm: Literal["p2p", "a2a", "all_gather"] = "p2p"
    """CP's exchange with cp > 1 (Megatron-Core --cp-comm-type): the K/V ring, all-to-alls, all-gathers (context.py)."""

    def __post_init__(self):
        problems = []
        if self.recompute not in RECOMPUTES:
            problems.append(f"recompute={self.recompute!r} (one of {', '.join(RECOMPUTES)})")
        if self.zero not in ZERO_STAGES:
            problems.append(f"zero={self.zero!r} (0-3)")
        if not (isinstance(self.virtual_stages, int) and self.virtual_stages >= 1):
            problems.append(f"virtual_stages={self.virtual_stages!r} (>= 1)")
        if self.recompute_layers is not None and not (type(self.recompute_layers) is int and self.recompute_layers >= 0):
            problems.append(f"recompute_layers={self.recompute_layers!r} (an int >= 0, or None: every layer)")
        for name in ("offload_layers", "bf16_layers"):
            if not (type(getattr(self, name)) is int and getattr(self, name) >= 0):
                problems.append(f"{name}={getattr(self, name)!r} (an int >= 0)")
        odd = [m for m in self.recompute_modules if m not in M.MODULES]
        if odd or (self.recompute_modules and self.recompute != "selective"):
            problems.append(f"recompute_modules={self.recompute_modules!r} (with recompute='selective', "
                            f"of {', '.join(M.MODULES)})")
        if self.precision not in PRECISIONS:
            problems.append(f"precision={self.precision!r} (one of {', '.join(PRECISIONS)})")
        if self.cp_comm not in CP_COMMS:
            problems.append(f"cp_comm={self.cp_comm!r} (one of {', '.join(CP_COMMS)})")
        if problems:
            raise ValueError("invalid recipe: " + "; ".join(problems))

    @property
    def recompute_name(self) -> str:
        """The CSV's recompute cell: the mode, or `selective:<modules>` (modules.split_recompute reads it)."""
        return M.recompute_text(self.recompute_modules, self.recompute)

    @property
    def value_bytes(self) -> int:
        """Bytes of one activation or weight value: 4 in an fp32 / tf32 run, else 2 (16-bit)."""
        return 4 if self.precision in FULL_PRECISIONS else 2

    @property
    def low_precision(self) -> bool:
        """Weight matmuls on 8- or 4-bit tensor cores (LOW_PRECISIONS)."""
        return self.precision in LOW_PRECISIONS

    @property
    def operand_bytes(self) -> float:
        """Bytes a weight matmul reads per input or weight element (OPERAND_BYTES, else value_bytes)."""
        return OPERAND_BYTES.get(self.precision, self.value_bytes)

    def cast_bytes(self, params: AnalyticParams) -> float:
        """Bytes moved per matmul-input element this run quantizes (0 in a 16-bit run): analytic.yaml
        `fp8_cast_bytes`, NVFP4 `nvfp4_cast_bytes` (its amax pass, Hadamard transform and 2D scales)."""
        if not self.low_precision:
            return 0.0
        return params.nvfp4_cast_bytes if self.precision == "nvfp4" else params.fp8_cast_bytes

    def stored_input_bytes(self, params: AnalyticParams) -> float:
        """Bytes per element a weight matmul's input is kept in for the backward: Transformer Engine keeps its
        quantized copy (OPERAND_BYTES); 2 in a 16-bit run or where `quantized_activations` is off (torchao)."""
        return OPERAND_BYTES[self.precision] if self.low_precision and params.quantized_activations else 2.0


# ----------------------------------------------------------------------------- parameters
def plain_dense(a: Architecture) -> bool:
    """Every layer a dense GQA Transformer layer of the original formulas (below)."""
    return (not a.layer_kinds or set(a.layer_kinds) == {"dense"}) and a.moe is None and a.mla is None \
        and not (a.qk_norm or a.attention_sinks or a.o_bias or a.window) and a.layer_norms == 2


@lru_cache(maxsize=256)
def layer_params(a: Architecture) -> float:
    """Parameters of one Transformer layer (all TP ranks together); the mean layer of a model
    whose layers differ (blocks.py)."""
    if not plain_dense(a):
        return B.mean_over_kinds(a, lambda kind: B.kind_params(a, kind))
    h, f = a.hidden_size, a.ffn_hidden_size
    attention = h * a.q_width + 2 * h * a.kv_width + a.q_width * h
    mlp = h * f * (3 if a.gated_mlp else 2)
    norms = 2 * h if a.norm == "rmsnorm" else 4 * h
    bias = (h + f * (2 if a.gated_mlp else 1) + h if a.linear_bias else 0) \
        + (a.q_width + 2 * a.kv_width if a.qkv_biased else 0)
    return attention + mlp + norms + bias


def embedding_params(a: Architecture) -> int:
    """Input embedding (+ learned positions, + OPT's project_in); the final norm is counted with the head."""
    positions = (a.max_positions + a.position_offset) * a.hidden_size if a.position == "learned" else 0
    return a.vocab_size * a.embed_width + positions + a.projection_params


def head_params(a: Architecture) -> int:
    """Final norm + output projection as stored on the last stage (a tied head still keeps a
    copy of the embedding there when the first and last stages differ, Megatron-LM)."""
    norm = (a.hidden_size if a.norm == "rmsnorm" else 2 * a.hidden_size) if a.final_norm else 0
    return norm + a.projection_params + a.vocab_size * a.embed_width


def total_params(a: Architecture) -> int:
    """All parameters (MTP modules apart: blocks.mtp_params)."""
    head = head_params(a) - (a.vocab_size * a.embed_width if a.tied_embeddings else 0)
    return sum(B.kind_params(a, k) for k in a.kinds) + embedding_params(a) + head


def active_params(a: Architecture, input_embedding: bool = True) -> int:
    """Parameters one token uses: k of the E routed experts. Publishers differ on the input
    embedding (a gather, not a matmul): Mixtral, Qwen, Llama 4 count it, GPT-OSS leaves it out."""
    head = head_params(a) - (a.vocab_size * a.embed_width if a.tied_embeddings and input_embedding else 0)
    embedding = embedding_params(a) if input_embedding else 0
    return sum(B.kind_params(a, k, active=True) for k in a.kinds) + embedding + head


def expert_layer_params(a: Architecture) -> float:
    """The routed experts' share of layer_params (mean layer): what expert parallelism shards."""
    return B.mean_over_kinds(a, lambda kind: B.expert_params(a, kind))


# ----------------------------------------------------------------------------- FLOPs and bytes
def layer_linear_flops(a: Architecture, b: int, s: int, t: int) -> float:
    """FLOPs of one layer's forward projections and MLP (the weight matmuls) on one of t TP ranks."""
    if not plain_dense(a):
        return sum(c * 2 * m * n * k for c, m, n, k in layer_gemms(a, b, s, t))
    h, f = a.hidden_size, a.ffn_hidden_size
    projections = 2 * b * s * h * (a.q_width + 2 * a.kv_width) + 2 * b * s * a.q_width * h
    mlp = 2 * b * s * h * f * (3 if a.gated_mlp else 2)
    return (projections + mlp) / t


def layer_gemm_shapes(a: Architecture, b: int, s: int, t: int) -> tuple[tuple[int, int, int], ...]:
    """(m, n, k) of one layer's forward weight matmuls on one TP rank -- output m x n, reduction k:
    QKV, O, MLP up (+ gate), MLP down. Their FLOPs, 2mnk each, sum to layer_linear_flops. The
    backward runs each as m x k (input gradient, reduction n) and k x n (weight gradient, reduction m)."""
    h, f, bs = a.hidden_size, a.ffn_hidden_size, b * s
    up = 2 if a.gated_mlp else 1
    return ((bs, (a.q_width + 2 * a.kv_width) / t, h), (bs, h, a.q_width / t),
            (bs, up * f / t, h), (bs, h, f / t))


@lru_cache(maxsize=256)
def layer_gemms(a: Architecture, b: int, s: int, t: int, ep: int = 1,
                routed: bool = True) -> tuple[tuple[float, float, float, float], ...]:
    """(count, m, n, k) of the mean layer's forward weight matmuls on one TP rank: each shape with
    how many times a layer runs it on average (1 for each of a dense model's four; blocks.kind_gemms
    for the other kinds, routed experts as a grouped GEMM over ep ranks; without `routed`, router
    and routed experts left out)."""
    if plain_dense(a):
        return tuple((1, m, n, k) for m, n, k in layer_gemm_shapes(a, b, s, t))
    counts: dict = {}
    for kind in a.kinds:
        for c, m, n, k in B.kind_gemms(a, kind, b, s, t, ep, routed):
            counts[(m, n, k)] = counts.get((m, n, k), 0) + c
    return tuple((c / a.num_layers, m, n, k) for (m, n, k), c in counts.items())


def wave_efficiency(m: float, n: float, sms: int, tile: tuple[int, int]) -> float:
    """Share of a GPU's tile slots an m x n matmul output keeps busy: its tiles run in whole waves
    over the `sms` SMs, the last wave partly idle, edge tiles partly empty (NVIDIA, "Matrix
    Multiplication Background User's Guide": tile and wave quantization). The better of the two
    tile orientations (cuBLAS picks among tile shapes). 1 without an SM count or with a 1 x 1 tile."""
    if not sms or tile == (1, 1):
        return 1.0
    best = 0.0
    for r, c in (tile, tile[::-1]):
        tiles = math.ceil(m / r) * math.ceil(n / c)
        best = max(best, m * n / (math.ceil(tiles / sms) * sms * r * c))
    return best


def attention_core_flops(a: Architecture, b: int, s: int, t: int, causal_fraction: float) -> float:
    """FLOPs of one layer's forward QK^T and scores x V on one TP rank (heads split over t); of the
    mean layer, windows and Mamba scans included, when the layers differ (blocks.core_flops)."""
    if not plain_dense(a):
        return B.core_flops(a, b, s, t, causal_fraction)
    return 2 * 2 * b * s * s * a.q_width * causal_fraction / t


def head_forward_flops(a: Architecture, b: int, s: int, t: int) -> float:
    """Logits matmul of the output head on one TP rank (Narayanan et al. 2021: 2bshV), over the
    embedding's width e (OPT-350M: 512), after project_out's 2bs·h·e where e != h."""
    return 2 * b * s * (a.embed_width * a.vocab_size + a.projection_params) / t


def embedding_forward_flops(a: Architecture, b: int, s: int, t: int) -> float:
    """project_in's matmul (2bs·e·h) after the lookup where the embedding is e != h wide; else 0."""
    return 2 * b * s * a.projection_params / t


def layer_forward_bytes(a: Architecture, b: int, s: int, t: int, sp: bool, e: int, fused_attention: bool) -> float:
    """Bytes the memory-bound kernels of one layer's forward read and write on one TP rank."""
    if not plain_dense(a):
        extra = 0.0
        if not fused_attention:  # unfused attention's s x s scores, on attention layers only
            share = sum(k in B.ATTENTION_KINDS for k in a.kinds) / a.num_layers
            mask = 1 if a.dropout else 0
            extra = share * b * a.num_attention_heads * s * s * (B.unfused_score_bytes(e) + (2 * e + 1) * mask) / t
        return extra + B.mean_over_kinds(a, lambda kind: B.kind_elementwise_bytes(a, kind, b, s, t, sp, e))
    h, f = a.hidden_size, a.ffn_hidden_size
    bsh = b * s * h
    mask = 1 if a.dropout else 0
    replicated = (4 * e + 2 * (3 * e + mask)) * bsh              # two norms, two bias-dropout-adds
    split = (3 if a.gated_mlp else 2) * e * b * s * f            # MLP activation (gate * up)
    if a.position == "rotary":
        split += 2 * e * b * s * (a.q_width + a.kv_width)        # rotary on Q and K
    if not fused_attention:
        scores = b * a.num_attention_heads * s * s
        split += scores * (B.unfused_score_bytes(e) + (2 * e + 1) * mask)   # QK^T out, softmax r+w, AV in, dropout
    return replicated / (t if sp else 1) + split / t


def layer_gemm_bytes(a: Architecture, b: int, s: int, t: int, e: int, operand: float | None = None,
                     routed: bool = True) -> float:
    """Bytes the weight matmuls of one layer's forward read and write on one TP rank: inputs,
    weights and outputs of QKV, O, the MLP's up (and gate) and down projections, and of the
    attention core's Q, K, V reads and context write (Calculon's per-op memory traffic).
    `operand`: bytes per input and weight element when not `e` (1 for FP8 matmuls)."""
    if not plain_dense(a):
        op = e if operand is None else operand
        return B.mean_over_kinds(a, lambda kind: B.kind_gemm_bytes(a, kind, b, s, t, e, op, routed))
    h, f, qkv = a.hidden_size, a.ffn_hidden_size, a.q_width + 2 * a.kv_width
    up = 2 if a.gated_mlp else 1
    bs = b * s
    inputs = bs * h + bs * a.q_width / t + bs * h + bs * up * f / t + bs * qkv / t
    weights = (h * qkv + a.q_width * h + h * up * f + f * h) / t
    outputs = bs * qkv / t + bs * h + bs * up * f / t + bs * h + bs * a.q_width / t
    return (e if operand is None else operand) * (inputs + weights) + e * outputs


def fp8_cast_elements(a: Architecture, b: int, s: int, t: int, routed: bool = True) -> float:
    """Elements an FP8 run casts per layer forward on one TP rank: the inputs of the QKV, O, MLP up
    and MLP down matmuls (Transformer Engine casts each to FP8, with a transposed copy for the
    weight-gradient matmul; the backward casts the output gradients the same way)."""
    if not plain_dense(a):
        return B.mean_over_kinds(a, lambda kind: B.kind_cast_elements(a, kind, b, s, t, routed))
    up_in, down_in = a.hidden_size, a.ffn_hidden_size / t
    return b * s * (a.hidden_size + a.q_width / t + up_in + down_in)


def head_gemm_bytes(a: Architecture, b: int, s: int, t: int, e: int) -> float:
    """Bytes of the logits matmul: input b·s·w, the w x V/t weight, b·s·V/t logits (w the embedding's
    width); and project_out's where w != h: input b·s·h, the h x w/t weight, b·s·w/t out."""
    w = a.embed_width
    logits = b * s * w + w * a.vocab_size / t + b * s * a.vocab_size / t
    projection = b * s * a.hidden_size + (a.projection_params + b * s * w) / t if a.projection_params else 0
    return e * (logits + projection)


def head_forward_bytes(a: Architecture, b: int, s: int, t: int, e: int) -> float:
    """Loss kernels on the logits: read 16-bit logits, write and read fp32 softmax (e + 8 bytes)."""
    return b * s * a.vocab_size / t * (e + 8)


# ----------------------------------------------------------------------------- activations
def activation_bytes(a: Architecture, b: int, s: int, t: int, recipe: Recipe, fused_attention: bool,
                     stored: float = 2.0) -> float:
    """Bytes one layer keeps for its backward pass, per micro-batch, on one TP rank (16-bit,
    Korthikanti et al. 2022 Table 2, generalised as the module docstring says; an fp32 run keeps
    each value in 4 bytes: twice that), the weight matmuls' inputs (modules.stored_input_delta) in
    `stored` bytes each (stored_input_bytes)."""
    return activation_bytes_16(a, b, s, t, recipe, fused_attention, stored) * recipe.value_bytes / 2


def activation_bytes_16(a: Architecture, b: int, s: int, t: int, recipe: Recipe, fused_attention: bool,
                        stored: float = 2.0) -> float:
    """activation_bytes of a 16-bit run."""
    h, sp, sbh = a.hidden_size, recipe.sequence_parallel, s * b * a.hidden_size
    if recipe.recompute == "full":
        return 2 * sbh / (t if sp else 1)
    modules = recipe.recompute_modules
    recomputed = recipe.recompute != "none" and (not modules or "core_attn" in modules)   # the attention core
    if not plain_dense(a) or modules:
        def one(kind):
            replicated, split, core = B.kind_activation_terms(a, kind, s)
            if recomputed or fused_attention:
                core = 0.0
            dropped = M.saved_terms(a, kind, modules)
            delta = M.stored_input_delta(a, kind, modules, stored, fused_attention and not recomputed)
            replicated += delta[0] - dropped[0]
            split += delta[1] - dropped[1]
            return sbh * (replicated + split + core) / t if sp else sbh * (replicated + (split + core) / t)
        return B.mean_over_kinds(a, one)
    mask, delta = 1 if a.dropout else 0, M.stored_input_delta(a, "dense", (), stored, fused_attention and not recomputed)
    f_term = (6 if a.gated_mlp else 4) * a.ffn_hidden_size / h
    replicated = 4 + 2 + 2 + 2 * mask + delta[0]
    split = 2 * a.q_width / h + 4 * a.kv_width / h + 2 * a.q_width / h + f_term + delta[1]
    core = (2 + 3 * mask) * a.num_attention_heads * s / h if not (recomputed or fused_attention) else 0.0
    return sbh * (replicated + split + core) / t if sp else sbh * (replicated + (split + core) / t)


@dataclass(frozen=True, kw_only=True, eq=False)
class Workload:
    """Compared and hashed by identity: the per-layer functions below are cached on it, and an
    estimator reuses one Workload per (degrees, micro-batch, recipe)."""

    arch: Architecture
    seq: int
    mbs: int
    tp: int
    dp: int
    pp: int
    num_microbatches: int
    recipe: Recipe
    params: AnalyticParams
    cp: int = 1
    """Context-parallel degree: a rank holds seq/cp tokens of each sequence (fasop/estimators/analytic/parallel.py)."""
    ep: int = 1
    etp: int = 1
    shard: int = 0
    """Ranks the ZeRO/FSDP states are sharded over (HSDP's shard degree); 0: all dp*cp."""
    mtp: int = 0
    """Multi-token-prediction depths the last stage trains (Megatron --mtp-num-layers; cost.mtp_s)."""

    @property
    def local_seq(self) -> int:
        """Tokens of a sequence one rank holds."""
        return self.seq // self.cp
