"""Fuzz harness: 1,000+ seeded hostile inputs (tests/fuzz_cases.py), each run through
`fasop.cli.command.main` in its own temporary folder, in two worker processes with an address-space
limit of 1 GiB and 20 CPU seconds (120 wall seconds) a case (tests/fuzz_worker.py). Every case must end with exit status 2
and one line on stderr (notes aside), or where the input is valid with exit status 0 and a
well-formed result; never a traceback, a hang, a run over the memory limit, a partial or
temporary file, or a file outside the case's folder.
"""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fuzz_cases import all_cases

WORKERS = 2
ERROR_LINE = re.compile(r"fasop( [a-z]+)?: error: ")
"""`fasop: error: ...`, or argparse's `fasop <command>: error: ...`."""


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> tuple[list[dict], list[int], Path]:
    base = tmp_path_factory.mktemp("fuzz")
    worker = Path(__file__).with_name("fuzz_worker.py")
    import fasop  # the workers run the fasop these tests import (this clone's, not another installed one)

    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(fasop.__file__).resolve().parent.parent)]
                                                      + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    procs = [subprocess.Popen([sys.executable, str(worker), str(k), str(WORKERS), str(base / str(k))], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for k in range(WORKERS)]
    rows, peaks = [], []
    for proc in procs:
        out, err = proc.communicate(timeout=900)
        assert proc.returncode == 0, err[-3000:]
        lines = [json.loads(line) for line in out.splitlines()]
        peaks.append(lines[-1]["maxrss_kib"])
        rows += lines[:-1]
    return sorted(rows, key=lambda r: r["id"]), peaks, base


def test_there_are_enough_cases_in_every_family():
    cases = all_cases()
    assert len(cases) >= 1000
    families = {c["family"].split(":")[0] for c in cases}
    assert families >= {"value", "delete", "bytes", "truncate", "structure", "duplicate", "filetype", "profile",
                        "flag", "output", "combination", "plan"}
    assert [c["argv"] for c in cases] == [c["argv"] for c in all_cases()]  # seeded: the same every time


def test_every_case_ran(results):
    rows, _, _ = results
    assert [r["id"] for r in rows] == list(range(len(all_cases())))


def _problems(row: dict) -> list[str]:
    status, err = row["status"], row["stderr"]
    if status in ("hang", "traceback"):
        return [f"{status}: {row['error'][-600:]}"]
    problems = []
    if status not in (0, 2):
        problems.append(f"exit status {status}")
    if row["expect"] == "fail" and status != 2:
        problems.append("accepted an invalid input")
    if "Traceback" in err:
        problems.append("traceback on stderr")
    lines = [line for line in err.splitlines() if not line.startswith("note: ")]
    if status == 2 and (len(lines) != 1 or not ERROR_LINE.match(lines[0])):
        problems.append(f"not one error line: {err[:300]!r}")
    if any(len(line) > 2100 for line in err.splitlines()):
        problems.append("an error line over 2,100 characters")
    if any(Path(p).name.endswith(".tmp") for p in row["new"]):
        problems.append(f"temporary file left: {row['new']}")
    if row["outside"]:
        problems.append(f"wrote outside its folder: {row['outside']}")
    if row["link_target"] not in (None, "keep\n"):
        problems.append("wrote through a symbolic link")
    outputs = [p for p in row["new"] if p.endswith((".csv", ".png", ".svg", ".txt"))]
    if status == 2 and outputs:
        problems.append(f"failed but wrote {outputs}")
    if status == 0:
        if not outputs and not (row["argv"][0] in ("explain", "export") and row["stdout_chars"]):
            problems.append("succeeded without writing a result")
        if row["inside"] and not all(p.startswith(row["inside"] + "/") for p in outputs):
            problems.append(f"wrote outside {row['inside']}/: {outputs}")
    return problems


def test_no_case_ends_badly(results):
    """0 tracebacks, 0 hangs (20 CPU s or 120 wall s), 0 runs over the memory limit (a MemoryError is a traceback),
    one line per error, nothing written where it should not be."""
    rows, _, _ = results
    bad = {r["id"]: (r["family"], r["argv"][-4:], problems) for r in rows if (problems := _problems(r))}
    assert not bad, f"{len(bad)} cases: " + "\n".join(f"{k}: {v}" for k, v in list(bad.items())[:15])


def test_both_outcomes_happen(results):
    """The harness is not vacuous: many cases are refused, and many valid ones succeed."""
    rows, _, _ = results
    statuses = [r["status"] for r in rows]
    assert statuses.count(2) >= 700 and statuses.count(0) >= 100


def test_successful_results_are_well_formed(results):
    """Every CSV written by a successful case parses, with as many cells in each row as columns."""
    rows, _, base = results
    for r in rows:
        if r["status"] != 0 or r["argv"][0] not in ("search", "pareto"):  # export --out x.csv writes text
            continue
        for p in r["new"]:
            if p.endswith(".csv"):
                path = base / str(r["id"] % WORKERS) / f"c{r['id']}" / "work" / p
                with open(path, newline="") as fh:
                    table = list(csv.reader(fh))
                assert len(table) >= 2 and len({len(row) for row in table}) == 1, (r["id"], p)


def test_peak_memory_per_worker_below_1_gib(results):
    _, peaks, _ = results
    assert all(peak < 1 << 20 for peak in peaks), peaks  # KiB
