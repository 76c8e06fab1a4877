"""The analytic estimator's `quick_bound`: a step time no fitting plan of given degrees beats,
whatever its node order, layer split or (allowed) recipe -- from the composition's GPUs alone.

For one recipe, analytic_cost.step is `done + embedding sync + optimizer step` with
`done >= pipeline + stage 0's exposed DP sync` and
  pipeline = m x max_i c_i + (sum_i c_i - max_i c_i)/v = (m - 1/v) x max_i c_i + sum_i c_i / v,
both coefficients >= 0 (m >= 1, v >= 1), each cycle c_i >= n_i x t_i (+ the embedding on the
first stage and the head on the last), sum_i n_i = L layers. Its floors:

- **Best pace.** Stage i runs at its pacing GPU (the least by (bf16 matmul FLOP/s, memory
  bandwidth): analytic_cost.one_stage) with layer time t_i >= t(type) at an infinitely fast TP
  link. Where a faster type sorts lower, the rates are first raised to their upper envelope in
  that order (rate_hat, monotone in it), so a stage's rate 1/t_i <= min over its GPUs of rate_hat.
  For stages of b = tp x dp GPUs, sum_i min is largest when the GPUs are grouped b at a time in
  descending rate_hat (the j-th largest group minimum is at most the (j x b)-th largest rate):
  R. Then max_i n_i t_i >= L / sum_i (1/t_i) >= L / R (the continuous split that equalises
  stages), and sum_i c_i >= L x the fastest layer time + the least embedding and head times.
- **Memory floor.** Stage i holds at most max_layers(stage i, its limit) layers, its limit the
  least of its nodes'. Grouped the same way in descending limit, the j-th stage limit is at most
  the (j x b)-th largest; the best assignment of those limits to stage positions must hold L
  layers (`assignment_ceiling`: at least the best's), else the recipe fits no placement: with no
  such recipe the bound is inf (no plan of these degrees fits; the search keeps only fitting ones).
- **Terms that do not shrink.** The optimizer step over the largest stage's share (>= the mean
  share of all parameters) at the fastest memory; without `overlap_grad_reduce`, stage 0's
  exposed DP sync, (1 - dp_overlap) of its gradients (>= one layer and the embedding) reduced over
  the fastest link any group could use; the tied embedding's all-reduce over that link.

With one GPU type and v = 1 the pipeline floor is (m + (p - 1)/v) x L x t / p, the homogeneous 1F1B
step of Narayanan et al. 2021 Eq. 1. Profiled models get 0 (a profile can be faster than the analytic
floor). tests/test_analytic_bound.py checks the bound against every fitting plan of generated catalogs.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fasop.estimators.analytic import cost as C
from fasop.estimators.analytic.layers import Recipe, Workload
from fasop.specs.catalog import AnalyticParams, GpuType
from fasop.specs.types import NodeType

FAST = C.Link(float("inf"), 0.0)
"""A TP link that costs nothing: layer times at it are at most those at any real link."""


class CompositionBound:
    """quick_bound's floors for one inventory (a multiset of nodes; every plan uses all of them)."""

    def __init__(self, inventory: Sequence[NodeType], gpus: dict[str, GpuType], params: AnalyticParams):
        self.params = params
        self.nodes = tuple(inventory)
        self.types = list(dict.fromkeys(n.name for n in self.nodes))
        self.kind_of = {n.name: n for n in self.nodes}
        self.gpus = gpus
        self.g = self.nodes[0].gpus_per_node
        self.count = {k: sum(n.name == k for n in self.nodes) * self.g for k in self.types}
        self.fastest = C.Link(max([gpus[k].intra_node_bytes_per_s * gpus[k].intra_node_share(params) for k in self.types]
                                  + [n.inter_node_bytes_per_s * params.link_efficiency["network"] for n in self.nodes]),
                              min(params.intra_node_latency_s, params.inter_node_latency_s))
        self._cache: dict = {}

    def bound(self, w: Workload) -> float:
        """The step time no fitting plan of `w`'s degrees and recipe beats on this inventory; inf
        when the memory floor says none fits."""
        key = (w.tp, w.dp, w.pp, w.mbs, w.num_microbatches, w.recipe, w.cp, w.ep, w.etp, w.shard)
        if key not in self._cache:
            self._cache[key] = self._bound(w) if self.holds(w) else float("inf")
        return self._cache[key]

    # ------------------------------------------------------------------ pace
    def _rates(self, w: Workload) -> dict[str, float]:
        """rate_hat per node type: 1 / layer time (fwd + bwd), raised to its upper envelope in
        the pacing order, so that the pacing GPU of a stage has the least rate_hat of the stage."""
        raw = {k: 1 / sum(C.layer_s(w, self.gpus[k], FAST)) for k in self.types}
        order = sorted(self.types, key=lambda k: (self.gpus[k].matmul_flops("bf16"), self.gpus[k].memory_bytes_per_s))
        out, best = {}, 0.0
        for k in order:  # equal keys: a stage may be paced by either, so both get the larger
            same = [j for j in order if _pace_key(self.gpus[j]) == _pace_key(self.gpus[k])]
            best = max(best, max(raw[j] for j in same))
            out[k] = best
        return out

    def _grouped(self, value: dict[str, float], block: int, stages: int) -> list[float]:
        """Upper bounds of the stages' least `value`, largest first: GPUs in descending value, b a stage."""
        ranked = np.repeat([value[k] for k in self.types], [self.count[k] for k in self.types])
        ranked = -np.sort(-ranked)
        return [float(ranked[(j + 1) * block - 1]) for j in range(stages)]

    def _bound(self, w: Workload) -> float:
        p, v, m, n = w.pp, w.recipe.virtual_stages, w.num_microbatches, w.arch.num_layers
        rates = self._rates(w)
        total_rate = sum(self._grouped(rates, w.tp * w.cp * w.dp, p))
        fastest_layer = 1 / max(rates.values())
        ends = min(sum(C.embedding_s(w, self.gpus[k], FAST)) for k in self.types) \
            + min(sum(C.head_s(w, self.gpus[k])) for k in self.types)
        worst = max(n / total_rate, fastest_layer)
        pipeline = (m - 1 / v) * worst + (n * fastest_layer + ends) / v
        return pipeline + self._fixed(w)

    def _fixed(self, w: Workload) -> float:
        """Optimizer step, exposed DP sync of stage 0 and the tied embedding's all-reduce floors (none
        for a plan with context or expert parallelism or HSDP, whose state shards and groups they
        do not follow: 0 stays a floor)."""
        p, a = w.pp, w.arch
        if w.cp > 1 or w.ep > 1 or w.etp > 1 or w.shard or a.moe is not None:
            return 0.0
        if p > 1:
            total = C.stage_params(w, a.num_layers, True, False) + C.stage_params(w, 0, False, True)
            first = C.stage_params(w, 1, True, False)
        else:
            total = first = C.stage_params(w, a.num_layers, True, True)
        best = max(self.types, key=lambda k: self.gpus[k].memory_bytes_per_s * self.gpus[k].memory_share(self.params))
        opt = C.optimizer_s(w, total / p, self.gpus[best])
        dp = 0.0
        if not self.params.overlap_grad_reduce:
            dp = (1 - self.params.dp_overlap) * C.dp_sync_s(w, first, self.fastest)
        emb = 0.0
        if a.tied_embeddings and p > 1:
            table = a.vocab_size * a.embed_width / w.tp * self.params.gradient_reduce_bytes[w.recipe.precision]
            emb = C.all_reduce_s(table, 2, self.fastest)
        return opt + dp + emb

    # ------------------------------------------------------------------ memory
    def holds(self, w: Workload) -> bool:
        """Whether some placement's stages could hold all layers under `w`'s recipe (a necessary
        condition of analytic_cost.split_layers' capacity test)."""
        p, n = w.pp, w.arch.num_layers
        if n < p:
            return False
        limits = {k: self.kind_of[k].memory_limit_bytes for k in self.types}
        upper = self._grouped(limits, w.tp * w.cp * w.dp, p)
        distinct = sorted(set(upper), reverse=True)
        caps = np.column_stack([stage_caps(w, u) for u in distinct])
        if caps[:, 0].min() < 1:  # a stage that holds no layer even at the largest limit
            return False
        if len(distinct) == 1 or int(caps[:, 0].sum()) < n:
            return int(caps[:, 0].sum()) >= n
        return assignment_ceiling(caps, [upper.count(u) for u in distinct]) >= n


