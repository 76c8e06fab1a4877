"""fasop plot: the pipeline timeline (Gantt) drawn from the estimate's own schedule, the
breakdown and memory figures, the frontier of a pareto CSV; checked on the figures' artists."""

from __future__ import annotations

import csv
import xml.etree.ElementTree as ET

import numpy as np
import pandas as pd
import pytest

from fasop.cli.command import main
from fasop.cli.plan import inventory_of
from fasop.estimators.fasop2024.estimator import Fasop2024Estimator
from fasop.plans.rowplan import plan_of_row
from fasop.report import plots
from fasop.report.explain import estimate_split
from fasop.schedule.pipeline import critical_path
from fasop.report.timeline_cut import cut_window, drawn_s
from fasop.schedule.timeline import timeline
from fasop.specs.load import load_cluster, load_model

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def gpt2xl(tmp_path_factory):
    out = tmp_path_factory.mktemp("plots") / "gpt2xl_fasop-paper_a100x1-a10x3.csv"
    assert main(["search", "--model", "gpt2xl", "--cluster", "fasop-paper", "--nodes", "a100=1,a10=3",
                 "--heterogeneous", "--out", str(out), "--show", "0", "--no-progress"]) == 0
    model, cluster = load_model("gpt2xl"), load_cluster("fasop-paper")
    return model, cluster, list(csv.DictReader(open(out))), out


def _drawn(model, cluster, row):
    """(estimate, timeline) of a row's plan, drawn from fasop-2024's own schedule of it."""
    rp = plan_of_row(row, "row", model, cluster)
    estimator = Fasop2024Estimator(model, cluster, inventory_of(rp), partitioner="optimal")
    e = estimate_split(estimator, rp.plan, rp.partition)
    return e, timeline(e, estimator.schedule_of(e))


def test_gantt_has_two_compute_boxes_per_stage_and_microbatch_and_ends_at_the_pipeline_time(gpt2xl):
    model, cluster, rows, _ = gpt2xl
    for row in rows[:6] + [r for r in rows if r["pp"] == "1"][:1]:
        e, tl = _drawn(model, cluster, row)
        fig = plots.timeline_figure(tl, [str(i) for i in range(e.plan.pp)])
        ax = fig.axes[0]
        boxes = [path.vertices for c in ax.collections if c.get_gid() in ("fwd", "bwd") for path in c.get_paths()]
        cut = cut_window(tl)  # a long steady state is cut out of the figure (test_plot_scale.py)
        if cut is None:
            assert len(boxes) == e.plan.pp * e.plan.num_microbatches * 2
        right = max(v[:, 0].max() for v in boxes)
        assert right == pytest.approx(drawn_s(cut, float(row["pipeline_time_s"])) * 1e3,
                                      rel=1e-9 if e.plan.pp > 1 else 1e-6)
        # every (stage, micro-batch) has one forward and one backward box
        pairs = sorted((ev.stage, ev.microbatch, ev.kind) for ev in tl.events if ev.kind in ("fwd", "bwd"))
        assert pairs == sorted((s, j, k) for s in range(e.plan.pp) for j in range(e.plan.num_microbatches)
                               for k in ("fwd", "bwd"))
        __import__("matplotlib.pyplot").pyplot.close(fig)


def test_timeline_events_never_overlap_on_a_stage_and_backward_follows_forward(gpt2xl):
    model, cluster, rows, _ = gpt2xl
    for row in rows[:10]:
        _, tl = _drawn(model, cluster, row)
        times = {(ev.stage, ev.microbatch, ev.kind): ev for ev in tl.events}
        for s in range(tl.num_stages):
            # one computation at a time per stage (FASOP's sends may overlap the stage's next compute)
            own = sorted((ev.start_s, ev.end_s) for ev in tl.events if ev.stage == s and ev.kind in ("fwd", "bwd"))
            assert all(b[0] >= a[1] for a, b in zip(own, own[1:]))
            for j in range(tl.num_microbatches):
                assert times[(s, j, "bwd")].start_s >= times[(s, j, "fwd")].end_s
                if s + 1 < tl.num_stages:  # a micro-batch reaches stage s+1 after stage s computed it
                    assert times[(s + 1, j, "fwd")].start_s >= times[(s, j, "fwd")].end_s


