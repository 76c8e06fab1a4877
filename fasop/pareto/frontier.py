"""Which cluster to assemble: sweep node compositions, then the time-vs-dollar frontier.

For every composition of node counts within per-type limits, `sweep.sweep` runs the search and
keeps its result (with its training time and cost, sweep.CompositionResult); `analyse` takes each
composition's fastest plan that fits in memory and finds the non-dominated set over (time, cost),
its knee, and the answers to a deadline and a budget query. No printing, no files: the CLI does that.

Definitions (docs/pareto.md):
- A point is on the frontier when no other point is at least as good in every column and
  strictly better in one. Identical points: the first in row order (composition order) only.
- Knee: on the frontier, normalise time and cost to [0, 1] between the frontier's extremes; the
  knee is the point farthest below the chord joining the two extremes, i.e. the largest
  1 - t' - c'. Needs at least 3 frontier points; ties go to the faster point.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np

from fasop.core.errors import FasopError
from fasop.pareto.sweep import CompositionResult

if TYPE_CHECKING:
    import pandas as pd

Sense = Literal["min", "max"]

TIME, COST = "train_time_h", "train_cost_usd"
FLAT = 1e-9
"""A frontier whose times (or costs) span less than this fraction of their size has no knee:
the differences are floating-point rounding, and a knee chosen by them would be noise."""


# ---------------------------------------------------------------------------- frontier
def pareto_front(table: pd.DataFrame, senses: Mapping[str, Sense], *,
                 duplicates: Literal["first", "all"] = "first") -> pd.Series:
    """Boolean Series (index of `table`): True where the row is non-dominated over `senses`.

    `senses` maps each objective column to "min" or "max". Row r dominates row q when r is at
    least as good in every objective and strictly better in one. Rows with a NaN objective are
    never on the front. Rows identical in every objective do not dominate each other:
    duplicates="all" keeps them all, "first" keeps only the first in row order.
    """
    import pandas as pd

    if not senses:
        raise ValueError("pareto_front: no objective columns")
    bad = {c: s for c, s in senses.items() if s not in ("min", "max")}
    if bad:
        raise ValueError(f"pareto_front: sense must be 'min' or 'max', got {bad}")
    if duplicates not in ("first", "all"):
        raise ValueError(f"pareto_front: duplicates must be 'first' or 'all', got {duplicates!r}")
    values = np.column_stack([table[c].to_numpy(dtype=float) * (1.0 if s == "min" else -1.0)
                              for c, s in senses.items()]) if len(table) else np.empty((0, len(senses)))
    valid = ~np.isnan(values).any(axis=1)
    positions = np.flatnonzero(valid)
    # lexicographic order, row position last: a dominating row always comes before the rows it
    # dominates, and the first of identical rows comes first
    order = positions[np.lexsort((positions,) + tuple(values[positions, k] for k in reversed(range(values.shape[1]))))]
    on_front = np.zeros(len(table), dtype=bool)
    front: list[np.ndarray] = []
    for i in order:
        v = values[i]
        beaten = False
        for f in front:
            if (f <= v).all() and (duplicates == "first" or (f < v).any()):
                beaten = True
                break
        if not beaten:
            on_front[i] = True
            front.append(v)
    return pd.Series(on_front, index=table.index, name="on_frontier")


def knee_position(times: Sequence[float], costs: Sequence[float]) -> int | None:
    """Index (into the given frontier points) of the knee, or None with fewer than 3 points, or
    when the times or the costs are flat (span within FLAT of their size: rounding, no trade-off).

    Normalise time and cost to [0, 1] between the frontier's extremes, so the fastest point sits
    at (0, 1) and the cheapest at (1, 0); the knee maximises 1 - t' - c', the distance (x sqrt 2)
    below the chord joining them. Ties go to the faster point.
    """
    if len(times) < 3:
        return None
    t, c = np.asarray(times, dtype=float), np.asarray(costs, dtype=float)
    t_span, c_span = t.max() - t.min(), c.max() - c.min()
    if t_span <= FLAT * abs(t).max() or c_span <= FLAT * abs(c).max():
        return None
    gain = 1.0 - (t - t.min()) / t_span - (c - c.min()) / c_span
    best = max(gain)
    return min((i for i in range(len(t)) if gain[i] == best), key=lambda i: (t[i], i))


def cheapest_within(times: Sequence[float], costs: Sequence[float], deadline_h: float) -> int | None:
    """Deadline query: index of the cheapest point with time <= deadline (ties: faster, then first)."""
    ok = [i for i, t in enumerate(times) if t <= deadline_h]
    return min(ok, key=lambda i: (costs[i], times[i], i)) if ok else None


def fastest_within(times: Sequence[float], costs: Sequence[float], budget_usd: float) -> int | None:
    """Budget query: index of the fastest point with cost <= budget (ties: cheaper, then first)."""
    ok = [i for i, c in enumerate(costs) if c <= budget_usd]
    return min(ok, key=lambda i: (times[i], costs[i], i)) if ok else None


# ---------------------------------------------------------------------------- analysis
@dataclass(frozen=True, kw_only=True)
class ParetoAnalysis:
    results: tuple[CompositionResult, ...]
    """One per composition, in composition order."""
    on_frontier: tuple[bool, ...]
    """Aligned with `results`."""
    frontier: tuple[int, ...]
    """Indices into `results` of the frontier, fastest first."""
    knee: int | None
    """Index into `results`, or None (fewer than 3 frontier points)."""
    deadline_hours: float | None = None
    deadline: int | None = None
    """Cheapest composition finishing within `deadline_hours` (index into results), if any."""
    budget_usd: float | None = None
    budget: int | None = None
    """Fastest composition costing at most `budget_usd` (index into results), if any."""
    complete: bool = True
    """False when the sweep was interrupted: results cover only the compositions finished."""

    def points(self) -> pd.DataFrame:
        """One row per composition: label, kind, status, train_time_h, train_cost_usd, on_frontier, is_knee."""
        import pandas as pd

        return pd.DataFrame({
            "composition": [r.composition.label for r in self.results],
            "kind": [r.composition.kind for r in self.results],
            "status": [r.status for r in self.results],
            TIME: [r.train_time_h for r in self.results],
            COST: [r.train_cost_usd for r in self.results],
            "on_frontier": list(self.on_frontier),
            "is_knee": [i == self.knee for i in range(len(self.results))],
        })


def analyse(results: Sequence[CompositionResult], *, deadline_hours: float | None = None,
            budget_usd: float | None = None, complete: bool = True) -> ParetoAnalysis:
    """Frontier over (train_time_h, train_cost_usd) of the compositions whose best plan fits, its
    knee, and the deadline and budget answers."""
    if deadline_hours is not None and not deadline_hours > 0:
        raise FasopError(f"--deadline-hours: must be > 0, got {deadline_hours}")
    if budget_usd is not None and not budget_usd > 0:
        raise FasopError(f"--budget-usd: must be > 0, got {budget_usd}")
    import pandas as pd

    results = tuple(results)
    table = pd.DataFrame({TIME: [r.train_time_h for r in results], COST: [r.train_cost_usd for r in results]})
    on_front = pareto_front(table, {TIME: "min", COST: "min"}, duplicates="first").tolist()
    frontier = sorted((i for i, f in enumerate(on_front) if f), key=lambda i: (table[TIME][i], i))
    k = knee_position([table[TIME][i] for i in frontier], [table[COST][i] for i in frontier])
    fitting = [i for i, r in enumerate(results) if r.status == "ok"]
    times = [results[i].train_time_h for i in fitting]
    costs = [results[i].train_cost_usd for i in fitting]
    deadline = budget = None
    if deadline_hours is not None:
        j = cheapest_within(times, costs, deadline_hours)
        deadline = None if j is None else fitting[j]
    if budget_usd is not None:
        j = fastest_within(times, costs, budget_usd)
        budget = None if j is None else fitting[j]
    return ParetoAnalysis(results=results, on_frontier=tuple(on_front), frontier=tuple(frontier),
                          knee=None if k is None else frontier[k], deadline_hours=deadline_hours, deadline=deadline,
                          budget_usd=budget_usd, budget=budget, complete=complete)
