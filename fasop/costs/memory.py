"""Per-stage peak GPU memory and the fit check.

Per GPU, a stage holds its layers' parameters / tp and activations (model_math.layer_params,
model_math.activation_bytes) with p = min(pp, m) micro-batches in flight. Its bytes are
`param_bytes.full` x parameters + activations; with ZeRO the optimiser state is split over dp:
`param_bytes.zero(dp)` x parameters + activations (`ParamBytes`: the estimator's accounting).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from fasop.core.recent import recent
from fasop.costs import model_math
from fasop.costs.compute import run_sums
from fasop.plans.plan import Plan
from fasop.specs.types import ClusterSpec, ModelSpec


@dataclass(frozen=True)
class ParamBytes:
    """Bytes one parameter takes on a GPU, weights, gradients and optimiser state together."""

    full: int
    """Without ZeRO."""
    replicated: int
    """With ZeRO: the part every data-parallel replica keeps..."""
    sharded: int
    """... and the part split over the dp replicas (integer division, as counted)."""

    def zero(self, dp):
        """With ZeRO over dp replicas (an int or an int array): replicated + sharded // dp."""
        return self.replicated + self.sharded // dp


@dataclass(frozen=True, kw_only=True)
class MemoryEstimate:
    stage_bytes: tuple[float, ...]
    stage_zero_bytes: tuple[float, ...]
    is_oom: bool
    oom_gpumem_gib: float
    """Largest per-stage estimate; when a stage is OOM, overhead x the last OOM stage's (FASOP)."""
    is_zero_oom: bool
    zero_oom_gpumem_gib: float


def stage_elements(plan: Plan, model: ModelSpec, kinds: Sequence[str]) -> tuple[float, float]:
    """(parameters, activation elements) per GPU of a stage holding layers of `kinds`."""
    p = plan.pp if plan.num_microbatches > plan.pp else plan.num_microbatches
    return _elements(model.hidden_size, model.vocab_size, model.sequence_length, model.num_attention_heads,
                     plan.mbs, plan.tp, plan.pp, p, tuple(kinds))


@lru_cache(maxsize=1 << 16)
def _elements(h: int, v: int, s: int, a: int, b: int, tp: int, pp: int, p: int,
              kinds: tuple[str, ...]) -> tuple[float, float]:
    """stage_elements, summed layer by layer in list order; cached: stages of many plans hold
    the same layers with the same micro-batch and degrees."""
    params = act = 0.0
    for kind in kinds:
        params += model_math.layer_params(kind, h, v) / tp
        act += model_math.activation_bytes(kind, h=h, v=v, s=s, a=a, b=b, tp=tp, pp=pp, in_flight=p)
    return params, act


def stage_fits(plan: Plan, model: ModelSpec, cluster: ClusterSpec, kinds: Sequence[str], limit: float, *,
               param_bytes: ParamBytes) -> bool:
    """Does a stage holding layers of `kinds` stay under its memory limit `limit` (bytes; without ZeRO)?"""
    params, act = stage_elements(plan, model, kinds)
    return not cluster.memory_overhead_factor * (param_bytes.full * params + act) > limit


def stage_fit_mask(plan: Plan, model: ModelSpec, cluster: ClusterSpec, limits: Sequence[float], *,
                   param_bytes: ParamBytes) -> np.ndarray:
    """mask[i, a, b]: do layers a..b-1 fit on stage i under limits[i] (bytes; without ZeRO)?
    Shape (pp, L+1, L+1); the same sums and test as `estimate_memory`."""
    need = stage_need(plan, model, cluster, param_bytes=param_bytes)
    limits = np.array(limits)
    return ~(need[None, :, :] > limits[:, None, None])


def stage_need(plan: Plan, model: ModelSpec, cluster: ClusterSpec, *, param_bytes: ParamBytes) -> np.ndarray:
    """need[a, b]: the bytes layers a..b-1 take on a stage (without ZeRO), which `stage_fit_mask`
    compares with each stage's limit."""
    params, act = element_tables(plan, model)
    return cluster.memory_overhead_factor * (param_bytes.full * params + act)


def element_tables(plan: Plan, model: ModelSpec) -> tuple[np.ndarray, np.ndarray]:
    """(params, activations) per GPU of every run of layers: table[a, b] = `stage_elements` of
    layers a..b-1 (0 where b <= a), the same sums layer by layer in list order."""
    tables = memory_tables(model)
    plane = tables.of([plan])[0]
    return tables.params[plane], tables.act[plane]


