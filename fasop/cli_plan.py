"""Command line of the commands that start from one row of a results CSV: `fasop export`,
`fasop explain`, `fasop plot`. Registered by cli.build_parser; run by cli.main."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fasop.errors import FasopError

COMMANDS = ("export",)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _add_row_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--from", dest="source", required=True, metavar="CSV",
                        help="a CSV written by fasop search or fasop pareto")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--rank", type=_positive, metavar="N",
                       help="the plan whose rank column is N (default 1; a pareto CSV: its knee)")
    which.add_argument("--row", type=_positive, metavar="K", help="the K-th data row of the CSV")
    parser.add_argument("--model", help="name in model_specs/ or path (default: from a default CSV name "
                        "<model>_<cluster>_...csv)")
    parser.add_argument("--cluster", help="name in cluster_specs/ or path (default: from the CSV name)")


def add_plan_parsers(sub) -> None:
    from fasop.export import TARGETS

    e = sub.add_parser("export", help="launch settings for one plan: Megatron-LM, torchtitan, node-rank table",
                       description="Turn one plan of a results CSV into Megatron-LM arguments, a torchtitan "
                       "recipe, or the node order with a torchrun command per node.")
    _add_row_args(e)
    e.add_argument("--target", choices=TARGETS, required=True)
    e.add_argument("--out", help="write the text to this file (default: standard output)")


def row_plan(args: argparse.Namespace):
    """(RowPlan, model, cluster) of the row the arguments choose."""
    from fasop.rowplan import pick_row, plan_of_row, read_rows, specs_from_name
    from fasop.specs import load_cluster, load_model

    guessed_model, guessed_cluster = specs_from_name(args.source)
    for flag, given, guess in (("--model", args.model, guessed_model), ("--cluster", args.cluster, guessed_cluster)):
        if given is None and guess is None:
            raise FasopError(f"{flag}: required ({args.source} is not named <model>_<cluster>_...csv)")
    rows = read_rows(args.source)
    row, where = pick_row(args.source, rows, rank=args.rank, row=args.row)
    try:
        model = load_model(args.model or guessed_model)
        cluster = load_cluster(args.cluster or guessed_cluster)
    except FasopError as exc:
        if args.model and args.cluster:
            raise
        raise FasopError(f"{exc} (guessed from the name {Path(args.source).name}; give --model and --cluster)") \
            from None
    return plan_of_row(row, where, model, cluster), model, cluster


def run_plan_command(args: argparse.Namespace) -> int:
    if args.command == "export":
        return _export(args)
    raise AssertionError(args.command)


def _export(args: argparse.Namespace) -> int:
    from fasop.export import export
    from fasop.report import write_atomic

    rp, model, _ = row_plan(args)
    result = export(rp, model, args.target)
    for warning in result.warnings:
        print(f"fasop: warning: {warning}", file=sys.stderr)
    if args.out:
        try:
            write_atomic(args.out, result.text)
        except OSError as exc:
            raise FasopError(f"--out: cannot write {args.out!r}: {exc.strerror}") from None
        print(f"wrote {args.out}")
    else:
        sys.stdout.write(result.text)
    return 0
