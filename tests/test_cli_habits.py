"""The command-line habits users expect: --version, `fasop list`, --tokens on search, progress
without a terminal, one-line argparse errors, a knee only where there is a trade-off, and charts
whose axes stay finite with extreme deadlines and budgets."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest

from conftest import REPO
from fasop import __version__
from fasop.cli import args as cli_args
from fasop.cli.command import main
from fasop.core import limits
from fasop.pareto.frontier import knee_position
from fasop.specs import files as spec_files
from fasop.specs import load as specs
from fasop.specs.files import shipped_folder
from test_bad_input import MODEL


SEARCH = ["search", "--model", "model.yaml", "--cluster", "cluster.yaml", "--nodes", "a10=2", "--out", "s.csv",
          "--no-progress"]
PARETO = ["pareto", "--model", "model.yaml", "--cluster", "cluster.yaml", "--max-nodes", "a100=2,a10=2",
          "--workers", "1", "--out-prefix", "p"]


def test_version(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out == f"fasop {__version__}\n"


@pytest.mark.parametrize("what,folder_name", [("models", "model_specs"), ("clusters", "cluster_specs")])
def test_list_names_every_shipped_spec_in_one_line_each(capsys, what, folder_name):
    assert main(["list", what]) == 0
    lines = capsys.readouterr().out.splitlines()
    names = sorted(p.stem for p in shipped_folder(folder_name).glob("*.yaml"))
    assert [line.split()[0] for line in lines] == names
    assert all("does not load" not in line for line in lines)


def test_list_without_an_argument_lists_both_and_says_which_clusters_need_profiles(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    models, clusters = out.split("\n\nclusters:\n")
    assert models.startswith("models:\nbert ") and clusters.startswith("aws ")
    line = next(x for x in clusters.splitlines() if x.startswith("fasop-paper "))
    assert line.endswith("[fasop-2024: profiled models only]")
    assert "profiled models only" not in next(x for x in clusters.splitlines() if x.startswith("aws "))


def test_list_without_shipped_specs_says_so(capsys, monkeypatch, tmp_path):
    """Installed without the spec folders: a sentence, not an empty list."""
    monkeypatch.setattr(spec_files, "shipped_folder", lambda folder: tmp_path / folder)
    assert main(["list", "models"]) == 0
    assert capsys.readouterr().out.startswith("no shipped models found")
    monkeypatch.chdir(tmp_path)
    assert main(["search", "--model", "gpt2xl", "--cluster", "x", "--nodes", "a=1"]) == 2
    assert "no shipped specs found: give the path of a .yaml file" in capsys.readouterr().err


def test_tokens_on_search_sets_the_iterations(tiny_specs, capsys):
    """iterations = ceil(tokens / (global batch x sequence length)) = ceil(1000 / (4 x 16)) = 16."""
    assert main(SEARCH + ["--tokens", "1000"]) == 0
    with open(tiny_specs / "s.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert {row["iterations"] for row in rows} == {"16"}
    assert [int(row["rank"]) for row in rows] == list(range(1, len(rows) + 1))


def test_tokens_and_iterations_exclude_each_other_in_one_line(tiny_specs, capsys):
    with pytest.raises(SystemExit) as exc:
        main(SEARCH + ["--tokens", "1000", "--iterations", "5"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not allowed with argument" in err


@pytest.mark.parametrize("flag,value,ceiling", [("--iterations", "1000000000000001", limits.ITERATIONS),
                                                ("--partition-budget", "100000000000000000000", limits.PARTITION_BUDGET),
                                                ("--top", "1" + "0" * 5000, limits.TOP)])
def test_flags_past_a_ceiling_are_one_line(tiny_specs, capsys, flag, value, ceiling):
    with pytest.raises(SystemExit) as exc:
        main(SEARCH + [flag, value])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"at most {ceiling:,}, fasop's ceiling" in err and len(err) < 300


def test_progress_lines_without_a_terminal(tiny_specs, capsys, monkeypatch):
    """stderr is not a terminal here (captured): lines, every PROGRESS_S seconds (0 here)."""
    monkeypatch.setattr(cli_args, "PROGRESS_S", 0.0)
    assert main(PARETO) == 0
    err = capsys.readouterr().err.splitlines()
    assert err and all(line.startswith("fasop: compositions: ") and " of 8 compositions (" in line for line in err)
    assert main(PARETO + ["--no-progress"]) == 0
    assert capsys.readouterr().err == ""


def test_a_long_runs_hint_is_printed_once(capsys, monkeypatch):
    """A ProgressBar's hint (search's: what --placements all is proving, and Ctrl-C) comes once the work has
    run HINT_S seconds, once however many updates follow, never for finished work or without progress."""
    monkeypatch.setattr(cli_args, "PROGRESS_S", 0.0)
    monkeypatch.setattr(cli_args, "HINT_S", 0.0)
    with cli_args.ProgressBar(False, "estimating", hint="note: still estimating: a hint") as progress:
        for done in (1, 2, 3):
            progress(done, 10)
        progress(10, 10)
    err = capsys.readouterr().err.splitlines()
    assert err.count("note: still estimating: a hint") == 1 and len(err) == 4
    with cli_args.ProgressBar(True, "estimating", hint="note: a hint") as progress:
        assert progress is None
    monkeypatch.setattr(cli_args, "HINT_S", 3600.0)
    with cli_args.ProgressBar(False, "estimating", hint="note: a hint") as progress:
        progress(1, 10)
    assert "hint" not in capsys.readouterr().err


def test_no_progress_lines_for_a_short_run(tiny_specs, capsys):
    assert main(PARETO) == 0  # well under PROGRESS_S
    assert capsys.readouterr().err == ""


def test_knee_needs_a_trade_off():
    assert knee_position([1.0, 2.0, 3.0], [3.0, 1.2, 1.0]) == 1
    flat = [5.0 + 2e-12, 5.0 + 1e-12, 5.0]  # rounding, not a trade-off
    assert knee_position([1.0, 2.0, 3.0], flat) is None
    assert knee_position(flat, [3.0, 1.2, 1.0]) is None
    assert knee_position([1.0, 2.0], [2.0, 1.0]) is None


@pytest.mark.parametrize("extra", [["--deadline-hours", "1e15", "--budget-usd", "1e15"],
                                   ["--deadline-hours", "1e-300", "--budget-usd", "1e-300"]])
def test_chart_axes_stay_finite_with_extreme_deadline_and_budget(tiny_specs, capsys, monkeypatch, extra):
    import matplotlib.pyplot as plt

    limits_seen = []
    close = plt.close

    def record(fig=None):
        for ax in fig.axes:
            limits_seen.append((*ax.get_xlim(), *ax.get_ylim()))
        close(fig)

    monkeypatch.setattr(plt, "close", record)
    assert main(PARETO + ["--no-progress"] + extra) == 0
    (x0, x1, y0, y1), = limits_seen
    assert all(math.isfinite(v) for v in (x0, x1, y0, y1)) and x1 < 1e6 and y1 < 1e6
    if extra[1] == "1e15":
        assert "off the chart" in (tiny_specs / "p_pareto.svg").read_text()


def test_an_error_message_is_one_printable_line(tiny_specs, capsys):
    """A key with a newline and an escape sequence in it is shown escaped, on one line."""
    (tiny_specs / "model.yaml").write_text(MODEL + '"evil\\n\\x1b[31mkey": 1\n')
    assert main(SEARCH) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "\x1b" not in err


def test_shipped_specs_are_within_the_ceilings():
    """The ceilings sit far above real inputs: every shipped spec loads (test_bad_input loads
    them all) and none is within a factor 2 of a ceiling (the layers: 2 x the transformer layers,
    as the largest published model, Narayanan et al. 2021's 1T GPT with 128, shipped as
    gpt-sc21-1008.0b, has its embedding and head entries on top)."""
    for path in sorted((shipped_folder("model_specs")).glob("*.yaml")):
        m = specs.load_model(str(path))
        assert 2 * m.global_batch_size <= limits.GLOBAL_BATCH_SIZE and 2 * m.num_transformer_layers <= limits.LAYERS
    for path in sorted((shipped_folder("cluster_specs")).glob("*.yaml")):
        assert Path(path).stat().st_size * 40 < limits.SPEC_BYTES


def test_the_console_script_is_the_cli():
    """The installed `fasop` command's entry point (pyproject.toml) loads `fasop.cli.main`."""
    from importlib.metadata import entry_points

    import fasop.cli

    (script,) = [e for e in entry_points(group="console_scripts") if e.name == "fasop"]
    assert script.value == "fasop.cli:main" and script.load() is fasop.cli.main