def test_critical_path_is_the_schedules_own(gpt2xl):
    """The chain the figure outlines adds up (1/k of a stage's time per forward, (k-1)/k per
    backward, k = the profile's fwd_bwd_factor, plus its sends) to stage 0's end, with the
    weights of schedule.critical_path."""
    model, cluster, rows, _ = gpt2xl
    for row in [r for r in rows if int(r["pp"]) > 1][:8]:
        e, tl = _drawn(model, cluster, row)
        chain = [tl.events[k] for k in tl.critical]
        assert chain[0].start_s == 0.0 and chain[-1].end_s == e.pipeline_time_s
        assert all(b.start_s == a.end_s for a, b in zip(chain, chain[1:]))  # each waited for the one before
        pp = e.plan.pp
        k = model.profile.fwd_bwd_factor
        weights = np.zeros(pp)
        for ev in chain:
            weights[ev.stage] += {"fwd": 1 / k, "bwd": (k - 1) / k}.get(ev.kind, 0.0)
        comp = np.array(e.stage_compute_s)[:, None]
        sends_fwd, sends_bwd = np.zeros((pp, 1)), np.zeros((pp, 1))
        sends_fwd[0], sends_bwd[-1] = e.p2p_s[0], e.p2p_s[-1]
        _, expected, _ = critical_path(comp, sends_fwd, sends_bwd, e.plan.num_microbatches, fwd_bwd_factor=k)
        np.testing.assert_allclose(weights, expected[:, 0], rtol=1e-12)


def test_frontier_gives_four_node_types_four_styles():
    kinds = ["h100", "a100", "l4", "a10"]
    points = pd.DataFrame({
        "composition": [f"1x{k}" for k in kinds] + ["1xa100+1xa10"], "kind": kinds + ["mixed"],
        "status": ["ok"] * 5, "train_time_h": [1.0, 2.0, 3.0, 4.0, 2.5],
        "train_cost_usd": [5.0, 4.0, 3.0, 2.0, 3.5], "on_frontier": [True] * 4 + [False],
        "is_knee": [False, True, False, False, False]})
    fig = plots.frontier_figure(points, kinds)
    ax = fig.axes[0]
    styles = {}
    for coll in ax.collections:
        label = coll.get_label()
        if label.endswith(" only") or label == "mixed":
            styles[label] = (coll.get_paths()[0].vertices.round(3).tobytes(), tuple(coll.get_facecolor()[0][:3]))
    assert len(styles) == 5
    assert len(set(s[0] for s in styles.values())) == 5 and len(set(s[1] for s in styles.values())) == 5
    # frontier points numbered by their rank (the mixed point, 2.5 h, is rank 3: off the frontier) and
    # listed by composition in the legend, beside their number
    assert sorted(t.get_text() for t in ax.texts) == ["1", "2", "4", "5"]
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert all(f"1x{k}" in legend for k in kinds)


def test_cli_plot_writes_each_figure_as_png_and_svg(gpt2xl, tmp_path, capsys):
    _, _, _, out = gpt2xl
    assert main(["plot", "--from", str(out), "--rank", "2", "--out-dir", str(tmp_path), "--top", "4"]) == 0
    names = sorted(p.name for p in tmp_path.iterdir())
    stem = out.stem + "_rank2"
    assert names == sorted(f"{stem}_{k}.{x}" for k in ("timeline", "breakdown", "memory") for x in ("png", "svg"))
    for path in tmp_path.iterdir():
        if path.suffix == ".png":
            assert path.read_bytes().startswith(PNG_MAGIC) and path.stat().st_size > 5000
        else:
            assert ET.parse(path).getroot().tag.endswith("svg")
    first = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert main(["plot", "--from", str(out), "--rank", "2", "--out-dir", str(tmp_path), "--top", "4"]) == 0
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == first  # same inputs, same bytes
    capsys.readouterr()
    assert main(["plot", "--from", str(out), "--row", "100000", "--out-dir", str(tmp_path)]) == 2
    assert "--row: 100000 is past the last of" in capsys.readouterr().err


