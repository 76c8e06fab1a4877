"""Launch settings for a plan: Megatron-LM arguments, a torchtitan recipe, a node-rank table.

`fasop export` turns a results row (rowplan.RowPlan) into text a user pastes into a job script.
Sources (shared/reference/ecosystem/): Megatron-LM flags and `--pipeline-model-parallel-layout`
(Megatron-Core >= 0.13) from 01_megatron_lm.md §1.2-1.4; torchtitan's ParallelismConfig keys and
recipe style (after its config refactor #2386, key names as at its 2026-08 HEAD) from
02_torchtitan.md §2.1-2.4; the rank grid, TP fastest and PP slowest in both frameworks
(rank = t + tp*(d + dp*s)), from 01 §1.5 and 02 §2.2. With torchrun's static rendezvous node k
runs global ranks k*G .. k*G + G - 1, so writing the nodes in the plan's order puts every stage on
the nodes the plan chose.

Plan settings beyond the degrees (activation recompute, sequence parallelism, ZeRO / distributed
optimizer, virtual stages, precision) are read from the row's columns where it has them (the
analytic estimator's `recompute`, `sequence_parallel`, `zero`, `virtual_stages`, `precision`), else
they are FASOP's: its memory estimate keeps every activation, replicates optimizer state and
splits nothing along the sequence (docs/estimators.md §8).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

from fasop.core.cells import counted, one_line
from fasop.plans.rowplan import RowPlan
from fasop.specs.types import ModelSpec

TARGETS = ("megatron", "torchtitan", "hostfile")
RECOMPUTE = ("none", "selective", "full")
PRECISION_FLAGS = {"bf16": ["--bf16"], "fp16": ["--fp16"],
                   "fp8": ["--bf16", "--fp8-format hybrid", "--fp8-amax-history-len 1024", "--fp8-amax-compute-algo max"]}
"""Megatron-LM flags of each precision (arguments.py): fp8 = Transformer Engine FP8 matmuls (E4M3
forward, E5M2 gradients; delayed scaling, the default --fp8-recipe) inside bf16 training."""
MEGATRON_FSDP = {2: "optim_grads", 3: "optim_grads_params"}
"""ZeRO 2/3 -> Megatron-FSDP's --data-parallel-sharding-strategy; --use-distributed-optimizer is
ZeRO-1 only (its fp32 main-grad buffer stays whole: a ZeRO-2 plan would need full gradients)."""
MASTER_PORT = 29500


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


@dataclass(frozen=True)
class Export:
    text: str
    warnings: tuple[str, ...]


def settings_of(rp: RowPlan) -> Settings:
    """The row's settings columns, FASOP's defaults for those it lacks."""
    row = rp.row
    recompute = row.get("recompute") or "none"
    if recompute not in RECOMPUTE:
        recompute = "full" if recompute in ("True", "true") else recompute
    zero_cell = row.get("zero") or row.get("zero_stage") or ""
    zero = int(zero_cell) if zero_cell.isdigit() and len(zero_cell) < 3 else 0
    zero_needed = rp.flag("is_oom") is True and rp.flag("is_zero_oom") is False and zero == 0
    return Settings(recompute=recompute, sequence_parallel=bool(rp.flag("sequence_parallel")),
                    zero_stage=1 if zero_needed else zero, virtual_stages=rp.virtual_stages,
                    precision=row.get("precision") or None, zero_needed=zero_needed)


def export(rp: RowPlan, model: ModelSpec, target: str) -> Export:
    """The launch settings of the row's plan for `target`. Text from outside (the CSV's name and
    cells) is made one line first (cells.one_line): it only ever lands in comments and in
    quoted literals, never on a line of its own that a shell or Python would run."""
    rp = replace(rp, where=one_line(rp.where), row={k: one_line(v) if isinstance(v, str) else v for k, v in rp.row.items()})
    if target == "megatron":
        return megatron(rp, model)
    if target == "torchtitan":
        return torchtitan(rp, model)
    if target == "hostfile":
        return hostfile(rp)
    raise ValueError(f"unknown target {target!r}")


def _header(rp: RowPlan, model: ModelSpec, target: str) -> list[str]:
    p = rp.plan
    return [f"# fasop export --target {target}: {rp.where}",
            f"# {one_line(model.name)}: tp {p.tp}, dp {p.dp}, pp {p.pp}, micro-batch {p.mbs}, "
            f"{counted(p.num_microbatches, 'micro-batch')} per step, global batch {p.global_batch_size}; nodes in order {p.placement_name}",
            f"# layer-list entries per stage: {'-'.join(map(str, rp.partition))}"]


def _fit_warnings(rp: RowPlan, s: Settings) -> list[str]:
    if s.zero_needed:
        return ["the plan fits in GPU memory only with the optimizer state sharded over data parallelism "
                "(is_oom True, is_zero_oom False): the export shards it"]
    if rp.flag("is_oom") and (rp.flag("is_zero_oom") or rp.flag("is_zero_oom") is None):
        return ["the plan does not fit in GPU memory by the estimate (is_oom True): it will not run as exported"]
    return []


# ---------------------------------------------------------------------------- Megatron-LM
def megatron_layout(kinds: tuple[str, ...], partition: tuple[int, ...]) -> tuple[str | None, str]:
    """(layout string or None, why None) for `--pipeline-model-parallel-layout`: per stage `E` for
    the embedding, `t` per transformer layer (`t*n` for a run), `L` for the head (loss); stages
    joined by '|'. None when the layer list is not `embedding, transformer..., head` (the grammar
    has one E first, one L last and no encoder layers)."""
    allowed = ("embedding",) + ("transformer",) * (len(kinds) - 2) + ("head",)
    if kinds != allowed:
        found = sorted(set(kinds) - {"embedding", "transformer", "head"})
        why = (f"{' and '.join(found)} layers" if found else
               "a layer list that is not one embedding, transformer layers, one head")
        return None, why
    stages, start = [], 0
    for n in partition:
        part = kinds[start:start + n]
        t = part.count("transformer")
        text = ("E" if "embedding" in part else "") + ("t" if t == 1 else f"t*{t}" if t else "")
        stages.append(text + ("L" if "head" in part else ""))  # an empty stage: "" (the grammar allows it)
        start += n
    return "|".join(stages), ""


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


def transformer_counts(kinds: tuple[str, ...], partition: tuple[int, ...]) -> list[int]:
    """Transformer layers per stage."""
    out, start = [], 0
    for n in partition:
        out.append(sum(k != "embedding" and k != "head" for k in kinds[start:start + n]))
        start += n
    return out


def megatron(rp: RowPlan, model: ModelSpec) -> Export:
    p, s = rp.plan, settings_of(rp)
    warnings, notes = _fit_warnings(rp, s), []
    args = [f"--tensor-model-parallel-size {p.tp}", f"--pipeline-model-parallel-size {p.pp}",
            f"--micro-batch-size {p.mbs}", f"--global-batch-size {p.global_batch_size}"]
    args += _megatron_split(rp, model, s, warnings, notes)
    args += _megatron_settings(p.tp, s, warnings)
    if s.precision is None:
        notes.append("# 16-bit training as profiled: add --bf16 or --fp16")
    if not (s.recompute != "none" or s.sequence_parallel or s.zero_stage):
        notes.append("# as FASOP estimates: no activation recompute, no sequence parallelism, optimizer "
                     "state replicated over data parallelism")
    lines = _header(rp, model, "megatron") + [f"# warning: {w}" for w in warnings] + notes + ["MODEL_PARALLEL_ARGS=("]
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
    layout, why = megatron_layout(model.layer_kinds, partition)
    if layout is None:
        warnings.append(f"Megatron-LM cannot express this split: --pipeline-model-parallel-layout has no "
                        f"place for {why}; pass the stages' layers by hand (FASOP's Megatron fork: "
                        f"--balance {'-'.join(map(str, partition))}, layer-list entries per stage)")
        return []
    if even and len(partition) == pp and s.virtual_stages == 1:
        notes.append(f"# even split ({counts[0]} transformer layers a stage): Megatron's default, no layout")
        return []
    notes.append("# --pipeline-model-parallel-layout needs Megatron-Core >= 0.13; E = embedding, "
                 "t = transformer layer, L = head and loss, | between stages")
    if len(partition) == pp and len(set(counts[1:-1])) <= 1 and s.virtual_stages == 1:
        notes.append(f"# Megatron-Core < 0.13: --decoder-first-pipeline-num-layers {counts[0]} "
                     f"--decoder-last-pipeline-num-layers {counts[-1]} instead of the layout")
    return [f"--num-layers {sum(transformer_counts(model.layer_kinds, partition))}",
            f'--pipeline-model-parallel-layout "{layout}"']


def _megatron_settings(tp: int, s: Settings, warnings: list[str]) -> list[str]:
    args = []
    if s.recompute == "selective":
        args.append("--recompute-granularity selective")
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
        args += ["--use-megatron-fsdp", f"--data-parallel-sharding-strategy {MEGATRON_FSDP[s.zero_stage]}"]
    if s.precision is not None:
        if s.precision in PRECISION_FLAGS:
            args += PRECISION_FLAGS[s.precision]
        else:
            warnings.append(f"precision {s.precision!r}: no Megatron-LM flag known for it; none written")
    return args


# ---------------------------------------------------------------------------- torchtitan
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


def torchtitan(rp: RowPlan, model: ModelSpec) -> Export:
    p, s = rp.plan, settings_of(rp)
    warnings = _fit_warnings(rp, s)
    seq = model.sequence_length
    fqns, per_chunk = _torchtitan_split(rp, model, s, warnings)
    sets = _torchtitan_parallelism(rp, s, per_chunk, warnings)
    training = [("num_tokens_per_microbatch_per_dp_rank", p.mbs * seq, f"micro-batch {p.mbs} x sequence {seq}"),
                ("num_tokens_per_train_step", p.global_batch_size * seq,
                 f"global batch {p.global_batch_size} x sequence {seq}")]
    ac = AC_CONFIGS.get(s.recompute)
    if ac is None:
        warnings.append(f"recompute {s.recompute!r}: no torchtitan activation-checkpoint mode known; not written")
    lines = _header(rp, model, "torchtitan") + [f"# warning: {w}" for w in warnings]
    local = p.mbs * p.num_microbatches if p.pp > 1 else p.mbs  # one pipeline pass, or a step's accumulation
    lines += ["# torchtitan after its config refactor (#2386, 2026-02): a recipe function, run with",
              "#   torchrun ... -m torchtitan.train --module <your module> --config <your function>",
              f"# with NGPU = {p.num_gpus} and the nodes in the order of `fasop export --target hostfile`.",
              "# Key names as at torchtitan's 2026-08 HEAD; before #4121 (2026-08-20) the batch keys were",
              f"#   training.local_batch_size = {local}, training.global_batch_size = {p.global_batch_size}, "
              f"training.seq_len = {seq}" + (f", parallelism.pipeline_parallel_microbatch_size = {p.mbs}"
                                             if p.pp > 1 else ""),
              "#   (no num_pp_microbatches); before #2937 (2026-04) the head's module is `output`, not `lm_head`.",
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
    lines += _torchtitan_float8(s, warnings)
    lines += ["    return config", "", "",
              "# The same as --parallelism.* overrides (frozen but still honoured; enable_sequence_parallel,",
              "# module_fqns_per_model_part and activation_checkpoint only in the recipe):",
              " ".join(f"--parallelism.{key} {_py(value)}" for key, value in sets if not isinstance(value, bool)),
              " ".join(f"--training.{key} {value}" for key, value, _ in training)]
    return Export("\n".join(lines) + "\n", tuple(warnings))


def _torchtitan_float8(s: Settings, warnings: list[str]) -> list[str]:
    """fp8: torchao's Float8Linear through torchtitan's model converter (torchtitan's
    llama3_debugmodel_float8 recipe), compiled (float8 matmuls are fast only under torch.compile)."""
    if s.precision != "fp8":
        if s.precision not in (None, "bf16"):
            warnings.append(f"precision {s.precision!r}: torchtitan trains in bf16 (FSDP mixed precision); not written")
        return []
    return ["    from torchtitan.components.quantization.float8 import Float8LinearConverter",
            "    from torchtitan.protocols.model_converter import ModelConvertersContainer\n",
            "    config.model_converters = ModelConvertersContainer.Config(  # fp8 matmuls, bf16 elsewhere",
            "        converters=[Float8LinearConverter.Config(enable_fsdp_float8_all_gather=True,",
            "                                                 precompute_float8_dynamic_scale_for_fsdp=True)])",
            "    config.compile.enable = True  # float8 matmuls pay off only compiled"]


def _torchtitan_split(rp: RowPlan, model: ModelSpec, s: Settings, warnings: list[str]):
    """(module_fqns_per_model_part expressions or None, layers per virtual stage or None)."""
    partition = rp.partition
    if s.virtual_stages > 1 and len(partition) == rp.plan.pp:  # each rank's layers, not its chunks'
        counts = transformer_counts(model.layer_kinds, partition)
        if len(set(counts)) == 1 and counts[0] % s.virtual_stages == 0:
            return None, counts[0] // s.virtual_stages
        chunks = interleaved_partition(model.layer_kinds, partition, s.virtual_stages)
        if chunks is None:
            warnings.append(f"{s.virtual_stages} virtual stages: torchtitan's models are decoder-only, this model's "
                            "layer list is not; module_fqns_per_model_part not written")
            return None, None
        return torchtitan_fqns(model.layer_kinds, chunks), None  # v x pp parts, chunk k of rank r at k*pp+r
    if len(partition) == 1:
        return None, None
    fqns = torchtitan_fqns(model.layer_kinds, partition)
    if fqns is None:
        warnings.append("torchtitan cannot express this split: its models are decoder-only (tok_embeddings, "
                        "layers.i, norm, lm_head), this model's layer list is not; module_fqns_per_model_part "
                        "not written")
    return fqns, None


def _torchtitan_parallelism(rp: RowPlan, s: Settings, per_chunk: int | None, warnings: list[str]) -> list[tuple]:
    """(ParallelismConfig key, value) pairs of the plan."""
    p = rp.plan
    sets = [("tensor_parallel_degree", p.tp), ("enable_sequence_parallel", s.sequence_parallel and p.tp > 1),
            ("pipeline_parallel_degree", p.pp)]
    if p.pp > 1:
        sets += [("pipeline_parallel_schedule", "Interleaved1F1B" if s.virtual_stages > 1 else "1F1B"),
                 ("num_pp_microbatches", p.num_microbatches)]
    if per_chunk is not None:
        sets.append(("pipeline_parallel_layers_per_stage", per_chunk))
    # FASOP's DP replicates the model and optimizer (DDP); ZeRO shards them (FSDP)
    sharded = s.zero_stage >= 1
    sets += [("data_parallel_replicate_degree", 1 if sharded else p.dp),
             ("data_parallel_shard_degree", p.dp if sharded else 1)]
    if s.zero_stage == 2:  # FSDP2 keeping the gathered parameters from forward to backward: ZeRO-2-like
        sets.append(("fsdp_reshard_after_forward", "never"))
    if s.zero_stage == 1:
        warnings.append("ZeRO stage 1: torchtitan shards with FSDP (gradients and parameters too, less memory than "
                        "estimated, more all-gathers); written as data_parallel_shard_degree")
    return sets


def _py(value) -> str:
    if isinstance(value, str):
        return json.dumps(value)  # a Python string literal, quotes and backslashes escaped
    return str(value)


# ---------------------------------------------------------------------------- node-rank table
def node_table(rp: RowPlan) -> list[tuple[int, str, int, range, tuple[int, ...]]]:
    """(node rank, node type, GPUs, its global ranks, the pipeline stages on it) per node, in the
    plan's order: node k runs ranks k*G .. k*G+G-1 and rank r belongs to stage r // (tp*dp)."""
    p = rp.plan
    g, block = p.gpus_per_node, p.tp * p.dp
    return [(k, node.name, g, range(k * g, (k + 1) * g),
             tuple(sorted({r // block for r in range(k * g, (k + 1) * g)})))
            for k, node in enumerate(p.placement)]


def _span(values) -> str:
    values = list(values)
    return str(values[0]) if len(values) == 1 else f"{values[0]}-{values[-1]}"


def hostfile(rp: RowPlan, model: ModelSpec | None = None) -> Export:
    p = rp.plan
    table = node_table(rp)
    rows = [("node_rank", "node_type", "gpus", "global_ranks", "stages")]
    rows += [(str(k), name, str(g), _span(ranks), _span(stages)) for k, name, g, ranks, stages in table]
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = [f"# fasop export --target hostfile: {rp.where}",
             f"# tp {p.tp}, dp {p.dp}, pp {p.pp}: stage s runs global ranks s*{p.tp * p.dp} .. "
             f"s*{p.tp * p.dp}+{p.tp * p.dp - 1} (Megatron-LM's tp-dp-pp order and torchtitan's mesh:",
             "# tensor-parallel fastest, pipeline slowest). Start node k on a machine of its node_type; use",
             "# torchrun's static rendezvous (--node_rank), not --rdzv-backend c10d, which assigns node ranks itself."]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines += ["", "# one command per node (MASTER_ADDR: the host of node 0):"]
    for k, name, g, _, _ in table:
        lines.append(f"torchrun --nnodes {len(table)} --node_rank {k} --nproc_per_node {g} "
                     f"--master_addr $MASTER_ADDR --master_port {MASTER_PORT} $TRAIN_SCRIPT  # node {k}: {name}")
    return Export("\n".join(lines) + "\n", ())
