"""`fasop validate`'s rows: the CSV read, typed cells, and where a row's ranks run.

A row names one GPU (`gpu`, `gpus_per_node`: the GPU's vendor reference node) or a cluster
(`cluster`: a cluster spec name or a YAML path relative to the CSV; `nodes`: its inventory in node
order, as --nodes spells it). Ranks run in Megatron-LM / DeepSpeed order over the nodes
(fasop.estimators.analytic.mixed); `stage_gpus` (stages '|', a stage's DP replicas '/') names each
stage's and replica's GPU instead; `layers_per_stage` ('-') fixes the split of the blocks.
"""

from __future__ import annotations

import csv
import difflib
import io
import math
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from fasop.core import limits
from fasop.core.errors import FasopError
from fasop.estimators.analytic import cost as C
from fasop.estimators.analytic import mixed
from fasop.estimators.analytic.context import default_comm
from fasop.estimators.analytic.layers import LOW_PRECISIONS
from fasop.plans.space import CP_COMMS
from fasop.search.engine import parse_nodes
from fasop.specs.calibration import Calibration, apply_calibration
from fasop.specs.catalog import AnalyticParams, GpuType, canonical, gpu_names, load_gpus, unknown_gpu
from fasop.specs.files import decode_utf8, read_bounded
from fasop.specs.load import load_cluster
from fasop.specs.types import ClusterSpec, NodeType

REQUIRED = ("num_layers", "hidden_size", "num_attention_heads", "seq_len", "vocab_size", "gpu", "num_gpus",
            "tp", "pp", "dp", "global_batch_size", "measured_seconds_per_iter")
ARCHITECTURE = ("num_layers", "hidden_size", "num_attention_heads", "vocab_size")
"""Required columns a `model` column replaces (a row naming a model leaves them empty)."""
OPTIONAL = ("name", "model", "cp", "ep", "etp", "zero", "dp_shard", "task", "moe_dispatcher", "moe_routing", "ep_overlap", "moe_permute_fusion", "cuda_graphs", "main_grads", "optimizer_states", "mtp_layers", "ffn_hidden_size", "num_kv_heads", "gated_mlp", "tied_embeddings", "dropout", "gpus_per_node", "precision",
            "micro_batch_size", "recompute", "sequence_parallel", "distributed_optimizer", "virtual_pp",
            "measured_peak_mem_gib", "fused_attention", "overlap_grad_reduce", "fused_elementwise", "tp_overlap",
            "cluster", "nodes", "layers_per_stage", "stage_gpus", "recompute_num_layers", "offload_layers", "bf16_layers",
            "cp_comm")
CEILINGS = {"num_layers": limits.LAYERS, "hidden_size": limits.HIDDEN_SIZE, "num_attention_heads": limits.ATTENTION_HEADS,
            "num_kv_heads": limits.ATTENTION_HEADS, "seq_len": limits.SEQUENCE_LENGTH, "vocab_size": limits.VOCAB_SIZE,
            "ffn_hidden_size": 64 * limits.HIDDEN_SIZE, "global_batch_size": limits.MEASURED_GLOBAL_BATCH_SIZE,
            "gpus_per_node": limits.GPUS_PER_NODE, "recompute_num_layers": limits.LAYERS, "offload_layers": limits.LAYERS, "bf16_layers": limits.LAYERS, "micro_batch_size": limits.MEASURED_GLOBAL_BATCH_SIZE, "virtual_pp": 64}
"""limits.py's ceilings per integer column (others, GPU counts and degrees: limits.GPUS)."""
MAX_COLUMNS = 1000
"""A runs CSV has at most this many columns (validate reads about 50; the rest are left out with a note)."""
MAX_BYTES = 16 << 20
"""A runs CSV is at most 16 MiB (as a profile CSV, limits.PROFILE_BYTES)."""


@dataclass(frozen=True)
class Row:
    line: int
    cells: dict



