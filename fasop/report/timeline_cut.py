"""A pipeline timeline with many micro-batches, cut for its figure: the warm-up, a few steady
micro-batches, a break, a few more, the cool-down. A 1F1B pipeline's steady state repeats one
forward and one backward a micro-batch on every stage, so the hidden stretch shows nothing the
kept ones do not; a chart of 2 x stages x micro-batches boxes (16,384 for 16 stages of 512) is
neither legible nor quick to draw. No matplotlib here: plots.py draws what this returns.

The cut is one window of time [t1, t2] on every stage: t1 is the end of stage 0's backward of
micro-batch KEEP (KEEP steady micro-batches after the first backward), t2 the start of stage 0's
backward of micro-batch m - pp - KEEP (KEEP before stage 0's cool-down). Shown times after the
window move left by (t2 - t1) less a gap for the break mark; an event across a window edge is
drawn in its parts outside the window.
"""

from __future__ import annotations

from dataclasses import dataclass

KEEP = 3
"""Steady micro-batches drawn on each side of the break."""
MIN_HIDDEN = 4
"""Micro-batches of stage 0's steady state a cut must hide to be worth a break."""
CUT_BOXES = 800
"""Compute boxes (2 x stages x micro-batches) past which a timeline is cut: fewer stay legible whole."""
GAP_FRACTION = 0.03
"""The break's width, as a fraction of the drawn time axis."""


@dataclass(frozen=True)
class Box:
    """One drawn piece of a timeline event: its event's index, and its drawn start and end (s)."""

    event: int
    start_s: float
    end_s: float


@dataclass(frozen=True)
class Cut:
    """The hidden window [start_s, end_s] of real time, drawn as a gap [at_s, at_s + gap_s]."""

    start_s: float
    end_s: float
    at_s: float
    gap_s: float
    hidden_microbatches: int
    """Stage 0's backwards that start and end inside the window."""

    @property
    def shift_s(self) -> float:
        """How far left the times after the window are drawn."""
        return self.end_s - self.start_s - self.gap_s

    def real_s(self, drawn_s: float) -> float | None:
        """The real time of a drawn time; None inside the gap."""
        if drawn_s <= self.at_s:
            return drawn_s
        if drawn_s < self.at_s + self.gap_s:
            return None
        return drawn_s + self.shift_s


def cut_window(tl) -> Cut | None:
    """The window to hide of a timeline.Timeline, or None when its steady state is short."""
    m, pp = tl.num_microbatches, tl.num_stages
    first, last = KEEP, m - pp - KEEP
    if 2 * pp * m <= CUT_BOXES or last - first - 1 < MIN_HIDDEN:
        return None
    bwd = {e.microbatch: e for e in tl.events if e.stage == 0 and e.kind == "bwd"}
    if first not in bwd or last not in bwd or bwd[last].start_s <= bwd[first].end_s:
        return None
    t1, t2 = bwd[first].end_s, bwd[last].start_s
    hidden = sum(t1 <= e.start_s and e.end_s <= t2 for e in bwd.values())
    span = max(e.end_s for e in tl.events) - (t2 - t1)
    gap = GAP_FRACTION * span / (1 - GAP_FRACTION)
    return Cut(start_s=t1, end_s=t2, at_s=t1, gap_s=gap, hidden_microbatches=hidden)


def boxes(tl, cut: Cut | None, indices=None) -> list[Box]:
    """The drawn pieces of the events `indices` (default: all) of a timeline under `cut`."""
    indices = range(len(tl.events)) if indices is None else indices
    out = []
    for k in indices:
        e = tl.events[k]
        if cut is None:
            out.append(Box(k, e.start_s, e.end_s))
            continue
        if e.start_s < cut.start_s:
            out.append(Box(k, e.start_s, min(e.end_s, cut.start_s)))
        if e.end_s > cut.end_s:
            out.append(Box(k, max(e.start_s, cut.end_s) - cut.shift_s, e.end_s - cut.shift_s))
    return [b for b in out if b.end_s > b.start_s or tl.events[b.event].end_s == tl.events[b.event].start_s]


def drawn_s(cut: Cut | None, real_s: float) -> float:
    """Where a real time is drawn (a time inside the window: at the gap's start)."""
    if cut is None or real_s <= cut.start_s:
        return real_s
    return max(real_s - cut.shift_s, cut.at_s)


def ticks(cut: Cut | None, end_s: float, count: int = 4) -> list[tuple[float, float]]:
    """(drawn, real) seconds of round tick marks: on [0, end] uncut, else on each side of the gap."""
    def nice(lo: float, hi: float) -> list[float]:
        import math

        if hi <= lo:
            return []
        raw = (hi - lo) / count
        step = 10 ** math.floor(math.log10(raw))
        step *= next(f for f in (1, 2, 2.5, 5, 10) if f * step >= raw)
        first = math.ceil(lo / step - 1e-9)
        return [k * step for k in range(first, int(hi / step + 1e-9) + 1)]

    if cut is None:
        return [(t, t) for t in nice(0.0, end_s)]
    left = [(t, t) for t in nice(0.0, cut.start_s)]
    right_span = end_s - cut.end_s
    right = [(t - cut.shift_s, t) for t in nice(cut.end_s, end_s)] if right_span > 0 else []
    return left + [(d, t) for d, t in right if d >= cut.at_s + cut.gap_s]
