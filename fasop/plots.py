"""Figures. The only module that imports matplotlib, and only inside the functions that draw
(Agg backend), so `fasop search` never loads it."""

from __future__ import annotations

from pathlib import Path

from fasop.pareto import ParetoAnalysis

WIDTH_IN, HEIGHT_IN, DPI, FONT_PT = 3.5, 2.9, 200, 8
"""One report column wide; fonts readable at that size."""

KIND_STYLE = ({"marker": "o", "color": "#1f77b4"}, {"marker": "s", "color": "#2ca02c"},
              {"marker": "^", "color": "#9467bd"})
"""Homogeneous node types in --max-nodes order; mixed compositions use MIXED_STYLE."""
MIXED_STYLE = {"marker": "D", "color": "#7f7f7f"}


def pareto_figure(analysis: ParetoAnalysis, stem: str | Path, *, title: str = "") -> tuple[Path, Path]:
    """Write `<stem>.png` (200 dpi) and `<stem>.svg` (both or neither, output.write_files): the
    figure of `render_pareto`."""
    from fasop.output import write_files

    stem = Path(stem)
    png, svg = stem.with_name(stem.name + ".png"), stem.with_name(stem.name + ".svg")
    images = render_pareto(analysis, title=title)
    write_files([(png, images["png"]), (svg, images["svg"])], "--out-prefix")
    return png, svg


