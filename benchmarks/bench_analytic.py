"""Whole-process time of analytic-estimator searches (issue 16's benchmark).

Runs, each in a fresh interpreter (imports, spec loading, search and CSV write all count):

    python -m fasop search --model llama-3-70b --cluster aws --nodes NODES --heterogeneous \
        --recompute none,selective,full --zero 0,1,2,3 --sequence-parallel on,off --top 10 \
        --placements PLACEMENTS --out <tmp> --no-progress

(NODES default p5=8,p4de=8, PLACEMENTS default all: 12,870 node orders, searched by the order
tree with the analytic prefix bounds) and prints the median and min seconds and the plans per
second (plans enumerated, from the summary line, / median seconds); target: median <= 60 s on
2 cores. With --pareto it times `fasop pareto --model llama-3-8b --cluster aws --max-nodes
p5=2,g6=4` instead. With --baseline REV the same command also runs from that git revision
(extracted with `git archive`), runs alternated so that both see the same load, and the ratio
of medians and whether both wrote the same CSV are printed. A run past --timeout is reported.
With --check-listing it also runs the search once with --every-plan (every order listed, every
plan estimated: use it on fewer nodes) and says whether the 10 fastest fitting rows of that
listing are the --top 10 rows (all columns but the rank).

    python benchmarks/bench_analytic.py [--runs 3] [--placements all|grouped|cyclic]
        [--nodes p5=8,p4de=8] [--pareto] [--baseline REV] [--check-listing] [--timeout S]
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SEARCH = ["search", "--model", "llama-3-70b", "--cluster", "aws", "--heterogeneous",
          "--recompute", "none,selective,full", "--zero", "0,1,2,3", "--sequence-parallel", "on,off", "--top", "10",
          "--no-progress"]
PARETO = ["pareto", "--model", "llama-3-8b", "--cluster", "aws", "--max-nodes", "p5=2,g6=4", "--no-progress"]
TARGET_S = 60.0


def run_once(argv: list[str], root: Path, out: Path, timeout: float) -> tuple[float | None, int, bytes]:
    """(seconds or None past the timeout, plans enumerated (search) or compositions (pareto), CSV bytes)."""
    env = dict(os.environ, PYTHONPATH=str(root))
    target = ["--out", str(out / "out.csv")] if argv[0] == "search" else ["--out-prefix", str(out / "p")]
    start = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, "-m", "fasop", *argv, *target], capture_output=True, text=True,
                              timeout=timeout, check=True, cwd=root, env=env)
    except subprocess.TimeoutExpired:
        return None, 0, b""
    seconds = time.perf_counter() - start
    if argv[0] == "search":
        count = int(re.search(r"\): ([\d,]+) plans", done.stdout).group(1).replace(",", ""))
        return seconds, count, (out / "out.csv").read_bytes()
    count = int(re.search(r"(\d+) of \d+ compositions", done.stdout).group(1))
    return seconds, count, (out / "p_pareto.csv").read_bytes()


def same_as_listing(argv: list[str], top_csv: bytes, timeout: float) -> bool:
    """Whether the exhaustive listing (--every-plan) has these rows as its 10 fastest that fit."""
    k = argv.index("--top")
    listing = argv[:k] + argv[k + 2:] + ["--every-plan"]
    with tempfile.TemporaryDirectory() as tmp:
        seconds, _, text = run_once(listing, REPO, Path(tmp), timeout)
    if seconds is None:
        print(f"the listing took more than {timeout:g} s")
        return False
    rows = lambda data: [{k: v for k, v in r.items() if k != "rank"}  # noqa: E731
                         for r in csv.DictReader(io.StringIO(data.decode()))]
    fitting = [r for r in rows(text) if r["is_oom"] == "False"][:10]
    return fitting == rows(top_csv)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--placements", default="all", choices=("grouped", "all", "cyclic"))
    parser.add_argument("--nodes", default="p5=8,p4de=8")
    parser.add_argument("--pareto", action="store_true", help="time the llama-3-8b Pareto sweep instead")
    parser.add_argument("--baseline", help="a git revision to time alike (runs alternated)")
    parser.add_argument("--check-listing", action="store_true",
                        help="compare the --top 10 rows with the exhaustive listing's 10 fastest that fit")
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args()
    argv = PARETO if args.pareto else SEARCH + ["--nodes", args.nodes, "--placements", args.placements]
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"this tree": REPO}
        if args.baseline:
            base = Path(tmp) / "baseline"
            base.mkdir()
            archive = subprocess.run(["git", "-C", str(REPO), "archive", args.baseline], check=True, capture_output=True)
            subprocess.run(["tar", "-x", "-C", str(base)], input=archive.stdout, check=True)
            trees["baseline"] = base
        times: dict[str, list[float]] = {name: [] for name in trees}
        csvs: dict[str, set[bytes]] = {name: set() for name in trees}
        count = 0
        for run in range(args.runs):
            for name, root in trees.items():
                out = Path(tmp) / f"{name.replace(' ', '_')}{run}"
                out.mkdir()
                seconds, count, text = run_once(argv, root, out, args.timeout)
                if seconds is None:
                    print(f"{name}: a run took more than {args.timeout:g} s")
                    return 1
                times[name].append(seconds)
                csvs[name].add(text)
    what = "plans" if not args.pareto else "compositions"
    print(f"fasop {' '.join(argv)}")
    for name, t in times.items():
        median = statistics.median(t)
        print(f"{name:9s}: {count:,} {what}; median {median:.2f} s, min {min(t):.2f} s over {args.runs} runs "
              f"({', '.join(f'{x:.2f}' for x in t)}); {count / median:,.0f} {what}/s")
    if args.baseline:
        ratio = statistics.median(times["baseline"]) / statistics.median(times["this tree"])
        print(f"baseline {args.baseline} / this tree: {ratio:.2f}x; same CSV: {csvs['baseline'] == csvs['this tree']}")
    if args.check_listing and not args.pareto:
        print(f"--top 10 rows = the exhaustive listing's 10 fastest that fit: {same_as_listing(argv, next(iter(csvs['this tree'])), args.timeout)}")
    median = statistics.median(times["this tree"])
    print(f"target: median <= {TARGET_S:.0f} s: {'met' if median <= TARGET_S else 'MISSED'}")
    return 0 if median <= TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
