"""Search throughput (issue 3): candidates per second in-process, whole-process wall time and
peak memory, on FASOP's six experiments and the 64-node, 4-type inventory.

In-process: in a fresh interpreter per (experiment, configuration), the specs are loaded, then
`fasop.search.engine.search(...)` is timed alone (time.perf_counter), 1 + --warmup + --runs times: the
first search of the process ("first": what one `fasop search` pays, its caches cold), for
FASOP's choices --warmup early ones (the caches warm, the interpreter still specializing the
functions a search calls once: WARMUP) and the median of the last --runs ("warm");
candidates/s = plans enumerated / seconds (plans skipped as equivalent or pruned count, as
they were ruled out). Configurations:
- `fasop`: FASOP's choices (cyclic placements, fasop-minmax), every plan estimated;
- `default`: fasop's defaults (all placements, optimal partitioner), every plan estimated;
- `top1`: the defaults with --top 1 (exact pruning against the best plan).
Whole-process: `python -m fasop search ...` with the defaults in a fresh interpreter, timed and
its peak RSS read (getrusage of children) by a small wrapper interpreter. The 64-node inventory (cluster_specs/mixed-64.yaml, model gpt2xl-scaled,
16 nodes of each type) runs with --placements grouped: `all` has 6.6e35 distinct orders.
Targets (issue 3): >= 50,000 candidates/s per core on the FASOP experiments (the original:
~35/s); the 64-node search <= 60 s on 2 cores with peak RSS < 2 GB. Medians of --runs runs.

Then `--placements all --top 5` on 16-node inventories whose node orders are too many to list
(2.0 million and 63 million orders; orders.OrderSearch), in-process and whole-process.

FASOP's choices are first measured in --rounds interleaved rounds (each round runs every
experiment in a fresh interpreter), so that a slow spell of a shared machine falls on all of
them alike: the candidates/s quoted against the target. With --baseline PATH (a checkout of
another version, e.g. `git worktree add /tmp/base <commit>`, its kernels built there with
`python setup.py build_ext --inplace` if it has any), that tree is measured in the same rounds,
alternating with this one, and the ratio of medians is printed.

    python benchmarks/bench_search.py [--runs 3] [--json PATH] [--workers 2] [--order-trees 0|1|2]
                                      [--baseline PATH] [--rounds 3] [--warmup 8] [--rounds-only]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

EXPERIMENTS = [  # (name, model, cluster, nodes, extra CLI flags)
    ("bert homogeneous", "bert", "fasop-paper", "a10=4", []),
    ("bert heterogeneous", "bert", "fasop-paper", "a100=1,a10=3", []),
    ("gpt2xl homogeneous", "gpt2xl", "fasop-paper", "a10=8", []),
    ("gpt2xl heterogeneous", "gpt2xl", "fasop-paper", "a100=1,a10=7", []),
    ("t5 homogeneous", "t5", "fasop-paper", "a10=8", []),
    ("t5 heterogeneous", "t5", "fasop-paper", "a100=1,a10=7", []),
]
BIG = ("64 nodes, 4 types", "gpt2xl-scaled", "mixed-64", "h100=16,a100_80gb=16,a10g=16,l4=16",
       ["--placements", "grouped"])
ORDER_TREES = [  # --placements all --top 5 past listing (orders.OrderSearch): (name, nodes)
    ("16 nodes, 3 types, all orders", "h100=5,a100_80gb=5,l4=6"),
    ("16 nodes, 4 types, all orders", "h100=4,a100_80gb=4,a10g=4,l4=4"),
]
"""Both on gpt2xl-scaled / mixed-64: 2.0 million and 63 million distinct node orders."""
CONFIGS = {"fasop": {"placements": "cyclic", "partitioner": "fasop-minmax"},
           "default": {},
           "top1": {"top": 1}}


_CHILD = r"""
import json, sys, time
tree, model_name, cluster_name, nodes, config, runs, workers, warmup = sys.argv[1:9]
sys.path.insert(0, tree)
import fasop
assert fasop.__file__.startswith(tree), fasop.__file__
import os
from fasop.search import parse_nodes, search  # (the same names in the flat layout before issue 27)
from fasop.specs import load_cluster, load_model
data = f"{tree}/fasop/data" if os.path.isdir(f"{tree}/fasop/data") else tree
kwargs = json.loads(config)
model = load_model(f"{data}/model_specs/{model_name}.yaml")
cluster = load_cluster(f"{data}/cluster_specs/{cluster_name}.yaml")
inventory = parse_nodes(nodes, cluster)
times = []
for _ in range(1 + int(warmup) + int(runs)):
    start = time.perf_counter()
    result = search(model, cluster, inventory, heterogeneous=True, workers=int(workers), **kwargs)
    times.append(time.perf_counter() - start)
