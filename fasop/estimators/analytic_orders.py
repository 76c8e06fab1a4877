"""The analytic estimator's prefix bounds for orders.OrderSearch (the estimators.PrefixBounds capability).

A plan's analytic estimate depends on its node order only through its stages' hardware
(`AnalyticEstimator.signature`: each stage's GPU, TP / DP links, link to the next stage, memory
limit), and stage i's hardware is fixed once the nodes of stage i and the first node of stage
i + 1 are placed. A prefix's *state* is those stages' hardware and the nodes placed since.

Its *bound*, a step time no completion that fits in memory beats, is the least over the recipes
that could fit (`AnalyticEstimator._possible`) of (analytic_cost.step, 1F1B, v chunks):

    pipeline = m x max_i c_i + (sum_i c_i - max_i c_i) / v = (m - 1/v) x max_i c_i + sum_i c_i / v
    c_i      = n_i x tau_i + e_i

where n_i >= 1 are stage i's layers, tau_i the fwd + bwd of one layer (with ZeRO-3's per-layer
weight gathers) and e_i the rest of the cycle (embedding on stage 0, head on the last, ZeRO-3's
constant gathers, v x the p2p in and out). The step adds the DP sync, embedding sync and
optimizer, all >= 0, so it is at least `pipeline`. Any split that fits puts n_i <= cap_i layers on
stage i (analytic_cost.max_layers of its memory limit at its position), so max_i c_i is at least
the L-th smallest of the *slots* {e_i + k tau_i : 1 <= k <= cap_i} and at least every e_i + tau_i;
sum_i c_i is at least the L cheapest layer times plus the e_i.

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
from typing import TYPE_CHECKING

import numpy as np

from fasop import analytic_cost as C
from fasop.plan import Plan
from fasop.specs import NodeType

if TYPE_CHECKING:
    from fasop.estimators.analytic import AnalyticEstimator

MAX_SUBSET_KINDS = 8
"""Kinds up to which a stage's pace is bounded per set of node kinds (2^k sets); past it every
unfixed stage takes the least pace of any kind set."""


class AnalyticPrefixBounds:
    """The fold over node positions of one plan shape (degrees and micro-batch)."""

    def __init__(self, estimator: AnalyticEstimator, shape: Plan, kinds: Sequence[NodeType]):
        self.e, self.shape, self.kinds = estimator, shape, tuple(kinds)
        self.g = shape.placement[0].gpus_per_node
        self.p, self.m, self.L = shape.pp, shape.num_microbatches, estimator.arch.num_layers
        self.most = self.L - (self.p - 1)
        self.recipes = estimator._possible(shape)
        self.ws = [estimator._workload(shape, r) for r in self.recipes]
        self.v = np.array([float(r.virtual_stages) for r in self.recipes])
        self.kind_of = {k.name: i for i, k in enumerate(self.kinds)}
        self.size = shape.mbs * estimator.model.sequence_length * estimator.arch.hidden_size * C.ACT_BYTES / shape.tp
        block = shape.tp * shape.dp
        self.per_stage = block // self.g if block % self.g == 0 else 0
        """Nodes each stage spans (0: not a whole number)."""
        self.per_node = self.g // block if self.g % block == 0 else 0
        """Stages each node holds (0: not a whole number)."""
        self._rho = self._kind_paces()
        self._caps = self._kind_caps()
        self._p2p_best = self._best_p2p()
        self._ends = self._best_ends()
        self._fixed: dict = {}
        self._columns: dict = {}

    # ------------------------------------------------------------------ fold
    def start(self):
        return (), ()

    def extend(self, state, position: int, node: NodeType):
        done, tail = state
        tail = tail + (node,)
        sh, p = self.shape, self.p
        while len(done) < p:
            s = len(done)
            first, last, after = C.stage_span(sh.tp, sh.dp, p, s, self.g)
            if max(last, after) > position:
                break
            nodes = _Window(tail, first)
            gpus = _Window(tuple(self.e.gpus[n.name] for n in tail), first)
            hw = C.one_stage(sh.tp, sh.dp, p, s, self.g, nodes, gpus, self.e.params)
            done = done + ((hw.gpu.name, hw.tp_link, hw.dp_link, hw.next_link, hw.memory_limit_bytes),)
            start = C.stage_span(sh.tp, sh.dp, p, s + 1, self.g)[0] if s + 1 < p else position + 1
            tail = tail[start - first:]
        return done, tuple(tail)

    # ------------------------------------------------------------------ bound
    def bound(self, state, placed: int, left) -> float:
        if self.e.model.profile is not None:  # profiled layers may be faster than the analytic floor
            return 0.0
        done, tail = state
        tau, extra, cap = self._fixed_columns(done)
        d = len(done)
        if d < self.p:
            paces = self._paces(d, tail, left)  # (R, p - d), ascending
            caps = np.sort(self._open_caps(tail, left)[:, d:], axis=1)[:, ::-1]  # descending
            first_in = self._p2p_of(done[-1][3]) if d else None
            e_open = self._open_extra(d, first_in)
            tau = np.concatenate([tau, paces], axis=1)
            extra = np.concatenate([extra, np.repeat(e_open[:, None], self.p - d, axis=1)], axis=1)
            cap = np.concatenate([cap, caps], axis=1)
        return float(self._floor(tau, extra, cap).min())

    def _floor(self, tau: np.ndarray, extra: np.ndarray, cap: np.ndarray) -> np.ndarray:
        """Per recipe: (m - 1/v) x the L-th slot (or the largest e + tau) + (L cheapest + sum e) / v."""
        k = np.arange(1, int(cap.max(initial=0)) + 1, dtype=float)
        if not len(k):
            return np.full(len(self.ws), np.inf)
        open_slot = k[None, None, :] <= cap[:, :, None]
        slots = np.where(open_slot, extra[:, :, None] + tau[:, :, None] * k[None, None, :], np.inf)
        flat = slots.reshape(len(self.ws), -1)
        if flat.shape[1] < self.L:
            return np.full(len(self.ws), np.inf)
        level = np.partition(flat, self.L - 1, axis=1)[:, self.L - 1]
        level = np.maximum(level, (extra + tau).max(axis=1))
        level = np.where(cap.min(axis=1) < 1, np.inf, level)  # a stage holds no layer: nothing fits
        costs = np.where(open_slot, tau[:, :, None], np.inf).reshape(len(self.ws), -1)
        cheapest = np.partition(costs, self.L - 1, axis=1)[:, :self.L].sum(axis=1)
        total = cheapest + extra.sum(axis=1)
        finite = np.where(np.isinf(level), 0.0, level)
        return np.where(np.isinf(level), np.inf, (self.m - 1 / self.v) * finite + total / self.v)

    # ------------------------------------------------------------------ placed stages
    def _fixed_columns(self, done) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(tau, e, cap) per recipe (rows) and placed stage (columns)."""
        got = self._columns.get(done)
        if got is None:
            if not done:
                empty = np.zeros((len(self.ws), 0))
                got = (empty, empty, empty)
            else:
                tau, extra, cap = self._fixed_columns(done[:-1])
                prev = done[-2][3] if len(done) > 1 else None
                t, e, c = self._stage(len(done) - 1, done[-1], prev)
                got = (np.column_stack([tau, t]), np.column_stack([extra, e]), np.column_stack([cap, c]))
            if len(self._columns) > 1 << 16:
                self._columns.clear()
            self._columns[done] = got
        return got

    def _stage(self, i: int, sig, prev_link) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """A placed stage's (tau, e, cap) per recipe; `prev_link`: the link from stage i - 1."""
        key = (i, sig, prev_link)
        got = self._fixed.get(key)
        if got is None:
            name, tp_link, dp_link, next_link, limit = sig
            gpu = next(gp for gp in self.e.gpus.values() if gp.name == name)
            first, last = i == 0, i == self.p - 1
            tau, extra, cap = [], [], []
            for w, v in zip(self.ws, self.v):
                tau.append(sum(C.layer_s(w, gpu, tp_link)) + _gather_per_layer(w, dp_link))
                e = C.zero3_gather_s(w, C.stage_params(w, 0, first, last), dp_link)
                e += sum(C.embedding_s(w, gpu, tp_link)) if first else 0.0
                e += sum(C.head_s(w, gpu)) if last else 0.0
                out = next_link if not last else (dp_link if v > 1 and self.p > 1 else None)
                into = prev_link if not first else None
                e += v * (self._p2p_of(out) + self._p2p_of(into))
                if first and v > 1 and self.p > 1:
                    e += v * self._p2p_best[-1]  # the wrap from the last stage, not placed yet
                extra.append(e)
                cap.append(C.max_layers(w, i, limit, self.most))
            got = self._fixed[key] = (np.array(tau), np.array(extra), np.array(cap, dtype=float))
        return got

    def _p2p_of(self, link) -> float:
        return 0.0 if link is None else C.p2p_s(self.size, link)

    # ------------------------------------------------------------------ open stages
    def _paces(self, d: int, tail, left) -> np.ndarray:
        """(R, p - d) paces no unfixed stages of a completion beat, ascending (module doc)."""
        pool = [self.kind_of[n.name] for n in tail] + [k for k, n in enumerate(left) for _ in range(n)]
        rho = np.array([self._rho[k] for k in pool]).T  # (R, nodes)
        open_stages = self.p - d
        if self.per_stage:  # stage j (by pace) is no faster than the slowest of the j-th fastest block
            return np.sort(rho, axis=1)[:, self.per_stage - 1::self.per_stage]
        if self.per_node:  # the tail node's unfixed stages, then per_node on each node left
            counts = [self.per_node] * len(pool)
            if tail:
                counts[0] = open_stages - self.per_node * (len(pool) - 1)
            return np.sort(np.repeat(rho, counts, axis=1), axis=1)
        return np.repeat(rho.min(axis=1, keepdims=True), open_stages, axis=1)

    def _open_caps(self, tail, left) -> np.ndarray:
        """(R, p) caps per position of the roomiest kind an unfixed stage can be made of."""
        kinds = {self.kind_of[n.name] for n in tail} | {k for k, n in enumerate(left) if n}
        return np.max([self._caps[k] for k in kinds], axis=0)

    def _open_extra(self, d: int, first_in: float | None) -> np.ndarray:
        """Per recipe, the least e of the unfixed positions d..p-1 (p2p at the best links a
        completion can have there; `first_in`: the placed link into position d)."""
        wrap = np.where(self.v > 1, self._p2p_best[-1], 0.0) if self.p > 1 else np.zeros(len(self.ws))
        best = np.full(len(self.ws), np.inf)
        for i in range(d, self.p):
            into = first_in if i == d and first_in is not None else self._p2p_best[i - 1] if i else wrap
            out = self._p2p_best[i] if i < self.p - 1 else wrap
            e = self.v * (into + out) + (self._ends[0] if i == 0 else 0.0) + (self._ends[1] if i == self.p - 1 else 0.0)
            best = np.minimum(best, e)
        return best

    # ------------------------------------------------------------------ per kind, once
    def _kind_paces(self) -> list[np.ndarray]:
        """Per kind, rho per recipe: the least pace of any set of kinds holding it (each set's
        stage on its slowest GPU and least links, as analytic_cost.one_stage), so a stage is
        never faster than rho of any of its nodes' kinds."""
        n = len(self.kinds)
        if n > MAX_SUBSET_KINDS:
            return [np.min([self._set_pace((k,)) for k in range(n)], axis=0)] * n
        sets = [s for r in range(1, n + 1) for s in itertools.combinations(range(n), r)]
        pace = {s: self._set_pace(s) for s in sets}
        return [np.min([pace[s] for s in sets if k in s], axis=0) for k in range(n)]

    def _set_pace(self, kinds: tuple[int, ...]) -> np.ndarray:
        """Per recipe, the fwd + bwd of one layer (ZeRO-3 gathers included) of a stage whose nodes
        are of these kinds; the least over equally slow GPUs and over the DP links it may use."""
        nodes = [self.kinds[k] for k in kinds]
        gpus = [self.e.gpus[n.name] for n in nodes]
        sh, params = self.shape, self.e.params
        eff = params.link_efficiency
        key = min((x.matmul_flops("bf16"), x.memory_bytes_per_s) for x in gpus)
        slowest = [x for x in gpus if (x.matmul_flops("bf16"), x.memory_bytes_per_s) == key]
        intra = C.Link(min(x.intra_node_bytes_per_s * eff[x.intra_node_link] for x in gpus), params.intra_node_latency_s)

        def inter(share: int) -> C.Link:
            return C.Link(min(n.inter_node_bytes_per_s for n in nodes) / share * eff["network"],
                          params.inter_node_latency_s)
        block = sh.tp * sh.dp
        tp_link = intra if sh.tp <= self.g else inter(self.g)
        dp_links = [intra] if self.per_node else [inter(min(sh.tp, self.g))] if block > self.g else \
            [intra, inter(min(sh.tp, self.g))]
        return np.array([min(sum(C.layer_s(w, gpu, tp_link)) + _gather_per_layer(w, link)
                             for gpu in slowest for link in dp_links) for w in self.ws])

    def _kind_caps(self) -> list[np.ndarray]:
        """Per kind: (R, p) most layers each position holds within its memory limit."""
        return [np.array([[C.max_layers(w, i, kind.memory_limit_bytes, self.most) for i in range(self.p)]
                          for w in self.ws], dtype=float) for kind in self.kinds]

    def _best_p2p(self) -> list[float]:
        """Per boundary i -> i + 1 (and last: the interleaved wrap), the least p2p time any
        completion's link there gives."""
        params, eff = self.e.params, self.e.params.link_efficiency
        intra = max(self.e.gpus[k.name].intra_node_bytes_per_s * eff[self.e.gpus[k.name].intra_node_link]
                    for k in self.kinds)
        fastest = max(k.inter_node_bytes_per_s for k in self.kinds)
        sh = self.shape
        out = []
        for i in range(self.p):
            _, last, after = C.stage_span(sh.tp, sh.dp, self.p, i, self.g)
            same = last == after and i < self.p - 1
            share = min(self.g, sh.tp * sh.dp) if i < self.p - 1 else min(sh.tp, self.g)
            inter = C.Link(fastest / share * eff["network"], params.inter_node_latency_s)
            best = C.p2p_s(self.size, C.Link(intra, params.intra_node_latency_s))
            out.append(best if same or i == self.p - 1 and self.per_node else
                       min(best, C.p2p_s(self.size, inter)))
        return out

    def _best_ends(self) -> tuple[np.ndarray, np.ndarray]:
        """Per recipe, the least embedding (stage 0) and head (last stage) time of any kind."""
        free = C.Link(float("inf"), 0.0)
        gpus = [self.e.gpus[k.name] for k in self.kinds]
        emb = np.array([min(sum(C.embedding_s(w, g, free)) for g in gpus) for w in self.ws])
        head = np.array([min(sum(C.head_s(w, g)) for g in gpus) for w in self.ws])
        return emb, head


