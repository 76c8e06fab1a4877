"""The host's side of an eager Megatron-Core layer as data: how many PyTorch ops and Transformer Engine
module calls each counted module issues from Python beyond the dense block (analytic.yaml `host_ops`,
counted from the source: docs/validate.md "Host ops of a Megatron-Core MLA + MoE layer"), what one TE
call costs the host (`te_module_call_s`), and which modules a run captured in CUDA graphs (a
`fasop validate` row's `cuda_graphs`; `fasop search --cuda-graphs`, checked by Megatron-Core's rules:
search_scopes). The estimator prices them (estimators/analytic/host.py)."""

from __future__ import annotations

from dataclasses import dataclass

HOST_OP_MODULES = ("mla_attention", "unfused_rope", "moe_router", "moe_dispatch", "moe_combine", "grouped_experts",
                   "shared_experts")
"""The counted modules, each an addition to (or, for the experts, a replacement of part of) the dense
block that `kernels_per_layer` counts: mla_attention and unfused_rope on the attention side, the
router and the dispatcher's preprocessing before its host wait (moe_dispatch), the rest after it."""
BEFORE_WAIT = ("mla_attention", "unfused_rope", "moe_router", "moe_dispatch")
"""The modules a MoE layer's forward issues before the dispatcher's host wait (token_dispatcher.py L958)."""
GRAPH_SCOPES = ("full_iteration", "attn", "mlp", "moe", "moe_router", "moe_preprocess", "mamba")
"""Megatron-Core's CUDA graph scopes (transformer/enums.py `CudaGraphScope`): a captured scope issues
no op from Python, its host cost goes (one graph launch aside)."""
GRAPHED_MODULES = {"attn": ("mla_attention", "unfused_rope"), "moe_router": ("moe_router",),
                   "moe_preprocess": ("moe_dispatch",),
                   "moe": ("moe_router", "moe_dispatch", "moe_combine", "grouped_experts", "shared_experts")}
"""The counted modules each graph scope captures (full_iteration: all of them and the dense block)."""
KIND_SIDES = {"dense": ("attn", "mlp"), "moe": ("attn", "moe"), "attention": ("attn", "attn"), "mlp": ("mlp", "mlp"),
              "experts": ("moe", "moe"), "mamba": ("mamba", "mamba")}
"""The graph scope that captures each half of a layer kind's dense block (HostOps.dense_share)."""
OP_LIMIT = 10_000


@dataclass(frozen=True)
class HostOps:
    """Per module (HOST_OP_MODULES) its (forward ops, backward ops, forward TE calls, backward TE calls)
    per layer and micro-batch; the host seconds of one TE module call; the CUDA graph scopes a run
    captured."""
    te_module_call_s: float = 0.0
    modules: tuple[tuple[str, tuple[int, int, int, int]], ...] = ()
    graphed: tuple[str, ...] = ()

    def counts(self, module: str) -> tuple[int, int, int, int]:
        """The module's counts, zero where a captured scope removed its host work."""
        if self.captured(module):
            return (0, 0, 0, 0)
        return dict(self.modules).get(module, (0, 0, 0, 0))

    def captured(self, module: str) -> bool:
        """True when a graphed scope holds the counted `module` (the dense block: dense_share)."""
        return "full_iteration" in self.graphed or any(module in GRAPHED_MODULES.get(scope, ()) for scope in self.graphed)

    def dense_share(self, kind: str = "dense") -> float:
        """The share of a `kind` layer's dense-block issue time left to the host: each half (its
        attention side, its MLP / experts side; a lone sublayer or a Mamba mixer is both halves) goes
        where a graphed scope captures it in that kind of layer (Megatron-Core CudaGraphModule: attn in
        attention, mlp in dense MLPs only, moe in MoE layers, mamba in Mamba mixers)."""
        if "full_iteration" in self.graphed:
            return 0.0
        sides = KIND_SIDES.get(kind, (None, None))
        return 1.0 - 0.5 * sum(side in self.graphed for side in sides)


