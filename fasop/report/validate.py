"""`fasop validate FILE.csv`: the analytic estimator against measured training runs.

One CSV row is one measured run. Columns (exact names):
  required  num_layers, hidden_size, num_attention_heads, seq_len, vocab_size, gpu, num_gpus,
            tp, pp, dp, global_batch_size, measured_seconds_per_iter
  optional  name, ffn_hidden_size (4 x hidden), num_kv_heads (heads), gated_mlp (0/1, 0),
            tied_embeddings (0/1; 1, or 0 for a gated MLP as in the Llama family),
            gpus_per_node (8), precision (bf16), micro_batch_size, recompute (none/selective/full),
            sequence_parallel (0/1), distributed_optimizer (0/1), virtual_pp,
            recompute_num_layers (full recompute of only N layers per model chunk, Megatron's
            block method; empty: every layer, or where the GPU's `validate_software` says
            block_recompute -- H100/H200 -- the fewest that fit; a ZeRO-3 row: every layer),
            bf16_layers (layers of an fp8 / mxfp8 / nvfp4 run whose matmuls stay 16-bit: Megatron-Core's
            num_layers_at_start_in_bf16 + num_layers_at_end_in_bf16; empty: 0),
            offload_layers (layers whose activations wait in host memory, Megatron-Core's
            --cpu-offloading-num-layers: pp 1, recompute none, no per-layer CUDA graphs; empty: 0, or on
            a Megatron-FSDP row without recompute the fewest that fit, as Megatron-Bridge's FSDP recipes do),
            measured_peak_mem_gib, fused_attention, overlap_grad_reduce and fused_elementwise (0/1:
            software the run had, FlashAttention, gradient reduction during the backward, fused
            elementwise kernels or eager PyTorch; empty: the GPU's
            `validate_software` in gpus.yaml -- what its published runs had -- else analytic.yaml),
            tp_overlap (share of the TP collectives hidden behind the matmuls, same defaults)
An empty plan cell (micro_batch_size, recompute, sequence_parallel, distributed_optimizer,
virtual_pp) means "the fastest value that fits in memory": every allowed value is estimated and
the row reports what was picked -- except a cell the GPU's `validate_software` fixes (A100:
sequence_parallel 0), reported as "(catalog)". The TP overlap is the GPU's `validate_software`
tp_overlap where it has one (H100/H200: NeMo's recipes). The GPU comes from the catalog (cluster_specs/catalog/gpus.yaml),
with its vendor reference node's network between nodes; the physical constants from
cluster_specs/catalog/analytic.yaml. Error = (predicted - measured) / measured.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from pathlib import Path

from fasop.estimators.analytic import block_recompute as BR
from fasop.estimators.analytic import offload as OF
from fasop.estimators.analytic import cost as C
from fasop.estimators.analytic import mixed
from fasop.estimators.analytic import moe_kernels as MK
from fasop.estimators.analytic import parallel as P
from fasop.estimators.analytic.layers import PRECISIONS, RECOMPUTES, Recipe
from fasop.estimators.analytic.modules import MODULES, recompute_text, split_recompute
from fasop.specs.catalog import AnalyticParams, default_params
from fasop.specs.validate_software import VALIDATE_PLAN_SOFTWARE, VALIDATE_RECIPE_SOFTWARE
from fasop.report.validate_defaults import PRECISION_NAMES, common as _common, software as _software
from fasop.report.validate_models import architecture, columns_model, row_model
from fasop.specs.types import GIB
from fasop.report.validate_rows import (ARCHITECTURE, CEILINGS, OPTIONAL, REQUIRED, Cells, Hardware, Row,  # noqa: F401
                                        bf16_layers_cell, cp_comm_cell, layers_per_stage, read_rows, read_table,
                                        row_hardware)

PICKED = ("micro_batch_size", "recompute", "sequence_parallel", "distributed_optimizer", "virtual_pp")
OUT_COLUMNS = ("name", "gpu", "num_gpus", "tp", "pp", "dp", "global_batch_size", "measured_seconds_per_iter",
               "predicted_seconds_per_iter", "error_pct", "measured_peak_mem_gib", "predicted_peak_mem_gib",
               "mem_error_pct", "fits", "micro_batch_size", "recompute", "sequence_parallel",
               "distributed_optimizer", "virtual_pp", "precision", "picked", "cluster", "stage_gpus",
               "layers_per_stage", "model", "cp", "cp_comm", "ep", "etp", "zero")
RECOMPUTE_MODULES = MODULES
"""Megatron-LM's --recompute-modules names a `selective:<modules>` cell may list."""
TASKS = ("pretrain", "sft")
"""Both full training (every parameter trained): the same step."""
TASK_SPELLINGS = {"pretraining": "pretrain", "pre-train": "pretrain", "pre-training": "pretrain", "pre_train": "pretrain",
                  "full_sft": "sft", "full-sft": "sft", "full_finetune": "sft", "full-finetune": "sft"}
