"""A plan's expert, context and sharded-data-parallel groups: HSDP's shard degree (`dp_shard`),
and what `fasop explain` shows of them: the groups (Megatron-Core's folding, docs/parallelism.md)
and, per stage and micro-batch, the MoE all-to-alls, the CP ring and the FSDP gathers, raw and as
exposed after their overlap.

Every number is the cost model's own (parallel.py, cost.py), asked again piece by piece: the
exposed communication of a layer is its time on the stage's links less its time on links of no
cost, so the lines add up to what the step was scored with.
"""

from __future__ import annotations

from fasop.estimators.analytic import context as CX
from fasop.estimators.analytic import cost as C
from fasop.estimators.analytic import parallel as P
from fasop.plans.space import divisors
from fasop.plans.plan import Plan


def dp_shard(plan: Plan, hsdp: bool, domain_gpus: int = 0) -> int:
    """The data-parallel ranks a ZeRO stage >= 1 shards the states over, beside cp (torchtitan's
    data_parallel_shard_degree): all dp, or with HSDP the DP ranks of one node (a node holds
    tp x cp x dp_shard ranks, its mesh's inner dims); dp itself where tp x cp does not divide a node
    or dp does not split so (HSDP would be FSDP). In an NVLink domain of `domain_gpus` > a node's
    GPUs (NVL72: 72), the most DP ranks d | dp whose tp x cp x d ranks divide the domain (shard
    groups never straddle two domains): on GB200 trays of 4 at tp 1, dp 64: 8, not a tray's 4."""
    if not hsdp:
        return plan.dp
    per_node, block = plan.gpus_per_node, plan.tp * plan.cp
    if domain_gpus > per_node:
        wide = [d for d in divisors(plan.dp) if not domain_gpus % (block * d)]
        if wide:
            return wide[-1]
    inner = per_node // block if not per_node % block else plan.dp
    return inner if inner >= 1 and not plan.dp % inner else plan.dp


def hsdp_flags(plan: Plan, arch, domain_gpus: int = 0) -> tuple[bool, bool]:
    """(HSDP's shard group is smaller than dp, its replicas divide the experts' data-parallel group):
    the second Megatron-Core's rule for an MoE model (parallel_state.py: expert data-parallel size %
    num_distributed_optimizer_instances == 0), True for a dense one (recipes.recipe_grid)."""
    shard = dp_shard(plan, True, domain_gpus)
    if shard >= plan.dp or arch.moe is None:
        return shard < plan.dp, True
    return True, not P.expert_data_parallel(plan.tp, plan.cp, plan.dp, plan.ep, plan.etp) % (plan.dp // shard)


def group_line(w: C.Workload, stage_ranks: int) -> str:
    """One line: the attention grid, the expert grid and the state sharding of a stage."""
    shard, replicate = C.shard_group(w)
    cp = f"cp {w.cp} ({w.recipe.cp_comm})" if w.cp > 1 else f"cp {w.cp}"
    parts = [f"a stage's {stage_ranks} ranks: attention tp {w.tp} x {cp} x dp {w.dp}"]
    if w.arch.moe is not None:
        edp = P.expert_data_parallel(w.tp, w.cp, w.dp, w.ep, w.etp)
        parts.append(f"experts etp {w.etp} x ep {w.ep} x edp {edp} ({w.arch.moe.num_experts // w.ep} of "
                     f"{w.arch.moe.num_experts} experts a rank)")
    if w.recipe.zero:
        what = {1: "optimizer", 2: "optimizer, gradients", 3: "weights, gradients, optimizer (FSDP)"}[w.recipe.zero]
        parts.append(f"{what} sharded over {shard} ranks " +
                     (f"(dp_shard x cp), replicated {replicate}x (HSDP)" if replicate > 1 else "(dp x cp)"))
    return "; ".join(parts)


def stage_lines(w: C.Workload, stages, counts: tuple[int, ...]) -> list[str]:
    """Per stage, one micro-batch's milliseconds of the MoE all-to-alls and the CP ring (raw, the
    time on the stage's links) and what the layer loses to them and to FSDP's gathers (exposed)."""
    out = []
    for i, (hw, n) in enumerate(zip(stages, counts)):
        groups = hw.groups or P.FREE_LINKS
        pieces = []
        if w.arch.moe is not None and w.ep > 1:
            share, both = P.moe_layer_share(w.arch), sum(P.moe_alltoalls_s(w, groups))   # as parallel.moe_s sends them
            pieces.append(f"all-to-all {n * share * both * 1e3:.3f} ms fwd, as much bwd")
        if w.cp > 1 and w.recipe.cp_comm == "a2a":
            a2a = CX.a2a_s(w, groups)[0]
            pieces.append(f"CP all-to-alls (a2a) {n * a2a * 1e3:.3f} ms fwd, as much bwd")
        elif w.cp > 1 and w.recipe.cp_comm == "all_gather":
            ag = CX.all_gather_s(w, groups)[0]
            pieces.append(f"CP all-gathers (all_gather) {n * ag * 1e3:.3f} ms fwd, {2 * n * ag * 1e3:.3f} ms bwd")
        elif w.cp > 1:
            ring = (w.cp - 1) * P.ring_step_s(P.ring_kv_bytes(w), w.cp, w.tp, groups)
            pieces.append(f"CP ring (p2p) {n * ring * 1e3:.3f} ms fwd, {2 * n * ring * 1e3:.3f} ms bwd")
        on_links = C.layer_s(w, hw.gpu, hw.tp_link, hw.groups)
        free = C.layer_s(w, hw.gpu, hw.tp_link, P.FREE_LINKS)
        f1, b1 = on_links
        dense, experts = C.stage_param_split(w, n, i == 0, i == len(stages) - 1)
        gf, gb = C.zero3_gather_s(w, dense + experts, C.state_links(w, hw)[0], n, f1, b1, C.fsdp_root_params(w, i),
                                  experts, C.expert_rings(w, hw))
        if gf or gb:
            pieces.append(f"FSDP gathers exposed {gf * 1e3:.3f} ms fwd, {gb * 1e3:.3f} ms bwd")
        exposed = (n * (on_links[0] - free[0]) * 1e3, n * (on_links[1] - free[1]) * 1e3)
        if w.cp > 1 or w.ep > 1 or max(exposed) >= 5e-4:  # an MoE plan at ep 1 exchanges nothing: no line of zeros
            pieces.append(f"exposed in its layers {exposed[0]:.3f} ms fwd, {exposed[1]:.3f} ms bwd")
        if pieces:
            out.append(f"stage {i} ({n} layers): " + "; ".join(pieces))
    return out
