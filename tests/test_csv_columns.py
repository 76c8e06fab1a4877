"""CSV columns a user acts on (issue 30, item 5): floats of analytic-estimator CSVs to 6
significant digits (FASOP-2024 CSVs keep full precision: the six experiments byte for byte),
`oom_gpumem_gib` the peak stage's memory, and a Pareto CSV's `rank` its rank in the file.
"""

from __future__ import annotations

import csv
import re

from fasop.cli.command import main
from fasop.report.results import significant


def _rows(path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def _digits(cell: str) -> int:
    """Significant digits of a decimal float cell as Python writes it (72.2058 -> 6, 0.0499451 -> 6)."""
    mantissa = cell.lower().split("e")[0].lstrip("-").replace(".", "").lstrip("0").rstrip("0")
    return len(mantissa)


def test_significant_rounds_floats_only():
    rows = significant([{"a": 72.20577419810917, "b": 0.04994508356923076, "c": 11010197.19280118, "d": 3,
                         "e": True, "f": "38.80-28.84", "g": 0.0}])
    assert rows == [{"a": 72.2058, "b": 0.0499451, "c": 11010200.0, "d": 3, "e": True, "f": "38.80-28.84", "g": 0.0}]


def test_analytic_csv_floats_have_at_most_6_significant_digits(tmp_path):
    out = tmp_path / "l8.csv"
    assert main(["search", "--model", "llama-3-8b", "--cluster", "aws", "--nodes", "p4d=2", "--out", str(out),
                 "--no-progress", "--show", "0"]) == 0
    rows = _rows(out)
    floats = [v for r in rows for v in r.values() if re.fullmatch(r"-?\d+\.\d+(e[-+]\d+)?", v)]
    assert floats and max(map(_digits, floats)) <= 6
    for r in rows:  # the peak stage's memory
        assert float(r["oom_gpumem_gib"]) == max(map(float, r["stage_memory_gib"].split("-"))) or \
            abs(float(r["oom_gpumem_gib"]) - max(map(float, r["stage_memory_gib"].split("-")))) < 0.006


def test_fasop_2024_csv_keeps_full_precision(tmp_path):
    out = tmp_path / "g.csv"
    assert main(["search", "--model", "gpt2xl", "--cluster", "fasop-paper", "--nodes", "a100=1", "--out", str(out),
                 "--no-progress", "--show", "0"]) == 0
    cells = [r["step_time_s"] for r in _rows(out)]
    assert max(map(_digits, cells)) > 6


def test_pareto_rank_is_the_rank_in_the_file(tmp_path, capsys):
    prefix = tmp_path / "p"
    assert main(["pareto", "--model", "gpt2xl", "--cluster", "fasop-paper-pareto", "--max-nodes", "a100=1,a10=2",
                 "--out-prefix", str(prefix), "--no-progress", "--workers", "1"]) == 0
    rows = _rows(tmp_path / "p_pareto.csv")
    fits = [r for r in rows if r["status"] == "ok"]
    ranked = sorted(fits, key=lambda r: (float(r["train_time_h"]), float(r["train_cost_usd"])))
    assert [r["rank"] for r in ranked] == [str(k) for k in range(1, len(fits) + 1)]
    assert all(r["rank"] == "" for r in rows if r["status"] != "ok")
