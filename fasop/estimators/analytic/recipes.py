"""The analytic estimator's recipe options: what a search tries when not told, the allowed values
checked, and low precisions dropped where the inventory has no tensor cores for them."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from fasop.core.errors import FasopError
from fasop.estimators.analytic import offload as OF
from fasop.estimators.analytic.layers import LOW_PRECISIONS, PRECISIONS, RECOMPUTES, ZERO_STAGES, Recipe
from fasop.estimators.analytic.modules import recompute_text, split_recompute
from fasop.plans.plan import Plan
from fasop.plans.space import CP_COMMS, sp_splits
from fasop.specs.host_ops import per_layer, search_scopes

DEFAULTS = {"recompute": ("none", "full"), "zero": (1,), "sequence_parallel": (True,), "virtual_stages": (1,),
            "precision": ("bf16",), "hsdp": (False,), "main_grads": ("fp32",), "optimizer_states": ("fp32",),
            "cuda_graphs": ("none",), "offload_layers": (0,), "bf16_layers": (0,), "cp_comm": CP_COMMS}
"""What a search tries when not told: no recompute and full recompute (the faster that fits; under
FlashAttention selective recompute keeps what no recompute keeps at no gain, and full recompute
lets bigger micro-batches or fewer stages fit: docs/analytic.md, "Default recipe"), the distributed
optimizer, sequence parallelism with tp > 1, no interleaving, bf16, no HSDP -- except that where
ZeRO 3 (FSDP) is allowed and --hsdp is not given, FSDP is also tried as HSDP (HSDP_DEFAULT_STAGES) --,
fp32 gradients and Adam moments, eager (no CUDA graph), no activation offloading, every layer in the
plan's precision (`bf16_layers` 0), with cp > 1 each CP exchange the model's attention allows (`cp_comm`,
context.py; all_gather only where the ring is refused). `main_grads` / `optimizer_states` take one
value each (bf16: memory.state_dtypes), and `cuda_graphs` one setting (specs/host_ops.search_scopes:
what the run captures), the same for every plan: not dimensions the search tries."""

STATE_DTYPES = ("fp32", "bf16")
"""The dtypes of the main gradients and of Adam's moments (--main-grads, --optimizer-states)."""

HSDP_DEFAULT_STAGES = (3,)
"""The ZeRO stages a search pairs HSDP with when not told (--hsdp absent): FSDP's per-layer weight
gathers and gradient reduce-scatters are where sharding over one node's (or NVLink domain's) ranks,
replicated across them, pays (torchtitan's data_parallel_shard_degree x data_parallel_replicate_degree);
ZeRO 1-2 gather once a step, so HSDP there only with --hsdp on."""


ALLOWED = {"recompute": RECOMPUTES, "zero": ZERO_STAGES, "sequence_parallel": (False, True), "precision": PRECISIONS,
           "hsdp": (False, True), "main_grads": STATE_DTYPES, "optimizer_states": STATE_DTYPES, "cp_comm": CP_COMMS}
"""The values a recipe option takes (a `selective:<modules>` recompute besides RECOMPUTES), for the search's flags
and a results row's columns alike."""


def tp_overlap_refusal(sequence_parallel: bool, precision: str) -> str:
    """Why the TP collectives run unhidden whatever the cluster's `tp_overlap` ('' where Megatron-LM overlaps them):
    --tp-comm-overlap needs sequence parallelism (arguments.py), and Transformer Engine's userbuffers take no
    NVFP4 quantizer (module/base.py). The estimate (cost.tp_collectives_s) and both exports read it."""
    if not sequence_parallel:
        return "without sequence parallelism (arguments.py)"
    return "in an NVFP4 run (Transformer Engine's userbuffers take no NVFP4 quantizer: module/base.py)" \
        if precision == "nvfp4" else ""


