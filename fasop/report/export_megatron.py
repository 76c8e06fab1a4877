"""`fasop export --target megatron`: Megatron-LM arguments and the `--pipeline-model-parallel-layout`
string of a results row's plan.

Sources (shared/reference/ecosystem/): Megatron-LM flags and `--pipeline-model-parallel-layout`
(Megatron-Core >= 0.13) from 01_megatron_lm.md §1.2-1.4.
"""

from __future__ import annotations

import itertools

from fasop.estimators.analytic.moe_kernels import ep_overlap_refusal
from fasop.estimators.analytic.parallel import expert_data_parallel
from fasop.estimators.analytic.recipes import tp_overlap_refusal
from fasop.plans.rowplan import RowPlan
from fasop.report.export_graphs import megatron_graphs, scopes_of
from fasop.report.export_settings import (Export, Settings, fit_warnings, header, interleaved_partition, is_hybrid,
                                          settings_of, stage_slices, transformer_counts)
from fasop.specs.types import ModelSpec

PRECISION_FLAGS = {"bf16": ["--bf16"], "fp16": ["--fp16"],
                   "fp8": ["--bf16", "--fp8-format hybrid", "--fp8-amax-history-len 1024", "--fp8-amax-compute-algo max"],
                   "mxfp8": ["--bf16", "--fp8-format e4m3", "--fp8-recipe mxfp8"],
                   "nvfp4": ["--bf16", "--fp4-format e2m1", "--fp4-recipe nvfp4"]}
"""Megatron-LM flags of each precision (arguments.py; TransformerConfig fp8 / fp8_recipe / fp4 / fp4_recipe,
whose arg_names are --fp8-format and --fp4-format): fp8 = Transformer Engine FP8 matmuls (E4M3 forward,
E5M2 gradients; delayed scaling, the default --fp8-recipe) inside bf16 training; mxfp8 = E4M3 with 32-element
block scales on Blackwell (Megatron-Bridge's bf16_with_mxfp8_mixed: fp8 "e4m3", fp8_recipe "mxfp8"); nvfp4 =
E2M1 with NVFP4 block scaling (bf16_with_nvfp4_mixed: fp4 "e2m1", fp4_recipe "nvfp4")."""
DELAYED_REFUSES = {"moe_act", "layernorm"}
"""Recompute modules Megatron-Core refuses under FP8 delayed scaling (transformer_config.py: "Delayed
scaling does not support moe_act and layernorm recompute for fp8")."""
MEGATRON_FSDP = {2: "optim_grads", 3: "optim_grads_params"}
"""ZeRO 2/3 -> Megatron-FSDP's --data-parallel-sharding-strategy; --use-distributed-optimizer is
ZeRO-1 only (its fp32 main-grad buffer stays whole: a ZeRO-2 plan would need full gradients)."""


def megatron_parallel(p, model: ModelSpec, s: Settings, warnings: list[str]) -> list[str]:
    """Context and expert parallelism (07_moe_cp_fsdp.md §5.1): --context-parallel-size with the row's
    exchange, TE's p2p ring, a2a or all_gather (rowplan checked it; an empty cell is the ring), and for an MoE
    model its experts, EP / ETP and the MoE software the estimate costed (moe_software_args)."""
    arch = model.architecture
    args = [f"--context-parallel-size {p.cp}", f"--cp-comm-type {s.cp_comm}"] if p.cp > 1 else []
    moe = arch.moe if arch is not None else None
    if moe is None:
        return args
    args += [f"--num-experts {moe.num_experts}", f"--moe-router-topk {moe.experts_per_token}",
             f"--moe-ffn-hidden-size {moe.expert_ffn_hidden_size}"]
    if moe.shared_width:
        args.append(f"--moe-shared-expert-intermediate-size {moe.shared_width}")
    if moe.latent_size:   # TransformerConfig.moe_latent_size, an argument through arguments.py's ArgumentGroupFactory
        args.append(f"--moe-latent-size {moe.latent_size}")
    if moe.router_groups > 1:   # group-limited routing (TransformerConfig.moe_router_num_groups / _group_topk)
        args += [f"--moe-router-num-groups {moe.router_groups}", f"--moe-router-group-topk {moe.router_group_topk}"]
    freq = moe_layer_freq(arch.layer_kinds)
    if freq:  # None: a hybrid model, whose --hybrid-layer-pattern places the experts (hybrid_args)
        args.append(f'--moe-layer-freq "{freq}"')
    args += [f"--expert-model-parallel-size {p.ep}", f"--expert-tensor-parallel-size {p.etp}"]
    return args + moe_software_args(p, model, s, warnings)


