"""FASOP-2024's data-parallel gradient all-reduce and step time (docs/estimators.md §7), float32
operation by operation as FASOP computes them.

- `dp-stage0-params`: every stage's DP all-reduce moves stage 0's gradients, whatever the
  stage holds; a stage's cost differs from another's only by its bus (shared or not).
- `dp-param-count`: a transformer layer's gradients count 12 h^2 + 20800 (its memory counts
  12 h^2, model_math.transformer_params); the first embedding or head layer counts h v.
- the step: max over stages of (stage end + its DP all-reduce), + the embedding all-reduce.
"""

from __future__ import annotations

import numpy as np

from fasop.costs import model_math
from fasop.estimators.fasop2024 import comm as fasop2024_comm
from fasop.estimators.fasop2024.layout import Layout
from fasop.plans.plan import Plan
from fasop.specs.types import TRANSFORMER_KINDS, ModelSpec

f32 = np.float32
DP_EXTRA_PARAMS_PER_LAYER = 20800
"""dp-param-count: the gradients of a transformer layer in FASOP's DP all-reduce are 12 h^2 +
20800 (its memory counts 12 h^2, model_math.transformer_params)."""
MOST_TABLES = 65536
"""DP tables kept per (model, cluster) before they start over."""


def dp_table(shared: dict, model: ModelSpec, plan: Plan, layout: Layout) -> np.ndarray:
    """table[n, bus]: a stage's DP all-reduce (float32) when stage 0 holds n layers
    (dp-stage0-params), on an unshared (0) and a shared (1) bus; the same float32 operations as
    fasop2024_comm.dp_allreduce_seconds, on arrays. Kept in `shared` (a cache of one (model,
    cluster)) per (tp, dp, GPUs per node, ring): a pareto sweep's compositions share them."""
    tables = shared.setdefault("dp tables", {})
    key = (plan.tp, plan.dp, plan.gpus_per_node, float(layout.dp_ring))
    table = tables.get(key)
    if table is None:
        params = dp_params(shared, model, plan.tp)
        table = np.empty((len(params), 2), dtype=f32)
        for bus in (False, True):
            table[:, int(bus)] = fasop2024_comm.dp_allreduce_seconds(plan, params, layout.dp_ring, bus,
                                                                     model.bytes_per_element)
        if len(tables) >= MOST_TABLES:
            tables.clear()
        tables[key] = table
    return table


def dp_params(shared: dict, model: ModelSpec, tp: int) -> np.ndarray:
    """dp-stage0-params: stage 0's gradient count for every number of layers it holds (0..L),
    accumulated in float32 along the layer list: each transformer layer (12h^2 + 20800)/tp,
    plus h*v (undivided) for the first embedding or head layer. Kept in `shared` per tp."""
    params_all = shared.setdefault("dp params", {})
    if tp not in params_all:
        h, v = model.hidden_size, model.vocab_size
        params, embedding_seen, sums = f32(0), False, [f32(0)]
        for kind in model.layer_kinds:
            if kind in TRANSFORMER_KINDS:
                params = params + f32((model_math.transformer_params(h) + DP_EXTRA_PARAMS_PER_LAYER) / tp)
            elif not embedding_seen:
                params, embedding_seen = params + f32(model_math.embedding_params(h, v)), True
            sums.append(params)
        params_all[tp] = np.array(sums, dtype=f32)
    return params_all[tp]


def step_times(ends: np.ndarray, shared_bus: np.ndarray, dp_pairs: np.ndarray, embedding: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
    """(step time, DP all-reduce of the stage that ends last) of plans a row each, float32:
    step = max_i(E_i + DP_i) + embedding, the first of the latest stages. ends: stage ends
    (-inf past a plan's stages); shared_bus: the stage is on a shared bus; dp_pairs: a stage's
    DP all-reduce on an unshared and a shared bus (a row of `dp_table`, by stage 0's layers)."""
    dp_costs = np.where(shared_bus, dp_pairs[:, 1:], dp_pairs[:, :1])
    totals = ends.astype(f32) + dp_costs
    slowest = totals.argmax(axis=1)
    rows = np.arange(len(ends))
    return totals[rows, slowest] + embedding, dp_costs[rows, slowest]
