"""`fasop search`: rank every parallelisation plan for one inventory of nodes, write them as CSV
and print the fastest. Registered by cli.build_parser; run by cli.main."""

from __future__ import annotations

import argparse
from pathlib import Path

from fasop.cli import recipes as cli_recipes
from fasop.core import limits
from fasop.cli.args import (ProgressBar, add_calibration, add_execution, add_length, add_specs,
                            calibrated, int_at_least, iterations_of, length_notes, model_of, non_negative_int,
                            partitioner_note, run_tag, workers_of)
from fasop.plans.plan import abbreviate

TIES_NOTE = ("note: {now}--placements all proves the --top plans against every node order, and orders whose step times "
             "tie the kept ones cannot be cut by a bound; --placements grouped (each type's nodes together) "
             "searches far fewer orders (docs/partitions.md: exact ties)")
"""Printed when an order-tree search is interrupted, and (with `now`) once while a long one still runs."""
DEFAULT_SHOWN = 5


def add_parser(sub) -> None:
    from fasop.partition.splits import PARTITIONERS
    from fasop.search.engine import DEFAULT_ITERATIONS, PLACEMENTS

    s = sub.add_parser("search", help="rank every parallelisation plan for one inventory of nodes",
                       description="Enumerate tp/dp/pp/micro-batch/placement plans for the given nodes, "
                       "estimate each, and write them ranked by step time.")
    add_specs(s)
    s.add_argument("--nodes", required=True, metavar="TYPE=COUNT[,TYPE=COUNT...]",
                   help="the inventory, e.g. a100=1,a10=3 (node 0 first)")
    s.add_argument("--heterogeneous", action="store_true", help="allow mixed node types and search their placements")
    s.add_argument("--placements", choices=PLACEMENTS, default="all",
                   help="node orders to try: all (default) = every distinct order, equivalent pipelines once; "
                   "grouped = each type's nodes together; cyclic = FASOP's rotations of the --nodes list")
    s.add_argument("--partitioner", choices=PARTITIONERS,
                   help="layer split: optimal (default) = lowest estimated step time that fits, by branch and "
                   "bound; fasop-minmax = FASOP's greedy balancing (clusters with estimator: fasop-2024; the "
                   "analytic estimator balances its own split and says so)")
    s.add_argument("--top", type=int_at_least(1, "a positive integer", limits.TOP), metavar="K",
                   help="keep only the K fastest plans that fit in memory (default: every plan, or the "
                   "5 fastest past 10,000 plans); plans a lower bound proves slower are skipped")
    s.add_argument("--every-plan", action="store_true",
                   help="estimate and write every plan however many (no automatic --top)")
    s.add_argument("--spot", action="store_true",
                   help="price the nodes at their spec's spot_usd_per_hour (every node type needs one)")
    add_length(s, DEFAULT_ITERATIONS)
    s.add_argument("--out", help="CSV to write (default results/<model>_<cluster>_<nodes>.csv)")
    s.add_argument("--show", type=non_negative_int, default=DEFAULT_SHOWN,
                   help="how many of the fastest plans that fit to print (default %(default)s)")
    add_execution(s)
    cli_recipes.add_flags(s)
    add_calibration(s)


