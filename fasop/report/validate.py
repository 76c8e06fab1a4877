"""`fasop validate FILE.csv`: the analytic estimator against measured training runs.

One CSV row is one measured run. Columns (exact names):
  required  num_layers, hidden_size, num_attention_heads, seq_len, vocab_size, gpu, num_gpus,
            tp, pp, dp, global_batch_size, measured_seconds_per_iter
  optional  name, ffn_hidden_size (4 x hidden), num_kv_heads (heads), gated_mlp (0/1, 0),
            tied_embeddings (0/1; 1, or 0 for a gated MLP as in the Llama family),
            gpus_per_node (8), precision (bf16), micro_batch_size, recompute (none/selective/full),
            sequence_parallel (0/1), distributed_optimizer (0/1), virtual_pp,
            measured_peak_mem_gib, fused_attention and overlap_grad_reduce (0/1: software the run
            had, FlashAttention and gradient reduction during the backward; empty: the GPU's
            `validate_software` in gpus.yaml -- what its published runs had -- else analytic.yaml),
            tp_overlap (share of the TP collectives hidden behind the matmuls, same defaults)
An empty plan cell (micro_batch_size, recompute, sequence_parallel, distributed_optimizer,
virtual_pp) means "the fastest value that fits in memory": every allowed value is estimated and
the row reports what was picked -- except a cell the GPU's `validate_software` fixes (A100:
sequence_parallel 0), reported as "(catalog)". The TP overlap is the GPU's `validate_software`
tp_overlap where it has one (H100/H200: NeMo's recipes). The GPU comes from the catalog (cluster_specs/catalog/gpus.yaml),
with its vendor reference node's network between nodes; the physical constants from
cluster_specs/catalog/analytic.yaml. Error = (predicted - measured) / measured.
"""

from __future__ import annotations

import csv
import io
import itertools
import math
from dataclasses import dataclass, replace
from pathlib import Path

from fasop.core import limits
from fasop.core.errors import FasopError
from fasop.estimators.analytic import cost as C
from fasop.estimators.analytic.layers import RECOMPUTES, Recipe
from fasop.specs.architecture import gpt_architecture
from fasop.specs.catalog import VALIDATE_PLAN_SOFTWARE, VALIDATE_SOFTWARE, AnalyticParams, GpuType, canonical, default_params, load_gpus
from fasop.specs.files import decode_utf8, read_bounded
from fasop.specs.types import GIB, NodeType

REQUIRED = ("num_layers", "hidden_size", "num_attention_heads", "seq_len", "vocab_size", "gpu", "num_gpus",
            "tp", "pp", "dp", "global_batch_size", "measured_seconds_per_iter")
OPTIONAL = ("name", "ffn_hidden_size", "num_kv_heads", "gated_mlp", "tied_embeddings", "gpus_per_node", "precision",
            "micro_batch_size", "recompute", "sequence_parallel", "distributed_optimizer", "virtual_pp",
            "measured_peak_mem_gib", "fused_attention", "overlap_grad_reduce", "tp_overlap")
PICKED = ("micro_batch_size", "recompute", "sequence_parallel", "distributed_optimizer", "virtual_pp")
OUT_COLUMNS = ("name", "gpu", "num_gpus", "tp", "pp", "dp", "global_batch_size", "measured_seconds_per_iter",
               "predicted_seconds_per_iter", "error_pct", "measured_peak_mem_gib", "predicted_peak_mem_gib",
               "mem_error_pct", "fits", "micro_batch_size", "recompute", "sequence_parallel",
               "distributed_optimizer", "virtual_pp", "precision", "picked")
MAX_VIRTUAL = 8
CEILINGS = {"num_layers": limits.LAYERS, "hidden_size": limits.HIDDEN_SIZE, "num_attention_heads": limits.ATTENTION_HEADS,
            "num_kv_heads": limits.ATTENTION_HEADS, "seq_len": limits.SEQUENCE_LENGTH, "vocab_size": limits.VOCAB_SIZE,
            "ffn_hidden_size": 64 * limits.HIDDEN_SIZE, "global_batch_size": limits.GLOBAL_BATCH_SIZE,
            "gpus_per_node": limits.GPUS_PER_NODE, "micro_batch_size": limits.GLOBAL_BATCH_SIZE, "virtual_pp": 64}
"""limits.py's ceilings per integer column (others, GPU counts and degrees: limits.GPUS)."""
MAX_BYTES = 16 << 20
"""A runs CSV is at most 16 MiB (as a profile CSV, limits.PROFILE_BYTES)."""


@dataclass(frozen=True)
class Row:
    line: int
    cells: dict


@dataclass(frozen=True, kw_only=True)
class Prediction:
    row: dict
    """The output row (OUT_COLUMNS)."""
    error: float
    mem_error: float | None


