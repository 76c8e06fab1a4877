"""Block recompute: full recomputation of only some layers of each model chunk.

Megatron-LM's `--recompute-granularity full` comes with `--recompute-method uniform` (every layer
recomputes its forward in the backward; Korthikanti et al. 2022 §5's "full recompute") or
`--recompute-method block --recompute-num-layers N`: the first N layers of each model chunk
(pipeline stage, or virtual stage when interleaved) recompute, the others keep their activations
(Megatron-Core TransformerBlock._checkpointed_forward). NeMo's and Megatron-Bridge's performance
recipes set "full" this way, with N tuned per run to what memory needs
(scripts/performance/utils/helpers.py set_recompute_overrides: recompute_granularity "full",
recompute_method "block", recompute_num_layers from the performance matrix).

The estimator sees one mean layer per stage (cost.layer_s, memory.stage_memory): with q the share of a
chunk's layers that recompute, the mean layer's time and stored activations are
  (1 - q) x (no recompute) + q x (full recompute),
exact for totals when the stage's layers divide evenly into its v chunks of num_layers / (pp v) layers.

The same mean-layer mix serves a low-precision run's layers that stay 16-bit (`Recipe.bf16_layers`,
Megatron-Core's num_layers_at_start_in_bf16 + num_layers_at_end_in_bf16): their share of the model's
layers runs as the bf16 layer (bf16_share, one_precision) -- exact for totals with one pipeline stage.

Selective recompute of named modules (`--recompute-granularity selective --recompute-modules ...`):
the seconds each module's forward costs again in the backward (modules_rerun_s; what each module
drops and recomputes: modules.py).
"""

from __future__ import annotations

from dataclasses import replace

from fasop.estimators.analytic import blocks as B
from fasop.estimators.analytic import layers as L
from fasop.estimators.analytic import modules as M
from fasop.estimators.analytic.layers import Workload


def chunk_layers(w: Workload) -> float:
    """Mean layers of one model chunk: num_layers / (pp x virtual stages)."""
    return w.arch.num_layers / (w.pp * w.recipe.virtual_stages)


def recomputed_share(w: Workload) -> float:
    """Share q of each chunk's layers that recompute their forward: 1 for uniform full recompute,
    min(1, N / chunk layers) for block recompute of N layers, 0 without full recompute."""
    r = w.recipe
    if r.recompute != "full":
        return 0.0
    if r.recompute_layers is None:
        return 1.0
    return min(1.0, r.recompute_layers / chunk_layers(w))


def without_recompute(w: Workload) -> Workload:
    """The same workload with no layer recomputing (the other end of the mix)."""
    return replace(w, recipe=replace(w.recipe, recompute="none", recompute_layers=None))


def bf16_share(w: Workload) -> float:
    """Share of the model's layers a low-precision run keeps 16-bit (0 in a 16-bit run)."""
    r = w.recipe
    return min(1.0, r.bf16_layers / w.arch.num_layers) if r.bf16_layers and r.low_precision else 0.0


def one_precision(w: Workload, precision: str = "bf16") -> Workload:
    """The same workload with every layer at `precision` (the ends of bf16_share's mix); an NVFP4 run's 16-bit
    layers keep its TP collectives unhidden (no userbuffers in an NVFP4 run: cost.tp_collectives_s)."""
    params = replace(w.params, tp_overlap=0.0) if w.recipe.precision == "nvfp4" and w.params.tp_overlap else w.params
    return replace(w, recipe=replace(w.recipe, precision=precision, bf16_layers=0), params=params)


def mix(none: tuple[float, ...], full: tuple[float, ...], q: float) -> tuple[float, ...]:
    """(1 - q) x the no-recompute values + q x the full-recompute ones, element by element."""
    return tuple((1 - q) * a + q * b for a, b in zip(none, full))


def activation_bytes(w: Workload) -> float:
    """Stored activation bytes of the stage's mean layer per micro-batch (layers.activation_bytes
    mixed over the recomputed share)."""
    a, b, s, t, r, fused = w.arch, w.mbs, w.local_seq, w.tp, w.recipe, w.params.fused_attention
    q, stored = recomputed_share(w), r.stored_input_bytes(w.params)
    if r.recompute != "full" or q == 1.0:
        return L.activation_bytes(a, b, s, t, r, fused, stored)
    kept = L.activation_bytes(a, b, s, t, replace(r, recompute="none", recompute_layers=None), fused, stored)
    return (1 - q) * kept + q * L.activation_bytes(a, b, s, t, r, fused, stored)


def fewest_that_fit(most: int, fits_at) -> int | None:
    """The fewest n in 0 .. most for which `fits_at(n)` holds, None when not even `most` does; memory
    falls as n grows (layers recomputed or offloaded), so the answer is found by bisection."""
    if not fits_at(most):
        return None
    low, high = 0, most
    while low < high:
        mid = (low + high) // 2
        if fits_at(mid):
            high = mid
        else:
            low = mid + 1
    return low


def fewest_layers_that_fit(w: Workload, fits) -> int | None:
    """The fewest layers per chunk N (0 .. the chunk's layers) whose block recompute `fits(workload)`
    says fits; None when not even every layer fits. Time grows with N, so the fewest is the fastest."""
    most = -(-w.arch.num_layers // (w.pp * w.recipe.virtual_stages))
    return fewest_that_fit(most, lambda n: fits(replace(w, recipe=replace(w.recipe, recompute_layers=n))))


def modules_rerun_s(w: Workload, gpu, core_again: float, routed_fwd: float) -> float:
    """Seconds one mean layer's backward spends running again the forward of the Megatron-Core
    modules w.recipe.recompute_modules names (modules.py): `core_again` (the attention core's
    forward) for core_attn, `routed_fwd` (the routed MoE forward of parallel.moe_s: router,
    dispatch, grouped GEMM, combine) for moe, and each module's weight matmuls (at the precision's
    rate, wave-quantised, with their operand bytes as cost.linear_s and layers.layer_gemm_bytes
    count them) and memory-bound kernels."""
    a, b, s, t, r = w.arch, w.mbs, w.local_seq, w.tp, w.recipe
    mods, e, op = r.recompute_modules, r.value_bytes, r.operand_bytes
    rate, memory = gpu.gemm_flops(r.precision), gpu.memory_bytes_per_s * gpu.memory_share(w.params)
    traffic = w.params.gemm_traffic

    def one(kind: str) -> float:
        seconds = M.rerun_bytes(a, kind, b, s, t, r.sequence_parallel, e, mods) / memory
        for c, m, n, k in M.rerun_gemms(a, kind, b, s, t, mods):
            q = L.wave_efficiency(m, n, gpu.streaming_multiprocessors, w.params.matmul_tile)
            seconds += c * (2 * m * n * k / (rate * q) + (op * (m * k + n * k) + e * m * n) * traffic / memory)
        return seconds

    again = (core_again if "core_attn" in mods else 0.0) + (routed_fwd if M.rerun_routed(a, mods) else 0.0)
    return again + B.mean_over_kinds(a, one)
