"""Why a plan is as fast as it is: `fasop explain`'s breakdown of one plan.

The plan (from a results row, rowplan.RowPlan) is estimated again with its own layer split (`estimate_split`):

- per stage: its pace-setting GPU type and nodes, its layers by name, fwd+bwd seconds of one
  micro-batch, the p2p seconds of one micro-batch to the next stage; from the events of its
  1F1B schedule (timeline.py) until its end: the time it computes, the time it only sends
  (sends that overlap its compute are not counted again) and the time it waits (the gaps
  between its events); and its memory by part against its GPU memory limit;
- the whole plan: pipeline time = stage 0's end = its compute + exposed sends + waiting; bubble
  fraction = the stages' waiting / (pp x pipeline time); step time as the terms the estimator
  states; throughput, model FLOPs, dollars.

The step's terms, each stage's memory by part and limit, and the timeline are the estimator's own
(`parts.parts_of`: its `parts`, fasop/costs/parts.py). Where its timeline is a simulation of a closed
form (analytic) and ends elsewhere, the stage rows are the timeline's and a note gives both;
where the estimator cannot draw it (interleaved plans), no timeline and a note.
Model FLOPs: Narayanan et al. 2021, Eq. 3 without recompute: per transformer layer and token
3 x (24 h^2 + 4 s h), per head and token 3 x 2 h V.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from fasop.core.cells import counted
from fasop.core.errors import FasopError
from fasop.costs.parts import EstimateParts, parts_of
from fasop.plans.plan import abbreviate
from fasop.plans.rowplan import RowPlan, finite, stage_layer_names
from fasop.report.export_settings import settings_of
from fasop.report.peaks import catalog_peaks, given_peaks
from fasop.schedule.pipeline import Schedule
from fasop.schedule.timeline import timeline
from fasop.specs.types import GIB, TRANSFORMER_KINDS, ClusterSpec, ModelSpec


@dataclass(frozen=True, kw_only=True)
class StageBreakdown:
    stage: int
    gpu: str
    node_type: str
    nodes: tuple[int, ...]
    layers: str
    compute_s: float
    """Fwd+bwd seconds of one micro-batch."""
    send_s: float
    """Seconds to send one micro-batch's activations to the next stage (0 on the last)."""
    computing_s: float
    """Its fwd and bwd events, summed (m x compute_s)."""
    sending_s: float
    """Its send events where they do not overlap its compute (exposed p2p)."""
    idle_s: float
    """The gaps between its events from 0 to its end: the bubble."""
    end_s: float
    weights_bytes: float | None
    gradients_bytes: float | None
    optimizer_bytes: float | None
    activations_bytes: float | None
    """The parts; None where the estimator does not state its bytes a parameter."""
    overhead_bytes: float | None
    """The framework's fixed bytes (CUDA context, allocator; the analytic estimator); None where
    the estimator counts none."""
    memory_bytes: float
    """The stage's estimate: the sum of the parts."""
    overhead_factor: float
    limit_bytes: float

    @property
    def headroom_bytes(self) -> float:
        return self.limit_bytes - self.overhead_factor * self.memory_bytes


