"""Workloads shared by value in a process: the analytic estimators of a sweep (one per composition)
ask the cost model for the same Workloads, and its caches are keyed on the Workload object."""

from __future__ import annotations

from fasop.estimators.analytic import cost as C
from fasop.estimators.analytic.layers import Recipe
from fasop.plans.plan import Plan

_SHARED: dict = {}
"""Workloads of this process by value: a sweep's estimators share them and the cost model's caches
(keyed on the Workload object). An entry holds its arch and params: the ids in its key stay theirs."""


def shared_workload(arch, params, seq: int, plan: Plan, recipe: Recipe, shard: int = 0) -> C.Workload:
    """The process's one Workload of these values (made on first use); `shard`: HSDP's shard group."""
    key = (id(arch), id(params), seq, plan.tp, plan.dp, plan.pp, plan.mbs, plan.num_microbatches, recipe,
           plan.cp, plan.ep, plan.etp, shard)
    w = _SHARED.get(key)
    if w is None:
        if len(_SHARED) >= 1 << 15:  # a long-lived process: start over rather than grow
            _SHARED.clear()
        w = _SHARED[key] = C.Workload(arch=arch, seq=seq, mbs=plan.mbs, tp=plan.tp, dp=plan.dp, pp=plan.pp,
                                      num_microbatches=plan.num_microbatches, recipe=recipe, params=params,
                                      cp=plan.cp, ep=plan.ep, etp=plan.etp, shard=shard)
    return w
