"""A buyer's limits on the compositions a pareto sweep considers: most GPUs, most dollars per hour,
least GPU memory per GPU and in all. Compositions outside are left out before any search."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from fasop.core.errors import FasopError
from fasop.pareto.sweep import Composition
from fasop.specs.types import ClusterSpec

GIB = 2**30


@dataclass(frozen=True, kw_only=True)
class BuyerLimits:
    max_gpus: int | None = None
    """Most GPUs in all (--max-gpus)."""
    max_usd_per_hour: float | None = None
    """Most dollars per hour for the whole composition, on the sweep's price basis (--max-usd-per-hour)."""
    min_gpu_memory_gib: float | None = None
    """Node types whose GPUs have less usable memory (memory_limit_gib) are not used (--min-gpu-memory-gib)."""
    min_total_memory_gib: float | None = None
    """Least GPU memory over all the composition's GPUs, GiB (--min-total-memory-gib)."""

    def __post_init__(self):
        for flag, value in (("--max-gpus", self.max_gpus), ("--max-usd-per-hour", self.max_usd_per_hour),
                            ("--min-gpu-memory-gib", self.min_gpu_memory_gib),
                            ("--min-total-memory-gib", self.min_total_memory_gib)):
            if value is not None and not 0 < value < float("inf"):
                raise FasopError(f"{flag}: must be a positive number, got {value:g}")

    def reasons(self, comp: Composition, cluster: ClusterSpec, prices: Mapping[str, float]) -> list[str]:
        """Why the composition is outside the limits (empty: inside)."""
        nodes = [(cluster.node_types[name], n) for name, n in comp.counts if n]
        out = []
        gpus = sum(t.gpus_per_node * n for t, n in nodes)
        if self.max_gpus is not None and gpus > self.max_gpus:
            out.append("--max-gpus")
        if self.max_usd_per_hour is not None and sum(prices[t.name] * n for t, n in nodes) > self.max_usd_per_hour:
            out.append("--max-usd-per-hour")
        if self.min_gpu_memory_gib is not None and any(
                t.memory_limit_bytes < self.min_gpu_memory_gib * GIB for t, _ in nodes):
            out.append("--min-gpu-memory-gib")
        if self.min_total_memory_gib is not None and sum(
                t.memory_limit_bytes * t.gpus_per_node * n for t, n in nodes) < self.min_total_memory_gib * GIB:
            out.append("--min-total-memory-gib")
        return out


def within(comps: Sequence[Composition], limits: BuyerLimits, cluster: ClusterSpec,
           prices: Mapping[str, float]) -> tuple[tuple[Composition, ...], dict[str, int]]:
    """(the compositions inside the limits, in order; how many each limit left out -- a
    composition outside several counts for each)."""
    kept, left_out = [], {}
    for comp in comps:
        reasons = limits.reasons(comp, cluster, prices)
        if reasons:
            for flag in reasons:
                left_out[flag] = left_out.get(flag, 0) + 1
        else:
            kept.append(comp)
    if not kept:
        raise FasopError(f"{next(iter(left_out))}: no composition within --max-nodes is inside the limits ("
                         + ", ".join(f"{flag} leaves out {n}" for flag, n in left_out.items()) + ")")
    return tuple(kept), left_out
