"""`fasop export --target hostfile`: the node-rank table of a results row's plan and one torchrun
command per node.

The rank grid, TP fastest and PP slowest in both frameworks (rank = t + tp*(d + dp*s)), from
01_megatron_lm.md §1.5 and 02_torchtitan.md §2.2. With torchrun's static rendezvous node k runs
global ranks k*G .. k*G + G - 1, so writing the nodes in the plan's order puts every stage on the
nodes the plan chose.
"""

from __future__ import annotations

from fasop.plans.rowplan import RowPlan
from fasop.report.export_settings import Export
from fasop.specs.types import ModelSpec

MASTER_PORT = 29500


def node_table(rp: RowPlan) -> list[tuple[int, str, int, range, tuple[int, ...]]]:
    """(node rank, node type, GPUs, its global ranks, the pipeline stages on it) per node, in the
    plan's order: node k runs ranks k*G .. k*G+G-1 and rank r belongs to stage r // (tp*cp*dp)."""
    p = rp.plan
    g, block = p.gpus_per_node, p.tp * p.cp * p.dp
    return [(k, node.name, g, range(k * g, (k + 1) * g),
             tuple(sorted({r // block for r in range(k * g, (k + 1) * g)})))
            for k, node in enumerate(p.placement)]


def _span(values) -> str:
    values = list(values)
    return str(values[0]) if len(values) == 1 else f"{values[0]}-{values[-1]}"


def hostfile(rp: RowPlan, model: ModelSpec | None = None) -> Export:
    p = rp.plan
    table = node_table(rp)
    rows = [("node_rank", "node_type", "gpus", "global_ranks", "stages")]
    rows += [(str(k), name, str(g), _span(ranks), _span(stages)) for k, name, g, ranks, stages in table]
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    block = p.tp * p.cp * p.dp
    grid = (f"tp {p.tp}, dp {p.dp}, pp {p.pp}", "tp-dp-pp") if p.cp == 1 else \
        (f"tp {p.tp}, cp {p.cp}, dp {p.dp}, pp {p.pp}", "tp-cp-dp-pp")
    lines = [f"# fasop export --target hostfile: {rp.where}",
             f"# {grid[0]}: stage s runs global ranks s*{block} .. "
             f"s*{block}+{block - 1} (Megatron-LM's {grid[1]} order and torchtitan's mesh:",
             "# tensor-parallel fastest, pipeline slowest). Start node k on a machine of its node_type; use",
             "# torchrun's static rendezvous (--node_rank), not --rdzv-backend c10d, which assigns node ranks itself."]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines += ["", "# one command per node (MASTER_ADDR: the host of node 0):"]
    for k, name, g, _, _ in table:
        lines.append(f"torchrun --nnodes {len(table)} --node_rank {k} --nproc_per_node {g} "
                     f"--master_addr $MASTER_ADDR --master_port {MASTER_PORT} $TRAIN_SCRIPT  # node {k}: {name}")
    return Export("\n".join(lines) + "\n", ())
