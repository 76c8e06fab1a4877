"""Result tables: estimates -> rows of scalar cells, written atomically as CSV.

Every cell is a number, a boolean or a plain string; units are in the column names.
Floats are written with Python's shortest round-trip repr, so equal inputs give equal bytes.
"""

from __future__ import annotations

import csv
import io
import operator
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from fasop.core.cells import spreadsheet_safe
from fasop.costs.estimate import Estimate
from fasop.search.engine import SearchResult

SEARCH_COLUMNS = (
    "mbs", "tp", "dp", "pp", "node_placement", "partition",
    "step_time_s", "pipeline_time_s", "dp_allreduce_s", "embedding_allreduce_s", "usd_per_step",
    "is_oom", "oom_gpumem_gib", "is_zero_oom", "zero_oom_gpumem_gib", "train_cost_usd",
    "rank", "num_gpus", "num_nodes", "num_microbatches", "stage_gpu_types", "partition_method",
    "partition_proven_optimal", "samples_per_s", "tokens_per_s",
    "usd_per_hour", "iterations", "train_time_h",
)
"""Columns of `fasop search` output; `num_nodes_<type>` columns follow, one per node type. Their
units and meanings: docs/specs.md, "CSV columns" (tests/test_readme.py checks it against a run)."""


def search_rows(result: SearchResult, sequence_length: int) -> tuple[list[str], list[dict]]:
    """(columns, rows) for a search result: the plans that fit in memory fastest first, ranked
    1, 2, ...; then those that do not fit (is_oom True), fastest first, with an empty rank: rank
    counts plans that fit, with or without --top, and rank 1 is the fastest plan that runs.
    FASOP-2024 results (no estimator columns) keep FASOP's order and ranks, every plan by step
    time, byte for byte as the original program writes them (tests/test_reproduction.py)."""
    type_names = list(dict.fromkeys(n.name for n in result.inventory))
    columns = (with_gap(SEARCH_COLUMNS, result.estimates) + [f"num_nodes_{t}" for t in type_names]
               + extra_columns(result.estimates))
    counts = {f"num_nodes_{t}": sum(n.name == t for n in result.inventory) for t in type_names}
    rows, names = [], {}
    if not extra_columns(result.estimates):
        ranks = [(e, k) for k, e in enumerate(result.estimates, start=1)]
    else:
        fitting = [e for e in result.estimates if not e.memory.is_oom]
        ranks = [(e, k) for k, e in enumerate(fitting, start=1)] + \
            [(e, "") for e in result.estimates if e.memory.is_oom]
    for e, rank in ranks:
        rows.append(estimate_row(e, rank=rank, iterations=result.iterations, usd_per_hour=result.usd_per_hour,
                                 sequence_length=sequence_length, names=names) | counts)
    return columns, rows


PROVENANCE_COLUMNS = ("model", "model_spec", "cluster_spec", "price_basis", "fasop_version", "sequence_length",
                      "global_batch_size", "calibration")
"""Columns that say what a results CSV was made from, after the estimator's own (README, "CSV
columns"): explain / plot / export --from read the specs (and the step's sequence length and global
batch, which --seq-len / --global-batch-size may have changed) from them, so a renamed, moved or
spreadsheet-saved CSV still names its model and cluster. Written where the estimator adds its own
columns (the analytic one); FASOP-2024 CSVs keep their bytes and are found by their default name."""


def provenance(model, cluster, *, spot: bool, calibration: str | None = None) -> dict:
    """The PROVENANCE_COLUMNS of results of `model` on `cluster`: a shipped spec by its name, any
    other by the path it was loaded from (resolved); `calibration` the --calibration overlay's
    resolved path ('' without one), which explain, plot and export --from apply again."""
    from fasop import __version__

    return {"model": model.name, "model_spec": _spec_ref(model.path, "model_specs"),
            "cluster_spec": _spec_ref(cluster.path, "cluster_specs"),
            "price_basis": "spot" if spot else "on-demand", "fasop_version": __version__,
            "sequence_length": model.sequence_length, "global_batch_size": model.global_batch_size,
            "calibration": str(Path(calibration).resolve()) if calibration else ""}