@dataclass(frozen=True, kw_only=True)
class Explanation:
    where: str
    model: str
    cluster: str
    plan_key: str
    num_microbatches: int
    global_batch_size: int
    sequence_length: int
    stages: tuple[StageBreakdown, ...]
    pipeline_time_s: float
    bubble_fraction: float
    """The stages' waiting / (pp x pipeline time); nan (JSON: null) where there is no timeline."""
    last_stage: int
    """The stage whose end + DP all-reduce is latest: it sets the step time."""
    dp_allreduce_s: float
    """That stage's gradient all-reduce over data parallelism."""
    embedding_allreduce_s: float
    step_parts: tuple[tuple[str, float], ...]
    """The step time as terms that add up to it, the first the end of the stage that sets it
    (the estimator's `step_parts`, else that stage's end, DP and embedding all-reduces)."""
    step_time_s: float
    schedule_note: str
    """Why the timeline is not the estimator's own schedule or differs from its pipeline time; ''."""
    sends: str
    """Which sends the timeline charges (`charged_sends`); '' where there is no timeline or no
    boundary."""
    samples_per_s: float
    tokens_per_s: float
    model_flop_per_step: float
    gpus: dict[str, int]
    """GPUs of each type the plan uses."""
    mfu: float | None
    """Model FLOP/s over the summed peaks of the plan's GPUs (--peak-tflops, else the hardware
    catalog's dense peak); None where a GPU's peak is unknown."""
    usd_per_hour: float
    usd_per_step: float
    usd_per_million_tokens: float
    zero_stage: int
    row_step_time_s: float | None
    """The CSV's step time, to compare with the re-estimate."""
    fits: bool
    parallel: tuple[str, ...] = ()
    """The plan's expert / context / sharded-data groups and their costs per micro-batch (the
    estimator's `parallel_lines`, where it has them: the analytic one); () for a dense plan."""
    cuda_graphs: str = "none"
    """What the row's run captures in CUDA graphs (its cuda_graphs column; none: eager, FASOP's rows)."""
    recipe: str = ""
    """The row's recipe as words (recipe_words: recompute, ZeRO, virtual stages, CUDA graphs, precision; '': FASOP's)."""

    def to_dict(self) -> dict:
        out = asdict(self)
        for s, stage in zip(out["stages"], self.stages):
            s["headroom_bytes"] = stage.headroom_bytes
            s["nodes"] = list(stage.nodes)
        if self.bubble_fraction != self.bubble_fraction:  # nan: no timeline; JSON has no nan
            out["bubble_fraction"] = None
            for s in out["stages"]:   # no events to split the stage's time into (the text's '-')
                s["computing_s"] = s["sending_s"] = s["idle_s"] = None
        return out


def estimate_split(estimator, plan, partition: tuple[int, ...]):
    """The estimate of `plan` with its layers split as `partition` (layer-list entries per stage),
    not as the estimator's partitioner would split them: the estimator's `estimate_split` where
    it has one (an optional capability, estimators/__init__.py); else its estimate, which must
    then have that split."""
    method = getattr(estimator, "estimate_split", None)
    if method is not None:
        return method(plan, tuple(partition))
    estimate = estimator.estimate(plan)
    if tuple(estimate.partition) != tuple(partition):
        raise FasopError(f"the {type(estimator).__name__} estimator cannot be given a layer split: it splits "
                         f"{plan.key()} as {'-'.join(map(str, estimate.partition))}, the row as "
                         f"{'-'.join(map(str, partition))}")
    return estimate


def model_flop_per_sample(model: ModelSpec) -> float:
    """Fwd+bwd FLOPs of one sample (Narayanan et al. 2021, Eq. 3, no recompute); an MoE model's
    from the parameters a token uses (active_flop_per_token), not every expert's."""
    arch = model.architecture
    if arch is not None and arch.moe is not None:
        return 3.0 * active_flop_per_token(arch, model.sequence_length) * model.sequence_length
    h, s, v = model.hidden_size, model.sequence_length, model.vocab_size
    per_token = sum(24 * h * h + 4 * s * h for k in model.layer_kinds if k in TRANSFORMER_KINDS)
    per_token += sum(2 * h * v for k in model.layer_kinds if k == "head")
    return 3.0 * per_token * s


def active_flop_per_token(a, s: int) -> float:
    """Forward FLOPs of one token of a sequence of s: 2 per active parameter (Eq. 3's 24h² a layer
    generalised: attention, the router, the k routed experts a token goes to, the shared experts,
    the head; not the input embedding, a lookup) + each layer's scores over all s keys as Eq. 3
    counts them (4·s·width, no causal halving) and its Mamba scan (blocks.core_flops)."""
    from fasop.estimators.analytic import blocks as B
    from fasop.estimators.analytic import layers as L

    return 2 * L.active_params(a, input_embedding=False) + a.num_layers * B.core_flops(a, 1, s, 1, 1.0) / s


