"""What a `fasop validate` row's software is: its cells, else what its GPUs' published runs had.

The GPU catalog says what those runs had (gpus.yaml `validate_software`, read by specs.validate_software);
this module turns it, with the row's own cells, into the analytic constants the row is estimated with, and
names every value it assumed, so the output row can say so (docs/validate.md)."""

from __future__ import annotations

from dataclasses import replace

from fasop.estimators.analytic import overheads
from fasop.estimators.analytic.moe_kernels import ROUTINGS
from fasop.estimators.analytic.memory import state_dtypes
from fasop.report.validate_rows import Cells, Hardware
from fasop.specs.catalog import AnalyticParams
from fasop.specs.catalog_clusters import FLEX_DISPATCHER_SMS
from fasop.specs.host_ops import GRAPH_SCOPES, graph_scopes
from fasop.specs.validate_software import (MOE_DISPATCHERS, STATE_DTYPES, VALIDATE_MOE_SOFTWARE, VALIDATE_SOFTWARE,
                                           VALIDATE_STACK_SOFTWARE, moe_default)

DISPATCHERS = MOE_DISPATCHERS
"""Megatron's token dispatchers a row may name: `alltoall`; `alltoall_seq` (its implementation before Megatron-Core
0.9, kept until 0.13 -- Megatron-LM 9e3adb5 -- and costed as it, without permute fusion, which it refused); `allgather`
(Megatron-Core's default: its collectives over the ep x etp group, moe_kernels.allgather_bytes); or `flex` with its
DeepEP / HybridEP backends
(node-deduplicated dispatch: analytic.yaml `moe_node_dedup`; DeepEP also once per rank of the node,
`moe_rank_dedup`); `moe_routing` says how the run spread its tokens (moe_kernels.ROUTINGS)."""
HOST_SYNCED = ("allgather", "alltoall_seq")
"""Dispatchers a row may name that Megatron-Core's EP overlap refuses and whose per-layer host copy of the token
counts no whole-iteration or `moe`-scope CUDA graph captures: their recipe values of those are dropped, a stated one
refused. (The dropless `alltoall` copies its counts to the host too; its rows keep what the recipe ran.)"""
DISPATCHER_SMS = {"deepep": 20, "hybridep": FLEX_DISPATCHER_SMS}
"""SMs a backend's dispatch / combine kernels hold: DeepEP 20 (Megatron-Core TransformerConfig
`moe_deepep_num_sms`, its historical default), HybridEP 32 (Megatron-Bridge's performance recipes set
`moe_hybridep_num_sms = 32` for every HybridEP run, perf_recipes/_common.py @067f987); `flex` names no
backend and `alltoall` runs NCCL (moe_kernels.overlap_kept_share): none held."""
RECIPE_GRAPHS = {"hybrid_moe": "attn,mamba,moe_router,moe_preprocess", "hybrid": "attn,mamba"}
"""The CUDA graph scopes a GPU's published runs captured (its `validate_software` `cuda_graphs` true: GB200 /
GB300), by model kind, for hybrid rows whose `cuda_graphs` cell is empty (Megatron-Bridge @067f987
`perf_recipes/`): hybrid Mamba MoE attn, mamba, moe_router and moe_preprocess (`nemotronh/{gb200,gb300}/
nemotronh.py`: every Nemotron 3 Nano, 3.5 Lightning and 3 Super function but the FSDP ones and Ultra's); a
hybrid without experts mamba and attn (NemotronH 56B). A Transformer MoE row takes its GPU's `moe_software`
`cuda_graphs` by precision (gpus.yaml); dense Transformers run eager (none sourced)."""
FSDP_STACK = {"overlap_grad_reduce": True, "fused_elementwise": False, "tp_overlap": 0.0}
"""What a ZeRO-3 row's empty software cells mean, whatever the GPU's Megatron-era runs had (its
`validate_software`): such a row is a PyTorch FSDP stack (torchtitan, fms-fsdp), which reduce-scatters a
unit's gradients as its backward ends and runs PyTorch's eager elementwise ops (torchtitan
`CompileConfig.enable` False, torchtitan/config/configs.py:295 @b5bcd76) and, in an FP8 run, torchao's Float8Linear,
which keeps a matmul's 16-bit input for the backward (`matmul_with_hp_or_float8_args`: save_for_backward(input_hp,
weight_hp_t); AnalyticParams.quantized_activations false); its attention is SDPA,
FlashAttention where the GPU has the kernels (analytic.yaml `fused_attention`, overheads.job_params),
and its TP shards the norms' sequence (`enable_sequence_parallel` True, configs.py:169) without overlapping
its collectives (`enable_async_tensor_parallel` False, configs.py:298); an MoE row keeps Megatron-Core's
dispatcher and fp32 reductions (torchtitan's own all-to-all; no Megatron-Bridge recipe). Not on a GPU whose
`validate_software` says `megatron_fsdp` (B200, B300, GB200, GB300: Megatron-Bridge's FSDP recipes shard with
Megatron-FSDP, whose Transformer Engine layers keep the GPU's software), unless the row states
`fused_elementwise` 0: eager elementwise ops are PyTorch's, never Megatron-Core's."""