def run(args: argparse.Namespace) -> int:
    from fasop.report.output import check_target, safe_name, user_path
    from fasop.report.results import (csv_text, provenance, search_rows, significant,
                                      with_provenance, with_rates, write_atomic)
    from fasop.search.engine import parse_nodes, search
    from fasop.specs.load import load_cluster

    out = user_path(args.out, "--out")
    model = model_of(args)
    cluster = calibrated(args, load_cluster(args.cluster))
    recipe = cli_recipes.options(args, cluster, model)
    split_note = partitioner_note(args, cluster)
    inventory = parse_nodes(args.nodes, cluster)
    if args.spot:
        from fasop.specs.prices import at_spot
        inventory = at_spot(inventory, cluster)
    iterations = iterations_of(args, model)
    if out is None:
        nodes = "-".join(f"{n.name}x{sum(m.name == n.name for m in inventory)}" for n in
                         {n.name: n for n in inventory}.values())
        out = Path("results") / f"{safe_name(f'{model.name}_{Path(cluster.path).stem}_{nodes}{run_tag(args)}')}.csv"
    check_target(out, "--out")  # before the work, not after
    top, auto_note = _auto_top(args, model, cluster, inventory)
    hint = (TIES_NOTE.format(now="still estimating: ") + "; Ctrl-C writes the plans found so far (complete=False)"
            if args.placements == "all" and top is not None else "")

    def searched(options: dict):
        with ProgressBar(args.no_progress, "estimating", "plans", hint) as progress:
            return search(model, cluster, inventory, heterogeneous=args.heterogeneous, placements=args.placements,
                          partitioner=args.partitioner, iterations=iterations, top=top,
                          workers=workers_of(args.workers), partition_budget=args.partition_budget, progress=progress,
                          estimator_options=options, keep_on_interrupt=True)
    result = searched(recipe)
    states_note = ""
    if cluster.analytic is not None and result.interrupted is None and not _fits(result) \
            and not {"main_grads", "optimizer_states"} & set(recipe) \
            and _state_bytes(model, 4, 4) > _room(inventory):  # no recipe can help: the states in bf16, as DeepSeek-V3
        lighter = recipe | cli_recipes.BF16_STATES
        again = searched(lighter)
        if again.interrupted is not None or _fits(again):
            result, recipe, states_note = again, lighter, cli_recipes.BF16_STATES_NOTE
    if result.interrupted is not None:
        return _write_incomplete(result, out, model, cluster, args)
    columns, rows = search_rows(result, model.sequence_length)
    if cluster.analytic is not None:   # the analytic estimator's CSVs say what they were made from
        if not result.estimates:   # none fits: its columns all the same
            from fasop.estimators.analytic.estimator import COLUMNS
            columns += list(COLUMNS)
        columns, rows = with_provenance(*with_rates(columns, rows, model, cluster),
                                        provenance(model, cluster, spot=args.spot,
                                                   calibration=args.calibration))
        rows = significant(rows)
    write_atomic(out, csv_text(columns, rows), "--out")
    _print_summary(result, rows, args.show, model.name, Path(cluster.path).stem + _calibrated_by(args))
    for line in length_notes(args, model) + cli_recipes.precision_note(args, cluster, inventory) + \
            _model_notes(model, inventory, rows, recipe) + cli_recipes.graphs_note(args, cluster, inventory, model) + \
            cli_recipes.cp_note(args, cluster, inventory, model) + cli_recipes.moe_notes(args, model, inventory):
        print(line)
    if auto_note:
        print(auto_note)
    if states_note:
        print(states_note)
    if split_note:
        print(split_note)
    if args.spot:
        print("note: --spot: costs at each node type's spot_usd_per_hour")
    if cli_recipes.misfit_line(result):
        print(cli_recipes.misfit_line(result))
    if cluster.analytic is not None and not any(not r["is_oom"] for r in rows):
        def search_with(options: dict) -> list[float]:
            again = search(model, cluster, inventory, heterogeneous=args.heterogeneous, placements=args.placements,
                           partitioner=args.partitioner, iterations=iterations, top=top, workers=workers_of(args.workers),
                           partition_budget=args.partition_budget, estimator_options=options)
            return [e.step_time_s for e in again.estimates if not e.memory.is_oom]
        hint = cli_recipes.no_fit_hint(recipe, search_with)
        if hint:
            print(hint)
    print(f"wrote {out}")
    return 0


def _fits(result) -> bool:
    return any(not e.memory.is_oom for e in result.estimates)


def _room(inventory) -> float:
    """Bytes of all the inventory's GPUs, each at its memory limit."""
    return sum(n.memory_limit_bytes * n.gpus_per_node for n in inventory)


def _state_bytes(model, grad_bytes: int, moment_bytes: int) -> float:
    """Bytes of the model's gradients of `grad_bytes`, fp32 master weights and Adam's two moments of
    `moment_bytes` each: what no sharding or recompute makes smaller in total -- fully sharded (ZeRO 3,
    PyTorch FSDP) the fp32 master is the parameter, no 16-bit copy beside it (memory.torch_fsdp_master);
    0 for a profiled model without an architecture."""
    from fasop.estimators.analytic.layers import total_params

    arch = model.architecture
    return 0.0 if arch is None else total_params(arch) * (grad_bytes + 4 + 2 * moment_bytes)


def _write_incomplete(result, out: Path, model, cluster, args: argparse.Namespace) -> int:
    """An interrupted search: the plans estimated before Ctrl-C / SIGTERM, written with a column
    `complete` = False (as pareto marks an interrupted sweep); nothing when none was."""
    import sys

    from fasop.core.workers import exit_status
    from fasop.report.results import (csv_text, extra_columns, provenance, search_rows, significant,
                                      with_provenance, with_rates, write_atomic)

    if not result.estimates:
        print("fasop: interrupted before any plan was estimated; nothing written", file=sys.stderr)
        return exit_status(result.interrupted)
    columns, rows = search_rows(result, model.sequence_length)
    if extra_columns(result.estimates):
        columns, rows = with_provenance(*with_rates(columns, rows, model, cluster),
                                        provenance(model, cluster, spot=args.spot,
                                                   calibration=args.calibration))
        rows = significant(rows)
    columns, rows = columns + ["complete"], [r | {"complete": False} for r in rows]
    write_atomic(out, csv_text(columns, rows), "--out")
    print(f"fasop: interrupted after {result.num_done:,} of {result.num_candidates:,} plans; wrote {out} "
          f"(complete=False: {len(rows):,} plans, the ranks of those estimated so far)", file=sys.stderr)
    if args.placements == "all" and result.top is not None:
        print(TIES_NOTE.format(now=""), file=sys.stderr)
    return exit_status(result.interrupted)