def moe_software_args(p, model: ModelSpec, s: Settings, warnings: list[str]) -> list[str]:
    """The MoE software the estimate costed (the cluster's analytic constants, export Settings): the alltoall
    dispatcher's k copies, or flex's once per node (`moe_node_dedup`) as HybridEP runs it -- the flex backend that
    also spans a multi-node NVLink domain, on the SMs the estimate left it (catalog_clusters.FLEX_DISPATCHER_SMS),
    with the fp32 router Megatron-Bridge's HybridEP recipes set (its forward GEMM at the 16-bit rate, fasop's
    router cost unchanged); the fused permutation; and the EP A2A overlap where Megatron-Core runs it."""
    args = []
    if s.moe_flex and p.ep * p.etp > 1:
        args += ["--moe-token-dispatcher-type flex", "--moe-flex-dispatcher-backend hybridep",
                 "--moe-router-dtype fp32"]
        args += [f"--moe-flex-dispatcher-num-sms {s.moe_comm_sms}"] if s.moe_comm_sms else []
    else:
        args.append("--moe-token-dispatcher-type alltoall")
    args.append("--moe-grouped-gemm")
    if s.moe_permute_fusion:   # TransformerConfig.moe_permute_fusion (default False): the estimate's fused kernels
        args.append("--moe-permute-fusion")
    if s.ep_overlap and p.ep > 1:
        why = ep_overlap_refusal(pp=p.pp, virtual_stages=s.virtual_stages, recompute=s.recompute.split(":")[0],
                                 recompute_modules=tuple(recompute_modules(s.recompute)), mtp=s.mtp_layers,
                                 precision=s.precision or "bf16", graphed=tuple(scopes_of(s.cuda_graphs)),
                                 zero=s.zero_stage, hybrid=is_hybrid(model))
        if why:
            warnings.append(f"the cluster's analytic ep_overlap: Megatron-Core refuses --overlap-moe-expert-parallel-comm "
                            f"with {why}, and the estimate counted no overlap for it; not written")
        else:
            args.append("--overlap-moe-expert-parallel-comm")
    return args


def recompute_modules(recompute: str) -> list[str]:
    """The modules of a `selective:<module>,<module>` recompute cell, stripped ([] for another mode)."""
    listed = recompute[len("selective:"):].split(",") if recompute.startswith("selective:") else []
    return [m.strip() for m in listed if m.strip()]


def megatron_refusals(p, model: ModelSpec, s: Settings) -> list[str]:
    """What Megatron-Core refuses of an MoE plan (a plan given by hand; fasop's search leaves them
    out, analytic/recipes.py and groups.hsdp_flags): tensor parallelism without sequence parallelism (moe_layer.py raises in
    training), and HSDP whose replicas do not divide the experts' data-parallel group
    (parallel_state.py: expert data-parallel size % --num-distributed-optimizer-instances)."""
    arch = model.architecture
    if arch is None or arch.moe is None:
        return []
    out = []
    if p.tp > 1 and not s.sequence_parallel:
        out.append(f"Megatron-Core's MoE layer refuses tensor parallelism ({p.tp}) without sequence parallelism in "
                   "training: this plan does not run on Megatron-LM as estimated (add --sequence-parallel)")
    edp = expert_data_parallel(p.tp, p.cp, p.dp, p.ep, p.etp)   # plan_of_row checked that ep x etp divides
    if s.dp_replicate > 1 and edp % s.dp_replicate:
        out.append(f"--num-distributed-optimizer-instances {s.dp_replicate} does not divide the expert data-parallel "
                   f"group ({edp} = tp x cp x dp / (ep x etp)): Megatron-Core refuses it")
    return out


