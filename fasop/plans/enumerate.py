"""Generators of valid plans: degrees (tp, cp, dp, pp, ep, etp), micro-batch sizes and node placements.

A plan that cannot exist is never generated: dp must divide the global batch, every stage needs
a transformer layer, TP stays inside a node and uses only degrees the compute source covers.
Order is FASOP's (placement, then tp, dp, mbs ascending), so output is reproducible.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Iterator, Sequence
from functools import lru_cache

from fasop.core.errors import FasopError
from fasop.plans.plan import Plan, trusted_many
from fasop.plans.space import DENSE, DegreeSpace, divisors
from fasop.specs.types import NodeType


def degrees(*, num_nodes: int, gpus_per_node: int, tp_degrees: Sequence[int], global_batch_size: int,
            num_transformer_layers: int, space: DegreeSpace = DENSE) -> Iterator[tuple[int, ...]]:
    """(tp, dp, pp, mbs, cp, ep, etp) in FASOP's order (docs/estimators.md §2), cp after tp.

    tp: the covered degrees that divide the GPUs per node; cp: space.cp's degrees dividing W/tp
    (W GPUs in all); dp: divisors of W/(tp*cp); pp = W/(tp*cp*dp), at most the number of
    transformer layers (Megatron-Core: world = tp*cp*dp*pp); dp divides the global batch;
    mbs: divisors of the per-replica batch; (ep, etp): space.experts' pairs whose ep*etp divides
    a stage's tp*cp*dp ranks (Megatron-Core carves the expert groups etp x ep x edp out of them,
    docs/parallelism.md). With the DENSE space: FASOP's (tp, dp, pp, mbs), 4-tuples (cp = ep = etp = 1).
    """
    combos = _degrees(num_nodes * gpus_per_node, gpus_per_node, tp_degrees, global_batch_size, num_transformer_layers,
                      space)
    yield from ((tp, dp, pp, mbs) for tp, dp, pp, mbs, *_ in combos) if space.dense else combos


def _degrees(world: int, gpus_per_node: int, tp_degrees: Sequence[int], global_batch_size: int,
             num_transformer_layers: int, space: DegreeSpace) -> Iterator[tuple[int, ...]]:
    """`degrees` as 7-tuples."""
    for tp in (t for t in tp_degrees if gpus_per_node % t == 0):
        for cp in (c for c in space.cp if not (world // tp) % c and space.runs(tp, c)):
            for dp in divisors(world // (tp * cp)):
                pp = world // (tp * cp * dp)
                if global_batch_size % dp or pp > num_transformer_layers:
                    continue
                experts = [(ep, etp) for ep, etp in space.experts if not (tp * cp * dp) % (ep * etp)]
                for mbs in divisors(global_batch_size // dp):
                    for ep, etp in experts:
                        yield tp, dp, pp, mbs, cp, ep, etp


def combo_plan(combo: tuple[int, ...], *, global_batch_size: int, placement: tuple[NodeType, ...]) -> Plan:
    """The plan of one `degrees` combination on `placement`."""
    tp, dp, pp, mbs, *rest = combo
    cp, ep, etp = rest or (1, 1, 1)
    return Plan(tp=tp, dp=dp, pp=pp, mbs=mbs, global_batch_size=global_batch_size, placement=placement,
                cp=cp, ep=ep, etp=etp)


def cyclic_placements(nodes: Sequence[NodeType]) -> list[tuple[NodeType, ...]]:
    """FASOP's placements: the cyclic rotations list[r:] + list[:r] (docs/estimators.md §2); one if all alike."""
    nodes = tuple(nodes)
    if len({n.name for n in nodes}) == 1:
        return [nodes]
    return [nodes[r:] + nodes[:r] for r in range(len(nodes))]


