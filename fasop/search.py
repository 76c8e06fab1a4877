"""enumerate -> estimate -> ranked table. No printing, no files: the CLI does that."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from fasop.enumerate import cyclic_placements, plans
from fasop.errors import FasopError
from fasop.estimate import PARTITIONERS, Estimate, Fasop2024Estimator
from fasop.specs import ClusterSpec, ModelSpec, NodeType

PLACEMENTS = ("cyclic",)
DEFAULT_ITERATIONS = 12_500_000
"""FASOP's default number of training iterations for the cost column."""

Progress = Callable[[int, int], None]
"""progress(done, total): called as the search advances."""


@dataclass(frozen=True, kw_only=True)
class SearchResult:
    estimates: tuple[Estimate, ...]
    """Every candidate, fastest first (ties keep enumeration order)."""
    inventory: tuple[NodeType, ...]
    iterations: int
    usd_per_hour: float
    """Price of the whole inventory per hour."""

    @property
    def num_oom(self) -> int:
        return sum(e.memory.is_oom for e in self.estimates)

    @property
    def best_fitting(self) -> Estimate | None:
        return next((e for e in self.estimates if not e.memory.is_oom), None)


def parse_nodes(text: str, cluster: ClusterSpec) -> tuple[NodeType, ...]:
    """`a100=1,a10=3` -> the inventory, in the order given."""
    nodes: list[NodeType] = []
    seen = set()
    for item in text.split(","):
        name, sep, count = item.strip().partition("=")
        if not sep or not count.strip().isdigit() or int(count) < 1:
            raise FasopError(f"--nodes: expected TYPE=COUNT with COUNT >= 1, got {item.strip()!r}")
        if name not in cluster.node_types:
            raise FasopError(f"--nodes: unknown node type {name!r} in {cluster.path} "
                             f"(known: {', '.join(cluster.node_types)})")
        if name in seen:
            raise FasopError(f"--nodes: node type {name!r} given twice")
        seen.add(name)
        nodes += [cluster.node_types[name]] * int(count)
    return tuple(nodes)


def search(model: ModelSpec, cluster: ClusterSpec, inventory: Sequence[NodeType], *, heterogeneous: bool = False,
           placements: str = "cyclic", partitioner: str = "fasop-minmax", iterations: int = DEFAULT_ITERATIONS,
           progress: Progress | None = None) -> SearchResult:
    """Estimate every plan for `inventory` and rank them by step time."""
    if placements not in PLACEMENTS:
        raise FasopError(f"--placements: unknown strategy {placements!r} (known: {', '.join(PLACEMENTS)})")
    if partitioner not in PARTITIONERS:
        raise FasopError(f"--partitioner: unknown partitioner {partitioner!r} (known: {', '.join(PARTITIONERS)})")
    if iterations < 1:
        raise FasopError(f"--iterations: must be >= 1, got {iterations}")
    types = list(dict.fromkeys(n.name for n in inventory))
    if len(types) > 1 and not heterogeneous:
        raise FasopError(f"--nodes mixes node types {', '.join(types)}: add --heterogeneous to search plans across them")
    estimator = Fasop2024Estimator(model, cluster, inventory, partitioner)
    tp_degrees = estimator.compute.tp_degrees(tuple(dict.fromkeys(n.gpu for n in inventory)))
    candidates = list(plans(inventory, cyclic_placements(inventory), tp_degrees=tp_degrees,
                            global_batch_size=model.global_batch_size,
                            num_transformer_layers=model.num_transformer_layers))
    if not candidates:
        raise FasopError(f"no valid plan: {len(inventory)} nodes, TP degrees {list(tp_degrees)}, "
                         f"global batch {model.global_batch_size}, {model.num_transformer_layers} layers")
    estimates = estimator.estimate_many(candidates, progress=progress)
    ranked = sorted(estimates, key=lambda e: e.step_time_s)  # stable: ties keep enumeration order
    return SearchResult(estimates=tuple(ranked), inventory=tuple(inventory), iterations=iterations,
                        usd_per_hour=estimator.usd_per_s * 3600)
