"""The 1F1B recurrences (docs/estimators.md §5), written once: `run` over any values with +
and a maximum (floats, arrays, augmented arrays, symbols); and `program`, the events of one
(pp, m) traced on symbols.

Which events wait for which depends only on (pp, m), not on the times. `program` therefore runs
the recurrences once per (pp, m) on symbols, recording each event as (its inputs, its
duration); events are then grouped into levels (an event's level is one more than its latest
input's) and evaluated level by level (`Program.run`), each level one vectorised numpy step over
all its events and all pipelines of a batch. The operations per event are the same (a maximum,
exact, then one addition), so the values are bit for bit those of `run` on arrays, with a few
hundred numpy steps instead of ~10 per event. For one pipeline or a few the same events also run
as compiled straight-line Python on floats (`Program.values`), ~0.1 us per event; `Program.chain`
backtracks a run's critical path. Compiling a (pp, m) program costs ~15 us per event.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property, lru_cache

import numpy as np

COMPILE_EVENTS = 30000
"""Schedules of more events (e.g. pp = 32, m = 128) are always evaluated level by level."""
SCALAR_PER_LEVEL = 35
"""`one_f_one_b` runs the compiled straight-line code once per pipeline while pipelines x events
< this x levels (one event in Python takes ~0.1 us, one numpy step per level ~3.5 us), else one
numpy step per level for the whole batch."""


def run(F: list, B: list, SF: list, SB: list, m: int, zero, mx) -> list:
    """The 1F1B recurrences over any values supporting + and mx (arrays, augmented arrays):
    each stage's last backward end. The events in this order: the warm-up forwards, then per
    micro-batch one forward and one backward of every stage, then the cool-down backwards."""
    pp = len(F)
    # per stage and micro-batch: forward compute end, forward send end, forward received, ready to
    # receive the next forward; the same for backwards
    grids = tuple([[zero] * m for _ in range(pp)] for _ in range(8))
    warm = [min(pp - i - 1, m) for i in range(pp)]
    _warm_up(grids, F, SF, m, warm, zero, mx)
    _steady(grids, F, B, SF, SB, m, warm, zero, mx)
    _cool_down(grids, B, SB, m, warm, mx)
    bce = grids[4]
    return [bce[i][m - 1] for i in range(pp)]


def _backward_send(grids: tuple, SB: list, i: int, j: int, mx) -> None:
    """Stage i's backward send of micro-batch j: when its compute ends and stage i - 1 is ready."""
    bce, bse, bre, brs = grids[4:]
    bse[i][j] = bre[i - 1][j] = mx(bce[i][j], brs[i - 1][j]) + SB[i]


def _warm_up(grids: tuple, F: list, SF: list, m: int, warm: list[int], zero, mx) -> None:
    """Stage i's first warm[i] forwards, and their sends (a send starts when the compute ends and
    the next stage is ready to receive)."""
    fce, fse, fre, frs = grids[:4]
    pp = len(F)
    for j in range(m):
        for i in range(pp):
            if j >= warm[i]:
                continue
            if i == 0:
                start = zero if j == 0 else fse[0][j - 1]
            else:
                start = fre[i][j] if j == 0 else mx(fse[i][j - 1], fre[i][j])
            fce[i][j] = start + F[i]
            if i > 0 and j < warm[i] - 1:
                frs[i][j + 1] = fce[i][j]
            if i < pp - 1:
                end = fce[i][j] + SF[i] if j == 0 else mx(fce[i][j], frs[i + 1][j]) + SF[i]
                fse[i][j] = fre[i + 1][j] = end


def _steady(grids: tuple, F: list, B: list, SF: list, SB: list, m: int, warm: list[int], zero, mx) -> None:
    """The steady state: per micro-batch j, every stage's next forward, then (last stage first)
    every stage's backward of j."""
    fce, fse, fre, frs, bce, bse, bre, brs = grids
    pp = len(F)
    for j in range(m):
        for i in range(pp):
            f = j + warm[i]
            if f > m - 1:
                continue
            if j == 0:
                start = mx(zero if f == 0 else fse[i][f - 1], fre[i][f])
            else:
                start = bce[0][j - 1] if i == 0 else mx(bse[i][j - 1], fre[i][f])
            fce[i][f] = start + F[i]
            if i < pp - 1:
                brs[i][j] = fce[i][f]
                ready = zero if (j == 0 and f == 0) else frs[i + 1][f]
                fse[i][f] = fre[i + 1][f] = mx(fce[i][f], ready) + SF[i]
        for i in range(pp - 1, -1, -1):
            if j > m - warm[i] - 1:
                continue
            g = j + warm[i]
            start = mx(mx(zero if i == 0 else fse[i][g], bre[i][j]), fce[i][g])
            bce[i][j] = start + B[i]
            if i > 0:
                if g + 1 < m:
                    frs[i][g + 1] = bce[i][j]
                elif j + 1 < m:
                    brs[i][j + 1] = bce[i][j]
                _backward_send(grids, SB, i, j, mx)
            elif j == m - 1 - warm[0] and j + 1 < m:
                brs[0][j + 1] = bce[0][j]


def _cool_down(grids: tuple, B: list, SB: list, m: int, warm: list[int], mx) -> None:
    """The backwards left after the steady state (index j-1 wraps to m-1 at j = 0, as in FASOP)."""
    bce, bse, bre, brs = grids[4:]
    for j in range(m):
        for i in range(len(B) - 1, -1, -1):
            if j < m - warm[i]:
                continue
            start = mx(mx(bce[i][j - 1], bre[i][j]), bse[i][j - 1])
            bce[i][j] = start + B[i]
            if j < m - 1:
                brs[i][j + 1] = bce[i][j]
            if i > 0:
                _backward_send(grids, SB, i, j, mx)