MIN_MEASURED = 1e-6
"""A measured second a step or GiB is at least 1e-6 (a microsecond, a KiB): below it, a typo (5e-324) whose error is
infinite."""
MAX_ROWS = 10_000
"""A runs CSV has at most this many runs (validate: ~2 ms a run; calibrate refuses past calibrate.MAX_RUNS)."""
MAX_MEASURED = 1e6
"""A measured seconds-per-iteration or peak GiB is at most 1e6 (11.6 days a step; 1 PiB a GPU):
above it, a typo (1e308) that would dominate the error statistics."""
SHOWN = 60
"""An offending cell is shown cut to this many characters."""


def read_rows(path: Path) -> list[Row]:
    return read_table(path)[0]


def read_table(path: Path) -> tuple[list[Row], tuple[str, ...]]:
    """(rows, columns not read) of a runs CSV. Header names compare stripped and in lower case. A
    column validate does not read is refused when it is a near miss of one it reads (a typo that would
    silently drop a setting: `micro_bach_size`), else left out and returned (a spreadsheet's `source`,
    `notes` or `tokens_per_sec` columns) for the caller to name."""
    text = decode_utf8(path, read_bounded(path, MAX_BYTES, " runs CSV"))
    try:
        reader = csv.DictReader(io.StringIO(text, newline=""))
        header = [(c or "").strip().lower() for c in reader.fieldnames or []]
        reader.fieldnames = header
        rows = [Row(i, r) for i, r in enumerate(reader, start=2)]
    except csv.Error as exc:
        raise FasopError(f"{path}: not a readable CSV file: {exc}") from None
    if len(rows) > MAX_ROWS:
        raise FasopError(f"{path}: {len(rows):,} runs, more than the {MAX_ROWS:,} a runs CSV may have (split it)")
    if len(header) > MAX_COLUMNS:
        raise FasopError(f"{path}: header: {len(header):,} columns, more than the {MAX_COLUMNS:,} a runs CSV may have")
    unnamed = next((k for k, c in enumerate(header, start=1) if not c), None)
    if unnamed is not None:   # a spreadsheet's index column, a trailing comma
        raise FasopError(f"{path}: header: column {unnamed} has no name (name it, or delete the column)")
    twice = sorted(c for c, n in Counter(header).items() if n > 1)
    if twice:
        raise FasopError(f"{path}: header: column {twice[0]!r} appears more than once")
    odd = next((r for r in rows if None in r.cells or None in r.cells.values()), None)
    if odd is not None:  # DictReader's restkey (extra cells) / restval (missing ones)
        raise FasopError(f"{path}: line {odd.line}: {'more' if None in odd.cells else 'fewer'} cells than the "
                         f"header's {len(header)} columns")
    missing = [c for c in REQUIRED if c not in header and not ("model" in header and c in ARCHITECTURE)
               and not (c == "gpu" and "cluster" in header)]   # a cluster's nodes name the GPUs
    if missing:
        instead = " -- or a `model` column instead of the architecture's" if missing[0] in ARCHITECTURE else ""
        raise FasopError(f"{path}: header: missing required column {missing[0]!r} (required: {', '.join(REQUIRED)}"
                         f"{instead})")
    known = REQUIRED + OPTIONAL
    unknown = [c for c in header if c not in known]
    for column in unknown:
        near = difflib.get_close_matches(column, known, n=1, cutoff=NEAR_MISS)
        if near:
            raise FasopError(f"{path}: header: unknown column {column!r} (did you mean {near[0]!r}? "
                             f"optional: {', '.join(OPTIONAL)})")
    if not rows:
        raise FasopError(f"{path}: no rows")
    return rows, tuple(unknown)


FLAGS = {"0": False, "1": True, "false": False, "true": True, "no": False, "yes": True}
"""A 0 / 1 cell, also as spreadsheets and pandas write a boolean (TRUE, False)."""
def unread_note(path, columns: tuple[str, ...]) -> str:
    """The one stderr line naming the columns validate leaves out (the first ten, and how many more)."""
    shown = ", ".join(repr(c[:SHOWN]) for c in columns[:10]) + (f" and {len(columns) - 10:,} more" if len(columns) > 10 else "")
    return f"fasop: note: {path}: columns not read: {shown} (docs/validate.md lists the columns)"


NEAR_MISS = 0.85
"""difflib's similarity above which an unknown column is taken for a misspelt known one and refused
(`micro_bach_size` 0.97, `sequence_parallelism` 0.92); below it the column is not read (`notes` against
`nodes` 0.8, `source`, `url`)."""