def _spec_ref(path: str, folder: str) -> str:
    from fasop.specs.files import shipped_folder

    resolved = Path(path).resolve()
    if resolved.parent == shipped_folder(folder).resolve() and resolved.suffix in (".yaml", ".yml"):
        return resolved.stem
    return str(resolved)


RATE_COLUMNS = ("mfu", "tokens_per_s_per_gpu")
"""Analytic-estimator CSVs only (FASOP-2024 CSVs keep their bytes): the model FLOPs utilisation
(model FLOPs a step, Narayanan et al. 2021 Eq. 3 without recompute -- an MoE model's from the
parameters a token uses, its k routed experts, not all of them -- as `fasop explain` counts them,
/ step time / the summed dense peaks of the plan's GPUs in the plan's precision: the GPU catalog's
fp8 peak for an fp8 plan, bf16 or fp16 otherwise; empty where a GPU's peak is unknown) and tokens a
second per GPU."""


def rates(row: dict, model, cluster) -> dict:
    """The RATE_COLUMNS of one row (a plan that has a step time) of `model` on `cluster`."""
    from fasop.report.explain import model_flop_per_sample
    from fasop.report.peaks import catalog_peaks

    if row.get("step_time_s") in (None, ""):
        return dict.fromkeys(RATE_COLUMNS, "")
    gpus: dict[str, int] = {}
    # the plan uses every node its row counts (node names may hold '-', the placement's separator)
    counts = {c[len("num_nodes_"):]: int(n) for c, n in row.items() if c.startswith("num_nodes_") and n}
    for name, n in ((name, n) for name, n in counts.items() if n > 0):
        node = cluster.node_types[name]
        gpus[node.gpu] = gpus.get(node.gpu, 0) + n * node.gpus_per_node
    peaks = catalog_peaks(gpus, str(row.get("precision") or "bf16"))
    flop_per_s = model_flop_per_sample(model) * row["samples_per_s"]
    mfu = flop_per_s / sum(peaks[g] * n for g, n in gpus.items()) if all(g in peaks for g in gpus) else ""
    return {"mfu": mfu, "tokens_per_s_per_gpu": row["tokens_per_s"] / row["num_gpus"]}


def with_provenance(columns: list[str], rows: list[dict], described: dict) -> tuple[list[str], list[dict]]:
    """`columns` and `rows` with the provenance columns added (those a table has already keep theirs)."""
    new = [c for c in described if c not in columns]
    return columns + new, [row | {c: described[c] for c in new} for row in rows]


def with_rates(columns: list[str], rows: list[dict], model, cluster) -> tuple[list[str], list[dict]]:
    """`columns` and `rows` with RATE_COLUMNS after `tokens_per_s` (analytic-estimator CSVs)."""
    at = columns.index("tokens_per_s") + 1
    return columns[:at] + list(RATE_COLUMNS) + columns[at:], [row | rates(row, model, cluster) for row in rows]


def with_gap(columns: Sequence[str], estimates: Iterable[Estimate | None]) -> list[str]:
    """`columns` with `partition_gap_pct` after `partition_proven_optimal` when an estimate's split
    is the optimal partitioner's (FASOP's choices keep FASOP's columns, byte for byte)."""
    columns = list(columns)
    if any(e is not None and e.partitioner == "optimal" for e in estimates):
        columns.insert(columns.index("partition_proven_optimal") + 1, "partition_gap_pct")
    return columns