PRECISION_NAMES = {"fp8_cs": "fp8", "fp8_ds": "fp8", "fp8_mx": "mxfp8", "fp8_sc": "fp8", "fp8_blockwise": "fp8",
                   "fp8_tensorwise": "fp8", "fp8_delayed": "fp8", "fp8_hybrid": "fp8", "bfloat16": "bf16",
                   "float16": "fp16", "fp8cs": "fp8", "fp8ds": "fp8", "fp8mx": "mxfp8", "fp8sc": "fp8", "mx_fp8": "mxfp8",
                   "nv_fp4": "nvfp4", "fp4": "nvfp4"}
"""Megatron-Bridge's names for its FP8 recipes (`_perf_precision("fp8_cs")`, scripts/performance
`--compute_dtype`; FP8-CS / FP8-DS / FP8-MX / FP8-SC in its performance tables), Megatron-LM's
`--fp8-recipe` ones after `fp8_`, and torch's dtype names, as a `precision` cell may give them ('-' or
'_'): per-tensor FP8 with current or delayed scaling is `fp8`, MX block-scaled FP8 `mxfp8`. FP8-SC
(sub-channel: 1 x 128 activation and 128 x 128 weight scales, `fp8_recipe` blockwise, Hopper's
DeepSeek-V3 / Kimi-K2 recipes) is read as `fp8`: the same FP8 tensor-core rate -- no measured rate of
cuBLAS's blockwise-scaled GEMMs against per-tensor ones is at hand -- and per-tensor FP8's casts. The recipe
functions' spellings without a separator (`..._fp8cs_config`, `fp8mx`) and a space for the separator are read
alike; `FP4` is NVFP4, Megatron-Core's one built-in FP4 recipe (megatron/core/fp4_utils.py `Fp4Recipe`: nvfp4,
custom)."""


def _agreed(values: set):
    """The one value every GPU of a row has, else None (the GPUs disagree, or none has one)."""
    return next(iter(values)) if len(values) == 1 else None


def common(hw: Hardware, keys: tuple[str, ...]) -> dict:
    """The `validate_software` values of `keys` every GPU of the row agrees on; none under `--as-searched`
    (Hardware.published false: the empty cells are the constants, as `fasop search` estimates plans)."""
    if not hw.published:
        return {}
    agreed = {k: _agreed({g.validate_software.get(k) for g in hw.gpus}) for k in keys}
    return {k: v for k, v in agreed.items() if v is not None}