"""Other ways tables write the two tasks (a LoRA / PEFT task trains adapters only: not these, refused)."""
MAX_VIRTUAL = 8
NO_RECIPE = ("no micro-batch size / virtual_pp fits the row: mbs dividing the batch a replica, and with virtual_pp > 1 "
             "micro-batches a multiple of pp (Megatron-Core's interleaved schedule at its default --microbatch-group-"
             "size-per-virtual-pipeline-stage, pp: fasop models no other grouping; an empty virtual_pp is tried at the "
             "values whose pp x virtual_pp divides the layers)")


@dataclass(frozen=True, kw_only=True)
class Prediction:
    row: dict
    """The output row (OUT_COLUMNS)."""
    error: float
    mem_error: float | None


@dataclass(frozen=True, kw_only=True)
class Report:
    predictions: tuple[Prediction, ...]
    ignored_columns: tuple[str, ...] = ()
    """The CSV's columns validate does not read (validate_rows.read_table)."""

    @property
    def mape(self) -> float:
        return 100 * sum(abs(p.error) for p in self.predictions) / len(self.predictions)

    @property
    def max_error(self) -> float:
        return 100 * max(abs(p.error) for p in self.predictions)

    @property
    def mean_signed_error(self) -> float:
        """Mean of (predicted - measured) / measured, %: the estimator's lean (negative: fast)."""
        return 100 * sum(p.error for p in self.predictions) / len(self.predictions)

    @property
    def memory_errors(self) -> list[float]:
        return [p.mem_error for p in self.predictions if p.mem_error is not None]


def _zero(c: Cells) -> str | None:
    """`zero`; a `distributed_optimizer` cell, its synonym at 1, must agree with zero 0 or 1 (beside zero 2 / 3 either
    is a run's fact: Megatron-FSDP runs the distributed optimizer, PyTorch FSDP does not)."""
    zero, shards = c.choice("zero", ("0", "1", "2", "3")), c.flag("distributed_optimizer")
    if zero in ("0", "1") and shards is not None and shards != (zero == "1"):
        raise c.error("distributed_optimizer", f"{int(shards)} contradicts zero {zero} (distributed_optimizer 1 is "
                                               "zero 1); leave one of them empty")
    return zero