class Cells:
    """Typed reads of one row; errors name the file, line and column."""

    def __init__(self, path: Path, row: Row):
        self.path, self.row = path, row

    def error(self, column: str, message: str) -> FasopError:
        return FasopError(f"{self.path}: line {self.row.line}: {column}: {message}")

    def text(self, column: str) -> str:
        """The cell, stripped; an optional column's `n/a` (as Megatron-Bridge's tables print an unused
        degree) is an empty cell."""
        value = (self.row.cells.get(column) or "").strip()
        return "" if value.lower() == "n/a" and column not in REQUIRED else value

    def int(self, column: str, default=None, low: int = 1) -> int | None:
        text = self.text(column)
        if not text:
            if default is None and column in REQUIRED:
                raise self.error(column, "empty required cell" + (" (or name a `model`)" if column in ARCHITECTURE else ""))
            return default
        try:
            value = int(text) if len(text) <= 20 else None
        except ValueError:
            value = None
        if value is None:
            raise self.error(column, f"expected an integer, got {text[:60]!r}")
        high = CEILINGS.get(column, limits.GPUS)
        if not low <= value <= high:
            raise self.error(column, f"expected an integer in [{low}, {high:,}], got {text!r}")
        return value

    def flag(self, column: str, default=None) -> bool | None:
        text = self.text(column)
        if not text:
            return default
        value = FLAGS.get(text.lower())
        if value is None:
            raise self.error(column, f"expected 0 or 1 (or true / false, yes / no), got {text!r}")
        return value

    def positive(self, column: str, high: float = MAX_MEASURED) -> float | None:
        """A number in [MIN_MEASURED, `high`] (a second a step, a GiB: far outside any real run)."""
        text = self.text(column)
        if not text:
            if column in REQUIRED:
                raise self.error(column, "empty required cell")
            return None
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and MIN_MEASURED <= value <= high):
            raise self.error(column, f"expected a positive number in [{MIN_MEASURED:g}, {high:g}], got {text[:SHOWN]!r}")
        return value

    def share(self, column: str, default: float) -> float:
        text = self.text(column)
        if not text:
            return default
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not 0 <= value <= 1:
            raise self.error(column, f"expected a share in [0, 1], got {text!r}")
        return value

    def choice(self, column: str, allowed: tuple[str, ...], default=None) -> str | None:
        text = self.text(column).lower()
        if not text:
            return default
        if text not in allowed:
            raise self.error(column, f"expected one of {', '.join(allowed)}, got {text!r}")
        return text




@dataclass(frozen=True, kw_only=True)
class Hardware:
    """Where a row's ranks run: [replica][stage] hardware, and what the output reports of it."""

    replicas: tuple[tuple[C.StageHardware, ...], ...]
    params: AnalyticParams
    """The constants: the row's cluster's `analytic:` section over analytic.yaml, else the caller's."""
    gpus: tuple[GpuType, ...]
    """Every GPU type the row runs on, in order of first use."""
    cluster: str
    published: bool = True
    """Whether empty software cells take what the row's GPUs' published runs had (their `validate_software`), else
    the constants `params` (the row's cluster's, as `fasop search` estimates plans: `--as-searched`)."""

    @property
    def stage_gpus(self) -> str:
        """Each stage's GPU type ('|'), its replicas' ('/') where they differ."""
        out = []
        for i in range(len(self.replicas[0])):
            names = [r[i].gpu.name for r in self.replicas]
            out.append(names[0] if len(set(names)) == 1 else "/".join(names))
        return "|".join(out)


def catalog_gpu(c: Cells, column: str, text: str) -> GpuType:
    gpu = gpu_names().get(canonical(text))
    if gpu is None:
        raise c.error(column, unknown_gpu(repr(text[:60]), text[:60]))
    return gpu