def parse_recipes(options: dict) -> dict:
    """The allowed recipe values from the search options (defaults: DEFAULTS), checked; and
    `hsdp_stages`, the ZeRO stages HSDP is tried with: all of 1-3 when --hsdp is given, else
    HSDP_DEFAULT_STAGES (hsdp then (False, True) where --zero allows such a stage)."""
    out = {}
    for key, default in DEFAULTS.items():
        values = tuple(dict.fromkeys(options.get(key) or default))
        if key == "recompute":  # selective:<modules> in one spelling (a bad list: the error names it)
            values = tuple(dict.fromkeys(_recompute_value(v) for v in values))
        allowed = ALLOWED.get(key)
        bad = [v for v in values if (allowed is not None and v not in allowed and not str(v).startswith("selective:"))
               or (key == "virtual_stages" and not (isinstance(v, int) and v >= 1))
               or (key in ("offload_layers", "bf16_layers") and not (isinstance(v, int) and v >= 0))]
        if bad:
            raise FasopError(f"--{key.replace('_', '-')}: {bad[0]!r} is not one of "
                             f"{', '.join(map(str, allowed or ('integers >= ' + str(int(key == 'virtual_stages')),)))}")
        if key in ("main_grads", "optimizer_states") and len(values) > 1:
            raise FasopError(f"--{key.replace('_', '-')}: one of {', '.join(STATE_DTYPES)}, got {','.join(values)} "
                             "(one dtype for every plan: it is not searched)")
        out[key] = values
    scopes = _scopes(out["cuda_graphs"])
    out["recompute"] = _graphable(out["recompute"], scopes)
    if any(out["offload_layers"]) and per_layer(scopes):
        raise FasopError(f"--offload-layers: Megatron-Core offloads no activations under per-layer CUDA graphs "
                         f"(--cuda-graphs {','.join(scopes)}); use --cuda-graphs none or full_iteration")
    given = bool(options.get("hsdp"))
    if not given and any(z in HSDP_DEFAULT_STAGES for z in out["zero"]):
        out["hsdp"] = (False, True)
    out["hsdp_stages"] = (1, 2, 3) if given else HSDP_DEFAULT_STAGES
    mtp = tuple(dict.fromkeys(options.get("mtp_layers") or ()))
    if len(mtp) > 1 or any(not (isinstance(v, int) and v >= 0) for v in mtp):
        raise FasopError(f"--mtp-layers: one count >= 0 for every plan, got {','.join(map(str, mtp))}")
    out["mtp_layers"] = mtp  # empty: the model's own modules (mtp_depths)
    block = tuple(dict.fromkeys(options.get("recompute_layers") or ()))
    if any(not (isinstance(v, int) and v >= 1) for v in block):
        raise FasopError(f"--recompute-layers: layers per model chunk, integers >= 1, got {','.join(map(str, block))}")
    if block and "full" not in out["recompute"]:
        raise FasopError("--recompute-layers: block recompute is full recompute of N layers a chunk; allow it with "
                         "--recompute full (or none,full)")
    out["recompute_layers"] = block   # empty: full recompute of every layer (Megatron's uniform method)
    out["as_stated"] = (bool(options.get("as_stated")),)   # a results row's recipe (plan_source.recipe_of), not a search's
    return out


def mtp_depths(recipes: dict, arch) -> int:
    """The multi-token-prediction depths the last stage trains: --mtp-layers, else none (a search
    plans the main model; `fasop validate` rows train the config's modules by default, as the
    published runs did); refused for a model without a module (or past its layers). Not the
    config's modules by default: on DeepSeek-V3's config (p5=16,p6-b200=16 --top 10) the heavier
    last stage makes a shape's node orders tie exactly by the thousand, which the order tree cannot
    cut (docs/partitions.md: exact ties) -- the search took > 60 s instead of ~10 s."""
    given = recipes.get("mtp_layers") or ()
    if not given:
        return 0
    if arch.mtp_problem(given[0]):
        raise FasopError(f"--mtp-layers: {arch.mtp_problem(given[0])}")
    return given[0]


