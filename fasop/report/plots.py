"""Figures. The only module that imports matplotlib, and only inside the functions that draw
(Agg backend), so `fasop search` never loads it."""

from __future__ import annotations

from fasop.pareto.frontier import ParetoAnalysis
from fasop.report.figure_styles import (KIND_STYLE, MIXED_STYLE, crowded, fits_on_chart, node_type_styles,  # noqa: F401
                                       usd, wrap_name, wrap_note)
from fasop.report.results import pareto_ranks

WIDTH_IN, HEIGHT_IN, DPI, FONT_PT = 3.5, 2.9, 200, 8
"""One report column wide; fonts readable at that size."""

def render_pareto(analysis: ParetoAnalysis, *, title: str = "", type_order: list[str] | None = None) -> dict[str, bytes]:
    """{"png": bytes (200 dpi), "svg": bytes}: training time (h) vs cost (USD) per composition,
    the frontier as a staircase, the knee and the deadline/budget answers marked; node types
    styled by their place in `type_order` (the cluster spec's; default: as they appear)."""
    kinds = list(dict.fromkeys(name for r in analysis.results for name, n in r.composition.counts if n))
    return render(frontier_figure(analysis.points(), kinds, title=title, complete=analysis.complete,
                                  annotate=lambda ax: _annotate(ax, analysis), type_order=type_order))


def render(fig) -> dict[str, bytes]:
    """{"png": bytes (200 dpi), "svg": bytes} of a figure, without dates (the same figure gives
    the same bytes); closes the figure."""
    import io

    import matplotlib.pyplot as plt

    png, svg = io.BytesIO(), io.BytesIO()
    try:
        with plt.rc_context({"svg.hashsalt": "fasop", "svg.fonttype": "none"}):
            fig.savefig(png, format="png", dpi=DPI, metadata={"Software": None})
            fig.savefig(svg, format="svg", metadata={"Date": None, "Creator": None})
    finally:
        plt.close(fig)
    return {"png": png.getvalue(), "svg": svg.getvalue()}


