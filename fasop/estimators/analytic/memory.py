"""Memory of one GPU of a pipeline stage under the analytic model (docs/estimators.md §A4).

Weights 2, gradients `gradient_reduce_bytes` (4: fp32 main grads) and Adam 12 (fp32 master
weights, m, v) bytes per parameter, divided by dp for what ZeRO shards (1: optimizer, 2: +
gradients, 3: + weights); activations per layer (analytic_layers.activation_bytes) x layers x
the micro-batches in flight at the stage: min(p - i, m) under 1F1B, x (1 + (p - 1)/(p v))
interleaved (Korthikanti et al. 2022 §4.2.3); plus the framework overhead.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from fasop.estimators.analytic import block_recompute as BR
from fasop.estimators.analytic import layers as L
from fasop.estimators.analytic.layers import Workload


WEIGHT_BYTES = 2
"""16-bit weights (bf16/fp16; FP8 runs keep bf16 weights and cast per matmul)."""
ADAM_BYTES = 12
"""fp32 master weights + Adam's first and second moments."""
FP32_ADAM_BYTES = 8
"""An fp32 / tf32 run: Adam's two moments; the fp32 weights are the master copy."""


def weight_bytes(w: Workload) -> int:
    """Bytes per weight a GPU holds: 2 (16-bit copy of the fp32 master), 4 in an fp32 / tf32 run."""
    return w.recipe.value_bytes


def optimizer_bytes(w: Workload) -> int:
    """Optimizer state bytes per parameter: fp32 master + m + v (12), or m + v (8) in an fp32 run."""
    return FP32_ADAM_BYTES if w.recipe.value_bytes == 4 else ADAM_BYTES


@dataclass(frozen=True, kw_only=True)
class MemoryParts:
    weights: float
    gradients: float
    optimizer: float
    activations: float
    overhead: float

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer + self.activations + self.overhead

    def misfit(self, limit: float) -> str:
        """'' when it fits; else which part alone exceeds `limit` with the overhead: `weights`
        (weights, gradients, optimizer), `activations`, `both`; `activations` when only their sum does."""
        if self.total <= limit:
            return ""
        states = self.weights + self.gradients + self.optimizer + self.overhead > limit
        acts = self.activations + self.overhead > limit
        return "both" if states and acts else "weights" if states else "activations"


@lru_cache(maxsize=1 << 16)
def stage_params(w: Workload, layers: int, first: bool, last: bool) -> float:
    """Parameters one GPU of a stage holds (its 1/tp share)."""
    a = w.arch
    n = layers * L.layer_params(a)
    if first:
        n += L.embedding_params(a)
    if last:
        shared = a.tied_embeddings and first
        n += L.head_params(a) - (a.vocab_size * a.hidden_size if shared else 0)
    return n / w.tp


def in_flight(w: Workload, stage: int) -> float:
    """Micro-batches whose activations stage `stage` holds at its peak (1F1B warm-up depth)."""
    k = min(w.pp - stage, w.num_microbatches)
    v = w.recipe.virtual_stages
    return k * (1 + (w.pp - 1) / (w.pp * v)) if v > 1 else k


@lru_cache(maxsize=1 << 16)
def stage_memory(w: Workload, layers: int, stage: int) -> MemoryParts:
    a, r, d = w.arch, w.recipe, w.dp
    first, last = stage == 0, stage == w.pp - 1
    n = stage_params(w, layers, first, last)
    grad_bytes = w.params.gradient_reduce_bytes[r.precision]
    t, b, s = w.tp, w.mbs, w.seq
    acts = layers * BR.activation_bytes(w) * in_flight(w, stage)
    if first:
        acts += L.embedding_activation_bytes(a, b, s, t, r.sequence_parallel) * in_flight(w, stage)
    if last:
        acts += L.head_activation_bytes(a, b, s, t)
    return MemoryParts(weights=n * weight_bytes(w) / (d if r.zero >= 3 else 1),
                       gradients=n * grad_bytes / (d if r.zero >= 2 else 1),
                       optimizer=n * optimizer_bytes(w) / (d if r.zero >= 1 else 1),
                       activations=acts, overhead=w.params.framework_overhead_bytes)


@lru_cache(maxsize=1 << 16)
def max_layers(w: Workload, stage: int, limit: float, most: int) -> int:
    """Most layers stage `stage` can hold within `limit` bytes (memory is linear in layers)."""
    base = stage_memory(w, 0, stage).total
    one = stage_memory(w, 1, stage).total - base
    if base + one > limit:
        return 0
    return min(most, int((limit - base) / one))
