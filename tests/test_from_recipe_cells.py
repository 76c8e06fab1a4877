"""A results CSV's recipe cell outside its choices (fasop/cli/plan_source.py recipe_of) names the CSV row and
column, not a CLI flag nobody gave (`--zero: 7 is not one of`)."""

import pytest

from fasop.cli.command import main

from conftest import with_cell


@pytest.mark.parametrize("column, value, allowed", [
    ("zero", "7", "expected one of 0, 1, 2, 3, got '7'"), ("precision", "fp7", "got 'fp7'"),
    ("recompute", "partial", "expected one of none, selective, full, got 'partial'"),
    ("main_grads", "fp8", "expected one of fp32, bf16, got 'fp8'"),
    ("sequence_parallel", "maybe", "'maybe' is not a sequence parallel value")])
def test_a_results_row_recipe_cell_outside_its_choices_names_the_row_and_column(tmp_path, capsys, monkeypatch,
                                                                                 column, value, allowed):
    monkeypatch.chdir(tmp_path)
    assert main(["search", "--model", "llama-3-8b", "--cluster", "aws", "--nodes", "p5=1", "--top", "1",
                 "--no-progress"]) == 0
    path = with_cell(tmp_path / "results" / "llama-3-8b_aws_p5x1.csv", column, value)
    capsys.readouterr()
    assert main(["explain", "--from", str(path), "--row", "1"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.startswith(f"fasop: error: {path} row 1: {column}: ") and allowed in err and "--" not in err


def test_a_spreadsheet_saved_rows_true_false_read_as_fasop_wrote_them(tmp_path, capsys, monkeypatch):
    # Excel / LibreOffice save booleans as TRUE / FALSE: the row is the same plan, explained and exported alike
    monkeypatch.chdir(tmp_path)
    assert main(["search", "--model", "llama-3-8b", "--cluster", "aws", "--nodes", "p5=2", "--top", "1", "--seq-len",
                 "32768", "--global-batch-size", "16", "--cp", "2", "--no-progress", "--out", "r.csv"]) == 0
    text = (tmp_path / "r.csv").read_text()
    assert ",True," in text
    (tmp_path / "x.csv").write_text(text.replace(",True,", ",TRUE,").replace(",False,", ",FALSE,"))
    outs = []
    for name in ("r.csv", "x.csv"):
        capsys.readouterr()
        assert main(["export", "--from", name, "--target", "megatron"]) == 0
        outs.append(capsys.readouterr().out.replace(name, "CSV"))
    assert outs[0] == outs[1] and "--sequence-parallel" in outs[0]
