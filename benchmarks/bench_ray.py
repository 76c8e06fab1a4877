"""`fasop pareto` wall time, local pool vs --executor ray (a private local instance), for a few
sweep sizes: medians of REPEATS runs of the whole command (Ray's start-up included, as a user
pays it), and Ray's per-task overhead on an instance already running. docs/ray.md reports them.

    python benchmarks/bench_ray.py [--repeats 3]      # needs Ray: pip install 'fasop[ray]'
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SIZES = ("a100=1,a10=2", "a100=2,a10=4", "a100=4,a10=6")  # 5, 14, 34 compositions


def wall_s(max_nodes: str, executor: str, folder: str) -> float:
    argv = [sys.executable, "-m", "fasop", "pareto", "--model", "bert", "--cluster", "fasop-paper", "--max-nodes",
            max_nodes, "--exhaustive", "--no-progress", "--out-prefix", f"{folder}/bert", "--executor", executor]
    start = time.monotonic()
    subprocess.run(argv, check=True, cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)),
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.monotonic() - start


def task_overhead_s(tasks: int = 200) -> float:
    """Seconds per empty Ray task on a running 2-CPU instance (submit, run, get)."""
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    noop = ray.remote(num_cpus=1)(lambda: None)
    ray.get([noop.remote() for _ in range(10)])  # workers started
    start = time.monotonic()
    ray.get([noop.remote() for _ in range(tasks)])
    elapsed = time.monotonic() - start
    ray.shutdown()
    return elapsed / tasks


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"cores: {len(os.sched_getaffinity(0))}")
    print(f"empty Ray task: {task_overhead_s() * 1000:.1f} ms each (2 CPUs, 200 tasks)")
    with tempfile.TemporaryDirectory() as tmp:
        for max_nodes in SIZES:
            times = {}
            for executor in ("local", "ray"):
                times[executor] = statistics.median(wall_s(max_nodes, executor, f"{tmp}/{executor}{i}")
                                                    for i in range(args.repeats))
            n = 1
            for part in max_nodes.split(","):
                n *= int(part.split("=")[1]) + 1
            print(f"--max-nodes {max_nodes} ({n - 1} compositions): local {times['local']:.1f} s, "
                  f"ray {times['ray']:.1f} s, ray/local {times['ray'] / times['local']:.2f}")


if __name__ == "__main__":
    main()
