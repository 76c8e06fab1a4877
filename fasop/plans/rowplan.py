"""A plan read back from a results CSV row: where `fasop explain`, `fasop plot` and `fasop export`
start.

A row of `fasop search` (or of `fasop pareto`, one per composition) holds the plan's degrees, its
node order (`node_placement`, node type names joined by '-') and its layer split (`partition`,
layer-list entries per stage joined by '-'). With the cluster spec (node types) and the model
spec (layer list) that wrote it, the row becomes a :class:`RowPlan` again. Rows are chosen by
their `rank` column (1 = fastest; default) or by their position (`row`, 1 = first data row).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

from fasop.core.cells import spreadsheet_text
from fasop.core.errors import FasopError
from fasop.core.limits import GLOBAL_BATCH_SIZE, SHOWN_CHARS
from fasop.plans.plan import Plan
from fasop.plans.space import CP_COMMS, num_experts, sp_splits
from fasop.specs.host_ops import search_scopes
from fasop.specs.types import TRANSFORMER_KINDS, ClusterSpec, ModelSpec

MAX_CSV_BYTES = 512 * 2**20
"""A results CSV larger than this is refused (a search of every plan writes ~1 kB a plan)."""
TRUE, FALSE = ("True", "true", "1"), ("False", "false", "0", "")


@dataclass(frozen=True, kw_only=True)
class RowPlan:
    plan: Plan
    partition: tuple[int, ...]
    """Layer-list entries per pipeline rank, or per virtual stage (pp x virtual_stages entries in
    model order) where the row lists that many."""
    row: dict[str, str]
    """The CSV row as read (every cell a string)."""
    where: str
    """`<file> rank N` or `<file> row K`: names the row in messages and output headers."""
    virtual_stages: int = 1
    """Model chunks per pipeline rank (the `virtual_stages` column; 1 without it)."""

    def flag(self, column: str) -> bool | None:
        """A boolean column (`True`/`False`), or None where the row has no such cell."""
        value = self.row.get(column)
        if value is None or value == "":
            return None
        return value in TRUE

    def stage_kinds(self, model: ModelSpec) -> list[tuple[str, ...]]:
        """The layer kinds of each stage, in layer-list order."""
        out, start = [], 0
        for n in self.partition:
            out.append(model.layer_kinds[start:start + n])
            start += n
        return out


def read_rows(path: str | Path) -> list[dict[str, str]]:
    """The data rows of a results CSV, as strings."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_CSV_BYTES:
            raise FasopError(f"{path}: {size:,} bytes, more than a results CSV holds (limit {MAX_CSV_BYTES:,})")
        with open(path, newline="") as fh:
            reader = csv.DictReader(fh)
            rows = list(reader)
    except OSError as exc:
        raise FasopError(f"{path}: cannot read: {exc.strerror}") from None
    except (csv.Error, UnicodeDecodeError) as exc:
        raise FasopError(f"{path}: not a CSV file: {exc}") from None
    if not rows:
        raise FasopError(f"{path}: no data rows")
    for number, row in enumerate(rows, start=1):
        if None in row or None in row.values():  # csv.DictReader's restkey (extra cells) / restval (missing)
            what = "more" if None in row else "fewer"
            raise FasopError(f"{path}: data row {number}: {what} cells than the header's "
                             f"{len(reader.fieldnames)} columns")
    return [{k: _cell(v) for k, v in row.items()} for row in rows]


def _cell(text: str) -> str:
    """A cell as fasop wrote it: a spreadsheet's protective quote undone, and its TRUE / FALSE (Excel, LibreOffice
    save booleans so) read as the True / False fasop writes."""
    text = spreadsheet_text(text)
    return text.capitalize() if text in ("TRUE", "FALSE") else text


