"""`fasop calibrate RUNS.csv`: the analytic estimator's physical parameters fitted to measured runs.

The runs are `fasop validate`'s CSV (fasop/report/validate.py). The parameters are physical ones
only (fasop/specs/calibration.py): per GPU type of the runs its matmul efficiency, memory-bound
efficiency and per-layer overhead; per link kind its achieved share of the bandwidth. Each run's
plan is pinned first: a cell the run left empty takes the value `fasop validate` picks with the
uncalibrated constants, so that the fit moves physics, not plans.

The fit (scipy.optimize.least_squares, trust region with bounds) minimises the squared log
errors log(predicted / measured) -- relative errors, a 10 s run weighing as much as a 1 s one --
over efficiencies as logarithms bounded to (0.05, 1] and overheads in milliseconds bounded to
[0, 5]. Only parameters the runs identify are fitted; the others stay at their prior, each with a
note (or, when the user named it with `--fit`, the command refuses it): the Jacobian of the log
errors at the prior is taken column by column (most physical first: matmul, link, memory,
overhead), and a column is kept when its part orthogonal to the columns kept before it is at
least IDENTIFIABLE of its own length and its largest entry at least FLAT -- a parameter no run's
step depends on (a GPU no run used, a link no run's step waits for) has a zero column, one whose
effect another kept parameter mimics on every run a dependent one.

Leave-one-out: for each run, the whole procedure (identification, fit) on the other runs, then
that run predicted: its error says whether the fit generalises to a run it did not see.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

from fasop.core.errors import FasopError
from fasop.report.validate import PICKED, Row, predict, read_table
from fasop.report.validate_models import architecture
from fasop.specs.calibration import (GPU_KEYS, LINK_KINDS, Calibration, apply_calibration, bounds_of,
                                     canonical_parameter, gpu_parameter, in_bounds, known_parameter,
                                     link_parameter)
from fasop.specs.catalog import AnalyticParams, canonical, default_params, load_gpus

IDENTIFIABLE = 1e-3
"""Least share of a Jacobian column's length outside the span of the columns kept before it."""
FLAT = 1e-6
"""A column whose largest entry (d log time / d parameter, per log-unit or per ms) is below this is zero."""
MAX_RUNS = 100
"""calibrate fits at most this many runs: leave-one-out refits on all the others, ~6 ms x runs^2 (100: ~60 s)."""
STEP = 1e-4
"""Finite-difference step of the identification Jacobian, in the fitted coordinates."""


@dataclass(frozen=True, kw_only=True)
class Fit:
    """A calibration: the parameters, the runs' predictions before and after, leave-one-out."""

    labels: tuple[str, ...]
    measured: tuple[float, ...]
    before: tuple[float, ...]
    """Each run's predicted seconds with the uncalibrated constants (what `fasop validate` prints)."""
    after: tuple[float, ...]
    """... with the fitted overlay applied (what `fasop validate --calibration` prints)."""
    left_out: tuple[float, ...]
    """... fitted without that run (leave-one-out); empty for one run (nothing to fit without it)."""
    priors: dict[str, float]
    """Every candidate parameter's value before."""
    fitted: dict[str, float]
    """The identified parameters' values after, in candidate order."""
    notes: tuple[str, ...]
    """One line per candidate left at its prior, and why."""
    unread_columns: tuple[str, ...] = ()
    """The runs CSV's columns validate does not read (validate_rows.read_table)."""

    @property
    def calibration(self) -> Calibration:
        return Calibration(values=tuple(self.fitted.items()))

    def mape(self, predicted: tuple[float, ...]) -> float:
        return 100 * sum(abs(p - m) / m for p, m in zip(predicted, self.measured)) / len(self.measured)

    def max_error(self, predicted: tuple[float, ...]) -> float:
        return 100 * max(abs(p - m) / m for p, m in zip(predicted, self.measured))


# ----------------------------------------------------------------------------- parameters
def run_gpus(predicted: list[dict]) -> tuple:
    """The catalog GPU types the runs use, in order of first use (a mixed row's every stage and replica, as
    `fasop validate` reports them in its `gpu` column; `predicted`: validate's output row of each run)."""
    gpus = load_gpus()
    used = (name for out in predicted for name in out["gpu"].split("+"))
    return tuple({gpus[canonical(n)].name: gpus[canonical(n)] for n in used if canonical(n) in gpus}.values())


