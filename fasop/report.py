"""Result tables: estimates -> rows of scalar cells, written atomically as CSV.

Every cell is a number, a boolean or a plain string; units are in the column names.
Floats are written with Python's shortest round-trip repr, so equal inputs give equal bytes.
"""

from __future__ import annotations

import csv
import io
import os
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

from fasop.estimate import Estimate
from fasop.search import SearchResult

SEARCH_COLUMNS = (
    "mbs", "tp", "dp", "pp", "node_placement", "partition",
    "step_time_s", "pipeline_time_s", "dp_allreduce_s", "embedding_allreduce_s", "usd_per_step",
    "is_oom", "oom_gpumem_gib", "is_zero_oom", "zero_oom_gpumem_gib", "train_cost_usd",
    "rank", "num_gpus", "num_nodes", "num_microbatches", "stage_gpu_types", "samples_per_s", "tokens_per_s",
    "usd_per_hour", "iterations", "train_time_h",
)
"""Columns of `fasop search` output; `num_nodes_<type>` columns follow, one per node type."""

COLUMN_DOCS = {
    "mbs": "micro-batch size (samples)",
    "tp": "tensor-parallel degree", "dp": "data-parallel degree", "pp": "pipeline stages",
    "node_placement": "node type of every node in rank order, joined by '-'",
    "partition": "layer-list entries per pipeline stage, joined by '-'",
    "step_time_s": "estimated seconds per training step (global batch)",
    "pipeline_time_s": "1F1B pipeline time of stage 0, seconds",
    "dp_allreduce_s": "gradient all-reduce seconds at the stage that ends last",
    "embedding_allreduce_s": "tied-embedding all-reduce seconds",
    "usd_per_step": "dollars per step for the whole inventory",
    "is_oom": "some stage exceeds its GPU memory limit",
    "oom_gpumem_gib": "peak GiB per GPU (x overhead at the OOM stage when is_oom)",
    "is_zero_oom": "out of memory even with ZeRO optimiser sharding",
    "zero_oom_gpumem_gib": "peak GiB per GPU with ZeRO",
    "train_cost_usd": "usd_per_step x iterations",
    "rank": "1 = fastest", "num_gpus": "GPUs the plan uses", "num_nodes": "nodes in the inventory",
    "num_microbatches": "micro-batches per step per replica",
    "stage_gpu_types": "GPU type that sets each stage's pace, joined by '-'",
    "samples_per_s": "global batch / step time", "tokens_per_s": "samples_per_s x sequence length",
    "usd_per_hour": "price of the inventory per hour", "iterations": "training steps",
    "train_time_h": "step_time_s x iterations / 3600",
}


def search_rows(result: SearchResult, sequence_length: int) -> tuple[list[str], list[dict]]:
    """(columns, rows) for a search result, fastest first."""
    type_names = list(dict.fromkeys(n.name for n in result.inventory))
    columns = list(SEARCH_COLUMNS) + [f"num_nodes_{t}" for t in type_names]
    counts = {f"num_nodes_{t}": sum(n.name == t for n in result.inventory) for t in type_names}
    rows = []
    for rank, e in enumerate(result.estimates, start=1):
        rows.append(estimate_row(e, rank=rank, iterations=result.iterations, usd_per_hour=result.usd_per_hour,
                                 sequence_length=sequence_length) | counts)
    return columns, rows


def estimate_row(e: Estimate, *, rank: int, iterations: int, usd_per_hour: float, sequence_length: int) -> dict:
    plan = e.plan
    samples_per_s = plan.global_batch_size / e.step_time_s
    return {
        "mbs": plan.mbs, "tp": plan.tp, "dp": plan.dp, "pp": plan.pp,
        "node_placement": plan.placement_name,
        "partition": "-".join(map(str, e.partition)),
        "step_time_s": e.step_time_s, "pipeline_time_s": e.pipeline_time_s,
        "dp_allreduce_s": e.dp_allreduce_s, "embedding_allreduce_s": e.embedding_allreduce_s,
        "usd_per_step": e.usd_per_step,
        "is_oom": e.memory.is_oom, "oom_gpumem_gib": e.memory.oom_gpumem_gib,
        "is_zero_oom": e.memory.is_zero_oom, "zero_oom_gpumem_gib": e.memory.zero_oom_gpumem_gib,
        "train_cost_usd": e.usd_per_step * iterations,
        "rank": rank, "num_gpus": plan.num_gpus, "num_nodes": len(plan.placement),
        "num_microbatches": plan.num_microbatches,
        "stage_gpu_types": "-".join(t.gpu for t in e.stage_node_types),
        "samples_per_s": samples_per_s, "tokens_per_s": samples_per_s * sequence_length,
        "usd_per_hour": usd_per_hour, "iterations": iterations,
        "train_time_h": e.step_time_s * iterations / 3600,
    }


def csv_text(columns: Sequence[str], rows: Iterable[dict]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(columns), lineterminator="\n", extrasaction="raise")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: repr(v) if isinstance(v, float) else v for k, v in row.items()})
    return buffer.getvalue()


def write_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write `text` to `path` via a temporary file in the same folder, renamed into place:
    readers never see a partial file, and an error or interrupt leaves no file behind."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", newline="") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
