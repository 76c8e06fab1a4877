"""Data-parallel and sharded-state communication of a stage: the ring collectives' times, the
gradient reduction over the DP x CP group (all-reduce; ZeRO 1-2 reduce-scatter + weight all-gather;
FSDP reduce-scatter, HSDP's replica all-reduce), what of it the step waits for, and FSDP's per-layer
weight gathers (docs/estimators.md "Data parallelism", "FSDP")."""

from __future__ import annotations

import math

from fasop.estimators.analytic import parallel as P
from fasop.estimators.analytic.hardware import Link, StageHardware, ring_link, shard_links
from fasop.estimators.analytic.layers import Workload


def all_reduce_s(size: float, n: int, link: Link, buckets: int = 1) -> float:
    """Ring all-reduce of `size` bytes over n ranks, sent as `buckets` collectives: the ring's 2(n-1)
    latencies once (NCCL pipelines consecutive buckets), and each further bucket its fixed launch
    latency (NCCL's per-collective base latency, src/graph/tuning.cc)."""
    if n <= 1:
        return 0.0
    return 2 * (n - 1) / n * size / link.bytes_per_s + (2 * (n - 1) + buckets - 1) * link.latency_s


def gather_s(size: float, n: int, link: Link, buckets: int = 1) -> float:
    """Reduce-scatter or all-gather of a `size`-byte buffer over n ranks (buckets: as all_reduce_s)."""
    return 0.0 if n <= 1 else (n - 1) / n * size / link.bytes_per_s + (n - 1 + buckets - 1) * link.latency_s


def p2p_s(size: float, link: Link) -> float:
    return size / link.bytes_per_s + link.latency_s



def shard_group(w: Workload) -> tuple[int, int]:
    """(shard, replicate): the ranks ZeRO/FSDP shards the states over and the replicas of a shard
    (HSDP); dense gradients reduce over DP x CP (Megatron-Core's dp-cp group; torchtitan's
    fsdp = dp_shard x cp), so shard x replicate = dp x cp."""
    group = w.dp * w.cp
    shard = w.shard or group
    return shard, group // shard


def state_links(w: Workload, hw: StageHardware) -> tuple[Link, Link]:
    """(shard link, replica link): the links of the stage's ZeRO / FSDP shard group and of the
    all-reduce across its replicas -- the DP link for both, or with HSDP hardware.shard_links."""
    return shard_links(hw, w.tp * w.shard) if w.shard else (hw.dp_link, hw.dp_link)


def dp_sync_parts(w: Workload, params: float, link: Link, replica: Link | None = None,
                  group: tuple[int, int] | None = None) -> tuple[float, float]:
    """(reduce, gather) seconds of a stage's gradient reduction over its DP x CP group (`group`: other
    (shard, replicate) ranks): `reduce` the gradients' all-reduce; sharded (ZeRO 1-2, FSDP) their
    reduce-scatter, and HSDP's all-reduce of the shard across the replicas (on `replica`; default
    `link`); `gather` ZeRO 1-2's all-gather of the updated 16-bit weights, which waits for the
    optimizer step and is hidden, if at all, behind the next step's first forward (FSDP gathers its
    weights layer by layer instead, zero3_gather_s)."""
    grad = params * w.params.gradient_reduce_bytes[w.recipe.precision]
    buckets = max(1, math.ceil(grad / w.params.gradient_bucket_bytes))
    shard, replicate = group or shard_group(w)
    if w.recipe.zero == 0:
        return all_reduce_s(grad, shard * replicate, link, buckets), 0.0
    reduce = gather_s(grad, shard, link, buckets) + all_reduce_s(grad / shard, replicate, replica or link)
    return reduce, (0.0 if w.recipe.zero >= 3 else gather_s(params * w.recipe.value_bytes, shard, link, buckets))


def dp_sync_s(w: Workload, params: float, link: Link, replica: Link | None = None,
              group: tuple[int, int] | None = None) -> float:
    """A stage's gradient reduction, all of it (dp_sync_parts)."""
    return sum(dp_sync_parts(w, params, link, replica, group))


def expert_rings(w: Workload, hw: StageHardware) -> tuple[int, Link] | None:
    """(ranks, link) of the groups a stage's routed experts reduce, shard and gather over apart from
    its dense parameters: Megatron-Core's expert data-parallel (EDP) group, whose members lie ep x etp
    ranks apart in rank order (parallel.expert_groups), so min(ep x etp, G) of its rings cross a node
    at once, each with that share of the node's network (hardware.ring_link), where a DP ring, tp
    apart, shares it min(tp, G) ways; torchtitan's FSDP shards experts over the same ranks
    (dp_shard x cp / ep). None without experts, or under HSDP (its shard links for all)."""
    if w.arch is None or w.arch.moe is None or w.shard:
        return None
    return P.expert_data_parallel(w.tp, w.cp, w.dp, w.ep, w.etp), ring_link(hw, w.ep * w.etp)


def stage_sync_parts(w: Workload, dense: float, experts: float, hw: StageHardware) -> tuple[float, float]:
    """(reduce, gather) seconds of a stage's gradient reduction (dp_sync_parts): its `dense`
    parameters' over the DP x CP group and its routed `experts`' over their EDP group (expert_rings),
    one after the other."""
    links, rings = state_links(w, hw), expert_rings(w, hw)
    if not experts or rings is None:
        return dp_sync_parts(w, dense + experts, *links)
    (r1, g1), (r2, g2) = dp_sync_parts(w, dense, *links), dp_sync_parts(w, experts, rings[1], group=(rings[0], 1))
    return r1 + r2, g1 + g2


