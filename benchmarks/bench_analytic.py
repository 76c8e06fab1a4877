"""Whole-process time of an analytic-estimator search (issue 16's benchmark).

Runs, each in a fresh interpreter (imports, spec loading, search and CSV write all count):

    python -m fasop search --model llama-3-70b --cluster aws --nodes p5=8,p4de=8 --heterogeneous \
        --recompute none,selective,full --zero 0,1,2,3 --sequence-parallel on,off --top 10 \
        --placements PLACEMENTS --out <tmp> --no-progress

and prints the median and min seconds and the plans per second (plans enumerated, from the
summary line, / median seconds). Usage: python benchmarks/bench_analytic.py [--runs 3]
[--placements grouped|all|cyclic] [--timeout S]. A run past --timeout is reported as such.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COMMAND = ["--model", "llama-3-70b", "--cluster", "aws", "--nodes", "p5=8,p4de=8", "--heterogeneous",
           "--recompute", "none,selective,full", "--zero", "0,1,2,3", "--sequence-parallel", "on,off", "--top", "10",
           "--no-progress"]


def run_once(placements: str, timeout: float) -> tuple[float | None, int]:
    with tempfile.TemporaryDirectory() as tmp:
        argv = [sys.executable, "-m", "fasop", "search", *COMMAND, "--placements", placements,
                "--out", str(Path(tmp) / "out.csv")]
        start = time.perf_counter()
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=True)
        except subprocess.TimeoutExpired:
            return None, 0
        seconds = time.perf_counter() - start
    plans = int(re.search(r"\): ([\d,]+) plans", done.stdout).group(1).replace(",", ""))
    return seconds, plans


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--placements", default="grouped", choices=("grouped", "all", "cyclic"))
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args()
    times, plans = [], 0
    for _ in range(args.runs):
        seconds, plans = run_once(args.placements, args.timeout)
        if seconds is None:
            print(f"--placements {args.placements}: a run took more than {args.timeout:g} s")
            return 1
        times.append(seconds)
    median = statistics.median(times)
    print(f"--placements {args.placements}: {plans:,} plans; median {median:.2f} s, min {min(times):.2f} s over "
          f"{args.runs} runs; {plans / median:,.0f} plans/s (target: <= 60 s)")
    return 0 if median <= 60 else 1


if __name__ == "__main__":
    sys.exit(main())
