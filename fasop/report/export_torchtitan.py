"""`fasop export --target torchtitan`: a torchtitan recipe function (ParallelismConfig keys, batch
keys, activation checkpointing, float8) and the equivalent `--parallelism.*` overrides.

Sources (shared/reference/ecosystem/): torchtitan's ParallelismConfig keys and recipe style (after
its config refactor #2386, key names as at its 2026-08 HEAD) from 02_torchtitan.md §2.1-2.4.
"""

from __future__ import annotations

import json

from fasop.core.cells import one_line
from fasop.estimators.analytic.recipes import tp_overlap_refusal
from fasop.plans.rowplan import RowPlan
from fasop.report.export_graphs import torchtitan_graphs
from fasop.report.export_settings import (Export, Settings, fit_warnings, header, interleaved_partition, is_hybrid,
                                          settings_of)
from fasop.specs.types import ModelSpec


def torchtitan_fqns(kinds: tuple[str, ...], partition: tuple[int, ...]) -> list[str] | None:
    """module_fqns_per_model_part, one Python expression per stage: `tok_embeddings` on the first,
    its transformer layers as `layers.i` (a range), `norm` and `lm_head` on the last; None for a
    layer list other than embedding, transformer layers, head (torchtitan's models are decoder-only)."""
    if kinds != ("embedding",) + ("transformer",) * (len(kinds) - 2) + ("head",):
        return None
    out, start = [], 0
    for n in partition:
        part = kinds[start:start + n]
        first = start - 1 + ("embedding" in part)  # the first transformer layer's number
        t = part.count("transformer")
        pieces = ['["tok_embeddings"]'] if "embedding" in part else []
        if t:
            pieces.append(f'[f"layers.{{i}}" for i in range({first}, {first + t})]')
        if "head" in part:
            pieces.append('["norm", "lm_head"]')
        out.append(" + ".join(pieces) or "[]")
        start += n
    return out


AC_CONFIGS = {"none": ("None", "every activation kept"), "full": ("FullAC.Config()", "full recompute"),
              "selective": ("SelectiveAC.Config()", "selective recompute")}
"""torchtitan's activation checkpointing at its HEAD (torchtitan/distributed/activation_checkpoint.py)."""


def _cluster_software_warnings(p, model: ModelSpec, s) -> list[str]:
    """What the cluster's analytic constants made the estimate assume that torchtitan's recipe cannot say: the
    flex dispatcher and Megatron-Core's EP overlap of an MoE plan, a share of the TP collectives hidden, attention or
    weight-gradient accumulation without fused kernels."""
    warnings = []
    if model.architecture is not None and model.architecture.moe is not None and p.ep > 1:
        if s.moe_flex:   # torchtitan/models/common/token_dispatcher.py @b5bcd76: a model's config picks its dispatcher
            warnings.append("the estimate sends a token across the network once per node (the cluster's analytic "
                            "moe_node_dedup, as HybridEP / DeepEP do): torchtitan picks its token dispatcher in the "
                            "model's config (HybridEPTokenDispatcher, DeepEPTokenDispatcher), not here; not written")
        if s.ep_overlap:
            warnings.append("the estimate hides the EP all-to-alls behind compute (the cluster's analytic ep_overlap, "
                            "Megatron-Core's EP A2A overlap): torchtitan's config has no such option; not written")
    if s.tp_overlap > 0 and p.tp > 1 and not tp_overlap_refusal(s.sequence_parallel, s.precision):   # as estimated
        # configs.py enable_async_tensor_parallel (needs torch.compile) is another scheme
        warnings.append(f"the cluster's analytic tp_overlap {s.tp_overlap:g}: the estimate hid that share of the TP "
                        "collectives; torchtitan's overlap is async TP (enable_async_tensor_parallel, with torch.compile), "
                        "not what was estimated; not written")
    if not s.fused_attention:   # torchtitan's attention is SDPA, its flash kernel where the GPU has it
        warnings.append("the cluster's analytic fused_attention is off: torchtitan's SDPA runs its flash kernel where "
                        "the GPUs have it (faster than estimated); not written")
    if not s.gradient_accumulation_fusion:
        warnings.append("the cluster's analytic gradient_accumulation_fusion is off: torchtitan has no such switch; "
                        "not written")
    return warnings


