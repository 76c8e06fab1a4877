"""`fasop validate FILE.csv`: parser and command (logic in fasop/report/validate.py).

Exit status: 0 when the time MAPE is at most --max-mape (or none is given), 1 above it,
2 for bad input (one line on stderr).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fasop.core.errors import FasopError


def add_parser(sub) -> None:
    v = sub.add_parser("validate", help="compare the analytic estimator with measured training runs",
                       description="Predict each measured run of FILE.csv (one row a run; columns in docs/validate.md) "
                       "with the analytic estimator; print predicted vs measured, the mean "
                       "absolute percentage error (MAPE) and the largest error.")
    v.add_argument("file", metavar="FILE.csv", help="measured runs")
    v.add_argument("--out", help="CSV of the per-row predictions to write")
    v.add_argument("--as-searched", action="store_true",
                   help="the rows' empty software cells are the row's cluster's constants, as fasop search estimated "
                   "the plans (runs of plans fasop proposed); default: what each GPU's published runs had")
    v.add_argument("--max-mape", type=_percent, metavar="PCT",
                   help="exit 1 when the time MAPE is above PCT percent")
    v.add_argument("--calibration", metavar="OVERLAY.yaml",
                   help="apply a `fasop calibrate` overlay to the catalog's constants; see docs/calibrate.md")


def _percent(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a percentage >= 0, got {text!r}")
    return value


def run(args: argparse.Namespace) -> int:
    from fasop.report.results import csv_text, significant, write_atomic
    from fasop.report.validate import report_rows, validate
    from fasop.report.validate_rows import unread_note

    from fasop.report.output import not_the_input

    if args.out:   # before the work, not after
        not_the_input(Path(args.out), args.file, "--out", "the runs CSV it reads")
        not_the_input(Path(args.out), args.calibration, "--out", "the calibration overlay it reads")
    params = None
    if args.calibration:
        from fasop.specs.calibration import apply_calibration, load_calibration
        from fasop.specs.catalog import default_params

        params = apply_calibration(load_calibration(args.calibration), default_params())
    report = validate(args.file, params, as_searched=args.as_searched)
    if report.ignored_columns:
        print(unread_note(args.file, report.ignored_columns), file=sys.stderr)
    columns, rows = report_rows(report)
    if args.out:
        try:
            write_atomic(Path(args.out), csv_text(columns, significant(rows)))  # 6 digits, as search's CSVs
        except OSError as exc:
            raise FasopError(f"--out: cannot write {args.out!r}: {exc.strerror}") from None
    names = [row["name"] or f"{row['num_gpus']}x{row['gpu']} tp{row['tp']} pp{row['pp']} dp{row['dp']}" for row in rows]
    width = max([24] + [min(len(n), NAME_WIDTH) for n in names])   # a name past NAME_WIDTH is cut
    print(f"{'run':<{width}} {'measured s':>11} {'predicted s':>12} {'error':>8}  picked")
    for name, row in zip(names, rows):
        fits = "" if row["fits"] else "  (does not fit in memory)"
        print(f"{name[:width]:<{width}} {row['measured_seconds_per_iter']:>11.3f} "
              f"{row['predicted_seconds_per_iter']:>12.3f} {row['error_pct']:>+7.1f}%  {row['picked'] or '-'}{fits}")
    print(f"time: MAPE {report.mape:.1f} %, max |error| {report.max_error:.1f} %, "
          f"mean signed {report.mean_signed_error:+.1f} % over {_runs(len(rows))}")
    memory = report.memory_errors
    if memory:
        print(f"memory: MAPE {100 * sum(map(abs, memory)) / len(memory):.1f} %, "
              f"max |error| {100 * max(map(abs, memory)):.1f} % over {_runs(len(memory))}")
    if args.out:
        print(f"wrote {args.out}")
    if args.max_mape is not None and report.mape > args.max_mape:
        print(f"fasop: time MAPE {report.mape:.1f} % is above --max-mape {args.max_mape:g} %")
        return 1
    return 0


NAME_WIDTH = 60
"""The widest run name the table prints whole."""


def _runs(n: int) -> str:
    return f"{n} run{'s' * (n != 1)}"