def pick_row(path: str | Path, rows: list[dict[str, str]], *, rank: int | None = None,
             row: int | None = None) -> tuple[dict[str, str], str]:
    """(the chosen row, its name). rank: the row whose `rank` column is N (default: the fastest
    plan that fits, for a search CSV; a pareto CSV, which has a rank per composition, defaults to
    its knee, or without one to its rank 1); row: the K-th data row."""
    if row is not None:
        if not 1 <= row <= len(rows):
            raise FasopError(f"{path}: --row: {row} is past the last of {len(rows)} rows")
        return rows[row - 1], f"{path} row {row}"
    if rank is None and "is_knee" in rows[0]:
        knees = [k for k, r in enumerate(rows, start=1) if r.get("is_knee") in TRUE]
        if knees:
            return rows[knees[0] - 1], f"{path} row {knees[0]} (the knee)"
        # fewer than 3 frontier points, no knee: the fastest composition (rank 1), saying so
        fastest = [k for k, r in enumerate(rows, start=1) if r.get("rank") == "1"]
        if not fastest:
            raise FasopError(f"{path}: a pareto CSV without a knee or a rank 1: choose a composition with --row K "
                             "or --rank N")
        return rows[fastest[0] - 1], f"{path} row {fastest[0]} (no knee: the fastest composition)"
    if rank is None and "rank" in rows[0]:  # the fastest plan that fits (rows are fastest first)
        fits = [k for k, r in enumerate(rows, start=1) if r.get("is_oom") != "True" and r["rank"]]
        if not fits:  # the fastest, saying so wherever the row's name is shown
            return rows[0], f"{path} row 1 (no plan fits in GPU memory: the fastest, which does not fit)"
        return rows[fits[0] - 1], f"{path} rank {rows[fits[0] - 1]['rank']}"
    rank = 1 if rank is None else rank
    if "rank" not in rows[0]:
        raise FasopError(f"{path}: rank: no such column; choose with --row K")
    found = [k for k, r in enumerate(rows, start=1) if r["rank"] == str(rank)]
    if not found:
        raise FasopError(f"{path}: rank: no row has rank {rank}")
    if len(found) > 1:
        raise FasopError(f"{path}: rank: {len(found)} rows have rank {rank} (a pareto CSV ranks plans per "
                         f"composition); choose one with --row K")
    return rows[found[0] - 1], f"{path} rank {rank}"


def int_cell(path_name: str, row: dict[str, str], column: str, minimum: int = 1) -> int:
    value = row.get(column)
    if value is None:
        raise FasopError(f"{path_name}: {column}: no such column")
    try:
        number = int(value) if len(value) <= 30 else None  # no int() of a 10,000-digit cell
    except ValueError:
        number = None
    if number is None or number < minimum:
        raise FasopError(f"{path_name}: {column}: expected an integer >= {minimum}, got {value[:SHOWN_CHARS]!r}")
    return number


