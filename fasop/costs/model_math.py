"""Per-layer arithmetic of a model spec: parameters, activation bytes, transfer volumes.

What a layer of a Transformer holds and sends follows from its architecture alone; every
estimator reads it from here (memory, p2p, data-parallel and embedding all-reduce), and adds
its own rules (optimizer bytes per parameter, precisions, which transfers it charges) on top.
Counts are per layer, for the whole layer (divide by tp for a GPU's share where the layer is
split); sizes: h hidden, v vocabulary, s sequence, a attention heads, b micro-batch size.
"""

from __future__ import annotations

from fasop.specs.types import TRANSFORMER_KINDS

TRANSFORMER_WEIGHTS_PER_H2 = 12
"""A transformer layer's weights, in units of h^2: attention 4h^2 (Q, K, V, output projections)
and MLP 8h^2 (h -> 4h -> h); biases and norms (O(h)) left out (Narayanan et al. 2021, Eq. 2)."""


def transformer_params(h: int) -> int:
    """Weights of one transformer layer: 12 h^2."""
    return TRANSFORMER_WEIGHTS_PER_H2 * h * h


def embedding_params(h: int, v: int) -> int:
    """Weights of a word embedding or an (untied) output head: h v."""
    return h * v


def layer_params(kind: str, h: int, v: int) -> int:
    """Weights of one layer of the layer list (`specs.LAYER_KINDS`)."""
    return transformer_params(h) if kind in TRANSFORMER_KINDS else embedding_params(h, v)


def activation_bytes(kind: str, *, h: int, v: int, s: int, a: int, b: int, tp: int, pp: int, in_flight: int) -> float:
    """Activation bytes one GPU keeps for one layer with `in_flight` micro-batches of b in flight
    (16-bit activations, no recomputation):
    - transformer: s b h (10 + 24/tp + 5 a s / (h tp)) per micro-batch (Korthikanti et al. 2022,
      Table 2, tensor parallelism without sequence parallelism);
    - embedding: s b h pp / tp per micro-batch, as FASOP counts it (its output, once per stage);
    - head: 4 s b h / tp + 4 s b v / tp (its input and its logits, once).
    The operations and their order are those fasop has always used (its numbers rest on them)."""
    p = in_flight
    if kind == "embedding":
        return s * b * h * pp * p / tp
    if kind in TRANSFORMER_KINDS:
        return s * b * p * h * (10 + 24 / tp + 5 * a * s / (h * tp))
    return 4 * s * b * h / tp + 4 * s * b * v / tp


def p2p_elements(mbs, s: int, h: int):
    """Elements of one micro-batch's activations (forward) or their gradients (backward) across
    a stage boundary: b s h (an int, or an int64 array of micro-batch sizes)."""
    return mbs * s * h


def embedding_sync_elements(h: int, v: int) -> int:
    """Elements of the tied word embedding's gradient synchronised between the first and the
    last stage: h v."""
    return h * v