def candidates(gpus: tuple) -> list[str]:
    """Per GPU type the runs use (run_gpus) its keys, then every link kind."""
    names = [g.name for g in gpus]
    order = [("matmul_efficiency",), LINK_KINDS, ("memory_bandwidth_efficiency",), ("layer_overhead_s",)]
    out = []
    for group in order:
        if group is LINK_KINDS:
            out += [link_parameter(k) for k in LINK_KINDS]
        else:
            out += [gpu_parameter(g, group[0]) for g in names]
    assert sorted(out) == sorted([gpu_parameter(g, k) for g in names for k in GPU_KEYS]
                                 + [link_parameter(k) for k in LINK_KINDS])
    return out


def prior(name: str, params: AnalyticParams, gpus: tuple = ()) -> float:
    """A parameter's value under `params` (the GPU's own value, else analytic.yaml's); a link kind's, the share
    the runs' GPUs (`gpus`, GpuType) use over it -- the first one's own where it has one (H100's NVLink 0.82) --,
    else analytic.yaml's."""
    parts = name.split(".")
    if parts[0] == "link_efficiency":
        used = link_shares(name, params, gpus)
        return next(iter(used.values())) if used else params.link_efficiency[parts[1]]
    gpu = params.gpu(load_gpus()[canonical(parts[1])])
    return {"matmul_efficiency": lambda: gpu.matmul_efficiency,
            "memory_bandwidth_efficiency": lambda: gpu.memory_share(params),
            "layer_overhead_s": lambda: gpu.layer_overhead(params)}[parts[2]]()


def link_shares(name: str, params: AnalyticParams, gpus: tuple) -> dict[str, float]:
    """{GPU type: its share of the link kind `name`} of the runs' GPUs whose nodes join over it (their own
    measured share, else analytic.yaml's); a row's cluster may state others (its `analytic:` section)."""
    kind = name.split(".")[1]
    return {g.name: params.gpu(g).intra_node_share(params) for g in gpus if g.intra_node_link == kind}


def _overhead(name: str) -> bool:
    return name.endswith("layer_overhead_s")


def to_x(name: str, value: float) -> float:
    """The fitted coordinate: log of an efficiency, milliseconds of an overhead."""
    return value * 1e3 if _overhead(name) else math.log(value)


def from_x(name: str, x: float) -> float:
    return x / 1e3 if _overhead(name) else math.exp(x)


def x_bounds(name: str) -> tuple[float, float]:
    low, high = bounds_of(name)
    return (to_x(name, low), to_x(name, high)) if _overhead(name) else (math.log(low), math.log(high))


# ----------------------------------------------------------------------------- the model at x
class _Problem:
    """The pinned runs of one file and the residuals log(predicted / measured) at a point x."""

    def __init__(self, path: Path, runs: list[Row], base: AnalyticParams, names: list[str],
                 active: list[int] | None = None, as_searched: bool = False):
        self.path, self.runs, self.base, self.names, self.as_searched = path, runs, base, names, as_searched
        self.measured = np.array([float(r.cells["measured_seconds_per_iter"]) for r in runs])
        self.active = list(range(len(names))) if active is None else list(active)
        """The parameters x sets; the others stay as `base` has them (as the overlay written leaves them)."""

    def params(self, x) -> AnalyticParams:
        values = tuple((self.names[j], min(max(from_x(self.names[j], x[j]), bounds_of(self.names[j])[0]),
                                           bounds_of(self.names[j])[1])) for j in self.active)
        return apply_calibration(Calibration(values=values), self.base) if values else self.base

    def predicted(self, x, runs: list[Row] | None = None) -> np.ndarray:
        params = self.params(x)
        return np.array([predict(self.path, r, params, self.as_searched).row["predicted_seconds_per_iter"]
                         for r in runs or self.runs])

    def residuals(self, x) -> np.ndarray:
        return np.log(self.predicted(x) / self.measured)

    def jacobian(self, x0) -> np.ndarray:
        """Forward differences (backward at an upper bound) of the residuals, one column a parameter, each set
        alone at its prior and beside it (the others as `base` has them; a link kind's one share then applies to
        every GPU, whose own shares may differ: prior)."""
        active, columns = self.active, []
        try:
            for j, name in enumerate(self.names):
                h = -STEP if x0[j] + STEP > x_bounds(name)[1] else STEP
                x = np.array(x0, dtype=float)
                self.active = [j]
                r0 = self.residuals(x)
                x[j] += h
                columns.append((self.residuals(x) - r0) / h)
        finally:
            self.active = active
        return np.array(columns).T.reshape(len(self.runs), len(self.names))


