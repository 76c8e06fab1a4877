"""How much 1F1B scheduling FASOP's encoder-decoder partitioner needs, and why (issue 3).

With fasop-minmax, a T5 plan of pp stages has up to pp - 1 candidate splits (one per number of
encoder stages); FASOP schedules every one and keeps the one whose stage 0 ends first (the first
of equals). fasop (`fasop2024_plans._least_ends`) schedules each plan's split of least lower
bound, then only those whose bound is at most the stage-0 end it got; this script counts, per
FASOP experiment with an encoder-decoder model, with the Python schedule (`one_f_one_b`, the same
values as the kernel):

- candidate splits, and those the bound leaves to schedule when they are scheduled one at a
  time in order of their bounds (fasop's two passes may schedule a few more),
  with their pipeline cells (stages x micro-batches, what a schedule run costs);
- the least work: one split per plan (its cells);
- of the scheduled splits that lose, how many end within 1e-12 (relative) of the winner: splits
  that tie with it in exact arithmetic and differ only by rounding (no bound of the stage times
  alone can rule those out: which one FASOP keeps is decided by the last bits of their schedules);
- what critical paths leave: scheduling one split at a time, each time the one of least bound
  among those that may still win, every split left also bounded by the float sum of its
  durations along each run's critical path (exact: float addition is monotone), as a traced
  scheduler could (fasop's compiled one did until the FASOP rules left C);
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

from fasop.estimators.fasop2024.estimator import Fasop2024Estimator  # noqa: E402
from fasop.plans.enumerate import cyclic_placements, degree_list, plans  # noqa: E402
from fasop.schedule.pipeline import Schedule, one_f_one_b  # noqa: E402
from fasop.search.engine import parse_nodes  # noqa: E402
from fasop.specs.load import load_cluster, load_model  # noqa: E402


def kernel_bound(estimator, times: np.ndarray, m: int, first: float, last: float) -> float:
    """The lower bound on stage 0's end that fasop schedules candidates by (`fasop2024_plans.end_bounds`)."""
    pp = len(times)
    before = np.concatenate([[0.0], np.cumsum(times)[:-1]])
    own = before + m * times
    own[1:] += first
    own[-1] += last
    chain = times.sum() + first + last + (estimator.steady_weights(pp, m) * times).max()
    return max(chain, own.max()) * (1 - 1e-9)


def by_critical_paths(estimator, rows: list[np.ndarray], bounds: list[float], m: int, first: float, last: float
                      ) -> tuple[int, int]:
    """(the chosen split, the number scheduled) when splits are scheduled one at a time, each time
    the one of least bound (the first of equals) that may still win, every split left then also
    bounded by its durations summed along the run's critical path (`Schedule.critical_path`)."""
    pp = len(rows[0])
    kinds = ("fwd", "bwd", "send_fwd", "send_bwd")

    def durations(t: np.ndarray) -> list[float]:
        sends = [0.0] * (2 * pp)
        sends[0], sends[-1] = first, last
        return [*np.concatenate(estimator.split(t)), *sends]

    bounds, left, best, chosen, runs = list(bounds), set(range(len(rows))), np.inf, -1, 0
    while True:
        open_ = [k for k in left if bounds[k] < best or (bounds[k] == best and k < chosen)]
        if not open_:
            return chosen, runs
        k = min(open_, key=lambda q: (bounds[q], q))
        left.discard(k)
        d = durations(rows[k])
        schedule = Schedule(d[:pp], d[pp:2 * pp], m, d[2 * pp:3 * pp], d[3 * pp:])
        end, runs = schedule.pipeline_time_s, runs + 1
        if end < best or (end == best and k < chosen):
            best, chosen = end, k
        path = [kinds.index(e.kind) * pp + e.stage for e in (schedule.events[i] for i in schedule.critical_path(0))]
        for q in left:
            other, total = durations(rows[q]), 0.0
            for row in path:
                total += other[row]
            bounds[q] = max(bounds[q], total)


def analyse(model_name: str, nodes: str) -> None:
    model = load_model(REPO / "fasop" / "data" / "model_specs" / f"{model_name}.yaml")
    cluster = load_cluster(REPO / "fasop" / "data" / "cluster_specs" / "fasop-paper.yaml")
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
        if key in seen:  # fasop schedules plans of equal inputs once
            continue
        seen.add(key)
        comp = np.array(rows).T
        forward, backward = np.zeros_like(comp), np.zeros_like(comp)
        forward[0], backward[-1] = sends[0], sends[-1]
        ends = one_f_one_b(*estimator.split(comp), forward, backward, m)[0]
        bounds = [kernel_bound(estimator, t, m, sends[0], sends[-1]) for t in rows]
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
        traced = by_critical_paths(estimator, rows, bounds, m, sends[0], sends[-1])
        assert traced[0] == int(np.argmin(ends)), "the critical-path bounds lost the winner"
        cells = plan.pp * m
        count["traced"] += traced[1]
        count["traced cells"] += traced[1] * cells
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
    print(f"  with critical-path bounds: {count['traced']} scheduled")
    print(f"  pipeline cells: all candidates {count['candidate cells']:,}, scheduled {count['scheduled cells']:,}, "
          f"with critical-path bounds {count['traced cells']:,}, one split per plan {count['least cells']:,}")
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
