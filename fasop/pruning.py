"""A composition sweep that skips compositions which cannot reach the time-vs-cost frontier.

`fasop pareto` needs, per composition, only its fastest plan that fits -- and only if that plan's
(train_time_h, train_cost_usd) is not behind a frontier point. Two exact rules use what earlier
searches found (the frontier points *found*: fasop.sweep.train_time_h / train_cost_usd of their
best plans, the very numbers analyse() compares):

1. **Bound.** The least of the estimator's `quick_bound` over a composition's degree combinations
   is a step time none of its plans beats, whatever the placement or split (the Estimator
   protocol's contract). If the point of that step time is *covered* by a found point -- at most
   its time and its cost, and strictly less in one or earlier in composition order (analyse's
   tie rule) -- every plan's point is covered too: the composition is not searched.
2. **Cut-off.** Otherwise the composition is searched with the least step time whose point is
   covered as the search's pruning threshold (search's `cutoff`). Its fastest fitting plan is
   found exactly when it is at most that; if no plan that fits is, the composition is covered.

Such compositions are reported `pruned`, with the step time of the rule (`step_time_bound_s`).
Covering is transitive and a frontier point is never covered, so the frontier, its knee and
the deadline and budget answers (points of the frontier; README, 'fasop pareto') are those of
the exhaustive sweep; the rows of compositions searched in full are the same, byte for byte.

Order: compositions of fewer node types first, fastest bound first (`visiting_order`), which finds
frontier points (and tight cut-offs) early. They are searched in *rounds* of ROUND_SIZE compositions, and round r
is formed from what rounds 0..r-2 found: round r+1 is formed while round r runs, so workers do not
wait, and which compositions are pruned depends only on the inputs, never on the number of workers,
the executor or the order results arrive in. Same inputs, same bytes.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence

import numpy as np

from fasop.errors import FasopError
from fasop.sweep import Composition, CompositionResult, SweepJob, train_cost_usd, train_time_h

ROUND_SIZE = 16
"""Compositions searched per round (README, 'fasop pareto': pruning); rounds 0 and 1 know nothing."""
Progress = Callable[[int, int], None]
Record = Callable[[int, float, CompositionResult], None]
"""record(index, cutoff, result): a searched composition finished (e.g. append it to a checkpoint)."""


class Found:
    """The non-dominated points (train_time_h, train_cost_usd, composition index) found so far."""

    def __init__(self, iterations: int):
        self.iterations = iterations
        self.points: list[tuple[float, float, int]] = []

    @staticmethod
    def _covers(p: tuple[float, float, int], t: float, c: float, index: int) -> bool:
        return p[0] <= t and p[1] <= c and (p[0] < t or p[1] < c or p[2] < index)

    def covers(self, index: int, step_time_s: float, usd_per_hour: float) -> bool:
        """True when a found point is at least as fast and as cheap as composition `index` would
        be at this step time, and strictly better in one or earlier (so it stays off the frontier)."""
        t = train_time_h(step_time_s, self.iterations)
        c = train_cost_usd(usd_per_hour, t)
        return any(self._covers(p, t, c, index) for p in self.points)

    def add(self, index: int, result: CompositionResult) -> None:
        if result.status != "ok":
            return
        point = (result.train_time_h, result.train_cost_usd, index)
        if any(self._covers(p, *point) for p in self.points):
            return
        self.points = [p for p in self.points if not self._covers(point, *p)] + [point]

    def cutoff(self, index: int, usd_per_hour: float) -> float:
        """The least step time whose point a found point covers (inf if none): every step time
        from it up is covered too, as time and cost grow with it."""
        best = math.inf
        for p in self.points:
            step = p[0] * 3600 / self.iterations
            if usd_per_hour > 0:
                step = max(step, p[1] / usd_per_hour * 3600 / self.iterations)
            for _ in range(8):  # the float formulas decide: nudge up until covered
                t = train_time_h(step, self.iterations)
                if self._covers(p, t, train_cost_usd(usd_per_hour, t), index):
                    best = min(best, step)
                    break
                step = float(np.nextafter(step, math.inf))
        return best


def bounds(job: SweepJob, comps: Sequence[Composition]) -> list[tuple[float, float]]:
    """(quick bound, $/h) per composition; bound 0 where the estimator cannot be made (the search
    reports why) and inf where no plan is valid (nothing to prune: the search says so, at once)."""
    out = []
    for comp in comps:
        try:
            out.append(job.quick_bound(comp))
        except FasopError:
            out.append((0.0, job.spot_usd_per_hour(comp)))
    return out


def visiting_order(comps: Sequence[Composition], limits: Sequence[tuple[float, float]]) -> list[int]:
    """Fewest node types first, then the fastest bound, then composition order. A composition of
    one type has a bound close to its best plan (quick_bound takes each stage at the fastest
    type's pace) and is often on the frontier itself; its points then cut mixed compositions
    off early. (mixed-64, gpt2xl-scaled, up to 4 nodes a type, one process: 4.8 s against 27 s
    for the cheapest bound point first.)"""
    kinds = [sum(1 for _, n in c.counts if n) for c in comps]
    return sorted(range(len(comps)), key=lambda i: (kinds[i], limits[i][0], i))


def pruned_sweep(job: SweepJob, comps: Sequence[Composition], executor, *, prune: bool = True,
                 round_size: int = ROUND_SIZE, done: Mapping[int, tuple[float, CompositionResult]] | None = None,
                 record: Record | None = None,
                 progress: Progress | None = None) -> Iterator[tuple[int, CompositionResult]]:
    """(composition index, result) of every composition, as each is settled (see the module doc).
    prune=False: every composition searched in full (one round). `done`: results of an earlier,
    interrupted run of the same sweep ({index: (cutoff, result)}, a checkpoint): a task found
    there with the same cutoff is not run again. `record` is called as each search finishes.
    The executor is closed when the generator ends, also when it is stopped early."""
    if round_size < 1:
        raise FasopError(f"--round-size: must be >= 1, got {round_size}")
    done = dict(done or {})
    iterations = job.options["iterations"]
    limits = bounds(job, comps) if prune else [(0.0, 0.0)] * len(comps)
    pending = deque(visiting_order(comps, limits) if prune else range(len(comps)))
    size = round_size if prune else max(1, len(comps))
    found = Found(iterations)
    rounds: list[dict[int, tuple[float, CompositionResult | None]]] = []
    settled = complete = 0  # compositions settled; rounds 0..complete-1 are all in
    report = progress or (lambda n, total: None)

    def form() -> Iterator[tuple[int, CompositionResult]]:
        """Round len(rounds), from what rounds 0..len(rounds)-2 found; pruned ones are yielded."""
        batch: dict[int, tuple[float, CompositionResult | None]] = {}
        while pending and len(batch) < size:
            i = pending.popleft()
            bound, usd_per_hour = limits[i]
            if prune and bound < math.inf and found.covers(i, bound, usd_per_hour):
                yield i, CompositionResult(composition=comps[i], search=None, usd_per_hour=usd_per_hour,
                                           iterations=iterations, step_time_bound_s=bound)
                continue
            cutoff = found.cutoff(i, usd_per_hour) if prune and bound < math.inf else math.inf
            earlier = done.get(i)
            batch[i] = (cutoff, earlier[1] if earlier is not None and earlier[0] == cutoff else None)
        rounds.append(batch)
        executor.submit([(i, comps[i], cutoff) for i, (cutoff, result) in batch.items() if result is None])

    try:
        while True:
            while pending and len(rounds) < complete + 2:
                for item in form():
                    settled += 1
                    yield item
                    report(settled, len(comps))
            for r in range(complete, len(rounds)):  # results taken from `done`
                for i, (cutoff, result) in list(rounds[r].items()):
                    if result is not None and not isinstance(result, _Yielded):
                        rounds[r][i] = (cutoff, _Yielded(result))
                        settled += 1
                        yield i, result
                        report(settled, len(comps))
            while complete < len(rounds) and all(isinstance(v[1], _Yielded) for v in rounds[complete].values()):
                for i, (_, result) in sorted(rounds[complete].items()):
                    found.add(i, result.result)
                complete += 1
            if complete == len(rounds):
                if not pending:
                    return
                continue
            assert executor.pending, "a round waits for a task that was never submitted"
            i, result = executor.next_result()
            r = next(k for k in range(complete, len(rounds)) if i in rounds[k])
            cutoff = rounds[r][i][0]
            rounds[r][i] = (cutoff, _Yielded(result))
            settled += 1
            yield i, result
            # recorded once the caller holds it: an interrupt in between leaves a composition
            # that --resume searches again (same bytes), never one on disk but not in the CSV
            if record is not None:
                record(i, cutoff, result)
            report(settled, len(comps))
    finally:
        executor.close()


class _Yielded:
    """A round's result already handed to the caller."""

    __slots__ = ("result",)

    def __init__(self, result: CompositionResult):
        self.result = result
