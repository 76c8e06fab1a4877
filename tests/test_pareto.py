"""fasop pareto: composition sweep, time-vs-dollar frontier, knee, deadline / budget queries, CSV and plots.

What is protected here:
- the sweep with FASOP's choices reproduces the original's `--pareto` run candidate for candidate
  (tests/data/gpt2xl_pareto_sweep.csv, 80 compositions of up to 8 p4d + 8 g5 nodes, 31,362 plans),
  within the tolerances of tests/test_reproduction.py, and the frontier fasop computes from it is
  the one a hand computation over that file gives;
- the frontier, knee and queries on hand-made points (ties, duplicates, dominated and NaN rows,
  a max column) and against a brute-force O(n^2) frontier on random tables;
- the CLI through `main(argv)` into a temporary folder: the query messages, plots that are real
  PNG / SVG files, an interrupted sweep, byte-identical reruns, bad input.

The gpt2xl sweep (~15 s) runs once per session; the CLI tests use BERT on small inventories of
`fasop-paper` (4 GPUs per node), about a second each. FASOP's own choices (`--placements cyclic
--partitioner fasop-minmax`) are always passed explicitly.
"""

from __future__ import annotations

import csv
import itertools
import math
import random
import xml.etree.ElementTree as ET
from types import SimpleNamespace

import pandas as pd
import pytest

import fasop.pareto.sweep
from conftest import DATA, REPO
from fasop.cli.command import main
from fasop.core.errors import FasopError
from fasop.pareto.frontier import analyse, cheapest_within, fastest_within, knee_position, pareto_front
from fasop.pareto.sweep import Composition, CompositionResult, compositions, parse_node_limits, sweep
from fasop.report.results import search_rows
from fasop.specs.files import shipped_folder
from fasop.specs.load import load_cluster, load_model

FASOP_CHOICES = ["--placements", "cyclic", "--partitioner", "fasop-minmax"]
ITERATIONS = 12_500_000
INSTANCE_TO_TYPE = {"p4d.24xlarge": "a100", "g5.24xlarge": "a10"}
RELATIVE = ("step_time_s", "pipeline_time_s", "dp_allreduce_s", "embedding_allreduce_s", "usd_per_step",
            "train_cost_usd")