def identify(problem: _Problem, x0) -> tuple[list[int], dict[int, str]]:
    """(indices of the parameters the runs identify, {index: why not} for the others)."""
    jac = problem.jacobian(x0)
    kept, why, basis = [], {}, []
    for j, name in enumerate(problem.names):
        column = jac[:, j]
        if np.max(np.abs(column), initial=0.0) < FLAT:
            why[j] = "no run's step time depends on it"
            continue
        rest = column - sum((b @ column) * b for b in basis) if basis else column
        if np.linalg.norm(rest) < IDENTIFIABLE * np.linalg.norm(column):
            others = ", ".join(problem.names[k] for k in kept)
            why[j] = f"these runs cannot tell its effect from that of {others}"
            continue
        basis.append(rest / np.linalg.norm(rest))
        kept.append(j)
    return kept, why


def solve(problem: _Problem, x0, kept: list[int], starts: int = 2) -> np.ndarray:
    """x with the kept parameters fitted (least squares on the log errors, within bounds).

    A step time is piecewise smooth: a stage runs at its slowest replica, a pipeline at its slowest
    stage, so a local fit from the priors can stop where the bottleneck GPU would change. The fit
    therefore looks at the corners of a small grid first -- each GPU type's matmul efficiency at its
    prior or at 0.6 of it (at most 4 types: 16 corners) -- and runs from the `starts` best ones
    (`starts` 1: from x only, as a leave-one-out fit does from the fit on all runs)."""
    x = np.array(x0, dtype=float)
    problem.active = list(kept)   # only what the overlay will hold
    if not kept:
        return x
    low = np.array([x_bounds(problem.names[j])[0] for j in kept])
    high = np.array([x_bounds(problem.names[j])[1] for j in kept])

    def residuals(y):
        x[kept] = y
        return problem.residuals(x)

    first = np.clip(x[kept], low, high)
    matmul = [i for i, j in enumerate(kept) if problem.names[j].endswith(".matmul_efficiency")][:4 if starts > 1 else 0]
    corners = []
    for mask in range(2 ** len(matmul)):
        y = first.copy()
        for bit, i in enumerate(matmul):
            y[i] += math.log(0.6) if mask >> bit & 1 else 0.0
        y = np.clip(y, low, high)
        corners.append((float(np.sum(residuals(y) ** 2)), mask, y))
    best = None
    for _, _, start in sorted(corners, key=lambda c: c[:2])[:starts]:
        result = least_squares(residuals, start, bounds=(low, high), method="trf", x_scale="jac",
                               ftol=1e-12, xtol=1e-12, gtol=1e-12, max_nfev=200 * (len(kept) + 1))
        if best is None or result.cost < best.cost:
            best = result
    x[kept] = best.x
    return x


# ----------------------------------------------------------------------------- the command's work
def pin_plans(rows: list[Row], predicted: list[dict]) -> list[Row]:
    """Each row with its empty plan cells set to what `fasop validate` picked for it (`predicted`: its output row)."""
    pinned = []
    for row, out in zip(rows, predicted):
        cells = dict(row.cells)
        for key in PICKED:
            if not (cells.get(key) or "").strip():
                value = out[key]
                cells[key] = str(int(value) if isinstance(value, bool) else value)
        pinned.append(Row(row.line, cells))
    return pinned


def _snap(name: str, value: float) -> float:
    """A value within 1e-9 (relative to the range) of a bound is that bound (the solver stops just inside)."""
    low, high = bounds_of(name)
    allowed = (low, high) if _overhead(name) else (high,)   # an efficiency's lower bound is open
    value = next((b for b in allowed if abs(value - b) <= 1e-9 * (high - low)), value)
    return value if in_bounds(name, value) else math.nextafter(low, high)


def _label(row: Row) -> str:
    c = {k: (v or "").strip() for k, v in row.cells.items()}
    return c.get("name") or f"{c.get('num_gpus')}x{c.get('gpu')} tp{c.get('tp')} pp{c.get('pp')} dp{c.get('dp')}"