def estimate_row(e: Estimate, *, rank: int | str, iterations: int, usd_per_hour: float, sequence_length: int,
                 names: dict | None = None) -> dict:
    """The CSV row of one estimate. `names`: a dict kept across the rows of one result, of the
    joined names of placements and stage types by object (a search's rows share a handful)."""
    plan = e.plan
    samples_per_s = plan.global_batch_size / e.step_time_s
    names = {} if names is None else names
    placement, stage_types = ("placement", id(plan.placement)), ("stages", id(e.stage_node_types))
    if placement not in names:
        names[placement] = (plan.placement, plan.placement_name)  # the object kept with it: its id stays its own
    if stage_types not in names:
        names[stage_types] = (e.stage_node_types, "-".join(t.gpu for t in e.stage_node_types))
    return {
        "mbs": plan.mbs, "tp": plan.tp, "dp": plan.dp, "pp": plan.pp,
        "node_placement": names[placement][1],
        "partition": "-".join(map(str, e.partition)),
        "step_time_s": e.step_time_s, "pipeline_time_s": e.pipeline_time_s,
        "dp_allreduce_s": e.dp_allreduce_s, "embedding_allreduce_s": e.embedding_allreduce_s,
        "usd_per_step": e.usd_per_step,
        "is_oom": e.memory.is_oom, "oom_gpumem_gib": e.memory.oom_gpumem_gib,
        "is_zero_oom": e.memory.is_zero_oom, "zero_oom_gpumem_gib": e.memory.zero_oom_gpumem_gib,
        "train_cost_usd": e.usd_per_step * iterations,
        "rank": rank, "num_gpus": plan.num_gpus, "num_nodes": len(plan.placement),
        "num_microbatches": plan.num_microbatches,
        "stage_gpu_types": names[stage_types][1],
        "partition_method": e.partitioner, "partition_proven_optimal": e.partition_proven_optimal,
        "samples_per_s": samples_per_s, "tokens_per_s": samples_per_s * sequence_length,
        "usd_per_hour": usd_per_hour, "iterations": iterations,
        "train_time_h": e.step_time_s * iterations / 3600,
    } | ({"partition_gap_pct": e.partition_gap_pct} if e.partitioner == "optimal" else {}) | dict(e.extra_columns)


def extra_columns(estimates: Iterable[Estimate]) -> list[str]:
    """The estimator's own columns (Estimate.extra_columns), from the first estimate that has any."""
    return next(([name for name, _ in e.extra_columns] for e in estimates if e.extra_columns), [])


def csv_text(columns: Sequence[str], rows: Iterable[dict]) -> str:
    """The rows as CSV text, a header of `columns` first: each row's value of each column (a
    column a row lacks is empty; a key that is not a column is an error), floats as repr writes
    them (the shortest text that reads back as the same float), True/False as such; a text
    cell a spreadsheet would run as a formula gets a leading quote (spreadsheet_safe)."""
    columns = list(columns)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    cells = operator.itemgetter(*columns) if len(columns) > 1 else (lambda row: tuple(row[k] for k in columns))
    wanted = frozenset(columns)
    for row in rows:
        try:
            values = cells(row)
        except KeyError:
            values = [row.get(k, "") for k in columns]
        if len(row) > len(columns) or not row.keys() <= wanted:
            raise ValueError(f"csv_text: keys not among the columns: {sorted(row.keys() - wanted)}")
        writer.writerow([spreadsheet_safe(v) if v.__class__ is str else v for v in values])
    return buffer.getvalue()


def write_atomic(path: str | os.PathLike, text: str, flag: str = "--out") -> Path:
    """Write `text` to `path` via a temporary file in the same folder, renamed into place:
    readers never see a partial file, and an error or interrupt leaves no file behind
    (output.write_files; FasopError naming `flag` for a target it refuses or cannot write)."""
    from fasop.report.output import write_files

    return write_files([(Path(path), text)], flag)[0]


# ---------------------------------------------------------------------------- fasop pareto
PARETO_EXTRA_COLUMNS = ("composition", "cluster_kind", "status", "num_candidates",
                        "price_basis", "on_frontier", "is_knee", "complete", "step_time_bound_s",
                        "no_plan_reason")