@dataclass(frozen=True, kw_only=True)
class Report:
    predictions: tuple[Prediction, ...]

    @property
    def mape(self) -> float:
        return 100 * sum(abs(p.error) for p in self.predictions) / len(self.predictions)

    @property
    def max_error(self) -> float:
        return 100 * max(abs(p.error) for p in self.predictions)

    @property
    def mean_signed_error(self) -> float:
        """Mean of (predicted - measured) / measured, %: the estimator's lean (negative: fast)."""
        return 100 * sum(p.error for p in self.predictions) / len(self.predictions)

    @property
    def memory_errors(self) -> list[float]:
        return [p.mem_error for p in self.predictions if p.mem_error is not None]


def read_rows(path: Path) -> list[Row]:
    text = decode_utf8(path, read_bounded(path, MAX_BYTES, " runs CSV"))
    try:
        reader = csv.DictReader(io.StringIO(text, newline=""))
        header = reader.fieldnames or []
        rows = [Row(i, r) for i, r in enumerate(reader, start=2)]
    except csv.Error as exc:
        raise FasopError(f"{path}: not a readable CSV file: {exc}") from None
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise FasopError(f"{path}: header: missing required column {missing[0]!r} (required: {', '.join(REQUIRED)})")
    unknown = [c for c in header if c not in REQUIRED + OPTIONAL]
    if unknown:
        raise FasopError(f"{path}: header: unknown column {unknown[0]!r} (optional: {', '.join(OPTIONAL)})")
    if not rows:
        raise FasopError(f"{path}: no rows")
    return rows


class _Cells:
    """Typed reads of one row; errors name the file, line and column."""

    def __init__(self, path: Path, row: Row):
        self.path, self.row = path, row

    def error(self, column: str, message: str) -> FasopError:
        return FasopError(f"{self.path}: line {self.row.line}: {column}: {message}")

    def text(self, column: str) -> str:
        value = self.row.cells.get(column)
        return "" if value is None else value.strip()

    def int(self, column: str, default=None, low: int = 1) -> int | None:
        text = self.text(column)
        if not text:
            if default is None and column in REQUIRED:
                raise self.error(column, "empty required cell")
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
        if text not in ("0", "1"):
            raise self.error(column, f"expected 0 or 1, got {text!r}")
        return text == "1"

    def positive(self, column: str) -> float | None:
        text = self.text(column)
        if not text:
            if column in REQUIRED:
                raise self.error(column, "empty required cell")
            return None
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and value > 0):
            raise self.error(column, f"expected a positive number, got {text!r}")
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


def predict(path: Path, row: Row, base: AnalyticParams) -> Prediction:
    c = _Cells(path, row)
    arch, seq, gbs, measured, n, tp, pp, dp = _model_and_degrees(c)
    gpu = load_gpus().get(canonical(c.text("gpu")))
    gpu = gpu and base.gpu(gpu)   # as a calibration overlay has it (--calibration)
    if gpu is None:
        known = ", ".join(x.name for x in load_gpus().values())
        raise c.error("gpu", f"unknown GPU type {c.text('gpu')!r} (catalog: {known})")
    software = {k: c.flag(k, gpu.validate_software.get(k, getattr(base, k))) for k in VALIDATE_SOFTWARE}
    tp_overlap = c.share("tp_overlap", gpu.validate_software.get("tp_overlap", base.tp_overlap))
    params = replace(base, **software, tp_overlap=tp_overlap)
    g = c.int("gpus_per_node", 8)
    precision = c.choice("precision", ("bf16", "fp16", "fp8"), "bf16")
    stages = _hardware(gpu, g, tp, dp, pp, params)
    fixed = {k: v for k, v in (("micro_batch_size", c.int("micro_batch_size")),
                                ("recompute", c.choice("recompute", RECOMPUTES)),
                                ("sequence_parallel", c.flag("sequence_parallel")),
                                ("distributed_optimizer", c.flag("distributed_optimizer")),
                                ("virtual_pp", c.int("virtual_pp"))) if v is not None}
    assumed = {k: gpu.validate_software[k] for k in VALIDATE_PLAN_SOFTWARE
               if k not in fixed and k in gpu.validate_software}   # what this GPU's published runs had
    fixed |= assumed
    best = _fastest(arch, seq, gbs, tp, dp, pp, precision, params, stages, fixed)
    if best is None:
        raise c.error("micro_batch_size", "no micro-batch size / virtual_pp divides the batch and the layers")
    step, peak, fits, choice = best
    mem = c.positive("measured_peak_mem_gib")
    out = {"name": c.text("name"), "gpu": gpu.name, "num_gpus": n, "tp": tp, "pp": pp, "dp": dp,
           "global_batch_size": gbs, "measured_seconds_per_iter": measured, "predicted_seconds_per_iter": step,
           "error_pct": 100 * (step - measured) / measured, "measured_peak_mem_gib": "" if mem is None else mem,
           "predicted_peak_mem_gib": peak / GIB,
           "mem_error_pct": "" if mem is None else 100 * (peak / GIB - mem) / mem, "fits": fits,
           **{k: int(v) if isinstance(v, bool) else v for k, v in choice.items()}, "precision": precision,
           "picked": " ".join([f"{k}={int(v) if isinstance(v, bool) else v}" for k, v in choice.items()
                               if k not in fixed] + [f"{k}={int(v)} (catalog)" for k, v in assumed.items()])}
    return Prediction(row=out, error=(step - measured) / measured,
                      mem_error=None if mem is None else (peak / GIB - mem) / mem)