def predict(path: Path, row: Row, base: AnalyticParams, as_searched: bool = False) -> Prediction:
    """One measured run against the analytic estimator: the entry point for one parsed row, `base` the constants
    (a row naming a cluster: its cluster's); `as_searched`: its empty software cells those, as a search's plans."""
    c = Cells(path, row)
    arch, seq, gbs, measured, n, tp, pp, dp = _model_and_degrees(c)
    par = _parallel(c, arch, seq, tp, dp)
    hw = replace(row_hardware(c, tp, dp * par["cp"], pp, base), published=not as_searched)   # CP ranks: tp-cp-dp
    counts = layers_per_stage(c, pp, arch.num_layers)
    kind = ("hybrid_" if arch.mamba is not None else "") + ("moe" if arch.moe is not None else "")
    zero = _zero(c)
    written = "_".join(c.text("precision").lower().replace("-", " ").split())
    precision = PRECISION_NAMES.get(written) or c.choice("precision", PRECISIONS, "bf16")
    par["bf16_layers"] = bf16_layers_cell(c, precision, arch.num_layers)
    # a ZeRO-3 row is PyTorch FSDP unless the GPU's published FSDP runs are Megatron-FSDP's (FSDP_STACK) and the
    # row does not say its elementwise ops run eager (PyTorch's; Megatron-Core's are Transformer Engine's fused ones)
    recipe_practice = _common(hw, VALIDATE_RECIPE_SOFTWARE)   # how the GPU's published runs recomputed and sharded
    torch_fsdp = zero == "3" and (not recipe_practice.get("megatron_fsdp", False)
                                  or c.flag("fused_elementwise") is False)
    stack = torch_fsdp and hw.published   # --as-searched: the search's ZeRO-3, the constants' kernels
    params, recipe_software = _software(c, hw, kind.rstrip("_"), precision, fsdp=stack)
    for g in hw.gpus:
        if precision not in ("bf16", "fp16", "fp32", "tf32") and g.peak_flops.get(precision) is None:
            shown = precision if written == precision else f"{c.text('precision')!r} (read as {precision})"
            raise c.error("precision", f"{shown}: {g.name} has no {precision.upper()} tensor cores "
                                       f"(the GPU catalog's {precision}_tflops is null)")
    fixed = {k: v for k, v in (("micro_batch_size", c.int("micro_batch_size")),
                                ("recompute", _recompute(c)),
                                ("sequence_parallel", c.flag("sequence_parallel")),
                                ("distributed_optimizer", c.flag("distributed_optimizer") if zero is None
                                 else int(zero) >= 1),
                                ("virtual_pp", 1 if counts else c.int("virtual_pp"))) if v is not None}
    if arch.moe is not None and tp > 1:   # Megatron-Core: MoE with TP requires sequence parallelism
        fixed.setdefault("sequence_parallel", True)
    if stack and tp > 1:                  # torchtitan's TP shards the norms' sequence (FSDP_STACK)
        fixed.setdefault("sequence_parallel", True)
    common = _common(hw, VALIDATE_PLAN_SOFTWARE)
    assumed = {k: v for k, v in common.items() if k not in fixed}   # what this GPU's published runs had
    fixed |= assumed
    par["zero"] = None if zero is None else int(zero)
    if zero == "3" and not torch_fsdp:    # Megatron-FSDP: in its buffers, no FSDP1 / FSDP2 copies
        params = replace(params, megatron_fsdp=True)
    if torch_fsdp and params.fused_elementwise and params.eager_rope == "complex" and (stack or c.flag("fused_elementwise")):
        # a compiled PyTorch FSDP stack (torchtitan; --as-searched: stated) whose complex RoPE Inductor leaves eager
        params = replace(params, compiled_rope=True)
    block = _block(c, arch.num_layers, fixed.get("recompute"))
    # a PyTorch FSDP stack (torchtitan, fms-fsdp): its full AC checkpoints every block
    if block is None and not torch_fsdp and recipe_practice.get("block_recompute"):
        block = "fit"
    offload = _offload(c, pp, arch.num_layers, zero == "3" and not torch_fsdp, params.host.graphed)
    if offload and offload != "fit":
        if fixed.get("recompute", "none") != "none":
            raise c.error("offload_layers", f"{offload} needs recompute none (Megatron-Core: \"CPU offloading does "
                                            f"not work when activation recomputation is enabled\")")
        fixed["recompute"] = "none"
    stated_overlap = bool(c.text("ep_overlap")) and params.ep_overlap > 0 and "ep_overlap" not in recipe_software
    best, refused = _fastest(arch, seq, gbs, tp, dp, pp, precision, params, hw.replicas, fixed, counts, par, block,
                             offload, MK.workload_ep_overlap_refusal if stated_overlap else None)
    if best is None and refused:
        raise c.error("ep_overlap", f"{c.text('ep_overlap')}: Megatron-Core refuses its EP overlap with {refused}")
    if best is None:
        raise c.error("micro_batch_size", NO_RECIPE)
    step, peak, fits, choice, split = best
    mem = c.positive("measured_peak_mem_gib")
    out = {"name": c.text("name"), "gpu": "+".join(g.name for g in hw.gpus), "num_gpus": n, "tp": tp, "pp": pp,
           "dp": dp, "global_batch_size": gbs, "measured_seconds_per_iter": measured,
           "predicted_seconds_per_iter": step, "error_pct": 100 * (step - measured) / measured,
           "measured_peak_mem_gib": "" if mem is None else mem, "predicted_peak_mem_gib": peak / GIB,
           "mem_error_pct": "" if mem is None else 100 * (peak / GIB - mem) / mem, "fits": fits,
           **{k: int(v) if isinstance(v, bool) else v for k, v in choice.items() if k in PICKED}, "precision": precision,
           "picked": " ".join([f"{k}={int(v) if isinstance(v, bool) else v}" for k, v in choice.items()
                               if k not in fixed] + [f"{k}={int(v)} (catalog)" for k, v in assumed.items()]
                              + [f"{k}={v} (recipe)" for k, v in recipe_software.items()]),
           "cluster": hw.cluster, "stage_gpus": hw.stage_gpus, "layers_per_stage": "-".join(map(str, split)),
           "model": c.text("model"), "cp": par["cp"], "cp_comm": par["cp_comm"] if par["cp"] > 1 else "",
           "ep": par["ep"], "etp": par["etp"],
           "zero": par["zero"] if par["zero"] is not None else int(choice["distributed_optimizer"])}
    if isinstance(choice["recompute"], tuple):  # a module list, in the search CSV's one spelling
        out["recompute"] = recompute_text(choice["recompute"])
    return Prediction(row=out, error=(step - measured) / measured,
                      mem_error=None if mem is None else (peak / GIB - mem) / mem)


