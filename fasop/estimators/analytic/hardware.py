"""The links of a placement in the analytic model: each pipeline stage's GPU and the links its
groups use (tensor, data, pipeline; NVLink and the NIC for its expert and context groups).

Megatron's rank order, rank = t + tp·d + tp·dp·stage, with node k holding ranks kG .. kG + G - 1
(G GPUs a node). A group inside a node uses the GPU link; across nodes, a GPU's share of the node's
network (docs/estimators.md §A3).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from fasop.estimators.analytic import overheads
from fasop.estimators.analytic import parallel as P
from fasop.specs.catalog import AnalyticParams


@dataclass(frozen=True)
class Link:
    bytes_per_s: float
    """Effective bandwidth (nominal x efficiency) one member of a collective sends at."""
    latency_s: float


@dataclass(frozen=True, kw_only=True)
class StageHardware:
    gpu: GpuType
    tp_link: Link
    dp_link: Link
    next_link: Link | None
    """To the next stage (None for the last)."""
    memory_limit_bytes: float
    groups: P.GroupLinks | None = None
    """NVLink and NIC of the stage, for its EP and CP groups (which live inside the stage)."""
    domain_nodes: int = 0
    """0 where the stage's DP rings stay inside one NVLink domain; else the fewest of the stage's
    nodes in one domain (1 where the domain is the node): what ring_link shares a domain's NICs by."""


# ----------------------------------------------------------------------------- links of a plan
def stage_hardware(tp: int, dp: int, pp: int, nodes, gpus, params: AnalyticParams) -> tuple[StageHardware, ...]:
    """Each stage's GPU and links for Megatron's rank order (rank = t + tp·d + tp·dp·stage; node k
    holds ranks kG .. kG + G - 1). `nodes[k]` is node k's NodeType, `gpus[k]` its catalog GPU.
    A stage spanning GPU types runs at its slowest GPU and its groups on its slowest links. A
    group inside a node uses the GPU link; across nodes, a GPU's share of the node's network:
    the G GPUs of a node send at once, split over the min(G, group block) ranks crossing it."""
    g = nodes[0].gpus_per_node
    return tuple(one_stage(tp, dp, pp, i, g, nodes, gpus, params) for i in range(pp))


def cached_stage_hardware(cache: dict, tp: int, dp: int, pp: int, nodes, gpus, params: AnalyticParams,
                          names: tuple[str, ...]) -> tuple[StageHardware, ...]:
    """stage_hardware, each stage kept in `cache` by (tp, dp, pp, stage, its span's node names):
    one_stage reads only the nodes of the stage's span (and the next stage's first), so orders
    that share a span share its stage (`names[k]`: node k's name, one NodeType per name)."""
    g = nodes[0].gpus_per_node
    out = []
    for i in range(pp):
        first, last, after = stage_span(tp, dp, pp, i, g)
        key = (tp, dp, pp, i, names[first:max(last, after) + 1])
        hw = cache.get(key)
        if hw is None:
            hw = cache[key] = one_stage(tp, dp, pp, i, g, nodes, gpus, params)
        out.append(hw)
    return tuple(out)


def stage_span(tp: int, dp: int, pp: int, i: int, g: int) -> tuple[int, int, int]:
    """(first node, last node, first node of the next stage -- the last node for the last stage)."""
    block = tp * dp
    first, last = i * block // g, ((i + 1) * block - 1) // g
    return first, last, (i + 1) * block // g if i + 1 < pp else last


def domain_gpus(gpus, ks, g: int) -> int:
    """GPUs of the NVLink domain the nodes `ks` (G GPUs each) belong to: the GPUs' `nvlink_domain_gpus`
    where every one has one (GB200 / GB300 NVL72: 72, 18 trays of 4), else the node's G."""
    d = min(gpus[k].nvlink_domain_gpus or g for k in ks)
    return d if d > g and d % g == 0 else g


