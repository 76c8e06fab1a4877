"""A lower bound on a 1F1B pipeline's time (fasop/schedule/pipeline.py) for the optimal partitioner: the
longest chain of events that goes forward, turns once and comes back (`LegBound`), exact on
the stages a partial split fixes, and a table (`leg_completion`) bounding the stages it leaves
free.

It extends the backward sweep (schedule_bounds.SweepBound): on the way out the chain may run
stage k's first forwards one after another (micro-batch y to y + 1: a forward, t_k / k, and the
send it waits for -- stage k's, or stage k-1's that waits for stage k to be ready), and it may
turn back at any stage k whose first backward follows the forward it carries (micro-batch
y >= w_k, the stage's w_k = min(pp - k - 1, m) warm-up forwards; the backward of y - w_k), the
stages after k then off the chain. On the way back it advances as the sweep does. Every such
path is a chain of events of the schedule (recurrences.run), so its length is at most the
simulated stage 0 end; measured on FASOP's experiments, it is the chain of pipelines of few
micro-batches per stage (m = 2, 4 on 16 and 32 stages) that the sweep leaves unproven.
"""

from __future__ import annotations

import numpy as np

from fasop.schedule.bounds import first_layers, sweep_points, sweep_unit_sends, sweep_unit_weights

LEG_MICROBATCHES = 4
"""The way out may carry micro-batches 0..3 from stage to stage (a turn may still advance a
stage to its w_k-th forward): more, a larger table (its size grows with the square)."""


class Legs:
    """The schedule's fixed numbers for the chains: per stage its warm-up forwards, the sends,
    the way out's advances (`out`) and the way back's (`back`) at the sweep's points."""

    def __init__(self, num_stages: int, num_microbatches: int, *, fwd_bwd_factor: float,
                 send_fwd: np.ndarray, send_bwd: np.ndarray):
        pp, m = num_stages, num_microbatches
        self.pp, self.m, self.k = pp, m, fwd_bwd_factor
        self.sf, self.sb = np.asarray(send_fwd, dtype=float), np.asarray(send_bwd, dtype=float)
        self.warm = np.minimum(pp - 1 - np.arange(pp), m)
        self.y = min(m, LEG_MICROBATCHES)
        self.points = sweep_points(m)
        self.g = sweep_unit_weights(pp, m, fwd_bwd_factor=fwd_bwd_factor)  # (pp, P), per unit t
        self.h = sweep_unit_sends(m, self.sf, self.sb)  # (pp, P) seconds
        stage = np.arange(pp)[:, None]
        step = np.arange(1, m)[None, :]  # the advance to micro-batch `step`
        own = np.where(stage < pp - 1, self.sf[:, None], 0.0)
        ready = np.where((stage >= 1) & (step <= self.warm[:, None] - 1), np.append(0.0, self.sf[:-1])[:, None], 0.0)
        self.out_sends = np.concatenate([np.zeros((pp, 1)), np.cumsum(np.maximum(own, ready), axis=1)], axis=1)
        """(pp, m): the sends the way out waits for at stage k from micro-batch 0 to y."""
        after = np.append(self.sb[1:], 0.0)
        self.turn = np.where(stage[:, 0] < pp - 1, np.maximum(np.where(stage[:, 0] > 0, self.sf, 0.0), after), 0.0)
        """(pp,): the send a turn at stage k waits for (its forward's, or the next stage's backward)."""
        self._tabulate()

    def _tabulate(self) -> None:
        """Per stage, `out` and `turn_at` as arrays over the micro-batches carried: out_t[k, y0, y1]
        (x t) and out_s[k, y0, y1] (seconds; -inf where it cannot) for the way out from y0 to y1;
        turn_t[k, y], turn_s[k, y] (-inf where it cannot), turn_p[k, y] for a turn carrying y."""
        pp, y = self.pp, self.y
        self.out_t, self.out_s = np.zeros((pp, y, y)), np.full((pp, y, y), -np.inf)
        self.turn_t, self.turn_s = np.zeros((pp, y)), np.full((pp, y), -np.inf)
        self.turn_p = np.zeros((pp, y), dtype=np.intp)
        one = np.ones(1)
        for k in range(pp):
            for y0 in range(y):
                for y1 in range(y0, y):
                    step = self.out(k, one, y0, y1)
                    if step is not None:
                        self.out_t[k, y0, y1], self.out_s[k, y0, y1] = (y1 - y0) / self.k, step[0] - (y1 - y0) / self.k
                turn = self.turn_at(k, y0)
                if turn is not None:
                    y1, self.turn_p[k, y0] = turn
                    self.turn_t[k, y0] = (y1 - y0) / self.k
                    self.turn_s[k, y0] = self.out(k, one, y0, y1)[0] - (y1 - y0) / self.k + self.turn[k]

    def out(self, k: int, t: np.ndarray, y0: int, y1: int) -> np.ndarray | None:
        """Stage k's advance on the way out from micro-batch y0 to y1 (>= y0), per stage time t;
        None where it cannot (only the first forwards, up to the w_k-th, run in a row)."""
        if y1 != y0 and (y1 > self.warm[k] or y1 > self.m - 1):
            return None
        return t * ((y1 - y0) / self.k) + (self.out_sends[k, y1] - self.out_sends[k, y0])

    def turn_at(self, k: int, y: int) -> tuple[int, int] | None:
        """(the micro-batch the way out reaches at stage k, the point the way back starts from)
        when carrying micro-batch y into stage k turns there; None where it cannot."""
        y1 = max(y, int(self.warm[k]))
        if y1 > self.m - 1:
            return None
        return y1, int(np.searchsorted(self.points, y1 - self.warm[k]))  # a later point: fewer advances

    def back(self, k: int, t: np.ndarray) -> np.ndarray:
        """Per stage time t (shape (..., 1)), stage k's way-back advance from micro-batch 0 to each
        point: t G + H."""
        return t * self.g[k] + self.h[k]


