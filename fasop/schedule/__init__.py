"""The pipeline schedule: 1F1B stage end times (`pipeline`, `recurrences`), its lower bounds
(`bounds`, `legs`), the timeline of events a figure draws (`timeline`), and the optional compiled
kernels with their Python references (`native`, `_native.c`).

May import: fasop.core (it knows nothing of specs or plans: durations in, times out).
"""

from fasop.schedule.pipeline import Schedule, critical_path, one_f_one_b, split_stage_times

__all__ = ["Schedule", "critical_path", "one_f_one_b", "split_stage_times"]
