"""FSDP shards, gathers and reduces routed experts over their own expert data-parallel rings
(data_parallel.expert_rings), and the order search's FSDP gather floor follows: the pruned search
still finds the fastest plans that every-plan estimation ranks first, on a mixed cluster, under
FSDP and (the same search without it) ZeRO 1."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from fasop.cli.command import main

QWEN = Path(__file__).resolve().parent / "data" / "hf" / "qwen3-30b-a3b.json"
KEY = ("tp", "dp", "pp", "mbs", "ep", "zero", "node_placement", "partition", "step_time_s")


def _rows(path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.mark.parametrize("zero", ["1", "3"])
def test_pruned_search_finds_every_plans_fastest(tmp_path, zero):
    base = ["search", "--model", str(QWEN), "--cluster", "aws", "--nodes", "p5=2,p4de=2", "--heterogeneous",
            "--zero", zero, "--ep", "2,4,8", "--no-progress", "--show", "0", "--iterations", "1"]
    assert main(base + ["--top", "5", "--out", str(tmp_path / "top.csv")]) == 0
    assert main(base + ["--every-plan", "--out", str(tmp_path / "all.csv")]) == 0
    top = [tuple(r[k] for k in KEY) for r in _rows(tmp_path / "top.csv")]
    fit = [r for r in _rows(tmp_path / "all.csv") if r["is_oom"] == "False"]
    fit.sort(key=lambda r: float(r["step_time_s"]))
    assert len(top) == 5 and all(int(t[KEY.index("ep")]) > 1 for t in top)
    assert [float(t[-1]) for t in top] == [float(r["step_time_s"]) for r in fit[:5]]
    assert set(top) <= {tuple(r[k] for k in KEY) for r in fit}
