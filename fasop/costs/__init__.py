"""Cost pieces that every estimator may share: a model's per-layer parameters, FLOPs and volumes
(`model_math`), profiled layer times (`compute`), links and collectives (`comm`), memory per stage
(`memory`), the Estimate value an estimator returns (`estimate`) and its itemised parts for
explain and plots (`parts`).

May import: fasop.core, fasop.specs, fasop.plans, fasop.schedule.
"""
