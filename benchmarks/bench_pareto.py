"""Whole-process time of FASOP's Pareto experiment with fasop pareto (issue 4).

    fasop pareto --model gpt2xl --cluster fasop-paper-pareto --max-nodes a100=8,a10=8 \
        --iterations 12500000 [configuration flags]

for three configurations, each a fresh interpreter started with `subprocess` (imports, the
sweep, the CSV and both plots all count):
- `defaults`: optimal partitioner, cyclic placements, --workers = the cores available;
- `defaults --workers 1`: the same in one process;
- `fasop choices`: --placements cyclic --partitioner fasop-minmax (the original's candidates).
Medians of --runs runs, against the target (<= 10 s with the defaults) and the original
program's 49 minutes (2,940 s) on a 2-core machine. It also checks that every configuration
writes the same CSV on every run, and that --workers 1 writes the same CSV as the defaults.
With --baseline-tree PATH (a source tree of another version with its kernels built, e.g. the
previous main), each run of each configuration is followed by the same command on that tree
(alternating which goes first), and the ratio of the medians is printed: baseline seconds /
this tree's, 0.90 or more = within 10 %. Every process of both trees reads bytecode caches
(PYTHONPYCACHEPREFIX in a temporary folder, filled by one untimed run per tree and
configuration): a tree run without them would pay for compiling its modules in every process.

Then the catalog-scale sweeps of issue 19, gpt2xl-scaled on mixed-64 with the defaults:
- `h100=4,a100_80gb=4,a10g=4,l4=4` (624 compositions), this tree against the previous main
  (--baseline, default dbfe47e, extracted with `git archive` into a temporary folder and run
  from there), runs alternated: target >= 10x faster, the same frontier rows (the baseline's
  columns; this tree adds step_time_bound_s) and the same knee;
- `h100=8,a100_80gb=8,a10g=8,l4=8` (6,560 compositions), this tree alone: target <= 60 s.
Medians of --mixed-runs runs. The machine is shared: compare the ratio, taken in one invocation.

    python benchmarks/bench_pareto.py [--runs 5] [--mixed-runs 3] [--skip-paper] [--skip-mixed]
                                      [--baseline REV] [--baseline-tree PATH] [--json PATH]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
COMMAND = ["-m", "fasop", "pareto", "--model", "gpt2xl", "--cluster", "fasop-paper-pareto",
           "--max-nodes", "a100=8,a10=8", "--iterations", "12500000", "--no-progress"]
CONFIGS = {"defaults": [], "defaults --workers 1": ["--workers", "1"],
           "fasop choices": ["--placements", "cyclic", "--partitioner", "fasop-minmax"]}
ORIGINAL_S = 49 * 60
TARGET_S = 10.0
MIXED = ["-m", "fasop", "pareto", "--model", "gpt2xl-scaled", "--cluster", "mixed-64", "--no-progress"]
MIXED_4 = "h100=4,a100_80gb=4,a10g=4,l4=4"
MIXED_8 = "h100=8,a100_80gb=8,a10g=8,l4=8"
SPEEDUP_TARGET, MIXED_8_TARGET_S = 10.0, 60.0
BASELINE = "dbfe47e"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="runs per configuration (default %(default)s)")
    parser.add_argument("--mixed-runs", type=int, default=3, help="runs per mixed-64 sweep (default %(default)s)")
    parser.add_argument("--skip-paper", action="store_true", help="leave out FASOP's sweep (fasop-paper-pareto)")
    parser.add_argument("--skip-mixed", action="store_true", help="leave out the mixed-64 sweeps")
    parser.add_argument("--baseline", default=BASELINE, help="git revision timed against (default %(default)s)")
    parser.add_argument("--baseline-tree", type=Path, metavar="PATH",
                        help="a source tree of another version (kernels built) to time FASOP's sweep against, run "
                             "for run")
    parser.add_argument("--json", metavar="PATH", help="also write every run's time as JSON")
    args = parser.parse_args(argv)
    ok, record = True, {"python": sys.version.split()[0], "cores": len(os.sched_getaffinity(0))}
    if not args.skip_paper:
        met, record["paper"] = paper(args.runs, args.baseline_tree)
        ok = ok and met
    if not args.skip_mixed:
        met, record["mixed"] = mixed(args.mixed_runs, args.baseline)
        ok = ok and met
    if args.json:
        Path(args.json).write_text(json.dumps(record, indent=2) + "\n")
    return 0 if ok else 1


def paper(runs: int, baseline: Path | None = None) -> tuple[bool, dict]:
    report, outputs = {}, {}
    trees = {"this tree": REPO} | ({"baseline": baseline} if baseline else {})
    with tempfile.TemporaryDirectory() as tmp:
        env = {"PYTHONDONTWRITEBYTECODE": None, "PYTHONPYCACHEPREFIX": str(Path(tmp) / "pyc")}
        for name, flags in CONFIGS.items():
            times: dict[str, list[float]] = {label: [] for label in trees}
            csvs = set()
            for run in range(-1, runs):  # run -1: untimed, fills the bytecode caches
                order = list(trees.items())
                for label, root in order if run % 2 == 0 else order[::-1]:
                    prefix = Path(tmp) / f"{label.replace(' ', '_')}-{name.replace(' ', '_')}{run}" / "gpt2xl"
                    seconds = _timed(COMMAND + ["--out-prefix", str(prefix), *flags], root, f"{label} {name}",
                                     env=dict(env, PYTHONPATH=str(root)))
                    if run >= 0:
                        times[label].append(seconds)
                        if label == "this tree":
                            csvs.add(Path(f"{prefix}_pareto.csv").read_bytes())
            outputs[name] = csvs
            ours = times["this tree"]
            median = statistics.median(ours)
            report[name] = {"runs_s": ours, "median_s": median, "min_s": min(ours),
                            "same_csv_every_run": len(csvs) == 1}
            line = (f"{name:22s} median {median:6.2f} s  min {min(ours):6.2f} s  "
                    f"vs original {ORIGINAL_S / median:6.0f}x  same CSV every run: {len(csvs) == 1}")
            if baseline:
                base = statistics.median(times["baseline"])
                report[name] |= {"baseline_runs_s": times["baseline"], "baseline_median_s": base,
                                 "speed_vs_baseline": base / median}
                line += f"  | baseline median {base:6.2f} s: this tree / baseline {base / median:.2f}x"
            print(line, flush=True)
    same = outputs["defaults"] == outputs["defaults --workers 1"]
    met = report["defaults"]["median_s"] <= TARGET_S
    print(f"target: defaults <= {TARGET_S:.0f} s whole-process: {'met' if met else 'MISSED'} "
          f"({report['defaults']['median_s']:.2f} s, median of {runs}); --workers 1 writes the same CSV: {same}")
    if baseline:
        print(f"speed against {baseline} (baseline's median seconds / this tree's; >= 0.90: within 10 %): " +
              ", ".join(f"{name} {r['speed_vs_baseline']:.2f}x" for name, r in report.items()))
    return met and same and all(r["same_csv_every_run"] for r in report.values()), {
        "runs": runs, "baseline_tree": None if baseline is None else str(baseline), "same_csv_any_workers": same,
        "configs": report}


def mixed(runs: int, baseline: str) -> tuple[bool, dict]:
    """The two mixed-64 sweeps (module doc)."""
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "baseline"
        base.mkdir()
        archive = subprocess.run(["git", "-C", str(REPO), "archive", baseline], check=True, capture_output=True)
        subprocess.run(["tar", "-x", "-C", str(base)], input=archive.stdout, check=True)
        times: dict[str, list[float]] = {"baseline": [], "this tree": []}
        fronts = {}
        for run in range(runs):  # alternated, so that both see the same load
            for name, root in (("baseline", base), ("this tree", REPO)):
                prefix = Path(tmp) / f"{name.replace(' ', '_')}{run}" / "m4"
                times[name].append(_timed(MIXED + ["--max-nodes", MIXED_4, "--out-prefix", str(prefix)], root,
                                          f"{name} {MIXED_4}", env={"PYTHONPATH": str(root)}))
                fronts.setdefault(name, set()).add(_frontier(Path(f"{prefix}_pareto.csv")))
        medians = {name: statistics.median(t) for name, t in times.items()}
        speedup = medians["baseline"] / medians["this tree"]
        same = len(fronts["baseline"]) == 1 and fronts["baseline"] == {
            tuple(row[:len(next(iter(fronts["baseline"]))[0])] for row in f) for f in fronts["this tree"]}
        for name, t in times.items():
            print(f"mixed-64 {MIXED_4} {name:9s} median {medians[name]:7.2f} s  runs {', '.join(f'{x:.1f}' for x in t)}",
                  flush=True)
        print(f"target: >= {SPEEDUP_TARGET:.0f}x faster than {baseline}: {'met' if speedup >= SPEEDUP_TARGET else 'MISSED'} "
              f"({speedup:.1f}x); same frontier rows and knee: {same}", flush=True)
        big = []
        for run in range(runs):
            prefix = Path(tmp) / f"big{run}" / "m8"
            big.append(_timed(MIXED + ["--max-nodes", MIXED_8, "--out-prefix", str(prefix)], REPO, MIXED_8))
        median8 = statistics.median(big)
        print(f"mixed-64 {MIXED_8} this tree median {median8:7.2f} s  runs {', '.join(f'{x:.1f}' for x in big)}; "
              f"target <= {MIXED_8_TARGET_S:.0f} s: {'met' if median8 <= MIXED_8_TARGET_S else 'MISSED'}", flush=True)
    met = speedup >= SPEEDUP_TARGET and same and median8 <= MIXED_8_TARGET_S
    return met, {"runs": runs, "baseline": baseline, MIXED_4: times, "speedup": speedup,
                 "same_frontier": same, MIXED_8: big, "median_8_s": median8}


def _timed(command: list[str], cwd: Path, name: str, env: dict | None = None) -> float:
    """Wall seconds of `python command` in `cwd`, with os.environ updated by `env` (a None value:
    the variable unset)."""
    env = {key: value for key, value in dict(os.environ, **(env or {})).items() if value is not None}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, *command], cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True, env=env)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"bench_pareto: {name} failed: {done.stderr.strip()}")
    return elapsed


def _frontier(path: Path) -> tuple[tuple[str, ...], ...]:
    """The header and the frontier rows (with the knee flag) of a pareto CSV, cell by cell."""
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh))
    flag = rows[0].index("on_frontier")
    return (tuple(rows[0]),) + tuple(tuple(r) for r in rows[1:] if r[flag] == "True")


if __name__ == "__main__":
    sys.exit(main())