def count_orders(nodes: Sequence[NodeType]) -> int:
    """Distinct orders of the node types: N! / (n_1! ... n_k!) for n_i nodes of type i."""
    counts = [sum(n.name == t for n in nodes) for t in dict.fromkeys(n.name for n in nodes)]
    return math.factorial(len(nodes)) // math.prod(math.factorial(c) for c in counts)


def all_placements(nodes: Sequence[NodeType]) -> Iterator[tuple[NodeType, ...]]:
    """Every distinct order of the node types along the pipeline (multiset permutations), lazily,
    in lexicographic order of each type's first appearance in `nodes` (so `nodes` itself is
    first when its types come in blocks). Iterative (the next permutation of the type indices),
    so any number of nodes takes constant stack."""
    kinds = list(dict.fromkeys(n.name for n in nodes))
    types = [next(n for n in nodes if n.name == kind) for kind in kinds]
    seq = sorted(kinds.index(n.name) for n in nodes)
    while True:
        yield tuple(types[k] for k in seq)
        i = len(seq) - 2
        while i >= 0 and seq[i] >= seq[i + 1]:
            i -= 1
        if i < 0:
            return
        j = len(seq) - 1
        while seq[j] <= seq[i]:
            j -= 1
        seq[i], seq[j] = seq[j], seq[i]
        seq[i + 1:] = reversed(seq[i + 1:])


def grouped_placements(nodes: Sequence[NodeType]) -> list[tuple[NodeType, ...]]:
    """Orders in which each type's nodes are contiguous: every order of the k types (k! orders)."""
    kinds = list(dict.fromkeys(n.name for n in nodes))
    blocks = {t: tuple(n for n in nodes if n.name == t) for t in kinds}
    return [tuple(node for t in perm for node in blocks[t]) for perm in itertools.permutations(kinds)]


def plans(placements: Iterable[tuple[NodeType, ...]], combos: Sequence[tuple[int, ...]], *,
          global_batch_size: int) -> Iterator[Plan]:
    """Every (placement, degrees) plan, placement outermost, lazily; `combos` from `degree_list`
    (cp, ep, etp stored only where some combination is not 1: dense plans as FASOP's)."""
    columns = [[combo[k] for combo in combos] for k in range(len(combos[0]) if combos else 4)]
    extra = {name: col for name, col in zip(("cp", "ep", "etp"), columns[4:]) if any(v != 1 for v in col)}
    tp, dp, pp, mbs = columns[:4]
    for placement in placements:  # degree_list's combos are valid: no __init__ to run
        yield from trusted_many(Plan, len(combos), tp=tp, dp=dp, pp=pp, mbs=mbs, global_batch_size=global_batch_size,
                                placement=placement, **extra)


def degree_list(nodes: Sequence[NodeType], *, tp_degrees: Sequence[int], global_batch_size: int,
                num_transformer_layers: int, space: DegreeSpace = DENSE) -> list[tuple[int, ...]]:
    """`degrees` for an inventory whose node types all have the same GPUs per node."""
    gpus = {n.gpus_per_node for n in nodes}
    if len(gpus) != 1:
        raise FasopError(f"--nodes: all node types must have the same gpus_per_node, got {sorted(gpus)}")
    (gpus_per_node,) = gpus
    return list(_degree_tuple(len(nodes), gpus_per_node, tuple(tp_degrees), global_batch_size, num_transformer_layers,
                              space))


@lru_cache(maxsize=256)
def _degree_tuple(num_nodes: int, gpus_per_node: int, tp_degrees: tuple[int, ...], global_batch_size: int,
                  num_transformer_layers: int, space: DegreeSpace = DENSE) -> tuple[tuple[int, ...], ...]:
    """`degrees`, kept per inventory size and model: a pareto sweep's compositions of one size,
    and every search of a process, list the same."""
    return tuple(degrees(num_nodes=num_nodes, gpus_per_node=gpus_per_node, tp_degrees=tp_degrees,
                         global_batch_size=global_batch_size, num_transformer_layers=num_transformer_layers,
                         space=space))
