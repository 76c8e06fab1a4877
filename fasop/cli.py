"""Command line: parse, call the library, write results/ and print a summary.

Exit status: 0 success, 2 bad input (one line on stderr), 130 interrupted (Ctrl-C), 143
terminated (SIGTERM), 141 stdout closed early.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import threading
import time
from pathlib import Path

from fasop import __version__, limits
from fasop.errors import FasopError
from fasop.workers import available_cores

DEFAULT_SHOWN = 5
PROGRESS_S = 5.0
"""Without a terminal, a progress line on stderr every this many seconds (none for shorter runs)."""


class _Parser(argparse.ArgumentParser):
    """argparse with its errors in one line (`fasop search: error: ...`), exit status 2."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {_one_line(message)} (see {self.prog} --help)\n")


def _one_line(text: str, limit: int = 2000) -> str:
    """`text` as one printable line of at most `limit` characters."""
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))
    return text if len(text) <= limit else text[:limit] + f"... ({len(text):,} characters)"


def _int_at_least(minimum: int, what: str, maximum: int | None = None):
    """An argparse type: an integer from minimum to maximum, else `expected <what>, got '<text>'`."""
    def parse(text: str) -> int:
        digits = text.strip().lstrip("+-0")
        try:
            value = int(text) if len(digits) <= 30 else None  # no int() of a 10,000-digit number
        except ValueError:
            value = None
        if value is None and len(digits) > 30 and text.strip().lstrip("+").isdigit():
            value = 10**30
        if value is None or value < minimum:
            raise argparse.ArgumentTypeError(f"expected {what}, got {_one_line(repr(text), 80)}")
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"at most {maximum:,}, fasop's ceiling (README: Limits), "
                                             f"got {_one_line(text, 40)}")
        return value
    return parse


_positive_int = _int_at_least(1, "a positive integer")
_non_negative_int = _int_at_least(0, "an integer >= 0")


def build_parser() -> argparse.ArgumentParser:
    from fasop.partition import PARTITIONERS
    from fasop.search import DEFAULT_ITERATIONS, PLACEMENTS

    parser = _Parser(prog="fasop", description="Plan and price Transformer training on "
                     "heterogeneous GPU clusters.")
    parser.add_argument("--version", action="version", version=f"fasop {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("search", help="rank every parallelisation plan for one inventory of nodes",
                       description="Enumerate tp/dp/pp/micro-batch/placement plans for the given nodes, "
                       "estimate each, and write them ranked by step time.")
    _add_specs(s)
    s.add_argument("--nodes", required=True, metavar="TYPE=COUNT[,TYPE=COUNT...]",
                   help="the inventory, e.g. a100=1,a10=3 (node 0 first)")
    s.add_argument("--heterogeneous", action="store_true", help="allow mixed node types and search their placements")
    s.add_argument("--placements", choices=PLACEMENTS, default="all",
                   help="node orders to try: all (default) = every distinct order, equivalent pipelines once; "
                   "grouped = each type's nodes together; cyclic = FASOP's rotations of the --nodes list")
    s.add_argument("--partitioner", choices=PARTITIONERS, default="optimal",
                   help="layer split: optimal (default) = lowest estimated step time that fits, by branch and "
                   "bound; fasop-minmax = FASOP's greedy balancing")
    s.add_argument("--top", type=_int_at_least(1, "a positive integer", limits.TOP), metavar="K",
                   help="keep only the K fastest plans that fit in memory (default: every plan, or the "
                   "5 fastest past 10,000 plans); plans a lower bound proves slower are skipped")
    s.add_argument("--every-plan", action="store_true",
                   help="estimate and write every plan however many (no automatic --top)")
    _add_length(s, DEFAULT_ITERATIONS)
    s.add_argument("--out", help="CSV to write (default results/<model>_<cluster>_<nodes>.csv)")
    s.add_argument("--show", type=_non_negative_int, default=DEFAULT_SHOWN,
                   help="how many of the fastest plans that fit to print (default %(default)s)")
    _add_execution(s)
    from fasop import cli_recipes
    cli_recipes.add_flags(s)
    _add_pareto_parser(sub, PLACEMENTS, PARTITIONERS, DEFAULT_ITERATIONS)
    _add_list_parser(sub)
    from fasop.cli_plan import add_plan_parsers

    add_plan_parsers(sub)
    from fasop import cli_validate
    cli_validate.add_parser(sub)
    from fasop import cli_prices
    cli_prices.add_parser(sub)
    return parser


