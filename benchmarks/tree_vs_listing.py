"""`--top 1` with every node order of a mid-sized inventory, searched by the order tree
(orders.OrderSearch, what fasop does past search.TREE_ORDERS orders) and by listing every order:
in-process medians of --runs alternating runs, and a check that both keep the same plan.

    python benchmarks/tree_vs_listing.py [--runs 3] [--nodes h100=2,a100_80gb=3,l4=3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--nodes", default="h100=2,a100_80gb=3,l4=3", help="gpt2xl-scaled on mixed-64")
    args = parser.parse_args(argv)
    import fasop.search.engine as search_module
    from fasop.specs.load import load_cluster, load_model

    model = load_model(str(REPO / "fasop" / "data" / "model_specs" / "gpt2xl-scaled.yaml"))
    cluster = load_cluster(str(REPO / "fasop" / "data" / "cluster_specs" / "mixed-64.yaml"))
    inventory = search_module.parse_nodes(args.nodes, cluster)
    times: dict[str, list[float]] = {"tree": [], "listing": []}
    kept: dict[str, list] = {}
    default = search_module.TREE_ORDERS
    try:
        for _ in range(args.runs):
            for name, limit in (("tree", 0), ("listing", 10**18)):
                search_module.TREE_ORDERS = limit
                start = time.perf_counter()
                result = search_module.search(model, cluster, inventory, heterogeneous=True, top=1)
                times[name].append(time.perf_counter() - start)
                kept[name] = [(e.plan.key(), e.step_time_s) for e in result.estimates]
    finally:
        search_module.TREE_ORDERS = default
    tree, listing = statistics.median(times["tree"]), statistics.median(times["listing"])
    print(f"{args.nodes}: tree {tree:.2f} s, listing {listing:.2f} s (medians of {args.runs}); "
          f"same plan kept: {kept['tree'] == kept['listing']}; best {kept['tree'][0][0]} {kept['tree'][0][1]:.4f} s")
    return 0 if kept["tree"] == kept["listing"] else 1


if __name__ == "__main__":
    sys.exit(main())
