"""Issue 31, row 2: `fasop pareto --model llama-3-70b --cluster aws --max-nodes p5=8,p4de=8,g6e=8,p4d=8
--tokens 15000000000000` (6,561 compositions), this tree against main before issue 31, medians of --runs.

The full row takes the baseline hours, so by default this runs
the same question on p5=2,p4de=2,g6e=2,p4d=2 (80 compositions) with one worker; `--max-nodes
p5=8,p4de=8,g6e=8,p4d=8 --workers 2` is the row itself (goal: <= 120 s). Same results: the frontier rows
(every column but rank, the knee's flag included) of both CSVs are equal.

    python benchmarks/bench_issue31_pareto_4types.py [--runs 3] [--max-nodes p5=8,p4de=8,g6e=8,p4d=8] [--workers 2]
"""

from __future__ import annotations

import sys

from _pareto_row import run


if __name__ == "__main__":
    sys.exit(run(__doc__, "p5=2,p4de=2,g6e=2,p4d=2"))
