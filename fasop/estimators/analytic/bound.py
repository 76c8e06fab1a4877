"""The analytic estimator's `quick_bound`: a step time no fitting plan of given degrees beats,
whatever its node order, layer split or (allowed) recipe -- from the composition's GPUs alone.

For one recipe, analytic_cost.step is `done + embedding sync + optimizer step` with
`done >= pipeline + stage 0's exposed DP sync` and
  pipeline = m x max_i c_i + (sum_i c_i - max_i c_i)/v = (m - 1/v) x max_i c_i + sum_i c_i / v,
both coefficients >= 0 (m >= 1, v >= 1), each cycle c_i >= n_i x t_i (+ the embedding on the
first stage and the head on the last), sum_i n_i = L layers. Its floors:

- **Best pace.** Stage i runs at its pacing GPU (the least by (bf16 matmul FLOP/s, memory
  bandwidth): analytic_cost.one_stage) with layer time t_i >= t(type), the pacing node type's
  layer time at its own GPU link: with tp <= G the stage's TP group is inside a node, on the
  least GPU link of the stage's nodes, at most the pacing node's (layer times only grow as a
  link slows); with tp > G at an infinitely fast link. Where a faster type sorts lower, the rates
  are first raised to their upper envelope in that order (rate_hat, monotone in it), so a stage's
  rate 1/t_i <= min over its GPUs of rate_hat. For stages of b = tp x dp GPUs, the j-th largest
  stage rate is at most the (j x b)-th largest rate_hat (the GPUs grouped b at a time in
  descending rate_hat): r_j. Then max_i n_i t_i >= the least slowest stage over whole layer
  counts at the rates r_j (`integer_level`: the L-th smallest of the slots k / r_j; it only
  grows as rates fall, and is at least the continuous split's L / sum_j r_j), and >= 1 / r_p
  (every stage holds a layer); sum_i c_i >= L x the fastest layer time + the least embedding
  (at the type's own link, as above) and head times.
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

import heapq
from collections.abc import Sequence

import numpy as np

from fasop.estimators.analytic import cost as C
from fasop.estimators.analytic.hardware import pace_key
from fasop.estimators.analytic.layers import Recipe, Workload
from fasop.estimators.analytic.workloads import TABLE_ROWS
from fasop.specs.catalog import AnalyticParams, GpuType
from fasop.specs.types import NodeType

FAST = C.Link(float("inf"), 0.0)
"""A TP link that costs nothing: layer times at it are at most those at any real link."""


class CompositionBound:
    """quick_bound's floors for one inventory (a multiset of nodes; every plan uses all of them).
    `shared`: a table of the pieces that depend only on a Workload and the set of GPU types (layer
    rates, embedding and head times, the fixed terms, the memory test by stage limits), which the
    estimators of a sweep's compositions share (workloads.shared_tables); the grouping by counts
    is the composition's own."""

    def __init__(self, inventory: Sequence[NodeType], gpus: dict[str, GpuType], params: AnalyticParams,
                 shared: dict | None = None):
        self.params = params
        self.nodes = tuple(inventory)
        self.types = list(dict.fromkeys(n.name for n in self.nodes))
        self.kinds = tuple(sorted(self.types))
        self.kind_of = {n.name: n for n in self.nodes}
        self.gpus = gpus
        self.g = self.nodes[0].gpus_per_node
        self.count = {k: sum(n.name == k for n in self.nodes) * self.g for k in self.types}
        self.fastest = C.Link(max([gpus[k].intra_node_bytes_per_s * gpus[k].intra_node_share(params) for k in self.types]
                                  + [n.inter_node_bytes_per_s * params.link_efficiency["network"] for n in self.nodes]),
                              min(params.intra_node_latency_s, params.inter_node_latency_s))
        self.shared = {} if shared is None else shared
        keys = sorted({pace_key(gpus[k]) for k in self.types})  # the pacing order, equal keys together
        self._pace_order = [[k for k in self.types if pace_key(gpus[k]) == key] for key in keys]
        self._cache: dict = {}
        self._whole: dict = {}
        self._runs: dict = {}

    def bound(self, w: Workload) -> float:
        """The step time no fitting plan of `w`'s degrees and recipe beats on this inventory; inf
        when the memory floor says none fits."""
        return self.floor(w) if self.holds(w) else float("inf")

    def floor(self, w: Workload, whole: bool = True) -> float:
        """`bound` without the memory floor: the pace and the terms that do not shrink. whole=False:
        the continuous split's level for the slowest stage instead of whole layers' (at most
        `floor(w)`, and cheaper)."""
        if whole:
            got = self._whole.get(w)
            if got is None:
                runs, level, a, rest, fixed = self._parts(w)
                got = self._whole[w] = a * max(integer_level(runs, w.arch.num_layers), level) + rest + fixed
            return got
        _, level, a, rest, fixed = self._parts(w)
        return a * level + rest + fixed

    def _parts(self, w: Workload) -> tuple:
        """(stage rate runs, the continuous level, m - 1/v, the pipeline's other terms, the fixed terms):
        floor = (m - 1/v) x the slowest stage + the rest + the fixed terms."""
        got = self._cache.get(w)
        if got is None:
            p, v, m, n = w.pp, w.recipe.virtual_stages, w.num_microbatches, w.arch.num_layers
            rates, fastest_layer, ends, fixed = self._shared(("pace", w, self.kinds), lambda: self._pace(w))
            runs = self._grouped(rates, w.tp * w.cp * w.dp, p)
            level = max(n / sum(r * c for r, c in runs), 1 / runs[-1][0])  # every stage holds a layer
            got = self._cache[w] = (runs, level, m - 1 / v, (n * fastest_layer + ends) / v, fixed)
        return got

    def _shared(self, key: tuple, make):
        """shared[key], made on first use (the table starts over past TABLE_ROWS entries)."""
        got = self.shared.get(key)
        if got is None:
            if len(self.shared) >= TABLE_ROWS:
                self.shared.clear()
            got = self.shared[key] = make()
        return got

    # ------------------------------------------------------------------ pace
    def _pace(self, w: Workload) -> tuple[dict[str, float], float, float, float]:
        """(rate_hat per node type, the fastest layer time, the least embedding and head times, the
        fixed terms) for this set of GPU types."""
        rates = self._rates(w)
        ends = min(sum(C.embedding_s(w, self.gpus[k], self._tp_link(w, k))) for k in self.types) \
            + min(sum(C.head_s(w, self.gpus[k])) for k in self.types)
        return rates, 1 / max(rates.values()), ends, self._fixed(w)

    def _rates(self, w: Workload) -> dict[str, float]:
        """rate_hat per node type: 1 / layer time (fwd + bwd), raised to its upper envelope in
        the pacing order, so that the pacing GPU of a stage has the least rate_hat of the stage."""
        raw = {k: self._shared(("rate", w, k), lambda: 1 / sum(C.layer_s(w, self.gpus[k], self._tp_link(w, k))))
               for k in self.types}
        out, best = {}, 0.0
        for same in self._pace_order:  # equal keys: a stage may be paced by either, so both get the larger
            best = max(best, max(raw[j] for j in same))
            out.update((k, best) for k in same)
        return out

    def _tp_link(self, w: Workload, k: str) -> C.Link:
        """A TP link no stage paced by a GPU of node type k beats: with tp <= G its group is inside
        a node, on the least GPU link of the stage's nodes (hardware.one_stage), at most k's own;
        else FAST."""
        if w.tp > self.g:
            return FAST
        gpu = self.gpus[k]
        return C.Link(gpu.intra_node_bytes_per_s * gpu.intra_node_share(self.params), self.params.intra_node_latency_s)

    def _grouped(self, value: dict[str, float], block: int, stages: int) -> list[tuple[float, int]]:
        """Upper bounds of the stages' least `value`, largest first, as runs (value, stages): GPUs in
        descending value, b a stage (stage j's: the (j + 1) x b-th largest value)."""
        ranked = sorted(((value[k], self.count[k]) for k in self.types), key=lambda vc: -vc[0])
        runs: list[tuple[float, int]] = []
        done = seen = 0  # stages grouped; GPUs of the values taken so far
        for v, count in ranked:
            seen += count
            here = min(seen // block, stages) - done  # stages whose last GPU has this value
            if here > 0:
                if runs and runs[-1][0] == v:
                    runs[-1] = (v, runs[-1][1] + here)
                else:
                    runs.append((v, here))
                done += here
        return runs

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
        return self._shared(("holds", w, self._limit_runs(w.tp * w.cp * w.dp, p)), lambda: self._holds(w))

    def _limit_runs(self, block: int, stages: int) -> tuple[tuple[float, int], ...]:
        """The stages' limit upper bounds (stage limits grouped as `_grouped`), as (limit, stages)
        largest first."""
        key = (block, stages)
        runs = self._runs.get(key)
        if runs is None:
            limits = {k: self.kind_of[k].memory_limit_bytes for k in self.types}
            runs = self._runs[key] = tuple(self._grouped(limits, block, stages))
        return runs

    def _holds(self, w: Workload) -> bool:
        runs = self._limit_runs(w.tp * w.cp * w.dp, w.pp)
        n = w.arch.num_layers
        caps = np.column_stack([stage_caps(w, u) for u, _ in runs])
        if caps[:, 0].min() < 1:  # a stage that holds no layer even at the largest limit
            return False
        if len(runs) == 1 or int(caps[:, 0].sum()) < n:
            return int(caps[:, 0].sum()) >= n
        return assignment_ceiling(caps, [count for _, count in runs]) >= n


def integer_level(runs: Sequence[tuple[float, int]], layers: int) -> float:
    """At most the least max_i n_i / r_i over whole layer counts n_i >= 0 summing to `layers`, for
    stage rates r_i (layers a second) given as runs (rate, stages): the `layers`-th smallest of the
    slots k / r_i (k >= 1), as the greedy split fills them, a run's stages a slot value at once. It
    starts from the counts of the continuous level L / sum r, each lowered while its slot is above
    the level (rounding), so that all their slots are at most the least's."""
    level = layers / sum(r * c for r, c in runs)
    counts = []
    for r, _ in runs:
        k = int(level * r)
        while k > 0 and k / r > level:
            k -= 1
        counts.append(k)
    filled = sum(k * c for k, (_, c) in zip(counts, runs))
    if filled > layers:  # (not seen: counts at the level fill at most the layers) one slot fewer each
        counts = [max(0, k - 1) for k in counts]
        filled = sum(k * c for k, (_, c) in zip(counts, runs))
    slot = max(k / r for k, (r, _) in zip(counts, runs))  # the slots filled: all at most the least
    while filled < layers:
        slot, j = min(((counts[j] + 1) / runs[j][0], j) for j in range(len(runs)))
        counts[j] += 1
        filled += runs[j][1]
    return slot


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


def least_bound(bounds: "CompositionBound", workloads: Sequence[tuple[Recipe, Workload]],
                limit: float = float("inf")) -> float:
    """The least bound over the recipes a search may choose (inf when none can fit), lowered by
    ROUNDING: the floor and the estimate sum the same terms in different orders, so a plan at the
    floor can come out an ulp below it (a pruning bound must never be above a plan). The recipes'
    pace floors are taken in ascending order (each first at the continuous split, then at whole
    layers) and the first whole one whose memory floor holds is the least; one above `limit` is
    returned as it is (above `limit`, at most the least bound): the rest is then not computed."""
    heap = [(bounds.floor(w, whole=False), False, k) for k, (_, w) in enumerate(workloads)]
    heapq.heapify(heap)
    while heap:  # the least first; a continuous split's floor is made whole before it counts
        floor, whole, k = heapq.heappop(heap)
        value = floor * (1 - ROUNDING)  # x (1 - ROUNDING) is monotone: the least floor's is the least value
        if value > limit:
            return value
        if not whole:
            heapq.heappush(heap, (bounds.floor(workloads[k][1]), True, k))
        elif bounds.holds(workloads[k][1]):
            return value
    return float("inf")


ROUNDING = 1e-9
"""Relative slack of least_bound for floating-point summation order (~1e4 ulps: no pruning power lost)."""
