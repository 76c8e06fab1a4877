"""How much 1F1B scheduling FASOP's encoder-decoder partitioner needs, and why (issue 3).

With fasop-minmax, a T5 plan of pp stages has up to pp - 1 candidate splits (one per number of
encoder stages); FASOP schedules every one and keeps the one whose stage 0 ends first (the first
of equals). The compiled kernel (`fasop_plans` in fasop/_native.c) schedules them in order of a
lower bound and stops once the best end found is below the next bound; this script counts, per
FASOP experiment with an encoder-decoder model, with the Python schedule (`one_f_one_b`, the same
values as the kernel):

- candidate splits, and those the bound leaves to schedule when they are scheduled one at a
  time in order of their bounds (the kernel runs 4 at a time, so it may schedule a few more),
  with their pipeline cells (stages x micro-batches, what a schedule run costs);
- the least work: one split per plan (its cells);
- of the scheduled splits that lose, how many end within 1e-12 (relative) of the winner: splits
  that tie with it in exact arithmetic and differ only by rounding (no bound can rule those out:
  which one FASOP keeps is decided by the last bits of their schedules);
- the (pp, micro-batches) groups with the most scheduled cells.

    python benchmarks/split_ties.py [--nodes a10=8 a100=1,a10=7]
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from fasop.enumerate import cyclic_placements, degree_list, plans  # noqa: E402
from fasop.estimate import Fasop2024Estimator  # noqa: E402
from fasop.schedule import one_f_one_b, steady_weights  # noqa: E402
from fasop.search import parse_nodes  # noqa: E402
from fasop.specs import load_cluster, load_model  # noqa: E402


def kernel_bound(times: np.ndarray, m: int, first: float, last: float) -> float:
    """The kernel's lower bound on stage 0's end (`lower_bound` in fasop/_native.c)."""
    pp = len(times)
    before = np.concatenate([[0.0], np.cumsum(times)[:-1]])
    own = before + m * times
    own[1:] += first
    own[-1] += last
    chain = times.sum() + first + last + (steady_weights(pp, m) * times).max()
    return max(chain, own.max()) * (1 - 1e-9)


def analyse(model_name: str, nodes: str) -> None:
    model = load_model(REPO / "model_specs" / f"{model_name}.yaml")
    cluster = load_cluster(REPO / "cluster_specs" / "fasop-paper.yaml")
    inventory = parse_nodes(nodes, cluster)
    estimator = Fasop2024Estimator(model, cluster, inventory, "fasop-minmax")
    combos = degree_list(inventory, tp_degrees=estimator.compute.tp_degrees(estimator.gpus),
                         global_batch_size=model.global_batch_size,
                         num_transformer_layers=model.num_transformer_layers)
    count = collections.Counter()
    groups: dict[tuple[int, int], list[int]] = collections.defaultdict(lambda: [0, 0])
    seen = set()
    for plan in plans(cyclic_placements(inventory), combos, global_batch_size=model.global_batch_size):
        if plan.pp == 1:
            continue
        prepared = estimator.prepare(plan)
        m, sends = plan.num_microbatches, prepared.p2p
        rows = [np.array(prepared.stage_compute(split.scheduled)) for split in prepared.splits]
        key = (tuple(map(tuple, rows)), sends[0], sends[-1], m)
        if key in seen:  # the kernel schedules plans of equal inputs once
            continue
        seen.add(key)
        comp = np.array(rows).T
        forward, backward = np.zeros_like(comp), np.zeros_like(comp)
        forward[0], backward[-1] = sends[0], sends[-1]
        ends = one_f_one_b(comp / 3, 2 * comp / 3, forward, backward, m)[0]
        bounds = [kernel_bound(t, m, sends[0], sends[-1]) for t in rows]
        best = ends.min()
        scheduled, found = 0, np.inf
        for k in sorted(range(len(rows)), key=lambda k: (bounds[k], k)):
            if found < np.inf and bounds[k] > found:
                break
            scheduled += 1
            found = min(found, ends[k])
            count["ties"] += ends[k] != best and abs(ends[k] - best) <= 1e-12 * best
            count["exact ties"] += ends[k] == best
        count["exact ties"] -= 1  # the winner
        cells = plan.pp * m
        count["plans"] += 1
        count["candidates"] += len(rows)
        count["scheduled"] += scheduled
        count["candidate cells"] += len(rows) * cells
        count["scheduled cells"] += scheduled * cells
        count["least cells"] += cells
        groups[(plan.pp, m)][0] += scheduled * cells
        groups[(plan.pp, m)][1] += 1
    print(f"{model_name} {nodes}: {count['plans']} distinct multi-stage plans, {count['candidates']} candidate "
          f"splits, {count['scheduled']} scheduled (lower bound), "
          f"{count['ties'] + count['exact ties']} of the losers among them end within 1e-12 of the winner "
          f"({count['exact ties']} exactly equal)")
    print(f"  pipeline cells: all candidates {count['candidate cells']:,}, scheduled {count['scheduled cells']:,}, "
          f"one split per plan {count['least cells']:,}")
    top = sorted(groups.items(), key=lambda item: -item[1][0])[:5]
    print("  most scheduled cells: " + "; ".join(f"pp {pp}, m {m}: {cells:,} ({n} plans)"
                                              for (pp, m), (cells, n) in top))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="t5")
    parser.add_argument("--nodes", nargs="+", default=["a10=8", "a100=1,a10=7"])
    args = parser.parse_args()
    for nodes in args.nodes:
        analyse(args.model, nodes)


if __name__ == "__main__":
    main()
