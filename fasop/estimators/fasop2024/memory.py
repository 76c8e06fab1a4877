"""FASOP-2024's memory report (docs/estimators.md §8): per-stage bytes of a chosen split with
FASOP's bytes per parameter, the OOM flags, and the peak it reports -- the overhead factor x the
*last* out-of-memory stage's bytes when one is, else the largest stage's, in GiB as float32
rounded to 4 decimals.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fasop.costs.memory import MemoryEstimate, ParamBytes, memory_tables, rounded
from fasop.plans.plan import Plan
from fasop.specs.types import GIB, ClusterSpec, ModelSpec

PARAM_BYTES = ParamBytes(full=18, replicated=6, sharded=12)
"""FASOP's bytes per parameter: 16-bit weights and gradients, 32-bit master weights and Adam's two
moments, as FASOP counts them (18); with ZeRO, 6 kept by every replica and 12 split over dp."""
GIB_DIGITS = 4
"""The decimals FASOP rounds its reported GiB to."""


def estimate_memory(plan: Plan, model: ModelSpec, cluster: ClusterSpec, partition: Sequence[int],
                    limits: Sequence[float], *, param_bytes: ParamBytes) -> MemoryEstimate:
    """Per-stage bytes of a split and the OOM flags; limits: each stage's memory limit (bytes)."""
    return estimate_memory_many([plan], model, cluster, np.array([partition]), np.array([limits]),
                                param_bytes=param_bytes)[0]


def estimate_memory_many(plans: Sequence[Plan], model: ModelSpec, cluster: ClusterSpec, partitions: np.ndarray,
                         limits: np.ndarray, *, param_bytes: ParamBytes) -> list[MemoryEstimate]:
    """`estimate_memory` of many plans' splits: partitions and limits (bytes) a row per plan, a
    column per stage; rows of plans with fewer stages padded with stages of no layer and an
    infinite limit. Per stage: bytes = param_bytes.full x params + activations, with ZeRO
    param_bytes.zero(dp) x params + activations; a stage is OOM when overhead x bytes exceeds
    its limit, and the reported peak is then overhead x the last OOM stage's bytes."""
    tables = memory_tables(model)
    planes = tables.of(plans)  # (first: it may add planes)
    sharded = param_bytes.zero(np.array([p.dp for p in plans]))
    stage_bytes, zero_bytes = memory_bytes(tables.params, tables.act, planes, partitions, sharded, param_bytes.full)
    oom, oom_gib, zero_oom, zero_gib = memory_report(stage_bytes, zero_bytes, limits, cluster.memory_overhead_factor)
    return [MemoryEstimate(stage_bytes=tuple(b[:p.pp]), stage_zero_bytes=tuple(z[:p.pp]), is_oom=o,
                           oom_gpumem_gib=g, is_zero_oom=zo, zero_oom_gpumem_gib=zg)
            for p, b, z, o, g, zo, zg in zip(plans, stage_bytes.tolist(), zero_bytes.tolist(), oom.tolist(),
                                             oom_gib, zero_oom.tolist(), zero_gib)]


def memory_bytes(params: np.ndarray, act: np.ndarray, planes: np.ndarray, partitions: np.ndarray,
                 sharded: np.ndarray, full: int) -> tuple[np.ndarray, np.ndarray]:
    """(stage bytes, ZeRO stage bytes) of splits a row each: params, act: element tables
    (planes of [a, b] = layers a..b-1, memory.memory_tables), the split's plane; sharded: its
    bytes per parameter with ZeRO; full: without."""
    edges = np.zeros((len(partitions), partitions.shape[1] + 1), dtype=np.intp)
    np.cumsum(partitions, axis=1, out=edges[:, 1:])
    # only the stages that hold layers: the others' tables read [a, a], 0
    held = partitions > 0
    at = (np.broadcast_to(np.asarray(planes)[:, None], held.shape)[held], edges[:, :-1][held], edges[:, 1:][held])
    params, act = params[at], act[at]
    stage_bytes, zero_bytes = np.zeros(held.shape), np.zeros(held.shape)
    stage_bytes[held] = full * params + act
    zero_bytes[held] = np.broadcast_to(sharded[:, None], held.shape)[held] * params + act
    return stage_bytes, zero_bytes


def memory_report(stage_bytes: np.ndarray, zero_bytes: np.ndarray, limits: np.ndarray, factor: float) -> tuple:
    """(OOM, peak GiB, ZeRO OOM, ZeRO peak GiB) of stage bytes under stage limits (bytes), a
    row per plan: OOM when factor x a stage's bytes exceed its limit (with ZeRO: its bytes);
    the peak is factor x the last OOM stage's bytes, else the largest stage's. The GiB are
    float32 rounded to 4 decimals, as lists."""
    oom, zero_oom = factor * stage_bytes > limits, zero_bytes > limits
    last = stage_bytes.shape[1] - 1
    rows = np.arange(len(stage_bytes))
    oom_gib = np.where(oom.any(axis=1), factor * stage_bytes[rows, last - oom[:, ::-1].argmax(axis=1)] / GIB,
                       stage_bytes.max(axis=1) / GIB)
    zero_gib = np.where(zero_oom.any(axis=1), factor * zero_bytes[rows, last - zero_oom[:, ::-1].argmax(axis=1)] / GIB,
                        zero_bytes.max(axis=1) / GIB)
    both = rounded(_float32(np.concatenate([oom_gib, zero_gib])), GIB_DIGITS)  # (one rounding of both columns)
    return oom.any(axis=1), both[:len(rows)], zero_oom.any(axis=1), both[len(rows):]


def _float32(values: np.ndarray) -> np.ndarray:
    # FASOP reports float32 GiB rounded to 4 decimals (then `rounded`)
    return values.astype(np.float32).astype(float)
