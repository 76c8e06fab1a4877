"""Search flags of the analytic estimator's recipe: --recompute, --zero, --sequence-parallel,
--virtual-stages, --precision, --hsdp, --main-grads, --optimizer-states, --cuda-graphs. Each takes the values a user
allows, comma-separated; the estimator scores every allowed combination per plan and keeps the
fastest that fits (the CSV's columns of the same names say which) -- except --main-grads,
--optimizer-states and --cuda-graphs: one setting for every plan (--cuda-graphs' comma list is the
set of modules captured, not alternatives). Absent flags: the estimator's defaults
(estimators/analytic.py DEFAULTS). Refused on clusters whose estimator takes no recipe.

And the plan degrees beyond FASOP's tp, dp, pp: --cp, --ep, --etp, comma-separated degrees that
are all enumerated (plans/space.py: defaults from the model, checked against it; docs/search.md).
"""

from __future__ import annotations

import argparse
import importlib

from fasop.core.errors import FasopError
from fasop.plans.space import sp_splits

FLAGS = ("recompute", "zero", "sequence_parallel", "virtual_stages", "precision", "hsdp", "main_grads", "optimizer_states",
         "mtp_layers", "cuda_graphs", "offload_layers", "recompute_layers", "bf16_layers", "cp_comm", "cp", "ep", "etp")


def _choices(name: str):
    """A parser of comma-separated values from fasop.estimators.analytic.layers.`name` (imported when a
    value is given: a search without recipe flags does not import the analytic model)."""
    def parse(text: str) -> tuple[str, ...]:
        allowed = getattr(importlib.import_module("fasop.estimators.analytic.layers"), name)
        values = tuple(v.strip().lower() for v in text.split(","))
        bad = [v for v in values if v not in allowed]
        if bad:
            raise argparse.ArgumentTypeError(f"expected values from {', '.join(allowed)}, got {bad[0]!r}")
        return values
    return parse


def _recomputes(text: str) -> tuple[str, ...]:
    """--recompute's values: none, selective, full, and Megatron-LM's `selective:<module>,<module>`
    (its --recompute-modules names): a module name after a `selective:` value belongs to it, so
    `none,selective:moe_act,layernorm,full` is three values."""
    from fasop.estimators.analytic.layers import RECOMPUTES
    from fasop.estimators.analytic.modules import MODULES, recompute_text, split_recompute

    values: list[str] = []
    for v in (v.strip().lower() for v in text.split(",")):
        if v in MODULES and values and values[-1].startswith("selective:"):
            values[-1] += "," + v
        elif v in RECOMPUTES or v.startswith("selective:"):
            values.append(v)
        else:
            raise argparse.ArgumentTypeError(f"expected values from {', '.join(RECOMPUTES)} or selective:<modules> "
                                             f"({', '.join(MODULES)}), got {v[:40]!r}")
    try:
        return tuple(dict.fromkeys(recompute_text(*split_recompute(v)[::-1]) for v in values))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _comms(text: str) -> tuple[str, ...]:
    """--cp-comm's values: p2p, a2a, all_gather (plans/space.py CP_COMMS)."""
    from fasop.plans.space import CP_COMMS

    values = tuple(dict.fromkeys(v.strip().lower() for v in text.split(",")))
    bad = [v for v in values if v not in CP_COMMS]
    if bad:
        raise argparse.ArgumentTypeError(f"expected values from {', '.join(CP_COMMS)}, got {bad[0][:40]!r}")
    return values


def _dtype(text: str) -> tuple[str]:
    value = text.strip().lower()
    if value not in ("fp32", "bf16"):
        raise argparse.ArgumentTypeError(f"expected fp32 or bf16 (one dtype for every plan), got {text[:40]!r}")
    return (value,)


def _graphs(text: str) -> tuple[str]:
    """--cuda-graphs' one setting, in the CSV's spelling (specs/host_ops.search_scopes)."""
    from fasop.specs.host_ops import scope_text, search_scopes

    scopes, why = search_scopes(text)
    if why:
        raise argparse.ArgumentTypeError(why)
    return (scope_text(scopes),)


def _ints(low: int, high: int):
    def parse(text: str) -> tuple[int, ...]:
        try:
            values = tuple(int(v) for v in text.split(","))
        except ValueError:
            values = ()
        if not values or any(not low <= v <= high for v in values):
            raise argparse.ArgumentTypeError(f"expected integers from {low} to {high}, comma-separated, got {text!r}")
        return values
    return parse