def calibrate(path: str | Path, params: AnalyticParams | None = None, only: tuple[str, ...] = (),
              progress=None, as_searched: bool = False) -> Fit:
    """Fit the physical parameters the runs of `path` identify (`only`: just these, each of which
    must be identified, else FasopError) and predict every run before, after and left out;
    `progress(done, total)` after each of the 1 + len(runs) fits (the fit on all runs, then one a run left out);
    `as_searched`: the rows' empty software cells as `fasop search` estimates plans (validate.predict)."""
    report = progress or (lambda done, total: None)
    path, base = Path(path), params or default_params()
    rows, unread = read_table(path)
    if len(rows) > MAX_RUNS:
        raise FasopError(f"{path}: {len(rows):,} runs, more than the {MAX_RUNS} calibrate fits (each is left out once "
                         "and refitted: the time grows with the square of the runs); 3-30 runs of different plans "
                         "identify the parameters")
    for name in only:
        if not known_parameter(name):
            raise FasopError(f"--fit: {name!r} is not a parameter: gpus.<catalog GPU>.<{'|'.join(GPU_KEYS)}> "
                             f"or link_efficiency.<{'|'.join(LINK_KINDS)}>")
    only = tuple(canonical_parameter(name) for name in only)   # a GPU by an alias, as an overlay names it
    architecture.cache_clear()   # the rows' models read afresh, then once for the whole fit
    first = [predict(path, r, base, as_searched).row for r in rows]   # the plans, GPUs and "before" of every run
    gpus = run_gpus(first)
    names = list(dict.fromkeys(only)) or candidates(gpus)
    runs = pin_plans(rows, first)
    problem = _Problem(path, runs, base, names, as_searched=as_searched)
    priors = {n: prior(n, base, gpus) for n in names}
    x0 = np.array([to_x(n, priors[n]) for n in names])
    kept, why = identify(problem, x0)
    if only and why:
        j = min(why)
        raise FasopError(f"--fit: {names[j]}: not identifiable from the {len(runs)} runs of {path}: {why[j]}")
    if not kept:
        raise FasopError(f"{path}: the runs identify no parameter ({names[0]}: {why[0]})")
    x = solve(problem, x0, kept)
    fits = 1 + len(runs) if len(runs) > 1 else 1
    report(1, fits)
    fitted = {names[j]: _snap(names[j], from_x(names[j], float(x[j]))) for j in kept}
    calibrated = apply_calibration(Calibration(values=tuple(fitted.items())), base)
    left_out = []
    for i in range(len(runs)) if len(runs) > 1 else ():   # one run left out leaves nothing to fit
        left_out.append(_left_out(problem, x0, x, i, rows[i]))
        report(2 + i, fits)
    return Fit(labels=tuple(_label(r) for r in rows), measured=tuple(float(m) for m in problem.measured),
               before=tuple(out["predicted_seconds_per_iter"] for out in first),
               after=tuple(predict(path, r, calibrated, as_searched).row["predicted_seconds_per_iter"] for r in rows),
               left_out=tuple(left_out), priors=priors, fitted=fitted,
               notes=tuple(f"{names[j]}: left at its prior {priors[names[j]]:.4g}: {why[j]}" for j in sorted(why))
               + tuple(_shares_note(n, base, gpus) for n in names if len(link_shares(n, base, gpus)) > 1
                       if n.startswith("link_efficiency.")),
               unread_columns=unread)


def _shares_note(name: str, base: AnalyticParams, gpus: tuple) -> str:
    shares = link_shares(name, base, gpus)
    return (f"{name}: the runs' GPUs reach different shares of it ({', '.join(f'{g} {v:g}' for g, v in shares.items())});"
            f" its prior is {next(iter(shares))}'s, and a fitted share replaces them all")


def _left_out(problem: _Problem, x0, fitted, i: int, row: Row) -> float:
    """Run i predicted from a fit (identification included, at the priors x0) on the other runs,
    started from the fit on all runs; its plan cells as `fasop validate` picks them under the
    constants fitted without it."""
    others = _Problem(problem.path, problem.runs[:i] + problem.runs[i + 1:], problem.base, problem.names, active=[],
                      as_searched=problem.as_searched)
    kept, _ = identify(others, x0) if others.runs else ([], {})
    start = np.array(x0, dtype=float)
    start[kept] = np.asarray(fitted)[kept]
    x = solve(others, start, kept, starts=1)
    return float(predict(problem.path, row, others.params(x), problem.as_searched).row["predicted_seconds_per_iter"])
