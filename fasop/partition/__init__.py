"""Layer splits: which transformer blocks each pipeline stage holds. Branch and bound over splits
(`splits`), its completion tables (`tables`), the local polish (`polish`), the zigzag-chain bound
(`zigzag`) and the MILP certificate that proves a split optimal (`milp`).

May import: fasop.core, fasop.schedule.
"""

from fasop.partition.splits import PARTITIONERS, Found, Split, optimal

__all__ = ["PARTITIONERS", "Found", "Split", "optimal"]