def plan_of_row(row: dict[str, str], where: str, model: ModelSpec, cluster: ClusterSpec) -> RowPlan:
    """The plan of a row, checked against the specs: node types known, degrees that use every
    GPU, a partition that covers the layer list once."""
    if row.get("status") not in (None, "ok"):
        raise FasopError(f"{where}: status: {row['status']!r}, the composition has no plan that fits "
                         f"(composition {row.get('composition', '?')})")
    tp, dp, pp, mbs = (int_cell(where, row, c) for c in ("tp", "dp", "pp", "mbs"))
    cp, ep, etp = (int_cell(where, row, c) if row.get(c) else 1 for c in ("cp", "ep", "etp"))
    placement = _placement(where, row.get("node_placement", ""), cluster)
    if len({n.gpus_per_node for n in placement}) != 1 or tp * cp * dp * pp != sum(n.gpus_per_node for n in placement):
        degrees = "tp x dp x pp" if cp == 1 else "tp x cp x dp x pp"
        raise FasopError(f"{where}: {degrees} = {tp * cp * dp * pp} does not use the {len(placement)} nodes of "
                         f"node_placement ({sum(n.gpus_per_node for n in placement)} GPUs)")
    _check_experts(where, model, tp * cp * dp, ep, etp)
    if cp > 1 and model.sequence_length % (2 * cp):   # as a search's degree_space refuses it
        raise FasopError(f"{where}: cp: {cp} does not split the sequence of {model.sequence_length} tokens into 2 x {cp} "
                         f"equal chunks (Megatron-Core needs sequence_length % (2*cp) == 0)")
    _check_sequence_parallel(where, row, model, tp, cp)
    if row.get("num_microbatches"):
        m = int_cell(where, row, "num_microbatches")
        batch = m * dp * mbs
    else:  # FASOP's own CSVs: the model's global batch
        batch = model.global_batch_size
    if batch > GLOBAL_BATCH_SIZE:  # bounds the schedule's pp x m events (limits.py)
        raise FasopError(f"{where}: num_microbatches: global batch (micro-batches x dp x mbs) {batch:,} is past "
                         f"fasop's limit of {GLOBAL_BATCH_SIZE:,} samples")
    try:
        partition = tuple(int(x) for x in row.get("partition", "").split("-"))
    except ValueError:
        partition = ()
    v = _virtual_stages(where, row)
    _check_software(where, row, model)
    row = {**row, "cp_comm": _cp_comm(where, row, model, tp, cp) if cp > 1 else ""}
    stages = pp if len(partition) != pp * v else pp * v  # per rank, or per virtual stage (model chunk)
    # a stage of no layers is odd but FASOP's min-max partitioner reports some (its t5 outputs)
    if len(partition) != stages or min(partition) < 0 or sum(partition) != len(model.layer_kinds):
        raise FasopError(f"{where}: partition: {row.get('partition', '')[:SHOWN_CHARS]!r} is not {stages} counts >= 0 summing "
                         f"to the {len(model.layer_kinds)} entries of {model.path}'s layer list")
    plan = Plan(tp=tp, dp=dp, pp=pp, mbs=mbs, global_batch_size=batch, placement=placement,
                **{k: v for k, v in (("cp", cp), ("ep", ep), ("etp", etp)) if v != 1})
    return RowPlan(plan=plan, partition=partition, row=dict(row), where=where, virtual_stages=v)


def _cp_comm(where: str, row: dict[str, str], model: ModelSpec, tp: int, cp: int) -> str:
    """The row's `cp_comm` (context parallelism's exchange, p2p, a2a or all_gather), stripped; an empty cell or none is p2p:
    Megatron-Core's default and what a row written before the column was scored with. Refused where Transformer
    Engine refuses it for the model at tp x cp (Architecture.cp_comm_problem), as a search would not write it."""
    cell = (row.get("cp_comm") or "").strip().lower()
    comm = cell or "p2p"
    if comm not in CP_COMMS:
        raise FasopError(f"{where}: cp_comm: expected p2p, a2a or all_gather (context parallelism's exchange), got "
                         f"{comm[:SHOWN_CHARS]!r}")
    why = model.architecture.cp_comm_problem(tp, cp, comm) if model.architecture is not None else ""
    if why:
        empty = "" if cell else " (the empty cell: Megatron-Core's default, the ring such a row was scored with)"
        raise FasopError(f"{where}: cp_comm: {comm}{empty}: {why}")
    return comm


def _check_sequence_parallel(where: str, row: dict[str, str], model: ModelSpec, tp: int, cp: int) -> None:
    """A row with sequence parallelism (stated, or an MoE model's at tp > 1: moe_layer.py) has tp dividing a CP
    rank's seq / cp tokens, as a search enumerates it (plans/space.py)."""
    seq, moe = model.sequence_length, num_experts(model) > 0
    if tp > 1 and (moe or row.get("sequence_parallel") == "True") and not sp_splits(seq, tp, cp):
        tokens = f"{seq // cp} tokens (sequence {seq} / cp {cp})" if cp > 1 else f"sequence of {seq} tokens"
        need = "its MoE layers need sequence parallelism at tp > 1, which" if moe else "its sequence parallelism"
        raise FasopError(f"{where}: tp: {tp} does not split a rank's {tokens}: {need} scatters them over the tp "
                         f"ranks (Megatron-Core needs them divisible by tp)")