def moe_layer_freq(kinds: tuple[str, ...]) -> str | None:
    """--moe-layer-freq's list string (e.g. "([0]*3+[1]*58)"), '' when every layer is MoE (the
    default 1), None when a layer is neither dense nor MoE."""
    if not kinds or set(kinds) == {"moe"}:
        return ""
    if set(kinds) - {"dense", "moe"}:
        return None
    runs = ((bit, len(list(run))) for bit, run in itertools.groupby(int(k == "moe") for k in kinds))
    return "(" + "+".join(f"[{b}]*{n}" for b, n in runs) + ")"


HYBRID_SYMBOLS = {"mamba": "M", "attention": "*", "mlp": "-", "experts": "E", "dense": "*-", "moe": "*E"}
"""Megatron-Core's hybrid layer symbols (models/hybrid/hybrid_layer_allocation.py Symbols: M Mamba,
* attention, - MLP, E MoE; one Megatron layer each) of fasop's layer kinds; a whole Transformer
layer (dense, moe) is its attention and its MLP / experts, two Megatron layers."""
MEGATRON_MAMBA = {"conv_kernel": 4, "chunk_size": 128, "conv_bias": True, "proj_bias": False}
"""What Megatron-Core's MambaMixer fixes without a flag (ssm/mamba_mixer.py: d_conv=4,
chunk_size=128, conv_bias=True asserted, bias=False)."""


def hybrid_pattern(arch_kinds: tuple[str, ...], kinds: tuple[str, ...], partition: tuple[int, ...]) -> str:
    """`--hybrid-layer-pattern`: each transformer entry of the layer list (`kinds`, with the
    embedding and head) as the symbols of its architecture kind (`arch_kinds`, in order), '|'
    between the entries of `partition` (pipeline stages, or v x pp model chunks)."""
    symbols = iter(HYBRID_SYMBOLS[k] for k in arch_kinds)
    return "|".join("".join(next(symbols) for k in part if k not in ("embedding", "head"))
                    for part in stage_slices(kinds, partition))


def hybrid_args(rp: RowPlan, model: ModelSpec, s: Settings, warnings: list[str], notes: list[str]) -> list[str]:
    """A hybrid Mamba model's flags (Megatron-LM arguments.py, TransformerConfig): the layer pattern
    with the plan's split in it ('|' between stages or, interleaved, between the v x pp model
    chunks, from which Megatron derives the virtual stages; no --num-layers, no layout) and the
    Mamba-2 mixer's shape; a warning for what MambaMixer fixes otherwise than the model."""
    arch, partition, pp = model.architecture, rp.partition, rp.plan.pp
    if s.virtual_stages > 1 and len(partition) == pp:
        partition = interleaved_partition(model.layer_kinds, partition, s.virtual_stages) or partition
    m, pattern = arch.mamba, hybrid_pattern(arch.layer_kinds, model.layer_kinds, partition)
    if s.mtp_layers and arch.mtp_kinds:  # the MTP depths' block after '/' each (arguments.py: Symbols.MTP_SEPARATOR,
        pattern += ("/" + "".join(HYBRID_SYMBOLS[k] for k in arch.mtp_kinds)) * s.mtp_layers  # 'M*M*/MM/MM')
    args = [f'--hybrid-layer-pattern "{pattern}"']
    if m is not None:
        args += [f"--mamba-num-heads {m.num_heads}", f"--mamba-head-dim {m.head_dim}",
                 f"--mamba-state-dim {m.state_size}", f"--mamba-num-groups {m.groups}"]
        odd = [f"{k} {getattr(m, k)} (Megatron: {v})" for k, v in MEGATRON_MAMBA.items() if getattr(m, k) != v]
        if odd:
            warnings.append(f"Megatron-Core's MambaMixer has no flag for the model's {', '.join(odd)}: "
                            "it trains another mixer than the one estimated")
    notes.append("# a hybrid model: run pretrain_hybrid.py; the pattern gives the layers (M Mamba, * attention, "
                 "- MLP, E MoE) and '|' each pipeline stage's (Megatron-LM before --hybrid-layer-pattern: "
                 "--hybrid-override-pattern without '|', an even split only)")
    return args


