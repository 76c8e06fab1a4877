"""Figures whose legends cover no data, whose axes go logarithmic past a 30x span, and whose
frontier points are each numbered with the pareto CSV's rank and listed by composition (issue 30,
item 6). Checked on the drawn artists, in the figure's pixels."""

from __future__ import annotations

import csv

import pandas as pd
from fasop.cli.command import main
from fasop.report import plots


def _close(fig) -> None:
    __import__("matplotlib.pyplot").pyplot.close(fig)


def _points(times: list[float], costs: list[float], kinds: list[str], frontier: list[bool]) -> pd.DataFrame:
    return pd.DataFrame({"composition": [f"c{i}" for i in range(len(times))], "kind": kinds, "status": ["ok"] * len(times),
                         "train_time_h": times, "train_cost_usd": costs, "on_frontier": frontier,
                         "is_knee": [False] * len(times)})


# a 4-type sweep: a frontier low on the left and slow, dear single-type points in the top-right
# corner, where the legend used to be drawn over them
WIDE = _points([200.0, 180.0, 170.0, 500.0, 6000.0, 15000.0, 900.0, 1500.0],
               [30e3, 33e3, 40e3, 29e3, 195e3, 245e3, 60e3, 100e3],
               ["mixed", "mixed", "mixed", "p5", "g5", "g5", "g6e", "p4de"],
               [True, True, True, True, False, False, False, False])
KINDS = ["p5", "p4de", "g6e", "g5"]


