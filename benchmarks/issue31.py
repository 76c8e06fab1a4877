"""Shared runner of issue 31's benchmarks (bench_issue31_*.py): one fasop command run in fresh
interpreters from this tree and from the baseline -- main before issue 31 (BASELINE, extracted
with `git archive`, or any checkout given with --baseline-tree) -- in the same invocation, runs
alternated so that both see the same load; the medians, their ratio, and whether both wrote the
same CSV bytes (or the same rows as `compare` reads them).

Times are whole-process wall seconds (time.perf_counter around subprocess.run) and CPU seconds
(getrusage of the child: steadier than wall on a shared machine). A run past --timeout is
reported as such (the baseline's full rows take many minutes: the scripts take smaller sizes
by default and say so).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BASELINE = "f5838bea50ead8630209d68c42a7fab1ce2d5111"
"""main before issue 31."""


def parser(doc: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--runs", type=int, default=3, help="runs per tree (median reported; default 3)")
    p.add_argument("--baseline", default=BASELINE, help="git revision of the baseline (default: main before issue 31)")
    p.add_argument("--baseline-tree", type=Path, help="a checkout to use as the baseline instead of --baseline")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds a run may take")
    return p


def run_once(root: Path, argv: list[str], timeout: float) -> tuple[float, float] | None:
    """(wall s, CPU s) of `python -m fasop ARGV` in `root`, or None past the timeout."""
    env = dict(os.environ, PYTHONPATH=str(root))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    try:
        subprocess.run([sys.executable, "-m", "fasop", *argv], cwd=root, env=env, check=True, timeout=timeout,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return None
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def compare_trees(args, commands: list[tuple[str, list[str], str]], same: Callable[[Path, Path], bool]) -> int:
    """For each (name, fasop argv with {out} for the output prefix/path, output file relative to
    the run folder): time it in both trees, alternated, --runs times; print the medians, the
    ratio and whether `same(baseline output, this tree's output)`. Exit status 1 when a run of
    this tree timed out or the outputs differ; a baseline past the timeout is reported as such
    (its ratio a lower bound) and not run again."""
    status = 0
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"this tree": REPO, "baseline": args.baseline_tree or _extract(args.baseline, Path(tmp) / "base")}
        for root in trees.values():  # bytecode as an installed package has it (pip compiles at install): no tree
            # pays for compiling its source in a timed run (this machine sets PYTHONDONTWRITEBYTECODE)
            subprocess.run([sys.executable, "-m", "compileall", "-q", str(root / "fasop")], check=True,
                           stdout=subprocess.DEVNULL)
        for name, argv, output in commands:
            walls: dict[str, list[float]] = {t: [] for t in trees}
            cpus: dict[str, list[float]] = {t: [] for t in trees}
            outputs: dict[str, Path] = {}
            for run in range(args.runs):
                for tree, root in trees.items():
                    if run and not walls[tree]:  # past the timeout once: not run again
                        continue
                    folder = Path(tmp) / f"{name}-{tree.replace(' ', '_')}-{run}".replace("/", "_")
                    folder.mkdir(parents=True)
                    got = run_once(root, [a.replace("{out}", str(folder / "out")) for a in argv], args.timeout)
                    if got is None:
                        print(f"{name}: {tree}: a run took more than {args.timeout:g} s")
                        if tree != "baseline":
                            return 1
                        continue
                    walls[tree].append(got[0])
                    cpus[tree].append(got[1])
                    outputs[tree] = folder / output
            print(f"{name}: fasop {' '.join(argv)}")
            for tree in trees:
                if not walls[tree]:
                    print(f"  {tree:9s}: did not finish in {args.timeout:g} s")
                    continue
                print(f"  {tree:9s}: median {statistics.median(walls[tree]):8.2f} s wall, "
                      f"{statistics.median(cpus[tree]):8.2f} s CPU ({', '.join(f'{w:.2f}' for w in walls[tree])})")
            if not walls["baseline"]:  # a ratio of at least the timeout over this tree's time; nothing to compare
                print(f"  baseline / this tree: > {args.timeout / statistics.median(walls['this tree']):.1f}x wall; "
                      "same results: not compared (the baseline did not finish)")
                continue
            ratio = statistics.median(walls["baseline"]) / statistics.median(walls["this tree"])
            cpu_ratio = statistics.median(cpus["baseline"]) / statistics.median(cpus["this tree"])
            equal = same(outputs["baseline"], outputs["this tree"])
            print(f"  baseline / this tree: {ratio:.1f}x wall, {cpu_ratio:.1f}x CPU; same results: {equal}")
            status |= not equal
    return status


def _extract(revision: str, where: Path) -> Path:
    where.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", revision], check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(where)], input=archive.stdout, check=True)
    return where
