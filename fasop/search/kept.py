"""What a search keeps as its chunks come back: the counts (duplicates, pruned, out of memory,
misfits by reason) and the plans kept, every one or the K fastest that fit (engine.search)."""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Sequence

from fasop.costs.estimate import Estimate
from fasop.estimators import Estimator
from fasop.plans.plan import Plan
from fasop.search.chunks import signature_key
from fasop.search.orders import OrderSearch


class Tally:
    """A search's counts as its chunks come back: duplicates, pruned, out of memory, misfits by reason."""

    def __init__(self, pruned: int):
        self.duplicates, self.pruned, self.oom = 0, pruned, 0
        self.misfits: dict[str, int] = {}  # estimated plans that do not fit, by the estimator's reason (if it gives one)
        self.seen: set[bytes] = set()  # 16-byte digests of signatures: bounded memory per unique pipeline

    def unique(self, candidates: Iterator[tuple[int, Plan]], estimator: Estimator) -> Iterator[tuple[int, Plan]]:
        """(enumeration index, plan), skipping plans equivalent to one already yielded."""
        for index, plan in candidates:
            key = signature_key(estimator, plan)
            if key in self.seen:
                self.duplicates += 1
                continue
            self.seen.add(key)
            yield index, plan

    def add(self, results: Sequence[tuple[int, Estimate | None]], kept: Kept) -> None:
        """A chunk's results: every one kept (without `top`), or each that was estimated offered
        to the K kept (None: pruned)."""
        if kept.top is None:  # every plan estimated and kept
            kept.extend(results)
            oom = [estimate for _, estimate in results if estimate.memory.is_oom]
            self.oom += len(oom)
            self._count_misfits(oom)
            return
        for index, estimate in results:
            if estimate is None:
                self.pruned += 1
                continue
            self.oom += estimate.memory.is_oom
            self._count_misfits((estimate,))
            kept.add(index, estimate)

    def add_tree(self, tree: OrderSearch) -> None:
        """What the order tree skipped: prefixes equivalent to earlier ones, and pruned plans."""
        self.duplicates += tree.duplicates
        self.pruned += tree.pruned

    def _count_misfits(self, estimates) -> None:
        for estimate in estimates:
            reason = dict(estimate.extra_columns).get("misfit") if estimate.memory.is_oom else None
            if reason:
                self.misfits[reason] = self.misfits.get(reason, 0) + 1


class Kept:
    """Every estimate, or the K fastest that fit (a max-heap on (step time, index))."""

    def __init__(self, top: int | None, cutoff: float = float("inf")):
        self.top, self.cutoff = top, cutoff
        self.items: list = []

    def add(self, index: int, estimate: Estimate) -> None:
        """With `top`: kept if it fits and is among the K fastest so far."""
        if not estimate.memory.is_oom:
            item = (-estimate.step_time_s, -index, estimate)
            if len(self.items) < self.top:
                heapq.heappush(self.items, item)
            elif item[:2] > self.items[0][:2]:
                heapq.heapreplace(self.items, item)

    def extend(self, results: Sequence[tuple[int, Estimate]]) -> None:
        """Without `top`: every (index, estimate) kept."""
        self.items.extend([(estimate.step_time_s, index, estimate) for index, estimate in results])

    def threshold(self) -> float:
        """The K-th kept step time (with `top`; the cutoff until K plans are kept; inf without)."""
        kth = self.kth()
        return self.cutoff if kth is None else kth[0]

    def kth(self) -> tuple[float, int] | None:
        """(step time, enumeration index) of the K-th kept plan, once K are kept (with `top`), else None."""
        if self.top is None or len(self.items) < self.top:
            return None
        return -self.items[0][0], -self.items[0][1]

    def values(self) -> list[float]:
        """Step times of the kept plans (with `top`; empty without)."""
        return [] if self.top is None else [-item[0] for item in self.items]

    def ranked(self) -> tuple[Estimate, ...]:
        if self.top is None:  # (step time, index): indices differ, so estimates are never compared
            return tuple(e for _, _, e in sorted(self.items))
        return tuple(e for _, _, e in sorted(self.items, key=lambda x: (-x[0], -x[1])))
