"""How many fitting plans of a default `fasop search` / `fasop pareto` keep a split that is not
proven optimal, each split's step time, and the whole-process time -- for one or more checkouts
in the same invocation (a baseline against this tree).

Each run is `python -m fasop ... --no-progress` in a fresh interpreter with the checkout as its
working directory (so its own `fasop` package and compiled kernels are imported), timed with
time.perf_counter around subprocess.run; the table reports the median of --runs runs. Unproven
counts and step times are read from the CSV of the last run (they do not vary between runs).

    python benchmarks/proven_splits.py [--runs 3] [--pareto] [BASELINE_CHECKOUT ...]
"""

from __future__ import annotations

import argparse
import csv
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


def run(checkout: Path, argv: list[str], out: Path) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "fasop", *argv, "--no-progress"], cwd=checkout, check=True,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def read(path: Path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def key(row: dict) -> tuple:
    return row["mbs"], row["tp"], row["dp"], row["pp"], row["node_placement"]


def measure(checkout: Path, argv: list[str], runs: int, csv_name: str, out_args) -> tuple[float, list[dict]]:
    with tempfile.TemporaryDirectory() as tmp:
        times = [run(checkout, argv + out_args(Path(tmp)), Path(tmp)) for _ in range(runs)]
        return statistics.median(times), read(Path(tmp) / csv_name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("baselines", nargs="*", type=Path)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--pareto", action="store_true", help="also the gpt2xl pareto sweep (default options)")
    args = parser.parse_args()
    checkouts = [*args.baselines, REPO]
    print("| experiment | checkout | fitting plans | unproven | slower than the first checkout | "
          "whole run (median s) |")
    print("|---|---|---|---|---|---|")
    jobs = [(name, ["search", "--model", model, "--cluster", "fasop-paper", "--nodes", nodes]
             + (["--heterogeneous"] if hetero else []), "out.csv", lambda d: ["--out", str(d / "out.csv")])
            for name, model, nodes, hetero in EXPERIMENTS]
    if args.pareto:
        jobs.append(("gpt2xl pareto a100=8,a10=8", PARETO, "p_pareto.csv", lambda d: ["--out-prefix", str(d / "p")]))
    for name, argv, csv_name, out_args in jobs:
        first = None
        for checkout in checkouts:
            seconds, rows = measure(checkout, argv, args.runs, csv_name, out_args)
            fitting = [r for r in rows if r.get("is_oom", "False") == "False"]
            unproven = sum(r.get("partition_proven_optimal") == "False" for r in fitting)
            steps = {key(r): float(r["step_time_s"]) for r in fitting}
            slower = "" if first is None else sum(steps[k] > first[k] for k in steps if k in first)
            first = first or steps
            print(f"| {name} | {checkout.name} | {len(fitting)} | {unproven} | {slower} | {seconds:.2f} |", flush=True)


if __name__ == "__main__":
    main()
