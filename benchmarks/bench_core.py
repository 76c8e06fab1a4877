"""Whole-process wall time of `fasop search` on FASOP's six experiments, against the original.

Each run is `python -m fasop search ... --out <tmp> --no-progress` in a fresh interpreter
(imports, spec loading, search and CSV writing included), timed with time.perf_counter around
subprocess.run. The import floor is `python -c "import numpy, yaml"`, the least any run pays.

Original times (issue 2, the original FASOP program on the same 2-core machine): bert hetero
10.1 s, gpt2xl hetero 14.3 s, t5 hetero 166.6 s; its homogeneous times are not given.
Targets: >= 10x faster per experiment, >= 50x for t5 heterogeneous.

    python benchmarks/bench_core.py [--runs 5] [--json PATH]
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
COMMON = ["--cluster", "fasop-paper", "--placements", "cyclic", "--partitioner", "fasop-minmax",
          "--iterations", "12500000"]

# (name, model, nodes, heterogeneous, original seconds or None, target speed-up)
EXPERIMENTS = [
    ("bert homogeneous", "bert", "a10=4", False, None, 10),
    ("bert heterogeneous", "bert", "a100=1,a10=3", True, 10.1, 10),
    ("gpt2xl homogeneous", "gpt2xl", "a10=8", False, None, 10),
    ("gpt2xl heterogeneous", "gpt2xl", "a100=1,a10=7", True, 14.3, 10),
    ("t5 homogeneous", "t5", "a10=8", False, None, 10),
    ("t5 heterogeneous", "t5", "a100=1,a10=7", True, 166.6, 50),
]


def time_runs(argv: list[str], runs: int) -> list[float]:
    """Wall seconds of `runs` fresh processes running argv; a failing run aborts the benchmark."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        times.append(time.perf_counter() - start)
        if done.returncode != 0:
            sys.exit(f"bench_core: {' '.join(argv)} exited {done.returncode}: {done.stderr.strip()}")
    return times


def search_argv(model: str, nodes: str, heterogeneous: bool, out: Path) -> list[str]:
    argv = [sys.executable, "-m", "fasop", "search", "--model", model, "--nodes", nodes, *COMMON,
            "--out", str(out), "--no-progress"]
    return argv + (["--heterogeneous"] if heterogeneous else [])


def measure(runs: int) -> list[dict]:
    rows = []
    floor = time_runs([sys.executable, "-c", "import numpy, yaml"], runs)
    rows.append({"experiment": "import floor (numpy, yaml)", "command": "python -c 'import numpy, yaml'",
                 "runs_s": floor, "median_s": statistics.median(floor), "min_s": min(floor),
                 "original_s": None, "speedup": None, "target": None, "passed": None})
    with tempfile.TemporaryDirectory() as tmp:
        for name, model, nodes, hetero, original, target in EXPERIMENTS:
            argv = search_argv(model, nodes, hetero, Path(tmp) / f"{model}_{nodes}.csv")
            times = time_runs(argv, runs)
            median = statistics.median(times)
            speedup = original / median if original else None
            rows.append({"experiment": name, "command": " ".join(argv[1:]), "runs_s": times,
                         "median_s": median, "min_s": min(times), "original_s": original,
                         "speedup": speedup, "target": target,
                         "passed": None if speedup is None else speedup >= target})
    return rows


def table(rows: list[dict]) -> str:
    header = ("experiment", "median_s", "min_s", "original_s", "speedup", "target", "result")
    lines = [header]
    for r in rows:
        lines.append((
            r["experiment"], f"{r['median_s']:.3f}", f"{r['min_s']:.3f}",
            "n/a" if r["original_s"] is None else f"{r['original_s']:.1f}",
            "n/a" if r["speedup"] is None else f"{r['speedup']:.1f}x",
            "" if r["target"] is None else f">={r['target']}x",
            "" if r["target"] is None else ("n/a" if r["passed"] is None else ("pass" if r["passed"] else "FAIL")),
        ))
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths)))
                     .rstrip() for line in lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="processes per experiment (default %(default)s)")
    parser.add_argument("--json", metavar="PATH", help="also write the measurements as JSON")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error(f"--runs must be >= 1, got {args.runs}")
    rows = measure(args.runs)
    print(f"fasop search, whole-process wall time, {args.runs} runs each; speed-up = original / median")
    print(table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps({"python": sys.version.split()[0], "runs": args.runs,
                                               "rows": rows}, indent=2) + "\n")
    return 0 if all(r["passed"] is not False for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