def explain(rp: RowPlan, model: ModelSpec, cluster: ClusterSpec, estimator, *,
            peak_flop_per_s: dict[str, float] | None = None) -> Explanation:
    return explain_with_timeline(rp, model, cluster, estimator, peak_flop_per_s=peak_flop_per_s)[0]


def explain_with_timeline(rp: RowPlan, model: ModelSpec, cluster: ClusterSpec, estimator, *,
                          peak_flop_per_s: dict[str, float] | None = None):
    """(Explanation, timeline.Timeline) of the row's plan: the breakdown and the events it sums."""
    plan = rp.plan
    e = estimate_split(estimator, plan, rp.partition)
    m = plan.num_microbatches
    zero = settings_of(rp).zero_stage
    parts = parts_of(estimator, e, zero)
    tl, note = _timeline(e, parts)
    ends = tl.stage_end_s if tl and note else e.stage_end_s  # the ends the events reach
    stages = _stages(e, parts, stage_layer_names(model, rp.partition, settings_of(rp).mtp_layers), tl, ends)
    drawn = ends[0]
    idle_total = sum(s.idle_s + (drawn - s.end_s) for s in stages)
    last, step_parts = parts.last_stage, parts.step_parts
    samples_per_s = plan.global_batch_size / e.step_time_s
    flop = model_flop_per_sample(model) * plan.global_batch_size
    gpus: dict[str, int] = {}
    for node in plan.placement:
        gpus[node.gpu] = gpus.get(node.gpu, 0) + node.gpus_per_node
    peaks = catalog_peaks(gpus, rp.row.get("precision") or "bf16") | given_peaks(peak_flop_per_s or {}, gpus, cluster)
    mfu = (flop / e.step_time_s / sum(peaks[g] * n for g, n in gpus.items())
           if gpus and all(g in peaks for g in gpus) else None)
    usd_per_hour = finite(rp.row.get("usd_per_hour", "")) or estimator.usd_per_s * 3600
    usd_per_step = usd_per_hour / 3600 * e.step_time_s
    tokens = plan.global_batch_size * model.sequence_length
    return Explanation(
        where=rp.where, model=model.name, cluster=cluster.path, plan_key=plan.key(), num_microbatches=m,
        global_batch_size=plan.global_batch_size, sequence_length=model.sequence_length, stages=tuple(stages),
        pipeline_time_s=e.pipeline_time_s, bubble_fraction=idle_total / (plan.pp * drawn) if tl else float("nan"),
        last_stage=last, dp_allreduce_s=e.dp_allreduce_s, embedding_allreduce_s=e.embedding_allreduce_s,
        step_parts=step_parts, step_time_s=e.step_time_s, schedule_note=note,
        sends=charged_sends(parts.schedule) if tl else "", samples_per_s=samples_per_s, tokens_per_s=samples_per_s * model.sequence_length,
        model_flop_per_step=flop, gpus=gpus, mfu=mfu, usd_per_hour=usd_per_hour, usd_per_step=usd_per_step,
        usd_per_million_tokens=usd_per_step / tokens * 1e6, zero_stage=zero,
        row_step_time_s=finite(rp.row.get("step_time_s", "")),
        fits=not (e.memory.is_zero_oom if zero else e.memory.is_oom),
        parallel=tuple(getattr(estimator, "parallel_lines", lambda _: ())(e)), cuda_graphs=rp.row.get("cuda_graphs") or "none",
        recipe=recipe_words(rp.row)), tl