class _ElementTables:
    """element_tables of one model for every (micro-batch, tp, pp, micro-batches in flight)
    met so far, stacked: plane k of `params` and `act`; `of` finds the plans' planes."""

    def __init__(self, model: ModelSpec):
        self.model = model
        self.planes: dict[tuple, int] = {}
        size = len(model.layer_kinds) + 1
        self.params = self.act = np.zeros((0, size, size))
        self.room = (self.params, self.act)  # what `params` and `act` view the first planes of: grown by doubling

    def of(self, plans: Sequence[Plan]) -> np.ndarray:
        """The plane of each plan, adding the planes of new contexts."""
        return self.of_keys([table_key(p) for p in plans])

    def of_keys(self, keys: Sequence[tuple[int, int, int, int]]) -> np.ndarray:
        """The plane of each `table_key`, adding the planes of new ones."""
        new = [key for key in dict.fromkeys(keys) if key not in self.planes]
        if new:
            most = min(MAX_ELEMENT_TABLES, MAX_ELEMENT_BYTES // (2 * 8 * self.params.shape[-1] ** 2))
            if len(self.planes) + len(new) > most:  # bounded: start over
                self.__init__(self.model)
                new = list(dict.fromkeys(keys))
            m = self.model
            kinds = sorted(set(m.layer_kinds))
            code = np.array([kinds.index(kind) for kind in m.layer_kinds])
            # each new context's elements of one layer of each kind, then of every layer
            per_kind = np.array([[_elements(m.hidden_size, m.vocab_size, m.sequence_length, m.num_attention_heads,
                                            *key, (kind,)) for kind in kinds] for key in new])  # (new, kinds, 2)
            params, act = run_sums(per_kind[:, code, 0]), run_sums(per_kind[:, code, 1])
            count = len(self.planes)
            self.planes.update({key: count + k for k, key in enumerate(new)})
            if count + len(new) > len(self.room[0]):  # (a plane at a time: doubling keeps the copies linear)
                grown = tuple(np.empty((max(count + len(new), min(2 * count, most)),) + params.shape[1:]) for _ in "pa")
                grown[0][:count], grown[1][:count] = self.params, self.act
                self.room = grown
            self.room[0][count:count + len(new)], self.room[1][count:count + len(new)] = params, act
            self.params, self.act = self.room[0][:count + len(new)], self.room[1][:count + len(new)]
        return np.array([self.planes[key] for key in keys], dtype=np.intp)


def table_key(plan: Plan) -> tuple[int, int, int, int]:
    """What a plan's element tables depend on (elements_key)."""
    return elements_key(plan.mbs, plan.tp, plan.pp, plan.num_microbatches)


def elements_key(mbs: int, tp: int, pp: int, m: int) -> tuple[int, int, int, int]:
    """(micro-batch, tp, pp, micro-batches in flight) of m micro-batches on pp stages."""
    return mbs, tp, pp, pp if m > pp else m


MAX_ELEMENT_TABLES = 4096
"""Planes kept per model before they start over (2 x 8 (L+1)^2 bytes each) ..."""
MAX_ELEMENT_BYTES = 1 << 28
"""... or fewer, so that they take at most 256 MiB (a long layer list: limits.LAYERS)."""
_TABLES: dict[tuple, tuple] = {}


def memory_tables(model: ModelSpec) -> _ElementTables:
    """The model's _ElementTables (those of the latest 4 models are kept)."""
    return recent(_TABLES, (model,), lambda: _ElementTables(model))


def rounded(values: np.ndarray, digits: int) -> list[float]:
    """[round(v, digits) for v in values] (Python's round: the decimal value of v rounded half to
    even, then the nearest float), on the array: where v x 10^digits is below 2^30 and at least
    1e-6 away from a half, rint of it is the integer round() finds (the product's rounding error
    is below 2^-23) and its quotient by 10^digits is the float nearest that decimal, as round()
    returns; other values (near a half, large, not finite) go through round()."""
    scale = 10.0 ** digits
    scaled = values * scale
    out = (np.rint(scaled) / scale).tolist()
    with np.errstate(invalid="ignore"):
        clear = (np.abs(scaled) < 2.0**30) & (np.abs(scaled - np.floor(scaled) - 0.5) > 1e-6)
    for k in np.flatnonzero(~clear).tolist():
        out[k] = round(float(values[k]), digits)
    return out
