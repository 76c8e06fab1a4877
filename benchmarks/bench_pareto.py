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

    python benchmarks/bench_pareto.py [--runs 5] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="runs per configuration (default %(default)s)")
    parser.add_argument("--json", metavar="PATH", help="also write every run's time as JSON")
    args = parser.parse_args(argv)
    report, outputs = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, flags in CONFIGS.items():
            times, csvs = [], set()
            for run in range(args.runs):
                prefix = Path(tmp) / f"{name.replace(' ', '_')}{run}" / "gpt2xl"
                start = time.perf_counter()
                done = subprocess.run([sys.executable, *COMMAND, "--out-prefix", str(prefix), *flags], cwd=REPO,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                times.append(time.perf_counter() - start)
                if done.returncode != 0:
                    sys.exit(f"bench_pareto: {name} failed: {done.stderr.strip()}")
                csvs.add(Path(f"{prefix}_pareto.csv").read_bytes())
            outputs[name] = csvs
            median = statistics.median(times)
            report[name] = {"runs_s": times, "median_s": median, "min_s": min(times),
                            "same_csv_every_run": len(csvs) == 1}
            print(f"{name:22s} median {median:6.2f} s  min {min(times):6.2f} s  "
                  f"vs original {ORIGINAL_S / median:6.0f}x  same CSV every run: {len(csvs) == 1}", flush=True)
    same = outputs["defaults"] == outputs["defaults --workers 1"]
    met = report["defaults"]["median_s"] <= TARGET_S
    print(f"target: defaults <= {TARGET_S:.0f} s whole-process: {'met' if met else 'MISSED'} "
          f"({report['defaults']['median_s']:.2f} s, median of {args.runs}); --workers 1 writes the same CSV: {same}")
    if args.json:
        Path(args.json).write_text(json.dumps({"python": sys.version.split()[0], "runs": args.runs,
                                               "same_csv_any_workers": same, "configs": report}, indent=2) + "\n")
    return 0 if met and same and all(r["same_csv_every_run"] for r in report.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
