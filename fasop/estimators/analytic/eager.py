"""Eager PyTorch's elementwise kernels: the bytes a dense layer moves beyond fused kernels when its
norms, rotary, activation and copies run op by op (`fused_elementwise: false`; docs/estimators.md
"Eager elementwise kernels")."""

from __future__ import annotations

from fasop.estimators.analytic import blocks as B
from fasop.estimators.analytic import layers as L
from fasop.specs.architecture import Architecture


EAGER_ROPE_BYTES = {"complex": 16, "matrix": 32}
"""Bytes per Q / K element an eager fp32 RoPE moves beyond 2e (e the 16-bit size; a fused kernel's read
and write), by implementation (analytic.yaml `eager_rope`, catalog.EAGER_ROPES):
`complex` -- meta-llama/llama llama/model.py `apply_rotary_emb`, torchtitan's: `float()` e+4, the
`view_as_complex` multiply (read 4, write 4), `type_as` 4+e = 16 + 2e;
`matrix` -- IBM FMS fms/modules/positions.py `RotaryEmbedding.adjusted_qk` (v0.0.3, 2024-01, to
006bd7ed, 2024-03): `q.float()` e+4, `freqs.mul(q_.unsqueeze(-2))` each (x0, x1) pair against its 2 x 2
rotation (read 4, write two fp32 per element: 8), `.sum(5)` (read 8, write 4), `type_as` 4+e = 32 + 2e
(the gathered cos / sin table, per token and not per head, left out)."""


def eager_extra_bytes(a: Architecture, b: int, s: int, t: int, sp: bool, e: int, rope: str = "complex") -> float:
    """Bytes one layer's forward moves beyond layer_forward_bytes' fused kernels when its elementwise
    ops run as separate eager PyTorch kernels (`fused_elementwise: false`), counted op by op from the
    reference Llama block (meta-llama/llama llama/model.py; torchtitan's and IBM FMS's follow it):
    RMSNorm `x.float()` (e+4 per element), `pow(2)` (8), `mean` (4), `x * rsqrt` (8), `type_as`
    (4+e), `* weight` (2e) = 28 + 4e, against a fused norm's 2e; rotary on Q and K in fp32,
    EAGER_ROPE_BYTES[rope] + 2e against 2e; SwiGLU as `silu` (2e) and `*` (3e) = 5e per gate element,
    against 3e; the attention output's `transpose(1, 2).contiguous()` copy (2e); GQA's `repeat_kv`
    copies of K and V to the query heads (torchtitan model.py: e per kv element read, e per q element
    written, each). Dense Transformer layers only (0 for other kinds)."""
    if not L.plain_dense(a):
        return 0.0
    bs, h, f, q, kv = b * s, a.hidden_size, a.ffn_hidden_size, a.q_width, a.kv_width
    norms = 2 * (28 + 4 * e - 2 * e) * bs * h
    rotary = EAGER_ROPE_BYTES[rope] * bs * (q + kv) if a.position == "rotary" else 0.0
    mlp = (5 * e - 3 * e) * bs * f if a.gated_mlp else 0.0
    repeat = 2 * e * bs * (kv + q) if kv < q else 0.0
    return norms / (t if sp else 1) + (rotary + mlp + 2 * e * bs * q + repeat) / t


UNFUSED_ROPE_BYTES = 12
"""Bytes per Q / K element per value byte that Megatron-Core's unfused RoPE moves in the forward
(rope_utils.py `_apply_rotary_pos_emb_bshd`, one kernel per op): `t * cos` (2), `_rotate_half`'s
`-x2` on half the elements (1) and `torch.cat` (2), `* sin` (2), the add (3), and the final
`torch.cat((t, t_pass))` (2, t_pass empty) -- 12, against the fused kernel's 2 (read and write)."""


def unfused_rope_extra_bytes(a: Architecture, b: int, s: int, t: int, e: int) -> float:
    """Bytes one layer's forward (mean over the layers) moves beyond the fused RoPE that
    layer_forward_bytes counts, when Megatron-Core applies RoPE unfused because YaRN's attention
    factor is not 1 (`rope_mscale`; rope_utils.py `apply_rotary_pos_emb`: "mscale=... is not
    supported by TE's fused RoPE. Using unfused implementation."): (12 - 2) e per element of Q and
    K on the attention layers. MLA's RoPE (its own path) is not included."""
    if a.rope_mscale == 1.0 or a.position != "rotary" or a.mla is not None:
        return 0.0
    share = sum(kind in B.ATTENTION_KINDS for kind in a.kinds) / a.num_layers
    return share * (UNFUSED_ROPE_BYTES - 2) * e * b * s * (a.q_width + a.kv_width) / t


def compiled_rope_extra_bytes(a: Architecture, b: int, s: int, t: int) -> float:
    """Bytes one layer's forward moves beyond a fused RoPE when a torch.compile'd block applies RoPE as
    a complex multiply (torchtitan's `apply_rotary_emb`: `view_as_complex`, `*`, `view_as_real`):
    Inductor does not generate code for complex tensors (torch/_inductor/lowering.py
    `unsupported_input_tensor`: "Torchinductor does not support code generation for complex
    operators"), so the multiply runs as its eager aten kernel and the fp32 upcast before it and the
    cast back after it are kernels of their own -- the eager count EAGER_ROPE_BYTES["complex"] per Q / K
    element (dense Transformer layers with rotary positions only)."""
    if not L.plain_dense(a) or a.position != "rotary":
        return 0.0
    return EAGER_ROPE_BYTES["complex"] * b * s * (a.q_width + a.kv_width) / t