def _add_length(parser: argparse.ArgumentParser, default_iterations: int) -> None:
    """--tokens or --iterations: how long the training run is (search and pareto)."""
    length = parser.add_mutually_exclusive_group()
    length.add_argument("--tokens", type=_int_at_least(1, "a positive integer", limits.TOKENS),
                        help="training tokens; iterations = ceil(tokens / (global batch x sequence length))")
    length.add_argument("--iterations", type=_int_at_least(1, "a positive integer", limits.ITERATIONS),
                        help=f"training steps for train_cost_usd and train_time_h (default {default_iterations:,})")


def _add_list_parser(sub) -> None:
    p = sub.add_parser("list", help="the shipped model or cluster specs, one line each",
                       description="List the specs fasop ships (usable by name with --model / --cluster).")
    p.add_argument("what", choices=("models", "clusters"))


def _list(args: argparse.Namespace) -> int:
    from fasop.listing import spec_lines

    for line in spec_lines(args.what):
        print(line)
    return 0


def _iterations(args: argparse.Namespace, model) -> int:
    from fasop.pareto import iterations_for_tokens
    from fasop.search import DEFAULT_ITERATIONS

    if not args.tokens:
        return args.iterations or DEFAULT_ITERATIONS
    iterations = iterations_for_tokens(args.tokens, global_batch_size=model.global_batch_size,
                                       sequence_length=model.sequence_length)
    if iterations > limits.ITERATIONS:
        raise FasopError(f"--tokens: {iterations:.3g} iterations, more than fasop's ceiling of "
                         f"{limits.ITERATIONS:.0e} (README: Limits)")
    return iterations


def _workers(requested: int) -> int:
    from fasop.workers import clamp_workers

    workers, note = clamp_workers(requested)
    if note:
        print(note, file=sys.stderr)
    return workers


def _add_specs(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="name in model_specs/ or path to a model YAML")
    parser.add_argument("--cluster", required=True, help="name in cluster_specs/ or path to a cluster YAML")


def _add_execution(parser: argparse.ArgumentParser, workers_help: str = "estimate in N processes (same output as 1; "
                   "default %(default)s)", default_workers: int = 1) -> None:
    """How the search runs: processes, partitioner budget, progress bar (search and pareto)."""
    parser.add_argument("--workers", type=_positive_int, default=default_workers, metavar="N", help=workers_help)
    parser.add_argument("--partition-budget", type=_int_at_least(1, "a positive integer", limits.PARTITION_BUDGET),
                        metavar="NODES",
                        help="cap the optimal partitioner's effort: search-tree nodes per plan, past which it keeps "
                        "the best split found and reports its gap to the best bound (partition_gap_pct). Default: "
                        "no cap, every split proven optimal where it can be (a short exact branch and bound, a local "
                        "search from its split, the branch and bound again proving only that nothing is faster, then a "
                        "MILP certificate for small programs)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar (on a terminal) or progress "
                        f"lines (otherwise, every {PROGRESS_S:g} s)")


