"""Where `fasop export`, `explain` and `plot` find their plan: a row of a results CSV (--from, its
specs and calibration overlay from its provenance columns) or a row made of the plan flags, and the
estimator that re-estimates it as it was scored (its recipe columns, its inventory)."""

from __future__ import annotations

import argparse
from pathlib import Path

from fasop.cli import recipes as cli_recipes
from fasop.core.errors import FasopError


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
    given = [f for f in PLAN_DIMENSIONS if getattr(args, f, None) is not None]
    if given:
        raise FasopError(f"--{given[0]}: for the plan by flags; a --from row is explained and exported with its own "
                         f"{given[0]} column")
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
    from fasop.cli.args import with_step_shape

    searched = _row_shape(model, row, args.source)
    model = with_step_shape(searched, args.seq_len, args.global_batch_size)
    if args.global_batch_size is not None:
        row = at_batch(row, where, args.global_batch_size, searched.global_batch_size)
    if model.sequence_length != searched.sequence_length:
        row = {**row, "step_time_s": ""}   # not the step the CSV scored: no comparison with its time
    return plan_of_row(row, where, model, cluster), model, _calibrated(cluster, row, args.source), rows


def at_batch(row: dict, where: str, batch: int, spec_batch: int) -> dict:
    """The row's plan at another global batch (--global-batch-size): its micro-batches, dp x mbs dividing it,
    a multiple of pp for an interleaved plan (as a search enumerates them: estimators/analytic/recipes.py); its
    step time dropped where the batch is not the row's (`spec_batch`: the model's, for a row without micro-batches)."""
    from fasop.plans.rowplan import int_cell

    if row.get("status") not in (None, "ok"):   # a pareto composition without a plan: plan_of_row says so
        return row
    dp, mbs, pp = (int_cell(where, row, c) for c in ("dp", "mbs", "pp"))
    m, v = batch // (dp * mbs), int_cell(where, row, "virtual_stages") if row.get("virtual_stages") else 1
    if batch % (dp * mbs):
        raise FasopError(f"--global-batch-size: {batch} is not a multiple of {where}'s dp x mbs = {dp} x {mbs}")
    if v > 1 and m % pp:
        raise FasopError(f"--global-batch-size: {batch} makes {m} micro-batches, not a multiple of pp {pp} as {where}'s "
                         f"{v} virtual stages need")
    before = int_cell(where, row, "num_microbatches") * dp * mbs if row.get("num_microbatches") else spec_batch
    return {**row, "num_microbatches": str(m)} | ({} if batch == before else {"step_time_s": ""})


def _calibrated(cluster, row: dict, source: str):
    """`cluster` with the overlay the row was estimated with (its `calibration` column, a path; a relative
    one from the CSV's folder) applied again, so that explain, plot and export describe the plan as the
    search scored it."""
    from fasop.cli.args import overlaid

    overlay = (row.get("calibration") or "").strip()
    if not overlay:
        return cluster
    path = Path(source).parent / overlay   # an absolute overlay stays itself
    if not path.is_file():
        raise FasopError(f"{source}: calibration: {overlay[:200]!r}: no such file (the plans were estimated with "
                         "this `fasop calibrate` overlay: put it back at that path)")
    return overlaid(cluster, str(path), f"{source}: calibration")


