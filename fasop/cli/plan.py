"""Command line of the commands that start from one row of a results CSV: `fasop export`,
`fasop explain`, `fasop plot`. Registered by cli.build_parser; run by cli.main."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fasop.cli import recipes as cli_recipes
from fasop.cli.plan_source import estimator_for, inventory_of, recipe_of, row_plan  # noqa: F401 (tests, plot)
from fasop.core.errors import FasopError
from fasop.plans.plan import abbreviate

COMMANDS = ("export", "explain", "plot")
FIGURES = ("timeline", "breakdown", "memory", "frontier")
DEFAULT_TOP = 8


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _add_row_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--from", dest="source", metavar="CSV",
                        help="a CSV written by fasop search or fasop pareto (or give the plan by flags: --placement ...)")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--rank", type=_positive, metavar="N",
                       help="the plan whose rank column is N (default 1; a pareto CSV: its knee, or rank 1 without one)")
    which.add_argument("--row", type=_positive, metavar="K", help="the K-th data row of the CSV")
    parser.add_argument("--model", help="name in model_specs/ or path (default: from a default CSV name "
                        "<model>_<cluster>_...csv)")
    parser.add_argument("--cluster", help="name in cluster_specs/ or path (default: from the CSV name)")
    from fasop.cli.args import add_step_shape

    add_step_shape(parser)
    flags = parser.add_argument_group("the plan by flags, instead of --from (with --model and --cluster)")
    flags.add_argument("--placement", metavar="TYPE-TYPE-...", help="node types in rank order, e.g. a100-a10-a10-a10")
    for degree in ("tp", "dp", "pp", "mbs"):
        flags.add_argument(f"--{degree}", type=_positive, default=1, help="default 1")
    for degree, what in (("cp", "context-parallel"), ("ep", "expert-parallel"), ("etp", "expert tensor-parallel")):
        flags.add_argument(f"--{degree}", type=_positive, metavar=degree.upper(),
                           help=f"{what} degree (default 1; tp x cp x dp x pp GPUs in all)" if degree == "cp"
                           else f"{what} degree (default 1; ep x etp divides tp x cp x dp)")
    flags.add_argument("--zero", type=int, choices=(0, 1, 2, 3), metavar="STAGE",
                       help="ZeRO stage 0-3, 3 = FSDP (default: as fasop search, the distributed optimizer, 1)")
    flags.add_argument("--partition", metavar="N-N-...",
                       help="layer-list entries per stage (default: the split the estimator chooses)")
    cli_recipes.add_plan_software(flags)


def add_plan_parsers(sub) -> None:
    from fasop.report.export import TARGETS

    e = sub.add_parser("export", help="launch settings for one plan: Megatron-LM, torchtitan, node-rank table",
                       description="Turn one plan of a results CSV into Megatron-LM arguments, a torchtitan "
                       "recipe, or the node order with a torchrun command per node.")
    _add_row_args(e)
    e.add_argument("--target", choices=TARGETS, required=True,
                   help="megatron: Megatron-LM arguments (layout string for an uneven split); torchtitan: a recipe "
                   "function and --parallelism overrides; hostfile: node order, ranks and a torchrun line per node")
    e.add_argument("--out", help="write the text to this file (default: standard output)")
    x = sub.add_parser("explain", help="why one plan is as fast as it is: per-stage time and memory",
                       description="Estimate one plan of a results CSV again with its own layer split and "
                       "break it down: per stage GPU, nodes, layers, compute, p2p, idle time, memory by part "
                       "against capacity; the whole plan's bubble, all-reduces, step time, throughput, cost.")
    _add_row_args(x)
    x.add_argument("--json", action="store_true", help="one JSON object (SI units: seconds, bytes, FLOP)")
    _add_plot_parser(sub)
    x.add_argument("--peak-tflops", metavar="GPU=TFLOPS[,GPU=TFLOPS...]",
                   help="dense 16-bit peak of each GPU type, for the model FLOPs utilisation (e.g. A100=312)")


def run_plan_command(args: argparse.Namespace) -> int:
    if args.command == "export":
        return _export(args)
    if args.command == "explain":
        return _explain(args)
    if args.command == "plot":
        return _plot(args)
    raise AssertionError(args.command)


def _export(args: argparse.Namespace) -> int:
    from fasop.report.export import export
    from fasop.report.output import not_the_input, user_path, write_files

    out = user_path(args.out, "--out")
    if out is not None:
        not_the_input(out, args.source, "--out", "the results CSV it reads")
    rp, model, cluster, _ = row_plan(args)
    # the constants the row was estimated with: the cluster's, as the job's GPUs have them (no FlashAttention below
    # sm80); the estimator refuses what the job cannot run (a CP row without fused attention)
    params = getattr(estimator_for(rp, model, cluster), "params", None) if cluster.analytic is not None else None
    result = export(rp, model, args.target, params)
    for warning in result.warnings:
        print(f"fasop: warning: {warning}", file=sys.stderr)
    if out is not None:
        write_files([(out, result.text)], "--out")
        print(f"wrote {out}")
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

    from fasop.report.explain import explain, render

    peaks = _peaks(args.peak_tflops)
    rp, model, cluster, _ = row_plan(args)
    x = explain(rp, model, cluster, estimator_for(rp, model, cluster), peak_flop_per_s=peaks)
    if args.json:
        print(json.dumps(x.to_dict(), indent=1, allow_nan=False))
    else:
        sys.stdout.write(render(x))
    return 0


# ---------------------------------------------------------------------------- fasop plot
def _add_plot_parser(sub) -> None:
    p = sub.add_parser("plot", help="figures of a results CSV: a plan's pipeline timeline, step-time breakdown of "
                       "the top plans, per-stage memory; a pareto CSV's frontier",
                       description="Write PNG and SVG figures into --out-dir: <name>_timeline (the simulated 1F1B "
                       "pipeline of the chosen plan), <name>_breakdown (step time of the top plans by part), "
                       "<name>_memory (the chosen plan's memory per stage by part against its limit), and for a "
                       "pareto CSV <name>_frontier. <name> is the CSV's name, with _rankN / _rowK when given.")
    _add_row_args(p)
    p.add_argument("--top", type=_positive, default=DEFAULT_TOP, metavar="N",
                   help="plans in the breakdown: the N fastest that fit (a pareto CSV: frontier points) (default "
                   "%(default)s)")
    p.add_argument("--out-dir", default="plots", help="folder to write into (default %(default)s)")
    p.add_argument("--figures", default=",".join(FIGURES), metavar="KIND[,KIND...]",
                   help=f"which figures, of {', '.join(FIGURES)} (default: all; frontier only for a pareto CSV)")


def _plot(args: argparse.Namespace) -> int:
    from fasop.report import plots

    wanted = [k for k in args.figures.split(",") if k]
    unknown = [k for k in wanted if k not in FIGURES]
    if unknown or not wanted:
        raise FasopError(f"--figures: expected some of {', '.join(FIGURES)}, got {args.figures!r}")
    rp, model, cluster, rows = row_plan(args)
    from fasop.report.explain import recipe_words
    from fasop.report.output import safe_name

    flags = f"{model.name}_{rp.plan.key().replace('@', '_')}" + ("" if args.zero is None else f"_zero{args.zero}") \
        + (f"_split{args.partition}" if args.partition else "")
    name = (Path(args.source).stem if args.source else safe_name(flags)) \
        + (f"_rank{args.rank}" if args.rank else f"_row{args.row}" if args.row else "") \
        + (f"_seq{args.seq_len}" if args.seq_len else "") \
        + (f"_gbs{args.global_batch_size}" if args.global_batch_size else "")   # not the CSV's / the spec's step
    spot = rows[0].get("price_basis") == "spot" or (args.source is not None and "_spot" in Path(args.source).stem)
    where = f"{model.name} on {Path(cluster.path).stem}" + (" (spot prices)" if spot else "") \
        + (" (does not fit in GPU memory)" if rp.flag("is_oom") else "")
    styles = plots.node_type_styles(list(cluster.node_types))
    figures = []
    if "composition" in rows[0] and "frontier" in wanted:
        figures.append(("frontier", _frontier(rows, plots, where, args.source, list(cluster.node_types))))
    x, timeline = _explained(rp, model, cluster)
    plan = rp.plan
    label = f"{plan.grid()}, mbs {plan.mbs} on {abbreviate(plan.placement_name, cluster.node_types)}" \
        + "".join(f"\n{w}" for w in [recipe_words(rp.row)] if w)
    boxes = 2 * plan.pp * plan.num_microbatches
    if "timeline" in wanted and timeline is None:
        print(f"fasop: note: no timeline: {x.schedule_note}", file=sys.stderr)
    elif "timeline" in wanted and boxes > plots.TIMELINE_MAX_BOXES and not _cut(timeline):
        print(f"fasop: note: no timeline: {plan.pp} stages x {plan.num_microbatches:,} micro-batches are {boxes:,} "
              f"boxes, past the {plots.TIMELINE_MAX_BOXES:,} a legible chart holds", file=sys.stderr)
    elif "timeline" in wanted:
        figures.append(("timeline", plots.timeline_figure(timeline, [f"{s.stage} {s.node_type} {s.gpu}" for s in x.stages],
                                                          title=f"{where}: {label}",
                                                          stage_colors=[styles[s.node_type]["color"] for s in x.stages])))
    if "breakdown" in wanted:
        figures.append(("breakdown", plots.breakdown_figure(_breakdown_items(rows, args, model, cluster),
                                                            title=f"{where}: step time of the top plans")))
    if "memory" in wanted:
        figures.append(("memory", plots.memory_figure(x.stages, title=f"{where}: memory per stage\n{label}",
                                                      stage_colors=[styles[s.node_type]["color"] for s in x.stages])))
    if not figures:
        raise FasopError(f"--figures: {args.figures!r}: the frontier is drawn from a pareto CSV only")
    from fasop.report.output import write_files

    files = []
    for kind, fig in figures:
        images = plots.render(fig)
        files += [(Path(args.out_dir) / f"{name}_{kind}.{ext}", images[ext]) for ext in ("png", "svg")]
    written = write_files(files, "--out-dir")  # all or none
    print("wrote " + ", ".join(map(str, written)))
    return 0


def _cut(timeline) -> bool:
    """Whether the timeline's figure cuts its steady state (then it draws few boxes however many)."""
    from fasop.report.timeline_cut import cut_window

    return cut_window(timeline) is not None


