"""Launch settings for a plan: Megatron-LM arguments, a torchtitan recipe, a node-rank table.

`fasop export` turns a results row (rowplan.RowPlan) into text a user pastes into a job script;
one module per target: `export_megatron.py`, `export_torchtitan.py`, `export_hostfile.py`, over
what they share in `export_settings.py` (the plan's settings beyond its degrees, read from the row).
"""

from __future__ import annotations

from dataclasses import replace

from fasop.core.cells import one_line
from fasop.plans.rowplan import RowPlan
from fasop.report.export_hostfile import hostfile, node_table
from fasop.report.export_megatron import megatron, megatron_layout
from fasop.report.export_settings import Export, Settings, settings_of
from fasop.report.export_torchtitan import torchtitan
from fasop.specs.types import ModelSpec

__all__ = ["TARGETS", "Export", "Settings", "export", "hostfile", "megatron", "megatron_layout", "node_table",
           "settings_of", "torchtitan"]

TARGETS = ("megatron", "torchtitan", "hostfile")


def export(rp: RowPlan, model: ModelSpec, target: str, params=None) -> Export:
    """The launch settings of the row's plan for `target`; `params`, the analytic constants the row was estimated
    with (its cluster's), say which MoE dispatcher and EP overlap to launch. Text from outside (the CSV's name and
    cells) is made one line first (cells.one_line): it only ever lands in comments and in
    quoted literals, never on a line of its own that a shell or Python would run."""
    rp = replace(rp, where=one_line(rp.where), row={k: one_line(v) if isinstance(v, str) else v for k, v in rp.row.items()})
    if target == "megatron":
        return megatron(rp, model, params)
    if target == "torchtitan":
        return torchtitan(rp, model, params)
    if target == "hostfile":
        return hostfile(rp)
    raise ValueError(f"unknown target {target!r}")
