"""Issue 29, speed: `fasop search --model deepseek-v3 --cluster aws --nodes p5=16,p6-b200=16
--heterogeneous --top 10` (goal <= 60 s on 2 cores; the shipped spec, and `deepseek-config`: the
bare tests/data/hf/deepseek-v3.json, sequence 4,096 and global batch 256 assumed) and `fasop search --model llama-3-70b
--cluster aws --nodes p5=8,p4de=8 --heterogeneous --cp 1,2,4 --zero 1,3` (goal <= 10 s), this tree
against main before the tighter order floor (BASELINE, extracted with `git archive`, or any
checkout given with --baseline-tree), runs alternated in the same invocation, medians of --runs,
wall and CPU seconds (user + system of the child: the steadier figure on a shared machine).
Same results: the CSVs are equal byte for byte.

    python benchmarks/bench_issue29_moe_search.py [--runs 3] [--only deepseek|deepseek-config|llama]
"""

from __future__ import annotations

import sys
from pathlib import Path

from issue31 import compare_trees, parser

BASELINE = "969a48331fa26dad2b08d59eb6d9708dce4f13e6"
"""main before slots.py's pipeline floor (the analytic order bounds' L cheapest layers anywhere)."""

COMMANDS = {
    "deepseek": ["search", "--model", "deepseek-v3", "--cluster", "aws", "--nodes", "p5=16,p6-b200=16",
                 "--heterogeneous", "--top", "10", "--out", "{out}", "--no-progress"],
    "deepseek-config": ["search", "--model", "tests/data/hf/deepseek-v3.json", "--cluster", "aws", "--nodes",
                        "p5=16,p6-b200=16", "--heterogeneous", "--top", "10", "--out", "{out}", "--no-progress"],
    "llama": ["search", "--model", "llama-3-70b", "--cluster", "aws", "--nodes", "p5=8,p4de=8", "--heterogeneous",
              "--cp", "1,2,4", "--zero", "1,3", "--out", "{out}", "--no-progress"],
}


def main() -> int:
    p = parser(__doc__)
    p.set_defaults(baseline=BASELINE)
    p.add_argument("--only", choices=sorted(COMMANDS), help="one of the searches")
    args = p.parse_args()
    commands = [(name, argv, "out") for name, argv in COMMANDS.items() if args.only in (None, name)]
    return compare_trees(args, commands, lambda a, b: Path(a).read_bytes() == Path(b).read_bytes())


if __name__ == "__main__":
    sys.exit(main())
