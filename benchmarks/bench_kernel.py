"""Two builds of the compiled kernels (`_fasop_native*.so`) timed against each other in one
process: for changes to fasop/schedule/_native.c, where a search's wall time on a shared machine is too
noisy to see a 10 % difference (see bench_search.py) and instruction counts
(bench_instructions.py) miss what the kernel's time is made of.

Both builds are loaded side by side (each copied to a file of its own, so Python loads two
modules) and called on the same inputs, alternating which goes first; medians of the calls.

- `one_f_one_b`: 64 random pipelines per (stages, micro-batches), nanoseconds per pipeline cell
  of a 4-lane run (what the schedule costs per stage and micro-batch);
- `one_f_one_b_many` on the inputs a search with FASOP's choices passes it on each FASOP
  experiment (captured from one search with the current tree's fasop), microseconds per
  experiment (all its calls); skipped when a build has no such kernel (before API 9).

Each line also says whether the two builds wrote the same outputs (they must: a kernel change
may change time, never values).

    python benchmarks/bench_kernel.py OLD.so [NEW.so] [--calls 100]

NEW defaults to the build in the repository root (`python setup.py build_ext --inplace`); OLD
is e.g. a worktree's build of the commit before.
"""

from __future__ import annotations

import argparse
import importlib.machinery
import importlib.util
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

SHAPES = [(4, 8), (4, 128), (8, 64), (16, 16), (16, 128), (32, 8), (32, 128)]


def load(path: Path, copy_to: Path):
    """The kernels module of one build, loaded from a copy of its own."""
    shutil.copy(path, copy_to)
    loader = importlib.machinery.ExtensionFileLoader("_fasop_native", str(copy_to))
    spec = importlib.util.spec_from_file_location("_fasop_native", str(copy_to), loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def timed(builds: list, call, calls: int) -> list[float]:
    """Median seconds of call(build) per build, the builds alternating which goes first."""
    times: list[list[float]] = [[] for _ in builds]
    for r in range(calls):
        order = list(enumerate(builds)) if r % 2 == 0 else list(enumerate(builds))[::-1]
        for k, build in order:
            start = time.perf_counter()
            call(build)
            times[k].append(time.perf_counter() - start)
    return [statistics.median(t) for t in times]


def schedules(builds: list, calls: int) -> None:
    rng = np.random.default_rng(0)
    print("one_f_one_b: ns per pipeline cell of a 4-lane run (64 random pipelines)")
    for pp, m in SHAPES:
        n = 64
        t = rng.uniform(0.5, 1.0, (n, pp))
        durations = np.zeros((n, 4 * pp))
        durations[:, :pp], durations[:, pp:2 * pp] = t / 3, 2 * t / 3
        durations[:, 2 * pp], durations[:, 4 * pp - 1] = 0.01, 0.02  # stage 0's forward, the last's backward send
        outs = [np.empty((n, pp)) for _ in builds]
        for build, out in zip(builds, outs):
            build.one_f_one_b(durations, pp, m, out)
        same = all(np.array_equal(outs[0], out) for out in outs)
        seconds = timed(builds, lambda b: b.one_f_one_b(durations, pp, m, np.empty((n, pp))), calls)
        per = [s / (n / 4) / (pp * m) * 1e9 for s in seconds]
        print(f"  pp {pp:2d}, m {m:3d}: {per[0]:6.2f} vs {per[1]:6.2f} ns  ratio {per[1] / per[0]:.3f}"
              f"  same outputs: {same}")


def experiments(builds: list, calls: int) -> None:
    from bench_search import EXPERIMENTS

    from fasop.schedule import native
    from fasop.search.engine import parse_nodes, search
    from fasop.specs.load import load_cluster, load_model

    if native.kernels is None:
        print("experiments: skipped (this tree's fasop runs without its kernels)")
        return
    kernels, captured = native.kernels, []

    class Capture:
        def __getattr__(self, name):
            return getattr(kernels, name)

        def one_f_one_b_many(self, *args):
            captured.append([a.copy() if isinstance(a, np.ndarray) else a for a in args])
            return kernels.one_f_one_b_many(*args)

    if not all(hasattr(build, "one_f_one_b_many") for build in builds):
        print("one_f_one_b_many: skipped (a build has no such kernel)")
        return
    print("one_f_one_b_many: us per search, the calls of each FASOP experiment's search")
    native.kernels = Capture()
    try:
        for name, model_name, cluster_name, nodes, _ in EXPERIMENTS:
            model = load_model(REPO / "fasop" / "data" / "model_specs" / f"{model_name}.yaml")
            cluster = load_cluster(REPO / "fasop" / "data" / "cluster_specs" / f"{cluster_name}.yaml")
            captured.clear()
            search(model, cluster, parse_nodes(nodes, cluster), heterogeneous=True, placements="cyclic",
                   partitioner="fasop-minmax")
            inputs = list(captured)
            outs = []
            for build in builds:
                mine = [[a.copy() if isinstance(a, np.ndarray) else a for a in args] for args in inputs]
                for args in mine:
                    build.one_f_one_b_many(*args)
                outs.append([args[-1] for args in mine])
            same = all(np.array_equal(x, y) for out in outs[1:] for x, y in zip(outs[0], out))

            def every(build):
                for args in inputs:
                    build.one_f_one_b_many(*args)

            seconds = timed(builds, every, calls)
            print(f"  {name:22s} {len(inputs):4d} calls: {seconds[0] * 1e6:8.1f} vs {seconds[1] * 1e6:8.1f} us"
                  f"  ratio {seconds[1] / seconds[0]:.3f}  same outputs: {same}")
    finally:
        native.kernels = kernels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old", type=Path, help="the kernels build to compare against")
    parser.add_argument("new", type=Path, nargs="?", help="default: the build in the repository root")
    parser.add_argument("--calls", type=int, default=100, help="calls per build and input (medians)")
    args = parser.parse_args()
    new = args.new or next(REPO.glob("_fasop_native*.so"), None)
    if new is None:
        parser.error("no kernels build in the repository root: python setup.py build_ext --inplace")
    with tempfile.TemporaryDirectory() as tmp:
        builds = [load(path, Path(tmp) / f"build{k}.so") for k, path in enumerate((args.old, new))]
        print(f"old: {args.old}\nnew: {new}")
        schedules(builds, args.calls)
        experiments(builds, args.calls)


if __name__ == "__main__":
    main()
