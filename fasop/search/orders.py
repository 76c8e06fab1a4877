"""Node orders too many to list: an exact branch and bound over order prefixes.

`--placements all` with `--top K` past search.TREE_ORDERS distinct node orders (16 nodes of 3
types: 2.0 million) does not list them. For one (tp, dp, pp, mbs), most promising first, orders
are built position by position, in `enumerate.all_placements` order, as a tree; three exact rules
cut it. They come from the estimator's optional `prefix_bounds` capability
(estimators.PrefixBounds): a *state* per prefix, folded node by node, and a bound per state.

1. **Equivalent prefixes.** Two prefixes with the same state and the same nodes left give,
   completion by completion, plans with the same signature. The later one's (in enumeration
   order) plans would all be skipped as equivalent by a full enumeration; here its whole
   subtree is.
2. **Lower bounds.** No completion of a prefix beats its bound, so a prefix whose bound is above
   the K-th kept step time has no plan among the K. A PrefixBounds may also offer
   `bound_hinted(state, placed, left, hint, threshold) -> (bound, hint)`: the hint it returns
   goes to the prefix's children (the analytic estimator's: the recipes whose floor is still at
   most the threshold, which only falls; the others cannot give a kept plan below).
3. **Exact ties.** A PrefixBounds may offer `class_bound(counts, prefix kinds, last kind)`: the
   step time at which every fitting order that begins with those kinds and ends with that kind is
   estimated, where it can certify one (the analytic estimator's, fasop/estimators/analytic/order_classes.py).
   A prefix whose every completion is in such a class is cut when its class bound is above the
   threshold, or equal to the K-th kept step time with the K-th kept plan's index below the
   prefix's first: ties go to the earlier index, so none of its plans can be kept. Without it
   a tree walks every order of a tie (docs/partitions.md "Exact ties").

All three rules are exact, so the K plans found are those a full enumeration keeps (tests compare
the two on random inventories and check every prefix bound against every completion). How much
of the tree is visited depends on how many orders come close to the K-th plan. FASOP-2024's
states and bounds: fasop/estimators/fasop2024/orders.py.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from functools import lru_cache

from fasop.estimators import Estimator
from fasop.plans.enumerate import combo_plan
from fasop.plans.plan import Plan
from fasop.specs.types import NodeType


@lru_cache(maxsize=65536)
def _orders(left: tuple[int, ...]) -> int:
    """Distinct orders of nodes with these counts per type: N! / (n_1! ... n_k!)."""
    return math.factorial(sum(left)) // math.prod(math.factorial(c) for c in left)


class OrderSearch:
    """The plans of `combos` x every order of `inventory` that can enter the K fastest, as
    (enumeration index, plan) in enumeration order per (tp, dp, pp, mbs); plans of a subtree
    cut by an equivalent prefix or by the bound are counted in `duplicates` / `pruned`.
    `threshold()`: the K-th kept step time so far (inf until there are K). `progress(accounted)`:
    called as plans are resolved, cut subtrees included, so that a search's progress advances with
    the tree walked, not only with the plans it yields."""

    def __init__(self, estimator: Estimator, inventory: Sequence[NodeType],
                 combos: Sequence[tuple[int, ...]], threshold: Callable[[], float],
                 progress: Callable[[int], None] | None = None, first: dict | None = None,
                 kth: Callable[[], tuple[float, int] | None] = lambda: None):
        self.estimator, self.combos, self.threshold, self.kth = estimator, list(combos), threshold, kth
        self.first = first or {}
        """Step times of known plans by (tp, dp, pp, mbs, cp, ep, etp): those shapes are visited
        first, fastest first (the order changes which plans are cut, never which are kept)."""
        self.progress = progress or (lambda accounted: None)
        self.kinds = list({n.name: n for n in inventory}.values())
        self.kind_of = {k.name: i for i, k in enumerate(self.kinds)}
        self.counts = tuple(sum(n.name == k.name for n in inventory) for k in self.kinds)
        self.inventory = tuple(inventory)
        self.duplicates = self.pruned = self.accounted = self.tied = 0
        self._ahead: list[float] = []
        """Plans skipped as equivalent, plans cut by the bound or as ties (`tied`: those of them cut by
        rule 3), plans resolved so far (accounted = yielded + duplicates + pruned)."""

    def __iter__(self) -> Iterator[tuple[int, Plan]]:
        gbs = self.estimator.model.global_batch_size
        shapes = [combo_plan(combo, global_batch_size=gbs, placement=self.inventory) for combo in self.combos]
        # the most promising degrees first (the estimator's search_order where it has one, else the
        # quick bound): the threshold tightens sooner; a shape whose quick bound (which holds for
        # every order) is above it has no plan that can be kept, and its tree is not built
        bounds = [self.estimator.quick_bound(shape) for shape in shapes]
        rank = getattr(self.estimator, "search_order", None)
        keys = [rank(shape) for shape in shapes] if rank is not None else bounds
        known = [self.first.get(shape_key(shape)) for shape in shapes]  # shapes with a known plan first
        keys = [(1, k) if t is None else (0, t) for t, k in zip(known, keys)]
        self._ahead = sorted(bounds)  # the quick bounds of the shapes not yet begun, ascending
        for c in sorted(range(len(shapes)), key=lambda c: (keys[c], c)):
            del self._ahead[bisect.bisect_left(self._ahead, bounds[c])]
            if _cut(bounds[c], self.threshold()):
                self.pruned += _orders(self.counts)
                self._account(_orders(self.counts))
                continue
            yield from self._orders_of(c, shapes[c])

    def _account(self, plans: int) -> None:
        self.accounted += plans
        self.progress(self.resolved())

    def resolved(self) -> int:
        """Plans resolved: `accounted`, and those of the shapes not yet begun whose quick bound is above
        the threshold now (the threshold only falls: they will be cut, unvisited)."""
        ahead = len(self._ahead) - bisect.bisect_right(self._ahead, self.threshold())
        return self.accounted + ahead * _orders(self.counts)

    def _orders_of(self, c: int, shape: Plan) -> Iterator[tuple[int, Plan]]:
        """Depth-first over prefixes in enumeration order (children pushed last-kind first)."""
        prefixes = self.estimator.prefix_bounds(shape, self.kinds)
        hinted = getattr(prefixes, "bound_hinted", None)
        alike = getattr(prefixes, "class_bound", None)
        n, per_order = len(self.inventory), len(self.combos)
        seen: set = set()
        stack = [((), (), self.counts, prefixes.start(), 0, 0.0, None)]   # prefix, its kind indices, ...
        while stack:
            prefix, kinds, left, state, rank, bound, hint = stack.pop()
            if _cut(bound, self.threshold()):  # the threshold has tightened since it was pushed
                self.pruned += _orders(left)
                self._account(_orders(left))
                continue
            if len(prefix) == n:
                self._account(1)
                yield rank * per_order + c, replace(shape, placement=prefix)
                continue
            children = []
            offset = rank
            for k, kind in enumerate(self.kinds):
                if not left[k]:
                    continue
                child_left = left[:k] + (left[k] - 1,) + left[k + 1:]
                size = _orders(child_left)
                child_rank, offset = offset, offset + size
                child_state = prefixes.extend(state, len(prefix), kind)
                key = (child_left, child_state)
                if key in seen:
                    self.duplicates += size
                    self._account(size)
                    continue
                seen.add(key)
                threshold = self.threshold()
                if hinted is None:
                    child_bound, child_hint = prefixes.bound(child_state, len(prefix) + 1, child_left), None
                else:
                    child_bound, child_hint = hinted(child_state, len(prefix) + 1, child_left, hint, threshold)
                tied = child_bound <= threshold and alike is not None and self._ties_out(
                    alike, kinds + (k,), child_left, child_rank * per_order + c)
                if tied or _cut(child_bound, threshold):
                    self.pruned += size
                    self.tied += size if tied else 0
                    self._account(size)
                    continue
                children.append((prefix + (kind,), kinds + (k,), child_left, child_state, child_rank, child_bound,
                                 child_hint))
            stack.extend(reversed(children))

    def ties_out(self, alike: Callable, prefix: tuple[NodeType, ...], left: tuple[int, ...], first: int) -> bool:
        """Rule 3: whether no completion of `prefix` (its first plan's index `first`) can be kept because
        each is estimated at its class's bound or does not fit (`alike(counts, kinds of the prefix, last
        kind)`: the estimator's class_bound), and the K kept plans come before it: faster, or as fast
        with a smaller index."""
        return self._ties_out(alike, tuple(self.kind_of[n.name] for n in prefix), left, first)

    def _ties_out(self, alike: Callable, kinds: tuple[int, ...], left: tuple[int, ...], first: int) -> bool:
        """ties_out of the prefix of these kind indices (the tree carries them)."""
        kth, threshold = self.kth(), self.threshold()
        lasts = [k for k, n in enumerate(left) if n] or [kinds[-1]]
        for last in lasts:
            t = alike(self.counts, kinds, last)
            if t is None or (t <= threshold and (kth is None or not kth < (t, first))):
                return False
        return True


def _cut(bound: float, threshold: float) -> bool:
    """Whether a subtree (or shape) of this bound holds no plan that can be kept: above the threshold, or inf --
    no completion fits in memory, and only plans that fit are kept (also before K plans are, threshold inf)."""
    return bound > threshold or bound == math.inf


def shape_key(shape: Plan) -> tuple[int, ...]:
    """A plan's degree shape, as `first` keys it: (tp, dp, pp, mbs, cp, ep, etp)."""
    return shape.tp, shape.dp, shape.pp, shape.mbs, shape.cp, shape.ep, shape.etp
