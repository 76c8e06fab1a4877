"""How much the optimal partitioner gains over FASOP's greedy one on FASOP's six experiments.

For every candidate of each experiment (FASOP's cyclic placements) whose greedy split fits in
memory: the relative step-time gain of `--partitioner optimal` over `fasop-minmax`; also how
many candidates are out of memory with the greedy split but fit with the optimal one, and the
best plan of each. Not a timing benchmark: it reports estimates, for issue notes.

    python benchmarks/optimal_gains.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from fasop.search.engine import parse_nodes, search  # noqa: E402
from fasop.specs.files import shipped_folder
from fasop.specs.load import load_cluster, load_model  # noqa: E402

EXPERIMENTS = [("bert", "a10=4"), ("bert", "a100=1,a10=3"), ("gpt2xl", "a10=8"), ("gpt2xl", "a100=1,a10=7"),
               ("t5", "a10=8"), ("t5", "a100=1,a10=7")]


def main() -> int:
    cluster = load_cluster(str(shipped_folder("cluster_specs") / "fasop-paper.yaml"))
    for name, nodes in EXPERIMENTS:
        model = load_model(str(shipped_folder("model_specs") / f"{name}.yaml"))
        inventory = parse_nodes(nodes, cluster)
        greedy = search(model, cluster, inventory, heterogeneous=True, placements="cyclic", partitioner="fasop-minmax")
        exact = search(model, cluster, inventory, heterogeneous=True, placements="cyclic", partitioner="optimal")
        by_key = {e.plan.key(): e for e in exact.estimates}
        gains = np.array([100 * (e.step_time_s / by_key[e.plan.key()].step_time_s - 1)
                          for e in greedy.estimates if not e.memory.is_oom])
        rescued = sum(e.memory.is_oom and not by_key[e.plan.key()].memory.is_oom for e in greedy.estimates)
        proven = sum(e.partition_proven_optimal for e in exact.estimates)
        print(f"{name} {nodes}: {len(gains)} candidates fit with the greedy split; faster with optimal: "
              f"{np.mean(gains > 1e-9) * 100:.0f}%; gain p50 {np.percentile(gains, 50):.2f}% "
              f"p90 {np.percentile(gains, 90):.2f}% max {gains.max():.2f}%; greedy OOM -> optimal fits: {rescued}; "
              f"proven optimal {proven}/{len(exact.estimates)}; best step {greedy.best_fitting.step_time_s:.4f} s -> "
              f"{exact.best_fitting.step_time_s:.4f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
