"""Instructions a search executes, counted by valgrind (callgrind): a measure of FASOP's-choices
search cost that, unlike seconds, does not move with a shared machine's load (its wall-clock
rate swings by up to 2x from one minute to the next here; see bench_search.py).

For each FASOP experiment, in a fresh interpreter on the given source tree(s), the specs are
loaded and two searches run (the caches warm), then the objects of the process are frozen
(gc.freeze: a full collection that falls among the counted searches then walks only what they
made, not numpy's and the interpreter's ~10^5 objects, which would add millions of instructions
to whichever run it falls in); the process is counted with 0 and with N more searches, and
(difference) / N is the count of one warm search. Repeated runs agree within ~7 % (addresses
differ from run to run, and with them the order of dicts keyed by id()); compare trees in the
same run. Needs valgrind; takes ~30 s per experiment and tree
(two trees run side by side on two cores).

With --first, the first search of a process instead (what one `fasop search` pays, its caches
cold): the process counted with and without one search, nothing run before it; bytecode caches
filled by an uncounted run first (a module the search imports would otherwise be compiled and
counted), OpenBLAS at one thread (its idle threads' spinning is counted otherwise, by chance).

    python benchmarks/bench_instructions.py [--searches 20] [--baseline PATH] [--only t5] [--first]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))
from bench_search import EXPERIMENTS  # noqa: E402

_CHILD = r"""
import sys
tree, model_name, cluster_name, nodes, extra, first = sys.argv[1:7]
sys.path.insert(0, tree)
import fasop
assert fasop.__file__.startswith(tree), fasop.__file__
import os
from fasop.search import parse_nodes, search  # (the same names in the flat layout before issue 27)
from fasop.specs import load_cluster, load_model
data = f"{tree}/fasop/data" if os.path.isdir(f"{tree}/fasop/data") else tree
model = load_model(f"{data}/model_specs/{model_name}.yaml")
cluster = load_cluster(f"{data}/cluster_specs/{cluster_name}.yaml")
inventory = parse_nodes(nodes, cluster)
def run():
    search(model, cluster, inventory, heterogeneous=True, placements="cyclic", partitioner="fasop-minmax")
if first != "1":
    run(); run()
    import gc
    gc.collect()
    gc.freeze()  # a full collection now and then walks only what the searches made, not the whole process
for _ in range(int(extra)):
    run()
"""


def count(tree: Path, model: str, cluster: str, nodes: str, extra: int, first: Path | None = None) -> int:
    """Instructions of the whole child process (callgrind's 'Collected'); `first`: the bytecode
    cache folder of a first-search count (--first)."""
    env = {"PYTHONHASHSEED": "0", "PATH": "/usr/bin:/bin"}
    if first is not None:
        env |= {"PYTHONPYCACHEPREFIX": str(first), "OPENBLAS_NUM_THREADS": "1"}
    child = [sys.executable, "-c", _CHILD, str(tree), model, cluster, nodes, str(extra), str(int(first is not None))]
    with tempfile.TemporaryDirectory() as scratch:  # callgrind's profile, not read
        done = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={scratch}/callgrind.out",
                               *child], capture_output=True, text=True, cwd=scratch, env=env)
    found = re.search(r"Collected\s*:\s*(\d+)", done.stderr)
    if done.returncode != 0 or not found:
        sys.exit(f"bench_instructions: {model} {nodes} on {tree} failed: {done.stderr.strip()[-600:]}")
    return int(found.group(1))


def per_search(tree: Path, model: str, cluster: str, nodes: str, searches: int, first: bool = False) -> float:
    if not first:
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            base, more = pool.map(lambda n: count(tree, model, cluster, nodes, n), (0, searches))
        return (more - base) / searches
    with tempfile.TemporaryDirectory() as cache:
        subprocess.run([sys.executable, "-c", _CHILD, str(tree), model, cluster, nodes, "1", "1"],
                       capture_output=True, cwd=cache, check=True,
                       env={"PYTHONPYCACHEPREFIX": cache, "PATH": "/usr/bin:/bin"})  # fills the caches
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            base, more = pool.map(lambda n: count(tree, model, cluster, nodes, n, Path(cache)), (0, 1))
    return float(more - base)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--searches", type=int, default=20, help="warm searches counted (default 20)")
    parser.add_argument("--baseline", type=Path, help="another checkout (its kernels built) to count alike")
    parser.add_argument("--only", help="only experiments whose name contains this")
    parser.add_argument("--first", action="store_true", help="the first search of a process instead (module doc)")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("bench_instructions: valgrind is not installed")
    trees = {"this": REPO} | ({"baseline": args.baseline.resolve()} if args.baseline else {})
    print(f"instructions of the first search of a process, FASOP's choices (callgrind, PYTHONHASHSEED=0)" if args.first
          else f"instructions per warm search, FASOP's choices (callgrind, {args.searches} searches, PYTHONHASHSEED=0)")
    for name, model, cluster, nodes, _extra in EXPERIMENTS:
        if args.only and args.only not in name:
            continue
        counts = {label: per_search(tree, model, cluster, nodes, args.searches, args.first)
                  for label, tree in trees.items()}
        candidates = _candidates(model, cluster, nodes)
        cells = [f"{label}: {n / 1e6:7.2f} M ({n / candidates / 1e3:5.0f} k a candidate)" for label, n in counts.items()]
        ratio = f"  this / baseline: {counts['this'] / counts['baseline']:.2f}" if "baseline" in counts else ""
        print(f"  {name:22s} " + "  ".join(cells) + ratio)


def _candidates(model_name: str, cluster_name: str, nodes: str) -> int:
    sys.path.insert(0, str(REPO))
    from fasop.search.engine import parse_nodes, search
    from fasop.specs.load import load_cluster, load_model

    cluster = load_cluster(shipped_folder("cluster_specs") / f"{cluster_name}.yaml")
    result = search(load_model(shipped_folder("model_specs") / f"{model_name}.yaml"), cluster, parse_nodes(nodes, cluster),
                    heterogeneous=True, placements="cyclic", partitioner="fasop-minmax")
    return result.num_candidates


if __name__ == "__main__":
    main()