def megatron_layout(kinds: tuple[str, ...], partition: tuple[int, ...], mtp: int = 0) -> tuple[str | None, str]:
    """(layout string or None, why None) for `--pipeline-model-parallel-layout`: per stage `E` for
    the embedding, `t` per transformer layer (`t*n` for a run), `m` per multi-token-prediction depth
    (`mtp`, on the last stage: the grammar wants as many as --mtp-num-layers, after every `t`), `L`
    for the head (loss); stages joined by '|'. None when the layer list is not `embedding,
    transformer..., head` (the grammar has one E first, one L last and no encoder layers)."""
    allowed = ("embedding",) + ("transformer",) * (len(kinds) - 2) + ("head",)
    if kinds != allowed:
        found = sorted(set(kinds) - {"embedding", "transformer", "head"})
        why = (f"{' and '.join(found)} layers" if found else
               "a layer list that is not one embedding, transformer layers, one head")
        return None, why
    stages = []
    for part in stage_slices(kinds, partition):
        t = part.count("transformer")
        text = ("E" if "embedding" in part else "") + ("t" if t == 1 else f"t*{t}" if t else "")
        stages.append(text + ("m" * mtp + "L" if "head" in part else ""))  # an empty stage: "" (the grammar allows it)
    return "|".join(stages), ""



def megatron(rp: RowPlan, model: ModelSpec, params=None) -> Export:
    p, s = rp.plan, settings_of(rp, params)
    warnings, notes = fit_warnings(rp, s), []
    args = [f"--tensor-model-parallel-size {p.tp}", f"--pipeline-model-parallel-size {p.pp}",
            f"--micro-batch-size {p.mbs}", f"--global-batch-size {p.global_batch_size}",
            f"--seq-length {model.sequence_length}"]  # the estimate's tokens per sequence (--seq-len)
    args += megatron_parallel(p, model, s, warnings)
    split = hybrid_args if is_hybrid(model) else _megatron_split
    args += split(rp, model, s, warnings, notes)
    args += _megatron_settings(p.tp, s, warnings)
    if s.mtp_layers:  # TransformerConfig.mtp_num_layers: the depths on the last stage (cost.mtp_s)
        args.append(f"--mtp-num-layers {s.mtp_layers}")
    if s.offload_layers:  # TransformerConfig.cpu_offloading_num_layers; arguments.py sets cpu_offloading from it
        args.append(f"--cpu-offloading-num-layers {s.offload_layers}")
    args += megatron_graphs(model, s, warnings)
    args += _megatron_cluster_software(p, model, s, warnings)
    warnings += megatron_refusals(p, model, s)
    if s.zero_stage in MEGATRON_FSDP:
        notes.append("# Megatron-FSDP: leave CUDA_DEVICE_MAX_CONNECTIONS unset or above 1 (arguments.py asserts it)")
    if "--tp-comm-overlap" in args:   # Megatron-Bridge ships tuned userbuffers configs per model shape
        notes.append("# TP overlap: Transformer Engine built with userbuffers; without --tp-comm-overlap-cfg its "
                     "untuned defaults run")
    if "--moe-flex-dispatcher-backend hybridep" in args:   # fused_a2a.py imports it; HybridEP is DeepEP's hybrid-ep branch
        notes.append("# HybridEP: install DeepEP's hybrid-ep build (Megatron-Core's fused_a2a.py imports it)")
    if "--overlap-moe-expert-parallel-comm" in args:   # transformer_config.py; arguments.py warns on tp / cp with it
        notes.append("# EP overlap: torch >= 2.6 (transformer_config.py asserts it); with tp or cp > 1 on Hopper, "
                     "CUDA_DEVICE_MAX_CONNECTIONS=1 serialises its streams (arguments.py warns)")
    if s.precision is None:
        notes.append("# 16-bit training as profiled: add --bf16 or --fp16")
    if not (s.recompute != "none" or s.sequence_parallel or s.zero_stage):
        notes.append("# as FASOP estimates: no activation recompute, no sequence parallelism, optimizer "
                     "state replicated over data parallelism")
    lines = header(rp, model, "megatron") + [f"# warning: {w}" for w in warnings] + notes + ["MODEL_PARALLEL_ARGS=("]
    lines += [f"    {a}" for a in args] + [")"]
    return Export("\n".join(lines) + "\n", tuple(warnings))