def _overlaps(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def test_frontier_legend_covers_no_point():
    fig = plots.frontier_figure(WIDE, KINDS)
    fig.canvas.draw()
    ax = fig.axes[0]
    legend = fig.legends[0].get_window_extent()
    assert not _overlaps(legend, ax.get_window_extent())  # outside the axes: it cannot cover a point
    drawn = [xy for c in ax.collections for xy in c.get_offset_transform().transform(c.get_offsets())]
    assert len(drawn) >= len(WIDE) and not any(legend.contains(x, y) for x, y in drawn)
    _close(fig)


def test_breakdown_legend_covers_no_bar():
    items = [(f"plan {k}", {"compute": 0.9 - 0.1 * k, "p2p": 0.05, "bubble": 0.2, "DP all-reduce": 0.1}) for k in range(8)]
    fig = plots.breakdown_figure(items)
    fig.canvas.draw()
    legend = fig.legends[0].get_window_extent()
    bars = [p.get_window_extent() for p in fig.axes[0].patches if p.get_width() > 0]
    assert bars and not any(_overlaps(legend, b) for b in bars)
    _close(fig)


def test_axes_go_logarithmic_past_a_30x_span():
    fig = plots.frontier_figure(WIDE, KINDS)  # times span 88x; costs 8.4x, the frontier's 5 % of them: crowded
    ax = fig.axes[0]
    assert (ax.get_yscale(), ax.get_xscale()) == ("log", "log") and "log scale" in ax.get_ylabel()
    _close(fig)
    narrow = _points([1.0, 2.0, 29.0], [3.0, 2.0, 1.0], ["p5"] * 3, [True] * 3)  # 29x: linear
    fig = plots.frontier_figure(narrow, ["p5"])
    assert (fig.axes[0].get_yscale(), fig.axes[0].get_xscale()) == ("linear", "linear")
    _close(fig)


def _frontier_rows(tmp_path) -> list[dict]:
    """A 2-type FASOP sweep (a100 and a10 nodes, up to 2 and 3): its pareto CSV's rows."""
    prefix = tmp_path / "gpt2xl_fasop-paper-pareto"
    assert main(["pareto", "--model", "gpt2xl", "--cluster", "fasop-paper-pareto", "--max-nodes", "a100=2,a10=3",
                 "--out-prefix", str(prefix), "--no-progress", "--workers", "1"]) == 0
    with open(tmp_path / "gpt2xl_fasop-paper-pareto_pareto.csv", newline="") as fh:
        return list(csv.DictReader(fh))


def test_every_frontier_point_is_numbered_with_its_csv_rank(tmp_path, capsys, monkeypatch):
    rows = _frontier_rows(tmp_path)
    front = [r for r in rows if r["on_frontier"] == "True"]
    assert len(front) >= 3
    seen = {}
    render = plots.render

    def look(fig):  # `fasop plot`'s figure, drawn, before it is written and closed
        fig.canvas.draw()
        ax = fig.axes[0]
        numbers = [t for t in ax.texts if t.get_gid() == "frontier_number"]
        seen["at"] = {(round(t.xy[0], 6), round(t.xy[1], 6)): t.get_text() for t in numbers}
        seen["boxes"] = [t.get_window_extent() for t in numbers]
        seen["listed"] = [t.get_text() for t in fig.legends[0].get_texts()]
        return render(fig)
    monkeypatch.setattr(plots, "render", look)
    assert main(["plot", "--from", str(tmp_path / "gpt2xl_fasop-paper-pareto_pareto.csv"), "--figures", "frontier",
                 "--out-dir", str(tmp_path / "f")]) == 0
    assert len(seen["at"]) == len(front)
    for r in front:  # the number beside each frontier point is the CSV row's rank
        assert seen["at"][(round(float(r["train_cost_usd"]), 6), round(float(r["train_time_h"]), 6))] == r["rank"]
    boxes = seen["boxes"]
    assert not any(_overlaps(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1:])  # each readable
    assert all(r["composition"] in seen["listed"] for r in front)  # and listed by composition beside its number


def test_pareto_runs_number_their_frontier_as_the_csv_ranks():
    """`fasop pareto`'s own figure has no CSV rank column to read: it numbers by the CSV's rule."""
    from fasop.report.results import pareto_ranks

    assert pareto_ranks([3.0, 1.0, 2.0, float("nan"), 2.0], [1.0, 5.0, 2.0, float("nan"), 1.0],
                        ["ok", "ok", "ok", "oom", "ok"]) == [4, 1, 3, "", 2]  # time, then cost


def test_memory_tick_labels_of_long_gpu_names_do_not_overprint():
    """Llama-3-70B's 8 stages on 2 p4de + 2 p5: 'A100-SXM4-80GB' under each of four bars overprinted
    its neighbours; now broken after its '-'s, on a figure as wide as the longest part needs."""
    from types import SimpleNamespace

    gib = 2.0**30
    stages = [SimpleNamespace(stage=k, gpu="A100-SXM4-80GB" if k < 4 else "H100-SXM", weights_bytes=3 * gib,
                              gradients_bytes=6 * gib, optimizer_bytes=18 * gib, activations_bytes=25 * gib,
                              overhead_bytes=2 * gib, memory_bytes=54 * gib, overhead_factor=1.0, limit_bytes=79 * gib)
              for k in range(8)]
    fig = plots.memory_figure(stages)
    fig.canvas.draw()
    ticks = fig.axes[0].get_xticklabels()
    assert ticks[0].get_text() == "0\nA100-\nSXM4-\n80GB" and ticks[4].get_text() == "4\nH100-\nSXM"
    boxes = [t.get_window_extent() for t in ticks]
    assert not any(_overlaps(a, b) for a, b in zip(boxes, boxes[1:]))
    _close(fig)
    assert plots.wrap_name("A100-SXM4-80GB", 9) == "A100-\nSXM4-80GB" and plots.wrap_name("L4", 3) == "L4"


def test_notes_go_under_the_axis_and_the_legend_stays_on_the_figure():
    """The pruned count (and a deadline / budget off the chart) were written inside the axes' bottom
    left, over the frontier once the time axis is logarithmic; a legend of long labels in two
    columns ran off both sides of the figure."""
    points = pd.concat([WIDE.assign(composition=[f"2xp5+2xp4de+2xg6e+{k}xg5" for k in range(len(WIDE))],
                                    is_knee=[False, True] + [False] * (len(WIDE) - 2)),
                        _points([float("nan")] * 3, [float("nan")] * 3, ["mixed"] * 3, [False] * 3)
                        .assign(status="pruned")], ignore_index=True)
    fig = plots.frontier_figure(points, KINDS)
    fig.canvas.draw()
    ax = fig.axes[0]
    assert "3 compositions pruned (off the frontier), not drawn" in " ".join(ax.get_xlabel().split())  # wrapped
    assert all(t.get_gid() == "frontier_number" for t in ax.texts)  # nothing else written inside the axes
    legend, width = fig.legends[0].get_window_extent(), fig.get_figwidth() * fig.dpi
    assert 0 <= legend.x0 and legend.x1 <= width
    _close(fig)


def test_a_frontier_crammed_in_a_corner_gets_a_log_axis():
    """Far-off slow points (29x: under LOG_SPAN) squeeze the frontier into under 10 % of a linear
    time axis: that axis goes logarithmic; the same points with the frontier spread stay linear."""
    from fasop.report.figure_styles import crowded

    values = [30e3, 31e3, 33e3, 35e3, 870e3]
    assert crowded(values, [30e3, 31e3, 33e3])            # 3,000 of 840,000 hours
    assert not crowded(values, [30e3, 870e3])             # the frontier spans the axis
    assert not crowded([10.0, 12.0, 20.0], [10.0])        # under 3x: a log axis would not help
    assert not crowded(values, [])
