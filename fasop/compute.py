"""Per-layer compute time from profiles, and the sum of any contiguous run of layers.

A *compute source* answers: how long does layer l take, forward and backward, for one
micro-batch of size b on one GPU of type g at tensor-parallel degree tp? The profile source
(FASOP, MODEL.md §3) answers fwd_bwd_factor x profiled forward time x micro-batch scaling.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache

import numpy as np

from fasop.errors import FasopError
from fasop.specs import ModelSpec


@dataclass(frozen=True, eq=False)
class LayerCosts:
    """Fwd+bwd seconds of every layer on one GPU type, and sums over contiguous runs."""

    seconds: tuple[float, ...]
    run_sums: list[list[float]]
    """run_sums[a][k] = seconds[a] + ... + seconds[a+k], added left to right (float64)."""

    def stage(self, first: int, stop: int) -> float:
        """Seconds of layers first..stop-1, summed left to right in list order (0 if empty)."""
        return self.run_sums[first][stop - first - 1] if stop > first else 0.0

    @cached_property
    def matrix(self) -> np.ndarray:
        """matrix[a, b] = stage(a, b) for b > a, inf elsewhere; shape (L+1, L+1)."""
        n = len(self.seconds)
        out = np.full((n + 1, n + 1), np.inf)
        for a in range(n):
            out[a, a + 1:] = self.run_sums[a][: n - a]
        return out

    @property
    def total(self) -> float:
        return self.stage(0, len(self.seconds))


def stage_times(stages: Sequence[LayerCosts], counts: Sequence[int]) -> list[float]:
    """stages[i].stage(...) of consecutive runs of counts[i] layers from layer 0: each stage's
    seconds, the same entries of `run_sums` without a call per stage."""
    times, first = [], 0
    for costs, count in zip(stages, counts):
        times.append(costs.run_sums[first][count - 1] if count > 0 else 0.0)
        first += count
    return times


class ProfileCompute:
    """Compute source backed by a model's measured profile."""

    def __init__(self, model: ModelSpec):
        self.model = model
        self._costs = lru_cache(maxsize=None)(self._layer_costs)

    def tp_degrees(self, gpus: tuple[str, ...]) -> tuple[int, ...]:
        return self.model.profile.tp_degrees(gpus)

    def check_gpus(self, gpus: tuple[str, ...]) -> None:
        missing = [g for g in gpus if not self.model.profile.tp_degrees((g,))]
        if missing:
            raise FasopError(f"{self.model.path}: profile has no times for GPU {missing[0]!r} "
                             f"(profiled: {sorted({g for g, _ in self.model.profile.forward_s})})")

    def layer_costs(self, gpu: str, tp: int, mbs: int) -> LayerCosts:
        return self._costs(gpu, tp, mbs)

    def _layer_costs(self, gpu: str, tp: int, mbs: int) -> LayerCosts:
        profile = self.model.profile
        forward = profile.forward_s[(gpu, tp)]
        factors = {kind: profile.scaling[(gpu, kind)].factor(mbs) for kind in set(self.model.layer_kinds)}
        # MODEL.md §3: fwd+bwd = 3 x forward, scaled by the micro-batch factor of the layer kind.
        seconds = tuple(profile.fwd_bwd_factor * f * factors[kind] for f, kind in zip(forward, self.model.layer_kinds))
        return LayerCosts(seconds=seconds, run_sums=_run_sums(seconds))


def _run_sums(seconds: tuple[float, ...]) -> list[list[float]]:
    # Row a holds seconds[a:], zero-padded; a cumulative sum along the row adds strictly left
    # to right (np.add.accumulate does not use pairwise summation), so every entry equals the
    # sequential float64 sum FASOP computes for a stage.
    n = len(seconds)
    values = np.asarray(seconds, dtype=np.float64)
    shifted = np.zeros((n, n))
    for a in range(n):
        shifted[a, : n - a] = values[a:]
    return np.cumsum(shifted, axis=1).tolist()