def _megatron_split(rp: RowPlan, model: ModelSpec, s: Settings, warnings: list[str], notes: list[str]) -> list[str]:
    """The flags of the layer split: none for Megatron's even default, else the layout string
    (a stage per entry of the partition: per rank, or per model chunk with virtual stages)."""
    pp, partition = rp.plan.pp, rp.partition
    counts = transformer_counts(model.layer_kinds, partition)
    even = len(set(counts)) == 1
    if s.virtual_stages > 1 and len(partition) == pp:  # the row gives each rank's layers, not its chunks'
        if even and counts[0] % s.virtual_stages == 0:
            return [f"--num-virtual-stages-per-pipeline-rank {s.virtual_stages}"]
        chunks = interleaved_partition(model.layer_kinds, partition, s.virtual_stages)
        if chunks is not None:
            notes.append(f"# interleaved: {s.virtual_stages} x {pp} model chunks in the layout (chunk k of rank r "
                         f"is stage k*{pp}+r; Megatron derives --num-virtual-stages-per-pipeline-rank from it)")
            partition = chunks
    if len(partition) == 1:
        return []
    layout, why = megatron_layout(model.layer_kinds, partition, s.mtp_layers)
    if layout is None:
        warnings.append(f"Megatron-LM cannot express this split: --pipeline-model-parallel-layout has no "
                        f"place for {why}; pass the stages' layers by hand (FASOP's Megatron fork: "
                        f"--balance {'-'.join(map(str, partition))}, layer-list entries per stage)")
        return []
    if even and len(partition) == pp and s.virtual_stages == 1:
        notes.append(f"# even split ({counts[0]} transformer layers a stage): Megatron's default, no layout")
        return []
    notes.append("# --pipeline-model-parallel-layout needs Megatron-Core >= 0.13; E = embedding, "
                 "t = transformer layer, " + ("m = multi-token prediction, " if s.mtp_layers else "")
                 + "L = head and loss, | between stages")
    if len(partition) == pp and len(set(counts[1:-1])) <= 1 and s.virtual_stages == 1:
        notes.append(f"# Megatron-Core < 0.13: --decoder-first-pipeline-num-layers {counts[0]} "
                     f"--decoder-last-pipeline-num-layers {counts[-1]} instead of the layout")
    return [f"--num-layers {sum(transformer_counts(model.layer_kinds, partition))}",
            f'--pipeline-model-parallel-layout "{layout}"']


def _megatron_cluster_software(p, model: ModelSpec, s: Settings, warnings: list[str]) -> list[str]:
    """What the cluster's analytic constants made the estimate assume beyond Megatron-Core's defaults. The
    communication it hid: the data-parallel reduction during
    the backward (--overlap-grad-reduce; Megatron-Core's DistributedDataParallelConfig default is off) and, with
    the distributed optimizer or Megatron-FSDP, the weights' all-gather during the next forward
    (--overlap-param-gather, which arguments.py allows only with both) -- where the plan reduces over more than one
    rank, dense or expert; and the TP collectives behind the matmuls (--tp-comm-overlap: with sequence parallelism,
    outside NVFP4 runs, as cost.tp_collectives_s counts it).
    The kernels it costed where a cluster turns them off: the weight-gradient GEMMs' separate accumulation
    (--no-gradient-accumulation-fusion), attention without a fused kernel (--attention-backend unfused)."""
    args = [] if s.gradient_accumulation_fusion else ["--no-gradient-accumulation-fusion"]
    args += [] if s.fused_attention else ["--attention-backend unfused"]
    moe = model.architecture is not None and model.architecture.moe is not None
    reduces = p.dp * p.cp > 1 or (moe and expert_data_parallel(p.tp, p.cp, p.dp, p.ep, p.etp) > 1)
    if s.overlap_grad_reduce and reduces:
        args.append("--overlap-grad-reduce")
        if s.zero_stage >= 1:
            args.append("--overlap-param-gather")
    elif reduces and s.zero_stage in MEGATRON_FSDP:   # megatron_fsdp.py sets both for optim_grads(_params)
        warnings.append("the cluster's analytic overlap_grad_reduce is off, so the estimate reduces after the backward; "
                        "Megatron-FSDP overlaps the reduction regardless (faster than estimated)")
    if s.tp_overlap > 0 and p.tp > 1:
        why = tp_overlap_refusal(s.sequence_parallel, s.precision)
        if why:
            warnings.append(f"the cluster's analytic tp_overlap {s.tp_overlap:g}: Megatron-LM cannot overlap the TP "
                            f"collectives {why}, and the estimate counted none; --tp-comm-overlap not written")
        else:
            args.append("--tp-comm-overlap")
    return args