def _stages(e, parts: EstimateParts, names: list[str], tl, ends) -> list[StageBreakdown]:
    """Each stage's breakdown: its estimate's numbers, its parts' memory and, from the timeline's
    events (where there is one) until the stage's end, its computing, sending and waiting."""
    plan = e.plan
    by_stage: dict[int, list] = {}
    for ev in (tl.events if tl else ()):
        by_stage.setdefault(ev.stage, []).append(ev)
    stages = []
    for i in range(plan.pp):
        memory = dict(parts.stage_memory_parts[i])
        computing, sending, idle = _occupancy(by_stage.get(i, []), ends[i]) if tl else (0.0, 0.0, 0.0)
        stages.append(StageBreakdown(
            stage=i, gpu=e.stage_node_types[i].gpu, node_type=e.stage_node_types[i].name,
            nodes=plan.stage_node_indices[i], layers=names[i], compute_s=e.stage_compute_s[i],
            send_s=e.p2p_s[i] if i < plan.pp - 1 else 0.0, computing_s=computing, sending_s=sending,
            idle_s=idle, end_s=ends[i], weights_bytes=memory.get("weights"), gradients_bytes=memory.get("gradients"),
            optimizer_bytes=memory.get("optimizer"), activations_bytes=memory.get("activations"),
            overhead_bytes=memory.get("overhead"), memory_bytes=parts.stage_memory_bytes[i],
            overhead_factor=parts.memory_overhead_factor, limit_bytes=parts.memory_limits_bytes[i]))
    return stages


def _timeline(e, parts: EstimateParts):
    """(timeline or None, note): the estimator's own schedule; None with the reason when the
    estimator has none or refuses to draw it (interleaved plans)."""
    if parts.schedule is None:
        return None, parts.schedule_note
    tl = timeline(e, parts.schedule)
    note = ""
    if abs(tl.pipeline_time_s - e.pipeline_time_s) > 1e-9 * e.pipeline_time_s:
        note = (f"the simulated 1F1B schedule (the timeline, these stage ends) ends at {tl.pipeline_time_s * 1e3:.2f} "
                f"ms; the estimator's pipeline time is {e.pipeline_time_s * 1e3:.2f} ms (its closed form)")
    return tl, note


def _occupancy(events, end: float) -> tuple[float, float, float]:
    """(computing, sending alone, waiting) seconds of a stage from 0 to its end: the sums of its
    compute events, of its send events outside them, and of the gaps between its events."""
    own = sorted((ev.start_s, min(ev.end_s, end), ev.kind in ("fwd", "bwd")) for ev in events
                 if ev.microbatch >= 0 and ev.start_s < end)
    computing = sum(b - a for a, b, compute in own if compute)
    covered, idle, reach = 0.0, 0.0, 0.0  # union of all events; gaps before each; the union's right end
    for a, b, _ in own:
        if a > reach:
            idle += a - reach
        covered += max(0.0, b - max(a, reach))
        reach = max(reach, b)
    idle += max(0.0, end - reach)
    return computing, covered - computing, idle


def charged_sends(schedule: Schedule) -> str:
    """Which of the pipeline's sends `schedule` charges, in words: every boundary's both ways,
    stage 0's forward and the last stage's backward only (FASOP-2024's rule), none, or the list."""
    pp = len(schedule.fwd_s)
    if pp == 1:
        return ""
    forward = [i for i in range(pp - 1) if schedule.send_fwd_s[i] > 0]
    backward = [i for i in range(1, pp) if schedule.send_bwd_s[i] > 0]
    if len(forward) == len(backward) == pp - 1:
        return "each boundary's sends, forward and backward"
    if forward == [0] and backward == [pp - 1]:
        return "only stage 0's forward and the last stage's backward sends are charged"
    if not forward and not backward:
        return "no sends are charged"
    return "charged: " + ", ".join([f"stage {i} forward" for i in forward] + [f"stage {i} backward" for i in backward])


# ---------------------------------------------------------------------------- text
def _short_key(x: Explanation) -> str:
    """The plan key with runs of one node type collapsed past 8 nodes (64 x gb200 -> 64xgb200), as search prints it."""
    degrees, _, placement = x.plan_key.partition("@")
    if placement.count("-") < 8:
        return x.plan_key
    return f"{degrees}@{abbreviate(placement, {s.node_type for s in x.stages})}"