def render_pareto(analysis: ParetoAnalysis, *, title: str = "") -> dict[str, bytes]:
    """{"png": bytes (200 dpi), "svg": bytes}: training time (h) vs cost (USD) per composition,
    the frontier as a staircase, the knee and the deadline/budget answers marked."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    points = analysis.points()
    fits = points[points["status"] == "ok"]
    kinds = list(dict.fromkeys(name for r in analysis.results for name, n in r.composition.counts if n))
    styles = {k: KIND_STYLE[i % len(KIND_STYLE)] for i, k in enumerate(kinds)} | {"mixed": MIXED_STYLE}
    with plt.rc_context({"font.size": FONT_PT, "axes.titlesize": FONT_PT, "axes.labelsize": FONT_PT,
                         "legend.fontsize": FONT_PT - 1, "xtick.labelsize": FONT_PT, "ytick.labelsize": FONT_PT,
                         "svg.hashsalt": "fasop", "svg.fonttype": "none"}):
        fig, ax = plt.subplots(figsize=(WIDTH_IN, HEIGHT_IN), layout="constrained")
        for kind in kinds + ["mixed"]:
            sub = fits[fits["kind"] == kind]
            if len(sub):
                label = f"{kind} only" if kind != "mixed" else "mixed"
                ax.scatter(sub["train_cost_usd"], sub["train_time_h"], s=12, alpha=0.55, linewidths=0,
                           label=label, zorder=2, **styles[kind])
        front = fits[fits["on_frontier"]].sort_values(["train_cost_usd", "train_time_h"])
        if len(front):
            ax.step(front["train_cost_usd"], front["train_time_h"], where="post", color="black", lw=0.9,
                    zorder=3, label="frontier")
            ax.scatter(front["train_cost_usd"], front["train_time_h"], s=14, facecolors="none",
                       edgecolors="black", linewidths=0.8, zorder=4)
            _label_frontier(ax, front)
        pruned = int((points["status"] == "pruned").sum())
        if pruned:  # no time or cost of their own: not drawn, but counted
            ax.text(0.01, 0.01, f"{pruned:,} compositions pruned (off the frontier), not drawn",
                    transform=ax.transAxes, ha="left", va="bottom", color="#7f7f7f", fontsize=FONT_PT - 2)
        _annotate(ax, analysis)
        ax.set_xlabel("training cost (USD)")
        ax.set_ylabel("training time (hours)")
        ax.xaxis.set_major_formatter(FuncFormatter(_usd))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
        ax.grid(True, lw=0.3, alpha=0.5)
        if title:
            ax.set_title(title)
        if not analysis.complete:
            ax.text(0.99, 0.99, "incomplete sweep", transform=ax.transAxes, ha="right", va="top", color="red")
        ax.legend(loc="upper right", frameon=False, handlelength=1.2, borderaxespad=0.2)
        png, svg = io.BytesIO(), io.BytesIO()
        fig.savefig(png, format="png", dpi=DPI, metadata={"Software": None})
        fig.savefig(svg, format="svg", metadata={"Date": None, "Creator": None})
        plt.close(fig)
    return {"png": png.getvalue(), "svg": svg.getvalue()}


def _near(value: float, data: list[float]) -> bool:
    """Whether a deadline or budget line at `value` fits on the chart of `data` (at most twice
    its largest value): a line far beyond would stretch the axis over empty space, to infinity."""
    return bool(data) and value <= 2 * max(data)


CHAR_W, LABEL_H = 0.0145, 0.045
"""Size of a frontier label's character and line, as fractions of the axes (5-pt type on a
one-column figure), to keep labels from overlapping."""


def _label_frontier(ax, front) -> None:
    """Frontier points' compositions in small type beside them, the fastest first; a label that
    would overlap one already placed is left out. Labels lean towards the middle of the axes."""
    ax.autoscale_view()
    (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
    boxes: list[tuple[float, float, float, float]] = []
    for r in front.sort_values(["train_time_h", "train_cost_usd"]).itertuples(index=False):
        x, y = (r.train_cost_usd - x0) / ((x1 - x0) or 1), (r.train_time_h - y0) / ((y1 - y0) or 1)
        right = x > 0.55
        width = CHAR_W * len(r.composition)
        box = (x - width - 0.02 if right else x + 0.01, y + 0.005, x - 0.01 if right else x + width + 0.02,
               y + LABEL_H)
        if any(box[0] < b[2] and b[0] < box[2] and box[1] < b[3] and b[1] < box[3] for b in boxes):
            continue
        boxes.append(box)
        ax.annotate(r.composition, (r.train_cost_usd, r.train_time_h), xytext=(-4 if right else 4, 4),
                    textcoords="offset points", fontsize=FONT_PT - 3, color="#333333", zorder=6,
                    ha="right" if right else "left", va="bottom")


def _usd(value: float, _pos=None) -> str:
    if abs(value) >= 1e9:
        return f"${value:.3g}"
    if abs(value) >= 1e6:
        return f"${value / 1e6:g}M"
    if abs(value) >= 1e3:
        return f"${value / 1e3:g}k"
    return f"${value:g}"


def _annotate(ax, analysis: ParetoAnalysis) -> None:
    """Knee (star), deadline (horizontal line) and budget (vertical line) with their answers."""
    marks = []
    if analysis.knee is not None:
        marks.append((analysis.knee, "knee", "*", "#d62728", 70))
    fits = [r for r in analysis.results if r.status == "ok"]
    if analysis.deadline_hours is not None and not _near(analysis.deadline_hours, [r.train_time_h for r in fits]):
        ax.text(0.01, 0.01, f"deadline {analysis.deadline_hours:,.4g} h: off the chart", transform=ax.transAxes,
                ha="left", va="bottom", color="#ff7f0e", fontsize=FONT_PT - 1)
    elif analysis.deadline_hours is not None:
        ax.axhline(analysis.deadline_hours, color="#ff7f0e", lw=0.7, ls="--", zorder=1)
        ax.annotate(f"deadline {analysis.deadline_hours:,.0f} h", (1.0, analysis.deadline_hours),
                    xycoords=("axes fraction", "data"), ha="right", va="bottom", color="#ff7f0e",
                    fontsize=FONT_PT - 1)
        if analysis.deadline is not None:
            marks.append((analysis.deadline, "cheapest in deadline", "v", "#ff7f0e", 30))
    if analysis.budget_usd is not None and not _near(analysis.budget_usd, [r.train_cost_usd for r in fits]):
        ax.text(0.01, 0.06, f"budget {_usd(analysis.budget_usd)}: off the chart", transform=ax.transAxes,
                ha="left", va="bottom", color="#17becf", fontsize=FONT_PT - 1)
    elif analysis.budget_usd is not None:
        ax.axvline(analysis.budget_usd, color="#17becf", lw=0.7, ls="--", zorder=1)
        ax.annotate(f"budget {_usd(analysis.budget_usd)}", (analysis.budget_usd, 1.0),
                    xycoords=("data", "axes fraction"), ha="left", va="top", rotation=90, color="#17becf",
                    fontsize=FONT_PT - 1)
        if analysis.budget is not None:
            marks.append((analysis.budget, "fastest in budget", "P", "#17becf", 30))
    for i, name, marker, color, size in marks:
        r = analysis.results[i]
        ax.scatter([r.train_cost_usd], [r.train_time_h], marker=marker, s=size, color=color, zorder=5,
                   edgecolors="black", linewidths=0.4, label=f"{name}: {r.composition.label}")
