"""Per-layer compute time, and the sum of any contiguous run of layers.

A *compute source* (`ComputeSource`) answers: how long does layer l take, forward and backward
separately, for one micro-batch of size b on one GPU of type g at tensor-parallel degree tp
(`layer_times`)? The profile source (`ProfileCompute`) reads a model's measured forward times:
a layer's forward + backward is the spec's `fwd_bwd_factor` x its profiled forward time x the
micro-batch scaling of its kind (`layer_costs`), of which the forward is the declared share
1 / fwd_bwd_factor (the profile holds forward times) and the backward the rest.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
import functools
import operator
from functools import cached_property, lru_cache
from typing import Protocol

import numpy as np

from fasop.core.errors import FasopError
from fasop.core.recent import recent
from fasop.specs.types import ModelSpec


@dataclass(eq=False)
class LayerCosts:
    """Fwd+bwd seconds of every layer on one GPU type, and sums over contiguous runs (not frozen:
    it caches its sums, `matrix`, `run_sums`, `total`, made on first use; equal by identity)."""

    seconds: tuple[float, ...]

    def stage(self, first: int, stop: int) -> float:
        """Seconds of layers first..stop-1, summed left to right in list order (0 if empty)."""
        return self.run_sums[first][stop - first - 1] if stop > first else 0.0

    @cached_property
    def matrix(self) -> np.ndarray:
        """matrix[a, b] = seconds of layers a..b-1 for b > a, summed left to right in list order
        (float64), inf elsewhere; shape (L+1, L+1)."""
        out = run_sums(np.array(self.seconds))
        out[~_above_diagonal(len(self.seconds) + 1)] = np.inf
        return out

    @staticmethod
    def make_matrices(costs: Sequence["LayerCosts"]) -> None:
        """Makes the `matrix` of each of `costs` that has none yet, all at once: one cumulative
        sum over all of them, the same sums as one by one."""
        unmade = [c for c in costs if "matrix" not in c.__dict__]
        if unmade:
            matrices = run_sums(np.array([c.seconds for c in unmade]))
            matrices[:, ~_above_diagonal(matrices.shape[-1])] = np.inf
            for c, matrix in zip(unmade, matrices):
                c.__dict__["matrix"] = matrix  # what the cached_property would hold

    @cached_property
    def run_sums(self) -> list[list[float]]:
        """run_sums[a][k] = seconds[a] + ... + seconds[a+k] (k < L - a): `matrix` as lists, for
        Python loops."""
        return [row[a + 1:] for a, row in enumerate(self.matrix.tolist())]

    @cached_property
    def total(self) -> float:
        """Seconds of the whole layer list, added left to right from 0.0 (`matrix`[0, L]; not
        Python's sum, which compensates its rounding from Python 3.12 on)."""
        return functools.reduce(operator.add, self.seconds, 0.0)


def run_sums(values: np.ndarray) -> np.ndarray:
    """table[..., a, b] = values[..., a] + ... + values[..., b-1] added left to right from 0.0
    (b > a), 0.0 elsewhere; shape (..., n+1, n+1) for values of shape (..., n): the sequential
    float64 sums FASOP computes for a stage. Row a is 0 up to column a and then the values from a
    on, so a cumulative sum along it (np.add.accumulate: strictly left to right, not pairwise)
    adds exactly as a loop does: 0.0 + 0.0 = 0.0, then 0.0 + values[a] = values[a], then
    + values[a+1], ..."""
    values = np.asarray(values, dtype=float)
    rows = np.concatenate([np.zeros(values.shape[:-1] + (1,)), values], axis=-1)[..., None, :]
    out = np.where(_above_diagonal(rows.shape[-1]), rows, 0.0)
    return np.cumsum(out, axis=-1, out=out)  # (in place: one large array fewer)


@lru_cache(maxsize=64)
def _above_diagonal(size: int) -> np.ndarray:
    """mask[a, b] = b > a, shape (size, size); read-only (shared)."""
    mask = np.triu(np.ones((size, size), dtype=bool), k=1)
    mask.flags.writeable = False
    return mask


def stage_times(stages: Sequence[LayerCosts], counts: Sequence[int]) -> list[float]:
    """stages[i].stage(...) of consecutive runs of counts[i] layers from layer 0: each stage's
    seconds, the same entries of `run_sums` without a call per stage."""
    times, first = [], 0
    for costs, count in zip(stages, counts):
        times.append(costs.run_sums[first][count - 1] if count > 0 else 0.0)
        first += count
    return times


@dataclass(frozen=True)
class LayerTimes:
    """Seconds of every layer of the layer list for one micro-batch on one GPU, forward and
    backward apart."""

    forward_s: tuple[float, ...]
    backward_s: tuple[float, ...]


class ComputeSource(Protocol):
    """Where per-layer compute times come from (a profile, or FLOPs against a GPU's peak)."""

    def tp_degrees(self, gpus: tuple[str, ...]) -> tuple[int, ...]:
        """The tensor-parallel degrees it has times for on every one of `gpus`."""

    def layer_times(self, gpu: str, tp: int, mbs: int) -> LayerTimes:
        """Each layer's forward and backward seconds for a micro-batch of `mbs` on one `gpu` at `tp`."""


class ProfileCompute:
    """Compute source backed by a model's measured profile (forward times per layer)."""

    def __init__(self, model: ModelSpec):
        self.model = model
        self._costs = lru_cache(maxsize=None)(self._layer_costs)
        self._planes: dict[tuple[str, int, int], int] = {}
        size = len(model.layer_kinds) + 1
        self.table = np.zeros((0, size, size))
        """`matrix` of every LayerCosts given a plane (`planes`), stacked: plane k is table[k]."""

    def planes(self, keys: Sequence[tuple[str, int, int]]) -> list[int]:
        """The plane in `table` of the LayerCosts of each (gpu, tp, mbs), added if new: the
        matrices of the new ones made at once (one cumulative sum over all of them, the same sums
        as one by one; LayerCosts.matrix is a cached_property), one concatenation."""
        new = [key for key in dict.fromkeys(keys) if key not in self._planes]
        if new:
            costs = [self.layer_costs(*key) for key in new]
            LayerCosts.make_matrices(costs)
            self._planes.update({key: len(self._planes) + k for k, key in enumerate(new)})
            self.table = np.concatenate([self.table] + [c.matrix[None] for c in costs])
        return [self._planes[key] for key in keys]

    @classmethod
    def of(cls, model: ModelSpec) -> "ProfileCompute":
        """The model's ProfileCompute, shared by every estimator of the model in this process
        (a pareto sweep makes one per composition); those of the latest 4 models are kept."""
        return recent(_SOURCES, (model,), lambda: cls(model))

    def tp_degrees(self, gpus: tuple[str, ...]) -> tuple[int, ...]:
        return self.model.profile.tp_degrees(gpus)

    def check_gpus(self, gpus: tuple[str, ...]) -> None:
        missing = [g for g in gpus if not self.model.profile.tp_degrees((g,))]
        if missing:
            raise FasopError(f"{self.model.path}: profile has no times for GPU {missing[0]!r} "
                             f"(profiled: {sorted({g for g, _ in self.model.profile.forward_s})})")

    def layer_costs(self, gpu: str, tp: int, mbs: int) -> LayerCosts:
        """Each layer's forward + backward seconds (fwd_bwd_factor x profiled forward x scaling)."""
        return self._costs(gpu, tp, mbs)

    @property
    def forward_share(self) -> float:
        """The forward's share of a layer's forward + backward: the profile holds forward times,
        and forward + backward is fwd_bwd_factor x them."""
        return 1 / self.model.profile.fwd_bwd_factor

    def layer_times(self, gpu: str, tp: int, mbs: int) -> LayerTimes:
        """`layer_costs` split by the forward share: forward = fwd+bwd / fwd_bwd_factor, backward
        the rest, (fwd_bwd_factor - 1) x forward."""
        k = self.model.profile.fwd_bwd_factor
        seconds = self.layer_costs(gpu, tp, mbs).seconds
        return LayerTimes(forward_s=tuple(t / k for t in seconds), backward_s=tuple((k - 1) * t / k for t in seconds))

    def _layer_costs(self, gpu: str, tp: int, mbs: int) -> LayerCosts:
        profile = self.model.profile
        forward = profile.forward_s[(gpu, tp)]
        factors = {kind: profile.scaling[(gpu, kind)].factor(mbs) for kind in set(self.model.layer_kinds)}
        # fwd+bwd = fwd_bwd_factor x the profiled forward, scaled by the micro-batch factor of the layer kind
        seconds = tuple(profile.fwd_bwd_factor * f * factors[kind] for f, kind in zip(forward, self.model.layer_kinds))
        return LayerCosts(seconds=seconds)


_SOURCES: dict[tuple, tuple] = {}