def _model_and_degrees(c: "_Cells") -> tuple:
    """(architecture, sequence, global batch, measured seconds, GPUs, tp, pp, dp) of a row, its
    degrees checked against the GPU count, the batch, the layers and the heads."""
    layers, hidden, heads = c.int("num_layers"), c.int("hidden_size"), c.int("num_attention_heads")
    seq, vocab, n, tp, pp, dp = (c.int(k) for k in ("seq_len", "vocab_size", "num_gpus", "tp", "pp", "dp"))
    gbs, measured = c.int("global_batch_size"), c.positive("measured_seconds_per_iter")
    if tp * pp * dp != n:
        raise c.error("num_gpus", f"tp x pp x dp = {tp * pp * dp}, not {n}")
    if gbs % dp:
        raise c.error("global_batch_size", f"{gbs} is not a multiple of dp = {dp}")
    if layers < pp:
        raise c.error("pp", f"{pp} stages for {layers} layers")
    gated = c.flag("gated_mlp", False)
    kv = c.int("num_kv_heads", heads)
    if heads % tp or heads % kv or hidden % heads:
        raise c.error("tp", f"tp = {tp}, heads = {heads}, kv heads = {kv}, hidden = {hidden}: heads must divide "
                            "by tp and kv heads, hidden by heads")
    arch = gpt_architecture(num_layers=layers, hidden_size=hidden, num_attention_heads=heads, vocab_size=vocab,
                            ffn_hidden_size=c.int("ffn_hidden_size", 0) or 0, num_kv_heads=kv, gated_mlp=gated,
                            tied_embeddings=c.flag("tied_embeddings", not gated), max_positions=seq)
    return arch, seq, gbs, measured, n, tp, pp, dp


def _hardware(gpu: GpuType, g: int, tp: int, dp: int, pp: int, params: AnalyticParams):
    node = NodeType(name="node", instance="reference", gpu=gpu.name, gpus_per_node=g,
                    memory_limit_bytes=gpu.memory_bytes, intra_node_bytes_per_s=gpu.intra_node_bytes_per_s,
                    inter_node_bytes_per_s=gpu.reference_inter_node_bytes_per_s,
                    intra_node_shared=gpu.intra_node_link == "pcie", usd_per_hour=0.0, spot_usd_per_hour=None)
    nodes = -(-tp * dp * pp // g)
    return C.stage_hardware(tp, dp, pp, (node,) * nodes, (gpu,) * nodes, params)


def _fastest(arch, seq, gbs, tp, dp, pp, precision, params, stages, fixed):
    """(step s, peak bytes, fits, choice) of the fastest allowed recipe that fits, else the fastest."""
    per_replica = gbs // dp
    options = {
        "micro_batch_size": [b for b in (1, 2, 4, 8, 16, 32) if per_replica % b == 0],
        "recompute": list(RECOMPUTES),
        "sequence_parallel": [False, True] if tp > 1 else [False],
        "distributed_optimizer": [False, True] if dp > 1 else [False],
        "virtual_pp": [1] + [v for v in range(2, MAX_VIRTUAL + 1) if arch.num_layers % (pp * v) == 0] if pp > 1 else [1],
    }
    options |= {k: [v] for k, v in fixed.items()}
    best = None
    for values in itertools.product(*options.values()):
        choice = dict(zip(options, values))
        m = per_replica // choice["micro_batch_size"]
        if per_replica % choice["micro_batch_size"] or (choice["virtual_pp"] > 1 and m % pp):
            continue
        recipe = Recipe(recompute=choice["recompute"], sequence_parallel=choice["sequence_parallel"],
                        zero=1 if choice["distributed_optimizer"] else 0, virtual_stages=choice["virtual_pp"],
                        precision=precision)
        w = C.Workload(arch=arch, seq=seq, mbs=choice["micro_batch_size"], tp=tp, dp=dp, pp=pp,
                       num_microbatches=m, recipe=recipe, params=params)
        counts = C.split_layers(w, stages)
        fits = counts is not None
        if counts is None:
            counts = _even(arch.num_layers, pp)
        step = C.step(w, stages, counts).step_s
        peak = max(C.stage_memory(w, n, i).total for i, n in enumerate(counts))
        key = (not fits, step)
        if best is None or key < best[0]:
            best = (key, (step, peak, fits, choice))
    return None if best is None else best[1]


def _even(layers: int, pp: int) -> tuple[int, ...]:
    return tuple(layers // pp + (i < layers % pp) for i in range(pp))


def validate(path: str | Path, params: AnalyticParams | None = None) -> Report:
    path = Path(path)
    base = params or default_params()
    return Report(predictions=tuple(predict(path, row, base) for row in read_rows(path)))


def report_rows(report: Report) -> tuple[list[str], list[dict]]:
    return list(OUT_COLUMNS), [p.row for p in report.predictions]