def main(argv: list[str] | None = None) -> int:
    from fasop.workers import exit_status, sigterm_as_interrupt

    commands = {"search": _search, "pareto": _pareto, "list": _list, "validate": _validate, "prices": _prices}
    try:
        with sigterm_as_interrupt():
            args = build_parser().parse_args(argv)
            if args.command in ("export", "explain", "plot"):
                from fasop.cli_plan import run_plan_command

                return run_plan_command(args)
            return commands[args.command](args)
    except FasopError as exc:
        print(f"fasop: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        print("fasop: interrupted; nothing written", file=sys.stderr)
        return exit_status(exc)
    except BrokenPipeError:  # e.g. `fasop search ... | head`: files are written, stdout was closed early
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


def _validate(args: argparse.Namespace) -> int:
    from fasop import cli_validate
    return cli_validate.run(args)


def _prices(args: argparse.Namespace) -> int:
    from fasop import cli_prices
    return cli_prices.run(args)


def _search(args: argparse.Namespace) -> int:
    from fasop import cli_recipes
    from fasop.output import check_target, safe_name, user_path
    from fasop.report import csv_text, search_rows, write_atomic
    from fasop.search import parse_nodes, search
    from fasop.specs import load_cluster, load_model

    out = user_path(args.out, "--out")
    model = load_model(args.model)
    cluster = load_cluster(args.cluster)
    recipe = cli_recipes.options(args, cluster)
    inventory = parse_nodes(args.nodes, cluster)
    iterations = _iterations(args, model)
    if out is None:
        nodes = "-".join(f"{n.name}x{sum(m.name == n.name for m in inventory)}" for n in
                         {n.name: n for n in inventory}.values())
        out = Path("results") / f"{safe_name(f'{model.name}_{Path(cluster.path).stem}_{nodes}')}.csv"
    check_target(out, "--out")  # before the work, not after
    top, auto_note = _auto_top(args, model, cluster, inventory)
    with _progress_bar(args.no_progress, "estimating", "plans") as progress:
        result = search(model, cluster, inventory, heterogeneous=args.heterogeneous, placements=args.placements,
                        partitioner=args.partitioner, iterations=iterations, top=top,
                        workers=_workers(args.workers), partition_budget=args.partition_budget, progress=progress,
                        estimator_options=recipe)
    columns, rows = search_rows(result, model.sequence_length)
    write_atomic(out, csv_text(columns, rows), "--out")
    _print_summary(result, rows, args.show, model.name, Path(cluster.path).stem)
    if auto_note:
        print(auto_note)
    if cli_recipes.misfit_line(result):
        print(cli_recipes.misfit_line(result))
    print(f"wrote {out}")
    return 0


def _auto_top(args: argparse.Namespace, model, cluster, inventory) -> tuple[int | None, str]:
    """(--top to search with, a note): without --top, past AUTO_TOP_PLANS plans (and within the
    orders that may be listed) only the AUTO_TOP fastest that fit are kept, found exactly."""
    from fasop.search import AUTO_TOP, AUTO_TOP_PLANS, MAX_ORDERS, check_strategies, plan_count

    if args.top is not None or args.every_plan:
        return args.top, ""
    check_strategies(args.placements, args.partitioner, 1)
    if len({n.name for n in inventory}) > 1 and not args.heterogeneous:
        return None, ""  # search says why
    plans, orders = plan_count(model, cluster, inventory, placements=args.placements, partitioner=args.partitioner)
    if plans <= AUTO_TOP_PLANS or orders > MAX_ORDERS:
        return None, ""
    return AUTO_TOP, (f"note: {plans:,} plans, more than {AUTO_TOP_PLANS:,}: kept the {AUTO_TOP} fastest that fit, "
                      f"found exactly by branch and bound (--top K for another K, --every-plan to estimate and "
                      "write every plan)")


class _progress_bar:
    """Progress on stderr: tqdm on a terminal; otherwise a line every PROGRESS_S seconds (none
    for a run that ends sooner). Yields a progress(done, total) callback."""

    def __init__(self, disabled: bool, label: str, unit: str = "plans"):
        self.disabled, self.label, self.unit, self.bar = disabled, label, unit, None

    def __enter__(self):
        if self.disabled:
            return None
        if not sys.stderr.isatty():
            return self._lines()
        from tqdm import tqdm

        def update(done: int, total: int) -> None:
            if self.bar is None:
                self.bar = tqdm(total=total, desc=self.label, unit="plan", leave=False, file=sys.stderr)
            self.bar.update(done - self.bar.n)

        return update

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.close()
        return False

    def _lines(self):
        start = last = time.monotonic()

        def update(done: int, total: int) -> None:
            nonlocal last
            now = time.monotonic()
            if now - last >= PROGRESS_S and done < total:
                last = now
                print(f"fasop: {self.label}: {done:,} of {total:,} {self.unit} ({100 * done / max(total, 1):.0f} %, "
                      f"{now - start:,.0f} s)", file=sys.stderr, flush=True)

        return update


def _print_summary(result, rows: list[dict], show: int, model_name: str, cluster_name: str) -> None:
    counts = {}
    for node in result.inventory:
        counts[node.name] = counts.get(node.name, 0) + 1
    inventory = " + ".join(f"{n}x{name}" for name, n in counts.items())
    gpus = sum(n.gpus_per_node for n in result.inventory)
    skipped = []
    if result.num_duplicates:
        skipped.append(f"{result.num_duplicates:,} equivalent to another")
    if result.top:
        skipped.append(f"{result.num_pruned:,} proved unable to enter the top {result.top}")
    print(f"{model_name} on {inventory} ({gpus} GPUs, {cluster_name}): {result.num_candidates:,} plans, "
          f"{result.num_estimated:,} estimated" + (f" ({'; '.join(skipped)})" if skipped else "")
          + ("" if result.top else f", {result.num_estimated_oom:,} out of memory")
          + f"; {len(rows):,} written" + (f" (the {result.top} fastest that fit)" if result.top else ""))
    proven = [r["partition_proven_optimal"] for r in rows if r["partition_method"] == "optimal"]
    if proven and not all(proven):
        print(f"note: {len(proven) - sum(proven):,} of {len(proven):,} optimal splits are the best found within the "
              "search budget, not proven optimal (column partition_proven_optimal)")
    fitting = [r for r in rows if not r["is_oom"]]
    if not fitting:
        print("no plan fits in GPU memory")
    fitting = fitting[:show]
    if not fitting:
        return
    header = ("rank", "tp", "dp", "pp", "mbs", "step_s", "samples/s", "usd/step", "train_h", "train_usd",
              "mem_GiB", "placement", "partition")
    table = [header] + [(
        str(r["rank"]), str(r["tp"]), str(r["dp"]), str(r["pp"]), str(r["mbs"]), f"{r['step_time_s']:.4f}",
        f"{r['samples_per_s']:.1f}", f"{r['usd_per_step']:.5f}", f"{r['train_time_h']:,.1f}",
        f"{r['train_cost_usd']:,.0f}", f"{r['oom_gpumem_gib']:.2f}", _abbreviate(r["node_placement"]),
        r["partition"]) for r in fitting]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        cells = [c.rjust(w) if i < 11 else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))]
        print("  ".join(cells).rstrip())


