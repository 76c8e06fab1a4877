"""`fasop calibrate RUNS.csv [--out overlay.yaml] [--fit NAME,...]`: parser and command (the fit
is fasop/report/calibrate.py, the overlay fasop/specs/calibration.py; docs/calibrate.md).

Exit status: 0 fitted, 2 bad input or nothing the runs identify (one line on stderr).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_parser(sub) -> None:
    c = sub.add_parser("calibrate", help="fit the analytic estimator's physical parameters to your measured runs",
                       description="Fit, to the measured runs of RUNS.csv (fasop validate's columns), the physical "
                       "parameters they identify: per GPU type its matmul efficiency, memory-bound efficiency and "
                       "per-layer overhead, per link kind its achieved share of the bandwidth. Prints each "
                       "parameter before -> after, the MAPE and largest error before -> after and a leave-one-out "
                       "MAPE; --out writes the overlay that search, pareto and validate take with --calibration. "
                       "See docs/calibrate.md.")
    c.add_argument("file", metavar="RUNS.csv", help="measured runs (fasop validate's CSV)")
    c.add_argument("--out", metavar="OVERLAY.yaml", help="write the fitted overlay here (atomically)")
    c.add_argument("--as-searched", action="store_true",
                   help="the rows' empty software cells (fused_attention, overlap_grad_reduce, moe_dispatcher, ...) "
                   "are the row's cluster's constants, as fasop search estimated the plans -- for runs of plans fasop "
                   "proposed; default: what each GPU's published runs had (docs/validate.md)")
    c.add_argument("--fit", metavar="NAME[,NAME...]", type=lambda t: tuple(n.strip() for n in t.split(",")),
                   help="fit only these parameters (e.g. gpus.A100-SXM4-80GB.matmul_efficiency,"
                   "link_efficiency.network); refused when the runs cannot identify one (default: every "
                   "parameter of the runs' GPU types and the link kinds, those the runs cannot identify kept at "
                   "their prior with a note)")


def run(args: argparse.Namespace) -> int:
    from fasop.report.calibrate import calibrate
    from fasop.report.output import check_target, user_path
    from fasop.report.results import write_atomic
    from fasop.report.validate_rows import unread_note
    from fasop.specs.calibration import bounds_of, calibration_text

    from fasop.cli.args import ProgressBar
    from fasop.report.output import not_the_input

    out = user_path(args.out, "--out")
    if out is not None:
        check_target(out, "--out")   # before the fit, not after
        not_the_input(out, args.file, "--out", "the runs CSV it reads")
    with ProgressBar(False, "calibrate", "fits") as progress:
        fit = calibrate(args.file, only=args.fit or (), progress=progress, as_searched=args.as_searched)
    if fit.unread_columns:
        print(unread_note(args.file, fit.unread_columns), file=sys.stderr)
    print(f"{'parameter':<48} {'before':>10} {'after':>10}")
    for name, before in fit.priors.items():
        after = f"{fit.fitted[name]:>10.4g}" if name in fit.fitted else f"{'(prior)':>10}"
        print(f"{name:<48} {before:>10.4g} {after}")
    for note in fit.notes:
        print(f"note: {note}")
    for name, value in fit.fitted.items():
        low, high = bounds_of(name)
        if value == high or (value == low and name.endswith("_s")):
            print(f"note: {name}: at its bound {value:g}: the runs push it past its physical range (a cost the model "
                  "lacks, or runs that disagree)")
    print(f"{'run':<28} {'measured s':>11} {'before s':>10} {'after s':>10} {'left out s':>11}")
    left_out = fit.left_out or (None,) * len(fit.measured)
    for label, m, b, a, lo in zip(fit.labels, fit.measured, fit.before, fit.after, left_out):
        print(f"{label[:28]:<28} {m:>11.4g} {b:>10.4g} {a:>10.4g} {'-' if lo is None else format(lo, '.4g'):>11}")
    runs = len(fit.measured)
    loo = f"leave-one-out MAPE {fit.mape(fit.left_out):.1f} % over {runs} runs" if fit.left_out else \
        "over 1 run (no leave-one-out: nothing to fit without it)"
    summary = (f"MAPE {fit.mape(fit.before):.1f} % -> {fit.mape(fit.after):.1f} %, max |error| "
               f"{fit.max_error(fit.before):.1f} % -> {fit.max_error(fit.after):.1f} %, {loo}")
    print(summary)
    if out is not None:
        n = len(fit.fitted)
        searched = " --as-searched" if args.as_searched else ""
        comments = (f"fasop calibrate {Path(args.file).name}{searched}: {n} parameter{'s' * (n != 1)} fitted",
                    summary, "apply with: fasop search|pareto|validate ... --calibration <this file>"
                    + (" (validate: with --as-searched, as fitted)" if searched else ""))
        write_atomic(out, calibration_text(fit.calibration, comments), "--out")
        print(f"wrote {out}")
    else:
        print("(--out OVERLAY.yaml writes the overlay for --calibration)")
    return 0
