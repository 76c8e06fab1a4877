"""What each group of compiled kernels earns, whole process: `fasop search` on FASOP's six
experiments (FASOP's choices), `fasop search` with the defaults (optimal partitioner) on two of
them, and `fasop pareto` on FASOP's Pareto experiment (defaults with --workers 1, and FASOP's
choices), each a fresh interpreter, with

- `all`: every kernel the build has;
- `no-1f1b`: the 1F1B recurrences (one_f_one_b, one_f_one_b_many, split_ends) in Python, and with
  them SplitSearch's table (fit_table) (schedule.py, fasop2024_plans.py and fasop2024/optimal.py
  read `native.kernels` as None);
- `no-tables`: the partitioner's tables (completion, capped_completion, bottleneck_split,
  finite_runs) in Python (partition_tables.py reads None);
- `no-loop`: the proven-split search's node loop (branch_and_bound) in Python, each node's bounds
  still compiled (partition/compiled.py's ENABLED False);
- `no-bounds`: the proven-split search's node loop, node bounds, sweep tables and polish's moves
  (sweep_completion, sweep_at, chain_terms, chain_bounds, reverse_sweep, zigzag, cut_raise,
  polish_moves) in Python (partition/compiled.py off; schedule/bounds.py, schedule/reverse_sweep.py,
  partition/zigzag.py, partition/polish.py and partition/splits.py read None; the traced run, one_f_one_b_traced, goes with `no-1f1b`);
- `python`: no kernel (FASOP_PURE_PYTHON=1);
- `baseline` (with --baseline PATH): another checkout, its own kernels; `baseline-python`: that
  checkout with no kernel (FASOP_PURE_PYTHON=1), to compare the Python fallbacks.

Runs alternate between the variants (each first in turn), medians of --runs (after one untimed
run each, which fills the bytecode caches every process reads: BYTECODE); the ratio to `all`
is what the issue's rule reads (a kernel whose Python version is within 1.5x whole-process on
these is deleted). Every variant must write the same CSV bytes as `all` (checked).

    python benchmarks/kernel_value.py [--runs 3] [--baseline /tmp/base] [--only search]
"""

from __future__ import annotations

import argparse
import filecmp
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FASOP = ["--placements", "cyclic", "--partitioner", "fasop-minmax"]
COMMANDS = [  # (name, fasop argv without --out)
    *[(f"search {m} {n} fasop", ["search", "--model", m, "--cluster", "fasop-paper", "--nodes", n,
                                                    "--heterogeneous", *FASOP, "--iterations", "12500000"])
      for m, n in [("bert", "a10=4"), ("bert", "a100=1,a10=3"), ("gpt2xl", "a10=8"), ("gpt2xl", "a100=1,a10=7"),
                   ("t5", "a10=8"), ("t5", "a100=1,a10=7")]],
    *[(f"search {m} {n} defaults", ["search", "--model", m, "--cluster", "fasop-paper", "--nodes", n,
                                    "--heterogeneous"])
      for m, n in [("t5", "a10=8"), ("t5", "a100=1,a10=7"), ("gpt2xl", "a100=1,a10=7")]],
    ("pareto gpt2xl defaults --workers 1", ["pareto", "--model", "gpt2xl", "--cluster", "fasop-paper-pareto",
                                            "--max-nodes", "a100=8,a10=8", "--iterations", "12500000",
                                            "--workers", "1"]),
    ("pareto gpt2xl fasop", ["pareto", "--model", "gpt2xl", "--cluster", "fasop-paper-pareto", "--max-nodes",
                             "a100=8,a10=8", "--iterations", "12500000", *FASOP]),
]
_CHILD = r"""
import sys, types
tree, off = sys.argv[1], sys.argv[2]
sys.path.insert(0, tree)
import fasop
assert fasop.__file__.startswith(tree), fasop.__file__
import fasop.partition.tables, fasop.schedule.pipeline
if "1f1b" in off:
    import fasop.estimators.fasop2024.optimal as optimal, fasop.estimators.fasop2024.plans as plans
    fasop.schedule.pipeline.native = plans.native = optimal.native = types.SimpleNamespace(kernels=None)
if "tables" in off:
    fasop.partition.tables.native = types.SimpleNamespace(kernels=None)
if "bounds" in off or "loop" in off:
    import fasop.partition.compiled
    fasop.partition.compiled.ENABLED = False
if "bounds" in off:
    import fasop.partition.polish, fasop.partition.splits, fasop.partition.zigzag, fasop.schedule.bounds
    import fasop.schedule.reverse_sweep
    for module in (fasop.partition.polish, fasop.partition.splits, fasop.partition.zigzag, fasop.schedule.bounds,
                   fasop.schedule.reverse_sweep):
        module.native = types.SimpleNamespace(kernels=None)
from fasop.cli.command import main
sys.exit(main(sys.argv[3:]))
"""
VARIANTS = {"all": "", "no-1f1b": "1f1b", "no-tables": "tables", "no-loop": "loop", "no-bounds": "bounds", "python": ""}