def _gather_per_layer(w: C.Workload, link: C.Link) -> float:
    """ZeRO-3's weight gathers per layer of a stage (analytic_cost.zero3_gather_s is affine in
    the stage's parameters, which are linear in its layers)."""
    one = C.stage_params(w, 1, False, False)
    return C.zero3_gather_s(w, one, link) - C.zero3_gather_s(w, 0.0, link)


def pipeline_floor(m: int, v: int, layers: int, taus: list[float], ends: tuple[float, float]) -> float:
    """A step time no split of `layers` identical layers over stages of per-layer times `taus`
    beats, the first stage also running the embedding (ends[0]) and the last the head (ends[1]):
    the slowest stage is at least the split's continuous relaxation T = (L + e0/tau0 + e1/tau1) /
    sum(1/tau_i), the stages sum to at least L x min tau + e0 + e1, and analytic_cost.step is
    m x max + (sum - max)/v = (m - 1/v) x max + sum / v."""
    level = (layers + ends[0] / taus[0] + ends[1] / taus[-1]) / sum(1 / t for t in taus)
    return (m - 1 / v) * level + (layers * min(taus) + ends[0] + ends[1]) / v


class _Window:
    """items[k - offset] as [k]: the nodes of a prefix from a given node index on."""

    def __init__(self, items, offset: int):
        self.items, self.offset = items, offset

    def __getitem__(self, k: int):
        return self.items[k - self.offset]
