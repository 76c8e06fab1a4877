"""An exact certificate for a layer split: the lowest step time over contiguous splits as a
mixed-integer linear program, solved with HiGHS (`scipy.optimize.milp`).

A pipeline schedule is a fixed event graph (`schedule.event_graph`): which event waits for which
depends on the stage and micro-batch counts only. Every event lasts a fixed share of its stage's
time (a forward 1/3, a backward 2/3 in 1F1B) or a constant (a send), so each stage's end is the
longest path through the graph: a maximum over paths p of w_p . t + c_p, linear in the stage
times t, and t is linear in which layers each stage holds. Minimising the step time
max_i(E_i + extra_i(stage 0's layers)) over contiguous splits that fit in memory is then a MILP:

- y[k, l] = 1 when layer l is on a stage <= k (binary; each row a prefix of the layers, each
  stage at least one layer); stage k holds z[k, l] = y[k, l] - y[k-1, l];
- T_k = sum_l z[k, l] x seconds of layer l on stage k;
- memory: for each run of layers [a, b) that does not fit stage k while its inner runs do,
  z[k, a] + z[k, b-1] <= 1 (a contiguous stage holding both ends holds the run);
- extra_i: the seconds a stage adds after its end that depend on stage 0's layer count (e.g.
  FASOP's gradient all-reduce of stage 0's parameters), D_i = extra[n0, i], linear in y[0, .];
- M >= w_p . T + c_p + D_i for the paths p to stage i's end; minimise M.

The paths are added lazily (row generation): solve with the paths known, simulate the split the
solver returns (the event simulation is the definition), and add each stage's critical path
where the simulated value exceeds the solver's M. When no path is violated the solver's split
is optimal: its value is the simulation's. `scipy.optimize.milp` takes no starting solution, so
the caller's best split enters as its value: M <= that value x (1 - margin) -- an infeasible
program proves that split optimal within the margin, a feasible one returns a better split.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

MARGIN = 1e-6
"""Relative: a split is proven optimal when no split is faster by more than this (the branch and
bound's margin, partition.optimal; step times are float32-rounded)."""
MAX_ROUNDS = 20
"""Row-generation rounds (programs solved) per certificate before it gives up."""
MAX_BINARIES = 200
"""The certificate is tried only on programs of at most this many binaries ((stages - 1) x
layers). Measured on FASOP's experiments (2 shared cores): bert's (26 layers) up to 8 stages
(182) take ~0.1-0.2 s each; gpt2xl's 8-stage ones (350) ~1.3 s per program solved, its
16-stage ones (750) seconds to minutes -- past what a search can afford per plan."""
NODE_LIMIT = 2000
"""HiGHS branch-and-bound nodes per program before the certificate gives up (a deterministic
limit: a time limit would make the output depend on the machine)."""

Chains = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray]]
"""chains(stage times (pp,)) -> (ends (pp,), weights (pp, pp), const (pp,)): each stage's end and
its critical path, ends[i] = weights[i] . t + const[i] (schedule.stage_chains)."""


@dataclass(frozen=True)
class Certificate:
    split: tuple[int, ...]
    """The best split: the caller's, or a faster one the solver found (() when none fits at or
    below the caller's value and none was given)."""
    objective: float
    """Its value by the caller's `objective` (inf when no split)."""
    proven: bool
    """True when no contiguous split that fits is faster by more than MARGIN."""
    rounds: int = 0
    """Programs solved."""
    bound: float = -np.inf
    """No split has a lower objective (the objective itself when proven)."""


def certify(times: np.ndarray, chains: Chains, extra: np.ndarray,
            objective: Callable[[tuple[int, ...]], float], best: tuple[int, ...] = (),
            best_value: float = np.inf, node_limit: int | None = NODE_LIMIT,
            max_rounds: int = MAX_ROUNDS) -> Certificate:
    """The lowest-objective contiguous split of layers over stages, proven by a MILP.

    times[k, a, b]: seconds of layers a..b-1 on stage k, inf where they do not fit its memory
    (a sum over its layers where finite; as partition.optimal reads them); chains: the
    schedule's critical paths (`Chains`); extra[n, i]: seconds added to stage i's end when stage
    0 holds n layers; objective(split): the exact value of a split, max_i(E_i + extra[n0, i]) as
    the caller computes it (e.g. in float32). `best`, `best_value`: the caller's best split so far
    and its objective (the value the program must beat). node_limit (per program) and
    max_rounds bound the effort deterministically: past them the certificate is not proven and
    `bound` says how far from proven it is."""
    incumbent, value, lower = tuple(best), best_value, -np.inf
    if (times.shape[0] - 1) * (times.shape[1] - 1) > MAX_BINARIES:
        return Certificate(incumbent, value, False, 0, lower)
    program = _Program(times, extra)
    if incumbent:  # the paths that set the incumbent's time and those that keep its neighbours slower
        program.add_paths(chains(program.stage_times(incumbent)), extra[incumbent[0]], -np.inf)
        for split in _neighbours(incumbent, times):
            program.add_paths(chains(program.stage_times(split)), extra[split[0]], value * (1 - MARGIN))
    for rounds in range(1, max_rounds + 1):
        cap = value * (1 - MARGIN) if np.isfinite(value) else np.inf
        status, split, least = program.solve(cap, node_limit)
        if status == "infeasible":  # no split beats the incumbent by more than the margin
            return Certificate(incumbent, value, bool(incumbent), rounds, value)
        lower = max(lower, min(least, cap))  # the program is a relaxation: nothing is below its bound
        if status == "limit":
            break
        exact = objective(split)
        if exact < value or not incumbent:
            incumbent, value = split, exact
        if value <= lower * (1 + MARGIN):  # the program's optimum is the incumbent's time
            return Certificate(incumbent, value, True, rounds, value)
        if not program.add_paths(chains(program.stage_times(split)), extra[split[0]], least):
            break  # no longer path than the program has: within its tolerances, nothing to add
    return Certificate(incumbent, value, False, rounds, lower)


