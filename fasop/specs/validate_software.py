"""A catalog GPU's `validate_software`: what `fasop validate` assumes for a measured run on this GPU
whose row leaves a software cell empty -- the software the GPU's published runs had.

Flat switches (VALIDATE_SOFTWARE ... VALIDATE_MOE_SOFTWARE) apply to every row; `moe_software` to
mixture-of-experts rows only, some of its values by the row's precision, as NVIDIA's Megatron-Bridge
performance recipes for that GPU ran them (docs/validate.md, "MoE rows that do not say")."""

from __future__ import annotations

from fasop.specs.host_ops import graph_scopes
from fasop.specs.reader import Reader

VALIDATE_SOFTWARE = ("fused_attention", "overlap_grad_reduce", "fused_elementwise")
"""analytic.yaml switches a GPU's `validate_software` may set, which a `fasop validate` row may also state."""
VALIDATE_PLAN_SOFTWARE = ("sequence_parallel", "distributed_optimizer", "virtual_pp")
"""Plan cells a GPU's `validate_software` may fix for rows that leave them empty (instead of picking)."""
VALIDATE_RECIPE_SOFTWARE = ("block_recompute", "megatron_fsdp")
"""How a GPU's published runs recomputed and sharded: `block_recompute` true = a "full" row without
`recompute_num_layers` recomputed the fewest layers per chunk that fit (block_recompute.py);
`megatron_fsdp` true = a ZeRO-3 row is Megatron-FSDP (Megatron-Core's layers), not PyTorch FSDP."""
VALIDATE_STACK_SOFTWARE = ("gradient_accumulation_fusion",)
"""analytic.yaml switches a GPU's `validate_software` may set for its rows, with no CSV column of their own."""
VALIDATE_MOE_SOFTWARE = ("cuda_graphs",)
"""`cuda_graphs` true: a hybrid Mamba row with an empty `cuda_graphs` cell captures the scopes the GPU's
published runs of that kind of model captured (report.validate_defaults.RECIPE_GRAPHS)."""
MOE_DISPATCHERS = ("alltoall", "alltoall_seq", "allgather", "flex", "deepep", "hybridep")
"""Megatron's token dispatchers: `alltoall` (`alltoall_seq`, its form before Megatron-Core 0.9), `allgather`, or `flex`
with its DeepEP / HybridEP backends."""
STATE_DTYPES = ("fp32", "bf16")
MOE_SOFTWARE_KEYS = ("moe_dispatcher", "main_grads", "cuda_graphs", "ep_overlap")
"""`moe_software`: the dispatcher and gradient-buffer dtype of every MoE row, and the CUDA graph scopes and
EP overlap of a Transformer MoE (not hybrid) row, each either one value or a map from the row's precision
(`bf16`, `fp8`, `mxfp8`, `nvfp4`, ...) to a value with `other` for the rest: the most common value among the
GPU's Megatron-Bridge Transformer MoE recipes, Megatron-Bridge's MoE playbook where they split."""
_PRECISION_KEYS = ("bf16", "fp16", "fp8", "mxfp8", "nvfp4", "fp32", "tf32", "other")


def read_validate_software(r: Reader) -> dict:
    """A GPU entry's `validate_software` (absent: {})."""
    if "validate_software" not in r.data:
        r.seen.add("validate_software")
        return {}
    switches = (VALIDATE_SOFTWARE + VALIDATE_STACK_SOFTWARE + VALIDATE_PLAN_SOFTWARE + VALIDATE_RECIPE_SOFTWARE
                + VALIDATE_MOE_SOFTWARE)
    sub = r.sub("validate_software", switches + ("tp_overlap", "moe_software"))
    values = {k: sub.get(k, bool) for k in switches if k in sub.data and k != "virtual_pp"}
    if "virtual_pp" in sub.data:
        values["virtual_pp"] = sub.get("virtual_pp", int, check=lambda v: 1 <= v <= 64, why="in [1, 64]")
    if "tp_overlap" in sub.data:
        values["tp_overlap"] = float(sub.get("tp_overlap", (int, float), check=lambda v: 0 <= v <= 1, why="in [0, 1]"))
    if "moe_software" in sub.data:
        values["moe_software"] = _moe_software(sub.sub("moe_software", MOE_SOFTWARE_KEYS))
    sub.done()
    return values


def _moe_software(r: Reader) -> dict:
    out = {}
    if "moe_dispatcher" in r.data:
        out["moe_dispatcher"] = r.get("moe_dispatcher", str, check=lambda v: v in MOE_DISPATCHERS,
                                      why=f"one of {', '.join(MOE_DISPATCHERS)}")
    if "main_grads" in r.data:
        out["main_grads"] = r.get("main_grads", str, check=lambda v: v in STATE_DTYPES,
                                  why=f"one of {', '.join(STATE_DTYPES)}")
    graphs_ok = lambda v: isinstance(v, str) and graph_scopes(v) is not None
    share_ok = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= 1
    for key, ok, why in (("cuda_graphs", graphs_ok, "none or a comma list of Megatron-Core graph scopes"),
                         ("ep_overlap", share_ok, "a share in [0, 1]")):
        if key in r.data:
            out[key] = _by_precision(r, key, ok, why)
    r.done()
    return out


def _by_precision(r: Reader, key: str, ok, why: str) -> dict:
    """One value (as {"other": value}) or a precision map with `other`."""
    value = r.get(key, (str, int, float, dict))
    if not isinstance(value, dict):
        if not ok(value):
            raise r.error(key, f"must be {why}, got {value!r}")
        return {"other": value}
    for precision, v in value.items():
        if precision not in _PRECISION_KEYS:
            raise r.error(key, f"unknown precision {precision!r} (known: {', '.join(_PRECISION_KEYS)})")
        if not ok(v):
            raise r.error(key, f"{precision}: must be {why}, got {v!r}")
    if "other" not in value:
        raise r.error(key, "a precision map needs an `other` entry")
    return dict(value)


def moe_default(software: dict, key: str, precision: str):
    """The `moe_software` value of `key` for a row in `precision`; None where the GPU has none."""
    values = software.get("moe_software", {}).get(key)
    if isinstance(values, dict):
        return values.get(precision, values["other"])
    return values


def captures_moe_graphs(software: dict) -> bool:
    """Whether the GPU's published MoE runs captured CUDA graphs in some precision (`moe_software`)."""
    graphs = software.get("moe_software", {}).get("cuda_graphs", {})
    return any(scopes != "none" for scopes in graphs.values())