def _scopes(values: tuple) -> tuple[str, ...]:
    """--cuda-graphs' one setting as graphed scopes, checked (specs/host_ops.search_scopes)."""
    if len(values) != 1:
        raise FasopError(f"--cuda-graphs: one setting for every plan, got {len(values)} ({', '.join(map(str, values))})")
    scopes, why = search_scopes(str(values[0]))
    if why:
        raise FasopError(f"--cuda-graphs: {why}")
    return scopes


def _graphable(recomputes: tuple, scopes: tuple[str, ...]) -> tuple:
    """The recompute modes a run graphed as `scopes` can use: per-layer graphs refuse full recompute
    (Megatron-Core transformer_config.py at d98e8a6: "full recompute is only supported with full
    iteration CUDA graph"), so the search drops it there; full recompute alone is refused."""
    if not per_layer(scopes) or "full" not in recomputes:
        return recomputes
    kept = tuple(v for v in recomputes if v != "full")
    if not kept:
        raise FasopError(f"--recompute full: Megatron-Core recomputes whole layers only under a full-iteration CUDA graph, "
                         f"not with --cuda-graphs {','.join(scopes)} (use --recompute none or selective, or "
                         "--cuda-graphs full_iteration)")
    return kept


def _recompute_value(value) -> str:
    """A recompute value as the CSV writes it (selective:<modules> sorted and deduplicated)."""
    if not str(value).startswith("selective:"):
        return value
    try:
        return recompute_text(*split_recompute(value)[::-1])
    except ValueError as exc:
        raise FasopError(f"--recompute: {exc}") from None


def lacking(gpus, precision: str) -> list[str]:
    """The names of `gpus` (catalog GPU types) with no tensor cores for `precision` (catalog peak null), sorted."""
    return sorted({g.name for g in gpus if g.peak_flops.get(precision) is None})


def default_precision(options: dict, gpus: list) -> dict:
    """`options` with the precision a search tries when not told: bf16, or fp16 where a GPU of the
    inventory has no BF16 (Volta, Turing, Pascal: catalog bf16_tflops null) -- such clusters train
    in fp16 with loss scaling, not in a bf16 their GPUs would emulate."""
    if options.get("precision") or not lacking(gpus, "bf16"):
        return options
    return {**options, "precision": ("fp16",)}


def without_missing_units(recipes: dict, gpus: list, low: str = "fp8") -> dict:
    """`recipes` with fp8 (or `low`: bf16, mxfp8, nvfp4) dropped where a GPU of the inventory has no such
    tensor cores (catalog fp8_tflops null: A100, A10G, V100, ...; mxfp8 / nvfp4: all but Blackwell):
    every plan uses every node, so no plan of it could train so (its CSV's precision column then
    never says it). That precision alone: a one-line error."""
    missing = lacking(gpus, low)
    if not missing:
        return recipes
    if recipes["precision"] == (low,):
        units = "FP8" if low == "fp8" else low.upper()
        instead, where = {"fp8": ("bf16", "H100, H200, L4, ..."), "bf16": ("fp16", "A100, A10G, L4, H100, ...")}.get(
            low, ("bf16", "B200, B300, GB200, GB300"))
        verb = "has" if len(missing) == 1 else "have"
        raise FasopError(f"--precision {low}: {', '.join(missing)} {verb} no {units} tensor cores (the GPU catalog's "
                         f"{low}_tflops is null); use --precision {instead}, or nodes with {units} ({where})")
    return recipes | {"precision": tuple(p for p in recipes["precision"] if p != low)}


