"""A composition sweep that skips compositions which cannot reach the time-vs-cost frontier.

`fasop pareto` needs, per composition, only its fastest plan that fits -- and only if that plan's
(train_time_h, train_cost_usd) is not behind a frontier point. Two exact rules use what earlier
searches found (the frontier points *found*: fasop.pareto.sweep.train_time_h / train_cost_usd of their
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
the deadline and budget answers (points of the frontier; docs/pareto.md) are those of
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
from functools import partial

import numpy as np

from fasop.core.errors import FasopError
from fasop.pareto.sweep import Composition, CompositionResult, SweepJob, train_cost_usd, train_time_h, worker_job

ROUND_SIZE = 16
"""Compositions searched per round (docs/pareto.md: pruning); rounds 0 and 1 know nothing."""
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
    report = progress or (lambda n, total: None)
    try:
        limits = [(0.0, 0.0)] * len(comps) if not prune else \
            getattr(executor, "bounds", partial(bounds, job))(comps)  # where the executor has workers, there
        rounds = _Rounds(job, comps, executor, limits, round_size if prune else max(1, len(comps)),
                         dict(done or {}), prune)
        for i, result, cutoff in rounds.settle():
            yield i, result
            # recorded once the caller holds it: an interrupt in between leaves a composition
            # that --resume searches again (same bytes), never one on disk but not in the CSV
            if cutoff is not None and record is not None:
                record(i, cutoff, result)
            report(rounds.settled, len(comps))
    finally:
        executor.close()


Settled = tuple[int, CompositionResult, "float | None"]
"""(composition index, result, the cutoff it was just searched with; None: pruned or from `done`)."""


class _Rounds:
    """A pruned sweep's rounds: each {index: (cutoff, result: None while it runs, _Yielded once
    handed out)}; rounds 0..complete-1 are all in, rounds 0..known-1 are in `found`."""

    def __init__(self, job: SweepJob, comps: Sequence[Composition], executor, limits: list[tuple[float, float]],
                 size: int, done: dict, prune: bool):
        self.comps, self.executor, self.limits, self.size, self.done, self.prune = \
            comps, executor, limits, size, done, prune
        self.iterations = job.options["iterations"]
        self.pending = deque(visiting_order(comps, limits) if prune else range(len(comps)))
        self.found = Found(self.iterations)
        self.rounds: list[dict[int, tuple[float, CompositionResult | None]]] = []
        self.settled = self.complete = self.known = 0

    def settle(self) -> Iterator[Settled]:
        """Every composition as it settles: round r is formed once rounds 0..r-2 are all in."""
        while True:
            while self.pending and len(self.rounds) < self.complete + 2:
                yield from self._form()
            yield from self._from_done()
            while self.complete < len(self.rounds) and \
                    all(isinstance(v[1], _Yielded) for v in self.rounds[self.complete].values()):
                self.complete += 1  # its results join `found` when round complete+2 is formed, not before
            if self.complete == len(self.rounds):
                if not self.pending:
                    return
                continue
            yield self._receive()

    def _form(self) -> Iterator[Settled]:
        """Round len(rounds), from what rounds 0..len(rounds)-2 found; pruned ones are yielded."""
        while self.known < len(self.rounds) - 1:  # exactly rounds 0..r-2, however many more have arrived
            assert self.known < self.complete, "a round is formed before the round two earlier is in"
            for i, (_, result) in sorted(self.rounds[self.known].items()):
                self.found.add(i, result.result)
            self.known += 1
        batch: dict[int, tuple[float, CompositionResult | None]] = {}
        while self.pending and len(batch) < self.size:
            i = self.pending.popleft()
            bound, usd_per_hour = self.limits[i]
            if self.prune and bound < math.inf and self.found.covers(i, bound, usd_per_hour):
                self.settled += 1
                yield i, CompositionResult(composition=self.comps[i], search=None, usd_per_hour=usd_per_hour,
                                           iterations=self.iterations, step_time_bound_s=bound), None
                continue
            cutoff = self.found.cutoff(i, usd_per_hour) if self.prune and bound < math.inf else math.inf
            earlier = self.done.get(i)
            batch[i] = (cutoff, earlier[1] if earlier is not None and earlier[0] == cutoff else None)
        self.rounds.append(batch)
        self.executor.submit([(i, self.comps[i], cutoff) for i, (cutoff, result) in batch.items() if result is None])

    def _from_done(self) -> Iterator[Settled]:
        """The results of rounds still open that were taken from `done`."""
        for r in range(self.complete, len(self.rounds)):
            for i, (cutoff, result) in list(self.rounds[r].items()):
                if result is not None and not isinstance(result, _Yielded):
                    self.rounds[r][i] = (cutoff, _Yielded(result))
                    self.settled += 1
                    yield i, result, None

    def _receive(self) -> Settled:
        """The executor's next result."""
        assert self.executor.pending, "a round waits for a task that was never submitted"
        i, result = self.executor.next_result()
        r = next(k for k in range(self.complete, len(self.rounds)) if i in self.rounds[k])
        cutoff = self.rounds[r][i][0]
        self.rounds[r][i] = (cutoff, _Yielded(result))
        self.settled += 1
        return i, result, cutoff


class _Yielded:
    """A round's result already handed to the caller."""

    __slots__ = ("result",)

    def __init__(self, result: CompositionResult):
        self.result = result


def bound_worker(comps: Sequence[Composition]) -> list[tuple[float, float]]:
    """`bounds` of some compositions, in a worker process (sweep.init_sweep_worker set its job)."""
    return bounds(worker_job(), comps)