def _explained(rp, model, cluster):
    """(explain.Explanation, timeline.Timeline) of a row's plan, estimated with its split."""
    from fasop.report.explain import explain_with_timeline

    return explain_with_timeline(rp, model, cluster, estimator_for(rp, model, cluster))


def _breakdown_items(rows, args, model, cluster) -> list[tuple[str, dict[str, float]]]:
    """(label, parts) of the top plans: a search CSV's N fastest that fit (none fits: its N
    fastest), a pareto CSV's frontier."""
    from fasop.cli.plan_source import at_batch
    from fasop.plans.rowplan import finite, plan_of_row

    if "composition" in rows[0]:
        _need(rows, ("step_time_s", "on_frontier"), args.source)
        frontier = [r for r in rows if r.get("on_frontier") == "True"]
        chosen = sorted(frontier, key=lambda r: (finite(r["step_time_s"]) is None, finite(r["step_time_s"]) or 0.0))
    else:
        chosen = [r for r in rows if r.get("is_oom") != "True"] or rows  # none fits: the fastest, marked OOM
    items = []
    for k, row in enumerate(chosen[:args.top], start=1):
        where = f"{args.source} row {k}" if args.source else "the plan of the flags"
        if args.source and args.global_batch_size is not None:   # each plan at the batch given, as the chosen one
            row = at_batch(row, where, args.global_batch_size, model.global_batch_size)
        rp = plan_of_row(row, where, model, cluster)
        x, _ = _explained(rp, model, cluster)
        s = x.stages[x.last_stage]
        p = rp.plan
        label = (row["composition"] + ": " if "composition" in row else f"#{row.get('rank', k)} ") + \
            f"{p.grid(' ', '')} mbs{p.mbs} {abbreviate(p.placement_name, cluster.node_types)}" + \
            (" (OOM)" if row.get("is_oom") == "True" else "")
        drawn = x.bubble_fraction == x.bubble_fraction  # nan: no timeline to split the pipeline
        pipeline = ({"compute": s.computing_s, "p2p": s.sending_s, "bubble": s.idle_s} if drawn
                    else {"pipeline": x.step_parts[0][1]})
        items.append((label, pipeline | dict(x.step_parts[1:])))
    return items