def recipe_grid(r: dict, plan: Plan, num_layers: int, shard_in_dp: bool, experts_ok: bool = True,
                moe: bool = False, arch=None, seq: int = 0) -> Iterator[Recipe]:
    """The recipes of `r` (parse_recipes) a plan's degrees admit: sequence parallelism only with
    tp > 1 dividing a CP rank's `seq` / cp tokens (0: not checked; space.sp_splits), for an MoE model (`moe`) only on where `r` allows on and off (Megatron-Core's MoE layer refuses
    tp > 1 without it, moe_layer.py; a row's stated off is scored as stated, and the search CLI turns an
    MoE model's --sequence-parallel off on), ZeRO only with dp x cp > 1, interleaving v only where pp x v
    divides the layers and pp the micro-batches, HSDP only where its shard group (`shard_in_dp`) is smaller
    than dp, with the ZeRO stages `hsdp_stages` names and only where its replicas divide the experts' data-parallel
    group (`experts_ok`: groups.hsdp_flags; Megatron-Core and torchtitan refuse it otherwise) unless a results row
    states it (`as_stated`: scored as the row says), activation offloading of N > 0 layers only as Megatron-Core allows it
    (transformer_config.py: one pipeline stage, no recompute, N below the layers: offload.py), full recompute
    also as block recompute of each `recompute_layers` N below a chunk's layers (block_recompute.py), and N > 0
    16-bit layers (`bf16_layers`, the model's last N) only in an fp8 / mxfp8 / nvfp4 recipe, at most the layers of a
    pipeline stage as Megatron-Core allows (transformer_config.py num_layers_at_end_in_bf16; the CSV says the count),
    and with cp > 1 each allowed CP exchange `arch`'s attention runs at the plan's tp x cp (Architecture.cp_comm_problem;
    `arch` also says whether the model is MoE); p2p alone at cp 1."""
    moe = moe or (arch is not None and arch.moe is not None)
    allowed = r.get("cp_comm", ("p2p",))
    comms = [c for c in allowed if arch is None or not arch.cp_comm_problem(plan.tp, plan.cp, c)] if plan.cp > 1 \
        else ["p2p"]
    if "p2p" in comms and "all_gather" in comms:   # the ring's bytes, none hidden: never faster (context.py)
        comms.remove("all_gather")
    if not comms:   # a caller's own plan: the search enumerates no such tp x cp (plans/space.py), rowplan refuses such a row
        raise FasopError(f"cp {plan.cp} at tp {plan.tp}: " + "; ".join(arch.cp_comm_problem(plan.tp, plan.cp, c)
                                                                         for c in allowed))
    sp = sorted(set(r["sequence_parallel"])) if plan.tp > 1 and (not seq or sp_splits(seq, plan.tp, plan.cp)) \
        else [False]
    sp = [x for x in sp if x or not moe] or sp   # an MoE model drops SP off where SP on is allowed too
    zero = [z for z in r["zero"] if plan.dp * plan.cp > 1 or z == 0] or [0]
    m = plan.num_microbatches
    vs = [v for v in r["virtual_stages"] if v == 1 or (plan.pp > 1 and not num_layers % (plan.pp * v)
                                                       and not m % plan.pp)] or [1]
    hybrid = [h for h in r["hsdp"] if not h or (shard_in_dp and (experts_ok or r["as_stated"][0]))] or [False]
    off = [n for n in r.get("offload_layers", (0,)) if not OF.refusal(n, plan.pp, num_layers, ())] or [0]
    given, most = r.get("bf16_layers", (0,)), num_layers // plan.pp   # more than a stage's: as many as it allows
    bf16 = {p: sorted({min(k, most) for k in given}) if p in LOW_PRECISIONS else [0] for p in r["precision"]}
    precisions = [(p, k) for p in r["precision"] for k in bf16[p]]   # a 16-bit run: its layers are all 16-bit
    for rc, s, z, v, (p, k), h, n, cc in itertools.product(r["recompute"], sp, zero, vs, precisions, hybrid, off, comms):
        if (not h or z in r["hsdp_stages"]) and (n == 0 or rc == "none"):  # HSDP: ZeRO 1-3 (by default 3) only
            mode, modules = split_recompute(rc)
            chunk = -(-num_layers // (plan.pp * v))   # block recompute of a whole chunk is every layer's
            for block in [None] + [b for b in r.get("recompute_layers", ()) if mode == "full" and b < chunk]:
                yield Recipe(recompute=mode, recompute_modules=modules, sequence_parallel=s, zero=z, virtual_stages=v,
                             precision=p, hsdp=h, offload_layers=n, recompute_layers=block, bf16_layers=k, cp_comm=cc)