MEMORY = ("oom_gpumem_gib", "zero_oom_gpumem_gib")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _read(path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def _close(got: float, want: float, rel: float = 1e-4) -> bool:
    return abs(got - want) <= rel * abs(want)


# ============================================================================ reproduction
@pytest.fixture(scope="module")
def gpt2xl_sweep():
    """(model, results): FASOP's pareto sweep, gpt2xl on up to 8 a100 + 8 a10 nodes. Once per session."""
    model = load_model(str(shipped_folder("model_specs") / "gpt2xl.yaml"))
    cluster = load_cluster(str(shipped_folder("cluster_specs") / "fasop-paper-pareto.yaml"))
    comps = compositions(parse_node_limits("a100=8,a10=8", cluster, "--max-nodes"))
    results = tuple(sweep(model, cluster, comps, placements="cyclic", partitioner="fasop-minmax",
                          iterations=ITERATIONS))
    return model, results


@pytest.fixture(scope="module")
def reference() -> dict[tuple[int, int], list[dict]]:
    """The original's rows by composition (num_a100_nodes, num_a10_nodes)."""
    by_comp: dict[tuple[int, int], list[dict]] = {}
    for row in _read(DATA / "gpt2xl_pareto_sweep.csv"):
        by_comp.setdefault((int(row["num_a100_nodes"]), int(row["num_a10_nodes"])), []).append(row)
    return by_comp


def _key(row: dict, rename: bool) -> tuple:
    placement = row["node_placement"]
    if rename:
        placement = "-".join(INSTANCE_TO_TYPE[x] for x in placement.split("-"))
    return int(row["mbs"]), int(row["tp"]), int(row["dp"]), int(row["pp"]), placement


def _counts(result: CompositionResult) -> tuple[int, int]:
    counts = dict(result.composition.counts)
    return counts["a100"], counts["a10"]


def test_sweep_reproduces_fasop_pareto_candidates(gpt2xl_sweep, reference):
    """Every composition's candidates are the original's: same (mbs, tp, dp, pp, node_placement)
    set, same partition / is_oom / is_zero_oom, times and dollars within 1e-4 relative, memory
    within one unit of the 4th decimal FASOP rounds it to."""
    model, results = gpt2xl_sweep
    assert sum(len(rows) for rows in reference.values()) == 31362
    assert [_counts(r) for r in results] == [(a, b) for a in range(9) for b in range(9) if a + b]  # order too
    assert set(reference) == {_counts(r) for r in results}
    mismatches, total = [], 0
    for r in results:
        assert r.search is not None, r.composition.label
        _, rows = search_rows(r.search, model.sequence_length)
        mine = {_key(row, False): row for row in rows}
        ref = {_key(row, True): row for row in reference[_counts(r)]}
        assert len(mine) == len(rows) and len(ref) == len(reference[_counts(r)]), "duplicate keys"
        assert set(mine) == set(ref), (r.composition.label, sorted(set(mine) ^ set(ref))[:5])
        total += len(mine)
        for key, want in ref.items():
            got = mine[key]
            for column in ("partition", "is_oom", "is_zero_oom"):
                if str(got[column]) != want[column]:
                    mismatches.append((r.composition.label, key, column, got[column], want[column]))
            for column in RELATIVE:
                if not _close(float(got[column]), float(want[column])):
                    mismatches.append((r.composition.label, key, column, got[column], want[column]))
            for column in MEMORY:
                if not abs(float(got[column]) - float(want[column])) <= 1.0001e-4:
                    mismatches.append((r.composition.label, key, column, got[column], want[column]))
    assert total == 31362
    assert not mismatches, f"{len(mismatches)} mismatches, first: {mismatches[:10]}"


def _hand_frontier(reference: dict[tuple[int, int], list[dict]]) -> dict[tuple[int, int], tuple[float, float]]:
    """From the reference file alone: each composition's fastest non-OOM row, its training time
    (h) and price (usd_per_step x iterations), then the non-dominated set by the O(n^2) definition
    (no other point at least as good in both and strictly better in one; of identical points, the
    first in composition order)."""
    points = {}
    for comp, rows in sorted(reference.items()):
        fits = [row for row in rows if row["is_oom"] == "False"]
        if fits:
            best = min(fits, key=lambda row: float(row["step_time_s"]))
            points[comp] = (float(best["step_time_s"]) * ITERATIONS / 3600, float(best["usd_per_step"]) * ITERATIONS)
    comps = list(points)
    front = {}
    for i, p in enumerate(comps):
        t, c = points[p]
        dominated = any((t2 <= t and c2 <= c and (t2 < t or c2 < c)) or ((t2, c2) == (t, c) and j < i)
                        for j, (t2, c2) in enumerate(points[q] for q in comps) if j != i)
        if not dominated:
            front[p] = (t, c)
    return front


def test_frontier_matches_hand_computation(gpt2xl_sweep, reference):
    """fasop's frontier over the compositions' fastest fitting plans is the one computed by hand
    from the original's candidates; the times and costs agree within 1e-4 relative."""
    _, results = gpt2xl_sweep
    analysis = analyse(results)
    hand = _hand_frontier(reference)
    assert 3 <= len(hand) < len(results)  # the check has something to tell apart
    mine = {_counts(results[i]): results[i] for i in analysis.frontier}
    assert set(mine) == set(hand)
    assert {_counts(r) for r, on in zip(results, analysis.on_frontier) if on} == set(hand)
    for comp, (t, c) in hand.items():
        assert _close(mine[comp].train_time_h, t), (comp, mine[comp].train_time_h, t)
        assert _close(mine[comp].train_cost_usd, c), (comp, mine[comp].train_cost_usd, c)
    times = [results[i].train_time_h for i in analysis.frontier]
    assert times == sorted(times)  # fastest first
    assert analysis.knee in analysis.frontier


def test_allowing_more_nodes_never_worsens_the_frontier(gpt2xl_sweep):
    """For every pair of nested limits (a100 <= a, a10 <= b) within (a', b') >= (a, b), each point
    of the smaller frontier is matched or beaten in both time and cost by the larger one."""
    _, results = gpt2xl_sweep

    def front(a: int, b: int) -> list[tuple[float, float]]:
        within = [r for r in results if _counts(r)[0] <= a and _counts(r)[1] <= b]
        analysis = analyse(within)
        return [(within[i].train_time_h, within[i].train_cost_usd) for i in analysis.frontier]

    limits = [(a, b) for a in (0, 1, 3, 8) for b in (1, 2, 5, 8)]
    fronts = {lim: front(*lim) for lim in limits}
    for (a, b), (a2, b2) in itertools.product(limits, limits):
        if a <= a2 and b <= b2:
            for t, c in fronts[(a, b)]:
                assert any(t2 <= t and c2 <= c for t2, c2 in fronts[(a2, b2)]), ((a, b), (a2, b2), t, c)
    assert fronts[(8, 8)] != fronts[(0, 1)]  # more nodes did add points


# ============================================================================ frontier on hand-made tables
def _front(rows: list[tuple], senses: dict, duplicates: str = "first") -> list[bool]:
    table = pd.DataFrame(rows, columns=list(senses))
    return pareto_front(table, senses, duplicates=duplicates).tolist()


MIN2 = {"t": "min", "c": "min"}


def test_dominated_points_are_off_the_front():
    #            front       front       front       (2, 3) worse than (2, 2)   (4, 4) worse than all
    rows = [(1.0, 3.0), (2.0, 2.0), (3.0, 1.0), (2.0, 3.0), (4.0, 4.0)]
    assert _front(rows, MIN2) == [True, True, True, False, False]


def test_tie_in_one_objective_keeps_only_the_better_other():
    assert _front([(1.0, 5.0), (1.0, 4.0), (0.5, 6.0)], MIN2) == [False, True, True]
    assert _front([(5.0, 1.0), (4.0, 1.0)], MIN2) == [False, True]


def test_duplicates_first_in_row_order_or_all():
    """Identical points do not dominate each other: "first" keeps the first in row order (not in
    sorted order), "all" keeps every copy; a duplicate of a dominated point stays off."""
    rows = [(2.0, 0.0), (1.0, 1.0), (1.0, 1.0), (3.0, 3.0), (3.0, 3.0)]
    assert _front(rows, MIN2) == [True, True, False, False, False]
    assert _front(rows, MIN2, duplicates="all") == [True, True, True, False, False]


def test_nan_rows_are_never_on_the_front_and_dominate_nothing():
    nan = math.nan
    rows = [(nan, 0.0), (1.0, 5.0), (0.0, nan), (nan, nan), (2.0, 4.0)]
    assert _front(rows, MIN2) == [False, True, False, False, True]
    assert _front([(nan, nan)], MIN2) == [False]


def test_max_sense():
    """Throughput is maximised, cost minimised: higher throughput at equal cost wins."""
    senses = {"tput": "max", "cost": "min"}
    rows = [(100.0, 10.0), (120.0, 10.0), (150.0, 20.0), (140.0, 25.0), (50.0, 5.0)]
    assert _front(rows, senses) == [False, True, True, False, True]
    # the same table read as "min" on both picks differently: the sense is used
    assert _front(rows, {"tput": "min", "cost": "min"}) == [False, False, False, False, True]


def test_front_keeps_the_table_index_and_handles_empty_tables():
    table = pd.DataFrame({"t": [2.0, 1.0], "c": [1.0, 2.0]}, index=["x", "y"])
    front = pareto_front(table, MIN2)
    assert list(front.index) == ["x", "y"] and front.tolist() == [True, True]
    assert pareto_front(pd.DataFrame({"t": [], "c": []}), MIN2).tolist() == []


@pytest.mark.parametrize("senses,duplicates", [({}, "first"), ({"t": "least"}, "first"), (MIN2, "some")])
def test_front_rejects_bad_arguments(senses, duplicates):
    with pytest.raises(ValueError):
        pareto_front(pd.DataFrame({"t": [1.0], "c": [1.0]}), senses, duplicates=duplicates)


def _brute_front(rows: list[tuple], signs: list[float], duplicates: str) -> list[bool]:
    """The definition, O(n^2): r is off when some q is at least as good everywhere and strictly
    better somewhere, or (duplicates="first") q is identical and earlier."""
    vals = [tuple(s * v for s, v in zip(signs, row)) for row in rows]
    out = []
    for i, v in enumerate(vals):
        if any(math.isnan(x) for x in v):
            out.append(False)
            continue
        beaten = False
        for j, w in enumerate(vals):
            if j == i or any(math.isnan(x) for x in w):
                continue
            if all(a <= b for a, b in zip(w, v)) and (any(a < b for a, b in zip(w, v))
                                                        or (duplicates == "first" and w == v and j < i)):
                beaten = True
                break
        out.append(not beaten)
    return out


@pytest.mark.parametrize("seed", range(20))
def test_front_agrees_with_brute_force_on_random_tables(seed):
    """Small integer grids make ties and duplicates common; a few NaN cells; mixed senses."""
    rng = random.Random(seed)
    ncols = rng.choice([2, 3])
    senses = {f"x{k}": rng.choice(["min", "max"]) for k in range(ncols)}
    rows = [tuple(math.nan if rng.random() < 0.05 else float(rng.randint(0, 4)) for _ in range(ncols))
            for _ in range(rng.randint(1, 40))]
    signs = [1.0 if s == "min" else -1.0 for s in senses.values()]
    for duplicates in ("first", "all"):
        assert _front(rows, senses, duplicates) == _brute_front(rows, signs, duplicates), (rows, senses, duplicates)


# ============================================================================ knee and queries
def test_knee_is_the_point_farthest_below_the_chord():
    # normalised: (0, 1), (0.1, 0.2), (0.5, 0.1), (1, 0): gains 0, 0.7, 0.4, 0
    times, costs = [0.0, 1.0, 5.0, 10.0], [100.0, 20.0, 10.0, 0.0]
    assert knee_position(times, costs) == 1
    # the same points in another order: the answer follows the point, not the position
    assert knee_position(times[::-1], costs[::-1]) == 2


def test_knee_tie_goes_to_the_faster_point():
    # t' = t/16, c' = c/16: the points at t = 2, 4, 6 all have gain 1 - t' - c' = 0.5 (exact in
    # binary); the fastest of them (t = 2) sits between the others in argument order
    times, costs = [6.0, 0.0, 2.0, 16.0, 4.0], [2.0, 16.0, 6.0, 0.0, 4.0]
    assert knee_position(times, costs) == 2


@pytest.mark.parametrize("times,costs", [([], []), ([1.0], [1.0]), ([1.0, 2.0], [2.0, 1.0]),
                                         ([1.0, 1.0, 1.0], [3.0, 2.0, 1.0])])
def test_no_knee_with_fewer_than_three_points_or_no_spread(times, costs):
    assert knee_position(times, costs) is None


def test_deadline_query_cheapest_within():
    times, costs = [10.0, 20.0, 30.0, 20.0, 25.0], [5.0, 3.0, 1.0, 3.0, 3.0]
    assert cheapest_within(times, costs, 20.0) == 1  # deadline inclusive; cost tie -> faster, then first
    assert cheapest_within(times, costs, 29.9) == 1  # 1 and 4 cost the same, 1 is faster
    assert cheapest_within(times, costs, 30.0) == 2
    assert cheapest_within(times, costs, 10.0) == 0
    assert cheapest_within(times, costs, 9.99) is None  # none qualifies
    assert cheapest_within([], [], 1.0) is None


def test_budget_query_fastest_within():
    times, costs = [10.0, 20.0, 30.0, 20.0, 10.0], [5.0, 3.0, 1.0, 2.0, 6.0]
    assert fastest_within(times, costs, 5.0) == 0  # budget inclusive; 4 is as fast but over budget
    assert fastest_within(times, costs, 3.0) == 3  # time tie 1/3 -> cheaper
    assert fastest_within(times, costs, 1.0) == 2
    assert fastest_within(times, costs, 0.99) is None  # none qualifies
    assert fastest_within([10.0, 10.0], [2.0, 2.0], 2.0) == 0  # identical -> first


def _fake(label: str, step_time_s: float | None, usd_per_hour: float, *, no_plan: bool = False) -> CompositionResult:
    """A composition result without running a search: `step_time_s` None means every plan is OOM."""
    search = None if no_plan else SimpleNamespace(
        best_fitting=None if step_time_s is None else SimpleNamespace(step_time_s=step_time_s))
    return CompositionResult(composition=Composition(counts=((label, 1),)), search=search,
                             usd_per_hour=usd_per_hour, iterations=3600)


def test_analyse_skips_oom_and_no_plan_compositions():
    """Times are step_time_s h here (3600 iterations). The OOM and no-plan compositions are never
    on the front nor an answer, and indices point into the results, not into the fitting ones."""
    results = [_fake("oom", None, 1.0), _fake("a", 1.0, 100.0), _fake("none", 0.0, 0.0, no_plan=True),
               _fake("b", 2.0, 20.0), _fake("c", 4.0, 10.0), _fake("d", 4.0, 12.0), _fake("e", 8.0, 4.0)]
    # (time h, cost $): a (1, 100), b (2, 40), c (4, 40), d (4, 48), e (8, 32); c and d are dominated by b
    analysis = analyse(results, deadline_hours=4.0, budget_usd=40.0)
    assert [r.status for r in results] == ["oom", "ok", "no_plan", "ok", "ok", "ok", "ok"]
    assert analysis.on_frontier == (False, True, False, True, False, False, True)
    assert analysis.frontier == (1, 3, 6)
    # t' = 0, 1/7, 1 and c' = 1, 8/68, 0: b is far below the chord
    assert analysis.knee == 3
    assert analysis.deadline == 3  # within 4 h: a $100, b $40, c $40, d $48; b and c tie on cost, b is faster
    assert analysis.budget == 3  # within $40: b (2 h), c (4 h), e (8 h)
    assert analyse(results, budget_usd=39.0).budget == 6  # only e
    assert analyse(results, deadline_hours=1.0).deadline == 1  # only a
    assert analyse(results, deadline_hours=0.5).deadline is None
    assert analyse(results, budget_usd=1.0).budget is None
    points = analysis.points()
    assert points["is_knee"].tolist() == [i == 3 for i in range(7)]
    assert points["status"].tolist() == [r.status for r in results]


@pytest.mark.parametrize("kwargs", [{"deadline_hours": 0.0}, {"deadline_hours": -1.0}, {"budget_usd": 0.0},
                                    {"budget_usd": math.nan}])
def test_analyse_rejects_non_positive_limits(kwargs):
    with pytest.raises(FasopError):
        analyse([_fake("a", 1.0, 1.0)], **kwargs)


# ============================================================================ CLI
def _pareto_argv(prefix, max_nodes: str = "a100=1,a10=2", *extra: str) -> list[str]:
    return ["pareto", "--model", str(shipped_folder("model_specs") / "bert.yaml"),
            "--cluster", str(shipped_folder("cluster_specs") / "fasop-paper.yaml"), "--max-nodes", max_nodes, *FASOP_CHOICES,
            "--out-prefix", str(prefix), "--no-progress", *extra]


def _outputs(prefix) -> tuple:
    return tuple(prefix.with_name(prefix.name + "_pareto" + ext) for ext in (".csv", ".png", ".svg"))


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    """Run from an empty folder, so that a stray default results/ would show up there."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_cli_writes_csv_and_real_plots(in_tmp, capsys):
    """One row per composition, the frontier flagged as `fasop.pareto.frontier.analyse` computes it; a PNG
    (magic bytes) and an SVG (well-formed XML, root <svg>) that are not empty."""
    prefix = in_tmp / "out" / "bert"
    assert main(_pareto_argv(prefix, "a100=1,a10=2", "--deadline-hours", "4000", "--budget-usd", "130000")) == 0
    out = capsys.readouterr().out
    csv_path, png, svg = _outputs(prefix)
    assert sorted(p.name for p in prefix.parent.iterdir()) == sorted(p.name for p in (csv_path, png, svg))
    assert f"wrote {csv_path}, {png}, {svg}" in out
    rows = _read(csv_path)
    assert [r["composition"] for r in rows] == ["1xa10", "2xa10", "1xa100", "1xa100+1xa10", "1xa100+2xa10"]
    assert {r["complete"] for r in rows} == {"True"}
    assert png.stat().st_size > 1000 and png.read_bytes().startswith(PNG_MAGIC)
    root = ET.parse(svg).getroot()
    assert root.tag.endswith("svg") and svg.stat().st_size > 1000
    # the frontier flags are the non-dominated rows of the CSV itself
    pts = [(float(r["train_time_h"]), float(r["train_cost_usd"])) for r in rows]
    flags = [r["on_frontier"] == "True" for r in rows]
    assert flags == _brute_front(pts, [1.0, 1.0], "first")
    assert sum(r["is_knee"] == "True" for r in rows) == 1
    # the CSV is as readable as the plots (mkstemp alone would leave it 0600)
    assert csv_path.stat().st_mode & 0o777 == png.stat().st_mode & 0o777


def test_cli_deadline_and_budget_answers(in_tmp, capsys):
    """The printed deadline / budget answers are the ones a hand query over the CSV gives."""
    prefix = in_tmp / "bert"
    assert main(_pareto_argv(prefix, "a100=1,a10=2", "--deadline-hours", "3650", "--budget-usd", "130000")) == 0
    out = capsys.readouterr().out
    rows = [r for r in _read(_outputs(prefix)[0]) if r["status"] == "ok"]
    within = [r for r in rows if float(r["train_time_h"]) <= 3650]
    cheapest = min(within, key=lambda r: float(r["train_cost_usd"]))
    affordable = [r for r in rows if float(r["train_cost_usd"]) <= 130000]
    fastest = min(affordable, key=lambda r: float(r["train_time_h"]))
    assert cheapest["composition"] != fastest["composition"]  # the two queries tell apart
    assert f"cheapest within 3,650 h: {cheapest['composition']} (tp {cheapest['tp']}," in out
    assert f"fastest within $130,000.00: {fastest['composition']} (tp {fastest['tp']}," in out


def test_cli_none_qualifies(in_tmp, capsys):
    """A deadline nobody meets and a budget nobody fits: said so, with the nearest miss, exit 0."""
    prefix = in_tmp / "bert"
    assert main(_pareto_argv(prefix, "a100=1,a10=2", "--deadline-hours", "1", "--budget-usd", "10")) == 0
    out = capsys.readouterr().out
    rows = [r for r in _read(_outputs(prefix)[0]) if r["status"] == "ok"]
    fastest = min(float(r["train_time_h"]) for r in rows)
    cheapest = min(float(r["train_cost_usd"]) for r in rows)
    assert f"cheapest within 1 h: none qualifies (fastest takes {fastest:,.1f} h)\n" in out
    assert f"fastest within $10.00: none qualifies (cheapest costs ${cheapest:,.0f})\n" in out


def test_cli_more_nodes_never_worsens_the_frontier(in_tmp, capsys):
    """Two independent runs: raising --max-nodes keeps every old frontier point matched or beaten."""
    small, large = in_tmp / "small", in_tmp / "large"
    assert main(_pareto_argv(small, "a100=1,a10=2")) == 0
    assert main(_pareto_argv(large, "a100=2,a10=3")) == 0
    capsys.readouterr()

    def front(prefix):
        return [(float(r["train_time_h"]), float(r["train_cost_usd"]))
                for r in _read(_outputs(prefix)[0]) if r["on_frontier"] == "True"]

    old, new = front(small), front(large)
    assert old and new != old
    for t, c in old:
        assert any(t2 <= t and c2 <= c for t2, c2 in new), (t, c, new)


def test_cli_is_deterministic(in_tmp, capsys):
    """Same inputs, same bytes: the CSV, and the plots too (no dates, fixed SVG ids)."""
    one, two = in_tmp / "one" / "bert", in_tmp / "two" / "bert"
    assert main(_pareto_argv(one, "a100=1,a10=2", "--deadline-hours", "4000")) == 0
    assert main(_pareto_argv(two, "a100=1,a10=2", "--deadline-hours", "4000")) == 0
    capsys.readouterr()
    for a, b in zip(_outputs(one), _outputs(two)):
        assert a.read_bytes() == b.read_bytes(), a.name


def test_cli_workers_give_the_same_bytes(in_tmp, capsys):
    """--workers 1 and 2 (compositions in parallel, largest first) write the same CSV and
    frontier, with the optimal partitioner and with FASOP's choices."""
    for extra in ([], ["--partitioner", "optimal"]):
        outputs = []
        for workers in ("1", "2"):
            prefix = in_tmp / f"w{workers}{len(extra)}" / "bert"
            assert main(_pareto_argv(prefix, "a100=2,a10=2", "--workers", workers, *extra)) == 0
            outputs.append((_outputs(prefix)[0].read_bytes(), capsys.readouterr().out.replace(str(prefix), "P")))
        assert outputs[0] == outputs[1]


def test_sweep_workers_also_run_under_spawn(monkeypatch):
    """Where the OS has no fork (Windows) the worker processes are spawned: the job must travel
    to them and give the results of one process."""
    import multiprocessing

    model, cluster = load_model("bert"), load_cluster("fasop-paper")
    comps = compositions({"a100": 1, "a10": 2})
    alone = [r.best.step_time_s for r in sweep(model, cluster, comps, top=1, partitioner="optimal")]
    get_context = multiprocessing.get_context
    monkeypatch.setattr(multiprocessing, "get_context", lambda method=None: get_context("spawn"))
    spawned = [r.best.step_time_s for r in sweep(model, cluster, comps, top=1, partitioner="optimal", workers=2)]
    assert spawned == alone


def _interrupt_after(monkeypatch, k: int) -> list[int]:
    """Make fasop.pareto.sweep.search raise KeyboardInterrupt on its (k+1)-th call, as Ctrl-C would."""
    calls = []
    real = fasop.pareto.sweep.search

    def search(*args, **kwargs):
        calls.append(1)
        if len(calls) > k:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(fasop.pareto.sweep, "search", search)
    return calls


def test_cli_interrupted_sweep_keeps_a_valid_partial_csv(in_tmp, capsys, monkeypatch):
    """Interrupted after 2 of 5 compositions: exit 130, a CSV of those 2 (same columns and plan
    cells as a full run, complete=False in every row), no plots, no stray files: only the
    checkpoint that --resume continues from (tests/test_sweep_scale.py)."""
    full = in_tmp / "full" / "bert"
    assert main(_pareto_argv(full)) == 0
    capsys.readouterr()
    calls = _interrupt_after(monkeypatch, 2)
    prefix = in_tmp / "cut" / "bert"
    assert main(_pareto_argv(prefix, "a100=1,a10=2", "--workers", "1")) == 130
    assert len(calls) == 3
    captured = capsys.readouterr()
    assert "interrupted after 2 of 5 compositions" in captured.err
    csv_path, png, svg = _outputs(prefix)
    assert sorted(p.name for p in prefix.parent.iterdir()) == [
        "bert_pareto.checkpoint", csv_path.name]  # no plots, no temp file
    with open(csv_path, newline="") as fh:
        header = next(csv.reader(fh))
    with open(_outputs(full)[0], newline="") as fh:
        assert header == next(csv.reader(fh))
    rows, full_rows = _read(csv_path), _read(_outputs(full)[0])
    assert len(rows) == 2 and {r["complete"] for r in rows} == {"False"}
    def stable(row: dict) -> dict:
        return {k: v for k, v in row.items() if k not in ("complete", "on_frontier", "is_knee", "rank")}

    assert [stable(r) for r in rows] == [stable(r) for r in full_rows[:2]]


def test_cli_interrupted_parallel_sweep_keeps_every_finished_composition(in_tmp, capsys, monkeypatch):
    """With --workers 2 the compositions finish out of order; an interruption still writes every
    finished one (in composition order, the same cells as a full run, complete=False) and exits
    130, and no worker is left behind."""
    import multiprocessing

    earlier = set(multiprocessing.active_children())  # other tests' children are not this run's
    full = in_tmp / "full" / "bert"
    assert main(_pareto_argv(full, "a100=1,a10=2", "--workers", "2")) == 0
    capsys.readouterr()
    _interrupt_after(monkeypatch, 1)  # each worker process counts its own calls: 1 each, then Ctrl-C
    prefix = in_tmp / "cut" / "bert"
    assert main(_pareto_argv(prefix, "a100=1,a10=2", "--workers", "2")) == 130
    assert "interrupted after" in capsys.readouterr().err
    rows, full_rows = _read(_outputs(prefix)[0]), _read(_outputs(full)[0])
    assert 1 <= len(rows) < len(full_rows) and {r["complete"] for r in rows} == {"False"}
    keep = [k for k in rows[0] if k not in ("complete", "on_frontier", "is_knee", "rank")]  # rank: in its file
    by_composition = {r["composition"]: [r[k] for k in keep] for r in full_rows}
    assert [r["composition"] for r in rows] == [c for c in by_composition if c in {r["composition"] for r in rows}]
    assert all([r[k] for k in keep] == by_composition[r["composition"]] for r in rows)
    left = [child for child in multiprocessing.active_children() if child not in earlier]
    for child in left:
        child.join(timeout=60)  # a loaded machine (CI beside other jobs) can take seconds to reap one
    assert not [child for child in left if child.is_alive()], [(c.name, c.pid, c.exitcode) for c in left]


def test_cli_interrupted_before_any_composition_writes_nothing(in_tmp, capsys, monkeypatch):
    _interrupt_after(monkeypatch, 0)
    prefix = in_tmp / "cut" / "bert"
    assert main(_pareto_argv(prefix, "a100=1,a10=2", "--workers", "1")) == 130
    assert "nothing written" in capsys.readouterr().err
    assert not prefix.parent.exists()
    assert not (in_tmp / "results").exists()


@pytest.mark.parametrize("extra,message", [
    (["--max-nodes", "h100=2"], "--max-nodes: unknown node type 'h100' in "),
    (["--min-nodes", "a10=3"], "--min-nodes: above --max-nodes for a10=3 > 2"),
    (["--min-nodes", "h100=1"], "--min-nodes: unknown node type 'h100' in "),
    (["--deadline-hours", "-1"], "--deadline-hours: must be a positive number, got -1"),
    (["--deadline-hours", "0"], "--deadline-hours: must be a positive number, got 0"),
    (["--deadline-hours", "nan"], "--deadline-hours: must be a positive number, got nan"),
    (["--budget-usd", "-5"], "--budget-usd: must be a positive number, got -5"),
], ids=["unknown-type", "min-above-max", "min-unknown-type", "deadline-negative", "deadline-zero", "deadline-nan",
        "budget-negative"])
def test_cli_bad_input(in_tmp, capsys, monkeypatch, extra, message):
    """Exit 2, one line on stderr naming the option and value, nothing on stdout, no file anywhere,
    and no sweep started (the search must not be called)."""
    monkeypatch.setattr(fasop.pareto.sweep, "search", lambda *a, **k: pytest.fail("searched before rejecting the input"))
    prefix = in_tmp / "out" / "bert"
    argv = _pareto_argv(prefix, "a100=1,a10=2")
    if extra[0] == "--max-nodes":
        argv[argv.index("--max-nodes") + 1] = extra[1]
    else:
        argv += extra
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("fasop: error: " + message) and err.count("\n") == 1 and err.endswith("\n"), err
    assert list(in_tmp.iterdir()) == []


def test_cli_unwritable_out_prefix(in_tmp, capsys):
    """An --out-prefix that cannot be written is one line and exit 2, not a traceback."""
    (in_tmp / "blocker").write_text("a file where a folder should be")
    assert main(_pareto_argv(in_tmp / "blocker" / "bert", "a100=1")) == 2
    err = capsys.readouterr().err
    assert err.startswith("fasop: error: --out-prefix: cannot write ") and err.count("\n") == 1, err


def test_defaults_never_lose_to_fasop_at_any_cost(gpt2xl_sweep):
    """fasop's defaults (optimal partitions, top-1 pruning) against FASOP's choices on the
    compositions up to 3 A100 + 3 A10 nodes: each composition's best plan is at least as fast
    (so also as cheap), hence at every cost the fastest time on fasop's frontier is at most
    FASOP's."""
    model, cluster = load_model(str(shipped_folder("model_specs") / "gpt2xl.yaml")), \
        load_cluster(str(shipped_folder("cluster_specs") / "fasop-paper-pareto.yaml"))
    comps = compositions({"a100": 3, "a10": 3})
    ours = analyse(list(sweep(model, cluster, comps, placements="cyclic", partitioner="optimal", top=1,
                              iterations=12_500_000)))
    _, fasop_results = gpt2xl_sweep
    by_counts = {_counts(r): r for r in fasop_results}
    theirs = analyse([by_counts[tuple(dict(c.counts).get(t, 0) for t in ("a100", "a10"))] for c in comps])
    for mine, fasop in zip(ours.results, theirs.results):
        assert mine.composition == fasop.composition
        if fasop.status == "ok":
            assert mine.status == "ok" and mine.train_time_h <= fasop.train_time_h * (1 + 1e-9)
            assert mine.train_cost_usd <= fasop.train_cost_usd * (1 + 1e-9)
    for i in theirs.frontier:
        cost = theirs.results[i].train_cost_usd
        best = min(r.train_time_h for r in ours.results if r.status == "ok" and r.train_cost_usd <= cost)
        assert best <= theirs.results[i].train_time_h * (1 + 1e-9)


def test_cli_parallel_sweep_forks_its_workers_with_no_other_thread_running(in_tmp, monkeypatch):
    """A worker forked while another thread of this process imports a module inherits that module's import
    lock held, by a thread that does not exist in the worker: the worker waits on it forever and the sweep
    hangs. --workers 2 loads the plotting libraries in the background only once the workers run, and a pool
    made while such an import runs waits for it to end."""
    import importlib
    import threading
    import time

    from fasop.core import workers as W

    seen, fork_pool, import_module = [], W.process_pool, importlib.import_module

    def watched(*args, **kwargs):
        seen.append(sorted(t.name for t in threading.enumerate() if t is not threading.main_thread()))
        return fork_pool(*args, **kwargs)

    def slow_import(name, *args):   # as on a cold start, where pandas and matplotlib take ~0.4 s
        if name in ("pandas", "json"):
            time.sleep(0.5)
        return import_module(name, *args)

    for module in ("fasop.pareto.executors", "fasop.pareto.sweep"):
        monkeypatch.setattr(f"{module}.process_pool", watched)
    monkeypatch.setattr(importlib, "import_module", slow_import)
    assert main(_pareto_argv(in_tmp / "bert", "a100=1,a10=2", "--workers", "2")) == 0
    assert seen and all(threads == [] for threads in seen), seen
    W.import_in_background("json")
    with W.process_pool(1, int, ()) as pool:
        assert not [t for t in threading.enumerate() if t.name == "fasop-import" and t.is_alive()]
        assert pool.submit(abs, -3).result() == 3