def _model_and_degrees(c: Cells) -> tuple:
    """(architecture, sequence, global batch, measured seconds, GPUs, tp, pp, dp) of a row, its
    degrees checked against the GPU count (tp x pp x cp x dp), the batch, the layers and the heads."""
    seq, n, tp, pp, dp = (c.int(k) for k in ("seq_len", "num_gpus", "tp", "pp", "dp"))
    cp = c.int("cp", 1)
    gbs, measured = c.int("global_batch_size"), c.positive("measured_seconds_per_iter")
    if tp * pp * cp * dp != n:
        raise c.error("num_gpus", f"tp x pp x cp x dp = {tp * pp * cp * dp}, not {n}")
    if gbs % dp:
        raise c.error("global_batch_size", f"{gbs} is not a multiple of dp = {dp}")
    arch = row_model(c, seq) if c.text("model") else columns_model(c, seq, tp)
    dropout = c.flag("dropout")
    if dropout is not None:   # the run's own code: Sailor's OPT / GPT-Neo keep no attention-probability dropout
        arch = replace(arch, dropout=dropout)
    if arch.num_layers < pp:
        raise c.error("pp", f"{pp} stages for {arch.num_layers} layers")
    if arch.num_attention_heads % tp:
        raise c.error("tp", f"tp = {tp} does not divide the {arch.num_attention_heads} attention heads")
    return arch, seq, gbs, measured, n, tp, pp, dp


