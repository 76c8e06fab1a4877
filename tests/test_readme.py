"""README.md is the user's reference: what it documents is what the code does.

Checked against the code itself: every subcommand has a section, every flag is named, the CSV
column table is the header of a real run, every exit status is listed, the test command is the
one CI runs, and the layout table names every module in an order the imports respect.
"""

from __future__ import annotations

import ast
import csv
import re

import pytest

from conftest import REPO
from fasop.cli.command import main

README = (REPO / "README.md").read_text(encoding="utf-8")


def _section(title_start: str) -> str:
    """The README's section whose heading starts with `title_start`, up to the next of its level."""
    match = re.search(rf"^(#+) {re.escape(title_start)}.*$", README, re.M)
    assert match, title_start
    level = len(match.group(1))
    rest = README[match.end():]
    end = re.search(rf"^#{{1,{level}}} ", rest, re.M)
    return rest[:end.start()] if end else rest


@pytest.fixture(autouse=True)
def _wide(monkeypatch):
    monkeypatch.setenv("COLUMNS", "10000")  # argparse wraps help lines at the terminal's width, mid-flag


def _help(capsys, *argv: str) -> str:
    """What `fasop ARGV --help` prints (one line per flag: no wrapping)."""
    with pytest.raises(SystemExit) as exc:
        main([*argv, "--help"])
    assert exc.value.code == 0
    return capsys.readouterr().out


def _subcommands(capsys) -> list[str]:
    choices = re.search(r"\{([a-z,]+)\}", _help(capsys)).group(1).split(",")
    assert "search" in choices and "pareto" in choices
    return choices


def test_every_subcommand_has_a_section(capsys):
    headings = re.findall(r"^#+ .*$", README, re.M)
    missing = [name for name in _subcommands(capsys) if not any(f"`fasop {name}`" in h for h in headings)]
    assert missing == []


def test_every_flag_is_named(capsys):
    missing = []
    for name in _subcommands(capsys):
        flags = set(re.findall(r"(?<![-\w])(--[a-z][a-z0-9-]*)", _help(capsys, name))) - {"--help"}
        assert flags, name
        missing += [f"{name} {flag}" for flag in sorted(flags)
                    if not re.search(rf"(?<![-\w]){re.escape(flag)}(?![-\w])", README)]
    assert missing == []


def _readme_search_columns() -> list[str]:
    table = _section("CSV columns")
    columns = []
    for cell in re.findall(r"^\| (`[^|]*`) \|", table, re.M):
        columns += re.findall(r"`([a-z_<>]+)`", cell)
    return columns


def _header(path) -> list[str]:
    with open(path, newline="") as fh:
        return next(csv.reader(fh))


SEARCH = ["search", "--model", "model.yaml", "--cluster", "cluster.yaml", "--nodes", "a100=1,a10=1",
          "--heterogeneous", "--no-progress", "--show", "0"]


def test_the_csv_column_table_is_a_real_runs_header(tiny_specs):
    documented = _readme_search_columns()
    assert documented[-1] == "num_nodes_<type>"
    assert main(SEARCH + ["--out", "optimal.csv"]) == 0
    assert _header(tiny_specs / "optimal.csv") == documented[:-1] + ["num_nodes_a100", "num_nodes_a10"]
    assert main(SEARCH + ["--placements", "cyclic", "--partitioner", "fasop-minmax", "--out", "fasop.csv"]) == 0
    # FASOP's choices keep FASOP's columns: no partition_gap_pct (the table says so)
    assert _header(tiny_specs / "fasop.csv") == [c for c in documented[:-1] if c != "partition_gap_pct"] + [
        "num_nodes_a100", "num_nodes_a10"]


def test_pareto_columns_are_documented(tiny_specs):
    assert main(["pareto", "--model", "model.yaml", "--cluster", "cluster.yaml", "--max-nodes", "a100=1,a10=1",
                 "--workers", "1", "--out-prefix", "p", "--no-progress"]) == 0
    own = [c for c in _header(tiny_specs / "p_pareto.csv") if c not in _readme_search_columns()
           and not c.startswith("num_nodes_")]
    section = _section("`fasop pareto`")
    assert own and [c for c in own if f"`{c}`" not in section] == []


def _statuses(text: str) -> set[int]:
    return {int(n) for n in re.findall(r"\b(\d+)\b", text)}


def test_every_exit_status_is_listed():
    """The README's list, the CLI's docstring, and what the code returns agree."""
    paragraph = re.search(r"\*\*Exit statuses\.\*\*(.*?)\n\n", README, re.S).group(1)
    import fasop.cli.command

    docstring = re.search(r"Exit status:(.*?)\n\n", fasop.cli.command.__doc__ + "\n\n", re.S).group(1)
    in_code = {0, 2, 141}  # cli.main
    for path in sorted((REPO / "fasop" / "cli").glob("*.py")):
        in_code |= {node.value.value for node in ast.walk(ast.parse(path.read_text()))
                    if isinstance(node, ast.Return) and isinstance(node.value, ast.Constant)
                    and isinstance(node.value.value, int) and not isinstance(node.value.value, bool)}
    from fasop.core.workers import exit_status
    import signal

    in_code |= {exit_status(KeyboardInterrupt()), 128 + signal.SIGTERM}
    assert _statuses(paragraph) == _statuses(docstring) == in_code


def test_the_readme_test_command_is_the_one_ci_runs():
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    marker = next(i for i, line in enumerate(ci) if "README test command" in line)
    blocks = re.findall(r"```sh\n\s*(.*?)\n\s*```", _section("Quick start"), re.S)
    assert ci[marker + 1].strip() in [b.strip() for b in blocks]


def test_the_layout_page_names_every_module():
    """docs/layout.md names every module of the package (test_layers.py checks the direction of
    the imports; README's Layout section lists the layers)."""
    layout = (REPO / "docs" / "layout.md").read_text(encoding="utf-8")
    modules = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "fasop").rglob("*.py")
                     if p.name != "__init__.py" and "data" not in p.relative_to(REPO).parts)
    assert [m for m in modules if f"`{m}`" not in layout] == []


@pytest.mark.parametrize("phrase", ["read and validated, not used"])
def test_no_stale_statement(phrase):
    """Statements the code has outgrown (spot prices are used by `fasop pareto --spot`)."""
    assert phrase not in README