best = result.best_fitting
print(json.dumps({"first_s": times[0], "warmup_s": times[1:1 + int(warmup)], "runs_s": times[1 + int(warmup):],
                  "candidates": result.num_candidates, "estimated": result.num_estimated, "best_step_s": None if best is None else best.step_time_s,
                  "kernels": __import__("fasop.schedule.native").native.kernels is not None}))
"""
"""One configuration in a fresh interpreter on a given source tree: the first search, `warmup` more
(timed apart), then --runs more."""

WARMUP = 8
"""Searches run after a process's first before the timed ones of FASOP's choices (--warmup).
Python 3.11 specializes ("quickens") a function's bytecode at its 8th call, and some of a
search's functions run once a search (Fasop2024Estimator._estimate_minmax_compiled goes from 23
to 200 specialized instructions at the 8th search, `dis.dis(..., adaptive=True)`): searches 2 to
8 of a process are neither cold nor warm, and measured up to ~1.5x slower than later ones
(gpt2xl on a10=8: 1.4-1.5 ms for the 2nd, ~0.9 ms from the 10th). They are timed and reported
apart ("early"), the first search too."""


def in_child(tree: Path, model_name: str, cluster_name: str, nodes: str, config: dict, runs: int, workers: int,
             warmup: int = 0) -> dict:
    done = subprocess.run([sys.executable, "-c", _CHILD, str(tree), model_name, cluster_name, nodes, json.dumps(config),
                           str(runs), str(workers), str(warmup)], capture_output=True, text=True,
                          cwd=tempfile.gettempdir())
    if done.returncode != 0:
        sys.exit(f"bench_search: measuring {model_name} {nodes} on {tree} failed: {done.stderr.strip()[-800:]}")
    return json.loads(done.stdout)


def in_process(model_name: str, cluster_name: str, nodes: str, extra: list[str], runs: int,
               workers: int, warmup: int) -> dict:
    out = {}
    for config, kwargs in CONFIGS.items():
        kwargs = dict(kwargs)
        if "--placements" in extra:
            kwargs.setdefault("placements", extra[extra.index("--placements") + 1])
        # warm-up for FASOP's choices (milliseconds a search); the others take seconds, their
        # per-search overhead a small part of it
        row = in_child(REPO, model_name, cluster_name, nodes, kwargs, runs, workers, warmup if config == "fasop" else 0)
        median = statistics.median(row["runs_s"])
        out[config] = row | {"median_s": median, "candidates_per_s": row["candidates"] / median,
                             "first_candidates_per_s": row["candidates"] / row["first_s"]}
    return out


def interleaved(trees: dict[str, Path], runs: int, rounds: int, warmup: int, processes: int = 0) -> dict:
    """FASOP's choices on the six FASOP experiments, `rounds` rounds, each running every
    experiment on every tree in a fresh interpreter (the first search, `warmup` early ones, then
    `runs` more), then `processes` whole `fasop search` processes of it per tree (FASOP_COMMAND,
    alternated): a slow spell of a shared machine then falls on every experiment and tree alike
    rather than on one. Per tree and experiment: every warm search's seconds, every early one's,
    every first search's and every whole process's."""
    out: dict = {label: {} for label in trees}
    for r in range(rounds):
        for name, model, cluster, nodes, _extra in EXPERIMENTS:
            order = list(trees.items())
            order = order if r % 2 == 0 else order[::-1]  # each tree first in every other round
            for label, tree in order:
                row = in_child(tree, model, cluster, nodes, CONFIGS["fasop"], runs, 1, warmup)
                entry = out[label].setdefault(name, {"candidates": row["candidates"], "runs_s": [], "warmup_s": [],
                                                     "first_s": [], "process_s": [], "kernels": row["kernels"]})
                entry["runs_s"] += row["runs_s"]
                entry["warmup_s"] += row["warmup_s"]
                entry["first_s"].append(row["first_s"])
            for p in range(-1 if r == 0 else 0, processes):  # (the first, untimed, fills the bytecode caches)
                for label, tree in order if p % 2 == 0 else order[::-1]:
                    seconds = fasop_process(tree, model, cluster, nodes)
                    if p >= 0:
                        out[label][name]["process_s"].append(seconds)
    return out


FASOP_COMMAND = ["--heterogeneous", "--placements", "cyclic", "--partitioner", "fasop-minmax", "--iterations",
                 "12500000", "--no-progress"]
"""`fasop search --model M --cluster C --nodes N` with these: FASOP's choices, as a user runs them."""


