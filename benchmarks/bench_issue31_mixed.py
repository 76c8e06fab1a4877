"""Issue 31, row 5: FASOP's two mixed experiments with the default search, every split proven
(`fasop search --model gpt2xl|t5 --cluster fasop-paper --nodes a100=1,a10=7 --heterogeneous`), this
tree against main before issue 31, medians of --runs; goal <= 1 s with 0 unproven splits. Same
results: the CSVs are equal byte for byte; the unproven splits (column partition_proven_optimal
False) of this tree's CSV are counted and printed.

    python benchmarks/bench_issue31_mixed.py [--runs 3]
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

from issue31 import compare_trees, parser


def unproven(path: Path) -> int:
    with open(path, newline="") as fh:
        return sum(r["partition_proven_optimal"] == "False" for r in csv.DictReader(fh))


def same(a: Path, b: Path) -> bool:
    print(f"  unproven splits: baseline {unproven(a)}, this tree {unproven(b)}")
    return Path(a).read_bytes() == Path(b).read_bytes()


def main() -> int:
    args = parser(__doc__).parse_args()
    commands = [(model, ["search", "--model", model, "--cluster", "fasop-paper", "--nodes", "a100=1,a10=7",
                         "--heterogeneous", "--out", "{out}", "--no-progress"], "out") for model in ("gpt2xl", "t5")]
    return compare_trees(args, commands, same)


if __name__ == "__main__":
    sys.exit(main())
