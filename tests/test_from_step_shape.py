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