def _megatron_settings(tp: int, s: Settings, warnings: list[str]) -> list[str]:
    args = []
    if s.recompute == "selective":
        args.append("--recompute-granularity selective")
    elif s.recompute.startswith("selective:"):  # Megatron-Core's module list (analytic/modules.py costs each)
        args += ["--recompute-granularity selective", "--recompute-modules " + " ".join(recompute_modules(s.recompute))]
    elif s.recompute == "full" and s.recompute_layers:   # the first N layers of each chunk (block_recompute.py)
        args += ["--recompute-granularity full", "--recompute-method block", f"--recompute-num-layers {s.recompute_layers}"]
    elif s.recompute == "full":
        args += ["--recompute-granularity full", "--recompute-method uniform", "--recompute-num-layers 1"]
    elif s.recompute != "none":
        warnings.append(f"recompute {s.recompute!r}: no Megatron-LM flag known for it; none written")
    if s.sequence_parallel:
        if tp > 1:
            args.append("--sequence-parallel")
        else:
            warnings.append("sequence parallelism needs tp > 1: Megatron-LM turns it off at tp 1; not written")
    if s.zero_stage == 1:  # shards the fp32 main params and Adam state; the main-grad buffer stays full
        args.append("--use-distributed-optimizer")
    elif s.zero_stage in MEGATRON_FSDP:  # gradients (and weights) sharded: Megatron-FSDP, Megatron-Core >= 0.12
        # arguments.py asserts the fsdp_dtensor checkpoint format under Megatron-FSDP; its gradient buffer's dtype
        # is --megatron-fsdp-main-grads-dtype (default auto: the parameters', bf16), not --grad-reduce-in-bf16
        args += ["--use-megatron-fsdp", f"--data-parallel-sharding-strategy {MEGATRON_FSDP[s.zero_stage]}",
                 "--ckpt-format fsdp_dtensor", f"--megatron-fsdp-main-grads-dtype {s.main_grads}"]
    if s.dp_replicate > 1:  # HSDP: R instances of the sharded states, each over (dp x cp) / R ranks (outer: no_shard)
        args.append(f"--num-distributed-optimizer-instances {s.dp_replicate}")
    if s.precision is not None:
        if s.precision == "fp8" and (s.bf16_layers or DELAYED_REFUSES & set(recompute_modules(s.recompute))):
            # Megatron-Core refuses delayed scaling with first / last layers in BF16 and with moe_act or
            # layernorm recompute (transformer_config.py): per-tensor current scaling, the same FP8 matmuls
            args += ["--bf16", "--fp8-format hybrid", "--fp8-recipe tensorwise"]
        elif s.precision in PRECISION_FLAGS:
            args += PRECISION_FLAGS[s.precision]
        else:
            warnings.append(f"precision {s.precision!r}: no Megatron-LM flag known for it; none written")
    if s.bf16_layers:  # TransformerConfig first_last_layers_bf16 with the last N layers (none at the start)
        args += ["--first-last-layers-bf16", "--num-layers-at-start-in-bf16 0", f"--num-layers-at-end-in-bf16 {s.bf16_layers}"]
    if s.main_grads == "bf16" and s.zero_stage not in MEGATRON_FSDP:  # the gradient buffer and its reduce-scatter in bf16 (default: fp32 with --bf16)
        args.append("--grad-reduce-in-bf16")
    if s.optimizer_states == "bf16" and s.zero_stage == 0:  # megatron/core/optimizer/__init__.py raises then
        warnings.append("optimizer_states bf16: Megatron-LM's precision-aware optimizer runs only with the distributed "
                        "optimizer (ZeRO >= 1); not written (fp32 moments: 4 bytes a parameter more than estimated)")
    elif s.optimizer_states == "bf16":  # Transformer Engine's FusedAdam keeping both moments in bf16
        args += ["--use-precision-aware-optimizer", "--exp-avg-dtype bf16", "--exp-avg-sq-dtype bf16"]
    return args