def assignment_ceiling(caps: np.ndarray, counts: list[int]) -> int:
    """At least the most layers any assignment of the stage limits to stages holds: caps[i, j]
    is stage i's layers at limit j (limits largest first, non-increasing along j), counts[j] the
    stages with limit j. Each stage holds its layers at the least limit plus the steps up to its
    own; at most counts[0] + ... + counts[j] stages get limit j or more, so the step from j + 1 to j
    is summed over at most that many stages: the largest ones."""
    steps = caps[:, :-1] - caps[:, 1:]
    ceiling = int(caps[:, -1].sum())
    for j in range(steps.shape[1]):
        ceiling += int(np.sort(steps[:, j])[::-1][:sum(counts[:j + 1])].sum())
    return ceiling


_CAPS: dict = {}
"""stage_caps by (Workload object, limit): the estimators of a sweep share Workloads
(workloads.shared_workload), so a composition reuses what another computed."""


def stage_caps(w: Workload, limit: float) -> np.ndarray:
    """Each stage's most layers (at most all L) within `limit` bytes (analytic_cost.max_layers)."""
    key = (w, limit)
    got = _CAPS.get(key)
    if got is None:
        if len(_CAPS) >= 1 << 16:
            _CAPS.clear()
        n = w.arch.num_layers
        got = _CAPS[key] = np.array([C.max_layers(w, i, limit, n) for i in range(w.pp)])
    return got


def _pace_key(gpu: GpuType) -> tuple[float, float]:
    return gpu.matmul_flops("bf16"), gpu.memory_bytes_per_s


def least_bound(bounds: "CompositionBound", workloads: Sequence[tuple[Recipe, Workload]]) -> float:
    """The least bound over the recipes a search may choose (inf when none can fit), lowered by
    ROUNDING: the floor and the estimate sum the same terms in different orders, so a plan at the
    floor can come out an ulp below it (a pruning bound must never be above a plan)."""
    return min((bounds.bound(w) for _, w in workloads), default=float("inf")) * (1 - ROUNDING)


ROUNDING = 1e-9
"""Relative slack of least_bound for floating-point summation order (~1e4 ulps: no pruning power lost)."""
