"""Figures at catalog scale (issue 30, item 6): a pipeline of many micro-batches drawn as warm-up,
a few steady micro-batches, a break, cool-down (bounded boxes, so bounded time); the DP all-reduce
where the step time puts it; one colour per node type in every figure of a run; "spot" in the
title of figures of spot-priced results; node type names with '-' (gcp) kept whole.
"""

from __future__ import annotations

import csv

import pytest

from fasop.plans.plan import abbreviate
from fasop.cli.command import main
from fasop.report import plots
from fasop.report import timeline_cut
from fasop.report.timeline_cut import KEEP, cut_window


def _rows(path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def _timeline(csv_path, rank: int = 1):
    from fasop.cli.plan import estimator_for
    from fasop.report.explain import explain_with_timeline
    from fasop.plans.rowplan import plan_of_row
    from fasop.specs.load import load_cluster, load_model

    rows = _rows(csv_path)
    row = next(r for r in rows if r["rank"] == str(rank))
    model, cluster = load_model(row["model_spec"]), load_cluster(row["cluster_spec"])
    from fasop.cli.args import with_step_shape

    model = with_step_shape(model, int(row["sequence_length"]), int(row["global_batch_size"]))
    rp = plan_of_row(row, "row", model, cluster)
    return explain_with_timeline(rp, model, cluster, estimator_for(rp, model, cluster))


@pytest.fixture(scope="module")
def llama70(tmp_path_factory):
    """Llama-3-70B on 2 p5 + 2 p4de, 512 sequences a step: rank 1 is tp 4, dp 1, pp 8, 512 micro-batches."""
    out = tmp_path_factory.mktemp("scale") / "llama70.csv"
    assert main(["search", "--model", "llama-3-70b", "--cluster", "aws", "--nodes", "p5=2,p4de=2", "--heterogeneous",
                 "--top", "3", "--global-batch-size", "512", "--iterations", "100", "--out", str(out),
                 "--no-progress", "--show", "0"]) == 0
    return out


def test_a_long_pipeline_is_drawn_cut_with_bounded_boxes(llama70):
    x, tl = _timeline(llama70)
    assert tl.num_microbatches == 512 and tl.num_stages == 8
    cut = cut_window(tl)
    assert cut is not None and cut.hidden_microbatches >= 400
    fig = plots.timeline_figure(tl, [str(s.stage) for s in x.stages])
    ax = fig.axes[0]
    boxes = sum(len(c.get_paths()) for c in ax.collections if c.get_gid() in ("fwd", "bwd"))
    # warm-up and cool-down (<= pp micro-batches each side a stage) + KEEP steady pairs each side
    assert boxes <= 2 * tl.num_stages * (2 * tl.num_stages + 4 * KEEP + 4) < 2 * 8 * 512
    drawn = timeline_cut.boxes(tl, cut)
    shown = {tl.events[b.event].microbatch for b in drawn if tl.events[b.event].stage == 0}
    assert {0, 1, KEEP, 511} <= shown and not shown & set(range(KEEP + tl.num_stages + 2, 500))
    numbers = next(c for c in ax.collections if c.get_gid() == "microbatch").get_offsets()
    assert 0 < len(numbers) <= boxes  # a number on boxes wide enough for it, none in the gap
    assert not any(cut.at_s * 1e3 < x < (cut.at_s + cut.gap_s) * 1e3 for x, _ in numbers)
    assert any("steady micro-batches of stage 0 not drawn" in line for line in ax.get_xlabel().splitlines())
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert labels[0] == "0" and float(labels[-1].replace(",", "")) > 0.9 * tl.pipeline_time_s * 1e3  # real times
    __import__("matplotlib.pyplot").pyplot.close(fig)


def test_fasop_plot_of_the_long_pipeline_draws_its_timeline(llama70, tmp_path, capsys):
    """Before: 8 x 512 x 2 = 8,192 boxes took ~30-60 s (benchmarks/bench_plot.py measures it)."""
    assert main(["plot", "--from", str(llama70), "--figures", "timeline", "--out-dir", str(tmp_path)]) == 0
    assert (tmp_path / "llama70_timeline.png").stat().st_size > 0


def test_dp_all_reduce_ends_where_the_step_time_puts_it(tmp_path):
    """Llama-3-8B on 2 p4d, rank 1 (tp 2, dp 4, pp 2): its DP all-reduce is overlapped with the
    backward (not in the step time), so it is drawn ending at the stage's end, not after the step."""
    out = tmp_path / "l8.csv"
    assert main(["search", "--model", "llama-3-8b", "--cluster", "aws", "--nodes", "p4d=2", "--out", str(out),
                 "--no-progress", "--show", "0"]) == 0
    x, tl = _timeline(out)
    syncs = [e for e in tl.events if e.kind == "dp_sync"]
    exposed = dict(x.step_parts)["DP sync not overlapped"]
    assert syncs and int(_rows(out)[0]["dp"]) > 1
    for e in syncs:
        assert e.end_s == pytest.approx(tl.stage_end_s[e.stage] + exposed, abs=1e-12)
        assert e.end_s <= tl.step_time_s


def test_a_node_type_has_one_style_in_every_figure():
    """The style of a node type is its place in the cluster spec, whichever types a figure shows."""
    import pandas as pd

    order = ["h100", "a100", "l4", "a10"]
    styles = plots.node_type_styles(order)
    for kinds in (["l4"], ["a10", "l4"], order):
        points = pd.DataFrame({"composition": [f"1x{k}" for k in kinds], "kind": kinds, "status": ["ok"] * len(kinds),
                               "train_time_h": [1.0 + i for i in range(len(kinds))],
                               "train_cost_usd": [9.0 - i for i in range(len(kinds))],
                               "on_frontier": [True] * len(kinds), "is_knee": [False] * len(kinds)})
        fig = plots.frontier_figure(points, kinds, type_order=order)
        drawn = {c.get_label()[:-len(" only")]: c for c in fig.axes[0].collections if c.get_label().endswith(" only")}
        from matplotlib.colors import to_rgb

        for kind, coll in drawn.items():
            assert tuple(coll.get_facecolor()[0][:3]) == pytest.approx(to_rgb(styles[kind]["color"]))
        __import__("matplotlib.pyplot").pyplot.close(fig)


def test_spot_results_say_spot_in_their_figures(tmp_path, capsys):
    out = tmp_path / "spot.csv"
    assert main(["search", "--model", "llama-3-8b", "--cluster", "aws", "--nodes", "p4d=1", "--spot", "--out", str(out),
                 "--no-progress", "--show", "0"]) == 0
    assert main(["plot", "--from", str(out), "--figures", "memory", "--out-dir", str(tmp_path)]) == 0
    assert "(spot prices)" in (tmp_path / "spot_memory.svg").read_text()
    prefix = tmp_path / "p"
    assert main(["pareto", "--model", "llama-3-8b", "--cluster", "aws", "--max-nodes", "p4d=1,g6e=1", "--spot",
                 "--out-prefix", str(prefix), "--no-progress", "--workers", "1"]) == 0
    assert "(spot prices)" in (tmp_path / "p_pareto.svg").read_text()


def test_gcp_node_names_with_dashes(tmp_path, capsys):
    """gcp's node types are named a3-highgpu-8g: a search wrote its mfu (a traceback before) and
    tables abbreviate whole names."""
    assert abbreviate("a3-highgpu-8g-a3-highgpu-8g-a2-ultragpu-8g", ["a3-highgpu-8g", "a2-ultragpu-8g"]) == \
        "2xa3-highgpu-8g-a2-ultragpu-8g"
    out = tmp_path / "gcp.csv"
    assert main(["search", "--model", "llama-3-8b", "--cluster", "gcp", "--nodes", "a3-highgpu-8g=2", "--top", "2",
                 "--out", str(out), "--no-progress"]) == 0
    assert "2xa3-highgpu-8g" in capsys.readouterr().out
    assert all(0 < float(r["mfu"]) < 1 for r in _rows(out))


def test_a_timeline_past_the_simulated_pairs_is_left_out_with_its_size(tmp_path, capsys):
    """96 stages x 16,384 micro-batches are 1.6 M (stage, micro-batch) pairs, past limits.SCHEDULE_PAIRS (at
    the ceiling of 256 stages x 16,384, the simulated timeline took 126 s and 7.8 GB): explain shows the
    estimate without the timeline and says why; plot draws its other figures and says why the timeline is not
    among them; the step is the one search's closed form gives either way."""
    from fasop.core.limits import SCHEDULE_PAIRS

    plan = ["--model", "gpt3-175b", "--cluster", "aws", "--placement", "-".join(["p5"] * 12), "--tp", "1", "--dp", "1",
            "--pp", "96", "--mbs", "1", "--global-batch-size", "16384"]
    assert 96 * 16384 > SCHEDULE_PAIRS
    assert main(["explain", *plan]) == 0
    out = capsys.readouterr().out
    assert "1,572,864 (stage, micro-batch) pairs, past the 524,288" in out and "no timeline to break it down" in out
    assert main(["plot", *plan, "--out-dir", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert "no timeline: 96 stages x 16,384 micro-batches" in err
    assert sorted(p.name.rsplit("_", 1)[1] for p in tmp_path.iterdir()) == ["breakdown.png", "breakdown.svg",
                                                                           "memory.png", "memory.svg"]