def one_domain(ks, g: int, domain: int) -> bool:
    """Whether the nodes `ks` lie in one NVLink domain of `domain` GPUs (node k in domain k // (domain / G))."""
    per = domain // g
    return len({k // per for k in ks}) == 1


def pace_key(gpu) -> tuple[float, float]:
    """The order in which a GPU paces a synchronous group it is in: the least matmul rate, then the least memory
    bandwidth (one_stage's stage GPU, mixed.slowest; the bounds rely on it)."""
    return gpu.matmul_flops("bf16"), gpu.memory_bytes_per_s


def one_stage(tp: int, dp: int, pp: int, i: int, g: int, nodes, gpus, params: AnalyticParams) -> StageHardware:
    """Stage i of stage_hardware; reads nodes[k], gpus[k] only for k in stage_span (G GPUs a node).
    Inside one NVLink domain larger than a node (NVL72) a group spanning nodes uses the GPU link."""
    first, last, after = stage_span(tp, dp, pp, i, g)
    ks = range(first, last + 1)
    domain = domain_gpus(gpus, ks, g)
    intra = lambda ks: Link(min(gpus[k].intra_node_bytes_per_s * gpus[k].intra_node_share(params) for k in ks),
                            params.intra_node_latency_s)
    net = lambda ks: min(nodes[k].inter_node_bytes_per_s for k in ks)
    inter = lambda ks, share: Link(overheads.network_bytes_per_s(params, net(ks)) / share,
                                   overheads.network_latency_s(params, net(ks)))
    gpu = min((gpus[k] for k in ks), key=pace_key)
    nxt = None
    if i + 1 < pp:
        pair = (last, after)
        nxt = intra(pair) if one_domain(pair, g, domain_gpus(gpus, pair, g)) else inter(pair, min(g, tp * dp))
    inside = intra(ks)
    groups = P.GroupLinks(inside.bytes_per_s, overheads.network_bytes_per_s(params, net(ks)),
                          params.intra_node_latency_s, overheads.network_latency_s(params, net(ks)), g, domain)
    tp_inside = tp <= g or (tp <= domain and not domain % tp)
    n = domain_nodes(ks, g, domain)
    return StageHardware(gpu=gpu, tp_link=inside if tp_inside else inter(ks, g),
                         dp_link=dp_link(ks, g, domain, tp, inside, inter, n), next_link=nxt,
                         memory_limit_bytes=min(nodes[k].memory_limit_bytes for k in ks), groups=groups,
                         domain_nodes=n)


def domain_nodes(ks, g: int, domain: int) -> int:
    """StageHardware.domain_nodes of a stage on the nodes `ks` (G GPUs each, NVLink domains of `domain`)."""
    if one_domain(ks, g, domain):
        return 0
    per = domain // g
    return min(Counter(k // per for k in ks).values())


def dp_link(ks, g: int, domain: int, tp: int, inside: Link, inter, n: int | None = None) -> Link:
    """The link of a stage's DP rings over the nodes `ks` (G GPUs each), members tp ranks apart:
    rings_link's, `inter(ks, share)` the network / share, n the stage's domain_nodes (when known)."""
    n = domain_nodes(ks, g, domain) if n is None else n
    return rings_link(inside, inter(ks, 1) if n else inside, g, domain, n, tp)


def ring_link(hw: StageHardware, block: int) -> Link:
    """The link of a stage's rings whose members lie `block` ranks apart, one ring per rank of a
    block (the expert data-parallel rings: block ep x etp, Megatron-Core's tp-ep-dp expert order,
    parallel.expert_groups); rings_link's over the stage's group links (the DP link without them)."""
    links = hw.groups
    if links is None:
        return hw.dp_link
    inside = Link(links.intra_bytes_per_s, links.intra_latency_s)
    return rings_link(inside, Link(links.node_bytes_per_s, links.inter_latency_s), links.gpus_per_node,
                      links.nvlink_gpus, hw.domain_nodes, block)


def rings_link(inside: Link, network: Link, g: int, domain: int, n: int, block: int) -> Link:
    """The link each of a stage's rings sends at, members `block` ranks apart (n: domain_nodes): the
    GPU link inside one NVLink domain (n = 0); across nodes, the node's `network` shared by the
    min(block, G) rings crossing it (a ring enters and leaves a node once, on whichever of its NICs:
    one ring may have the node's whole network); across NVLink domains larger than a node (NVL72),
    the same with the stage's part of a domain as the node -- its n nodes' networks shared by
    min(block, nG) rings, at most the GPU link."""
    if not n:
        return inside
    if domain == g:
        return Link(network.bytes_per_s / min(block, g), network.latency_s)
    across = Link(network.bytes_per_s / (min(block, n * g) / n), network.latency_s)
    return across if across.bytes_per_s < inside.bytes_per_s else Link(inside.bytes_per_s, across.latency_s)


def shard_links(hw: StageHardware, block: int) -> tuple[Link, Link]:
    """(shard link, replica link) of a stage's HSDP groups, `block` = tp x cp x dp_shard consecutive
    ranks holding one shard group: a block dividing the stage's NVLink domain (a node, or NVL72's 72
    GPUs) gathers and reduce-scatters on NVLink, and the all-reduce across replicas crosses nodes
    with each of a node's GPUs in a replica ring of its own (the NIC shared by min(G, block) of
    them). A larger block, or a stage without group links: the stage's DP link for both."""
    groups = hw.groups
    if groups is None or block > groups.nvlink_gpus or groups.nvlink_gpus % block:
        return hw.dp_link, hw.dp_link
    inside = Link(groups.intra_bytes_per_s, groups.intra_latency_s)
    if hw.dp_link == inside:  # the stage's DP group stays inside the domain: no NIC at all
        return inside, inside
    return inside, Link(groups.node_bytes_per_s / min(groups.gpus_per_node, block), groups.inter_latency_s)