def _abbreviate(placement: str) -> str:
    """a10-a10-a10-a100 -> 3xa10-a100 (runs of equal node types collapsed)."""
    out, names = [], placement.split("-")
    i = 0
    while i < len(names):
        j = i
        while j < len(names) and names[j] == names[i]:
            j += 1
        out.append(names[i] if j - i == 1 else f"{j - i}x{names[i]}")
        i = j
    return "-".join(out)


# ---------------------------------------------------------------------------- fasop pareto
def _check_positive(flag: str, value: float | None) -> None:
    """--deadline-hours / --budget-usd must be positive and finite. Checked here rather than by an
    argparse type so that a bad value is one line on stderr (argparse adds its usage text), and
    before the sweep, so no work is done."""
    if value is not None and not 0 < value < float("inf"):
        raise FasopError(f"{flag}: must be a positive number, got {value:g}")
    if value is not None and value > limits.HOURS_OR_USD:
        raise FasopError(f"{flag}: at most {limits.HOURS_OR_USD:g}, fasop's ceiling (README: Limits), got {value:g}")


def _add_pareto_parser(sub, placements, partitioners, default_iterations: int) -> None:
    p = sub.add_parser("pareto", help="time vs cost over every cluster you could assemble",
                       description="For every composition of node counts within the limits: its fastest plan that "
                       "fits, total training time and cost; the non-dominated set, its knee, and the cheapest plan "
                       "within a deadline / the fastest within a budget. See README.md, 'fasop pareto'.")
    _add_specs(p)
    p.add_argument("--max-nodes", required=True, metavar="TYPE=N[,TYPE=N...]",
                   help="most nodes of each type, e.g. a100=8,a10=8 (this order is the node order of a composition)")
    p.add_argument("--min-nodes", metavar="TYPE=N[,TYPE=N...]", help="fewest nodes of each type (default 0)")
    _add_length(p, default_iterations)
    p.add_argument("--deadline-hours", type=float, help="report the cheapest plan finishing within H hours")
    p.add_argument("--budget-usd", type=float, help="report the fastest plan costing at most B USD")
    p.add_argument("--spot", action="store_true", help="price nodes at spot_usd_per_hour where the spec has one")
    p.add_argument("--out-prefix", help="write PREFIX_pareto.csv/.png/.svg (default results/<model>_<cluster>)")
    p.add_argument("--placements", choices=placements, default="cyclic",
                   help="node orders to try per composition: cyclic (default) = rotations of the node list, "
                   "all types' nodes in --max-nodes order; grouped; all (slow past ~10 nodes)")
    p.add_argument("--partitioner", choices=partitioners, default="optimal",
                   help="layer split: optimal (default) or fasop-minmax (FASOP's greedy balancing)")
    _add_execution(p, "search the compositions in N processes, a composition per process (same output for any N; "
                   "default: the CPU cores available, here %(default)s)", default_workers=available_cores())
    from fasop.cli_sweep import add_sweep_arguments

    add_sweep_arguments(p)
    from fasop import cli_recipes
    cli_recipes.add_flags(p)