def reference_node(gpu: GpuType, g: int) -> NodeType:
    """The GPU's vendor reference node with g GPUs (its network: reference_inter_node_gbit_per_s)."""
    return NodeType(name="node", instance="reference", gpu=gpu.name, gpus_per_node=g,
                    memory_limit_bytes=gpu.memory_bytes, intra_node_bytes_per_s=gpu.intra_node_bytes_per_s,
                    inter_node_bytes_per_s=gpu.reference_inter_node_bytes_per_s,
                    intra_node_shared=gpu.intra_node_link == "pcie", usd_per_hour=0.0, spot_usd_per_hour=None)


@lru_cache(maxsize=16)
def _cluster(path: str) -> ClusterSpec:
    return load_cluster(path)


def row_cluster(c: Cells) -> tuple[str, ClusterSpec] | None:
    """The row's cluster spec (a path relative to the CSV, else a name), or None."""
    text = c.text("cluster")
    if not text:
        if c.text("nodes"):
            raise c.error("nodes", "needs a `cluster` to name node types from")
        return None
    beside = c.path.parent / text
    try:
        spec = _cluster(str(beside) if text.endswith((".yaml", ".yml")) and beside.is_file() else text)
    except FasopError as exc:
        raise c.error("cluster", str(exc)) from None
    if spec.analytic is None:
        raise c.error("cluster", f"{text!r} has estimator {spec.estimator!r}: fasop validate needs catalog GPUs "
                                 "(estimator: analytic)")
    return text, spec


def nodes_of(c: Cells, spec: ClusterSpec, n: int) -> tuple[NodeType, ...]:
    text = c.text("nodes")
    if not text:
        raise c.error("nodes", "empty: a row with a cluster lists its nodes in rank order (e.g. p3=3,g4dn=1)")
    try:
        nodes = parse_nodes(text, spec)
    except FasopError as exc:
        raise c.error("nodes", str(exc).replace("--nodes: ", "")) from None
    held = sum(x.gpus_per_node for x in nodes)
    if held != n:
        raise c.error("nodes", f"{text!r} holds {held} GPUs, num_gpus is {n}")
    return nodes


def stated_on(c: Cells, nodes: tuple[NodeType, ...], gpus: tuple[GpuType, ...], names) -> None:
    """Beside `cluster` / `nodes` the nodes decide: a `gpu` cell names their GPUs (one, or several joined by '+', as
    validate writes a mixed row's), a `gpus_per_node` their count, `stage_gpus` reorders their GPUs and adds none --
    any other would be silently replaced by the nodes'."""
    g = c.int("gpus_per_node", None)
    if g is not None and any(x.gpus_per_node != g for x in nodes):
        sizes = ", ".join(sorted({f"{x.name} {x.gpus_per_node}" for x in nodes}))
        raise c.error("gpus_per_node", f"{g}: the row's nodes hold their own ({sizes}); leave it empty")
    held = tuple(dict.fromkeys(x.name for x in gpus))
    for name in c.text("gpu").split("+") if c.text("gpu") else ():
        if catalog_gpu(c, "gpu", name.strip()).name not in held:
            raise c.error("gpu", f"{name.strip()[:60]!r} is not a GPU of the row's nodes {c.text('nodes')[:80]!r} "
                                 f"({', '.join(held)}); leave it empty or name theirs")
    for gpu in (x for stage in names or () for x in stage):
        if gpu.name not in held:
            raise c.error("stage_gpus", f"{gpu.name} is not a GPU of the row's nodes ({', '.join(sorted(held))})")


def stage_gpu_names(c: Cells, pp: int, dp: int) -> tuple[tuple[GpuType, ...], ...] | None:
    """`stage_gpus`: pp stages ('|'), each dp replicas ('/') or one type for all of them."""
    text = c.text("stage_gpus")
    if not text:
        return None
    stages = text.split("|")
    if len(stages) != pp:
        raise c.error("stage_gpus", f"{len(stages)} stages ('|'-separated) in {text[:80]!r}, pp is {pp}")
    out = []
    for i, stage in enumerate(stages):
        names = stage.split("/")
        if len(names) not in (1, dp):
            raise c.error("stage_gpus", f"stage {i}: {len(names)} replicas ('/'-separated), dp is {dp}")
        gpus = tuple(catalog_gpu(c, "stage_gpus", x.strip()) for x in names)
        out.append(gpus * dp if len(gpus) == 1 else gpus)
    return tuple(out)


