"""fasop: plan and price Transformer training on heterogeneous GPU clusters.

The folders are the layers data flows through (docs/layout.md): core -> specs -> plans ->
schedule, partition -> costs -> estimators -> search -> pareto -> report -> cli.

The names most programs need are importable from here, each loaded on first use (importing
fasop costs nothing):

    from fasop import load_model, load_cluster, parse_nodes, search
    result = search(load_model("bert"), cluster := load_cluster("fasop-paper"),
                    parse_nodes("a100=1,a10=3", cluster))
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_PUBLIC = {
    "FasopError": "fasop.core.errors", "SpecError": "fasop.core.errors",
    "load_model": "fasop.specs.load", "load_cluster": "fasop.specs.load",
    "ClusterSpec": "fasop.specs.types", "ModelSpec": "fasop.specs.types", "NodeType": "fasop.specs.types",
    "Plan": "fasop.plans.plan", "Estimate": "fasop.costs.estimate",
    "make_estimator": "fasop.estimators", "register": "fasop.estimators",
    "search": "fasop.search.engine", "parse_nodes": "fasop.search.engine", "SearchResult": "fasop.search.engine",
}
__all__ = ["__version__", *_PUBLIC]


def __getattr__(name: str):
    if name in _PUBLIC:
        return getattr(importlib.import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module 'fasop' has no attribute {name!r}")