BYTECODE = Path(tempfile.mkdtemp(prefix="kernel_value_pyc_"))
"""Bytecode caches of every process (PYTHONPYCACHEPREFIX, PYTHONDONTWRITEBYTECODE unset), filled by
one untimed run per command and variant: an installed fasop has its modules compiled, and
compiling them in every process (~60 ms) would add the same to every variant's time, diluting
the ratios (benchmarks/README.md, bench_search.py)."""


def run(tree: Path, off: str, argv: list[str], out: Path, pure: bool) -> float:
    env = dict(os.environ, PYTHONHASHSEED="0", PYTHONPYCACHEPREFIX=str(BYTECODE))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.pop("FASOP_PURE_PYTHON", None)
    if pure:
        env["FASOP_PURE_PYTHON"] = "1"
    target = ["--out", str(out)] if argv[0] == "search" else ["--out-prefix", str(out.with_suffix(""))]
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", _CHILD, str(tree), off or "-", *argv, *target, "--no-progress"],
                          cwd=tree, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"kernel_value: {argv} on {tree} ({off}) failed: {done.stderr.strip()[-600:]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--baseline", type=Path, help="another checkout, its kernels built")
    parser.add_argument("--only", help="only commands whose name contains this")
    parser.add_argument("--variants", help="comma-separated variants (default: all of them)")
    args = parser.parse_args()
    chosen = args.variants.split(",") if args.variants else list(VARIANTS) + ["baseline", "baseline-python"]
    variants = [(name, REPO, off, name == "python") for name, off in VARIANTS.items() if name in chosen]
    if args.baseline and "baseline" in chosen:
        variants.append(("baseline", args.baseline.resolve(), "", False))
    if args.baseline and "baseline-python" in chosen:
        variants.append(("baseline-python", args.baseline.resolve(), "", True))
    print(f"whole-process seconds, medians of {args.runs} (ratio to `all`)")
    with tempfile.TemporaryDirectory() as tmp:
        for name, argv in COMMANDS:
            if args.only and args.only not in name:
                continue
            times: dict[str, list[float]] = {v[0]: [] for v in variants}
            for r in range(-1, args.runs):  # run -1: untimed, fills the bytecode caches
                order = variants[r % len(variants):] + variants[:r % len(variants)]
                for label, tree, off, pure in order:
                    seconds = run(tree, off, argv, Path(tmp) / f"{label}.csv", pure)
                    if r >= 0:
                        times[label].append(seconds)
            csv = (lambda label: Path(tmp) / f"{label}.csv") if argv[0] == "search" else \
                (lambda label: Path(tmp) / f"{label}_pareto.csv")
            same = [label for label, *_ in variants[1:] if not label.startswith("baseline") and
                    not filecmp.cmp(csv("all"), csv(label), shallow=False)]
            medians = {label: statistics.median(t) for label, t in times.items()}
            cells = "  ".join(f"{label} {s:6.2f} s ({s / medians['all']:.2f})" for label, s in medians.items())
            print(f"  {name:38s} {cells}" + (f"  DIFFERENT CSV: {same}" if same else ""), flush=True)


if __name__ == "__main__":
    main()