def layers_per_stage(c: Cells, pp: int, layers: int) -> tuple[int, ...] | None:
    """`layers_per_stage`: Transformer blocks per stage, '-'-separated, summing to num_layers."""
    text = c.text("layers_per_stage")
    if not text:
        return None
    parts = text.split("-")
    if len(parts) != pp or not all(p.strip().isdigit() and len(p.strip()) <= 9 for p in parts):
        raise c.error("layers_per_stage", f"expected {pp} positive integers joined by '-', got {text[:80]!r}")
    counts = tuple(int(p) for p in parts)
    if min(counts) < 1 or sum(counts) != layers:
        raise c.error("layers_per_stage", f"{text!r}: each stage >= 1 block and {layers} blocks in all "
                                          f"(got {sum(counts)})")
    return counts


def row_hardware(c: Cells, tp: int, dp: int, pp: int, base: AnalyticParams) -> Hardware:
    """Where the row's ranks run: its cluster's nodes, or the `gpu`'s reference nodes."""
    names = stage_gpu_names(c, pp, dp)
    found = row_cluster(c)
    if found is not None:
        label, spec = found
        nodes = nodes_of(c, spec, tp * dp * pp)
        params = spec.analytic
        if base.calibration:   # --calibration applies to a cluster's own constants too
            params = apply_calibration(Calibration(values=base.calibration), params)
        gpus = tuple(params.gpu(load_gpus()[canonical(x.gpu)]) for x in nodes)
        stated_on(c, nodes, gpus, names)
    else:
        if not c.text("gpu"):
            raise c.error("gpu", "empty: a row names a `gpu` or a `cluster`")
        gpu, label = base.gpu(catalog_gpu(c, "gpu", c.text("gpu"))), ""
        g = c.int("gpus_per_node", gpu.reference_gpus_per_node)
        count = -(-tp * dp * pp // g)
        nodes, gpus, params = (reference_node(gpu, g),) * count, (gpu,) * count, base
        if names is None:   # one GPU type: the estimator's own stage hardware, one replica for all
            stages = C.stage_hardware(tp, dp, pp, nodes, gpus, params)
            return Hardware(replicas=(stages,), params=params, gpus=(gpu,), cluster=label)
    if names is not None:
        names = tuple(tuple(params.gpu(g) for g in stage) for stage in names)
    replicas = mixed.replica_stages(tp, dp, pp, nodes, gpus, params, names)
    used = tuple(dict.fromkeys(hw.gpu for r in zip(*replicas) for hw in r))
    return Hardware(replicas=replicas, params=params, gpus=used, cluster=label)


def bf16_layers_cell(c: Cells, precision: str, layers: int) -> int:
    """`bf16_layers`: layers of an FP8 / MXFP8 / NVFP4 row whose matmuls stay 16-bit (Megatron-Core's
    num_layers_at_start_in_bf16 + num_layers_at_end_in_bf16 under first_last_layers_bf16); empty: 0."""
    n = c.int("bf16_layers", low=0) or 0
    if n and precision not in LOW_PRECISIONS:
        raise c.error("bf16_layers", f"{n} needs a low-precision row (fp8, mxfp8, nvfp4), the row's precision "
                                     f"is {precision}")
    if n > layers:
        raise c.error("bf16_layers", f"{n}: the model has {layers} layers")
    return n


def cp_comm_cell(c: Cells, arch, tp: int, cp: int) -> str:
    """`cp_comm`: context parallelism's exchange, p2p (the ring), a2a (Ulysses) or all_gather (Megatron-Core
    --cp-comm-type); empty: the first the model runs at the row's tp x cp, else the ring (context.default_comm: a
    measured run is not refused for what today's TE would refuse). A stated exchange Transformer Engine refuses for
    the model at the row's tp x cp is refused with its reason (a typo'd plan, not a run's fact)."""
    comm = c.choice("cp_comm", CP_COMMS)
    if comm is None:
        return default_comm(arch, tp, cp)
    why = arch.cp_comm_problem(tp, cp, comm)
    if why:
        raise c.error("cp_comm", f"{comm}: {why}")
    return comm