def _switch(text: str) -> tuple[bool, ...]:
    names = {"on": True, "off": False, "1": True, "0": False, "true": True, "false": False}
    values = [names.get(v.strip().lower()) for v in text.split(",")]
    if None in values:
        raise argparse.ArgumentTypeError(f"expected on, off or on,off, got {text!r}")
    return tuple(values)


def add_flags(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("training recipe (clusters with estimator: analytic; comma-separated values "
                                  "are all tried, the fastest that fits is kept per plan)")
    g.add_argument("--recompute", type=_recomputes, metavar="MODE[,MODE]",
                   help="activation recomputation: none, selective, full, or selective:<modules> (Megatron-LM's "
                   "--recompute-modules names, e.g. selective:moe_act,layernorm; each module's own cost and saved "
                   "memory) (default none,full)")
    g.add_argument("--zero", type=_ints(0, 3), metavar="STAGE[,STAGE]",
                   help="ZeRO stage: 0, 1 = sharded optimizer (default), 2 = + gradients, 3 = + weights")
    g.add_argument("--sequence-parallel", type=_switch, metavar="on|off|on,off",
                   help="Megatron sequence parallelism with tp > 1 (default on)")
    g.add_argument("--virtual-stages", type=_ints(1, 64), metavar="V[,V]",
                   help="model chunks per pipeline rank, interleaved 1F1B (default 1)")
    g.add_argument("--precision", type=_choices("PRECISIONS"), metavar="P[,P]",
                   help="matmul precision: bf16 (default), fp16, fp8, fp32, tf32; mxfp8 and nvfp4 on Blackwell")
    g.add_argument("--hsdp", type=_switch, metavar="on|off|on,off",
                   help="hybrid sharding: the ZeRO / FSDP states sharded over the data-parallel ranks of one node, "
                        "replicated across nodes (torchtitan's HSDP; default off: sharded over all of them, but FSDP "
                        "(--zero 3) is also tried as HSDP)")
    g.add_argument("--main-grads", type=_dtype, metavar="fp32|bf16",
                   help="dtype of the gradient buffer and its data-parallel reduction (default fp32; bf16: Megatron-LM "
                        "--grad-reduce-in-bf16, as Megatron-Bridge's performance recipes); one value for every plan")
    g.add_argument("--optimizer-states", type=_dtype, metavar="fp32|bf16",
                   help="dtype of Adam's two moments (default fp32; bf16: Megatron-LM's precision-aware optimizer, "
                        "--exp-avg-dtype / --exp-avg-sq-dtype bf16, as DeepSeek-V3 trained); one value for every plan")
    g.add_argument("--mtp-layers", type=_ints(0, 64), metavar="N",
                   help="multi-token-prediction depths trained on the last stage (default 0: the main model only; "
                        "DeepSeek-V3 pretrained with 1; Megatron-LM --mtp-num-layers); one value for every plan")
    g.add_argument("--cuda-graphs", type=_graphs, metavar="none|full_iteration|MODULE[,MODULE]",
                   help="what the run captures in CUDA graphs, one setting for every plan (default none: eager): "
                        "full_iteration (the whole forward-backward, Megatron-LM --cuda-graph-impl full_iteration) "
                        "or the per-layer modules captured together (Megatron-LM --cuda-graph-modules: attn, mlp, moe, "
                        "moe_router, moe_preprocess, mamba); a captured module issues no kernel from the host "
                        "(docs/estimators.md, \"Host issue time\")")
    g.add_argument("--recompute-layers", type=_ints(1, 1024), metavar="N[,N]",
                   help="full recompute also of only N layers of each model chunk (Megatron-LM --recompute-method "
                        "block --recompute-num-layers N), tried beside every layer's (default: every layer)")
    g.add_argument("--offload-layers", type=_ints(0, 1024), metavar="N[,N]",
                   help="layers whose activations wait in host memory between forward and backward (Megatron-Core "
                        "--cpu-offloading-num-layers; default 0): tried on one-stage plans without recompute, as "
                        "Megatron-Core allows, the host copies overlapped with compute at the GPU's host link "
                        "(NVLink-C2C on GB200 / GB300, else PCIe)")
    g.add_argument("--bf16-layers", type=_ints(0, 1024), metavar="N[,N]",
                   help="with --precision fp8 / mxfp8 / nvfp4: the model's last N layers keep 16-bit matmuls "
                        "(Megatron-Core --first-last-layers-bf16 --num-layers-at-end-in-bf16 N; default 0), at most "
                        "a pipeline stage's layers, as Megatron-Core allows")
    d = parser.add_argument_group("plan degrees beyond tp, dp, pp (clusters with estimator: analytic; every value is "
                                  "enumerated; docs/search.md)")
    d.add_argument("--cp", type=_ints(1, 1024), metavar="C[,C]",
                   help="context-parallel degrees (default 1; from a 16K-token sequence also the powers of two "
                        "leaving each rank >= 4K tokens; 1 only on a job without fused attention: GPUs below sm80)")
    d.add_argument("--cp-comm", type=_comms, metavar="p2p|a2a|all_gather[,...]",
                   help="context parallelism's exchange with cp > 1 (Megatron-LM --cp-comm-type): p2p, the ring of K/V "
                        "overlapped with attention; a2a, Ulysses' all-to-alls of Q, K, V and the context, where the heads "
                        "a TP rank holds divide by cp; all_gather, K and V gathered whole, none hidden (default: each the "
                        "model's attention allows, all_gather only where the ring is refused; sliding windows: a2a or "
                        "all_gather; attention sinks: a2a only)")
    d.add_argument("--ep", type=_ints(1, 1024), metavar="E[,E]",
                   help="expert-parallel degrees (default: every divisor of an MoE model's expert count; 1 for dense)")
    d.add_argument("--etp", type=_ints(1, 64), metavar="T[,T]", help="expert tensor-parallel degrees (default 1)")


def options(args: argparse.Namespace, cluster, model=None) -> dict:
    """The recipe options given, for the estimator; refused where the cluster's estimator takes none.
    An MoE `model`'s --sequence-parallel off is on (moe_sp_note): its tp 1 plans have none anyway."""
    given = {k: getattr(args, k) for k in FLAGS if getattr(args, k, None) is not None}
    if given and cluster.analytic is None:
        flag = "--" + next(iter(given)).replace("_", "-")
        raise FasopError(f"{flag}: the {cluster.estimator} estimator of {cluster.path} takes no training recipe "
                         "(use a cluster with estimator: analytic, e.g. --cluster aws)")
    if moe_sp_note(args, model):
        given["sequence_parallel"] = (True,)
    return given


def moe_sp_note(args: argparse.Namespace, model) -> list[str]:
    """The note when --sequence-parallel off is given for an MoE model, whose plans with tp > 1 keep it."""
    arch = getattr(model, "architecture", None)
    if arch is None or arch.moe is None or getattr(args, "sequence_parallel", None) != (False,):
        return []
    return [f"note: --sequence-parallel off: {model.name}'s plans with tp > 1 keep sequence parallelism "
            "(Megatron-Core's MoE layer refuses tensor parallelism without it, moe_layer.py)"]


def moe_notes(args: argparse.Namespace, model, nodes) -> list[str]:
    """An MoE model's notes on what its plans keep or leave out (`nodes`: the node types searched)."""
    return moe_sp_note(args, model) + moe_hsdp_note(args, model) + \
        moe_sequence_note(model, max(n.gpus_per_node for n in nodes))


def moe_sequence_note(model, gpus_per_node: int = 8) -> list[str]:
    """The note when an MoE model's sequence leaves out some tp: its layers need sequence parallelism at tp > 1,
    which scatters a rank's tokens over tp (plans/space.sp_splits; at cp 1, the tp dividing the node's GPUs)."""
    arch = getattr(model, "architecture", None)
    seq = model.sequence_length
    out = [t for t in (2, 4, 8, 16, 32, 64, 72) if t <= gpus_per_node and not gpus_per_node % t and not sp_splits(seq, t)]
    if arch is None or arch.moe is None or not out:
        return []
    return [f"note: {model.name} at {seq:,} tokens a sequence: tp {', '.join(map(str, out))} left out -- its MoE layers "
            "need sequence parallelism at tp > 1, which scatters a rank's tokens over tp (Megatron-Core needs them "
            "divisible by tp)"]


def moe_hsdp_note(args: argparse.Namespace, model) -> list[str]:
    """The note when --hsdp on is given for an MoE model: where its replicas do not divide the experts'
    data-parallel group, a plan shards over all its dp ranks instead (recipes.recipe_grid)."""
    arch = getattr(model, "architecture", None)
    if arch is None or arch.moe is None or True not in (getattr(args, "hsdp", None) or ()):
        return []
    return [f"note: --hsdp on: {model.name}'s plans use HSDP only where ep x etp divides tp x cp x the shard group "
            "(Megatron-Core: expert data-parallel size % num_distributed_optimizer_instances == 0; torchtitan: ep divides "
            "dp_shard x cp x tp); the others shard over all their dp ranks (dp_replicate 1)"]


DEGREE_COLUMNS = ("cp", "ep", "etp", "dp_replicate")
"""The CSV columns of a plan's degrees beyond tp, dp, pp (and HSDP's replicas): rows that differ in
them are different plans."""


def shown_degrees(rows: list[dict]) -> list[str]:
    """The columns of cp, ep, etp that some row has at a degree other than 1, printed after tp; with cp, its
    exchange `cp_comm` (p2p / a2a / all_gather; '-' on a row without CP)."""
    shown = [c for c in ("cp", "ep", "etp") if any(str(r.get(c, 1)) not in ("1", "") for r in rows)]
    return shown[:1] + ["cp_comm"] + shown[1:] if shown[:1] == ["cp"] else shown


def misfit_line(result) -> str:
    """'not fitting: 12 weights, 30 activations, 2 both' for a search result, or ''."""
    if not result.misfits:
        return ""
    return "not fitting in memory, by what alone exceeds it: " + ", ".join(f"{n:,} {why}" for why, n in result.misfits)


BF16_STATES = {"main_grads": ("bf16",), "optimizer_states": ("bf16",)}
BF16_STATES_NOTE = ("note: fp32 gradients and Adam moments exceed all the GPUs' memory: planned with bf16 ones (the columns "
                    "main_grads, optimizer_states; Megatron-LM --grad-reduce-in-bf16 and its precision-aware optimizer, "
                    "as DeepSeek-V3 trained); --main-grads fp32 --optimizer-states fp32 to keep fp32")
"""What `fasop search` plans with when the weights, fp32 gradients and fp32 Adam states alone exceed all
the GPUs' memory (no recipe or sharding can fit them) and neither --main-grads nor --optimizer-states
is given (6 bytes a parameter less), and the note it prints then."""

ALTERNATIVES = ({"recompute": ("full",)}, {"recompute": ("full",), "zero": (3,)},
                {"recompute": ("full",), "zero": (3,), "precision": ("fp8",)},
                {"main_grads": ("bf16",), "optimizer_states": ("bf16",)},
                {"recompute": ("full",), "zero": (3,), "main_grads": ("bf16",), "optimizer_states": ("bf16",)})
"""What `no_fit_hint` tries, in order, when no plan fits with the recipe allowed: each saves memory
over the one before (full recompute keeps one input a layer; ZeRO-3 shards the weights too; fp8
halves the matmul inputs kept); last bf16 gradients and Adam moments (6 bytes a parameter less: a
numerics change, so only when nothing else fits), with the recipe allowed, then with the two above."""


def _described(options: dict) -> str:
    from fasop.estimators.analytic.estimator import DEFAULTS

    def text(v) -> str:
        return {True: "on", False: "off"}.get(v, str(v)) if isinstance(v, bool) else str(v)

    allowed = DEFAULTS | options
    return ", ".join(f"{k.replace('_', ' ')} {','.join(map(text, allowed[k]))}" for k in ("recompute", "zero"))


def no_fit_hint(options: dict, search_with, counted: tuple[str, str] = ("", "")) -> str:
    """When no plan fits: the first of ALTERNATIVES (over the recipe allowed, `options`) with which
    some plan fits, as `no plan fits with recompute none,full, zero 1; 37 fit with --recompute full
    --zero 3 (fastest 702.01 s a step)`; '' when none does. `search_with(options)` searches again and
    returns the fitting rows' step times (at most the search's --top); `counted` names what they
    count when not plans, singular and plural (("composition", "compositions"): `2 compositions fit with ...`)."""
    for alternative in ALTERNATIVES:
        tried = options | alternative
        if all(set(v) <= set(options.get(k, ())) for k, v in alternative.items()):
            continue  # already allowed
        try:
            times = search_with(tried)
        except FasopError:  # e.g. fp8 on a GPU without FP8 units
            continue
        if times:
            noun = counted[len(times) != 1]
            counted_text = f"{len(times):,} {noun} fits" if noun and len(times) == 1 else \
                f"{len(times):,} {noun + ' ' if noun else ''}fit"
            flags = " ".join(f"--{k.replace('_', '-')} {','.join(map(str, v))}" for k, v in alternative.items())
            return (f"no plan fits with {_described(options)}; {counted_text} with {flags} "
                    f"(fastest {min(times):,.2f} s a step)")
    return ""


def precision_note(args: argparse.Namespace, cluster, inventory) -> list[str]:
    """Without --precision on GPUs that have no BF16 (V100, T4, ...): the fp16 the search used instead."""
    if cluster.estimator != "analytic" or getattr(args, "precision", None):
        return []
    from fasop.estimators.analytic.recipes import lacking
    from fasop.specs.catalog import find_gpu

    missing = lacking({find_gpu(gpu, cluster.path) for gpu in {n.gpu for n in inventory}}, "bf16")
    if not missing:
        return []
    verb = "has" if len(missing) == 1 else "have"
    return [f"note: precision fp16 with loss scaling: {', '.join(missing)} {verb} no BF16 (--precision to change)"]


def cp_note(args: argparse.Namespace, cluster, inventory, model) -> list[str]:
    """Where the search's CP degrees (--cp, or the long-sequence default) exceed 1 but the job has no fused attention
    (GPUs below sm80, or the cluster's analytic fused_attention false): that it planned cp 1 only (search.runnable_space)."""
    if cluster.analytic is None or getattr(model, "architecture", None) is None:
        return []
    from fasop.estimators.analytic.overheads import job_params
    from fasop.plans.space import default_cp
    from fasop.specs.catalog import find_gpu

    cps = getattr(args, "cp", None) or default_cp(model.sequence_length)
    if max(cps) == 1 or job_params(cluster.analytic, [find_gpu(n.gpu, cluster.path) for n in inventory]).fused_attention:
        return []
    from fasop.search.engine import NO_FUSED_CP
    return [f"note: context parallelism not searched: {NO_FUSED_CP}"]


def graphs_note(args: argparse.Namespace, cluster, inventory, model) -> list[str]:
    """Without --cuda-graphs, for a Transformer MoE model on GPUs whose published MoE runs captured CUDA
    graphs (catalog validate_software moe_software cuda_graphs: B300, GB200, GB300): that this search planned
    them eager (the default stays eager, Megatron-LM's; `fasop validate` keeps its own default for such rows)."""
    arch = getattr(model, "architecture", None)
    if cluster.estimator != "analytic" or getattr(args, "cuda_graphs", None) or arch is None or arch.moe is None \
            or arch.mamba is not None:  # the catalog's default is sourced for Transformer MoE runs only
        return []
    from fasop.specs.catalog import find_gpu
    from fasop.specs.validate_software import captures_moe_graphs

    graphed = sorted({g.name for g in (find_gpu(n.gpu, cluster.path) for n in inventory)
                      if captures_moe_graphs(g.validate_software)})
    if not graphed:
        return []
    return [f"note: planned eager; {', '.join(graphed)} MoE runs are published captured in CUDA graphs (on a Grace host "
            "each kernel issues in ~20 us): --cuda-graphs attn,moe_router,moe_preprocess to plan so (full_iteration "
            "needs a static-shape dispatcher, HybridEP with a capacity factor, that the estimate does not model)"]


def add_plan_software(group) -> None:
    """explain / export / plot's --cuda-graphs and --mtp-layers for the plan by flags (a --from row's
    columns say them)."""
    group.add_argument("--cuda-graphs", type=_graphs, metavar="none|full_iteration|MODULE[,MODULE]",
                       help="what the run captures in CUDA graphs (default none; as fasop search --cuda-graphs)")
    group.add_argument("--mtp-layers", type=_ints(0, 64), metavar="N",
                       help="multi-token-prediction depths the last stage trains (default 0; as fasop search)")


def plan_software(args: argparse.Namespace, cluster=None) -> dict:
    """The row cells --cuda-graphs and --mtp-layers give the plan by flags on `cluster` ({} without
    them); refused beside --from (no `cluster`: the row was estimated with its own columns) and on a
    cluster whose estimator takes no recipe."""
    given = [k for k in ("cuda_graphs", "mtp_layers") if getattr(args, k, None) is not None]
    if given and cluster is None:
        flag = "--" + given[0].replace("_", "-")
        raise FasopError(f"{flag}: for the plan by flags; a --from row is explained and exported as it was "
                         f"estimated (its {given[0]} column): search again with {flag}")
    return {k: v for k, v in options(args, cluster).items() if k in given} if given else {}
