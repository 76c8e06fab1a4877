"""How many fitting plans of a default `fasop search` / `fasop pareto` keep a split that is not
proven optimal, each split's step time, and the whole-process time -- for one or more checkouts
in the same invocation (a baseline against this tree).

Each run is `python -m fasop ... --no-progress` in a fresh interpreter with the checkout as its
working directory (so its own `fasop` package and compiled kernels are imported), timed with
time.perf_counter around subprocess.run (wall) and by the CPU seconds the child used
(resource.getrusage, user + system: steadier than wall on a shared machine); the table reports
the median of --runs runs, the checkouts' runs interleaved, and each checkout's ratio to the
first. Unproven counts and step times are read from the CSV of the last run (they do not vary
between runs).

    python benchmarks/proven_splits.py [--runs 3] [--pareto] [BASELINE_CHECKOUT ...]
"""

from __future__ import annotations

import argparse
import csv
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
EXPERIMENTS = [  # (name, model, nodes, heterogeneous): FASOP's six experiments, the tool's defaults
    ("bert a10=4", "bert", "a10=4", False),
    ("bert a100=1,a10=3", "bert", "a100=1,a10=3", True),
    ("gpt2xl a10=8", "gpt2xl", "a10=8", False),
    ("gpt2xl a100=1,a10=7", "gpt2xl", "a100=1,a10=7", True),
    ("t5 a10=8", "t5", "a10=8", False),
    ("t5 a100=1,a10=7", "t5", "a100=1,a10=7", True),
]
PARETO = ["pareto", "--model", "gpt2xl", "--cluster", "fasop-paper-pareto", "--max-nodes", "a100=8,a10=8"]


def run(checkout: Path, argv: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "fasop", *argv, "--no-progress"], cwd=checkout, check=True,
                   stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def read(path: Path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def key(row: dict) -> tuple:
    return row["mbs"], row["tp"], row["dp"], row["pp"], row["node_placement"]


def measure(checkouts: list[Path], argv: list[str], runs: int, csv_name: str, out_args) -> list[tuple]:
    """Per checkout: (median wall s, median CPU s, rows of its CSV); runs interleaved."""
    with tempfile.TemporaryDirectory() as tmp:
        dirs = [Path(tmp) / str(i) for i in range(len(checkouts))]
        times: list[list[tuple[float, float]]] = [[] for _ in checkouts]
        for _ in range(runs):
            for i, checkout in enumerate(checkouts):
                dirs[i].mkdir(exist_ok=True)
                times[i].append(run(checkout, argv + out_args(dirs[i])))
        return [(statistics.median(w for w, _ in ts), statistics.median(c for _, c in ts), read(d / csv_name))
                for ts, d in zip(times, dirs)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("baselines", nargs="*", type=Path)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--pareto", action="store_true", help="also the gpt2xl pareto sweep (default options)")
    args = parser.parse_args()
    checkouts = [*args.baselines, REPO]
    print("| experiment | checkout | fitting plans | unproven | slower than the first checkout | "
          "whole run (median wall s) | ratio | CPU (median s) | ratio |")
    print("|---|---|---|---|---|---|---|---|---|")
    jobs = [(name, ["search", "--model", model, "--cluster", "fasop-paper", "--nodes", nodes]
             + (["--heterogeneous"] if hetero else []), "out.csv", lambda d: ["--out", str(d / "out.csv")])
            for name, model, nodes, hetero in EXPERIMENTS]
    if args.pareto:
        jobs.append(("gpt2xl pareto a100=8,a10=8", PARETO, "p_pareto.csv", lambda d: ["--out-prefix", str(d / "p")]))
    for name, argv, csv_name, out_args in jobs:
        first = None
        results = measure(checkouts, argv, args.runs, csv_name, out_args)
        for checkout, (wall, cpu, rows) in zip(checkouts, results):
            fitting = [r for r in rows if r.get("is_oom", "False") == "False"]
            unproven = sum(r.get("partition_proven_optimal") == "False" for r in fitting)
            steps = {key(r): float(r["step_time_s"]) for r in fitting}
            slower = "" if first is None else sum(steps[k] > first[k] for k in steps if k in first)
            first = first or steps
            print(f"| {name} | {checkout.name} | {len(fitting)} | {unproven} | {slower} | {wall:.2f} | "
                  f"{wall / results[0][0]:.2f} | {cpu:.2f} | {cpu / results[0][1]:.2f} |", flush=True)


if __name__ == "__main__":
    main()
