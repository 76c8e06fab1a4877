"""FASOP's cost model (`estimator`, registered as `fasop-2024`), wholly here: its layouts of
nodes into stages (`layout`), batched estimation (`batch`, `finish`, `plans`), its comm, DP and
memory quirks (`comm`, `dp`, `memory`), its min-max partitioner (`minmax`, `lockstep`), the
proven-optimal splits (`optimal`) and its node-order bounds (`orders`).

May import: fasop.core .. fasop.costs, and fasop.estimators (the protocol and registry).
"""

from fasop.estimators.fasop2024.estimator import Fasop2024Estimator

__all__ = ["Fasop2024Estimator"]
