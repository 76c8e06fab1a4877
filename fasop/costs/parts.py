"""What one plan's estimate is made of, for `fasop explain` and `fasop plot`: the step time as
terms that add up to it, each stage's memory by part against its limit, and the estimator's own
1F1B schedule (the timeline).

An estimator states them with its `parts(estimate, zero_stage=0)` (an optional capability of the
seam, fasop/estimators/__init__.py); `parts_of` asks it, and builds what the `Estimate` alone
says for an estimator without one. The builders here are the estimators' shared pieces:

- `latest_stage_step`: a step that is the latest stage end + its DP all-reduce + the embedding
  all-reduce (the `Estimate` contract where `step_parts` is empty);
- `param_memory_parts`: a stage's bytes as weights, gradients, optimizer state and activations
  for an estimator that counts bytes a parameter (memory.ParamBytes): the weights in the model's
  element size, gradients the rest of the part every replica keeps, the optimizer the sharded
  part (over dp with ZeRO), activations as memory.stage_elements counts them;
- `schedule_or_note`: the estimator's `schedule_of`, or why there is no timeline.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fasop.core.errors import FasopError
from fasop.core.limits import SCHEDULE_PAIRS
from fasop.costs.estimate import Estimate
from fasop.costs.memory import ParamBytes, stage_elements
from fasop.schedule.pipeline import Schedule
from fasop.specs.types import ModelSpec

MemoryParts = tuple[tuple[str, float], ...]
"""(part, bytes per GPU) pairs of one stage that add up to its memory: parts named weights,
gradients, optimizer, activations and overhead (the framework's fixed bytes), or total alone."""


@dataclass(frozen=True, kw_only=True)
class EstimateParts:
    last_stage: int
    """The stage whose end is the first term of `step_parts`: it sets the step time."""
    step_parts: tuple[tuple[str, float], ...]
    """The step time as (term, seconds) pairs that add up to it, the first "stage K's end"."""
    stage_memory_parts: tuple[MemoryParts, ...]
    stage_memory_bytes: tuple[float, ...]
    """Each stage's estimate, bytes per GPU (with the ZeRO setting asked for)."""
    memory_overhead_factor: float
    """What the fit check multiplies a stage's bytes by before comparing with its limit."""
    memory_limits_bytes: tuple[float, ...]
    schedule: Schedule | None
    """The estimate's pipeline as the estimator schedules it; None where it has none."""
    schedule_note: str = ""
    """Why `schedule` is None; ''."""


def parts_of(estimator, estimate: Estimate, zero_stage: int = 0) -> EstimateParts:
    """The estimator's `parts` of `estimate`; for an estimator without them, `stated_parts` with
    its `schedule_of` where it has one."""
    method = getattr(estimator, "parts", None)
    if method is not None:
        return method(estimate, zero_stage=zero_stage)
    missing = f"the estimator ({type(estimator).__name__}) has no schedule_of to draw its pipeline"
    return stated_parts(estimate, *schedule_or_note(getattr(estimator, "schedule_of", None), estimate, missing),
                        zero_stage=zero_stage)


def stated_parts(estimate: Estimate, schedule: Schedule | None, note: str = "", *,
                 zero_stage: int = 0) -> EstimateParts:
    """What the estimate states itself: its `step_parts` (or `latest_stage_step`), its
    `stage_memory_parts` (or each stage's total) against the limits of its pace-setting node
    types, no overhead factor."""
    last, step = stated_step(estimate)
    memory = estimate.memory.stage_zero_bytes if zero_stage else estimate.memory.stage_bytes
    return EstimateParts(last_stage=last, step_parts=step,
                         stage_memory_parts=estimate.stage_memory_parts or tuple((("total", b),) for b in memory),
                         stage_memory_bytes=tuple(memory), memory_overhead_factor=1.0,
                         memory_limits_bytes=tuple(t.memory_limit_bytes for t in estimate.stage_node_types),
                         schedule=schedule, schedule_note=note)


def counted_parts(estimate: Estimate, model: ModelSpec, param_bytes: ParamBytes, limits, overhead_factor: float,
                  schedule: Schedule | None, zero_stage: int = 0, schedule_note: str = "") -> EstimateParts:
    """The parts of an estimator that counts bytes a parameter: `latest_stage_step`,
    `param_memory_parts` against the given limits, x `overhead_factor` in the fit check; `schedule_note`:
    why `schedule` is None."""
    last, step = latest_stage_step(estimate)
    memory = estimate.memory.stage_zero_bytes if zero_stage else estimate.memory.stage_bytes
    return EstimateParts(last_stage=last, step_parts=step,
                         stage_memory_parts=param_memory_parts(estimate, model, param_bytes, zero_stage),
                         stage_memory_bytes=tuple(memory), memory_overhead_factor=overhead_factor,
                         memory_limits_bytes=tuple(limits), schedule=schedule, schedule_note=schedule_note)


def stated_step(estimate: Estimate) -> tuple[int, tuple[tuple[str, float], ...]]:
    """(the stage that sets the step time, the step's terms): the estimate's `step_parts` where it
    states them (their first term names the stage), else `latest_stage_step`."""
    if estimate.step_parts:
        return int(estimate.step_parts[0][0].split()[1].split("'")[0]), tuple(estimate.step_parts)
    return latest_stage_step(estimate)


def latest_stage_step(estimate: Estimate) -> tuple[int, tuple[tuple[str, float], ...]]:
    """(the stage, its terms) of a step that is the latest stage end + DP all-reduce + embedding
    all-reduce: the stage whose sum is the step time (the first of equals). The estimate keeps the
    DP all-reduce of that stage only; stages differ in it only by their bus."""
    pp = len(estimate.stage_end_s)
    rest = estimate.dp_allreduce_s + estimate.embedding_allreduce_s
    last = min(range(pp), key=lambda i: (abs(estimate.stage_end_s[i] + rest - estimate.step_time_s), i))
    return last, ((f"stage {last}'s end", estimate.stage_end_s[last]), ("DP all-reduce", estimate.dp_allreduce_s),
                  ("embedding all-reduce", estimate.embedding_allreduce_s))


def param_memory_parts(estimate: Estimate, model: ModelSpec, param_bytes: ParamBytes,
                       zero_stage: int = 0) -> tuple[MemoryParts, ...]:
    """Per stage of `estimate`, its weights, gradients, optimizer and activations bytes per GPU
    (see the module doc); each stage's total alone where the accounting does not split into a
    replicated and a sharded part."""
    plan = estimate.plan
    memory = estimate.memory.stage_zero_bytes if zero_stage else estimate.memory.stage_bytes
    if param_bytes.full != param_bytes.replicated + param_bytes.sharded:
        return tuple((("total", b),) for b in memory)
    weights = model.bytes_per_element
    optimizer = param_bytes.sharded // plan.dp if zero_stage else param_bytes.sharded
    out, start = [], 0
    for n in estimate.partition:
        params, act = stage_elements(plan, model, model.layer_kinds[start:start + n])
        out.append((("weights", weights * params), ("gradients", (param_bytes.replicated - weights) * params),
                    ("optimizer", optimizer * params), ("activations", act)))
        start += n
    return tuple(out)


def schedule_or_note(schedule_of: Callable[[Estimate], Schedule] | None, estimate: Estimate,
                     missing: str = "") -> tuple[Schedule | None, str]:
    """(the estimator's schedule of `estimate`, '') or (None, why): `missing` where it has no
    `schedule_of`, the estimator's own message where it refuses to draw one (interleaved plans), the
    size where stages x micro-batches pass SCHEDULE_PAIRS (limits.py)."""
    if schedule_of is None:
        return None, missing
    pp, m = estimate.plan.pp, estimate.plan.num_microbatches
    if pp * m > SCHEDULE_PAIRS:
        return None, (f"{pp} stages x {m:,} micro-batches are {pp * m:,} (stage, micro-batch) pairs, past the "
                      f"{SCHEDULE_PAIRS:,} a timeline is simulated for (limits.py): the estimate's own figures only")
    try:
        return schedule_of(estimate), ""
    except FasopError as exc:
        return None, str(exc)