def test_memory_figure_stacks_the_parts_to_the_stage_memory(gpt2xl):
    from fasop.report.explain import explain

    model, cluster, rows, _ = gpt2xl
    rp = plan_of_row(rows[2], "row", model, cluster)
    x = explain(rp, model, cluster, Fasop2024Estimator(model, cluster, inventory_of(rp), partitioner="optimal"))
    fig = plots.memory_figure(x.stages)
    ax = fig.axes[0]
    tops = {}
    for p in ax.patches:
        if p.get_gid() in ("weights", "gradients", "optimizer", "activations"):
            i = round(p.get_x() + p.get_width() / 2)
            tops[i] = max(tops.get(i, 0.0), p.get_y() + p.get_height())
    for s in x.stages:
        assert tops[s.stage] == pytest.approx(s.memory_bytes / 2**30, rel=1e-9)


def test_cli_plot_of_a_pareto_csv(tmp_path, capsys, monkeypatch, repo):
    """A pareto CSV: the frontier (points labelled by composition), and the knee's timeline,
    memory and the frontier plans' breakdown; --figures picks some."""
    monkeypatch.chdir(repo)
    prefix = tmp_path / "gpt2xl_fasop-paper-pareto"
    assert main(["pareto", "--model", "gpt2xl", "--cluster", "fasop-paper-pareto", "--max-nodes", "a100=1,a10=2",
                 "--out-prefix", str(prefix), "--no-progress", "--workers", "1"]) == 0
    source = tmp_path / "gpt2xl_fasop-paper-pareto_pareto.csv"
    out = tmp_path / "figures"
    assert main(["plot", "--from", str(source), "--out-dir", str(out)]) == 0
    stem = "gpt2xl_fasop-paper-pareto_pareto"
    assert sorted(p.name for p in out.iterdir()) == sorted(
        f"{stem}_{k}.{x}" for k in ("frontier", "timeline", "breakdown", "memory") for x in ("png", "svg"))
    frontier = ET.parse(out / f"{stem}_frontier.svg").getroot()
    texts = "".join(frontier.itertext())
    for row in csv.DictReader(open(source)):
        if row["on_frontier"] == "True":
            assert row["composition"] in texts
    capsys.readouterr()
    assert main(["plot", "--from", str(source), "--out-dir", str(tmp_path / "f2"), "--figures", "frontier"]) == 0
    assert sorted(p.name for p in (tmp_path / "f2").iterdir()) == [f"{stem}_frontier.png", f"{stem}_frontier.svg"]
    assert main(["plot", "--from", str(source), "--out-dir", str(tmp_path / "f3"), "--figures", "gantt"]) == 2
    assert capsys.readouterr().err.startswith("fasop: error: --figures: expected some of timeline")


def test_fasop_2024_draws_only_the_end_stages_sends(gpt2xl):
    """p2p-ends-only (docs/estimators.md §4): fasop-2024's timeline holds stage 0's forward sends
    and the last stage's backward sends, no others, and stage 0 ends at the estimate's pipeline
    time, bit for bit."""
    model, cluster, rows, _ = gpt2xl
    chosen = [r for r in rows if int(r["pp"]) > 2][:4]
    assert chosen
    for row in chosen:
        e, tl = _drawn(model, cluster, row)
        sends = {(ev.stage, ev.kind) for ev in tl.events if ev.kind.startswith("send")}
        assert sends == {(0, "send_fwd"), (e.plan.pp - 1, "send_bwd")}
        assert tl.pipeline_time_s == e.pipeline_time_s