def _check_experts(where: str, model: ModelSpec, stage_ranks: int, ep: int, etp: int) -> None:
    """ep divides the model's experts and ep x etp a stage's tp x cp x dp ranks (Megatron-Core)."""
    experts = num_experts(model)
    if (ep > 1 or etp > 1) and not experts:
        raise FasopError(f"{where}: ep: {ep}, etp: {etp}: {model.name} has no experts (a dense model)")
    if experts % ep or stage_ranks % (ep * etp):
        what = f"ep: {ep}" if experts % ep or etp == 1 else f"etp: {etp}"
        raise FasopError(f"{where}: {what}: ep must divide {model.name}'s {experts} experts, and ep x etp = {ep * etp} "
                         f"the stage's tp x cp x dp = {stage_ranks} ranks")


def placement_types(names: str, cluster: ClusterSpec, where: str = "node_placement") -> tuple:
    """The node types of a `node_placement` cell (names may hold '-': gcp's a3-highgpu-8g)."""
    return _placement(where, names, cluster)


def _placement(where: str, names: str, cluster: ClusterSpec) -> tuple:
    """The node types of `node_placement`: fasop's node type names, or (FASOP's own CSVs) the
    instance names of the cluster's node types where each names one type, joined by '-'. Names may
    hold '-' themselves (p6-b200, a3-highgpu-8g, h100 beside h100-spot): the cell is read as the one
    sequence of names it spells (every split point tried, from the end); none or two are refused."""
    by_instance: dict[str, list] = {}
    for node in cluster.node_types.values():
        by_instance.setdefault(node.instance, []).append(node)
    names_of = dict(cluster.node_types) | {i: nodes[0] for i, nodes in by_instance.items()
                                           if len(nodes) == 1 and i not in cluster.node_types}
    if not names:
        raise FasopError(f"{where}: node_placement: empty")
    end = len(names)
    ways, step = {end + 1: 1}, {}   # parses of names[i:] (at most 2 counted), and one: (name, next i)
    starts = sorted({0} | {k + 1 for k, ch in enumerate(names) if ch == "-"}, reverse=True)
    for i in starts:
        count = 0
        for name in names_of:
            stop = i + len(name)
            if _spells(names, name, i) and ways.get(stop + 1, 0):
                count += ways[stop + 1]
                step.setdefault(i, (name, stop + 1))
        ways[i] = min(count, 2)
    if ways[0] == 0:   # the name at the furthest point any reading of the known names reaches
        reach = {0}
        for i in starts[::-1]:
            if i in reach:
                reach |= {i + len(n) + 1 for n in names_of if _spells(names, n, i)}
        bad = names[max(reach):].split("-")[0]
        raise FasopError(f"{where}: node_placement: node type {bad[:SHOWN_CHARS]!r} is not in "
                         f"{cluster.path} (known: {', '.join(cluster.node_types)})")
    if ways[0] > 1:
        raise FasopError(f"{where}: node_placement: {names[:SHOWN_CHARS]!r} reads as more than one sequence of "
                         f"{cluster.path}'s node types ({', '.join(cluster.node_types)}): rename a node type so "
                         "that no name is another's joined by '-'")
    parts, i = [], 0
    while i <= end:
        name, i = step[i]
        parts.append(names_of[name])
    return tuple(parts)


def _spells(names: str, name: str, i: int) -> bool:
    """Whether `name` stands at position i of a '-'-joined placement, a whole name."""
    stop = i + len(name)
    return bool(name) and names.startswith(name, i) and (stop == len(names) or names[stop] == "-")


