"""FASOP-2024's prefix bounds for orders.OrderSearch (the estimators.PrefixBounds capability).

A plan's FASOP-2024 estimate depends on its node order only through its signature
(`Fasop2024Estimator.signature`), and each part of that is a fold over fixed node positions:

- a stage's GPU type: the slowest (over the whole layer list) of the types of its nodes, the
  first in position order among equals;
- a boundary's send time, stage 0's DP ring and the embedding link: functions of the least
  intra-node bandwidth over the node positions whose rank pairs share a node and the least
  inter-node bandwidth over the positions of the pairs that do not (`comm.least_bandwidths`);
- a stage's memory limit: the type at one position (`fasop2024_layout.fasop_limit_node`).

A prefix's *state* is these folds over its placed positions. Its bound is
`Fasop2024Estimator.lower_bound` relaxed over the unplaced positions: the pipeline floors come
from a dynamic programme over stages with the node counts left (`_Floors`: each stage takes the
slowest type among its placed nodes and a choice of the nodes left); an unplaced position of a
link gets the best bandwidth of the kinds left; stage 0's DP all-reduce takes the cheaper bus it
may have.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from fasop.costs import comm
from fasop.estimators.fasop2024 import comm as fasop2024_comm
from fasop.estimators.fasop2024.layout import fasop_limit_node
from fasop.partition.splits import chain_floor, least_completions, steady_caps, weighted_times
from fasop.plans.plan import Plan
from fasop.specs.types import NodeType

# `Fasop2024Estimator` in annotations: the estimator (estimator.py) that calls in; not imported, as it imports this module

RECENT_PREFIXES = 4096
"""Floors of placed stages kept per (tp, dp, pp, mbs) (a depth-first search reuses the latest)."""
ORDER_LEVELS = 16
"""Caps of the coupled chain floor (partition.steady_caps) in the prefix bounds: each costs a row
of every dynamic-programme step."""
STAGE, INTRA, INTER, LIMIT = range(4)
"""What a node position adds to a fold of the state (`_Folds.touches`)."""


@dataclass(frozen=True)
class _Folds:
    """For one (tp, dp, pp, mbs) on N nodes: which positions each part of the state folds over.
    The state is a list: pp stage winners (a NodeType or None), then (least intra, least inter)
    bandwidth per link (sends 0..pp-2, the DP ring, the embedding), then pp memory limits."""

    shape: Plan
    """The plan with the inventory's own order: its degrees, for the estimator's bound."""
    stage_nodes: tuple[tuple[int, ...], ...]
    limit_nodes: tuple[int, ...]
    touches: tuple[tuple[tuple[int, int], ...], ...]
    """touches[q]: (what, index in the state) for every fold node position q enters."""
    num_links: int
    link_last: tuple[tuple[int, int], ...]
    """Per link: the last node position its intra fold and its inter fold take (-1: none)."""

    @classmethod
    def of(cls, shape: Plan, model) -> "_Folds":
        m = shape.gpus_per_node
        links = [comm.p2p_pairs(shape, j) for j in range(shape.pp - 1)]
        links += [comm.dp_ring_pairs(shape), comm.embedding_pairs(shape, model)]
        touches: list[list[tuple[int, int]]] = [[] for _ in shape.placement]
        for i, nodes in enumerate(shape.stage_node_indices):
            for q in nodes:
                touches[q].append((STAGE, i))
        link_last = []
        for c, pairs in enumerate(links):
            last = [-1, -1]
            for a, b in pairs:
                if a // m == b // m:
                    touches[a // m].append((INTRA, shape.pp + c))
                    last[0] = max(last[0], a // m)
                else:
                    touches[a // m].append((INTER, shape.pp + c))
                    touches[b // m].append((INTER, shape.pp + c))
                    last[1] = max(last[1], a // m, b // m)
            link_last.append(tuple(last))
        limit_nodes = tuple(fasop_limit_node(shape, i) for i in range(shape.pp))
        for i, q in enumerate(limit_nodes):
            touches[q].append((LIMIT, shape.pp + len(links) + i))
        return cls(shape=shape, stage_nodes=shape.stage_node_indices, limit_nodes=limit_nodes,
                   touches=tuple(tuple(dict.fromkeys(t)) for t in touches), num_links=len(links),
                   link_last=tuple(link_last))

    def empty(self) -> tuple:
        pp = self.shape.pp
        return (None,) * pp + ((math.inf, math.inf),) * self.num_links + (None,) * pp


class FasopPrefixBounds:
    """For one plan shape: the state of a prefix (`_Folds`) and its bound (module doc)."""

    def __init__(self, estimator: "Fasop2024Estimator", shape: Plan, kinds: Sequence[NodeType]):
        self.estimator, self.shape, self.kinds = estimator, shape, list(kinds)
        self.folds = _Folds.of(shape, estimator.model)
        self.floors = _Floors(estimator, shape, self.kinds)

    def start(self) -> tuple:
        return self.folds.empty()

    def extend(self, state: tuple, q: int, node: NodeType) -> tuple:
        """The state after placing `node` at position q."""
        state = list(state)
        folds, shape = self.folds, self.shape
        for what, i in folds.touches[q]:
            if what == STAGE:
                winner = state[i]
                if winner is None or self._total(node, shape) > self._total(winner, shape):
                    state[i] = node
            elif what == INTRA:
                intra, inter = state[i]
                state[i] = (min(intra, node.intra_node_bytes_per_s), inter)
            elif what == INTER:
                intra, inter = state[i]
                state[i] = (intra, min(inter, node.inter_node_bytes_per_s))
            else:
                state[i] = node.memory_limit_bytes
        return tuple(state)

    def _total(self, node: NodeType, shape: Plan) -> float:
        return self.estimator.compute.layer_costs(node.gpu, shape.tp, shape.mbs).total

    def bound(self, state: tuple, placed: int, left: tuple[int, ...]) -> float:
        """A step time no completion of this prefix beats (see the module doc)."""
        folds, floors = self.folds, self.floors
        shape, pp = folds.shape, folds.shape.pp
        remaining = [k for k, count in zip(self.kinds, left) if count]
        stage0 = [] if state[0] is None else [state[0]]
        if folds.stage_nodes[0][-1] >= placed:  # stage 0 may still get another type
            stage0 += remaining
        intra = max((k.intra_node_bytes_per_s for k in remaining), default=0.0)
        inter = max((k.inter_node_bytes_per_s for k in remaining), default=0.0)

        def link(c: int) -> tuple[float, float]:
            """A link's least bandwidths, at most what any completion gets: an unplaced node
            has at most the best bandwidth of the kinds left."""
            (least_intra, least_inter), (last_intra, last_inter) = state[pp + c], folds.link_last[c]
            return (min(least_intra, intra) if last_intra >= placed else least_intra,
                    min(least_inter, inter) if last_inter >= placed else least_inter)

        model, cluster = self.estimator.model, self.estimator.cluster
        sends = 0.0
        if pp > 1:
            sends = (fasop2024_comm.p2p_boundary_seconds(shape, model, cluster, *link(0))
                     + fasop2024_comm.p2p_boundary_seconds(shape, model, cluster, *link(pp - 2)))
        ring = min(link(pp - 1))
        embedding = float(fasop2024_comm.embedding_seconds(shape, model, min(link(pp))))
        return self.estimator.bound(shape, floors.of(state[:pp], placed, left), sends, ring,
                                    {k.intra_node_shared for k in stage0}, embedding)


class _Floors:
    """Count-aware pipeline floors for one (tp, dp, pp, mbs): over every split of the layers and
    every way to place the nodes still left, what `Fasop2024Estimator.floors` gives for a full
    order -- the least stage times + largest steady chain (partition.least_chain, on the same
    kind of grid of caps) and the least busiest stage.

    Stages with the same nodes form a *unit* (they share their type). Each node is *counted* in
    the first unit whose span holds it. A dynamic programme over units, with the layers done and
    the node counts left as its state, lets each unit take the slowest type among its placed
    nodes and a choice of counted nodes from those left. A node shared with an earlier unit is
    counted there; a unit holding one may then run at any kind at least as slow in total as its
    choice ("slowest" is over the whole layer list, not layer by layer), so the floors stay
    below every completion's.
    Its value per state is a row per cap (least sum of stage times with every weighted stage
    under the cap), the largest stage and the largest weighted stage. The units after the one
    being placed are solved once per (unit, counts left) and reused by every prefix.
    """

    def __init__(self, estimator: "Fasop2024Estimator", shape: Plan, kinds: Sequence[NodeType]):
        self.kinds = list(kinds)
        costs = [estimator.compute.layer_costs(k.gpu, shape.tp, shape.mbs) for k in self.kinds]
        self.matrices = matrices = [c.matrix for c in costs]
        self.totals = [c.total for c in costs]
        pp, m = shape.pp, shape.num_microbatches
        self.weights = estimator.steady_weights(pp, m) if pp > 1 else np.zeros(1)
        least = least_completions(np.broadcast_to(np.min(matrices, axis=0), (pp,) + matrices[0].shape),
                                  self.weights)[2]
        self.least_steady = least
        self.caps = steady_caps(least, max(self.totals) * float(self.weights.max()), ORDER_LEVELS)
        self.split = len(self.caps)  # rows before it add up, rows from it take the largest
        self.units: list[tuple[int, int, tuple[int, ...]]] = []  # (first stage, stop stage, span)
        for i, span in enumerate(shape.stage_node_indices):
            if self.units and self.units[-1][2] == span:
                self.units[-1] = (self.units[-1][0], i + 1, span)
            else:
                self.units.append((i, i + 1, span))
        self.counted: list[tuple[int, int]] = []  # node range counted in each unit
        last = -1
        for _, _, span in self.units:
            self.counted.append((max(span[0], last + 1), max(span[-1] + 1, last + 1)))
            last = max(last, span[-1])
        self.size = matrices[0].shape[0]
        self._tables: dict = {}
        self._suffix: dict = {}
        self._prefix: dict = {}

    def of(self, winners: Sequence[NodeType | None], placed: int, left: tuple[int, ...]) -> tuple[float, float]:
        """(least chain, least busiest stage) of the orders that start with a prefix of `placed`
        nodes whose stages' slowest types so far are `winners`, with `left` nodes of each kind
        to place."""
        index = {k.name: j for j, k in enumerate(self.kinds)}
        done = []
        for first, _, span in self.units:
            if span[-1] >= placed:
                break
            done.append(index[winners[first].name])
        prefix = self._prefix_of(tuple(done))
        u = len(done)
        if u == len(self.units):
            return self._floors(prefix[:, -1])
        winner = winners[self.units[u][0]]
        lo, hi = self.counted[u]
        if winner is None and placed <= lo:  # unit u untouched: the suffix holds its choices
            return self._floors(self._op(prefix, self._suffix_of(u, left)).min(axis=1))
        own = () if winner is None else (index[winner.name],)
        best = np.full(len(prefix), np.inf)
        for chosen in _choices(left, hi - max(lo, placed)):
            kinds = own + tuple(j for j, c in enumerate(chosen) if c)
            rest = tuple(a - c for a, c in zip(left, chosen))
            through = self._forward(prefix, u, self._slowest(kinds))
            best = np.minimum(best, self._op(through, self._suffix_of(u + 1, rest)).min(axis=1))
        return self._floors(best)

    def _floors(self, value: np.ndarray) -> tuple[float, float]:
        sums, busiest, steady = value[:self.split], float(value[self.split]), float(value[self.split + 1])
        chain = max(chain_floor(sums, self.caps, max(self.least_steady, steady)), float(sums[-1]) + steady)
        return chain, busiest

    def _slowest(self, kinds: tuple[int, ...]) -> frozenset[int]:
        """The kinds the slowest of `kinds` may be (ties all kept); any kind when none."""
        if not kinds:
            return frozenset(range(len(self.kinds)))
        top = max(self.totals[j] for j in kinds)
        return frozenset(j for j in kinds if self.totals[j] == top)

    def _prefix_of(self, done: tuple[int, ...]) -> np.ndarray:
        """(rows, L+1): least terms of the placed units (kinds `done`) over the layers they take.
        The latest few are kept (a depth-first search extends the same prefixes)."""
        known = len(done)
        while known and done[:known] not in self._prefix:
            known -= 1
        value = self._prefix[done[:known]] if known else self._start(0)
        for u in range(known, len(done)):
            value = self._forward(value, u, frozenset(done[u:u + 1]))
            self._prefix[done[:u + 1]] = value
            if len(self._prefix) > RECENT_PREFIXES:
                self._prefix.pop(next(iter(self._prefix)))
        return value

    def _suffix_of(self, u: int, left: tuple[int, ...]) -> np.ndarray:
        """(rows, L+1): least terms of units u.. over layers l.. with the `left` nodes counted in them."""
        key = (u, left)
        if key not in self._suffix:
            if u == len(self.units):
                value = self._start(self.size - 1)
            else:
                lo, hi = self.counted[u]
                value = None
                for chosen in _choices(left, hi - lo):
                    kinds = self._slowest(tuple(j for j, c in enumerate(chosen) if c))
                    if self.units[u][2][0] < lo:  # a node shared with the unit before, counted there:
                        # it may be any kind, and "slowest" is over the whole layer list, not layer
                        # by layer, so the unit may run at any kind at least as slow in total
                        least = min(self.totals[j] for j in kinds)
                        kinds = frozenset(j for j in range(len(self.kinds)) if self.totals[j] >= least)
                    term = self._backward(self._suffix_of(u + 1, tuple(a - c for a, c in zip(left, chosen))),
                                          u, kinds)
                    value = term if value is None else np.minimum(value, term)
            self._suffix[key] = value
        return self._suffix[key]

    def _forward(self, before: np.ndarray, u: int, kinds: frozenset[int]) -> np.ndarray:
        """Terms after unit u runs on `kinds`, from those up to its first layer: least over where
        each of its stages starts."""
        first, stop, _ = self.units[u]
        for i in range(first, stop):
            before = self._through(before[:, :, None], self._stage(i, kinds)).min(axis=1)
        return before

    def _backward(self, after: np.ndarray, u: int, kinds: frozenset[int]) -> np.ndarray:
        """Terms from unit u's first layer on, when it runs on `kinds`, from those after it:
        least over where each of its stages stops."""
        first, stop, _ = self.units[u]
        for i in range(stop - 1, first - 1, -1):
            after = self._through(self._stage(i, kinds), after[:, None, :]).min(axis=2)
        return after

    def _stage(self, i: int, kinds: frozenset[int]) -> np.ndarray:
        """(rows, L+1, L+1): stage i's terms over layers a..b-1, at the least, entry by entry, of
        these kinds (a unit's stages may so each take another of them: still a floor)."""
        weight = float(self.weights[i]) if i < len(self.weights) else 0.0
        key = (weight, kinds)
        if key not in self._tables:
            if len(kinds) > 1:
                self._tables[key] = np.min([self._stage(i, frozenset((j,))) for j in sorted(kinds)], axis=0)
            else:
                (j,) = kinds
                matrix = self.matrices[j]
                weighted = weighted_times(matrix, weight)
                capped = np.where(weighted[None] <= self.caps[:, None, None], matrix[None], np.inf)
                self._tables[key] = np.concatenate([capped, matrix[None], weighted[None]])
        return self._tables[key]

    def _start(self, at: int) -> np.ndarray:
        """(rows, L+1): 0 at `at`, inf elsewhere (nothing done yet / everything done)."""
        out = np.full((self.split + 2, self.size), np.inf)
        out[:, at] = 0.0
        return out

    def _op(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Two consecutive parts' terms together: capped sums add, the largest stays largest."""
        return np.concatenate([a[:self.split] + b[:self.split], np.maximum(a[self.split:], b[self.split:])])

    def _through(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """`_op` on broadcast (rows, L+1, L+1) operands, in one buffer."""
        out = a + b
        np.maximum(a[self.split:], b[self.split:], out=out[self.split:])
        return out


@lru_cache(maxsize=4096)
def _choices(left: tuple[int, ...], size: int) -> tuple[tuple[int, ...], ...]:
    """Every count vector c <= left with sum(c) = size (which nodes a unit may take)."""
    if not left:
        return ((),) if size == 0 else ()
    return tuple((c,) + rest for c in range(min(left[0], size) + 1) for rest in _choices(left[1:], size - c))
