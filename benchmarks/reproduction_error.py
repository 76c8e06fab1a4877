"""Largest deviation of fasop's FASOP-mode output from the original program's, per experiment
(issue 2): relative for times and dollars, absolute GiB for memory, and mismatch counts for
partition / is_oom / is_zero_oom. The test (tests/test_reproduction.py) asserts the bounds;
this prints the measured values.

    python benchmarks/reproduction_error.py
"""

from __future__ import annotations

import csv
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data"
RENAME = {"p4d.24xlarge": "a100", "g5.24xlarge": "a10"}
RELATIVE = ("step_time_s", "pipeline_time_s", "dp_allreduce_s", "embedding_allreduce_s", "usd_per_step",
            "train_cost_usd")
EXPERIMENTS = [("bert", "a10=4", "bert_homogeneous"), ("bert", "a100=1,a10=3", "bert_heterogeneous"),
               ("gpt2xl", "a10=8", "gpt2xl_homogeneous"), ("gpt2xl", "a100=1,a10=7", "gpt2xl_heterogeneous"),
               ("t5", "a10=8", "t5_homogeneous"), ("t5", "a100=1,a10=7", "t5_heterogeneous")]


def key(row: dict) -> tuple:
    placement = "-".join(RENAME.get(x, x) for x in row["node_placement"].split("-"))
    return row["mbs"], row["tp"], row["dp"], row["pp"], placement


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        for model, nodes, reference in EXPERIMENTS:
            out = Path(tmp) / f"{reference}.csv"
            subprocess.run([sys.executable, "-m", "fasop", "search", "--model", model, "--cluster", "fasop-paper",
                            "--nodes", nodes, "--heterogeneous", "--placements", "cyclic", "--partitioner",
                            "fasop-minmax", "--iterations", "12500000", "--out", str(out), "--no-progress"],
                           cwd=REPO, check=True, stdout=subprocess.DEVNULL)
            mine = {key(r): r for r in csv.DictReader(out.open())}
            ref = {key(r): r for r in csv.DictReader((DATA / f"{reference}.csv").open())}
            rel = max(abs(float(mine[k][c]) - float(r[c])) / abs(float(r[c]))
                      for k, r in ref.items() for c in RELATIVE if float(r[c]))
            gib = max(abs(float(mine[k][c]) - float(r[c])) for k, r in ref.items()
                      for c in ("oom_gpumem_gib", "zero_oom_gpumem_gib"))
            flags = sum(mine[k][c] != r[c] for k, r in ref.items() for c in ("partition", "is_oom", "is_zero_oom"))
            print(f"{reference:22s} rows {len(mine)}/{len(ref)} same keys {set(mine) == set(ref)} | max rel. error "
                  f"{rel:.2e} | max memory error {gib:.1e} GiB | partition/OOM mismatches {flags}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
