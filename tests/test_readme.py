"""README.md (the quick reference) and docs/ (one page per command or concept) are the user's
reference: what they document is what the code does.

Checked against the code itself: every subcommand has a section in the README, every flag is named
(README or docs/), the CSV column table (docs/specs.md) is the header of a real run, the Pareto
columns are in docs/pareto.md, every exit status is listed (docs/limits.md), the test command is
the one CI runs (README's Quick start), every relative link leads to a file, and docs/layout.md
names every module.
"""

from __future__ import annotations

import ast
import csv
import re

import pytest

from conftest import REPO
from fasop.cli.command import main

README = (REPO / "README.md").read_text(encoding="utf-8")
DOCS = {p.name: p.read_text(encoding="utf-8") for p in sorted((REPO / "docs").glob("*.md"))}
EVERYWHERE = "\n".join([README, *DOCS.values()])


def _section(title_start: str, text: str = README) -> str:
    """The section of `text` whose heading starts with `title_start`, up to the next of its level."""
    match = re.search(rf"^(#+) {re.escape(title_start)}.*$", text, re.M)
    assert match, title_start
    level = len(match.group(1))
    rest = text[match.end():]
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
                    if not re.search(rf"(?<![-\w]){re.escape(flag)}(?![-\w])", EVERYWHERE)]
    assert missing == []


def _readme_search_columns() -> list[str]:
    table = _section("CSV columns", DOCS["specs.md"])
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
    section = DOCS["pareto.md"]
    assert own and [c for c in own if f"`{c}`" not in section] == []


def _statuses(text: str) -> set[int]:
    return {int(n) for n in re.findall(r"\b(\d+)\b", text)}


def test_every_exit_status_is_listed():
    """docs/limits.md's list, the CLI's docstring, and what the code returns agree."""
    paragraph = re.search(r"\*\*Exit statuses\.\*\*(.*?)\n\n", DOCS["limits.md"], re.S).group(1)
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
    assert phrase not in EVERYWHERE


def _links(text: str) -> list[str]:
    """Markdown link and image targets of `text`, outside code blocks."""
    prose = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    return re.findall(r"\]\(([^)\s]+)\)", prose)


def test_every_relative_link_leads_to_a_file():
    """README.md's and docs/*.md's relative links (and images) name files that exist; an anchor
    names a heading of its page (GitHub's slugs: lower case, punctuation dropped, spaces to -)."""
    broken = []
    for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for target in _links(path.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            dest = (path.parent / file).resolve() if file else path
            if not dest.exists():
                broken.append(f"{path.name}: {target}")
            elif anchor and dest.suffix == ".md":
                headings = re.findall(r"^#+ (.*)$", dest.read_text(encoding="utf-8"), re.M)
                slugs = {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}
                if anchor not in slugs:
                    broken.append(f"{path.name}: {target}")
    assert broken == []


def test_the_readme_indexes_every_docs_page():
    """The README's "Docs" table links every page under docs/ (a new page gets a row)."""
    listed = set(re.findall(r"\]\(docs/([\w.-]+\.md)\)", _section("Docs")))
    assert sorted(set(DOCS) - listed) == []