"""Columns of `fasop pareto` output after SEARCH_COLUMNS and the `num_nodes_<type>` columns
(docs/pareto.md)."""


def pareto_rows(analysis, sequence_length: int, type_names: Sequence[str], *,
                spot: bool = False) -> tuple[list[str], list[dict]]:
    """(columns, rows) for `fasop pareto`: one row per composition, in composition order, with its
    fastest plan that fits (plan cells empty when none fits). Dollar columns use the composition's
    price on the chosen basis; `rank` is the row's rank in the file: compositions with a plan that
    fits, by training time (then cost, then composition order), 1 the fastest; empty for the rest."""
    bests = [r.best for r in analysis.results if r.best is not None]
    columns = (with_gap(SEARCH_COLUMNS, bests) + [f"num_nodes_{t}" for t in type_names] + list(PARETO_EXTRA_COLUMNS)
               + extra_columns(bests))
    rows = []
    for i, r in enumerate(analysis.results):
        counts = dict(r.composition.counts)
        row = dict.fromkeys(columns, "")
        best = r.best
        if best is not None:
            rank = r.search.estimates.index(best) + 1
            row |= estimate_row(best, rank=rank, iterations=r.iterations, usd_per_hour=r.usd_per_hour,
                                sequence_length=sequence_length)
            row |= {"train_time_h": r.train_time_h, "train_cost_usd": r.train_cost_usd}
            if spot:
                row["usd_per_step"] = r.usd_per_hour / 3600 * best.step_time_s
        row |= {f"num_nodes_{t}": counts.get(t, 0) for t in type_names}
        row |= {"num_nodes": r.composition.num_nodes, "usd_per_hour": r.usd_per_hour, "iterations": r.iterations,
                "is_oom": "" if r.status in ("no_plan", "pruned") else r.status == "oom",
                "composition": r.composition.label, "cluster_kind": r.composition.kind, "status": r.status,
                "num_candidates": "" if r.status == "pruned" else 0 if r.search is None else r.search.num_candidates,
                "price_basis": "spot" if spot else "on-demand",
                "on_frontier": analysis.on_frontier[i], "is_knee": i == analysis.knee,
                "complete": analysis.complete,
                "step_time_bound_s": "" if r.step_time_bound_s is None else r.step_time_bound_s,
                "no_plan_reason": r.no_plan_reason if r.status == "no_plan" else ""}
        rows.append(row)
    ranks = pareto_ranks([r.train_time_h for r in analysis.results], [r.train_cost_usd for r in analysis.results],
                         [r.status for r in analysis.results])
    for row, rank in zip(rows, ranks):
        row["rank"] = rank
    return columns, rows


def pareto_ranks(times_h, costs_usd, statuses) -> list[int | str]:
    """A pareto CSV's `rank` of each composition: those with a plan that fits (status ok) by training
    time, then cost, then composition order, 1 the fastest; '' for the rest (the frontier figure's numbers)."""
    fitting = sorted((t, c, i) for i, (t, c, s) in enumerate(zip(times_h, costs_usd, statuses)) if s == "ok")
    ranks: list[int | str] = [""] * len(list(statuses))
    for k, (_, _, i) in enumerate(fitting, start=1):
        ranks[i] = k
    return ranks


SIGNIFICANT_DIGITS = 6
"""Analytic-estimator CSVs write floats to this many significant digits: what an estimate can
mean (its physical constants are known to a few per cent), not the 17 digits of a float. FASOP-2024
CSVs keep full precision, byte for byte with FASOP's six experiments."""


def significant(rows: list[dict], digits: int = SIGNIFICANT_DIGITS) -> list[dict]:
    """`rows` with every float rounded to `digits` significant digits (written as Python writes the
    rounded float: 11010200.0, 0.0499451)."""
    def cut(value):
        return float(f"{value:.{digits}g}") if value.__class__ is float else value

    return [{k: cut(v) for k, v in row.items()} for row in rows]