def render(x: Explanation) -> str:
    """The explanation as a report: a time table, a memory table and the whole plan's lines."""
    head = [f"{x.model} on {Path(x.cluster).stem}: {x.where}",
            f"plan {_short_key(x)}: {counted(x.num_microbatches, 'micro-batch')} a step per replica, global batch "
            f"{x.global_batch_size}, sequence {x.sequence_length}" + (f"; {x.recipe}" if x.recipe else ""), ""]
    memory_title = "memory GiB per GPU" + _sharding(x)
    lines = head + _time_table(x)
    sends = f" ({x.sends})" if x.sends else ""
    legend = f"the stage's 1F1B events until its end: computing, sending only{sends}, waiting" \
        if x.bubble_fraction == x.bubble_fraction else "- without a timeline (see `timeline` below)"
    lines += [f"compute, p2p, idle: {legend}", "", memory_title] + _memory_table(x) + [""]
    return "\n".join(lines + _summary(x)) + "\n"


def recipe_words(row: dict) -> str:
    """A row's recipe cells as a title says them (`recompute full, ZeRO-3 HSDP (shards of 8 ranks), fp8`; FASOP's: '')."""
    words = [f"recompute {row['recompute']}"] if row.get("recompute") else []
    if row.get("zero", "0") not in ("", "0"):
        hsdp = row.get("dp_replicate", "") not in ("", "1")
        cp = int(row["cp"]) if str(row.get("cp", "")).isdigit() else 1   # the shard group: dp_shard x cp ranks
        shard = int(row["dp_shard"]) * max(1, cp) if str(row.get("dp_shard", "")).isdigit() else "?"
        words.append(f"ZeRO-{row['zero']}" + (f" HSDP (shards of {shard} ranks)" if hsdp else ""))
    words += ["sequence parallel"] if row.get("sequence_parallel") in ("True", "1") else []
    words += [f"{row['virtual_stages']} virtual stages"] if row.get("virtual_stages", "1") not in ("", "1") else []
    words += [f"CUDA graphs {row['cuda_graphs']}"] if row.get("cuda_graphs", "none") not in ("", "none") else []
    words += [w.format(row[k]) for k, w in (("recompute_layers", "{} layers a chunk recomputed"), ("mtp_layers",
              "MTP x{}"), ("offload_layers", "{} layers offloaded")) if row.get(k, "0") not in ("", "0")]
    return ", ".join(words + ([row["precision"]] if row.get("precision") else []))


def _sharding(x: Explanation) -> str:
    """What the ZeRO stage shards and over which ranks: dp, or the groups line's (cp, HSDP)."""
    if not x.zero_stage:
        return ""
    what = {1: "optimizer", 2: "optimizer and gradients", 3: "weights, gradients and optimizer"}[x.zero_stage]
    return f" ({what} sharded {'as the groups line says' if x.parallel else 'over dp'}, ZeRO-{x.zero_stage})"


def _time_table(x: Explanation) -> list[str]:
    ms = 1e3
    rows = [("stage", "gpu", "nodes", "layers", "fwd+bwd/mb ms", "send/mb ms", "compute ms", "p2p ms", "idle ms",
             "end ms")]
    drawn = x.bubble_fraction == x.bubble_fraction   # nan: no timeline, no events to split the stage's time into
    rows += [(str(s.stage), s.gpu, _span(s.nodes), s.layers, f"{s.compute_s * ms:.3f}",
              f"{s.send_s * ms:.3f}" if s.send_s else "-",
              *((f"{v * ms:.2f}" if drawn else "-") for v in (s.computing_s, s.sending_s, s.idle_s)),
              f"{s.end_s * ms:.2f}") for s in x.stages]
    return _table(rows, left=(1, 2, 3))


