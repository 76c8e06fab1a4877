"""Workloads shared by value in a process: the analytic estimators of a sweep (one per composition)
ask the cost model for the same Workloads, and its caches are keyed on the Workload object; and
the other tables those estimators share (`shared_tables`)."""

from __future__ import annotations

from fasop.core.recent import recent
from fasop.estimators.analytic import cost as C
from fasop.estimators.analytic.layers import Recipe
from fasop.plans.plan import Plan
from fasop.specs.catalog import canonical
from fasop.specs.types import TRANSFORMER_KINDS

_SHARED: dict = {}
"""Workloads of this process by value: a sweep's estimators share them and the cost model's caches
(keyed on the Workload object). An entry holds its arch and params: the ids in its key stay theirs."""


def shared_workload(arch, params, seq: int, plan: Plan, recipe: Recipe, shard: int = 0, mtp: int = 0) -> C.Workload:
    """The process's one Workload of these values (made on first use); `shard`: HSDP's shard group;
    `mtp`: the multi-token-prediction depths on the last stage."""
    key = (id(arch), id(params), seq, plan.tp, plan.dp, plan.pp, plan.mbs, plan.num_microbatches, recipe,
           plan.cp, plan.ep, plan.etp, shard, mtp)
    w = _SHARED.get(key)
    if w is None:
        if len(_SHARED) >= 1 << 15:  # a long-lived process: start over rather than grow
            _SHARED.clear()
        w = _SHARED[key] = C.Workload(arch=arch, seq=seq, mbs=plan.mbs, tp=plan.tp, dp=plan.dp, pp=plan.pp,
                                      num_microbatches=plan.num_microbatches, recipe=recipe, params=params,
                                      cp=plan.cp, ep=plan.ep, etp=plan.etp, shard=shard, mtp=mtp)
    return w


_TABLES: dict = {}
"""shared_tables' tables by (model, cluster, params) (fasop.core.recent: the latest few kept)."""
TABLE_ROWS = 1 << 16
"""Entries a shared table holds before it starts over (bounded memory in a long-lived process)."""


def shared_tables(model, cluster, params, recipes: dict, gpus_per_node: set[int]) -> dict[str, dict]:
    """The tables the analytic estimators of one (model, cluster, job params, allowed recipes, GPUs a
    node) share in a process -- a sweep makes one estimator per composition, and what does not
    depend on the composition is computed once: Workloads by degrees and recipe (HSDP's shard
    follows the GPUs a node), recipe lists, each stage's hardware by its span's node names (one
    NodeType per name in a cluster), and the bound's per-GPU-type pieces. Each table: {key: value},
    cleared past TABLE_ROWS entries by its user. An inventory mixing GPUs a node gets its own."""
    names = ("workloads", "recipes", "hardware", "spans", "bound")
    if len(gpus_per_node) != 1:
        return {name: {} for name in names}
    by_recipes = recent(_TABLES, (model, cluster, params), dict)
    key = (*gpus_per_node, tuple((name, tuple(values)) for name, values in sorted(recipes.items())))
    tables = by_recipes.get(key)
    if tables is None:
        tables = by_recipes[key] = {name: {} for name in names}
    return tables


def profiled_times(model, plan: Plan, stages) -> tuple | None:
    """Per-stage (fwd, bwd) of one layer from the model's profile (model spec `profile:`), None where
    a stage's (GPU type, tp) is not profiled; None for a model without one. Forward = the profiled
    first transformer entry x its micro-batch scaling, backward = (fwd_bwd_factor - 1) x forward."""
    profile = model.profile
    if profile is None:
        return None
    first = next(i for i, k in enumerate(model.layer_kinds) if k in TRANSFORMER_KINDS)
    names = {canonical(g): g for g, _ in profile.forward_s}
    out = []
    for hw in stages:
        name = names.get(canonical(hw.gpu.name))
        forward = profile.forward_s.get((name, plan.tp)) if name else None
        if forward is None:
            out.append(None)
            continue
        f = forward[first] * profile.scaling[(name, model.layer_kinds[first])].factor(plan.mbs)
        out.append((f, (profile.fwd_bwd_factor - 1) * f))
    return tuple(out) if any(out) else None
