"""explain / export / plot of a results row at another --global-batch-size or --seq-len: the row's plan at that
shape (its micro-batches for the batch; refused, one line, where the plan cannot run it), compared with the
CSV's step time only at the shape the CSV scored."""

import csv

import pytest

from fasop.cli import main


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    folder = tmp_path_factory.mktemp("shape")
    common = ["--cluster", "aws", "--nodes", "p5=2", "--top", "1", "--no-progress", "--show", "0"]
    assert main(["search", "--model", "llama-3-8b", "--seq-len", "32768", "--global-batch-size", "16", "--cp", "2",
                 "--out", str(folder / "cp.csv")] + common) == 0
    assert main(["search", "--model", "llama-3-70b", "--virtual-stages", "2", "--global-batch-size", "16",
                 "--out", str(folder / "vp.csv")] + common) == 0
    return folder


def _row(path):
    with open(path, newline="") as fh:
        return next(csv.DictReader(fh))


def test_another_batch_is_the_rows_plan_with_more_micro_batches(searched, capsys):
    row = _row(searched / "cp.csv")
    dp, mbs, m = int(row["dp"]), int(row["mbs"]), int(row["num_microbatches"])
    assert dp * mbs * m == 16
    assert main(["explain", "--from", str(searched / "cp.csv"), "--global-batch-size", "32"]) == 0
    out = capsys.readouterr().out
    assert f"{2 * m} micro-batches a step per replica, global batch 32" in out
    assert "the CSV says step_time_s" not in out   # another step than the CSV's: no comparison
    step = float(out.split("\nstep ")[1].split(" ms")[0])
    assert step > 1.9 * 1e3 * float(row["step_time_s"])   # twice the micro-batches, fixed costs once
    assert main(["export", "--from", str(searched / "cp.csv"), "--target", "megatron", "--global-batch-size", "32"]) == 0
    assert "    --global-batch-size 32\n" in capsys.readouterr().out
    # at the CSV's own shape: the row's step again, no note
    assert main(["explain", "--from", str(searched / "cp.csv"), "--global-batch-size", "16"]) == 0
    assert "the CSV says" not in capsys.readouterr().out


@pytest.mark.parametrize("csv_name, flags, message", [
    ("cp.csv", ["--global-batch-size", "7"], "--global-batch-size: 7 is not a multiple of .*dp x mbs"),
    ("vp.csv", ["--global-batch-size", "17"], "--global-batch-size: 17 makes 17 micro-batches, not a multiple of pp 2"),
    ("cp.csv", ["--seq-len", "8202"], r"cp: 2 does not split the sequence of 8202 tokens into 2 x 2 equal chunks"),
])
@pytest.mark.parametrize("command", [["explain"], ["export", "--target", "megatron"], ["plot"]])
def test_a_shape_the_rows_plan_cannot_run_is_one_line(searched, capsys, tmp_path, monkeypatch, csv_name, flags,
                                                      message, command):
    monkeypatch.chdir(tmp_path)
    assert main(command + ["--from", str(searched / csv_name)] + flags) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("fasop: error: ")
    assert __import__("re").search(message, err), err
    assert not any(tmp_path.iterdir())   # nothing written


def test_an_interleaved_rows_explanation_says_its_recipe_and_draws_no_empty_events(searched, capsys):
    # the plan line names the recipe (2 virtual stages, the precision); without a timeline (interleaved 1F1B is not
    # drawn) the per-stage compute / p2p / idle split is '-', not 0.00
    assert main(["explain", "--from", str(searched / "vp.csv")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "2 virtual stages" in lines[1] and lines[1].endswith(", bf16")
    stages = [line.split() for line in lines[4:6]]
    assert all(cells[-4:-1] == ["-", "-", "-"] for cells in stages), lines[3:7]
    assert "without a timeline" in lines[6]


def test_plot_at_another_batch_draws_every_plan_at_it_under_its_own_names(searched, capsys, tmp_path, monkeypatch):
    # the breakdown's bars are the top plans each at the batch given (the chosen one's total = explain's step there),
    # and the files say the batch, so the CSV's own figures are not overwritten
    from fasop.report import plots

    drawn = []
    real = plots.breakdown_figure
    monkeypatch.setattr(plots, "breakdown_figure", lambda items, **kw: drawn.append(items) or real(items, **kw))
    source = str(searched / "cp.csv")
    assert main(["explain", "--from", source, "--global-batch-size", "32", "--json"]) == 0
    step = __import__("json").loads(capsys.readouterr().out)["step_time_s"]
    assert main(["plot", "--from", source, "--global-batch-size", "32", "--figures", "breakdown",
                 "--out-dir", str(tmp_path)]) == 0
    assert sum(drawn[0][0][1].values()) == pytest.approx(step, rel=1e-9)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cp_gbs32_breakdown.png", "cp_gbs32_breakdown.svg"]


def test_a_pareto_composition_without_a_plan_says_so_at_another_batch(tmp_path, capsys):
    out = tmp_path / "llama-3-70b_aws_np"
    assert main(["pareto", "--model", "llama-3-70b", "--cluster", "aws", "--max-nodes", "p5=1,g5=1", "--out-prefix",
                 str(out), "--no-progress", "--workers", "1"]) == 0
    rows = list(csv.DictReader(open(f"{out}_pareto.csv", newline="")))
    bad = next(k for k, r in enumerate(rows, start=1) if r["status"] != "ok")
    capsys.readouterr()
    assert main(["explain", "--from", f"{out}_pareto.csv", "--row", str(bad), "--global-batch-size", "512"]) == 2
    assert "status: " in capsys.readouterr().err


def test_an_interleaved_rows_json_has_no_event_split_either(searched, capsys):
    assert main(["explain", "--from", str(searched / "vp.csv"), "--json"]) == 0
    x = __import__("json").loads(capsys.readouterr().out)
    assert x["bubble_fraction"] is None
    assert all(s[k] is None for s in x["stages"] for k in ("computing_s", "sending_s", "idle_s"))
    assert all(s["end_s"] > 0 for s in x["stages"])
