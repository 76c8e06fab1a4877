"""What issue 31's two Pareto rows share: the command, the frontier comparison and the script itself."""

from __future__ import annotations

import csv
from pathlib import Path

from issue31 import compare_trees, parser


def command(max_nodes: str, tokens: str, workers: int) -> list[str]:
    return ["pareto", "--model", "llama-3-70b", "--cluster", "aws", "--max-nodes", max_nodes, "--tokens", tokens,
            "--workers", str(workers), "--out-prefix", "{out}", "--no-progress"]


def frontier(path: Path) -> list[dict]:
    """The frontier rows (every column but `rank`) and the knee: what pruning must leave unchanged.
    `rank` counts the compositions searched to a fitting plan that are faster, which depends on
    which the bound prunes: it differs between any two bounds, and from `--exhaustive`."""
    with open(path, newline="") as fh:
        return [{k: v for k, v in r.items() if k != "rank"} for r in csv.DictReader(fh) if r["on_frontier"] == "True"]


def same_frontier(a: Path, b: Path) -> bool:
    return frontier(a) == frontier(b) != []


def run(doc: str, max_nodes: str) -> int:
    """One Pareto row's benchmark: `max_nodes` the default inventory (--max-nodes to change)."""
    p = parser(doc)
    p.add_argument("--max-nodes", default=max_nodes)
    p.add_argument("--tokens", default="15000000000000")
    p.add_argument("--workers", type=int, default=1)
    args = p.parse_args()
    return compare_trees(args, [("pareto", command(args.max_nodes, args.tokens, args.workers), "out_pareto.csv")],
                         same_frontier)