def _need(rows, columns, source) -> None:
    """A one-line error naming the first of `columns` a pareto CSV lacks."""
    missing = [c for c in columns if c not in rows[0]]
    if missing:
        raise FasopError(f"{source}: {missing[0]}: no such column (a pareto CSV has it); plot it from the "
                         "CSV fasop pareto wrote")


def _frontier(rows, plots, where: str, source=None, type_order=None):
    """The frontier figure of a pareto CSV's rows."""
    import pandas as pd

    from fasop.plans.rowplan import finite

    _need(rows, ("composition", "cluster_kind", "status", "train_time_h", "train_cost_usd", "on_frontier", "is_knee"),
          source)
    kinds = [c[len("num_nodes_"):] for c in rows[0] if c.startswith("num_nodes_")]
    points = pd.DataFrame({
        "composition": [r["composition"] for r in rows], "kind": [r["cluster_kind"] for r in rows],
        "status": [r["status"] for r in rows], "train_time_h": [finite(r["train_time_h"]) for r in rows],
        "train_cost_usd": [finite(r["train_cost_usd"]) for r in rows],
        "on_frontier": [r["on_frontier"] == "True" for r in rows], "is_knee": [r["is_knee"] == "True" for r in rows]})
    ranks = [r.get("rank", "") for r in rows if r["status"] == "ok"]
    if all(k.isdigit() for k in ranks) and len(set(ranks)) == len(ranks):  # the CSV's ranks number the frontier
        points["rank"] = [int(r["rank"]) if r["status"] == "ok" else "" for r in rows]
    iterations = rows[0].get("iterations", "")
    return plots.frontier_figure(points, kinds, title=f"{where}, {int(iterations):,} steps" if iterations.isdigit()
                                 else where, complete=all(r.get("complete") != "False" for r in rows),
                                 type_order=type_order)
