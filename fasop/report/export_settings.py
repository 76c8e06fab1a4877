"""What every `fasop export` target shares: the plan's settings beyond its degrees, read from a
results row, the export's header and fit warnings, each stage's transformer layers and the
layers of interleaved model chunks.

Plan settings beyond the degrees (activation recompute, sequence parallelism, ZeRO / distributed
optimizer, virtual stages, precision) are read from the row's columns where it has them (the
analytic estimator's `recompute`, `sequence_parallel`, `zero`, `virtual_stages`, `precision`), else
they are FASOP's: its memory estimate keeps every activation, replicates optimizer state and
splits nothing along the sequence (docs/estimators.md §8).
"""

from __future__ import annotations

from dataclasses import dataclass

from fasop.core.cells import counted, one_line
from fasop.plans.rowplan import RowPlan
from fasop.specs.types import ModelSpec

RECOMPUTE = ("none", "selective", "full")


@dataclass(frozen=True, kw_only=True)
class Settings:
    """What the plan assumes beyond its degrees."""
    recompute: str = "none"
    """Activation recompute: none, selective or full."""
    sequence_parallel: bool = False
    zero_stage: int = 0
    """0: optimizer state replicated over dp; 1: sharded (Megatron's distributed optimizer); 2, 3."""
    virtual_stages: int = 1
    precision: str | None = None
    """bf16 / fp16 / ...; None: the row does not say."""
    zero_needed: bool = False
    """The row's plan fits only with ZeRO (is_oom but not is_zero_oom): the export shards the optimizer."""
    dp_replicate: int = 1
    """HSDP (zero >= 1): replicas of the states across nodes, each sharded over dp / dp_replicate
    data-parallel ranks (the row's dp_replicate column); 1: sharded over all of dp."""
    main_grads: str = "fp32"
    """The gradient buffer's and its reduction's dtype (the row's main_grads column): fp32 or bf16."""
    optimizer_states: str = "fp32"
    """Adam's moments' dtype (the row's optimizer_states column): fp32 or bf16."""
    mtp_layers: int = 0
    """Multi-token-prediction depths trained on the last stage (the row's mtp_layers column)."""
    cuda_graphs: str = "none"
    """What the run captures in CUDA graphs (the row's cuda_graphs column; none: eager)."""
    offload_layers: int = 0
    """Layers whose activations wait in host memory (the row's offload_layers column)."""
    recompute_layers: int = 0
    """Full recompute of only this many layers a model chunk (the row's recompute_layers column; 0: every layer)."""
    bf16_layers: int = 0
    """The model's last layers whose matmuls stay 16-bit in a low-precision run (the row's bf16_layers column)."""
    cp_comm: str = ""
    """Context parallelism's exchange, p2p, a2a or all_gather (the row's cp_comm column, checked by rowplan); '': no CP."""
    moe_flex: bool = False
    """The estimate's MoE dispatch deduplicated a token's copies per node (the cluster's analytic `moe_node_dedup`,
    as Megatron-Core's flex dispatcher runs it); False: the alltoall dispatcher."""
    ep_overlap: bool = False
    """The estimate hid the EP all-to-alls behind another micro-batch's compute (the cluster's analytic `ep_overlap`
    above 0: Megatron-Core's --overlap-moe-expert-parallel-comm, where it runs it)."""
    moe_comm_sms: int = 0
    """SMs the flex dispatcher's kernels hold in the estimate (catalog_clusters.FLEX_DISPATCHER_SMS)."""
    moe_permute_fusion: bool = True
    """The estimate's fused MoE permutation (analytic `moe_permute_fusion`; Megatron-Core's default is off)."""
    overlap_grad_reduce: bool = False
    """The estimate reduced gradients during the backward and gathered ZeRO's weights during the next forward (analytic
    `overlap_grad_reduce`; False: after the backward, as FASOP's profiled estimate and Megatron-Core's default)."""
    tp_overlap: float = 0.0
    """The share of the TP collectives the estimate hid behind matmuls (analytic `tp_overlap`)."""
    gradient_accumulation_fusion: bool = True
    """The estimate's weight-gradient GEMMs accumulate into the main gradient (analytic; Megatron-Core's default)."""
    fused_attention: bool = True
    """The estimate's attention is a fused (FlashAttention-style) kernel (analytic `fused_attention`)."""


@dataclass(frozen=True)
class Export:
    text: str
    warnings: tuple[str, ...]


