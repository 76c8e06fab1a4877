"""`fasop pareto`: sweep every composition of nodes within the limits, then print and write the
time-vs-dollar frontier, its knee and the deadline / budget answers (CSV and plots).
Registered by cli.build_parser; run by cli.main."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from fasop.cli import recipes as cli_recipes
from fasop.core import limits
from fasop.cli.args import (ProgressBar, add_calibration, add_execution, add_length, add_specs,
                            calibrated, iterations_of, length_notes, model_of, partitioner_note, run_tag,
                            workers_of)
from fasop.core.errors import FasopError
from fasop.core.workers import available_cores, import_in_background
from fasop.plans.plan import abbreviate


def _check_positive(flag: str, value: float | None) -> None:
    """--deadline-hours / --budget-usd must be positive and finite. Checked here rather than by an
    argparse type so that a bad value is one line on stderr (argparse adds its usage text), and
    before the sweep, so no work is done."""
    if value is not None and not 0 < value < float("inf"):
        raise FasopError(f"{flag}: must be a positive number, got {value:g}")
    if value is not None and value > limits.HOURS_OR_USD:
        raise FasopError(f"{flag}: at most {limits.HOURS_OR_USD:g}, fasop's ceiling (README: Limits), got {value:g}")


def add_parser(sub) -> None:
    from fasop.partition.splits import PARTITIONERS
    from fasop.search.engine import DEFAULT_ITERATIONS, PLACEMENTS

    p = sub.add_parser("pareto", help="time vs cost over every cluster you could assemble",
                       description="For every composition of node counts within the limits: its fastest plan that "
                       "fits, total training time and cost; the non-dominated set, its knee, and the cheapest plan "
                       "within a deadline / the fastest within a budget. See docs/pareto.md.")
    add_specs(p)
    p.add_argument("--max-nodes", required=True, metavar="TYPE=N[,TYPE=N...]",
                   help="most nodes of each type, e.g. a100=8,a10=8 (this order is the node order of a composition)")
    p.add_argument("--min-nodes", metavar="TYPE=N[,TYPE=N...]", help="fewest nodes of each type (default 0)")
    add_length(p, DEFAULT_ITERATIONS)
    p.add_argument("--deadline-hours", type=float, help="report the cheapest plan finishing within H hours")
    p.add_argument("--budget-usd", type=float, help="report the fastest plan costing at most B USD")
    p.add_argument("--spot", action="store_true", help="price nodes at spot_usd_per_hour where the spec has one")
    p.add_argument("--out-prefix", help="write PREFIX_pareto.csv/.png/.svg (default results/<model>_<cluster>)")
    p.add_argument("--placements", choices=PLACEMENTS, default="cyclic",
                   help="node orders to try per composition: cyclic (default) = rotations of the node list, "
                   "all types' nodes in --max-nodes order; grouped; all (slow past ~10 nodes)")
    p.add_argument("--partitioner", choices=PARTITIONERS,
                   help="layer split: optimal (default) or fasop-minmax (FASOP's greedy balancing); clusters with "
                   "estimator: fasop-2024 (the analytic estimator balances its own split and says so)")
    add_execution(p, "search the compositions in N processes, a composition per process (same output for any N; "
                   "default: the CPU cores available, here %(default)s)", default_workers=available_cores())
    from fasop.cli.sweep import add_sweep_arguments

    add_sweep_arguments(p)
    cli_recipes.add_flags(p)
    add_calibration(p)


def _importing_first(progress, *modules: str):
    """`progress` (None: no bar), starting the import of `modules` in the background at its first call: a
    composition has finished, so the workers are running (forked before the import began: workers.import_in_background)
    and this process mostly waits."""
    pending = list(modules)

    def report(done: int, total: int) -> None:
        if pending:
            import_in_background(*pending)
            pending.clear()
        if progress is not None:
            progress(done, total)

    return report


@dataclass(frozen=True)
class _Outputs:
    """The files of a sweep written to PREFIX: the CSV, its two plots, the checkpoint."""

    csv: Path
    png: Path
    svg: Path
    checkpoint: Path

    @classmethod
    def of(cls, prefix: Path) -> _Outputs:
        stem = prefix.with_name(prefix.name + "_pareto")
        return cls(csv=prefix.with_name(prefix.name + "_pareto.csv"), png=stem.with_name(stem.name + ".png"),
                   svg=stem.with_name(stem.name + ".svg"), checkpoint=prefix.with_name(prefix.name + "_pareto.checkpoint"))


def run(args: argparse.Namespace) -> int:
    from fasop.pareto import frontier as pareto
    from fasop.cli.sweep import run_sweep
    from fasop.report.output import check_target, safe_name, user_path
    from fasop.report.results import (csv_text, extra_columns, pareto_rows, provenance, significant,
                                      with_provenance, with_rates)
    from fasop.specs.load import load_cluster
    from fasop.pareto.sweep import node_prices
    from fasop.core.workers import exit_status

    _check_positive("--deadline-hours", args.deadline_hours)
    _check_positive("--budget-usd", args.budget_usd)
    user_prefix = user_path(args.out_prefix, "--out-prefix")
    model = model_of(args)
    cluster = calibrated(args, load_cluster(args.cluster))
    recipe = cli_recipes.options(args, cluster, model)
    split_note = partitioner_note(args, cluster)
    if split_note:
        print(split_note, file=sys.stderr)
    for line in cli_recipes.moe_notes(args, model, cluster.node_types.values()):
        print(line, file=sys.stderr)
    max_nodes, all_comps, comps, left_out = _compositions(args, cluster)
    iterations = iterations_of(args, model)
    for line in length_notes(args, model):
        print(line, file=sys.stderr)
    workers = workers_of(args.workers)
    _, on_demand = node_prices(cluster, max_nodes, spot=args.spot)
    if on_demand:
        print(f"note: --spot: {cluster.path} has no spot_usd_per_hour for {', '.join(on_demand)}; "
              "on-demand price used", file=sys.stderr)
    out = _Outputs.of(user_prefix or Path("results") / safe_name(f"{model.name}_{Path(cluster.path).stem}{run_tag(args, 'cyclic')}"))
    for path in (out.csv, out.png, out.svg):
        check_target(path, "--out-prefix")  # before the work, not after
    with ProgressBar(args.no_progress, "compositions", "compositions") as progress:
        if workers > 1 or args.executor == "ray":  # this process mostly waits: load the plotting libraries meanwhile
            progress = _importing_first(progress, "pandas", "fasop.report.plots")
        done, interrupted, counts = run_sweep(args, model, cluster, comps, iterations, workers, out.checkpoint,
                                              progress, estimator_options=recipe)
    _print_notes(left_out, all_comps, len(comps), counts)
    if interrupted and not done:
        print("fasop: interrupted before any composition finished; nothing written", file=sys.stderr)
        return exit_status(interrupted)
    analysis = pareto.analyse(done, deadline_hours=args.deadline_hours, budget_usd=args.budget_usd,
                              complete=not interrupted)
    columns, rows = pareto_rows(analysis, model.sequence_length, list(max_nodes), spot=args.spot)
    if extra_columns([r.best for r in analysis.results if r.best is not None]):  # analytic: self-describing
        columns, rows = with_provenance(*with_rates(columns, rows, model, cluster),
                                        provenance(model, cluster, spot=args.spot,
                                                   calibration=args.calibration))
        rows = significant(rows)
    title = f"{model.name} on {Path(cluster.path).stem}" + (" (spot prices)" if args.spot else "") + f", {iterations:,} steps"

    hint = _no_fit_hint(args, model, cluster, comps, iterations, recipe) if not analysis.frontier and not interrupted \
        else ""

    def summary() -> None:
        _print_pareto(analysis, rows, model.name, Path(cluster.path).stem, iterations, len(comps))
        if hint:
            print(hint)

    if interrupted:
        _write(out, csv_text(columns, rows), None)
        summary()
        print(f"fasop: interrupted after {len(done)} of {len(comps)} compositions; wrote {out.csv} "
              "(complete=False), no plots; rerun with --resume to continue", file=sys.stderr)
        return exit_status(interrupted)
    return _write_complete(out, csv_text(columns, rows), analysis, title, summary, list(cluster.node_types))


def _no_fit_hint(args: argparse.Namespace, model, cluster, comps, iterations: int, recipe: dict) -> str:
    """When no composition has a plan that fits (analytic clusters): the first recipe with which some
    would, as `fasop search` says it (cli_recipes.no_fit_hint), counting compositions."""
    if cluster.analytic is None:
        return ""
    from fasop.pareto.sweep import sweep

    def search_with(options: dict) -> list[float]:
        found = sweep(model, cluster, comps, placements=args.placements, partitioner=args.partitioner,
                      iterations=iterations, spot=args.spot, top=1, workers=workers_of(args.workers),
                      partition_budget=args.partition_budget, estimator_options=options)
        return [r.best.step_time_s for r in found if r.best is not None]

    return cli_recipes.no_fit_hint(recipe, search_with, counted=("composition", "compositions"))


def _compositions(args: argparse.Namespace, cluster) -> tuple[dict[str, int], int, tuple, dict[str, int]]:
    """(--max-nodes limits, how many compositions they allow, those inside the buyer's limits,
    {limit flag: compositions it left out})."""
    from fasop.pareto import sweep
    from fasop.pareto.buyer import within
    from fasop.cli.sweep import buyer_limits

    max_nodes = sweep.parse_node_limits(args.max_nodes, cluster, "--max-nodes")
    min_nodes = sweep.parse_node_limits(args.min_nodes, cluster, "--min-nodes") if args.min_nodes else {}
    comps = sweep.compositions(max_nodes, min_nodes)
    kept, left_out = within(comps, buyer_limits(args), cluster, sweep.node_prices(cluster, max_nodes, spot=args.spot)[0])
    return max_nodes, len(comps), kept, left_out


def _print_notes(left_out: dict[str, int], all_comps: int, searched: int, counts: dict[str, int]) -> None:
    if left_out:
        print(f"note: {all_comps - searched:,} of {all_comps:,} compositions outside the limits were not searched ("
              + ", ".join(f"{flag}: {n:,}" for flag, n in left_out.items()) + ")", file=sys.stderr)
    if counts["resumed"]:
        print(f"note: --resume: {counts['resumed']:,} compositions taken from the checkpoint", file=sys.stderr)


def _write(out: _Outputs, table: str, images: dict | None) -> None:
    """The CSV, and the plots when given: all or none."""
    from fasop.report.output import write_files

    extra = [] if images is None else [(out.png, images["png"]), (out.svg, images["svg"])]
    write_files([(out.csv, table)] + extra, "--out-prefix")


def _write_complete(out: _Outputs, table: str, analysis, title: str, summary, type_order: list[str]) -> int:
    """A complete sweep's CSV and plots; the checkpoint removed only once they are on disk."""
    from fasop.report.plots import render_pareto
    from fasop.core.workers import exit_status

    try:
        images = render_pareto(analysis, title=title, type_order=type_order)
    except KeyboardInterrupt as exc:
        _write(out, table, None)
        out.checkpoint.unlink(missing_ok=True)  # the sweep is complete and on disk
        print(f"fasop: interrupted while plotting; wrote {out.csv}, no plots", file=sys.stderr)
        return exit_status(exc)
    _write(out, table, images)
    out.checkpoint.unlink(missing_ok=True)  # only now: a kill before the write leaves the sweep to --resume
    summary()
    print(f"wrote {out.csv}, {out.png}, {out.svg}")
    return 0