def software(c: Cells, hw: Hardware, kind: str, precision: str, fsdp: bool = False) -> tuple[AnalyticParams, dict]:
    """(constants, assumed) for a row: its cells, else what its GPUs' published runs had (a PyTorch FSDP row:
    FSDP_STACK; an MoE row -- `kind` moe / hybrid_moe -- the GPUs' `moe_software` for `precision`), else
    analytic.yaml's; `assumed` names the MoE software taken from the catalog (not from a cell)."""
    # a row's GPUs below sm80 have no FlashAttention kernels: the unfused path unless the row says otherwise
    base = overheads.job_params(hw.params, hw.gpus)
    agreed = common(hw, VALIDATE_SOFTWARE + VALIDATE_STACK_SOFTWARE + VALIDATE_MOE_SOFTWARE + ("tp_overlap",))
    stack = {k: FSDP_STACK.get(k, getattr(base, k)) for k in VALIDATE_SOFTWARE + ("tp_overlap",)} if fsdp else agreed
    switches = {k: c.flag(k, stack.get(k, getattr(base, k))) for k in VALIDATE_SOFTWARE}
    switches |= {k: agreed[k] for k in VALIDATE_STACK_SOFTWARE if k in agreed}
    tp_overlap = c.share("tp_overlap", stack.get("tp_overlap", base.tp_overlap))
    assumed = {}

    def cell_or_recipe(key: str, read, only: str | None = None):
        """The row's cell, else the GPUs' recipe value (MoE rows of kind `only`, or any MoE row)."""
        value = read(key)
        if value is None and "moe" in kind and not fsdp and (only is None or kind == only):
            value = _moe_recipe(hw, key, precision)
            if value is not None:
                assumed[key] = value
        return value

    dispatcher = cell_or_recipe("moe_dispatcher", lambda k: c.choice(k, DISPATCHERS))
    overlap = cell_or_recipe("ep_overlap", lambda k: c.share(k, None) if c.text(k) else None, "moe")
    if dispatcher in HOST_SYNCED:   # Megatron-Core asserts the EP overlap on alltoall / flex only
        if overlap and "ep_overlap" not in assumed:
            why = "not allgather (transformer_config.py)" if dispatcher == "allgather" else \
                "and arrived after alltoall_seq was removed (Megatron-LM ae1c882 after 9e3adb5)"
            raise c.error("ep_overlap", f"{c.text('ep_overlap')}: Megatron-Core's EP overlap runs with the alltoall "
                                        f"or flex dispatcher only, {why}")
        assumed.pop("ep_overlap", None)   # a recipe's (or a cluster's) overlap did not run with it
        overlap = 0
    fusion = c.flag("moe_permute_fusion", base.moe_permute_fusion and dispatcher != "alltoall_seq")
    if dispatcher == "alltoall_seq" and fusion:   # the pre-0.9 alltoall, kept until Megatron-Core 0.13 (9e3adb5)
        raise c.error("moe_permute_fusion", "1: Megatron-Core's alltoall_seq dispatcher ran without permute fusion "
                                            "(transformer_config.py raised \"does not support permute fusion\")")
    params = replace(base, **switches, tp_overlap=tp_overlap, quantized_activations=base.quantized_activations and not fsdp,
                     ep_overlap=base.ep_overlap if overlap is None else overlap,
                     moe_node_dedup=base.moe_node_dedup if dispatcher is None else dispatcher in ("flex", "deepep", "hybridep"),
                     moe_allgather=dispatcher == "allgather",
                     moe_rank_dedup=dispatcher == "deepep", moe_routing=c.choice("moe_routing", ROUTINGS, "uniform"),
                     moe_comm_sms=base.moe_comm_sms if dispatcher is None else DISPATCHER_SMS.get(dispatcher, 0),
                     moe_permute_fusion=fusion)
    graphs = cell_or_recipe("cuda_graphs", lambda k: c.text(k) or None, "moe")
    if dispatcher in HOST_SYNCED and uncapturable(graphs):
        if "cuda_graphs" not in assumed:
            raise c.error("cuda_graphs", f"{c.text('cuda_graphs')}: the {dispatcher} dispatcher copies its token counts "
                                         "to the host in every MoE layer (token_dispatcher.py), which no full-iteration or "
                                         "moe-scope CUDA graph can capture")
        graphs = assumed["cuda_graphs"] = _moe_recipe(hw, "cuda_graphs", "other") or "none"
        if uncapturable(graphs):
            graphs = assumed["cuda_graphs"] = "none"
    if graphs is None and kind in RECIPE_GRAPHS and agreed.get("cuda_graphs", False):
        graphs = assumed["cuda_graphs"] = RECIPE_GRAPHS[kind]
    params = replace(params, host=replace(params.host, graphed=graphed(c, graphs)))
    main_grads = cell_or_recipe("main_grads", lambda k: c.choice(k, STATE_DTYPES))
    return state_dtypes(params, main_grads == "bf16", c.choice("optimizer_states", STATE_DTYPES) == "bf16"), assumed


def uncapturable(scopes: str | None) -> bool:
    """Whether CUDA graphs of `scopes` (a cuda_graphs cell) would capture an MoE dispatcher's host copy."""
    names = {x.strip().lower() for x in (scopes or "").split(",")}
    return bool(names & {"full_iteration", "moe"})


def _moe_recipe(hw: Hardware, key: str, precision: str):
    """The `moe_software` value of `key` for `precision` that every GPU of the row agrees on, else None (and under
    `--as-searched`: `common`)."""
    if not hw.published:
        return None
    return _agreed({moe_default(g.validate_software, key, precision) for g in hw.gpus})


def graphed(c: Cells, scopes: str | None) -> tuple[str, ...]:
    """The row's CUDA graph scopes (Megatron-Core's cuda_graph_scope names; `none`: eager) from `scopes`,
    the row's `cuda_graphs` cell or its recipe's; None: eager."""
    captured = graph_scopes(scopes or "none")
    if captured is None:
        raise c.error("cuda_graphs", f"expected none or a comma list of {', '.join(GRAPH_SCOPES)}, "
                      f"got {c.text('cuda_graphs')[:60]!r}")
    return captured