BYTECODE = Path(tempfile.mkdtemp(prefix="bench_search_pyc_"))
"""Where every whole process measured reads and writes its bytecode caches (PYTHONPYCACHEPREFIX,
PYTHONDONTWRITEBYTECODE unset): an installed fasop has its modules compiled (pip compiles them
at install time), and a source tree may or may not have them (a checkout run before with
PYTHONDONTWRITEBYTECODE unset has some): compiling ~40 modules from source costs a process
~60 ms, which would then be measured for one tree and not the other. The first process of
each (tree, experiment) fills the caches and is not timed (`fasop_process(..., timed=False)`)."""


def process_env(tree: Path) -> dict[str, str]:
    """The environment of a whole process run on the source tree `tree`: its own fasop first on
    the path, bytecode caches in BYTECODE."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    return env | {"PYTHONPATH": str(tree), "PYTHONPYCACHEPREFIX": str(BYTECODE)}


def fasop_process(tree: Path, model: str, cluster: str, nodes: str) -> float:
    """Wall seconds of one whole `python -m fasop search` of FASOP's choices (FASOP_COMMAND)
    on the source tree `tree` (PYTHONPATH, run from a temporary folder, the CSV written there):
    start-up, imports (from bytecode caches: BYTECODE), spec loading, the search, the CSV and
    the printed table."""
    with tempfile.TemporaryDirectory() as tmp:
        argv = [sys.executable, "-m", "fasop", "search", "--model", model, "--cluster", cluster, "--nodes", nodes,
                "--out", str(Path(tmp) / "out.csv"), *FASOP_COMMAND]
        env = process_env(tree)
        start = time.perf_counter()
        done = subprocess.run(argv, cwd=tmp, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"bench_search: {' '.join(argv)} on {tree} failed: {done.stderr.strip()[-800:]}")
    return seconds


def print_interleaved(result: dict, runs: int, rounds: int, warmup: int) -> None:
    labels = list(result)
    print(f"FASOP's choices, {rounds} interleaved rounds, each process timing its first search, {warmup} early ones "
          f"and {runs} warm ones (candidates/s: median of the warm searches, best, median of the early, median of "
          f"the first)")
    for name, *_ in EXPERIMENTS:
        cells = []
        for label in labels:
            e = result[label][name]
            n, median = e["candidates"], statistics.median(e["runs_s"])
            early = f"{n / statistics.median(e['warmup_s']):7,.0f}" if e["warmup_s"] else "      -"
            cells.append(f"{label}: {n / median:8,.0f}/s (best {n / min(e['runs_s']):7,.0f}, early {early}, first "
                         f"{n / statistics.median(e['first_s']):7,.0f})")
        if len(labels) == 2:
            a, b = (statistics.median(result[label][name]["runs_s"]) for label in labels)
            cells.append(f"{labels[0]} / {labels[1]}: {b / a:.2f}x")
        print(f"  {name:22s} " + "  ".join(cells))
    if len(labels) == 2:
        print_ratios(result)


def print_ratios(result: dict) -> None:
    """The speed of this tree over the baseline's (baseline seconds / this tree's, medians; 1.00:
    as fast, below 0.90: more than 10 % slower) per experiment: warm in-process searches, first
    searches of a process, whole processes."""
    this, base = result["this"], result["baseline"]
    whole = any(e["process_s"] for e in this.values())
    print("speed, this tree / baseline (baseline's median seconds / this tree's; >= 0.90: within 10 %)")
    print(f"  {'experiment':22s} {'warm search':>12s} {'first search':>13s}" + (f" {'whole process':>14s}  "
          f"(ms: this / baseline)" if whole else ""))
    for name, *_ in EXPERIMENTS:
        ratio = {key: statistics.median(base[name][key]) / statistics.median(this[name][key])
                 for key in ("runs_s", "first_s") + (("process_s",) if whole else ())}
        line = f"  {name:22s} {ratio['runs_s']:11.2f}x {ratio['first_s']:12.2f}x"
        if whole:
            line += (f" {ratio['process_s']:13.2f}x  ({1e3 * statistics.median(this[name]['process_s']):.0f} / "
                     f"{1e3 * statistics.median(base[name]['process_s']):.0f})")
        print(line)


_WRAPPER = """
import json, resource, subprocess, sys, time
start = time.perf_counter()
done = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
seconds = time.perf_counter() - start
print(json.dumps({"seconds": seconds, "rc": done.returncode, "stderr": done.stderr[-500:],
                  "maxrss_kib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))
"""
"""Runs one command and reports its wall time and peak RSS. A small interpreter of its own, so
the child's peak RSS is not inflated by this benchmark's memory (copied at fork)."""


def whole_process(model: str, cluster: str, nodes: str, extra: list[str], runs: int, workers: int) -> dict:
    times, rss = [], []
    with tempfile.TemporaryDirectory() as tmp:
        argv = [sys.executable, "-m", "fasop", "search", "--model", model, "--cluster", cluster, "--nodes", nodes,
                "--heterogeneous", "--workers", str(workers), "--out", str(Path(tmp) / "out.csv"), "--no-progress",
                *extra]
        for run in range(-1, runs):  # the first, untimed, fills the bytecode caches (BYTECODE)
            done = subprocess.run([sys.executable, "-c", _WRAPPER, *argv], cwd=REPO, capture_output=True, text=True,
                                  env=process_env(REPO))
            report = json.loads(done.stdout)
            if report["rc"] != 0:
                sys.exit(f"bench_search: {' '.join(argv)} failed: {report['stderr'].strip()}")
            if run < 0:
                continue
            times.append(report["seconds"])
            rss.append(report["maxrss_kib"] / 1024)  # Linux reports KiB
    return {"command": " ".join(argv[1:]), "runs_s": times, "median_s": statistics.median(times),
            "peak_rss_mib": max(rss)}


def order_tree(nodes: str, runs: int, workers: int) -> dict:
    """In-process and whole-process `--top 5` over every node order of a 16-node inventory."""
    from fasop.search.engine import parse_nodes, search
    from fasop.specs.load import load_cluster, load_model

    model = load_model(str(shipped_folder("model_specs") / "gpt2xl-scaled.yaml"))
    cluster = load_cluster(str(shipped_folder("cluster_specs") / "mixed-64.yaml"))
    times, result = [], None
    for _ in range(runs):
        start = time.perf_counter()
        result = search(model, cluster, parse_nodes(nodes, cluster), heterogeneous=True, top=5, workers=workers)
        times.append(time.perf_counter() - start)
    best = result.best_fitting
    return {"runs_s": times, "median_s": statistics.median(times), "candidates": result.num_candidates,
            "estimated": result.num_estimated, "best": best.plan.key(), "best_step_s": best.step_time_s,
            "whole_process": whole_process("gpt2xl-scaled", "mixed-64", nodes, ["--top", "5"], runs, workers)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per measurement (default %(default)s)")
    parser.add_argument("--workers", type=int, default=1, help="--workers for every search (default %(default)s)")
    parser.add_argument("--json", metavar="PATH", help="also write the measurements as JSON")
    parser.add_argument("--baseline", type=Path, metavar="PATH",
                        help="a checkout of another version to compare FASOP's choices with, in the same invocation")
    parser.add_argument("--rounds", type=int, default=3,
                        help="interleaved rounds of FASOP's choices on the six experiments (default %(default)s)")
    parser.add_argument("--order-trees", type=int, default=1, metavar="N",
                        help="how many of the all-orders inventories to run (0-2; default %(default)s: "
                             "the 3-type one; the 4-type one takes ~2 minutes a run)")
    parser.add_argument("--warmup", type=int, default=WARMUP, metavar="N",
                        help="searches after a process's first before the timed ones of FASOP's choices, timed apart "
                             "(default %(default)s: Python specializes a function's bytecode at its 8th call)")
    parser.add_argument("--processes", type=int, default=3, metavar="N",
                        help="with --baseline: whole `fasop search` processes of FASOP's choices per experiment, "
                             "tree and round, alternated between the trees (default %(default)s)")
    parser.add_argument("--rounds-only", action="store_true",
                        help="measure only the interleaved rounds of FASOP's choices (e.g. many of them, with "
                             "--baseline)")
    args = parser.parse_args(argv)
    if args.rounds_only:
        trees_measured = {"this": REPO} | ({"baseline": args.baseline} if args.baseline else {})
        result = interleaved(trees_measured, args.runs, args.rounds, args.warmup, args.processes if args.baseline else 0)
        print_interleaved(result, args.runs, args.rounds, args.warmup)
        if args.json:
            Path(args.json).write_text(json.dumps({"python": sys.version.split()[0], "runs": args.runs,
                                                   "warmup": args.warmup, "rounds": args.rounds,
                                                   "baseline": None if args.baseline is None else str(args.baseline),
                                                   "fasop_choices_interleaved": result}, indent=2) + "\n")
        return 0
    trees = []
    for name, nodes in ORDER_TREES[:args.order_trees]:
        tree = order_tree(nodes, args.runs, args.workers)
        trees.append({"experiment": name, "nodes": nodes, **tree})
        print(f"{name:30s} candidates {tree['candidates']:13,d} estimated {tree['estimated']:5d} | in-process "
              f"{tree['median_s']:6.1f} s | process {tree['whole_process']['median_s']:6.1f} s, peak RSS "
              f"{tree['whole_process']['peak_rss_mib']:5.0f} MiB | best {tree['best']} {tree['best_step_s']:.4f} s",
              flush=True)
    trees_measured = {"this": REPO} | ({"baseline": args.baseline} if args.baseline else {})
    fasop_choices = interleaved(trees_measured, args.runs, args.rounds, args.warmup, args.processes if args.baseline else 0)
    print_interleaved(fasop_choices, args.runs, args.rounds, args.warmup)
    rows = []
    for name, model, cluster, nodes, extra in EXPERIMENTS + [BIG]:
        row = {"experiment": name, "in_process": in_process(model, cluster, nodes, extra, args.runs, args.workers,
                                                            args.warmup),
               "whole_process": whole_process(model, cluster, nodes, extra, args.runs, args.workers)}
        rows.append(row)
        ip, wp = row["in_process"], row["whole_process"]
        kernels = "" if ip["fasop"]["kernels"] else " (no compiled kernels)"
        print(f"{name:22s} candidates {ip['default']['candidates']:6d} | cand/s: fasop {ip['fasop']['candidates_per_s']:8.0f}"
              f" (first {ip['fasop']['first_candidates_per_s']:6.0f})  default {ip['default']['candidates_per_s']:7.0f}"
              f"  top1 {ip['top1']['candidates_per_s']:7.0f}"
              f" | best step s: fasop {ip['fasop']['best_step_s']:.4f} default {ip['default']['best_step_s']:.4f}"
              f" | process {wp['median_s']:6.2f} s, peak RSS {wp['peak_rss_mib']:5.0f} MiB{kernels}", flush=True)
    big = rows[-1]["whole_process"]
    ours = fasop_choices["this"]
    rates = [e["candidates"] / statistics.median(e["runs_s"]) for e in ours.values()]
    print(f"FASOP experiments, FASOP's choices ({args.rounds} interleaved rounds): {min(rates):,.0f} to "
          f"{max(rates):,.0f} candidates/s (the original: ~35/s)")
    print(f"targets: >= 50,000 candidates/s per core on the FASOP experiments; 64-node <= 60 s "
          f"(measured {big['median_s']:.1f} s) with peak RSS < 2048 MiB (measured {big['peak_rss_mib']:.0f} MiB); "
          f"workers={args.workers}, medians of {args.runs} runs")
    if args.json:
        Path(args.json).write_text(json.dumps({"python": sys.version.split()[0], "runs": args.runs, "warmup": args.warmup,
                                               "baseline": None if args.baseline is None else str(args.baseline),
                                               "workers": args.workers, "rows": rows, "order_trees": trees,
                                               "fasop_choices_interleaved": fasop_choices},
                                              indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