def _model_notes(model, inventory, rows: list[dict], recipe: dict) -> list[str]:
    """The architecture's notes (what of its config is not modelled), and when no plan fits, whether
    its weights, gradients and Adam states alone exceed all the GPUs' memory however sharded (and
    whether bf16 gradients and moments, --main-grads / --optimizer-states bf16, would leave room)."""
    arch = model.architecture
    if arch is None:
        return []
    trained = any(recipe.get("mtp_layers") or ())   # --mtp-layers N > 0: the modules are planned
    lines = [f"note: {model.name}: {n}" for n in arch.notes if not (trained and "not planned (--mtp-layers" in n)]
    if not any(not r["is_oom"] for r in rows):
        from fasop.estimators.analytic.layers import total_params
        n, room = total_params(arch), _room(inventory)
        grads, moments = (2 if recipe.get(k) == ("bf16",) else 4 for k in ("main_grads", "optimizer_states"))
        states = _state_bytes(model, grads, moments)
        if states > room:
            what = f"{'bf16' if grads == 2 else 'fp32'} gradients and {'bf16' if moments == 2 else 'fp32'} Adam moments"
            least = _state_bytes(model, 2, 2)
            instead = "" if least > room or (grads, moments) == (2, 2) else \
                f", or keep gradients and Adam moments in bf16 (--main-grads bf16 --optimizer-states bf16: " \
                f"{least / 2**40:.1f} TiB; Megatron-LM's precision-aware optimizer, as DeepSeek-V3 trained)"
            lines.append(f"note: {model.name}'s {n / 1e9:,.0f}B parameters need {states / 2**40:.1f} TiB for weights, "
                         f"{what}, more than the {room / 2**40:.1f} TiB of all its GPUs even fully sharded "
                         f"(ZeRO-3 / expert parallelism): add GPUs{instead}")
    return lines


def _auto_top(args: argparse.Namespace, model, cluster, inventory) -> tuple[int | None, str]:
    """(--top to search with, a note): without --top, past AUTO_TOP_PLANS plans (and within the
    orders that may be listed) only the AUTO_TOP fastest that fit are kept, found exactly."""
    from fasop.search.engine import AUTO_TOP, AUTO_TOP_PLANS, MAX_ORDERS, check_strategies, plan_count

    if args.top is not None or args.every_plan:
        return args.top, ""
    check_strategies(args.placements, args.partitioner, 1)
    if len({n.name for n in inventory}) > 1 and not args.heterogeneous:
        return None, ""  # search says why
    plans, orders = plan_count(model, cluster, inventory, placements=args.placements, partitioner=args.partitioner,
                               estimator_options=cli_recipes.options(args, cluster, model))
    if plans <= AUTO_TOP_PLANS or orders > MAX_ORDERS:
        return None, ""
    return AUTO_TOP, (f"note: {plans:,} plans, more than {AUTO_TOP_PLANS:,}: kept the {AUTO_TOP} fastest that fit, "
                      f"found exactly by branch and bound (--top K for another K, --every-plan to estimate and "
                      "write every plan)")


def _distinct(rows: list[dict], show: int) -> list[tuple[dict, int]]:
    """The first `show` rows that are different plans, each with how many rows it stands for:
    rows alike in degrees, split, step time, cost and memory, whose node orders hold the same
    nodes (an order of identical-speed nodes), are one plan shown once (the CSV keeps each)."""
    groups: dict[tuple, list] = {}
    for r in rows:
        key = (r["tp"], r["dp"], r["pp"], r["mbs"], r["partition"], r["step_time_s"], r["usd_per_step"],
               r["oom_gpumem_gib"], tuple(sorted(r["node_placement"].split("-"))),
               tuple(r.get(c) for c in cli_recipes.DEGREE_COLUMNS))
        if key in groups:
            groups[key][1] += 1
        elif len(groups) < show:
            groups[key] = [r, 1]
    return [(r, n) for r, n in groups.values()]


def _calibrated_by(args: argparse.Namespace) -> str:
    return f", calibrated by {args.calibration}" if getattr(args, "calibration", None) else ""


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
    fitting = _distinct(fitting, show)
    if not fitting:
        return
    extra = cli_recipes.shown_degrees([r for r, _ in fitting])
    header = ("rank", "tp", *extra, "dp", "pp", "mbs", "step_s", "samples/s", "usd/step", "train_h", "train_usd",
              "mem_GiB", "placement", "partition")
    table = [header] + [(
        str(r["rank"]), str(r["tp"]), *(str(r.get(c, "")) or "-" for c in extra), str(r["dp"]), str(r["pp"]), str(r["mbs"]),
        f"{r['step_time_s']:.4f}",
        f"{r['samples_per_s']:.1f}", f"{r['usd_per_step']:.5f}", f"{r['train_time_h']:,.1f}",
        f"{r['train_cost_usd']:,.0f}", f"{r['oom_gpumem_gib']:.2f}",
        abbreviate(r["node_placement"], counts) + (f" (+{n - 1} order{'s' * (n > 2)})" if n > 1 else ""),
        r["partition"]) for r, n in fitting]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        cells = [c.rjust(w) if i < 11 + len(extra) else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))]
        print("  ".join(cells).rstrip())