def stage_sync_s(w: Workload, dense: float, experts: float, hw: StageHardware) -> float:
    """A stage's gradient reduction, all of it (stage_sync_parts)."""
    return sum(stage_sync_parts(w, dense, experts, hw))


def dp_exposed_s(w: Workload, reduce: float, fwd: float, bwd: float, busy: float = 0.0,
                 gather: float = 0.0) -> float:
    """The part of a stage's DP sync (`reduce` + `gather` s, dp_sync_parts) the step waits for:
    (1 - dp_overlap) of it; with `overlap_grad_reduce` (gradient buckets reduced during the backward:
    PyTorch DDP, FSDP, Megatron-Core --overlap-grad-reduce) what the stage's last micro-batch backward
    (`bwd`) cannot cover of the reduction, plus what the next step's first forward (`fwd`) cannot
    cover of a ZeRO 1-2 optimizer's weight all-gather (Megatron-Core --overlap-param-gather): two
    windows, one on each side of the optimizer step, so the spare time of one hides nothing of the
    other's transfer. FSDP (ZeRO 3) reduces only gradients: the backward covers them, less the `busy`
    seconds its own weight gathers hold the same link. The compute that hides a transfer runs slower
    beside it (overlap_share), which adds to the step."""
    flat = (1 - w.params.dp_overlap) * (reduce + gather)
    if not w.params.overlap_grad_reduce:
        return flat
    share = overlap_share(w)
    cover = bwd - busy if w.recipe.zero >= 3 else bwd
    return min(flat, P.exposed_s(reduce, max(0.0, cover), share) + P.exposed_s(gather, fwd, share))


def overlap_share(w: Workload) -> float:
    """The rate, as a share of its own, of compute that runs beside a DP / FSDP collective: 1 / (1 +
    overlap_slowdown) -- NCCL's kernels hold SMs and HBM bandwidth while the transfer is in flight
    (Lee et al. 2025, arXiv 2507.03114: compute overlapped with communication 18.9 % slower on average)."""
    return 1 / (1 + w.params.overlap_slowdown)


def zero3_busy_s(w: Workload, params: float, hw: StageHardware, root: float = 0.0, experts: float = 0.0) -> float:
    """Seconds FSDP's backward weight gathers of a stage's `params` (of them `experts` routed-expert
    ones) hold its links (0 below ZeRO 3); the `root` unit's stay gathered from the forward."""
    if w.recipe.zero < 3:
        return 0.0
    return layer_gather_s(w, params - root, experts, state_links(w, hw)[0], expert_rings(w, hw))


def layer_gather_s(w: Workload, params: float, experts: float, link: Link, rings: tuple[int, Link] | None) -> float:
    """All-gather of `params` 16-bit weights (of them `experts` routed-expert ones) for FSDP: over the
    shard group on `link`, the experts' over their own `rings` (expert_rings) where given."""
    e = w.recipe.value_bytes
    if not experts or rings is None:
        return gather_s(params * e, shard_group(w)[0], link)
    return gather_s((params - experts) * e, shard_group(w)[0], link) + gather_s(experts * e, *rings)


def zero3_gather_s(w: Workload, params: float, link: Link, layers: int, fwd: float, bwd: float,
                   root: float = 0.0, experts: float = 0.0, rings: tuple[int, Link] | None = None
                   ) -> tuple[float, float]:
    """(forward, backward) exposed seconds of FSDP's weight all-gathers over the shard group, every
    micro-batch: each layer's gather (the stage's `params` less its `root` unit, over its `layers`;
    its `experts` over their `rings`, layer_gather_s) is prefetched behind the previous layer's
    compute (`fwd`, `bwd`: one layer's seconds), the first exposed (parallel.fsdp_exposed_s, the
    compute beside the others at overlap_share); the root unit (embedding and head, fsdp_root_s) is
    gathered before anything computes and kept for the backward; then (1 - dp_overlap) of what is left."""
    if w.recipe.zero < 3 or layers <= 0:
        return 0.0, 0.0
    one = layer_gather_s(w, (params - root) / layers, experts / layers, link, rings)
    first = gather_s(root * w.recipe.value_bytes, shard_group(w)[0], link) if root else 0.0  # nothing to hide it
    keep = 1 - w.params.dp_overlap
    share = overlap_share(w)
    return first + P.fsdp_exposed_s(one, fwd, layers, share) * keep, P.fsdp_exposed_s(one, bwd, layers, share) * keep


def fsdp_sync_s(w: Workload, params: float, root: float, fwd: float, bwd: float, hw: StageHardware,
                experts: float = 0.0) -> tuple[float, float]:
    """(all, exposed) seconds of a FSDP (ZeRO 3) stage's gradient reduction: the layers' reduce-scatters
    (and HSDP all-reduces; routed `experts`' over their own groups, stage_sync_s) issued during the
    backward (dp_exposed_s), and the root unit's, which PyTorch FSDP issues only once the whole
    backward is done (FSDP2 in its final callback, FSDP1 in the root's post-backward hook: the
    embedding's gradient is the last one computed), nothing left to hide it."""
    links = state_links(w, hw)
    layers = stage_sync_s(w, params - root - experts, experts, hw)
    last = dp_sync_s(w, root, *links) if root else 0.0
    exposed = dp_exposed_s(w, layers, fwd, bwd, zero3_busy_s(w, params, hw, root, experts))
    return layers + last, exposed + (1 - w.params.dp_overlap) * last
