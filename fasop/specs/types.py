"""The spec values fasop computes with: cluster, node type, model, profile (frozen dataclasses, SI units).

load.py reads and checks the files that make them (fasop.specs re-exports these names); nothing here
reads a file.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

GIB = 2**30
CATALOG_ESTIMATORS = ("analytic",)
"""Estimators whose cluster specs name catalog GPUs (fasop/data/cluster_specs/catalog/, read by catalog.py)
instead of giving each node type's memory and links."""
LAYER_KINDS = ("embedding", "transformer", "encoder", "decoder", "head")
TRANSFORMER_KINDS = ("transformer", "encoder", "decoder")


@dataclass(frozen=True, kw_only=True)
class NodeType:
    name: str
    """Key in the cluster spec, used on the command line and in `node_placement` (e.g. `a100`)."""
    instance: str
    """Cloud instance or machine name, for reports (e.g. `p4d.24xlarge`)."""
    gpu: str
    """GPU type; the key of this node's per-layer times in model profiles."""
    gpus_per_node: int
    memory_limit_bytes: float
    """GPU memory usable by training, per GPU (the OOM threshold)."""
    intra_node_bytes_per_s: float
    inter_node_bytes_per_s: float
    intra_node_shared: bool
    """True when concurrent rings inside the node share one bus (PCIe), dividing its bandwidth."""
    usd_per_hour: float
    spot_usd_per_hour: float | None


@dataclass(frozen=True, kw_only=True)
class ClusterSpec:
    path: str
    estimator: str
    """Which registered estimator scores plans on this cluster (estimators.make_estimator;
    docs/estimators.md, 'Estimator variants'), e.g. `fasop-2024`."""
    node_types: dict[str, NodeType]
    p2p_inter_node_divisor: float
    p2p_intra_node_divisor: float
    memory_overhead_factor: float
    """A stage is out of memory when factor x estimated bytes exceeds the limit."""
    analytic: Any = None
    """The `analytic` estimator's physical constants (catalog.AnalyticParams), for its clusters."""


@dataclass(frozen=True, kw_only=True)
class ScalingTable:
    """Micro-batch scaling of a profiled layer time: f(b) = value at the largest point <= b;
    past the last point, `proportional` multiplies by b / last point, `constant` keeps it."""

    points: tuple[tuple[int, tuple[float, ...]], ...]
    """(micro-batch size, factors whose left-to-right product is the scale), ascending."""
    beyond: Literal["proportional", "constant"]

    def factor(self, b: int) -> float:
        chosen = self.points[0]
        for point in self.points:
            if point[0] <= b:
                chosen = point
        value = _product(chosen[1])
        last_b = self.points[-1][0]
        if b > last_b and self.beyond == "proportional":
            return value * b / last_b
        return value


@dataclass(frozen=True, kw_only=True)
class Profile:
    forward_s: dict[tuple[str, int], tuple[float, ...]]
    """(gpu, tp) -> forward time of one sample-micro-batch per entry of the layer list, seconds."""
    fwd_bwd_factor: float
    scaling: dict[tuple[str, str], ScalingTable]
    """(gpu, layer kind) -> micro-batch scaling table."""

    def tp_degrees(self, gpus: tuple[str, ...]) -> tuple[int, ...]:
        """TP degrees profiled for every one of `gpus`, ascending."""
        sets = [{tp for (g, tp) in self.forward_s if g == gpu} for gpu in gpus]
        return tuple(sorted(set.intersection(*sets))) if sets else ()


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    path: str
    name: str
    hidden_size: int
    num_attention_heads: int
    vocab_size: int
    sequence_length: int
    global_batch_size: int
    tie_word_embeddings: bool
    bytes_per_element: int
    """Bytes of one activation or gradient element that GPUs exchange: pipeline sends, the DP
    gradient all-reduce and the tied-embedding sync (memory has its own bytes per parameter)."""
    layer_kinds: tuple[str, ...]
    """Kind of every entry of the layer list, in pipeline order."""
    layer_segments: tuple[str, ...]
    """Segment of every entry (`encoder`/`decoder` for encoder-decoder models, else `model`)."""
    profile: Profile | None = None
    """Profiled per-layer times (None: a model from a HuggingFace config, scored analytically)."""
    architecture: Any = None
    """The full shape (architecture.Architecture) for the analytic estimator; None for FASOP's specs."""

    @property
    def num_transformer_layers(self) -> int:
        return sum(kind in TRANSFORMER_KINDS for kind in self.layer_kinds)

    @property
    def segments(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(self.layer_segments))


def _product(factors: tuple[float, ...]) -> float:
    value = factors[0]
    for f in factors[1:]:
        value = value * f
    return value