def _neighbours(split: tuple[int, ...], times: np.ndarray) -> list[tuple[int, ...]]:
    """The splits that move one layer across one boundary of `split` and fit."""
    found = []
    for k in range(len(split) - 1):
        for move in (-1, 1):
            counts = list(split)
            counts[k] += move
            counts[k + 1] -= move
            if min(counts) >= 1:
                edges = np.concatenate([[0], np.cumsum(counts)])
                if np.isfinite(times[np.arange(len(counts)), edges[:-1], edges[1:]]).all():
                    found.append(tuple(counts))
    return found


class _Program:
    """The MILP's fixed part (split, stage times, memory, extra) and the paths added so far.
    Columns: y[k, l] for k < pp - 1 (stage pp-1 holds the rest), then T_k, D_i, M."""

    def __init__(self, times: np.ndarray, extra: np.ndarray):
        pp, size, _ = times.shape
        layer = np.arange(size - 1)
        self.layer_s = np.where(np.isfinite(times[:, layer, layer + 1]), times[:, layer, layer + 1], 0.0)
        self.times = times
        num_layers = size - 1
        self.pp, self.num_layers = pp, num_layers
        ny = (pp - 1) * num_layers
        self.t0, self.d0, self.m = ny, ny + pp, ny + 2 * pp
        self.size = ny + 2 * pp + 1
        self.extra = np.asarray(extra, dtype=float)
        rows: list[tuple[dict[int, float], float, float]] = []
        for k in range(pp - 1):  # prefixes: y[k, l+1] <= y[k, l]
            rows += [({self.y(k, l + 1): 1.0, self.y(k, l): -1.0}, -np.inf, 0.0) for l in range(num_layers - 1)]
        for k in range(pp):  # every stage holds at least one layer: e_k - e_{k-1} >= 1
            rows.append(self.stage_count(k, 1, np.inf))
        for k in range(pp):  # T_k = sum_l z[k, l] s[k, l]
            coef, const = self.z_sum(k, self.layer_s[k])
            coef[self.t0 + k] = coef.get(self.t0 + k, 0.0) - 1.0
            rows.append((coef, -const, -const))
        for i in range(pp):  # D_i = extra[1, i] + sum_{n >= 1} (extra[n+1, i] - extra[n, i]) y[0, n]
            coef = {self.d0 + i: 1.0}
            if pp > 1:
                for n in range(1, num_layers):
                    step = self.extra[n + 1, i] - self.extra[n, i]
                    if step:
                        coef[self.y(0, n)] = -step
            rows.append((coef, self.extra[1, i], self.extra[1, i]))
        rows += self._memory_rows(np.isfinite(times))
        self.fixed = rows
        self.paths: list[tuple[dict[int, float], float, float]] = []
        self.seen: set[tuple] = set()

    def y(self, k: int, l: int) -> int:
        return k * self.num_layers + l

    def z(self, k: int, l: int) -> tuple[dict[int, float], float]:
        """z[k, l] as (coefficients, constant)."""
        coef: dict[int, float] = {}
        const = 0.0
        if k < self.pp - 1:
            coef[self.y(k, l)] = 1.0
        else:
            const = 1.0
        if k > 0:
            coef[self.y(k - 1, l)] = -1.0
        return coef, const

    def z_sum(self, k: int, weights: np.ndarray) -> tuple[dict[int, float], float]:
        coef: dict[int, float] = {}
        const = 0.0
        for l, w in enumerate(weights):
            c, k0 = self.z(k, l)
            for j, v in c.items():
                coef[j] = coef.get(j, 0.0) + w * v
            const += w * k0
        return coef, const

    def stage_count(self, k: int, low: float, high: float) -> tuple[dict[int, float], float, float]:
        coef, const = self.z_sum(k, np.ones(self.num_layers))
        return coef, low - const, high - const

    def _memory_rows(self, fits: np.ndarray) -> list:
        """z[k, a] + z[k, b-1] <= 1 for each least run [a, b) that does not fit stage k."""
        rows = []
        n = self.num_layers
        a, b = np.triu_indices(n + 1, k=1)
        for k in range(self.pp):
            f = fits[k]
            inner = np.where(b - a > 1, f[np.minimum(a + 1, n), b] & f[a, np.maximum(b - 1, 0)], True)
            if np.any(f[a, b] & ~inner):
                raise ValueError("certify: a run of layers fits a stage whose inner run does not")
            for first, stop in zip(a[~f[a, b] & inner].tolist(), b[~f[a, b] & inner].tolist()):
                coef, const = self.z(k, first)
                if stop - first > 1:
                    c2, k2 = self.z(k, stop - 1)
                    for j, v in c2.items():
                        coef[j] = coef.get(j, 0.0) + v
                    const += k2
                rows.append((coef, -np.inf, 1.0 - const))
        return rows

    def stage_times(self, split: Sequence[int]) -> np.ndarray:
        edges = np.concatenate([[0], np.cumsum(split)])
        return self.times[np.arange(self.pp), edges[:-1], edges[1:]]

    def add_paths(self, paths, extra_row: np.ndarray, model_value: float) -> bool:
        """Add each stage's critical path whose value + extra exceeds `model_value` (beyond
        rounding); True when one was added."""
        ends, weights, const = paths
        added = False
        for i in range(self.pp):
            value = ends[i] + extra_row[i]
            key = (i, tuple(np.round(weights[i], 12)), round(float(const[i]), 15))
            if key in self.seen or not value > model_value * (1 + MARGIN / 4):
                continue
            self.seen.add(key)
            coef = {self.m: 1.0, self.d0 + i: -1.0}
            for k in range(self.pp):
                if weights[i, k]:
                    coef[self.t0 + k] = -float(weights[i, k])
            self.paths.append((coef, float(const[i]), np.inf))
            added = True
        return added

    def solve(self, cap: float, node_limit: int | None) -> tuple[str, tuple[int, ...], float]:
        """(status, split, least M) of the program with M <= cap: "optimal" (the split and its M),
        "infeasible", or "limit" (the node limit; least M: the solver's bound)."""
        from scipy.optimize import Bounds, LinearConstraint, milp  # imported here: ~0.3 s, only where needed
        from scipy.sparse import coo_matrix

        rows = self.fixed + self.paths
        data, ri, ci = [], [], []
        for r, (coef, _, _) in enumerate(rows):
            for j, v in coef.items():
                ri.append(r)
                ci.append(j)
                data.append(v)
        matrix = coo_matrix((data, (ri, ci)), shape=(len(rows), self.size)).tocsr()
        low = np.array([lo for _, lo, _ in rows])
        high = np.array([hi for _, _, hi in rows])
        cost = np.zeros(self.size)
        cost[self.m] = 1.0
        integrality = np.zeros(self.size)
        integrality[: self.t0] = 1
        lower, upper = np.zeros(self.size), np.full(self.size, np.inf)
        upper[: self.t0] = 1.0
        upper[self.m] = cap
        options = {"mip_rel_gap": MARGIN / 4}
        if node_limit is not None:
            options["node_limit"] = node_limit
        with _quiet():
            result = milp(cost, constraints=LinearConstraint(matrix, low, high), integrality=integrality,
                          bounds=Bounds(lower, upper), options=options)
        if result.status == 2:
            return "infeasible", (), np.inf
        if result.status != 0 or result.x is None:  # a limit, or HiGHS gave up (e.g. "Solve error"): unproven
            least = getattr(result, "mip_dual_bound", None) if result.status == 1 else None
            return "limit", (), float(least) if least is not None and np.isfinite(least) else -np.inf
        y = np.round(result.x[: self.t0]).reshape(self.pp - 1, self.num_layers)
        edges = [0] + [int(row.sum()) for row in y] + [self.num_layers]
        least = getattr(result, "mip_dual_bound", None)
        least = float(result.x[self.m]) if least is None or not np.isfinite(least) else min(float(least), float(result.x[self.m]))
        return "optimal", tuple(int(edges[k + 1] - edges[k]) for k in range(self.pp)), least


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """HiGHS's MIP solver prints a debugging line to the process's stdout in some releases
    (ERGO-Code/HiGHS, "HighsMipSolverData::transformNewIntegerFeasibleSolution tmpSolver.run();",
    whatever its output options): the library prints nothing, so file descriptor 1 points to
    the null device while it solves."""
    try:
        sys.stdout.flush()
    except (AttributeError, OSError, ValueError):
        pass
    saved = os.dup(1)
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(null)