def torchtitan(rp: RowPlan, model: ModelSpec, params=None) -> Export:
    p, s = rp.plan, settings_of(rp, params)
    warnings = fit_warnings(rp, s)
    warnings += _cluster_software_warnings(p, model, s)
    if is_hybrid(model):
        warnings.append("torchtitan has no hybrid Mamba / attention model (torchtitan/models at its 2026-08 HEAD): "
                        "the recipe's module names assume Transformer blocks; bring a model of your own")
    seq = model.sequence_length
    fqns = _torchtitan_split(rp, model, s, warnings)
    sets = _torchtitan_parallelism(rp, s, warnings)
    training = [("num_tokens_per_microbatch_per_dp_rank", p.mbs * seq, f"micro-batch {p.mbs} x sequence {seq}"),
                ("num_tokens_per_train_step", p.global_batch_size * seq,
                 f"global batch {p.global_batch_size} x sequence {seq}"),
                ("max_context_length", seq, "the estimate's sequence (default 2048)")]
    if s.main_grads == "bf16":  # TrainingConfig.mixed_precision_reduce is Literal["float32"] at b5bcd76
        warnings.append("main_grads bf16: torchtitan reduces gradients in float32 (training.mixed_precision_reduce "
                        "takes only \"float32\"): twice the reduce-scatter bytes estimated; not written")
    training += torchtitan_graphs(p, s, warnings)
    if s.optimizer_states == "bf16":
        warnings.append("optimizer_states bf16: torchtitan keeps Adam's moments in the sharded parameters' fp32 "
                        "(4 bytes a parameter more than estimated); not written")
    ac = AC_CONFIGS.get(s.recompute)
    if s.recompute == "full" and s.recompute_layers:
        warnings.append(f"recompute_layers {s.recompute_layers}: torchtitan's full activation checkpointing takes every "
                        "layer (its SelectiveAC layer option every n-th, not the first n); written as full")
    if ac is None and s.recompute.startswith("selective:"):
        warnings.append(f"recompute {s.recompute!r}: torchtitan's activation checkpointing takes no module list "
                        "(SelectiveAC picks ops or every n-th layer); not written")
    elif ac is None:
        warnings.append(f"recompute {s.recompute!r}: no torchtitan activation-checkpoint mode known; not written")
    if s.offload_layers:
        warnings.append(f"offload_layers {s.offload_layers}: torchtitan offloads no activations to host memory (its "
                        "enable_cpu_offload moves FSDP's parameters, gradients and optimizer states); not written")
    if s.mtp_layers:
        warnings.append(f"mtp_layers {s.mtp_layers}: torchtitan's DeepSeek-V3 takes multi-token prediction as "
                        f"model_registry(..., num_mtp_layers={s.mtp_layers}), not a config key, and refuses it with "
                        "pp or cp > 1 (torchtitan/models/deepseek_v3/MTP.md); not written")
    float8 = _torchtitan_float8(s, warnings, model.architecture is not None and model.architecture.moe is not None)
    lines = header(rp, model, "torchtitan") + [f"# warning: {w}" for w in warnings]   # float8's warnings too
    local = p.mbs * p.num_microbatches if p.pp > 1 else p.mbs  # one pipeline pass, or a step's accumulation
    lines += ["# torchtitan after its config refactor (#2386, 2026-02): a recipe function, run with",
              "#   torchrun ... -m torchtitan.train --module <your module> --config <your function>",
              f"# with NGPU = {p.num_gpus} and the nodes in the order of `fasop export --target hostfile`.",
              "# Key names as at torchtitan's 2026-08 HEAD; before #4121 (2026-08-20) the batch keys were",
              f"#   training.local_batch_size = {local}, training.global_batch_size = {p.global_batch_size}, "
              f"training.seq_len = {seq}" + (f", parallelism.pipeline_parallel_microbatch_size = {p.mbs}"
                                             if p.pp > 1 else ""),
              "#   (no num_pp_microbatches); before #2937 (2026-04) the head's module is `output`, not `lm_head`;",
              "#   before #3559 (2026-08-13) there is no training.disable_cuda_graphs (nothing captured): drop it.",
              "", "", "def fasop_plan(config):",
              '    """Apply the fasop plan to a torchtitan Trainer.Config: e.g.',
              f'    `def my_run(): return fasop_plan(my_model())`, my_model the recipe of {_py(one_line(model.name))[1:-1]}."""']
    if s.recompute in ("full", "selective"):
        lines.append("    from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC")
        lines.append("")
    lines.append("    p = config.parallelism")
    lines += [f"    p.{key} = {_py(value)}" for key, value in sets]
    if fqns is not None:
        lines += ["    p.module_fqns_per_model_part = ["] + [f"        {part}," for part in fqns] + ["    ]"]
    lines += [f"    config.training.{key} = {value}  # {why}" for key, value, why in training]
    if ac is not None:
        lines.append(f"    config.activation_checkpoint = {ac[0]}  # {ac[1]}")
    lines += float8
    lines += ["    return config", "", "",
              "# The same as --parallelism.* overrides (frozen but still honoured; enable_sequence_parallel,",
              "# module_fqns_per_model_part and activation_checkpoint only in the recipe):",
              " ".join(f"--parallelism.{key} {_py(value)}" for key, value in sets if not isinstance(value, bool)),
              " ".join(_flag("training", key, value) for key, value, _ in training if value != "False")]
    return Export("\n".join(lines) + "\n", tuple(warnings))


