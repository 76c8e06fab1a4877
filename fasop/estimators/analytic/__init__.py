"""The profile-free `analytic` estimator, wholly here: per-layer FLOPs, bytes and recipes
(`layers`), times against the catalog's peaks (`cost`), memory (`memory`), the estimator
registered as `analytic` (`estimator`) and its node-order bounds (`orders`).

May import: fasop.core .. fasop.costs, and fasop.estimators (the protocol and registry).
"""

from fasop.estimators.analytic.estimator import AnalyticEstimator

__all__ = ["AnalyticEstimator"]
