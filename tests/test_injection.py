"""What a user carries out of fasop into a spreadsheet or a shell cannot run anything.

What is protected here:
- results and Pareto CSVs: a text cell that starts like a formula (= + - @ TAB CR; OWASP's
  CSV-injection rule) gets a leading single quote; numbers (negative ones too) stay numbers;
  `explain --from` reads the quoted cells back as the names they were;
- `export` (hostfile, megatron, torchtitan): a CSV file name holding a newline and `$(...)` stays
  inside a comment line; no line a shell or Python would run carries it.
"""

from __future__ import annotations

import csv
import io
import os

import pytest

from fasop.cli.command import main
from fasop.core.cells import FORMULA_START, one_line, spreadsheet_safe, spreadsheet_text
from test_bad_input import CLUSTER, MODEL, PROFILE

EVIL = "=cmd|' /C calc'!A1"


def test_spreadsheet_safe_by_hand():
    assert spreadsheet_safe(EVIL) == "'" + EVIL
    for text in ("+1+1", "-x", "@SUM(A1)", "\tx", "\rx"):
        assert spreadsheet_safe(text) == "'" + text and spreadsheet_text(spreadsheet_safe(text)) == text
    for text in ("-1.5", "-inf", "+3", "a10-a10", "1-3", "", "'quoted", "x=1"):
        assert spreadsheet_safe(text) == text and spreadsheet_text(text) == text
    assert one_line("a\n$(touch x)\r") == "a\\n$(touch x)\\r"


@pytest.fixture
def evil_specs(tmp_path, monkeypatch):
    """The tiny fixture with its A10 GPU renamed EVIL and the model named '+tiny'."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cluster.yaml").write_text(CLUSTER.replace("gpu: A10\n", 'gpu: "=cmd|\' /C calc\'!A1"\n'))
    (tmp_path / "model.yaml").write_text(MODEL.replace("    A10:\n", '    "=cmd|\' /C calc\'!A1":\n')
                                         .replace("name: tiny", "name: '-tiny'"))
    (tmp_path / "tiny.profile.csv").write_text(PROFILE.replace("A10,", '"=cmd|\' /C calc\'!A1",'))
    return tmp_path


def _cells(path) -> list[list[str]]:
    with open(path, newline="") as fh:
        return list(csv.reader(fh))


def _assert_no_formula(table: list[list[str]]) -> None:
    for row in table:
        for cell in row:
            if cell.startswith(FORMULA_START):
                float(cell)  # only a number may start like a formula


def test_results_csv_cells_are_escaped_and_read_back(evil_specs, capsys):
    argv = ["search", "--model", "model.yaml", "--cluster", "cluster.yaml", "--nodes", "a10=2", "--out", "out.csv",
            "--no-progress"]
    assert main(argv) == 0
    table = _cells("out.csv")
    _assert_no_formula(table)
    column = table[0].index("stage_gpu_types")
    assert table[1][column] == "'" + EVIL
    capsys.readouterr()
    assert main(["explain", "--from", "out.csv", "--model", "model.yaml", "--cluster", "cluster.yaml"]) == 0
    assert EVIL in capsys.readouterr().out  # the name as it was, the quote taken off


def test_pareto_csv_cells_are_escaped(evil_specs):
    argv = ["pareto", "--model", "model.yaml", "--cluster", "cluster.yaml", "--max-nodes", "a100=1,a10=2",
            "--out-prefix", "p", "--no-progress", "--workers", "1"]
    assert main(argv) == 0
    table = _cells("p_pareto.csv")
    _assert_no_formula(table)
    assert any("'" + EVIL in cell for row in table for cell in row)


@pytest.mark.parametrize("target", ["hostfile", "megatron", "torchtitan"])
def test_a_hostile_file_name_stays_in_a_comment(tmp_path, monkeypatch, capsys, target):
    monkeypatch.chdir(tmp_path)
    for name, text in (("model.yaml", MODEL), ("cluster.yaml", CLUSTER), ("tiny.profile.csv", PROFILE)):
        (tmp_path / name).write_text(text)
    assert main(["search", "--model", "model.yaml", "--cluster", "cluster.yaml", "--nodes", "a10=2", "--out",
                 "out.csv", "--no-progress"]) == 0
    hostile = "r\n$(touch pwned)\n`id`\r.csv"
    os.rename("out.csv", hostile)
    capsys.readouterr()
    assert main(["export", "--from", hostile, "--model", "model.yaml", "--cluster", "cluster.yaml",
                 "--target", target]) == 0
    out = capsys.readouterr().out
    assert "$(touch pwned)" in out  # shown, in a comment
    for line in io.StringIO(out).read().splitlines():
        if not line.lstrip().startswith("#"):
            assert "pwned" not in line and "`id`" not in line, line
    assert not (tmp_path / "pwned").exists()
