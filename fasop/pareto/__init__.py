"""Across inventories: the compositions of a catalog (`sweep`), the bounds that prune them
(`pruning`), buyer limits (`buyer`), local and Ray executors (`executors`), resumable checkpoints
(`checkpoint`) and the time-vs-dollar frontier (`frontier`).

May import: everything below it (fasop.core .. fasop.search).
"""

from fasop.pareto.frontier import ParetoAnalysis, analyse, pareto_front

__all__ = ["ParetoAnalysis", "analyse", "pareto_front"]
