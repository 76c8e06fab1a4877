"""What issue 31's two Pareto rows share: the command and the frontier comparison."""

from __future__ import annotations

import csv
from pathlib import Path


def command(max_nodes: str, tokens: str, workers: int) -> list[str]:
    return ["pareto", "--model", "llama-3-70b", "--cluster", "aws", "--max-nodes", max_nodes, "--tokens", tokens,
            "--workers", str(workers), "--out", "{out}", "--no-progress"]


def frontier(path: Path) -> list[dict]:
    """The frontier rows (every column) and the knee: what pruning must leave unchanged."""
    with open(path, newline="") as fh:
        return [r for r in csv.DictReader(fh) if r["on_frontier"] == "True"]


def same_frontier(a: Path, b: Path) -> bool:
    return frontier(a) == frontier(b) != []
