"""A parallelisation plan: degrees, micro-batch size and the order of nodes along the pipeline.

The layer split is not part of a :class:`Plan`: a partitioner chooses it, and the estimate
that results carries it. Ranks follow Megatron-LM's order (tp-cp-ep-dp-pp): rank = t + tp*c + tp*cp*d + tp*cp*dp*p
(t: tensor-parallel index, c: context-parallel index, d: data-parallel index, p: pipeline stage),
and node k holds ranks k*M ... k*M + M - 1 (M GPUs per node), so stage p occupies ranks
[p*tp*cp*dp, (p+1)*tp*cp*dp). Expert parallelism (ep, etp) carves its groups out of a stage's
tp*cp*dp ranks (Megatron-Core's "MoE parallel folding": fasop/estimators/analytic/parallel.py);
it adds no ranks. cp = ep = etp = 1 is the dense plan of FASOP, keyed and written as before.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import lru_cache

from fasop.specs.types import NodeType


def trusted(cls, **fields):
    """An instance of the frozen dataclass `cls` holding `fields` (every field), made without
    its __init__. A frozen dataclass's __init__ sets each field through object.__setattr__ (~0.1
    us a field), which dominates making plans and estimates by the thousand; for values fasop
    has just computed, this sets the instance's dict at once. The object is the one __init__
    would make: the same fields, equality and hash, still frozen."""
    obj = object.__new__(cls)
    obj.__dict__.update(fields)
    return obj


def trusted_many(cls, n: int, /, **columns) -> list:
    """n instances of `cls` as `trusted` makes them: instance k holds field f = columns[f][k]
    where columns[f] is a list (of n items), else columns[f] itself."""
    if not columns:
        return []
    names = tuple(columns)
    values = [c if isinstance(c, list) else itertools.repeat(c, n) for c in columns.values()]
    maker = _MAKERS.get((cls, names))
    if maker is None:
        made = _MADE[(cls, names)] = _MADE.get((cls, names), 0) + n
        if made < WRITE_MAKER_AFTER:
            new, objects = object.__new__, []
            for row in zip(*values):
                obj = new(cls)
                obj.__dict__.update(zip(names, row))
                objects.append(obj)
            return objects
        maker = _MAKERS[(cls, names)] = _maker(cls, names)
    return list(map(maker, *values))


WRITE_MAKER_AFTER = 2048
"""Instances of a (class, fields) that trusted_many makes by updating their dicts before it
writes their maker (`_maker`): writing one costs ~0.05-0.1 ms, what ~500 instances save, so a
process that makes few (one small search) never pays for it."""
_MADE: dict[tuple, int] = {}
_MAKERS: dict[tuple, object] = {}


def _maker(cls, names: tuple[str, ...]):
    """A function of one value per field of `names` that makes an instance of `cls` holding them,
    as `trusted` does: the instance's dict filled one store per field, written out (as
    dataclasses writes __init__) -- a third less time than updating it from zip(names, values)
    (measured: 600 estimates, 0.19 ms against 0.30 ms)."""
    arguments = [f"v{k}" for k in range(len(names))]
    stores = "".join(f"    d[{name!r}] = {value}\n" for name, value in zip(names, arguments))
    namespace = {"new": object.__new__, "cls": cls}
    exec(f"def make({', '.join(arguments)}):\n    obj = new(cls)\n    d = obj.__dict__\n{stores}    return obj\n",
         namespace)
    return namespace["make"]


@dataclass(frozen=True, kw_only=True)
class Plan:
    tp: int
    dp: int
    pp: int
    mbs: int
    """Micro-batch size (samples)."""
    global_batch_size: int
    placement: tuple[NodeType, ...]
    """The node type of every node, in rank order (node 0 holds ranks 0..M-1)."""
    cp: int = 1
    """Context-parallel degree: each sequence split into 2*cp chunks over cp ranks (Megatron-Core)."""
    ep: int = 1
    """Expert-parallel degree: each MoE layer's experts split over ep ranks of a stage."""
    etp: int = 1
    """Expert tensor-parallel degree: each expert's matrices split over etp ranks."""

    @property
    def gpus_per_node(self) -> int:
        return self.placement[0].gpus_per_node

    @property
    def num_gpus(self) -> int:
        return self.tp * self.cp * self.dp * self.pp

    @property
    def num_microbatches(self) -> int:
        return self.global_batch_size // (self.dp * self.mbs)

    @property
    def placement_name(self) -> str:
        return "-".join(node.name for node in self.placement)

    def key(self) -> str:
        """Stable identifier, e.g. `tp2-dp2-pp8-mbs1@a10-a100-a10-...`."""
        return f"tp{self.tp}{self.expert_key}-dp{self.dp}-pp{self.pp}-mbs{self.mbs}@{self.placement_name}"

    @property
    def expert_key(self) -> str:
        """`-cp2-ep8-etp1` for the degrees not 1 (empty for a dense plan: FASOP's keys unchanged)."""
        parts = [f"-{name}{v}" for name, v in (("cp", self.cp), ("ep", self.ep), ("etp", self.etp)) if v != 1]
        return "".join(parts)

    def grid(self, sep: str = ", ", space: str = " ") -> str:
        """`tp 1, ep 8, dp 16, pp 2`: the degrees in the search table's order, cp, ep, etp where not 1."""
        named = (("tp", self.tp), ("cp", self.cp), ("ep", self.ep), ("etp", self.etp), ("dp", self.dp), ("pp", self.pp))
        return sep.join(f"{name}{space}{v}" for name, v in named if name in ("tp", "dp", "pp") or v != 1)

    def node_of_rank(self, rank: int) -> NodeType:
        return self.placement[rank // self.gpus_per_node]

    def rank(self, stage: int, d: int, t: int, c: int = 0) -> int:
        return t + self.tp * c + self.tp * self.cp * d + self.tp * self.cp * self.dp * stage

    @property
    def stage_node_indices(self) -> tuple[tuple[int, ...], ...]:
        """Indices of the nodes holding each stage's ranks, ascending."""
        return stage_node_indices(self.tp * self.cp * self.dp, self.pp, self.gpus_per_node)


@lru_cache(maxsize=4096)
def stage_node_indices(block: int, pp: int, gpus_per_node: int) -> tuple[tuple[int, ...], ...]:
    """Indices of the nodes holding each of pp stages of `block` consecutive ranks, ascending."""
    m = gpus_per_node
    return tuple(tuple(range(p * block // m, ((p + 1) * block - 1) // m + 1)) for p in range(pp))


def abbreviate(placement: str, known=()) -> str:
    """a10-a10-a10-a100 -> 3xa10-a100 (runs of equal node types collapsed). Node type names that
    hold '-' (gcp's a3-highgpu-8g) are kept whole when given in `known`."""
    names, rest = [], placement
    by_length = sorted(known, key=len, reverse=True)
    while rest:
        head = next((n for n in by_length if rest == n or rest.startswith(n + "-")), rest.split("-")[0])
        names.append(head)
        rest = rest[len(head) + 1:]
    out, i = [], 0
    while i < len(names):
        j = i
        while j < len(names) and names[j] == names[i]:
            j += 1
        out.append(names[i] if j - i == 1 else f"{j - i}x{names[i]}")
        i = j
    return "-".join(out)