def read_host_ops(r, base: HostOps | None) -> HostOps:
    """`te_module_call_s` and `host_ops` from the analytic constants' reader `r`, over `base`."""
    price = r.get("te_module_call_s", (int, float), ... if base is None else None, lambda v: 0 <= v <= 1e-3,
                  "in [0, 0.001]")
    table = r.get("host_ops", dict, ... if base is None else None, None, "")
    modules = dict(base.modules) if base else {}
    if table is not None:
        sub = r.sub("host_ops", HOST_OP_MODULES)
        for name in HOST_OP_MODULES:
            v = sub.get(name, list, ... if base is None else None, lambda v: len(v) == 4 and all(
                type(x) is int and 0 <= x <= OP_LIMIT for x in v), f"[forward ops, backward ops, forward TE calls, "
                f"backward TE calls]: four integers in [0, {OP_LIMIT}]")
            if v is not None:
                modules[name] = tuple(v)
        sub.done()
    return HostOps(te_module_call_s=float(price) if price is not None else base.te_module_call_s,
                   modules=tuple((k, modules[k]) for k in HOST_OP_MODULES if k in modules),
                   graphed=base.graphed if base else ())


def graph_scopes(text: str) -> tuple[str, ...] | None:
    """A `cuda_graphs` cell's scopes ("none": ()), or None when one is not a GRAPH_SCOPES name."""
    names = tuple(sorted({n.strip() for n in text.lower().split(",") if n.strip()}))
    if names == ("none",):
        return ()
    return names if names and all(n in GRAPH_SCOPES for n in names) else None


def search_scopes(text: str) -> tuple[tuple[str, ...], str]:
    """`--cuda-graphs`' value (search, pareto, explain, export: one setting for every plan) as
    (scopes, '') or ((), why not): `none`, `full_iteration` alone (Megatron-Core's
    --cuda-graph-impl full_iteration: one graph of the whole forward-backward, modules empty), or a
    comma list of per-layer modules (--cuda-graph-modules) under Megatron-Core's rules
    (transformer_config.py __post_init__ at d98e8a6): moe and moe_router exclude each other,
    moe_preprocess needs moe_router."""
    names = tuple(sorted({n.strip() for n in text.lower().split(",") if n.strip()}))
    bad = [n for n in names if n not in GRAPH_SCOPES + ("none",)]
    if bad or not names:
        return (), (f"expected none, full_iteration or a comma list of {', '.join(GRAPH_SCOPES[1:])}, "
                    f"got {(bad[0] if bad else text)[:40]!r}")
    if names == ("none",):
        return (), ""
    if len(names) > 1 and ("none" in names or "full_iteration" in names):
        return (), f"{'none' if 'none' in names else 'full_iteration'} stands alone, got {','.join(names)!r}"
    if "moe" in names and "moe_router" in names:
        return (), "moe and moe_router exclude each other (Megatron-Core captures the MoE layer whole or its router)"
    if "moe" in names:  # transformer_config.py:2844 at d98e8a6
        return (), ("moe: Megatron-Core captures a whole MoE layer only with drop-and-pad routing ('moe cuda graph is "
                    "only supported with drop-padding MoE'), which fasop does not estimate (dropless); "
                    "use moe_router,moe_preprocess")
    if "moe_preprocess" in names and "moe_router" not in names:
        return (), "moe_preprocess needs moe_router (Megatron-Core graphs the preprocessing with the router)"
    return names, ""


def per_layer(scopes: tuple[str, ...]) -> bool:
    """Whether `scopes` capture per-layer graphs (Megatron-Core --cuda-graph-modules), not eager nor the
    whole iteration: what Megatron-Core refuses full recompute and activation offloading with."""
    return bool(scopes) and scopes != ("full_iteration",)


def scope_text(scopes: tuple[str, ...]) -> str:
    """The CSV's one spelling of graphed scopes: `none`, `full_iteration` or the sorted module list."""
    return ",".join(scopes) or "none"