def _print_pareto(analysis, rows: list[dict], model_name: str, cluster_name: str, iterations: int,
                  total: int) -> None:
    statuses = [r.status for r in analysis.results]
    print(f"{model_name} on {cluster_name}: {len(statuses)} of {total} compositions, {iterations:,} steps; "
          f"{statuses.count('oom')} with no plan that fits, {statuses.count('no_plan')} with no valid plan"
          + (f", {statuses.count('pruned')} pruned (proved off the frontier, not searched in full)"
             if 'pruned' in statuses else ""))
    if not analysis.frontier:
        print("frontier: empty (no composition has a plan that fits in GPU memory)")
    else:
        extra = cli_recipes.shown_degrees([rows[i] for i in analysis.frontier])
        header = ("composition", "tp", *extra, "dp", "pp", "mbs", "placement", "time_h", "cost_usd", "")
        names = [c[len("num_nodes_"):] for c in rows[0] if c.startswith("num_nodes_")]
        table = [header] + [(
            rows[i]["composition"], str(rows[i]["tp"]), *(str(rows[i].get(c, "")) or "-" for c in extra), str(rows[i]["dp"]),
            str(rows[i]["pp"]), str(rows[i]["mbs"]),
            abbreviate(rows[i]["node_placement"], names), f"{rows[i]['train_time_h']:,.1f}",
            f"{rows[i]['train_cost_usd']:,.0f}", "knee" if i == analysis.knee else "") for i in analysis.frontier]
        widths = [max(len(row[k]) for row in table) for k in range(len(header))]
        print(f"frontier ({len(analysis.frontier)} points, fastest first):")
        for row in table:
            right = {1, 2, 3, 4, 6, 7} if not extra else set(range(1, 5 + len(extra))) | {6 + len(extra), 7 + len(extra)}
            cells = [c.rjust(w) if k in right else c.ljust(w) for k, (c, w) in enumerate(zip(row, widths))]
            print("  " + "  ".join(cells).rstrip())
        if analysis.knee is None and len(analysis.frontier) < 3:
            print("knee: none (fewer than 3 frontier points)")
        elif analysis.knee is None:
            print("knee: none (the frontier's times or costs differ by less than one part in a billion: "
                  "no trade-off to balance)")
    fits = [rows[i] for i, r in enumerate(analysis.results) if r.status == "ok"]
    if analysis.deadline_hours is not None:
        nearest = min((r["train_time_h"] for r in fits), default=None)
        _print_answer(f"cheapest within {analysis.deadline_hours:,g} h", rows, analysis.deadline,
                      None if nearest is None else f"fastest takes {nearest:,.1f} h")
    if analysis.budget_usd is not None:
        nearest = min((r["train_cost_usd"] for r in fits), default=None)
        _print_answer(f"fastest within ${analysis.budget_usd:,.2f}", rows, analysis.budget,
                      None if nearest is None else f"cheapest costs ${nearest:,.0f}")


def _print_answer(question: str, rows: list[dict], answer: int | None, nearest_miss: str | None) -> None:
    if answer is not None:
        print(f"{question}: {_describe(rows[answer])}")
    else:
        print(f"{question}: none qualifies" + (f" ({nearest_miss})" if nearest_miss else ""))


def _describe(row: dict) -> str:
    grid = ", ".join(f"{k} {row[k]}" for k in ("tp", "cp", "ep", "etp", "dp", "pp")
                     if k in ("tp", "dp", "pp") or str(row.get(k, 1)) not in ("1", ""))  # cp, ep, etp where not 1
    return (f"{row['composition']} ({grid}, mbs {row['mbs']}): "
            f"{row['train_time_h']:,.1f} h, ${row['train_cost_usd']:,.0f}")