_BLOCKS = 'fqns=["attention", "feed_forward", "shared_experts"]'
LOW_PRECISION_CONVERTERS = {"fp8": ("Float8LinearConverter",
                                    'recipe_name="rowwise", filter_fqns=["lm_head"], model_compile_enabled=True'),
                            "mxfp8": ("MXFP8LinearConverter", f"{_BLOCKS}, model_compile_enabled=True"),
                            "nvfp4": ("NVFP4LinearConverter", f"{_BLOCKS}, model_compile_enabled=True")}
"""Each low precision's torchtitan model converter and its Config arguments (torchtitan/components/quantization/
@b5bcd76c6: torchao's Float8Linear -- rowwise scaling, the only recipes its Config takes; weights all-gathered in
bf16 --, MXFP8Linear and NVFP4Linear; MXFP8 and NVFP4 need sm100), the blocks' Linears only: the output layer
stays bf16, as estimated (cost.head_s) and as Megatron-Core keeps it (Float8's `filter_fqns` skips, the others'
`fqns` select -- the modules torchtitan's DeepSeek-V3 MXFP8 registry converts)."""


GROUPED_EXPERTS_CONVERTERS = {"fp8": ("Float8GroupedExpertsConverter", "model_compile_enabled=True"),
                              "mxfp8": ("MXFP8GroupedExpertsConverter", "model_compile_enabled=True, pad_multiple=128")}
"""The routed experts' grouped GEMMs in the same precision (torchtitan/components/quantization/ float8.py, mx.py;
pad_multiple 128: "the CuTeDSL quantization kernel on sm_100 requires multiples of 128", as its DeepSeek-V3
MXFP8 registry sets it). No NVFP4 one exists there."""


def _torchtitan_float8(s: Settings, warnings: list[str], moe: bool = False) -> list[str]:
    """fp8 / mxfp8 / nvfp4: torchao's low-precision Linear (and an MoE model's grouped experts), each converter
    applied to the recipe's model config as torchtitan's model registries apply theirs (`model_registry(flavor,
    converters=[...])` builds each and calls `convert` on the config, e.g. graph_trainer_llama3_8b_mxfp8),
    compiled (their matmuls are fast only under torch.compile)."""
    if s.precision not in LOW_PRECISION_CONVERTERS:
        if s.precision not in (None, "bf16"):
            warnings.append(f"precision {s.precision!r}: torchtitan trains in bf16 (FSDP mixed precision); not written")
        return []
    if s.bf16_layers:
        warnings.append(f"bf16_layers {s.bf16_layers}: written converters quantize every block; exclude the last "
                        f"{s.bf16_layers} blocks' Linears (their `fqns` / `filter_fqns`) to keep them 16-bit as estimated")
    converters = [LOW_PRECISION_CONVERTERS[s.precision]]
    if moe and s.precision in GROUPED_EXPERTS_CONVERTERS:
        converters.append(GROUPED_EXPERTS_CONVERTERS[s.precision])
    elif moe:
        warnings.append(f"precision {s.precision!r}: torchtitan has no {s.precision} converter for the routed experts' "
                        "grouped GEMMs; they stay bf16 there (estimated in the plan's precision)")
    lines = [f"    from torchtitan.components.quantization import {', '.join(c for c, _ in converters)}\n"]
    for converter, arguments in converters:
        lines += [f"    quantize = {converter}.Config({arguments})  # {s.precision} matmuls, bf16 elsewhere",
                  "    config.model_spec.model = quantize.build().convert(config.model_spec.model)"]
    return lines + [f"    config.compile.enable = True  # {s.precision} matmuls pay off only compiled"]


def _torchtitan_split(rp: RowPlan, model: ModelSpec, s: Settings, warnings: list[str]) -> list[str] | None:
    """module_fqns_per_model_part expressions (None: torchtitan's own split, or none expressible). Interleaved
    plans name every chunk's modules too: pipeline_parallel_layers_per_stage counts the embedding and the
    head as a layer each (first / last_stage_less_layers, default 1: pipeline_parallel.py), so an even
    split of the layers does not give pp x v stages."""
    partition = rp.partition
    if s.virtual_stages > 1 and len(partition) == rp.plan.pp:  # each rank's layers, not its chunks'
        chunks = interleaved_partition(model.layer_kinds, partition, s.virtual_stages)
        if chunks is None:
            warnings.append(f"{s.virtual_stages} virtual stages: torchtitan's models are decoder-only, this model's "
                            "layer list is not; module_fqns_per_model_part not written")
            return None
        return torchtitan_fqns(model.layer_kinds, chunks)  # v x pp parts, chunk k of rank r at k*pp+r
    if len(partition) == 1:
        return None
    fqns = torchtitan_fqns(model.layer_kinds, partition)
    if fqns is None:
        warnings.append("torchtitan cannot express this split: its models are decoder-only (tok_embeddings, "
                        "layers.i, norm, lm_head), this model's layer list is not; module_fqns_per_model_part "
                        "not written")
    return fqns