def frontier_figure(points, kinds: list[str], *, title: str = "", complete: bool = True, annotate=None,
                    type_order: list[str] | None = None):
    """Time vs cost: points (a DataFrame with composition, kind, status, train_time_h,
    train_cost_usd, on_frontier, is_knee, and rank when it has one: the pareto CSV's) by kind, each
    kind its own marker and colour; the frontier as a staircase, each of its points numbered by its
    rank and listed (number: composition) in the legend, which is below the axes and so covers no
    data; an axis whose values span more than LOG_SPAN times is logarithmic; the knee starred
    unless `annotate(ax)` marks it (and more). Styles: node_type_styles(type_order or kinds)."""
    plt, style = _style()
    fits = points[points["status"] == "ok"]
    if "rank" not in points:  # the pareto CSV's rule (results.pareto_ranks)
        points = points.assign(rank=pareto_ranks(points["train_time_h"], points["train_cost_usd"], points["status"]))
        fits = points[points["status"] == "ok"]
    styles = node_type_styles(list(type_order or kinds) + [k for k in kinds if k not in (type_order or kinds)]) \
        | {"mixed": MIXED_STYLE}
    front = fits[fits["on_frontier"]].sort_values(["train_time_h", "train_cost_usd"])
    with style:
        fig, ax = plt.subplots(figsize=(WIDTH_IN, HEIGHT_IN), layout="constrained")
        for kind in kinds + ["mixed"]:
            sub = fits[fits["kind"] == kind]
            if len(sub):
                label = f"{kind} only" if kind != "mixed" else "mixed"
                ax.scatter(sub["train_cost_usd"], sub["train_time_h"], s=12, alpha=0.55, linewidths=0,
                           label=label, zorder=2, **styles[kind])
        _scales(ax, fits)
        if len(front):
            stairs = front.sort_values(["train_cost_usd", "train_time_h"])
            ax.step(stairs["train_cost_usd"], stairs["train_time_h"], where="post", color="black", lw=0.9,
                    zorder=3, label="frontier")
            ax.scatter(front["train_cost_usd"], front["train_time_h"], s=14, facecolors="none",
                       edgecolors="black", linewidths=0.8, zorder=4)
        pruned = int((points["status"] == "pruned").sum())
        if pruned:  # no time or cost of their own: not drawn, but counted (under the axis: it covers no point)
            _note(ax, f"{pruned:,} compositions pruned (off the frontier), not drawn")
        if annotate is not None:
            annotate(ax)
        else:
            knee = fits[fits["is_knee"]]
            if len(knee):
                ax.scatter(knee["train_cost_usd"], knee["train_time_h"], marker="*", s=70, color="#d62728",
                           zorder=5, edgecolors="black", linewidths=0.4,
                           label=f"knee: {knee['composition'].iloc[0]}")
        _frame(ax, title + ("" if complete else " (incomplete sweep)"))
        handles, labels = ax.get_legend_handles_labels()
        handles += _frontier_handles(front)
        labels += [r.composition for r in front.itertuples(index=False)]
        columns = 2 if max(map(len, labels), default=0) <= LEGEND_COLUMN_CHARS else 1  # within the figure's width
        fig.set_size_inches(WIDTH_IN, HEIGHT_IN + 0.13 * -(-len(labels) // columns))
        if handles:
            fig.legend(handles, labels, loc="outside lower center", ncol=columns, frameon=False, handlelength=1.2,
                       columnspacing=1.0)
        if len(front):
            _number_frontier(fig, ax, front, fits)
    return fig


LEGEND_COLUMN_CHARS = 22  # legend labels up to this long fit two to a line on a one-column figure


def _note(ax, text: str) -> None:
    """A line under the x axis's label: outside the axes, so it covers no point."""
    ax.set_xlabel(f"{ax.get_xlabel()}\n{wrap_note(text)}")


LOG_SPAN = 30
"""An axis whose values span more than this factor (or whose frontier is `crowded`) is logarithmic."""


def _scales(ax, fits) -> None:
    """Cost (x) and time (y) axes: linear, or logarithmic (LOG_SPAN, `crowded`; ticks 1-2-3-5 / 1-2-5 / 1), $ and h."""
    import math

    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    hours = lambda v, _=None: f"{v:,.0f}" if v >= 10 else f"{v:,.2g}"  # noqa: E731
    for axis, scale, column, name, fmt in ((ax.xaxis, ax.set_xscale, "train_cost_usd", "training cost (USD)", usd),
                                           (ax.yaxis, ax.set_yscale, "train_time_h", "training time (hours)", hours)):
        values = [v for v in fits[column] if v > 0]
        front = [v for v in fits.loc[fits["on_frontier"], column] if v > 0] if "on_frontier" in fits else []
        wide = bool(values) and (max(values) > LOG_SPAN * min(values) or crowded(values, front))
        if wide:
            scale("log")
            decades = math.log10(max(values) / min(values))   # within one decade 1-2-3-5: two or more show
            axis.set_major_locator(LogLocator(subs=(1, 2, 3, 5) if decades <= 1 else (1, 2, 5) if decades <= 2.5 else (1,)))
            axis.set_minor_formatter(NullFormatter())
        axis.set_major_formatter(FuncFormatter(fmt))
        axis.set_label_text(name + (", log scale" if wide else ""))


NUMBER_PLACES = tuple((r * dx, r * dy) for r in (2, 8, 14, 20, 28)
                      for dx, dy in ((-0.7, -0.7), (0, -1), (-1, 0), (0.7, -0.7), (-0.7, 0.7), (1, 0)))
"""Where a frontier point's number may go, in points from it, in order of preference: near first,
below and to the left first (no point lies there: it would dominate the frontier point); past the
first ring with a leader line."""


def _number_frontier(fig, ax, front, fits) -> None:
    """Each frontier point's rank beside it, at the first of NUMBER_PLACES where it overlaps no
    number already placed and no point drawn (laid out first: positions in the final pixels)."""
    fig.canvas.draw()
    pt = fig.dpi / 72
    points = ax.transData.transform(fits[["train_cost_usd", "train_time_h"]].to_numpy(dtype=float))
    taken = [(x - 2.5 * pt, y - 2.5 * pt, x + 2.5 * pt, y + 2.5 * pt) for x, y in points]
    frame = ax.get_window_extent()
    for r in front.itertuples(index=False):
        x, y = ax.transData.transform((r.train_cost_usd, r.train_time_h))
        h = (FONT_PT - 2) * pt  # a digit's height in pixels, its width ~0.6 of it
        w = 0.6 * h * len(str(r.rank))
        for k, (dx, dy) in enumerate(NUMBER_PLACES):
            cx, cy = x + dx * pt + (w / 2 + pt) * (dx > 0) - (w / 2 + pt) * (dx < 0), y + dy * pt - h / 2 * (dy < 0) \
                + h / 2 * (dy > 0)
            box = (cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2)
            inside = frame.x0 <= box[0] and box[2] <= frame.x1 and frame.y0 <= box[1] and box[3] <= frame.y1
            if inside and not any(box[0] < b[2] and b[0] < box[2] and box[1] < b[3] and b[1] < box[3] for b in taken):
                break
        else:
            k, cx, cy = 0, x - pt - w / 2, y - pt - h / 2
        taken.append((cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2))
        text = ax.annotate(str(r.rank), (r.train_cost_usd, r.train_time_h), xytext=((cx - x) / pt, (cy - y) / pt),
                           textcoords="offset points", fontsize=FONT_PT - 2, zorder=6, gid="frontier_number",
                           ha="center", va="center", arrowprops=None if k < 6 else
                           {"arrowstyle": "-", "lw": 0.3, "color": "#555555", "shrinkA": 0, "shrinkB": 2})
        text.set_in_layout(False)


def _frontier_handles(front) -> list:
    """The legend's entries of the frontier's points: the number as the marker."""
    from matplotlib.lines import Line2D

    return [Line2D([], [], ls="none", marker=f"${r.rank}$", color="black", markeredgewidth=0,
                   markersize=3 + 2 * len(str(r.rank))) for r in front.itertuples(index=False)]


def _annotate(ax, analysis: ParetoAnalysis) -> None:
    """Knee (star), deadline (horizontal line) and budget (vertical line) with their answers."""
    marks = []
    if analysis.knee is not None:
        marks.append((analysis.knee, "knee", "*", "#d62728", 70))
    fits = [r for r in analysis.results if r.status == "ok"]
    if analysis.deadline_hours is not None and not fits_on_chart(analysis.deadline_hours, [r.train_time_h for r in fits]):
        _note(ax, f"deadline {analysis.deadline_hours:,.4g} h: off the chart")
    elif analysis.deadline_hours is not None:
        ax.axhline(analysis.deadline_hours, color="#ff7f0e", lw=0.7, ls="--", zorder=1)
        ax.annotate(f"deadline {analysis.deadline_hours:,.0f} h", (1.0, analysis.deadline_hours),
                    xycoords=("axes fraction", "data"), ha="right", va="bottom", color="#ff7f0e",
                    fontsize=FONT_PT - 1)
        if analysis.deadline is not None:
            marks.append((analysis.deadline, "cheapest in deadline", "v", "#ff7f0e", 30))
    if analysis.budget_usd is not None and not fits_on_chart(analysis.budget_usd, [r.train_cost_usd for r in fits]):
        _note(ax, f"budget {usd(analysis.budget_usd)}: off the chart")
    elif analysis.budget_usd is not None:
        ax.axvline(analysis.budget_usd, color="#17becf", lw=0.7, ls="--", zorder=1)
        ax.annotate(f"budget {usd(analysis.budget_usd)}", (analysis.budget_usd, 1.0),
                    xycoords=("data", "axes fraction"), ha="left", va="top", rotation=90, color="#17becf",
                    fontsize=FONT_PT - 1)
        if analysis.budget is not None:
            marks.append((analysis.budget, "fastest in budget", "P", "#17becf", 30))
    for i, name, marker, color, size in marks:
        r = analysis.results[i]
        ax.scatter([r.train_cost_usd], [r.train_time_h], marker=marker, s=size, color=color, zorder=5,
                   edgecolors="black", linewidths=0.4, label=f"{name}: {r.composition.label}")


# ---------------------------------------------------------------------------- one plan
WIDE_IN = 7.0
"""Two report columns wide: the timeline and the breakdown bars."""
EVENT_STYLE = {
    "fwd": ("forward", "#4e79a7"), "bwd": ("backward", "#f28e2b"), "send_fwd": ("p2p send", "#9c9c9c"),
    "send_bwd": ("p2p send", "#9c9c9c"), "dp_sync": ("DP all-reduce", "#b07aa1"),
    "embedding_sync": ("embedding all-reduce", "#9c755f"),
}
PART_STYLE = (("weights", "#4e79a7"), ("gradients", "#59a14f"), ("optimizer", "#edc948"),
              ("activations", "#f28e2b"))
CRITICAL_COLOR = "#d62728"
TIMELINE_MAX_BOXES = 20_000
"""A timeline of more compute boxes (2 x stages x micro-batches) whose steady state cannot be cut
(report/timeline_cut.py) is not drawn: unreadable, and slow to draw."""
LABEL_MIN_FRACTION = 1 / 90
"""A box gets its micro-batch number when it is at least this fraction of the time axis wide, times
(1 + digits) / 2 (a one-digit number: this fraction; three digits: twice)."""


def _style():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt, plt.rc_context({"font.size": FONT_PT, "axes.titlesize": FONT_PT, "axes.labelsize": FONT_PT,
                                "legend.fontsize": FONT_PT - 1, "xtick.labelsize": FONT_PT,
                                "ytick.labelsize": FONT_PT, "svg.hashsalt": "fasop", "svg.fonttype": "none"})


def _frame(ax, title: str, axis: str = "both") -> None:
    """The light grid every figure draws along `axis`, and the title when there is one (wrapped)."""
    import textwrap

    ax.grid(True, axis=axis, lw=0.3, alpha=0.5)
    if title:  # wrapped to the figure's width (~14 characters an inch at FONT_PT), never cut off
        width = max(20, int(ax.figure.get_figwidth() * 14))
        ax.set_title("\n".join(textwrap.fill(line, width) for line in title.split("\n")))


def timeline_figure(tl, stage_labels: list[str], *, title: str = "", stage_colors: list[str] | None = None):
    """Gantt chart of a timeline.Timeline: a row per stage (stage 0 on top), forward, backward,
    p2p sends and all-reduces in their colours, micro-batch numbers on boxes wide enough, the
    critical path outlined; a long steady state cut out with a break mark (report/timeline_cut.py).
    Each kind's boxes are one collection (gid: the kind). Time in milliseconds; stage labels in
    their node type's colour (`stage_colors`, node_type_styles)."""
    from matplotlib.collections import PolyCollection
    from matplotlib.patches import Patch

    from fasop.report import timeline_cut

    plt, style = _style()
    ms = 1e3
    cut = timeline_cut.cut_window(tl)
    with style:
        fig, ax = plt.subplots(figsize=(WIDE_IN, 1.2 + 0.22 * tl.num_stages), layout="constrained")
        drawn = timeline_cut.boxes(tl, cut)
        span = max(b.end_s for b in drawn) * ms
        by_kind: dict[str, list] = {}
        for b in drawn:
            by_kind.setdefault(tl.events[b.event].kind, []).append(b)
        handles, numbers = {}, []
        for kind, pieces in by_kind.items():
            label, color = EVENT_STYLE[kind]
            half = 0.4 if kind in ("fwd", "bwd") else 0.175
            ax.add_collection(PolyCollection(
                [_rect(b.start_s * ms, b.end_s * ms, tl.events[b.event].stage, half) for b in pieces],
                facecolors=color, edgecolors="white", linewidths=0.2, gid=kind, zorder=2))
            handles.setdefault(label, Patch(facecolor=color, label=label))
            for b in pieces:
                e = tl.events[b.event]
                wide = (b.end_s - b.start_s) * ms >= span * LABEL_MIN_FRACTION * (1 + len(str(e.microbatch))) / 2
                if e.microbatch >= 0 and kind in ("fwd", "bwd") and wide:
                    numbers.append(((b.start_s + b.end_s) / 2 * ms, e.stage, str(e.microbatch)))
        _numbers(fig, ax, numbers, FONT_PT - 3)
        chain = timeline_cut.boxes(tl, cut, tl.critical)
        ax.add_collection(PolyCollection([_rect(b.start_s * ms, b.end_s * ms, tl.events[b.event].stage, 0.43)
                                          for b in chain], facecolors="none", edgecolors=CRITICAL_COLOR,
                                         linewidths=0.9, gid="critical", zorder=4))
        handles["critical path"] = Patch(facecolor="none", edgecolor=CRITICAL_COLOR, label="critical path")
        ax.axvline(timeline_cut.drawn_s(cut, tl.pipeline_time_s) * ms, color="black", lw=0.6, ls="--")
        ax.set_yticks(range(tl.num_stages), stage_labels)
        for tick, color in zip(ax.get_yticklabels(), stage_colors or []):
            tick.set_color(color)
        ax.set_ylim(tl.num_stages - 0.5, -0.5)
        ax.set_xlim(0, span * 1.005)
        marks = timeline_cut.ticks(cut, max(e.end_s for e in tl.events))
        ax.set_xticks([d * ms for d, _ in marks], [f"{t * ms:,.6g}" for _, t in marks])
        note = ""
        if cut is not None:
            _break_mark(ax, cut.at_s * ms, (cut.at_s + cut.gap_s) * ms, tl.num_stages)
            note = f"\n≈: {cut.hidden_microbatches:,} steady micro-batches of stage 0 not drawn"
        ax.set_xlabel(f"time within a training step (ms): pipeline {tl.pipeline_time_s * ms:,.1f} ms (dashed), "
                      f"step {tl.step_time_s * ms:,.1f} ms{note}")
        ax.set_ylabel("pipeline stage")
        _frame(ax, title, axis="x")
        fig.legend(handles=list(handles.values()), loc="outside lower center", ncol=6, frameon=False,
                   handlelength=1.2)
    return fig


def _numbers(fig, ax, labels: list[tuple[float, float, str]], size_pt: float) -> None:
    """White labels centred at data points, drawn as one collection of glyph outlines (gid
    `microbatch`): hundreds of Text artists take ~3 ms each per image to lay out and draw."""
    from matplotlib.collections import PathCollection
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import TextPath
    from matplotlib.transforms import Affine2D

    font, glyphs = FontProperties(size=size_pt), {}
    for _, _, text in labels:
        if text not in glyphs:
            path = TextPath((0, 0), text, size=size_pt, prop=font)
            (x0, y0), (x1, y1) = path.get_extents().get_points()
            glyphs[text] = path.transformed(Affine2D().translate(-(x0 + x1) / 2, -(y0 + y1) / 2))
    if labels:  # glyphs in points, scaled to the image's pixels at draw time
        ax.add_collection(PathCollection([glyphs[t] for _, _, t in labels], offsets=[(x, y) for x, y, _ in labels],
                                         offset_transform=ax.transData, transform=Affine2D().scale(1 / 72) + fig.dpi_scale_trans,
                                         facecolors="white", edgecolors="none", zorder=3, gid="microbatch"), autolim=False)


def _rect(x0: float, x1: float, row: int, half: float) -> list[tuple[float, float]]:
    return [(x0, row - half), (x0, row + half), (x1, row + half), (x1, row - half)]


def _break_mark(ax, x0: float, x1: float, rows: int) -> None:
    """The cut: a white band over [x0, x1] with two slanted strokes at its edges, top and bottom."""
    ax.axvspan(x0, x1, color="white", zorder=5)
    for x in (x0, x1):
        for y in (-0.5, rows - 0.5):
            ax.plot([x - (x1 - x0) * 0.3, x + (x1 - x0) * 0.3], [y + 0.25, y - 0.25], color="black", lw=0.8,
                    clip_on=False, zorder=6)
    ax.text((x0 + x1) / 2, (rows - 1) / 2, "≈", ha="center", va="center", fontsize=FONT_PT + 2, zorder=6)


def breakdown_figure(items: list[tuple[str, dict[str, float]]], *, title: str = ""):
    """Step-time breakdown bars, one per plan (fastest on top): items are (label, {part: seconds})
    with parts compute, p2p, bubble (or pipeline, undrawn), then the step's other terms (fasop-2024:
    DP all-reduce, embedding all-reduce; analytic: DP sync not overlapped, embedding all-reduce,
    optimizer step), summing to the step."""
    plt, style = _style()
    colors = {"compute": "#4e79a7", "p2p": "#9c9c9c", "bubble": "#e15759", "pipeline": "#76b7b2",
              "DP all-reduce": "#b07aa1", "DP sync not overlapped": "#b07aa1", "embedding all-reduce": "#9c755f",
              "optimizer step": "#edc948"}
    colors = {part: color for part, color in colors.items() if any(part in parts for _, parts in items)}
    with style:
        fig, ax = plt.subplots(figsize=(WIDE_IN, 1.0 + 0.24 * len(items)), layout="constrained")
        left = [0.0] * len(items)
        for part, color in colors.items():
            widths = [parts.get(part, 0.0) * 1e3 for _, parts in items]
            ax.barh(range(len(items)), widths, left=left, color=color, height=0.7, label=part, gid=part)
            left = [a + b for a, b in zip(left, widths)]
        ax.set_yticks(range(len(items)), [label for label, _ in items])
        ax.set_ylim(len(items) - 0.5, -0.5)
        ax.set_xlabel("step time (ms), by the stage that finishes last")
        _frame(ax, title, axis="x")
        fig.legend(loc="outside lower center", ncol=5, frameon=False, handlelength=1.2)
    return fig


def memory_figure(stages, *, title: str = "", stage_colors: list[str] | None = None):
    """Per-stage memory (GiB per GPU) by part, stacked; the overhead the fit check adds hatched;
    each stage's limit as a black tick; stage labels in their node type's colour (`stage_colors`).
    stages: explain.StageBreakdown items."""
    plt, style = _style()
    gib = 2.0**30
    with style:
        part = max(len(p) for s in stages for p in s.gpu.replace("-", "-\n").split("\n")) if len(stages) <= 8 else 0
        slot = max(0.28, part / 12 + 0.06)  # inches a bar: its GPU name's longest part at ~12 characters an inch
        fig, ax = plt.subplots(figsize=(max(WIDTH_IN, 0.9 + slot * len(stages)), HEIGHT_IN), layout="constrained")
        x = list(range(len(stages)))
        bottom = [0.0] * len(stages)
        parts = PART_STYLE if all(s.weights_bytes is not None for s in stages) else (("estimate", "#4e79a7"),)
        for part, color in parts:
            heights = [(s.memory_bytes if part == "estimate" else getattr(s, f"{part}_bytes")) / gib for s in stages]
            ax.bar(x, heights, bottom=bottom, color=color, width=0.75, label=part, gid=part)
            bottom = [a + b for a, b in zip(bottom, heights)]
        fixed = [(getattr(s, "overhead_bytes", None) or 0.0) / gib for s in stages]
        if any(fixed) and parts is PART_STYLE:  # the framework's fixed bytes (analytic), part of the estimate
            ax.bar(x, fixed, bottom=bottom, color="#bab0ac", width=0.75, label="framework", gid="framework")
            bottom = [a + b for a, b in zip(bottom, fixed)]
        extra = [(s.overhead_factor - 1) * s.memory_bytes / gib for s in stages]
        if any(extra):
            ax.bar(x, extra, bottom=bottom, color="white", edgecolor="#7f7f7f", hatch="////", width=0.75,
                   linewidth=0.4, label="overhead", gid="overhead")
        ax.scatter(x, [s.limit_bytes / gib for s in stages], marker="_", s=120, color="black", linewidths=1.4,
                   zorder=5, label="limit", gid="limit")
        chars = max(4, int((fig.get_figwidth() - 0.9) / len(stages) * 12))
        ax.set_xticks(x, [f"{s.stage}\n{wrap_name(s.gpu, chars)}" if len(stages) <= 8 else str(s.stage) for s in stages])
        for tick, color in zip(ax.get_xticklabels(), stage_colors or []):
            tick.set_color(color)
        ax.set_xlabel("pipeline stage" + ("" if len(stages) <= 8 else f" (GPU: {'-'.join(s.gpu for s in stages)})"
                                          if len(stages) <= 12 else ""))
        ax.set_ylabel("memory per GPU (GiB)")
        ax.set_ylim(0, max(max(s.limit_bytes, s.overhead_factor * s.memory_bytes) for s in stages) / gib * 1.25)
        _frame(ax, title, axis="y")
        ax.legend(loc="upper left", ncol=3, frameon=False, handlelength=1.0, fontsize=FONT_PT - 2)
    return fig
