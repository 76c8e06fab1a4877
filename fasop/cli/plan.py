"""Command line of the commands that start from one row of a results CSV: `fasop export`,
`fasop explain`, `fasop plot`. Registered by cli.build_parser; run by cli.main."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fasop.cli import recipes as cli_recipes
from fasop.cli.args import abbreviate
from fasop.core.errors import FasopError

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
                       help="the plan whose rank column is N (default 1; a pareto CSV: its knee)")
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


def row_plan(args: argparse.Namespace):
    """(RowPlan, model, cluster, rows) of the row the arguments choose: from --from, or a row
    made of the plan flags (then rows = [it])."""
    from fasop.plans.rowplan import pick_row, plan_of_row, read_rows, specs_from_name
    from fasop.specs.load import load_cluster, load_model

    if (args.source is None) == (args.placement is None):
        raise FasopError("--from: give a results CSV, or the plan by flags (--placement ... with --model and "
                         "--cluster), not both")
    if args.source is None:
        return _flag_plan(args)
    cli_recipes.plan_software(args)  # refused beside --from
    if not Path(args.source).exists() and not Path(args.source).is_symlink():
        raise FasopError(f"--from: {args.source}: no such file")
    rows = read_rows(args.source)
    described = rows[0].get("model_spec"), rows[0].get("cluster_spec")  # a self-describing CSV names its specs
    guessed_model, guessed_cluster = described if all(described) else specs_from_name(args.source)
    how = f"named in {args.source}'s model_spec and cluster_spec columns" if all(described) else \
        f"guessed from the name {Path(args.source).name}"
    for flag, given, guess in (("--model", args.model, guessed_model), ("--cluster", args.cluster, guessed_cluster)):
        if given is None and guess is None:
            raise FasopError(f"{flag}: required ({args.source} is not named <model>_<cluster>_...csv)")
    row, where = pick_row(args.source, rows, rank=args.rank, row=args.row)
    try:
        model = load_model(args.model or guessed_model)
        cluster = load_cluster(args.cluster or guessed_cluster)
    except FasopError as exc:
        if args.model and args.cluster:
            raise
        raise FasopError(f"{exc} ({how}; give --model and --cluster)") from None
    model = _step_shape_of(args, model, row)
    return plan_of_row(row, where, model, cluster), model, _calibrated(cluster, row, args.source), rows


def _calibrated(cluster, row: dict, source: str):
    """`cluster` with the overlay the row was estimated with (its `calibration` column, a path) applied
    again, so that explain, plot and export describe the plan as the search scored it."""
    overlay = (row.get("calibration") or "").strip()
    if not overlay:
        return cluster
    from dataclasses import replace

    from fasop.specs.calibration import apply_calibration, load_calibration

    if not Path(overlay).is_file():
        raise FasopError(f"{source}: calibration: {overlay[:200]!r}: no such file (the plans were estimated with "
                         "this `fasop calibrate` overlay: put it back at that path)")
    if cluster.analytic is None:
        raise FasopError(f"{source}: calibration: the {cluster.estimator} estimator of {cluster.path} takes no overlay")
    return replace(cluster, analytic=apply_calibration(load_calibration(overlay), cluster.analytic))


def _step_shape_of(args: argparse.Namespace, model, row: dict):
    """`model` with the sequence length and global batch of --seq-len / --global-batch-size, else
    of the row's columns of those names (a search run with those flags), else the spec's."""
    from fasop.cli.args import with_step_shape

    def value(flag: str, column: str) -> int | None:
        given = getattr(args, flag, None)
        if given is not None or row.get(column) in (None, ""):
            return given
        text = str(row[column])
        if not text.isdigit() or len(text) > 12 or int(text) < 1:
            raise FasopError(f"--from: {args.source}: {column} {text[:40]!r} is not a positive integer")
        return int(text)

    return with_step_shape(model, value("seq_len", "sequence_length"),
                           value("global_batch_size", "global_batch_size"), "--from")


def _flag_plan(args: argparse.Namespace):
    """The plan of --placement/--tp/--dp/--pp/--mbs[/--partition] for the model's global batch;
    without --partition, split as the cluster's estimator (optimal partitioner) splits it."""
    from fasop.plans.rowplan import plan_of_row
    from fasop.specs.load import load_cluster, load_model

    if args.model is None or args.cluster is None:
        raise FasopError(f"{'--model' if args.model is None else '--cluster'}: required with the plan by flags")
    from fasop.cli.args import with_step_shape

    model = with_step_shape(load_model(args.model), args.seq_len, args.global_batch_size)
    cluster = load_cluster(args.cluster)
    batch, layers = model.global_batch_size, len(model.layer_kinds)
    if batch % (args.dp * args.mbs):
        raise FasopError(f"--mbs: dp {args.dp} x mbs {args.mbs} does not divide the global batch {batch} of {model.path}")
    if args.pp > layers:
        raise FasopError(f"--pp: {args.pp} stages for the {layers} entries of {model.path}'s layer list")
    row = {"tp": str(args.tp), "dp": str(args.dp), "pp": str(args.pp), "mbs": str(args.mbs),
           "node_placement": args.placement, "num_microbatches": str(batch // (args.dp * args.mbs)),
           "partition": args.partition or "-".join([str(layers)] + ["0"] * (args.pp - 1))} | \
        {k: str(v[0]) for k, v in cli_recipes.plan_software(args, cluster).items()}
    where = "the plan of the flags"
    rp = plan_of_row(row, where, model, cluster)  # checks the degrees against the nodes
    chosen = estimator_for(rp, model, cluster).estimate(rp.plan)
    # the settings the estimate picked (the analytic estimator's recipe columns), so that explain,
    # plot and export all read the one plan: an export must not fall back to replicated optimizer state
    row |= {k: str(v) for k, v in chosen.extra_columns if k in FLAG_PLAN_SETTINGS and k not in row}
    if args.partition is None:
        row["partition"] = "-".join(map(str, chosen.partition))
    return plan_of_row(row, where, model, cluster), model, cluster, [row]


FLAG_PLAN_SETTINGS = ("recompute", "zero", "sequence_parallel", "virtual_stages", "precision", "main_grads",
                      "optimizer_states", "dp_shard", "dp_replicate", "offload_layers", "recompute_layers", "bf16_layers")
"""The estimate's recipe columns a plan by flags takes into its row (what a search CSV row says)."""


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
    from fasop.report.output import user_path, write_files

    out = user_path(args.out, "--out")
    rp, model, _, _ = row_plan(args)
    result = export(rp, model, args.target)
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


def estimator_for(rp, model, cluster):
    """The cluster spec's estimator for the row's inventory (the optimal partitioner: a row's
    split is given, the partitioner only names it)."""
    from fasop.estimators import make_estimator

    estimator = make_estimator(model, cluster, inventory_of(rp), partitioner="optimal", **recipe_of(rp))
    if rp.plan.tp not in estimator.tp_degrees():
        raise FasopError(f"{rp.where}: tp: {rp.plan.tp} is not a degree the {cluster.estimator} estimator can score "
                         f"on these GPUs (it can: {', '.join(map(str, estimator.tp_degrees()))})")
    return estimator


RECIPE_COLUMNS = {"recompute": str, "zero": int, "sequence_parallel": lambda v: v == "True", "virtual_stages": int,
                  "precision": str, "main_grads": str, "optimizer_states": str, "mtp_layers": int, "cuda_graphs": str,
                  "offload_layers": int, "recompute_layers": int, "bf16_layers": int}
"""The recipe columns of a results row (the analytic estimator's) and how to read each cell."""


def recipe_of(rp) -> dict:
    """The row's recipe as estimator options (each a one-value tuple), for the columns it has:
    the plan is re-estimated as it was scored, not with the search's default recipe."""
    out = {}
    for column, read in RECIPE_COLUMNS.items():
        cell = rp.row.get(column, "")
        if cell:
            try:
                out[column] = (read(cell),)
            except ValueError:
                raise FasopError(f"{rp.where}: {column}: {cell!r} is not a {column.replace('_', ' ')} value") from None
    if out.get("zero", (0,))[0] > 0 and rp.row.get("dp_replicate", "1") not in ("", "1"):
        out["hsdp"] = (True,)  # the states replicated across nodes: sharded over one node's DP ranks
    return out


def inventory_of(rp) -> tuple:
    """The row's inventory in the order of its num_nodes_<type> columns (the order of the search's
    --nodes), where they count the plan's nodes; else the plan's nodes."""
    by_name = {n.name: n for n in rp.plan.placement}
    counts = [(c[len("num_nodes_"):], rp.row[c]) for c in rp.row if c.startswith("num_nodes_")]
    counts = [(name, int(n)) for name, n in counts if name in by_name and n.isdigit() and len(n) < 7]
    if sum(n for _, n in counts) != len(rp.plan.placement):  # checked before the list is made
        return rp.plan.placement
    inventory = tuple(by_name[name] for name, n in counts for _ in range(n))
    return inventory if sorted(n.name for n in inventory) == sorted(n.name for n in rp.plan.placement) \
        else rp.plan.placement


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

    name = (Path(args.source).stem if args.source else safe_name(f"{model.name}_{rp.plan.key().replace('@', '_')}")) \
        + (f"_rank{args.rank}" if args.rank else f"_row{args.row}" if args.row else "")
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
    from fasop.plans.rowplan import finite, plan_of_row

    if "composition" in rows[0]:
        _need(rows, ("step_time_s", "on_frontier"), args.source)
        frontier = [r for r in rows if r.get("on_frontier") == "True"]
        chosen = sorted(frontier, key=lambda r: (finite(r["step_time_s"]) is None, finite(r["step_time_s"]) or 0.0))
    else:
        chosen = [r for r in rows if r.get("is_oom") != "True"] or rows  # none fits: the fastest, marked OOM
    items = []
    for k, row in enumerate(chosen[:args.top], start=1):
        rp = plan_of_row(row, f"{args.source} row {k}" if args.source else "the plan of the flags", model, cluster)
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