def _check_software(where: str, row: dict[str, str], model: ModelSpec) -> None:
    """The row's `mtp_layers`, `cuda_graphs`, `offload_layers`, `recompute_layers`, `bf16_layers` cells (the analytic
    estimator's), where it has them: a cell the search could not have written is refused with its column and value,
    not read as none / eager."""
    mtp = (row.get("mtp_layers") or "0").strip()
    arch = model.architecture
    if not (mtp.isdigit() and len(mtp) < 3):
        raise FasopError(f"{where}: mtp_layers: expected a count of multi-token-prediction depths, got "
                         f"{mtp[:SHOWN_CHARS]!r}")
    why = arch.mtp_problem(int(mtp), model.name) if arch is not None else \
        (f"{int(mtp)}: {model.name} has no multi-token-prediction module" if int(mtp) else "")
    if why:
        raise FasopError(f"{where}: mtp_layers: {why}")
    why = search_scopes((row.get("cuda_graphs") or "none").strip())[1]
    if why:
        raise FasopError(f"{where}: cuda_graphs: {why}")
    layers = arch.num_layers if arch is not None else None
    for column, bound, over in (("offload_layers", "below", 0), ("recompute_layers", "below", 0),
                                ("bf16_layers", "at most", 1)):   # 16-bit layers may be all of them
        n = (row.get(column) or "0").strip()
        if not (n.isdigit() and len(n) < 5) or (layers is not None and int(n) >= max(1, layers + over)):
            raise FasopError(f"{where}: {column}: expected a count of layers {bound} the model's, got {n[:SHOWN_CHARS]!r}")


def _virtual_stages(where: str, row: dict[str, str]) -> int:
    """Model chunks per pipeline rank: the `virtual_stages` column where the row has one, else 1
    (FASOP's plans). The partition then lists pp x virtual_stages counts in model order."""
    v = int_cell(where, row, "virtual_stages") if row.get("virtual_stages") else 1
    if v > 1024:
        raise FasopError(f"{where}: virtual_stages: {v:,} is past 1,024 model chunks a rank")
    return v


def specs_from_name(path: str | Path) -> tuple[str | None, str | None]:
    """(model, cluster) names from a default output name `<model>_<cluster>_...csv`, else Nones."""
    parts = Path(path).stem.split("_")
    return (parts[0], parts[1]) if len(parts) >= 3 else (None, None)


def block_index(kinds: tuple[str, ...], index: int) -> int:
    """The number of the transformer block at layer-list `index` among the blocks of its kind."""
    return sum(k == kinds[index] for k in kinds[:index])


def stage_layer_names(model: ModelSpec, partition: tuple[int, ...], mtp: int = 0) -> list[str]:
    """Each stage's layers by name, e.g. `embedding, blocks 0-4` or `blocks 45-47, MTP, head` (`mtp`:
    the multi-token-prediction depths the last stage trains). Transformer blocks are numbered from 0
    over the model, encoder and decoder blocks apart."""
    out, start = [], 0
    kinds = model.layer_kinds
    for n in partition:
        runs, k = [], start
        while k < start + n:
            kind = kinds[k]
            j = k
            while j < start + n and kinds[j] == kind:
                j += 1
            if kind in TRANSFORMER_KINDS:
                first, last = block_index(kinds, k), block_index(kinds, j - 1)
                word = "blocks" if kind == "transformer" else f"{kind} blocks"
                runs.append(f"{word} {first}" if first == last else f"{word} {first}-{last}")
            else:
                runs += (["MTP" if mtp == 1 else f"MTP x{mtp}"] if kind == "head" and mtp else []) + [kind] * (j - k)
            k = j
        out.append(", ".join(runs) or "(no layers)")
        start += n
    return out


def finite(value: str) -> float | None:
    """A float cell, or None when empty or not a finite number."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None