def _torchtitan_parallelism(rp: RowPlan, s: Settings, warnings: list[str]) -> list[tuple]:
    """(ParallelismConfig key, value) pairs of the plan."""
    p = rp.plan
    sets = [("tensor_parallel_degree", p.tp), ("enable_sequence_parallel", s.sequence_parallel and p.tp > 1),
            ("pipeline_parallel_degree", p.pp)]
    if p.pp > 1:
        sets += [("pipeline_parallel_schedule", "Interleaved1F1B" if s.virtual_stages > 1 else "1F1B"),
                 ("num_pp_microbatches", p.num_microbatches)]
    # FASOP's DP replicates the model and optimizer (DDP); ZeRO shards them (FSDP), HSDP over dp / replicas
    sharded = s.zero_stage >= 1
    sets += [("data_parallel_replicate_degree", s.dp_replicate if sharded else p.dp),
             ("data_parallel_shard_degree", p.dp // s.dp_replicate if sharded else 1)]
    sets += _context_and_experts(p, s, p.dp // s.dp_replicate if sharded else 1, warnings)
    if not sharded and p.cp > 1:
        warnings.append(f"ZeRO stage 0 with cp {p.cp}: torchtitan shards the states over the cp ranks (FSDP over "
                        "dp_shard x cp, distributed/fsdp.py): less memory than estimated, more all-gathers")
    if s.zero_stage == 2:  # FSDP2 keeping the gathered parameters from forward to backward: ZeRO-2-like
        sets.append(("fsdp_reshard_after_forward", "never"))
    if s.zero_stage == 1:
        warnings.append("ZeRO stage 1: torchtitan shards with FSDP (gradients and parameters too, less memory than "
                        "estimated, more all-gathers); written as data_parallel_shard_degree")
    return sets


def _context_and_experts(p, s, dp_shard: int, warnings: list[str]) -> list[tuple]:
    """context_parallel_degree and expert_parallel_degree (07_moe_cp_fsdp.md §2.7, §3.4): EP borrows
    its ranks from dp_shard x cp x tp (torchtitan's parallel_dims.py), so ep must divide that; ETP
    was removed at torchtitan's HEAD (#3167)."""
    sets = [("context_parallel_degree", p.cp)] if p.cp > 1 else []
    if p.cp > 1 and s.cp_comm != "all_gather":   # torchtitan @b5bcd76 decoder_sharding.set_gqa_inner_attention_local_map
        warnings.append(f"cp_comm {s.cp_comm}: torchtitan's context parallelism all-gathers K and V at the "
                        "attention and reduces their gradients (no ring, no all-to-all): it runs what fasop scores as "
                        "cp_comm all_gather, not this row's exchange; `fasop search --cp-comm all_gather` estimates it")
    if p.ep > 1:
        sets.append(("expert_parallel_degree", p.ep))
        if (dp_shard * p.cp * p.tp) % p.ep:
            warnings.append(f"torchtitan cannot express ep {p.ep}: it must divide data_parallel_shard_degree x "
                            f"cp x tp = {dp_shard * p.cp * p.tp} (EP borrows FSDP and TP ranks), and torchtitan refuses "
                            "the expert_parallel_degree written below at start (distributed/parallel_dims.py); shard "
                            "the states (--zero 1-3) or choose another plan")
    if p.etp > 1:
        warnings.append(f"torchtitan cannot express etp {p.etp}: expert tensor parallelism was removed at its HEAD "
                        "(#3167; v0.2.2 took expert_tensor_parallel_degree = 1 or tp); not written")
    return sets


def _flag(section: str, key: str, value: str) -> str:
    """One `--section.key value` override; a true switch bare (tyro's flags, as torchtitan's CI passes
    `--training.disable_cuda_graphs`); a false one is the default and left out by the caller."""
    return f"--{section}.{key}" if value == "True" else f"--{section}.{key} {value}"


def _py(value) -> str:
    if isinstance(value, str):
        return json.dumps(value)  # a Python string literal, quotes and backslashes escaped
    return str(value)