def _import(*modules: str) -> None:
    for name in modules:
        importlib.import_module(name)


def _pareto(args: argparse.Namespace) -> int:
    from fasop import pareto
    from fasop.output import check_target, safe_name, user_path, write_files
    from fasop.report import csv_text, pareto_rows
    from fasop.specs import load_cluster, load_model
    from fasop.workers import exit_status

    _check_positive("--deadline-hours", args.deadline_hours)
    _check_positive("--budget-usd", args.budget_usd)
    user_prefix = user_path(args.out_prefix, "--out-prefix")
    model = load_model(args.model)
    cluster = load_cluster(args.cluster)
    from fasop import cli_recipes
    args.estimator_options = cli_recipes.options(args, cluster)  # read by cli_sweep.run_sweep
    max_nodes = pareto.parse_node_limits(args.max_nodes, cluster, "--max-nodes")
    min_nodes = pareto.parse_node_limits(args.min_nodes, cluster, "--min-nodes") if args.min_nodes else {}
    comps = pareto.compositions(max_nodes, min_nodes)
    from fasop.buyer import within
    from fasop.cli_sweep import buyer_limits, run_sweep

    all_comps = len(comps)
    comps, left_out = within(comps, buyer_limits(args), cluster, pareto.node_prices(cluster, max_nodes, spot=args.spot)[0])
    iterations = _iterations(args, model)
    workers = _workers(args.workers)
    _, on_demand = pareto.node_prices(cluster, max_nodes, spot=args.spot)
    if on_demand:
        print(f"note: --spot: {cluster.path} has no spot_usd_per_hour for {', '.join(on_demand)}; "
              "on-demand price used", file=sys.stderr)
    prefix = user_prefix or Path("results") / safe_name(f"{model.name}_{Path(cluster.path).stem}")
    csv_path, stem = prefix.with_name(prefix.name + "_pareto.csv"), prefix.with_name(prefix.name + "_pareto")
    png, svg = stem.with_name(stem.name + ".png"), stem.with_name(stem.name + ".svg")
    for path in (csv_path, png, svg):
        check_target(path, "--out-prefix")  # before the work, not after
    if workers > 1 or args.executor == "ray":  # this process mostly waits: load the plotting libraries meanwhile
        threading.Thread(target=_import, args=("pandas", "fasop.plots"), daemon=True).start()
    with _progress_bar(args.no_progress, "compositions", "compositions") as progress:
        checkpoint = prefix.with_name(prefix.name + "_pareto.checkpoint")
        done, interrupted, counts = run_sweep(args, model, cluster, comps, iterations, workers, checkpoint, progress)
    if left_out:
        print(f"note: {all_comps - len(comps):,} of {all_comps:,} compositions outside the limits were not searched ("
              + ", ".join(f"{flag}: {n:,}" for flag, n in left_out.items()) + ")", file=sys.stderr)
    if counts["resumed"]:
        print(f"note: --resume: {counts['resumed']:,} compositions taken from the checkpoint", file=sys.stderr)
    if interrupted and not done:
        print("fasop: interrupted before any composition finished; nothing written", file=sys.stderr)
        return exit_status(interrupted)
    analysis = pareto.analyse(done, deadline_hours=args.deadline_hours, budget_usd=args.budget_usd,
                              complete=not interrupted)
    columns, rows = pareto_rows(analysis, model.sequence_length, list(max_nodes), spot=args.spot)
    table = csv_text(columns, rows)
    if interrupted:
        write_files([(csv_path, table)], "--out-prefix")
        _print_pareto(analysis, rows, model.name, Path(cluster.path).stem, iterations, len(comps))
        print(f"fasop: interrupted after {len(done)} of {len(comps)} compositions; wrote {csv_path} "
              "(complete=False), no plots; rerun with --resume to continue", file=sys.stderr)
        return exit_status(interrupted)
    from fasop.plots import render_pareto

    try:
        images = render_pareto(analysis, title=f"{model.name} on {Path(cluster.path).stem}, {iterations:,} steps")
    except KeyboardInterrupt as exc:
        write_files([(csv_path, table)], "--out-prefix")
        checkpoint.unlink(missing_ok=True)  # the sweep is complete and on disk
        print(f"fasop: interrupted while plotting; wrote {csv_path}, no plots", file=sys.stderr)
        return exit_status(exc)
    write_files([(csv_path, table), (png, images["png"]), (svg, images["svg"])], "--out-prefix")  # all or none
    checkpoint.unlink(missing_ok=True)  # only now: a kill before the write leaves the sweep to --resume
    _print_pareto(analysis, rows, model.name, Path(cluster.path).stem, iterations, len(comps))
    print(f"wrote {csv_path}, {png}, {svg}")
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
        header = ("composition", "tp", "dp", "pp", "mbs", "placement", "time_h", "cost_usd", "")
        table = [header] + [(
            rows[i]["composition"], str(rows[i]["tp"]), str(rows[i]["dp"]), str(rows[i]["pp"]), str(rows[i]["mbs"]),
            _abbreviate(rows[i]["node_placement"]), f"{rows[i]['train_time_h']:,.1f}",
            f"{rows[i]['train_cost_usd']:,.0f}", "knee" if i == analysis.knee else "") for i in analysis.frontier]
        widths = [max(len(row[k]) for row in table) for k in range(len(header))]
        print(f"frontier ({len(analysis.frontier)} points, fastest first):")
        for row in table:
            cells = [c.rjust(w) if k in (1, 2, 3, 4, 6, 7) else c.ljust(w) for k, (c, w) in enumerate(zip(row, widths))]
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
    return (f"{row['composition']} (tp {row['tp']}, dp {row['dp']}, pp {row['pp']}, mbs {row['mbs']}): "
            f"{row['train_time_h']:,.1f} h, ${row['train_cost_usd']:,.0f}")

if __name__ == "__main__":
    sys.exit(main())