class Program:
    """The 1F1B recurrences of one (pp, m) as levels of events: for each level, (input value
    indices per input slot, duration row per event, output value index per event); and the same
    events as straight-line Python on floats, for one pipeline at a time (`values`)."""

    def __init__(self, num_values: int, levels: list, outputs: np.ndarray, events: list):
        self.num_values, self.levels, self.outputs = num_values, levels, outputs
        self.events = events
        """events[k-1] = (input value indices, duration row) of value k; value 0 is zero."""
        self.rows = [0] + [row for _, row in events]
        self.compiles = len(events) <= min(COMPILE_EVENTS, SCALAR_PER_LEVEL * len(levels))
        """Compiled `values` pays: not too big to compile (~15 us per event), and quicker for one
        pipeline than the levels (~0.1 us per event against ~3.5 us per level)."""

    def run(self, durations: np.ndarray) -> np.ndarray:
        """Every value for a batch of pipelines, level by level: durations has the 4 pp rows F, B,
        SF, SB and a column per pipeline; the result a row per value."""
        values = np.zeros((self.num_values, durations.shape[1]))
        for inputs, duration, out in self.levels:
            latest = values[inputs[0]] if inputs[0].ndim == 1 else values[inputs[0]].max(axis=1)
            values[out] = latest + durations[duration]
        return values

    @cached_property
    def values(self) -> Callable[[list[float]], list[float]]:
        """durations (the 4 pp rows F, B, SF, SB of one pipeline) -> every value (0: zero,
        k: event k), as floats: each event is (the largest of its inputs) + its duration, the same
        two float operations as the level-by-level evaluation, so the same bits. Compiled
        straight-line code: ~0.1 us per event, once compiled (~15 us per event)."""
        lines = ["def values(d):", " v0 = 0.0"]
        for k, (inputs, row) in enumerate(self.events, start=1):
            latest = f"v{inputs[0]}"
            if len(inputs) == 2:
                latest = f"(v{inputs[0]} if v{inputs[0]} >= v{inputs[1]} else v{inputs[1]})"
            elif len(inputs) > 2:
                latest = "max(" + ", ".join(f"v{i}" for i in inputs) + ")"
            lines.append(f" v{k} = {latest} + d[{row}]")
        lines.append(" return [" + ", ".join(f"v{k}" for k in range(self.num_values)) + "]")
        namespace: dict = {}
        exec(compile("\n".join(lines), f"<1f1b pp={len(self.outputs)}>", "exec"), namespace)
        return namespace["values"]

    def chain(self, values: list[float], end: int) -> list[int]:
        """Duration rows of the chain of events that sets value `end`, first event first: from
        `end` back to zero, each event's first latest input (the order the recurrences name them,
        as `critical_path_reference`'s comparisons choose)."""
        rows, k = [], end
        while k:
            rows.append(self.rows[k])
            inputs = self.events[k - 1][0]
            latest = max(values[i] for i in inputs)
            k = next(i for i in inputs if values[i] == latest)
        rows.reverse()
        return rows


class _Symbol:
    """A value of the traced recurrences: index into the value table."""

    __slots__ = ("index", "tape")

    def __init__(self, index: int, tape: "_Tape"):
        self.index, self.tape = index, tape

    def __add__(self, duration: "_Duration") -> "_Symbol":
        return self.tape.event((self.index,), duration.row)


class _Latest:
    """The maximum of some values, before its duration is added."""

    __slots__ = ("inputs", "tape")

    def __init__(self, inputs: tuple, tape: "_Tape"):
        self.inputs, self.tape = inputs, tape

    def __add__(self, duration: "_Duration") -> "_Symbol":
        return self.tape.event(self.inputs, duration.row)


class _Duration:
    __slots__ = ("row",)

    def __init__(self, row: int):
        self.row = row


class _Tape:
    def __init__(self):
        self.events: list[tuple[tuple[int, ...], int]] = []  # value k+1 = event k; value 0 = zero

    def event(self, inputs: tuple[int, ...], row: int) -> _Symbol:
        self.events.append((tuple(dict.fromkeys(inputs)), row))
        return _Symbol(len(self.events), self)

    def latest(self, a, b) -> _Latest:
        inputs = (a.inputs if isinstance(a, _Latest) else (a.index,)) + \
                 (b.inputs if isinstance(b, _Latest) else (b.index,))
        return _Latest(inputs, self)


@lru_cache(maxsize=256)
def program(pp: int, m: int) -> Program:
    tape = _Tape()
    durations = [[_Duration(kind * pp + i) for i in range(pp)] for kind in range(4)]  # F, B, SF, SB
    ends = run(*durations, m, _Symbol(0, tape), tape.latest)
    level = [0] * (len(tape.events) + 1)
    by_level: dict[int, list[int]] = {}
    for k, (inputs, _) in enumerate(tape.events, start=1):
        level[k] = 1 + max(level[i] for i in inputs)
        by_level.setdefault(level[k], []).append(k)
    levels = []
    for lv in sorted(by_level):
        members = by_level[lv]
        arity = max(len(tape.events[k - 1][0]) for k in members)
        slots = [np.array([tape.events[k - 1][0][min(s, len(tape.events[k - 1][0]) - 1)] for k in members])
                 for s in range(arity)]  # short input lists repeat their last input: max unchanged
        slots = slots if arity == 1 else [np.stack(slots, axis=1)]
        rows = np.array([tape.events[k - 1][1] for k in members])
        levels.append((slots, rows, np.array(members)))
    return Program(len(tape.events) + 1, levels, np.array([e.index for e in ends]), tape.events)