def leg_completion(times: np.ndarray, legs: Legs) -> np.ndarray:
    """table[k, a, y, p] <= the least, over the splits of layers a.. into stages k.., of the
    longest chain that enters stage k on the way out carrying micro-batch y and leaves it on the
    way back after the backward of micro-batch points[p] (its stage times, advances and sends);
    inf where no split fits. Stage by stage from the last, the least over stage k's choices of
    the larger of turning there and going on (a min-max relaxed to the least per entry, so a
    lower bound); times as in partition.optimal. Shape (pp + 1, layers + 1, Y, points)."""
    pp, size, _ = times.shape
    points = len(legs.points)
    table = np.full((pp + 1, size, legs.y, points), np.inf)
    feasible = np.zeros((pp + 1, size), dtype=bool)
    feasible[pp, size - 1] = True
    longest, reachable = first_layers(times)
    for k in range(pp - 1, -1, -1):
        first = np.arange(*reachable[k])[:, None]  # where a split can start stage k
        if not longest[k] or not len(first):
            continue
        stop = np.minimum(first + np.arange(1, longest[k] + 1)[None, :], size - 1)
        t = times[k][first, stop]
        fits = np.isfinite(t) & (stop > first) & feasible[k + 1][stop]
        t = np.where(fits, t, 0.0)[:, :, None]  # (first, length, 1)
        value = _stage_k(k, t, table[k + 1][stop] if k < pp - 1 else None, legs)
        table[k, first[:, 0]] = np.where(fits[:, :, None, None], value, np.inf).min(axis=1)
        feasible[k, first[:, 0]] = fits.any(axis=1)
    return table


def _stage_k(k: int, t: np.ndarray, later: np.ndarray | None, legs: Legs) -> np.ndarray:
    """The chains through stage k (time t, (..., 1)) entering with each y, leaving at each point:
    turning at k, or going on into `later` (the next stage's table rows, (..., Y, P))."""
    back = legs.back(k, t)  # (..., P)
    points = np.arange(len(legs.points))
    start = legs.turn_s[k] + t * legs.turn_t[k] - np.take_along_axis(back, np.broadcast_to(
        legs.turn_p[k], back.shape[:-1] + (legs.y,)), axis=-1)  # (..., Y)
    value = np.where(points >= legs.turn_p[k][:, None], start[..., None] + back[..., None, :], -np.inf)
    if later is not None:
        # back from the next stage at point p' and on at stage k to p: later + sb - back(p') + back(p)
        returned = np.maximum.accumulate(later + legs.sb[k + 1] - back[..., None, :], axis=-1) + back[..., None, :]
        out = legs.out_s[k] + t[..., None] * legs.out_t[k] + legs.sf[k]  # (..., Y0, Y1)
        with np.errstate(invalid="ignore"):  # -inf + inf where a stop does not fit: masked by the caller
            value = np.maximum(value, (out[..., None] + returned[..., None, :, :]).max(axis=-2))
    return value + t[..., None]


