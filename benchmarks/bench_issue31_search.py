"""Issue 31, row 3: the default heterogeneous search `fasop search --model llama-3-70b --cluster aws
--nodes p5=4,p4de=4,g6e=4 --heterogeneous` (5.3 million plans, the 5 fastest kept by the order
tree), this tree against main before issue 31, medians of --runs; goal <= 3 s. Same results:
the CSVs are equal byte for byte.

    python benchmarks/bench_issue31_search.py [--runs 3] [--nodes p5=4,p4de=4,g6e=4]
"""

from __future__ import annotations

import sys
from pathlib import Path

from issue31 import compare_trees, parser


def main() -> int:
    p = parser(__doc__)
    p.add_argument("--nodes", default="p5=4,p4de=4,g6e=4")
    args = p.parse_args()
    argv = ["search", "--model", "llama-3-70b", "--cluster", "aws", "--nodes", args.nodes, "--heterogeneous",
            "--out", "{out}", "--no-progress"]
    return compare_trees(args, [("search", argv, "out")], lambda a, b: Path(a).read_bytes() == Path(b).read_bytes())


if __name__ == "__main__":
    sys.exit(main())
