"""Catalog clusters: a cluster spec with `estimator: analytic` names a catalog GPU per node type
(fasop/data/cluster_specs/aws.yaml, gcp.yaml) and gets its memory, intra-node link and peaks from
the GPU catalog (fasop/specs/catalog.py); its `analytic:` section overrides the physical constants.
"""

from __future__ import annotations

import datetime
from dataclasses import replace
from pathlib import Path

from fasop.core import limits
from fasop.core.errors import SpecError
from fasop.specs.catalog import PARAM_KEYS, default_params, find_gpu, load_gpus, read_params, unknown_gpu  # noqa: F401
from fasop.specs.reader import Reader
from fasop.specs.types import GIB, ClusterSpec, NodeType

FLEX_DISPATCHER_SMS = 32
"""SMs the flex dispatcher's kernels hold while they run, where a cluster's `analytic:` section turns on
`moe_node_dedup`: HybridEP as Megatron-Bridge's performance recipes run it (`moe_hybridep_num_sms = 32` in every
HybridEP recipe, perf_recipes/_common.py @067f987), the backend `fasop export` launches with
--moe-flex-dispatcher-num-sms. Under EP overlap the compute beside its kernels keeps the other SMs
(estimators.analytic.moe_kernels.overlap_kept_share)."""
_NODE_KEYS = ("instance", "gpu", "gpus_per_node", "inter_node_gbit_per_s", "usd_per_hour", "spot_usd_per_hour",
              "price_date", "price_source", "memory_gib")


# ----------------------------------------------------------------------------- catalog clusters
def load_catalog_cluster(path: Path, data: dict) -> ClusterSpec:
    """A cluster spec with `estimator: analytic`: node types naming catalog GPUs."""
    top = Reader(path, data, "", ("estimator", "node_types", "analytic"))
    top.get("estimator", str)
    params = default_params()
    if "analytic" in top.data:
        params = read_params(top.sub("analytic", PARAM_KEYS), params)
        if params.moe_node_dedup and not params.moe_comm_sms:
            params = replace(params, moe_comm_sms=FLEX_DISPATCHER_SMS)
    types_reader = top.sub("node_types")
    node_types = {}
    for name in types_reader.data:
        if not isinstance(name, str) or not name.replace("_", "").replace("-", "").isalnum():
            raise types_reader.error(str(name), "node type names are letters, digits, '_' and '-'")
        node_types[name] = _catalog_node(types_reader.sub(name, _NODE_KEYS), name, path)
    if not node_types:
        raise types_reader.error("", "at least one node type is required")
    top.done()
    # FASOP's link divisors and memory factor do not apply: neutral values (1.0)
    return ClusterSpec(path=str(path), estimator=str(data.get("estimator")), node_types=node_types,
                       p2p_inter_node_divisor=1.0, p2p_intra_node_divisor=1.0, memory_overhead_factor=1.0,
                       analytic=params)


def _calendar_date(value) -> bool:
    """A date (YAML reads 2025-06-01 as one), or text YYYY-MM / YYYY-MM-DD naming a real month or day."""
    if isinstance(value, datetime.date):
        return True
    try:
        datetime.date.fromisoformat(value + "-01" if len(value) == 7 else value)
    except ValueError:
        return False
    return len(value) in (7, 10)


def _catalog_node(r: Reader, name: str, path: Path) -> NodeType:
    gpu_name = r.get("gpu", str)
    try:
        gpu = find_gpu(gpu_name, str(path))
    except SpecError:
        raise r.error("gpu", unknown_gpu(repr(gpu_name), gpu_name)) from None
    spot = r.get("spot_usd_per_hour", (int, float, type(None)), None,
                 lambda v: v is None or 0 <= v <= limits.USD_PER_HOUR, f"in [0, {limits.USD_PER_HOUR:g}]")
    memory = r.get("memory_gib", (int, float), None, lambda v: 0 < v <= limits.MEMORY_GIB, f"in (0, {limits.MEMORY_GIB}]")
    r.get("price_date", (str, datetime.date), None, _calendar_date, "a date YYYY-MM-DD or a month YYYY-MM")
    r.get("price_source", str)
    node = NodeType(
        name=name, instance=r.get("instance", str), gpu=gpu.name,
        gpus_per_node=r.positive("gpus_per_node", int, high=limits.GPUS_PER_NODE),
        memory_limit_bytes=float(memory) * GIB if memory is not None else gpu.memory_bytes,
        intra_node_bytes_per_s=gpu.intra_node_bytes_per_s,
        inter_node_bytes_per_s=float(r.positive("inter_node_gbit_per_s", high=limits.GBIT_PER_S[1])) * 1e9 / 8,
        intra_node_shared=gpu.intra_node_link == "pcie",
        usd_per_hour=float(r.get("usd_per_hour", (int, float), check=lambda v: 0 <= v <= limits.USD_PER_HOUR,
                                 why=f"in [0, {limits.USD_PER_HOUR:g}]")),
        spot_usd_per_hour=None if spot is None else float(spot),
    )
    r.done()
    return node
