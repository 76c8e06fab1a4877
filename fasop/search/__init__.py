"""The search of one inventory: node orders and their bounds (`orders`), chunks of plans estimated
in worker processes (`chunks`) and the search itself (`engine`): enumerate -> estimate -> ranked
table.

May import: fasop.core, fasop.specs, fasop.plans, fasop.schedule, fasop.partition, fasop.costs,
fasop.estimators.
"""

from fasop.search.engine import DEFAULT_ITERATIONS, SearchResult, parse_counts, parse_nodes, search

__all__ = ["DEFAULT_ITERATIONS", "SearchResult", "parse_counts", "parse_nodes", "search"]
