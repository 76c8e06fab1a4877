"""Command line of the commands that start from one row of a results CSV: `fasop export`,
`fasop explain`, `fasop plot`. Registered by cli.build_parser; run by cli.main."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fasop.errors import FasopError

COMMANDS = ("export", "explain")


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
    x = sub.add_parser("explain", help="why one plan is as fast as it is: per-stage time and memory",
                       description="Estimate one plan of a results CSV again with its own layer split and "
                       "break it down: per stage GPU, nodes, layers, compute, p2p, idle time, memory by part "
                       "against capacity; the whole plan's bubble, all-reduces, step time, throughput, cost.")
    _add_row_args(x)
    x.add_argument("--json", action="store_true", help="one JSON object (SI units: seconds, bytes, FLOP)")
    x.add_argument("--peak-tflops", metavar="GPU=TFLOPS[,GPU=TFLOPS...]",
                   help="dense 16-bit peak of each GPU type, for the model FLOPs utilisation (e.g. A100=312)")


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
    if args.command == "explain":
        return _explain(args)
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


def _peaks(text: str | None) -> dict[str, float]:
    """`A100=312,A10=125` -> FLOP/s per GPU type."""
    peaks = {}
    for item in (text or "").split(","):
        if not item:
            continue
        gpu, _, value = item.partition("=")
        try:
            tflops = float(value)
        except ValueError:
            tflops = 0.0
        if not gpu or not 0 < tflops < float("inf"):
            raise FasopError(f"--peak-tflops: expected GPU=TFLOPS with TFLOPS > 0, got {item!r}")
        peaks[gpu] = tflops * 1e12
    return peaks


def _explain(args: argparse.Namespace) -> int:
    import json

    from fasop.estimate import Fasop2024Estimator
    from fasop.explain import explain, render

    peaks = _peaks(args.peak_tflops)
    rp, model, cluster = row_plan(args)
    estimator = Fasop2024Estimator(model, cluster, inventory_of(rp), partitioner="optimal")
    x = explain(rp, model, cluster, estimator, peak_flop_per_s=peaks)
    if args.json:
        print(json.dumps(x.to_dict(), indent=1, allow_nan=False))
    else:
        sys.stdout.write(render(x))
    return 0


def inventory_of(rp) -> tuple:
    """The row's inventory in the order of its num_nodes_<type> columns (the order of the search's
    --nodes), else the plan's nodes."""
    by_name = {n.name: n for n in rp.plan.placement}
    counts = [(c[len("num_nodes_"):], rp.row[c]) for c in rp.row if c.startswith("num_nodes_")]
    inventory = tuple(by_name[name] for name, n in counts if name in by_name and n.isdigit()
                      for _ in range(int(n)))
    return inventory if sorted(n.name for n in inventory) == sorted(n.name for n in rp.plan.placement) \
        else rp.plan.placement