def settings_of(rp: RowPlan, params=None) -> Settings:
    """The row's settings columns, FASOP's defaults for those it lacks; with the analytic constants the row was
    estimated with (`params`, its cluster's: catalog.AnalyticParams), the MoE software they assumed."""
    row = rp.row
    recompute = row.get("recompute") or "none"
    if recompute not in RECOMPUTE:
        recompute = "full" if recompute in ("True", "true") else recompute
    zero_cell = row.get("zero") or row.get("zero_stage") or ""
    zero = int(zero_cell) if zero_cell.isdigit() and len(zero_cell) < 3 else 0
    zero_needed = rp.flag("is_oom") is True and rp.flag("is_zero_oom") is False and zero == 0
    replicate = row.get("dp_replicate") or ""
    hsdp = zero > 0 and replicate.isdigit() and len(replicate) < 7 and int(replicate) > 1 \
        and not rp.plan.dp % int(replicate)
    return Settings(recompute=recompute, sequence_parallel=bool(rp.flag("sequence_parallel")),
                    zero_stage=1 if zero_needed else zero, virtual_stages=rp.virtual_stages,
                    precision=row.get("precision") or None, zero_needed=zero_needed,
                    dp_replicate=int(replicate) if hsdp else 1,
                    main_grads="bf16" if row.get("main_grads") == "bf16" else "fp32",
                    optimizer_states="bf16" if row.get("optimizer_states") == "bf16" else "fp32",
                    **(estimated_software(params) if params is not None else {}), **row_software(rp))


def estimated_software(params) -> dict:
    """The Settings fields the analytic constants a row was estimated with decide (without them -- a FASOP-profiled
    cluster -- Settings' defaults: the alltoall dispatcher, no overlap, the fused kernels, as that estimate)."""
    return {"moe_flex": params.moe_node_dedup, "ep_overlap": params.ep_overlap > 0, "moe_comm_sms": params.moe_comm_sms,
            "moe_permute_fusion": params.moe_permute_fusion, "overlap_grad_reduce": params.overlap_grad_reduce,
            "tp_overlap": params.tp_overlap, "gradient_accumulation_fusion": params.gradient_accumulation_fusion,
            "fused_attention": params.fused_attention}


def row_software(rp: RowPlan) -> dict:
    """The row's `mtp_layers`, `cuda_graphs`, `offload_layers`, `recompute_layers`, `bf16_layers`, `cp_comm` cells (checked
    when the row was read: rowplan.plan_of_row)."""
    counts = {k: int((rp.row.get(k) or "0").strip())
              for k in ("mtp_layers", "offload_layers", "recompute_layers", "bf16_layers")}
    return {**counts, "cuda_graphs": (rp.row.get("cuda_graphs") or "none").strip(),
            "cp_comm": rp.row.get("cp_comm", "")}


def is_hybrid(model: ModelSpec) -> bool:
    """Whether the model has layers other than attention + MLP / experts (Mamba, lone sublayers)."""
    return model.architecture is not None and model.architecture.hybrid


def header(rp: RowPlan, model: ModelSpec, target: str) -> list[str]:
    p = rp.plan
    extra = "".join(f", {name} {v}" for name, v in (("cp", p.cp), ("ep", p.ep), ("etp", p.etp)) if v != 1)
    return [f"# fasop export --target {target}: {rp.where}",
            f"# {one_line(model.name)}: tp {p.tp}{extra}, dp {p.dp}, pp {p.pp}, micro-batch {p.mbs}, "
            f"{counted(p.num_microbatches, 'micro-batch')} per step, global batch {p.global_batch_size}; nodes in order {p.placement_name}",
            f"# layer-list entries per stage: {'-'.join(map(str, rp.partition))}"]


def fit_warnings(rp: RowPlan, s: Settings) -> list[str]:
    if s.zero_needed:
        return ["the plan fits in GPU memory only with the optimizer state sharded over data parallelism "
                "(is_oom True, is_zero_oom False): the export shards it"]
    if rp.flag("is_oom") and (rp.flag("is_zero_oom") or rp.flag("is_zero_oom") is None):
        return ["the plan does not fit in GPU memory by the estimate (is_oom True): it will not run as exported"]
    return []


def interleaved_partition(kinds: tuple[str, ...], partition: tuple[int, ...], v: int) -> tuple[int, ...] | None:
    """The layer-list entries of each of the v x pp model chunks, in model order (chunk k of rank r
    is piece k*pp + r: Megatron's and torchtitan's interleaved order), from each rank's entries:
    a rank's transformer layers split as evenly as they go over its v chunks (the first chunks
    take one more where they do not divide), the embedding in the first piece, the head in the
    last. The analytic estimator times a rank's chunks as 1/v of its layers each. None when the
    layer list is not embedding, transformer layers, head."""
    if kinds != ("embedding",) + ("transformer",) * (len(kinds) - 2) + ("head",):
        return None
    pp = len(partition)
    counts = transformer_counts(kinds, partition)
    pieces = [counts[r] // v + (k < counts[r] % v) for k in range(v) for r in range(pp)]
    pieces[0] += 1   # the embedding
    pieces[-1] += 1  # the head
    return tuple(pieces)


def stage_slices(kinds: tuple[str, ...], partition: tuple[int, ...]):
    """The layer list's entries of each pipeline stage (or model chunk): `partition` entries at a time."""
    start = 0
    for n in partition:
        yield kinds[start:start + n]
        start += n


def transformer_counts(kinds: tuple[str, ...], partition: tuple[int, ...]) -> list[int]:
    """Transformer layers per stage."""
    return [sum(k != "embedding" and k != "head" for k in part) for part in stage_slices(kinds, partition)]

