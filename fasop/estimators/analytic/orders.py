"""The analytic estimator's prefix bounds for orders.OrderSearch (the estimators.PrefixBounds capability).

A plan's analytic estimate depends on its node order only through its stages' hardware
(`AnalyticEstimator.signature`: each stage's GPU, TP / DP links, link to the next stage, memory
limit), and stage i's hardware is fixed once the nodes of stage i and the first node of stage
i + 1 are placed. A prefix's *state* is those stages' hardware and the nodes placed since.

Its *bound*, a step time no completion that fits in memory beats, is the least over the recipes
that could fit (`AnalyticEstimator.workloads`) of (analytic_cost.step, 1F1B, v chunks):

    pipeline = m x max_i c_i + (sum_i c_i - max_i c_i) / v = (m - 1/v) x max_i c_i + sum_i c_i / v
    c_i      = n_i x tau_i + e_i

where n_i >= 1 are stage i's layers, tau_i the fwd + bwd of one layer (with ZeRO-3's per-layer
weight gathers) and e_i the rest of the cycle (embedding on stage 0, head on the last, ZeRO-3's
constant gathers, v x the p2p in and out). The step adds the DP sync, embedding sync and
optimizer, all >= 0, so it is at least `pipeline` + a floor of the optimizer step (the slowest stage's:
at least that of one layer on the first and on the last stage and of L / p layers somewhere, at the
inventory's fastest memory). Any split that fits puts n_i <= cap_i layers on
stage i (analytic_cost.max_layers of its memory limit at its position), so max_i c_i is at least
the L-th smallest of the *slots* {e_i + k tau_i : 1 <= k <= cap_i} and at least every e_i + tau_i;
sum_i c_i is at least the L cheapest layer times plus the e_i (slots.py tightens both: a layer on
every stage, and only the slots under the level where the slowest stage is at it).

Placed stages enter with their own tau, e and cap. The stages not yet fixed get, from the nodes
they must be made of (the tail and the nodes left), an optimistic multiset: a stage runs at the
pace of the slowest of its nodes (the GPU stage_hardware picks, on the least link), so the
fastest block of nodes sorted by pace gives a pace no stage of any completion beats, the next
block the second, and so on (`_paces`); each unfixed position gets the cap of the roomiest kind
and the least e of any unfixed position. Pairing the fastest paces with the largest caps
maximises, for every level, the layers the unfixed stages can take below it (min(cap, x) is
supermodular), so its L-th slot is at most that of any completion. Every quantity is computed
by analytic_cost's own functions, so the bound moves with the cost model.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from fasop.estimators.analytic import cost as C
from fasop.estimators.analytic import order_classes as OC
from fasop.estimators.analytic.slots import slot_floor
from fasop.plans.plan import Plan
from fasop.specs.types import NodeType

# `AnalyticEstimator` in annotations: the estimator (estimator.py) that calls in; not imported, as it imports this module

MAX_SUBSET_KINDS = 8
"""Kinds up to which a stage's pace is bounded per set of node kinds (2^k sets); past it every
unfixed stage takes the least pace of any kind set."""
AFTER_ROUNDING = 1e-12  # relative slack of a floor with the optimizer's added (the step sums them in another order)
CACHE_ENTRIES = 1 << 16
"""Cached arrays per plan shape, of fixed-stage prefixes and of the rest (then started again)."""


class AnalyticPrefixBounds:
    """The fold over node positions of one plan shape (degrees and micro-batch)."""

    def __init__(self, estimator: AnalyticEstimator, shape: Plan, kinds: Sequence[NodeType]):
        self.e, self.shape, self.kinds = estimator, shape, tuple(kinds)
        self.g = shape.placement[0].gpus_per_node
        self.p, self.m, self.L = shape.pp, shape.num_microbatches, estimator.arch.num_layers
        self.most = self.L - (self.p - 1)
        pairs = estimator.workloads(shape)
        self.recipes, self.ws = [r for r, _ in pairs], [w for _, w in pairs]
        self.v = np.array([float(r.virtual_stages) for r in self.recipes])
        self.kind_of = {k.name: i for i, k in enumerate(self.kinds)}
        self.gpus = [estimator.gpus[k.name] for k in self.kinds]
        self.size = shape.mbs * estimator.model.sequence_length * estimator.arch.hidden_size * C.ACT_BYTES / (shape.tp * shape.cp)
        block = shape.tp * shape.cp * shape.dp
        self.per_stage = block // self.g if block % self.g == 0 else 0
        """Nodes each stage spans (0: not a whole number)."""
        self.per_node = self.g // block if self.g % block == 0 else 0
        """Stages each node holds (0: not a whole number)."""
        self._sigs: list = []  # stage hardware by id (states hold ids: cheap to hash)
        self._sig_ids: dict = {}
        self._hardware: dict = {}
        self._cache: dict = {}
        self._fixed: dict = {}
        self._all_rows = np.arange(len(self.ws))
        self._levels: dict = {}  # 1..k as floats, by k
        self._floors: dict = {}  # per recipe row, by fixed stages, nodes left to place, rows
        self._classes: dict = {}  # class_info by (counts, first kind, last kind)
        self.symmetric = self.per_stage > 2 and self._order_free()
        """Whether a stage's hardware is the same for any order of its nodes before the last
        (one_stage takes minima over them; a tie between two GPUs as the slowest would not be)."""
        self._after = np.array([self._optimizer_floor(w) for w in self.ws])  # per recipe, added to its floor
        self._rho = self._kind_paces()
        self._caps = self._kind_caps()
        self._p2p_best = self._best_p2p()
        self._ends = self._best_ends()

    # ------------------------------------------------------------------ fold
    def start(self):
        return (), ()

    def extend(self, state, position: int, node: NodeType):
        """State: (ids of the fixed stages' hardware, kind indices of the nodes placed since)."""
        done, tail = state
        tail = tail + (self.kind_of[node.name],)
        sh, p = self.shape, self.p
        while len(done) < p:
            s = len(done)
            first, last, after = C.stage_span(sh.tp, sh.cp * sh.dp, p, s, self.g)
            if max(last, after) > position:
                break
            done = done + (self._stage_id(s, tail[:max(last, after) - first + 1], first),)
            start = C.stage_span(sh.tp, sh.cp * sh.dp, p, s + 1, self.g)[0] if s + 1 < p else position + 1
            tail = tail[start - first:]
        if self.symmetric and len(done) < p and len(tail) > 1:
            # a stage's hardware depends on its nodes before its last one only through minima
            # (analytic_cost.one_stage): their order does not matter, so the state sorts them
            first, last, _ = C.stage_span(sh.tp, sh.cp * sh.dp, p, len(done), self.g)
            inner = last - first
            tail = tuple(sorted(tail[:inner])) + tail[inner:]
        return done, tail

    def _stage_id(self, s: int, kinds: tuple[int, ...], first: int) -> int:
        """The id of stage s's hardware on nodes of these kinds from node `first` on."""
        key = (s, kinds)
        got = self._hardware.get(key)
        if got is None:
            nodes = _Window(tuple(self.kinds[k] for k in kinds), first)
            gpus = _Window(tuple(self.gpus[k] for k in kinds), first)
            sh = self.shape
            hw = C.one_stage(sh.tp, sh.cp * sh.dp, self.p, s, self.g, nodes, gpus, self.e.params)
            sig = (hw.gpu.name, hw.tp_link, hw.dp_link, hw.next_link, hw.memory_limit_bytes, hw.groups, hw.domain_nodes)
            got = self._sig_ids.get(sig)
            if got is None:
                got = self._sig_ids[sig] = len(self._sigs)
                self._sigs.append((hw, sig))
            self._hardware[key] = got
        return got

    def _order_free(self) -> bool:
        """Whether swapping two of stage 0's first nodes never changes its hardware, whatever its
        last node and the next stage's first (one_stage's result, pair by pair of kinds)."""
        first, last, after = C.stage_span(self.shape.tp, self.shape.cp * self.shape.dp, self.p, 0, self.g)
        n = len(self.kinds)
        for a, b, c in itertools.product(range(n), repeat=3):
            rest = (a,) * (last - first - 2) + (c,) * (max(last, after) - last + 1)
            if self._stage_id(0, (a, b) + rest, first) != self._stage_id(0, (b, a) + rest, first):
                return False
        return True

    # ------------------------------------------------------------------ bound
    def bound(self, state, placed: int, left) -> float:
        return self.bound_hinted(state, placed, left, None, float("inf"))[0]

    def class_bound(self, counts: tuple[int, ...], prefix: tuple[int, ...], last: int) -> float | None:
        """The step time of every fitting order of these nodes per kind (`counts`) that begins with
        the kinds `prefix` and ends with kind `last`, where certified, else None (order_classes.py)."""
        return OC.class_bound(self, counts, prefix, last)

    def class_info(self, counts: tuple[int, ...], first: int, last: int):
        """order_classes.class_info, kept per (counts, first kind, last kind)."""
        key = (counts, first, last)
        if key not in self._classes:
            self._classes[key] = OC.class_info(self, counts, first, last)
        return self._classes[key]

    def bound_hinted(self, state, placed: int, left, hint, threshold: float):
        """(bound, hint for the prefix's children). `hint`: the recipes (rows) whose floor the
        parent prefix left at most its threshold, None for all; rows above `threshold` (which
        never grows) cannot give a completion among the kept plans and are dropped."""
        if self.e.model.profile is not None:  # profiled layers may be faster than the analytic floor
            return 0.0, None
        rows = self._all_rows if hint is None else hint
        done, tail = state
        d = len(done)
        # the unfixed stages' columns depend on the nodes not in fixed stages (tail and left) only
        # as a multiset, but with per_node on which one the tail starts with (_paces): a child
        # that fixes no stage mostly has its parent's floors
        pool = tuple(n + tail.count(k) for k, n in enumerate(left))
        key = (done, pool, tail[:1] if self.per_node and not self.per_stage else (), rows.tobytes())
        floors = self._floors.get(key)
        if floors is None:
            columns = self._fixed_columns(done)  # (tau, e, cap) x recipe x stage
            if d < self.p:
                columns = np.concatenate([columns, self._open_columns(d, tail, left, done[-1] if d else None)], axis=2)
            columns = columns[:, rows]
            floors = self._floor(columns[0], columns[1], columns[2], rows, threshold)
            if len(self._floors) > CACHE_ENTRIES:
                self._floors.clear()
            self._floors[key] = floors
        return float(floors.min()), rows[floors <= threshold]

    def _floor(self, tau: np.ndarray, extra: np.ndarray, cap: np.ndarray, rows: np.ndarray,
               threshold: float = float("inf")) -> np.ndarray:
        """Per recipe row: the pipeline floor of slots.slot_floor over these stage columns (the
        simple one where all are above `threshold`, which never grows: cached, it stays above)."""
        after = self._after[rows]
        floor = slot_floor(tau, extra, cap, self.L, self.m, self.v[rows], self._levels, threshold - after)
        return (floor + after) * (1 - AFTER_ROUNDING)

    def _optimizer_floor(self, w) -> float:
        """The optimizer step no completion's beats: cost.step adds the slowest stage's, whose states grow with its
        layers (memory.stage_param_split): 1 layer at least on the first and last stage, L / p on some (at the fastest
        memory), and 1 on a stage the inventory's least GPU paces (hardware.one_stage key; docs/partitions.md)."""
        best = max(self.gpus, key=lambda g: g.memory_bytes_per_s * g.memory_share(w.params))
        low = min(map(C.pace_key, self.gpus))
        least = [g for g in self.gpus if C.pace_key(g) == low]   # ties: each may pace it

        def opt(layers: int, first: bool, last: bool, gpu=best) -> float:
            dense, routed = C.stage_param_split(w, layers, first, last)
            return C.optimizer_s(w, dense + routed, gpu, routed)

        if self.p == 1:
            return opt(self.L, True, True)
        most, roles = -(-self.L // self.p), ((True, False), (False, True)) + (((False, False),) if self.p > 2 else ())
        return max(opt(1, True, False), opt(1, False, True), min(opt(most, *r) for r in roles),
                   min(opt(1, *r, g) for r in roles for g in least))

    # ------------------------------------------------------------------ fixed stages
    def _fixed_columns(self, done) -> np.ndarray:
        """(tau, e, cap) x recipe (rows) x fixed stage (columns)."""
        got = self._fixed.get(done)
        if got is None:
            if not done:
                got = np.zeros((3, len(self.ws), 0))
            else:
                stage = self._stage(len(done) - 1, done[-1], done[-2] if len(done) > 1 else None)
                got = np.concatenate([self._fixed_columns(done[:-1]), stage[:, :, None]], axis=2)
            if len(self._fixed) > CACHE_ENTRIES:
                self._fixed.clear()
            self._fixed[done] = got
        return got

    def _stage(self, i: int, sig: int, prev: int | None) -> np.ndarray:
        """A fixed stage's (tau, e, cap) x recipe; `prev`: stage i - 1's hardware id."""
        key = ("stage", i, sig, prev)
        got = self._cache.get(key)
        if got is None:
            hw = self._sigs[sig][0]
            prev_link = None if prev is None else self._sigs[prev][0].next_link
            first, last = i == 0, i == self.p - 1
            tau, extra, cap = [], [], []
            for w, v in zip(self.ws, self.v):
                tau.append(sum(C.layer_s(w, hw.gpu, hw.tp_link, hw.groups)) + _gather_per_layer(w, hw))
                e = 0.0  # FSDP's gathers of the embedding / head: none counted (a lower bound)
                e += sum(C.embedding_s(w, hw.gpu, hw.tp_link)) if first else 0.0
                e += sum(C.head_s(w, hw.gpu)) if last else 0.0
                out = hw.next_link if not last else (hw.dp_link if v > 1 and self.p > 1 else None)
                e += v * (self._p2p_of(out) + self._p2p_of(prev_link))
                if first and v > 1 and self.p > 1:
                    e += v * self._p2p_best[-1]  # the wrap from the last stage, not fixed yet
                extra.append(e)
                cap.append(C.max_layers(w, i, hw.memory_limit_bytes, self.most))
            got = np.array([tau, extra, cap], dtype=float)
            self._remember(key, got)
        return got

    def _remember(self, key, value) -> None:
        if len(self._cache) > CACHE_ENTRIES:
            self._cache.clear()
        self._cache[key] = value

    def _p2p_of(self, link) -> float:
        return 0.0 if link is None else C.p2p_s(self.size, link)

    # ------------------------------------------------------------------ open stages
    def _open_columns(self, d: int, tail, left, prev: int | None) -> np.ndarray:
        """(pace, e, cap) x recipe x unfixed position d.. (the three below, in one array)."""
        key = ("open", d, tail, left, prev)
        got = self._cache.get(key)
        if got is None:
            extra = self._open_extra(d, prev)
            got = np.array([self._paces(d, tail, left), np.repeat(extra[:, None], self.p - d, axis=1),
                            self._open_caps(d, tail, left)])
            self._remember(key, got)
        return got

    def _paces(self, d: int, tail, left) -> np.ndarray:
        """(R, p - d) paces no unfixed stages of a completion beat, ascending (module doc)."""
        key = ("paces", d, tail, left)
        got = self._cache.get(key)
        if got is None:
            pool = list(tail) + [k for k, n in enumerate(left) for _ in range(n)]
            rho = np.array([self._rho[k] for k in pool]).T  # (R, nodes)
            if self.per_stage:  # stage j (by pace) is no faster than the slowest of the j-th fastest block
                got = np.sort(rho, axis=1)[:, self.per_stage - 1::self.per_stage]
            elif self.per_node:  # the tail node's unfixed stages, then per_node on each node left
                counts = [self.per_node] * len(pool)
                if tail:
                    counts[0] = self.p - d - self.per_node * (len(pool) - 1)
                got = np.sort(np.repeat(rho, counts, axis=1), axis=1)
            else:
                got = np.repeat(rho.min(axis=1, keepdims=True), self.p - d, axis=1)
            self._remember(key, got)
        return got

    def _open_caps(self, d: int, tail, left) -> np.ndarray:
        """(R, p - d) caps of positions d.., each of the roomiest kind an unfixed stage can be
        made of, descending (the fastest paces pair with the largest caps)."""
        kinds = tuple(sorted(set(tail) | {k for k, n in enumerate(left) if n}))
        key = ("caps", d, kinds)
        got = self._cache.get(key)
        if got is None:
            got = np.sort(np.max([self._caps[k][:, d:] for k in kinds], axis=0), axis=1)[:, ::-1]
            self._remember(key, got)
        return got

    def _open_extra(self, d: int, prev: int | None) -> np.ndarray:
        """Per recipe, the least e of the unfixed positions d..p-1 (p2p at the best links a
        completion can have there; `prev`: the fixed stage d - 1's hardware id)."""
        key = ("extra", d, prev)
        got = self._cache.get(key)
        if got is None:
            first_in = None if prev is None else self._p2p_of(self._sigs[prev][0].next_link)
            wrap = np.where(self.v > 1, self._p2p_best[-1], 0.0) if self.p > 1 else np.zeros(len(self.ws))
            got = np.full(len(self.ws), np.inf)
            for i in range(d, self.p):
                into = first_in if i == d and first_in is not None else self._p2p_best[i - 1] if i else wrap
                out = self._p2p_best[i] if i < self.p - 1 else wrap
                e = self.v * (into + out) + (self._ends[0] if i == 0 else 0.0) + (self._ends[1] if i == self.p - 1 else 0.0)
                got = np.minimum(got, e)
            self._remember(key, got)
        return got

    # ------------------------------------------------------------------ per kind, once
    def _kind_paces(self) -> list[np.ndarray]:
        """Per kind, rho per recipe: the least pace of any set of kinds holding it (each set's
        stage as analytic_cost.one_stage builds it), so a stage is never faster than rho of any
        of its nodes' kinds."""
        n = len(self.kinds)
        if n > MAX_SUBSET_KINDS:
            return [np.min([self._set_pace((k,)) for k in range(n)], axis=0)] * n
        sets = [s for r in range(1, n + 1) for s in itertools.combinations(range(n), r)]
        pace = {s: self._set_pace(s) for s in sets}
        return [np.min([pace[s] for s in sets if k in s and np.isfinite(pace[s]).all()] or [pace[(k,)]], axis=0)
                for k in range(n)]

    def _set_pace(self, kinds: tuple[int, ...]) -> np.ndarray:
        """Per recipe, the least fwd + bwd of one layer (ZeRO-3 gathers included) of a stage whose
        nodes are of these kinds, over the stage positions whose span holds them all (inf if none):
        analytic_cost.one_stage on the span filled with them, so the links are the cost model's."""
        best = np.full(len(self.ws), np.inf)
        seen = set()
        for i in range(self.p):
            first, last, after = C.stage_span(self.shape.tp, self.shape.cp * self.shape.dp, self.p, i, self.g)
            if last - first + 1 < len(kinds) or (last - first, i == 0) in seen:
                continue
            seen.add((last - first, i == 0))
            fill = tuple(kinds[(k - first) % len(kinds)] for k in range(first, max(last, after) + 1))
            hw = self._sigs[self._stage_id(i, fill, first)][0]
            best = np.minimum(best, [sum(C.layer_s(w, hw.gpu, hw.tp_link, hw.groups)) + _gather_per_layer(w, hw)
                                     for w in self.ws])
        return best

    def _kind_caps(self) -> list[np.ndarray]:
        """Per kind: (R, p) most layers each position holds within its memory limit."""
        return [np.array([[C.max_layers(w, i, kind.memory_limit_bytes, self.most) for i in range(self.p)]
                          for w in self.ws], dtype=float) for kind in self.kinds]

    def _best_p2p(self) -> list[float]:
        """Per boundary i -> i + 1 (and last: the interleaved wrap, over the last stage's DP link),
        the least p2p time of any pair of kinds on either side (analytic_cost.one_stage's links)."""
        out = []
        n = len(self.kinds)
        for i in range(self.p):
            first, last, after = C.stage_span(self.shape.tp, self.shape.cp * self.shape.dp, self.p, i, self.g)
            times = []
            for a, b in itertools.product(range(n), repeat=2):
                fill = tuple(a if k <= last else b for k in range(first, max(last, after) + 1))
                hw = self._sigs[self._stage_id(i, fill, first)][0]
                times.append(self._p2p_of(hw.next_link if i < self.p - 1 else hw.dp_link))
            out.append(min(times))
        return out

    def _best_ends(self) -> tuple[np.ndarray, np.ndarray]:
        """Per recipe, the least embedding (stage 0) and head (last stage) time of any kind."""
        free = C.Link(float("inf"), 0.0)
        gpus = [self.e.gpus[k.name] for k in self.kinds]
        emb = np.array([min(sum(C.embedding_s(w, g, free)) for g in gpus) for w in self.ws])
        head = np.array([min(sum(C.head_s(w, g)) for g in gpus) for w in self.ws])
        return emb, head


def _gather_per_layer(w: C.Workload, hw) -> float:
    """A lower bound per layer on FSDP's exposed weight gathers (analytic_cost.zero3_gather_s:
    the first gather + max(0, gather - compute) per later layer >= layers x max(0, gather - compute))."""
    if w.recipe.zero < 3:
        return 0.0
    f, b = C.layer_s(w, hw.gpu, hw.tp_link, hw.groups)
    dense, experts = C.stage_param_split(w, 1, False, False)
    one = C.layer_gather_s(w, dense + experts, experts, C.state_links(w, hw)[0], C.expert_rings(w, hw))
    return (max(0.0, one - f) + max(0.0, one - b)) * (1 - w.params.dp_overlap)


class _Window:
    """items[k - offset] as [k]: the nodes of a prefix from a given node index on."""

    def __init__(self, items, offset: int):
        self.items, self.offset = items, offset

    def __getitem__(self, k: int):
        return self.items[k - self.offset]