def _row_shape(model, row: dict, source: str):
    """`model` with the sequence length and global batch the row was scored at: its columns of those names (a
    search run with --seq-len / --global-batch-size), else the spec's. (The flags apply on top: row_plan.)"""
    from fasop.cli.args import with_step_shape

    def value(column: str) -> int | None:
        if row.get(column) in (None, ""):
            return None
        text = str(row[column])
        if not text.isdigit() or len(text) > 12 or int(text) < 1:
            raise FasopError(f"--from: {source}: {column} {text[:40]!r} is not a positive integer")
        return int(text)

    return with_step_shape(model, value("sequence_length"), value("global_batch_size"), "--from")


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
    _check_dimensions(args, model, cluster)
    batch, layers = model.global_batch_size, len(model.layer_kinds)
    if batch % (args.dp * args.mbs):
        given = "--global-batch-size" if args.global_batch_size else f"{model.path}'s global_batch_size"
        raise FasopError(f"--dp / --mbs: dp {args.dp} x mbs {args.mbs} does not divide the global batch {batch} "
                         f"({given})")
    if args.pp > layers:
        raise FasopError(f"--pp: {args.pp} stages for the {layers} entries of {model.path}'s layer list")
    row = {"tp": str(args.tp), "dp": str(args.dp), "pp": str(args.pp), "mbs": str(args.mbs),
           "node_placement": args.placement, "num_microbatches": str(batch // (args.dp * args.mbs)),
           "partition": args.partition or "-".join([str(layers)] + ["0"] * (args.pp - 1))} | \
        {f: str(getattr(args, f)) for f in PLAN_DIMENSIONS if getattr(args, f, None) is not None} | \
        _cp_comm(model, args.tp, getattr(args, "cp", None) or 1) | \
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


def _cp_comm(model, tp: int, cp: int) -> dict:
    """A plan by flags with cp > 1: the first CP exchange the model's attention runs at tp x cp (the ring, else
    Ulysses' all-to-all, else the all-gather: context.default_comm, as a measured row stating none), its `cp_comm`."""
    if cp == 1 or model.architecture is None:
        return {}
    from fasop.estimators.analytic.context import default_comm

    return {"cp_comm": default_comm(model.architecture, tp, cp)}


def _check_dimensions(args: argparse.Namespace, model, cluster) -> None:
    """--zero only where the cluster's estimator takes a recipe, --cp / --ep / --etp above 1 only for a model with an
    architecture (as fasop search refuses them: plans/space.degree_space, the CLI's recipe options)."""
    if (getattr(args, "zero", None) or 0) > 0 and args.dp * (getattr(args, "cp", None) or 1) == 1:
        raise FasopError(f"--zero: {args.zero} with dp x cp = 1: nothing to shard (a search plans ZeRO 0 there)")
    if getattr(args, "zero", None) is not None and cluster.analytic is None:
        raise FasopError(f"--zero: the {cluster.estimator} estimator of {cluster.path} takes no training recipe "
                         "(use a cluster with estimator: analytic, e.g. --cluster aws)")
    given = [f for f in ("cp", "ep", "etp") if (getattr(args, f, None) or 1) != 1]
    if given and (model.architecture is None or cluster.analytic is None):
        why = f"model {model.name} has no architecture to split (a profiled FASOP spec)" if model.architecture is None \
            else f"the {cluster.estimator} estimator of {cluster.path} plans no such degree"
        raise FasopError(f"--{given[0]}: {why}; only 1 is possible")


PLAN_DIMENSIONS = ("cp", "ep", "etp", "zero")
"""The plan-by-flags options beyond tp, dp, pp, mbs: the degrees of context and expert parallelism and the ZeRO
stage, as a search CSV's columns of those names (None: not given)."""

FLAG_PLAN_SETTINGS = ("recompute", "zero", "sequence_parallel", "virtual_stages", "precision", "main_grads",
                      "optimizer_states", "dp_shard", "dp_replicate", "offload_layers", "recompute_layers", "bf16_layers",
                      "cp_comm")
"""The estimate's recipe columns a plan by flags takes into its row (what a search CSV row says)."""


def estimator_for(rp, model, cluster):
    """The cluster spec's estimator for the row's inventory (the optimal partitioner: a row's
    split is given, the partitioner only names it)."""
    from fasop.estimators import make_estimator

    estimator = make_estimator(model, cluster, inventory_of(rp), partitioner="optimal", **recipe_of(rp))
    if rp.plan.cp > 1 and not getattr(estimator, "context_parallel", True):   # as search.runnable_space
        from fasop.search.engine import NO_FUSED_CP
        raise FasopError(f"{rp.where}: cp {rp.plan.cp}: {NO_FUSED_CP}")
    if rp.plan.tp not in estimator.tp_degrees():
        raise FasopError(f"{rp.where}: tp: {rp.plan.tp} is not a degree the {cluster.estimator} estimator can score "
                         f"on these GPUs (it can: {', '.join(map(str, estimator.tp_degrees()))})")
    return estimator


def _true_false(cell: str) -> bool:
    """A results CSV's boolean cell as the search writes it (`True` / `False`); anything else a ValueError."""
    if cell not in ("True", "False"):
        raise ValueError(cell)
    return cell == "True"


RECIPE_COLUMNS = {"recompute": str, "zero": int, "sequence_parallel": _true_false, "virtual_stages": int,
                  "precision": str, "main_grads": str, "optimizer_states": str, "mtp_layers": int, "cuda_graphs": str,
                  "offload_layers": int, "recompute_layers": int, "bf16_layers": int, "cp_comm": str}
"""The recipe columns of a results row (the analytic estimator's) and how to read each cell."""


def recipe_of(rp) -> dict:
    """The row's recipe as estimator options (each a one-value tuple), for the columns it has:
    the plan is re-estimated as it was scored, not with the search's default recipe."""
    from fasop.estimators.analytic.recipes import ALLOWED

    out = {}
    for column, read in RECIPE_COLUMNS.items():
        cell = rp.row.get(column, "")
        if cell:
            try:
                out[column] = (read(cell),)
            except ValueError:
                raise FasopError(f"{rp.where}: {column}: {cell!r} is not a {column.replace('_', ' ')} value") from None
            allowed = ALLOWED.get(column, ())   # the row's column named, not the flag (--zero) the check is for
            if allowed and out[column][0] not in allowed and not cell.startswith("selective:"):
                raise FasopError(f"{rp.where}: {column}: expected one of {', '.join(map(str, allowed))}, got {cell!r}")
    if out.get("zero", (0,))[0] > 0 and rp.row.get("dp_replicate", "1") not in ("", "1"):
        out["hsdp"] = (True,)  # the states replicated across nodes: sharded over one node's DP ranks
    out["as_stated"] = True    # scored as the row says, not as a search would have admitted it (recipes.recipe_grid)
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
