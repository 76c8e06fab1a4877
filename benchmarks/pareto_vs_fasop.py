"""fasop pareto's frontier against FASOP's, point by point (issue 4).

FASOP's frontier is computed from the original program's sweep
(../shared/reference/fasop/outputs/gpt2xl_pareto_sweep.csv, or --reference): each
composition's fastest plan that fits, priced as usd_per_step x 12,500,000, then the
non-dominated set. fasop's comes from a `fasop pareto` CSV (--ours; default: run
`fasop pareto --model gpt2xl --cluster fasop-paper-pareto --max-nodes a100=8,a10=8` with the
defaults into a temporary folder). For every FASOP frontier point it prints the fastest fasop
frontier time at no higher cost and the gain.

    python benchmarks/pareto_vs_fasop.py [--ours P_pareto.csv] [--reference PATH]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parent.parent
ITERATIONS = 12_500_000


def fasop_frontier(reference: Path) -> list[tuple[str, float, float]]:
    rows = pd.read_csv(reference)
    rows = rows[~rows["is_oom"]]
    best = rows.sort_values("step_time_s", kind="stable").groupby(["num_a100_nodes", "num_a10_nodes"]).head(1)
    points = [("+".join(f"{n}x{t}" for n, t in ((int(a), "a100"), (int(b), "a10")) if n), s * ITERATIONS / 3600, c)
              for a, b, s, c in best[["num_a100_nodes", "num_a10_nodes", "step_time_s", "train_cost_usd"]].values]
    front = [p for p in points if not any(q[1] <= p[1] and q[2] <= p[2] and (q[1] < p[1] or q[2] < p[2])
                                          for q in points)]
    return sorted(front, key=lambda p: p[1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ours", help="a fasop pareto CSV (default: run fasop pareto with its defaults)")
    parser.add_argument("--reference", default=str(REPO.parent / "shared" / "reference" / "fasop" / "outputs" /
                                                   "gpt2xl_pareto_sweep.csv"))
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        ours_path = args.ours
        if ours_path is None:
            prefix = Path(tmp) / "gpt2xl"
            subprocess.run([sys.executable, "-m", "fasop", "pareto", "--model", "gpt2xl", "--cluster",
                            "fasop-paper-pareto", "--max-nodes", "a100=8,a10=8", "--iterations", str(ITERATIONS),
                            "--out-prefix", str(prefix), "--no-progress"], cwd=REPO, check=True,
                           stdout=subprocess.DEVNULL)
            ours_path = f"{prefix}_pareto.csv"
        ours = pd.read_csv(ours_path)
    ours = ours[ours["status"] == "ok"]
    print(f"{'FASOP frontier point':20s} {'FASOP h':>9s} {'FASOP USD':>10s} {'fasop h':>9s} {'gain':>6s}")
    for label, hours, cost in fasop_frontier(Path(args.reference)):
        best = ours.loc[ours["train_cost_usd"] <= cost, "train_time_h"].min()
        print(f"{label:20s} {hours:9.1f} {cost:10.0f} {best:9.1f} {100 * (hours - best) / hours:5.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