def _memory_table(x: Explanation) -> list[str]:
    overhead = any(s.overhead_bytes is not None for s in x.stages)
    rows = [("stage", "weights", "gradients", "optimizer", "activations", *(("overhead",) if overhead else ()),
             "total", f"x{x.stages[0].overhead_factor:.2f}", "limit", "headroom")]
    rows += [(str(s.stage), *("-" if v is None else f"{v / GIB:.2f}"
                              for v in (s.weights_bytes, s.gradients_bytes, s.optimizer_bytes,
                                        s.activations_bytes, *((s.overhead_bytes,) if overhead else ()),
                                        s.memory_bytes)),
              f"{s.overhead_factor * s.memory_bytes / GIB:.2f}", f"{s.limit_bytes / GIB:.2f}",
              f"{s.headroom_bytes / GIB:.2f}" + ("" if s.headroom_bytes >= 0 else " OOM")) for s in x.stages]
    return _table(rows, left=())


def _summary(x: Explanation) -> list[str]:
    """The whole plan's lines: pipeline, step, rate, cost, and the notes that apply."""
    ms = 1e3
    s0 = x.stages[0]
    throughput = f"{x.samples_per_s:,.2f} samples/s, {x.tokens_per_s:,.0f} tokens/s"
    flops = f"model {x.model_flop_per_step / 1e15:,.3f} PFLOP a step = {x.model_flop_per_step / x.step_time_s / 1e12:,.1f} TFLOP/s"
    gpus = " + ".join(f"{n} {g}" for g, n in x.gpus.items())
    mfu = (f"MFU {x.mfu:.1%} of the peaks of {gpus}" if x.mfu is not None else
           f"MFU unknown (no peak FLOP/s for {gpus} in the catalog; give --peak-tflops GPU=TFLOPS,...)")
    pipeline = (f"pipeline  {s0.end_s * ms:.2f} ms (stage 0's end) = compute {x.num_microbatches} x "
                f"{s0.compute_s * ms:.3f} + p2p {s0.sending_s * ms:.2f} + idle {s0.idle_s * ms:.2f} ms; "
                f"bubble {x.bubble_fraction:.1%} of the stages' time")
    if x.bubble_fraction != x.bubble_fraction:  # nan: no timeline (schedule_note says why)
        pipeline = f"pipeline  {x.pipeline_time_s * ms:.2f} ms (the estimator's; no timeline to break it down)"
    lines = [pipeline,
             f"step      {x.step_time_s * ms:.2f} ms = " + " + ".join(f"{k} {v * ms:.2f}" for k, v in x.step_parts) + " ms",
             f"rate      {throughput}; {flops}; {mfu}",
             f"cost      ${x.usd_per_step:.5f} a step (${x.usd_per_hour:,.2f}/h), "
             f"${x.usd_per_million_tokens:,.4f} per million tokens"]
    if x.schedule_note:
        lines.append(f"timeline  {x.schedule_note}")
    lines += [f"{'groups' if k == 0 else 'per mb':<9} {text}" for k, text in enumerate(x.parallel)]
    if not x.fits:
        lines.append("memory    does not fit: a stage's estimate x overhead exceeds its limit")
    if x.row_step_time_s is not None and abs(x.row_step_time_s - x.step_time_s) > 5e-6 * x.step_time_s:  # 6 digits
        lines.append(f"note      the CSV says step_time_s {x.row_step_time_s:.6g}; re-estimated with its split: "
                     f"{x.step_time_s:.6g} (a CSV of another fasop version or estimator, a calibration overlay "
                     "changed since, or FASOP's min-max partitioner, whose schedule can differ from the split it reports)")
    return lines


def _span(values) -> str:
    values = list(values)
    return str(values[0]) if len(values) == 1 else f"{values[0]}-{values[-1]}"


def _table(rows: list[tuple[str, ...]], left: tuple[int, ...]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) if i in left else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()
            for r in rows]