class LegBound:
    """partition.optimal's bound from the chains of `leg_completion`: the stages 0..k a node
    fixes exactly (per choice of stage k: the way out's best arrival per micro-batch `out`, the
    way back's longest from each point down to stage 0 `back`, and the longest chain that
    turned at a fixed stage `closed`), the free stages by the table; the bound is the largest
    over y and the point of the two, and `closed`."""

    def __init__(self, table: np.ndarray, legs: Legs):
        self.table, self.legs = table, legs
        self.start = np.full(legs.y, -np.inf)
        self.start[0] = 0.0
        self.end = np.full(len(legs.points), -np.inf)
        self.end[-1] = 0.0  # the chain ends with micro-batch m - 1 at stage 0

    def __call__(self, k: int, state, t: np.ndarray, stops: np.ndarray, before: float) -> tuple[np.ndarray, "_States"]:
        """(bounds, states) of the choices t of stage k ending at layers `stops`; `state`: the
        state of the node's choice of stage k - 1 (None at stage 0); before: stages < k's times."""
        legs = self.legs
        arrive, later, closed = (self.start, self.end, -np.inf) if state is None else \
            (state[0] + legs.sf[k - 1], state[1] + legs.sb[k], state[2])
        tt = t[:, None]
        out = (arrive[:, None] + legs.out_s[k] + tt[:, :, None] * legs.out_t[k]).max(axis=1)  # (C, Y)
        back = tt * legs.g[k] + legs.h[k]
        # the way back from each point at stage k: advance to p' there, then `later` from p'
        way = np.maximum.accumulate((later + back)[:, ::-1], axis=1)[:, ::-1] - back
        total = before + t
        turns = arrive + legs.turn_s[k] + tt * legs.turn_t[k] + way[:, legs.turn_p[k]]  # (C, Y)
        turned = np.maximum(closed, total + turns.max(axis=1))
        bounds = turned
        if k < legs.pp - 1:
            rest = self.table[k + 1][stops] + (legs.sf[k] + legs.sb[k + 1])  # (C, Y, P)
            bounds = np.maximum(bounds, total + (out[:, :, None] + rest + way[:, None, :]).max(axis=(1, 2)))
        return bounds, _States(out, way, turned)


class _States:
    """Per choice of `LegBound`: (out, way back, closed)."""

    __slots__ = ("out", "way", "closed")

    def __init__(self, out: np.ndarray, way: np.ndarray, closed: np.ndarray):
        self.out, self.way, self.closed = out, way, closed

    def __getitem__(self, i: int) -> tuple[np.ndarray, np.ndarray, float]:
        return self.out[i], self.way[i], float(self.closed[i])


def with_legs(bound, legs: LegBound):
    """`bound` (a partition.Bound) raised to `legs`'s where that is higher; its chains carry the
    legs' states along."""
    def raised(k, before, chain, t, rest):
        inner, state = (None, None) if chain is None else chain
        bounds, chains = bound(k, before, inner, t, rest)
        lifted, states = legs(k, state, t, rest.stops, before)
        return np.maximum(bounds, lifted), _Pairs(chains, states)
    return raised


class _Pairs:
    __slots__ = ("a", "b")

    def __init__(self, a, b):
        self.a, self.b = a, b

    def __getitem__(self, i: int) -> tuple:
        return self.a[i], self.b[i]


def by_last_stage(fitting: np.ndarray, first: tuple[int, ...]) -> list[np.ndarray]:
    """`fitting` once per layer count of the last stage that fits (that of the split `first`
    first), the last stage's other runs made infeasible: the legs pass's searches, each of which
    knows where the last stage starts (fasop.estimators.fasop2024.optimal.SplitSearch.legged)."""
    pp, size, _ = fitting.shape
    starts = [c for c in range(size - 2, 0, -1) if np.isfinite(fitting[pp - 1, c, size - 1])]
    starts.sort(key=lambda c: c != size - 1 - first[-1])
    found = []
    for c in starts:
        only = fitting.copy()
        only[pp - 1] = np.inf
        only[pp - 1, c, size - 1] = fitting[pp - 1, c, size - 1]
        found.append(only)
    return found