def _parallel(c: Cells, arch, seq: int, tp: int, dp: int) -> dict:
    """cp, ep, etp (default 1), HSDP's shard degree (`dp_shard`, default all dp x cp ranks) and the
    multi-token-prediction depths trained (`mtp_layers`, default the config's modules),
    checked: 2cp divides the sequence (causal load balancing), ep the experts and ep x etp the
    stage's tp x cp x dp ranks (Megatron-Core), the shard degree dp x cp."""
    cp, ep, etp = c.int("cp", 1), c.int("ep", 1), c.int("etp", 1)
    task = c.text("task").lower()
    if task in ("lora", "peft", "qlora"):
        raise c.error("task", f"{task!r} trains adapters only; fasop models full training (pretrain, sft)")
    if task not in TASK_SPELLINGS:
        c.choice("task", TASKS)
    if cp > 1 and seq % (2 * cp):
        raise c.error("cp", f"cp = {cp}: 2 x cp must divide seq_len {seq} (causal load balancing)")
    experts = arch.moe.num_experts if arch.moe is not None else 1
    if (ep > 1 or etp > 1) and arch.moe is None:
        raise c.error("ep", "expert parallelism on a model without experts")
    if not P.valid_expert_degrees(tp, cp, dp, ep, etp, experts):
        raise c.error("ep", f"ep = {ep}, etp = {etp}: ep must divide the {experts} experts and ep x etp the "
                            f"tp x cp x dp = {tp * cp * dp} ranks of a stage")
    if c.text("moe_dispatcher").lower() == "alltoall_seq" and etp != tp:   # Megatron-Core < 0.13 raised it
        raise c.error("etp", f"{etp}: the alltoall_seq dispatcher ran its experts at the attention's TP only (tp = {tp})")
    shard = c.int("dp_shard", 0)
    if shard and (dp * cp) % shard:
        raise c.error("dp_shard", f"{shard} does not divide dp x cp = {dp * cp}")
    mtp = c.int("mtp_layers", arch.mtp_layers, low=0)
    if arch.mtp_problem(mtp):
        raise c.error("mtp_layers", arch.mtp_problem(mtp))
    return {"cp": cp, "ep": ep, "etp": etp, "shard": shard, "mtp": mtp, "cp_comm": cp_comm_cell(c, arch, tp, cp)}


def _block(c: Cells, layers: int, recompute) -> int | None:
    """`recompute_num_layers`: at most the model's layers, and a positive count only with `recompute`
    full or empty (a stated none / selective recomputes no whole layers)."""
    block = c.int("recompute_num_layers", low=0)
    if block is not None and block > layers:
        raise c.error("recompute_num_layers", f"{block} is more than the model's {layers} layers")
    if block and recompute not in (None, "full"):
        shown = recompute if isinstance(recompute, str) else recompute_text(recompute)
        raise c.error("recompute_num_layers", f"{block} needs recompute full (Megatron's --recompute-method "
                                              f"block), the row's recompute is {shown}")
    return block


def _offload(c: Cells, pp: int, layers: int, megatron_fsdp: bool, graphed: tuple) -> int | str:
    """`offload_layers`: a count below the model's layers, without pipeline parallelism, recomputation or
    per-layer CUDA graphs (Megatron-Core TransformerConfig refuses each); empty: "fit" on a Megatron-FSDP row
    with one stage and no per-layer graphs (Megatron-Bridge's FSDP recipes offload rather than recompute),
    else 0."""
    n = c.int("offload_layers", low=0)
    why = OF.refusal(n or 0, pp, layers, graphed)
    if why:
        raise c.error("offload_layers", f"{n}: {why}")
    return ("fit" if megatron_fsdp and not OF.refusal(1, pp, layers, graphed) else 0) if n is None else n


def _recompute(c: Cells) -> str | tuple | None:
    """`recompute`: none, selective, full, or Megatron-LM's `selective:<modules>` (each module with its
    own recompute cost and saved memory: estimators/analytic/modules.py), returned as the module tuple."""
    text = c.text("recompute").lower()
    if text.startswith("selective:"):
        try:
            return split_recompute(text)[1]
        except ValueError as exc:
            raise c.error("recompute", str(exc)) from None
    return c.choice("recompute", RECOMPUTES)


