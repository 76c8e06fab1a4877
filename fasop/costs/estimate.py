"""`Estimate`: what an estimator says of one plan -- step time breakdown, memory, dollars.

The result type every estimator (fasop/estimators/) returns and search, pareto and report read.
"""

from __future__ import annotations

from dataclasses import dataclass

from fasop.costs.memory import MemoryEstimate
from fasop.plans.plan import Plan
from fasop.specs.types import NodeType


@dataclass(frozen=True, kw_only=True)
class Estimate:
    plan: Plan
    partition: tuple[int, ...]
    """Layer-list entries per stage."""
    stage_node_types: tuple[NodeType, ...]
    """The node type whose GPUs set each stage's pace."""
    stage_compute_s: tuple[float, ...]
    """Fwd+bwd seconds of one micro-batch per stage."""
    p2p_s: tuple[float, ...]
    """Transfer seconds across each stage boundary."""
    stage_end_s: tuple[float, ...]
    """When each stage finishes its last backward pass."""
    pipeline_time_s: float
    dp_allreduce_s: float
    embedding_allreduce_s: float
    step_time_s: float
    memory: MemoryEstimate
    usd_per_step: float
    partitioner: str = "fasop-minmax"
    """The partitioner that chose `partition`."""
    partition_proven_optimal: bool = False
    """True when the `optimal` partitioner proved no split of this plan is faster (by more than its
    margin, 1e-6 of the step time)."""
    partition_gap_pct: float = 0.0
    """`optimal` partitioner: 100 x (step time - the least any split could take) / step time,
    from the best bound when its search stopped at its budget or the certificate did not close;
    0 when proven."""
    extra_columns: tuple[tuple[str, object], ...] = ()
    """(column, value) pairs an estimator adds to the CSV after the common columns, the same
    columns for every plan it scores (the analytic estimator's recipe, compute_source, misfit);
    empty for fasop-2024, whose CSVs keep their bytes."""
    stage_memory_parts: tuple[tuple[tuple[str, float], ...], ...] = ()
    """Per stage, (part, bytes per GPU) pairs that sum to its memory (the analytic estimator:
    weights, gradients, optimizer, activations, overhead); empty where the estimator does not
    state them (fasop-2024: its `parts` counts them from its bytes a parameter). Not a CSV column."""
    step_parts: tuple[tuple[str, float], ...] = ()
    """The step time as (term, seconds) pairs that add up to it, the first the end of the stage
    that sets it (the analytic estimator: that stage's end, its DP sync not hidden behind compute,
    the embedding all-reduce, the optimizer step); empty where the step is the latest stage end
    + DP all-reduce + embedding all-reduce (fasop-2024). Not a CSV column."""
