"""`rank` means one thing: it counts the plans that fit in GPU memory, fastest first, with or
without --top; plans that do not fit follow, fastest first, with no rank (is_oom marks them).
FASOP-2024 CSVs keep the original program's order and ranks (its six experiments stay byte for
byte). explain / plot / export default to the fastest plan that fits. The printed top K shows a
plan whose node orders differ only among identical-speed nodes once, with a count (issue 30, item 2).
"""

from __future__ import annotations

import csv

from fasop.cli.command import main
from test_bad_input import CLUSTER, MODEL, PROFILE


def _rows(path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_rank_counts_the_plans_that_fit(tmp_path, capsys):
    """Llama-3-8B on one p4d (8 A100-40GB), every plan: some do not fit, some of those faster than
    plans that do."""
    out = tmp_path / "llama.csv"
    argv = ["search", "--model", "llama-3-8b", "--cluster", "aws", "--nodes", "p4d=1", "--out", str(out),
            "--no-progress", "--every-plan"]
    assert main(argv) == 0
    rows = _rows(out)
    fits = [r for r in rows if r["is_oom"] == "False"]
    assert 0 < len(rows) - len(fits) < len(rows)
    assert rows[:len(fits)] == fits  # every plan that fits before any that does not
    assert [r["rank"] for r in fits] == [str(k) for k in range(1, len(fits) + 1)]
    assert all(r["rank"] == "" for r in rows[len(fits):])
    times = [float(r["step_time_s"]) for r in fits]
    assert times == sorted(times)
    oom_times = [float(r["step_time_s"]) for r in rows[len(fits):]]
    assert oom_times == sorted(oom_times) and min(oom_times) < max(times)  # an OOM plan faster than a fitting one
    capsys.readouterr()
    assert main(["explain", "--from", str(out)]) == 0
    first = capsys.readouterr().out.splitlines()[1]
    r = fits[0]
    assert f"tp{r['tp']}-dp{r['dp']}-pp{r['pp']}-mbs{r['mbs']}@{r['node_placement']}" in first
    # with --top the kept plans fit: the same ranks
    assert main(argv[:-1] + ["--top", "3", "--out", str(tmp_path / "top.csv")]) == 0
    top = _rows(tmp_path / "top.csv")
    assert [(r["rank"], r["step_time_s"]) for r in top] == [(r["rank"], r["step_time_s"]) for r in fits[:3]]


def test_fasop_csvs_keep_fasops_order_and_explain_the_fastest_that_fits(tmp_path, capsys):
    """FASOP-2024 CSVs rank every plan by step time, as the original program (its six experiments stay
    byte for byte); explain / export still default to the fastest plan that fits."""
    out = tmp_path / "bert_fasop-paper_a10x4.csv"
    assert main(["search", "--model", "bert", "--cluster", "fasop-paper", "--nodes", "a10=4", "--out", str(out),
                 "--no-progress"]) == 0
    rows = _rows(out)
    assert [r["rank"] for r in rows] == [str(k) for k in range(1, len(rows) + 1)]
    lines = out.read_text().splitlines()
    header = lines[0].split(",")
    cells = lines[1].split(",")
    cells[header.index("is_oom")] = "True"  # as if the fastest did not fit
    out.write_text("\n".join([lines[0], ",".join(cells)] + lines[2:]) + "\n")
    capsys.readouterr()
    assert main(["explain", "--from", str(out)]) == 0
    assert capsys.readouterr().out.splitlines()[0].endswith("rank 2")


def test_when_no_plan_fits_explain_says_so(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name, text in (("model.yaml", MODEL), ("cluster.yaml", CLUSTER.replace("memory_limit_gib: 20", "memory_limit_gib: 0.0001")),
                       ("tiny.profile.csv", PROFILE)):
        (tmp_path / name).write_text(text)
    assert main(["search", "--model", "model.yaml", "--cluster", "cluster.yaml", "--nodes", "a10=2", "--out", "r.csv",
                 "--no-progress"]) == 0
    assert all(r["is_oom"] == "True" for r in _rows("r.csv"))
    capsys.readouterr()
    assert main(["explain", "--from", "r.csv", "--model", "model.yaml", "--cluster", "cluster.yaml"]) == 0
    assert "r.csv row 1 (no plan fits in GPU memory: the fastest, which does not fit)" in capsys.readouterr().out


def test_identical_speed_node_orders_are_shown_once(tmp_path, capsys, monkeypatch):
    """Two node types alike in every figure but their names: a10-b10 and b10-a10 are one plan."""
    monkeypatch.chdir(tmp_path)
    twin = CLUSTER.split("  a10:\n")[1]
    (tmp_path / "cluster.yaml").write_text(CLUSTER + "  b10:\n" + twin)
    (tmp_path / "model.yaml").write_text(MODEL)
    (tmp_path / "tiny.profile.csv").write_text(PROFILE)
    assert main(["search", "--model", "model.yaml", "--cluster", "cluster.yaml", "--nodes", "a10=1,b10=1",
                 "--heterogeneous", "--out", "r.csv", "--no-progress", "--show", "3"]) == 0
    out = capsys.readouterr().out
    table = [line for line in out.splitlines() if line.strip()[:1].isdigit()]
    assert len(table) == 3
    keys = [line.split()[1:5] + line.split()[-1:] for line in table]
    assert len(set(map(tuple, keys))) == 3  # three different plans
    assert "(+1 order)" in table[0]
    rows = _rows("r.csv")
    assert {r["node_placement"] for r in rows[:2]} == {"a10-b10", "b10-a10"}  # the CSV keeps both