def _fastest(arch, seq, gbs, tp, dp, pp, precision, params, replicas, fixed, counts=None, par=None, block=None,
             offload=0, refuse=None):
    """((step s, peak bytes, fits, choice, split) of the fastest allowed recipe that fits, else the fastest, else
    None; the reason `refuse(w)` gave to skip the most); `counts`: the row's split of the blocks, else fasop's for the
    slowest replica of each stage; `block`: full recompute's layers per chunk (None: every layer; "fit": the fewest
    that fit); `offload`: the layers whose activations go to host memory ("fit": without recompute, the fewest)."""
    per_replica = gbs // dp
    options = {
        "micro_batch_size": [b for b in (1, 2, 4, 8, 16, 32) if per_replica % b == 0],
        "recompute": list(RECOMPUTES),
        "sequence_parallel": [False, True] if tp > 1 else [False],
        "distributed_optimizer": [False, True] if dp * par["cp"] > 1 else [False],
        "virtual_pp": [1] + [v for v in range(2, MAX_VIRTUAL + 1) if arch.num_layers % (pp * v) == 0] if pp > 1 else [1],
    }
    options |= {k: [v] for k, v in fixed.items()}
    best, refused = None, {}   # refused: how many recipes each reason refused
    for values in itertools.product(*options.values()):
        choice = dict(zip(options, values))
        m = per_replica // choice["micro_batch_size"]
        if per_replica % choice["micro_batch_size"] or (choice["virtual_pp"] > 1 and m % pp):
            continue
        zero = par["zero"] if par["zero"] is not None else int(choice["distributed_optimizer"])
        modules = choice["recompute"] if isinstance(choice["recompute"], tuple) else ()
        recipe = Recipe(recompute="selective" if modules else choice["recompute"], recompute_modules=modules,
                        sequence_parallel=choice["sequence_parallel"],
                        zero=zero, virtual_stages=choice["virtual_pp"], precision=precision,
                        recompute_layers=block if isinstance(block, int) else None,
                        offload_layers=offload if isinstance(offload, int) else 0, bf16_layers=par["bf16_layers"],
                        cp_comm=par["cp_comm"])
        w = C.Workload(arch=arch, seq=seq, mbs=choice["micro_batch_size"], tp=tp, dp=dp, pp=pp,
                       num_microbatches=m, recipe=recipe, params=params, cp=par["cp"], ep=par["ep"],
                       etp=par["etp"], shard=par["shard"], mtp=par["mtp"])
        if refuse and (why := refuse(w)):
            refused[why] = refused.get(why, 0) + 1
            continue
        if block == "fit" and recipe.recompute == "full":
            n = BR.fewest_layers_that_fit(w, lambda x: _estimate(x, replicas, counts)[2])
            w = w if n is None else replace(w, recipe=replace(recipe, recompute_layers=n))
            choice = {**choice, "recompute_num_layers": "all" if n is None else n}
        if offload == "fit" and recipe.recompute == "none":
            n = OF.fewest_that_fit(w, lambda x: _estimate(x, replicas, counts)[2])
            if n:
                w, choice = replace(w, recipe=replace(recipe, offload_layers=n)), {**choice, "offload_layers": n}
        step, peak, fits, split = _estimate(w, replicas, counts)
        key = (not fits, step)
        if best is None or key < best[0]:
            best = (key, (step, peak, fits, choice, split))
    # the reason that refused the most recipes: the one the row's own cells fix (every choice it leaves open has it)
    return None if best is None else best[1], max(refused, key=lambda why: refused[why]) if refused else ""


def _estimate(w, replicas, counts):
    """(step s, peak bytes, fits, split) of one workload: the row's split, else fasop's."""
    split = counts or C.split_layers(w, replicas[0] if len(replicas) == 1 else mixed.slowest_stages(w, replicas))
    split = split or _even(w.arch.num_layers, w.pp)
    peak, fits = mixed.peak_and_fits(w, replicas, split)
    return mixed.step(w, replicas, split).step_s, peak, fits, split


def _even(layers: int, pp: int) -> tuple[int, ...]:
    return tuple(layers // pp + (i < layers % pp) for i in range(pp))


def validate(path: str | Path, params: AnalyticParams | None = None, as_searched: bool = False) -> Report:
    path = Path(path)
    base = params or default_params()
    architecture.cache_clear()   # the rows' models read afresh (then once a file version within the run)
    rows, ignored = read_table(path)
    return Report(predictions=tuple(predict(path, row, base, as_searched) for row in rows), ignored_columns=ignored)


def report_rows(report: Report) -> tuple[list[str], list[dict]]:
    return list(OUT_COLUMNS), [p.row for p in report.predictions]
