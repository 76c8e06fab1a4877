"""Expert, context and fully-sharded data parallelism in the analytic model: groups, volumes, seconds.

Sources (shared/reference/ecosystem/07_moe_cp_fsdp.md, each with its file and line there):

- Expert groups, Megatron-Core `parallel_state.py` ("MoE parallel folding", arXiv 2504.14960): the
  attention grid of a stage is TP x CP x DP; the expert grid carves the same tp*cp*dp ranks into
  ETP x EP x EDP in the order tp-ep-dp (ETP innermost), so EDP = tp*cp*dp / (ep*etp). EP must
  divide the experts, ep*etp the stage's ranks. Dense gradients reduce over DP x CP, expert
  gradients over EDP (distributed_data_parallel.py).
- Token dispatch (Megatron `alltoall` dispatcher, token_dispatcher.py): per MoE layer and
  micro-batch a rank holding T tokens sends T*k*h elements in the dispatch all-to-all and
  receives as many back in the combine, (ep-1)/ep of them to other ranks under uniform routing;
  the backward runs one all-to-all of the same size each way. Every dispatcher sends 16-bit tokens,
  FP8 / MXFP8 runs too (dispatch_value_bytes).
  Inside a node the bytes go over NVLink, to the ep - n_in members on other nodes over the
  NIC, every GPU of the node sending at once (its 1/G share); the two run concurrently.
- Load imbalance: the slowest EP rank receives rho x the mean tokens (rho: `moe_load_imbalance`,
  analytic.yaml); the expert matmuls and the all-to-all wait for it.
- Expert matmuls run as one grouped GEMM (`--moe-grouped-gemm`) at `grouped_gemm_efficiency` of
  the dense matmul rate; the router is an h x E matmul per token (Switch §3, Megatron router.py).
- Context parallelism (Transformer Engine's p2p ring, context_parallel.py): the sequence in 2*cp
  chunks, rank r holding chunks r and 2cp-1-r (causal balance). Per layer a rank sends its K and V,
  b*(s/cp)*(kv heads/t)*(d_k + d_v) elements, cp - 1 times forward and 2(cp - 1) times backward
  (KV and dKV), each step overlapped with one step's attention: exposed = max(0, comm - attention).
- FSDP / ZeRO-3 (PyTorch FSDP2 `fully_shard`, ZeRO §5): each layer's 16-bit weights are
  all-gathered over the shard group before its forward and again before its backward, the
  gradients reduce-scattered after; the next layer's gather is prefetched behind this layer's
  compute, so a micro-batch exposes the first gather and each layer's max(0, gather - compute).
  HSDP shards over `shard` ranks and replicates over dp*cp/shard (torchtitan's
  data_parallel_shard_degree x data_parallel_replicate_degree).
"""

from __future__ import annotations

from dataclasses import dataclass

from fasop.estimators.analytic import blocks as B
from fasop.estimators.analytic.moe_kernels import (EP_A2A_OVERLAP_SLOWDOWN, allgather_bytes, dispatch_copies,  # noqa: F401
                                                   dispatch_local_bytes, ep_overlap_paired_share, grouped_wave_efficiency,
                                                   local_sort_bytes, overlap_kept_share, unfused_permute_bytes)
from fasop.specs.architecture import MOE_KINDS, Architecture


# ----------------------------------------------------------------------------- groups
def expert_data_parallel(tp: int, cp: int, dp: int, ep: int, etp: int) -> int:
    """Megatron-Core's expert data-parallel size of a stage: tp*cp*dp / (ep*etp)."""
    block = tp * cp * dp
    if block % (ep * etp):
        raise ValueError(f"ep*etp={ep * etp} does not divide the stage's tp*cp*dp={block} ranks")
    return block // (ep * etp)


def valid_expert_degrees(tp: int, cp: int, dp: int, ep: int, etp: int, num_experts: int) -> bool:
    """Whether (ep, etp) carves a stage of tp*cp*dp ranks as Megatron-Core allows: ep divides the
    experts (moe_layer.py), ep*etp the stage's ranks (parallel_state.py)."""
    return ep >= 1 and etp >= 1 and not num_experts % ep and not (tp * cp * dp) % (ep * etp)


def expert_rank_groups(tp: int, cp: int, dp: int, ep: int, etp: int) -> dict[str, list[list[int]]]:
    """The ETP, EP and EDP groups of one stage's ranks 0 .. tp*cp*dp - 1, as Megatron-Core's
    RankGenerator(tp=etp, ep=ep, dp=edp, cp=1, order="tp-ep-dp") builds them: rank =
    i_etp + etp*i_ep + etp*ep*i_edp."""
    edp = expert_data_parallel(tp, cp, dp, ep, etp)
    rank = lambda i, j, k: i + etp * j + etp * ep * k
    return {"etp": [[rank(i, j, k) for i in range(etp)] for k in range(edp) for j in range(ep)],
            "ep": [[rank(i, j, k) for j in range(ep)] for k in range(edp) for i in range(etp)],
            "edp": [[rank(i, j, k) for k in range(edp)] for j in range(ep) for i in range(etp)]}


def moe_layer_share(arch: Architecture) -> float:
    """Share of the layers that hold routed experts: "moe" (attention + experts) and "experts"
    (Nemotron-H's expert block) kinds; all when `layer_kinds` is empty."""
    if arch.moe is None:
        return 0.0
    kinds = arch.layer_kinds
    return 1.0 if not kinds else sum(k in MOE_KINDS for k in kinds) / len(kinds)


def routed_expert_params(arch: Architecture) -> float:
    """Parameters of the routed experts of one layer, averaged over the layers (E x the expert MLP,
    its biases included: blocks.expert_params)."""
    return B.mean_over_kinds(arch, lambda kind: B.expert_params(arch, kind))


# ----------------------------------------------------------------------------- volumes (bytes per rank)
def dispatch_bytes(tokens: float, k: int, h: int, elem_bytes: float, ep: int) -> float:
    """Bytes one rank sends to other ranks in one all-to-all of its T routed tokens: T*k*h*B*(ep-1)/ep."""
    return tokens * k * h * elem_bytes * (ep - 1) / ep


def cp_kv_bytes(b: int, s: int, cp: int, kv_width: float, t: int, elem_bytes: float) -> float:
    """|KV_local|: the K and V one CP rank holds for one layer, b*(s/cp)*(kv_width/t)*2*B (kv_width: the mean of
    the K and V widths, which differ under MLA)."""
    return b * (s / cp) * (kv_width / t) * 2 * elem_bytes


def ring_kv_bytes(w) -> float:
    """A workload's |KV_local| in the CP ring: its K and V at their own widths (MLA: d_nope + d_rope and d_v)."""
    k, v = w.arch.attention_widths[1:3]
    return cp_kv_bytes(w.mbs, w.seq, w.cp, (k + v) / 2, w.tp, w.recipe.value_bytes)


def cp_exchange_bytes(b: int, s: int, cp: int, kv_width: int, t: int, elem_bytes: float) -> tuple[float, float]:
    """(forward, backward) bytes one rank sends in the CP ring per layer: (cp-1) and 2(cp-1) x |KV_local|."""
    kv = cp_kv_bytes(b, s, cp, kv_width, t, elem_bytes)
    return (cp - 1) * kv, 2 * (cp - 1) * kv


def fsdp_gather_bytes(params: float, shard: int, elem_bytes: float) -> float:
    """Bytes one rank receives all-gathering `params` parameters sharded over `shard` ranks."""
    return params * elem_bytes * (shard - 1) / shard


# ----------------------------------------------------------------------------- links and seconds
@dataclass(frozen=True)
class GroupLinks:
    """The links a group inside one stage uses: NVLink (intra) and one node's NIC (all of it)."""
    intra_bytes_per_s: float
    node_bytes_per_s: float
    """The node's network bandwidth x efficiency (shared by the GPUs of the node that send across)."""
    intra_latency_s: float
    inter_latency_s: float
    gpus_per_node: int
    domain_gpus: int = 0
    """GPUs of the NVLink domain (NVL72: 72, several nodes); 0: the node."""

    @property
    def nvlink_gpus(self) -> int:
        return self.domain_gpus or self.gpus_per_node

    @property
    def key(self) -> tuple[float, float, int]:
        """What a plan signature needs of them, plainly (a cheap repr; the latencies follow these)."""
        return self.intra_bytes_per_s, self.node_bytes_per_s, self.domain_gpus


FREE_LINKS = GroupLinks(float("inf"), float("inf"), 0.0, 0.0, 1)
"""Links of no cost: a layer's time asked without its stage's links (the search's quick bounds)."""


def alltoall_s(sent: float, ep: int, stride: int, links: GroupLinks, k: int = 0, dedup: bool = False,
               spread: tuple[int, str, bool, int, int] = (0, "uniform", False, 1, 1)) -> float:
    """One all-to-all in which each of ep ranks (`stride` apart) sends `sent` bytes to the others,
    evenly: the members in its NVLink domain (its node, or an NVL72 rack) over NVLink, the others over
    its 1/G share of its node's NIC, at once. The peers' transfers run concurrently (NCCL issues an
    all-to-all as one group of sends and receives), so each link pays its latency once. With the
    tokens' top-k, `dedup` (once per remote domain) and `spread` (experts E, routing, once per rank of
    the domain, router groups, the groups a token picks) shrink the bytes as moe_kernels.dispatch_copies says."""
    if ep <= 1:
        return 0.0
    g, d = links.gpus_per_node, links.nvlink_gpus
    n_in = max(1, min(ep, d // stride)) if stride <= d else 1
    inside = sent * (n_in - 1) / (ep - 1)
    outside = sent - inside
    experts, routing, rank_dedup, groups, group_topk = spread
    if k and (dedup or rank_dedup):
        copies = dispatch_copies(k, experts, ep, n_in, routing, dedup, rank_dedup, groups, group_topk)
        inside *= copies[0] / (k * (n_in - 1) / ep) if n_in > 1 else 0.0
        outside *= copies[1] / (k * (ep - n_in) / ep) if ep > n_in else 0.0
    t_in = inside / links.intra_bytes_per_s + links.intra_latency_s if n_in > 1 else 0.0
    t_out = outside / (links.node_bytes_per_s / g) + links.inter_latency_s if ep > n_in else 0.0
    return max(t_in, t_out)


def ring_step_s(size: float, members: int, stride: int, links: GroupLinks) -> float:
    """One step of a ring of `members` ranks `stride` apart sending `size` bytes each to the next:
    NVLink when the ring is inside a node (or NVLink domain), else the NIC shared by the min(G, stride)
    rings that cross it."""
    g = links.gpus_per_node
    if members * stride <= links.nvlink_gpus:
        return size / links.intra_bytes_per_s + links.intra_latency_s
    return size / (links.node_bytes_per_s / min(g, stride)) + links.inter_latency_s


def exposed_s(comm: float, compute: float, share: float = 1.0) -> float:
    """The part of a transfer overlapped with `compute` that the step waits for; with `share` < 1, the
    compute runs on that share of the SMs while the transfer's kernels hold the rest: it advances
    share x comm seconds of its work during the transfer, and the phase is comm + what is left."""
    return comm - min(compute, share * comm)


def fsdp_exposed_s(gather: float, layer_compute: float, layers: int, share: float = 1.0) -> float:
    """Exposed seconds of `layers` per-layer all-gathers of `gather` seconds each, each prefetched
    behind the previous layer's compute (FSDP2's default forward/backward prefetch): the first
    gather in full, then exposed_s(gather, compute, share) per later layer (share < 1: the compute
    beside the gather runs at that share of its rate)."""
    if layers <= 0 or gather <= 0:
        return 0.0
    return gather + (layers - 1) * exposed_s(gather, layer_compute, share)


# ----------------------------------------------------------------------------- memory (bytes per GPU)
@dataclass(frozen=True, kw_only=True)
class StateBytes:
    weights: float
    gradients: float
    optimizer: float


def state_bytes(*, dense: float, experts: float, zero: int, dense_shard: int, expert_shard: int,
                weight_bytes: float, grad_bytes: float, adam_bytes: float) -> StateBytes:
    """Weights, gradients and optimizer of `dense` parameters (already / tp) sharded over
    `dense_shard` ranks and `experts` parameters (already / (ep*etp)) over `expert_shard`, by ZeRO
    stage: 1 shards the optimizer (Megatron's distributed optimizer over DP x CP and EDP), 2 also
    the gradients, 3 (FSDP) also the weights (ZeRO §5, Fig. 1)."""
    def part(bytes_per, sharded):
        return dense * bytes_per / (dense_shard if sharded else 1) + experts * bytes_per / (
            expert_shard if sharded else 1)
    return StateBytes(weights=part(weight_bytes, zero >= 3), gradients=part(grad_bytes, zero >= 2),
                      optimizer=part(adam_bytes, zero >= 1))


def fsdp_copy_bytes(layer_params: float, param_bytes: float, reduce_bytes: float) -> tuple[float, float]:
    """(forward, backward) bytes FSDP2 moves per unit and micro-batch beside its collectives (PyTorch
    torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py): `foreach_all_gather_copy_out` copies the
    gathered buffer into the unit's parameters on the compute stream (read + write, 2 x param_bytes),
    again for the backward's re-gather; `foreach_reduce`'s `_chunk_cat` writes the unsharded
    gradients (param_bytes read) into the reduce-scatter input (reduce_bytes written)."""
    copy = 2 * param_bytes * layer_params
    return copy, copy + (param_bytes + reduce_bytes) * layer_params


def fsdp1_copy_bytes(layer_params: float, param_bytes: float, reduce_bytes: float, shard: int,
                     world: int = 1) -> tuple[float, float]:
    """(forward, backward) bytes FSDP1 moves per unit and micro-batch beside its collectives: its
    all-gather fills the flat parameter in place and the unit's parameters are views of it, made by
    `torch.split` of the flat parameter (torch/distributed/fsdp/_flat_param.py
    `_get_unflat_views_unaligned`), so nothing is copied forward; autograd's backward of that split
    concatenates the views' gradients into the flat gradient the reduce-scatter takes (param_bytes
    read and written per parameter). Under mixed precision (16-bit parameters) each all-gather,
    forward and the backward's re-gather, first casts the GPU's fp32 shard (1/shard of the unit) to
    16 bits (`_use_low_precision_shard`: read 4, write param_bytes), and a 16-bit reduced gradient
    shard is cast back to fp32 for the optimizer (_runtime_utils.py `_cast_grad_to_param_dtype`:
    read reduce_bytes, write 4). FSDP1 sums (no NCCL average) and divides the flat gradient by the
    data-parallel `world` (shard x replicas) in two in-place passes, fsdp1_divide_factors: before the
    reduce-scatter the whole unsharded gradient, after it (and after HSDP's all-reduce) the shard
    (_runtime_utils.py `_reduce_grad`, `_div_if_needed`; read + write reduce_bytes each)."""
    local = layer_params / shard
    cast = (4 + param_bytes) * local if param_bytes < 4 else 0.0
    grad = (reduce_bytes + 4) * local if reduce_bytes < 4 else 0.0
    pre, post = fsdp1_divide_factors(world)
    divide = 2 * reduce_bytes * ((layer_params if pre > 1 else 0.0) + (local if post > 1 else 0.0))
    return cast, cast + 2 * param_bytes * layer_params + grad + divide


def fsdp1_divide_factors(world: int) -> tuple[int, float]:
    """(pre, post) divide factors of FSDP1's gradient reduction over `world` data-parallel ranks
    (torch/distributed/algorithms/_comm_hooks/default_hooks.py `DefaultState._get_gradient_predivide_factor`,
    from FairScale): pre doubles while it divides world and world / pre > pre; post = world / pre."""
    pre = 1
    while world % pre == 0 and world / pre > pre:
        pre *= 2
    return pre, world / pre


def fsdp_unsharded_bytes(layer_params: float, param_bytes: float, reduce_bytes: float) -> float:
    """FSDP's unsharded working set on a GPU: two units (the layer computing and the one prefetched)
    of all-gathered `param_bytes` weights and of unsharded `reduce_bytes` gradients awaiting their
    reduce-scatter -- 2 x layer_params x (param_bytes + reduce_bytes) ("at least two FSDP units worth
    of un-sharded weight memory ... [and] two FSDP units worth of un-sharded gradient memory",
    Megatron-LM docs/user-guide/features/megatron_fsdp.md; 07_moe_cp_fsdp.md §4.2)."""
    return 2 * layer_params * (param_bytes + reduce_bytes)


def dispatch_buffer_bytes(tokens: float, k: int, h: int, elem_bytes: float, imbalance: float) -> float:
    """The permuted tokens a rank receives for its experts (and sends back): 2 x rho*T*k*h*B."""
    return 2 * imbalance * tokens * k * h * elem_bytes


# ----------------------------------------------------------------------------- per-layer seconds
def dispatch_value_bytes(recipe) -> int:
    """Bytes of one token element in the dispatch all-to-all: the run's 16-bit (or fp32) value, FP8 /
    MXFP8 / NVFP4 runs included. Megatron-Core @d98e8a6 sends the hidden states as they are on every
    dispatcher a row can name: `alltoall` (token_dispatcher.py `all_to_all` of the permuted tokens),
    DeepEP (fused_a2a.py `buffer.dispatch(x, ...)` of the 16-bit x) and HybridEP (fused_a2a.py:
    `fp8_dispatch = False  # Currently, we do not support fp8 dispatch`; `init_hybrid_ep_buffer`
    asserts "HybridEP dispatcher does not support fp8 dispatch now"). Only the `ncclep` flex backend
    quantizes the payload, with `moe_dispatch_fwd_dtype` 'mxfp8' (default 'bf16';
    transformer_config.py), which no row states. (Megatron moe/README.md's "50% EP dispatch volume"
    for FP8 and DeepSeek-V3 §3.3.3's FP8 dispatch are not what these dispatchers run.)"""
    return recipe.value_bytes


def routed_tokens(w) -> float:
    """Tokens one rank routes per MoE layer and micro-batch: b*s/(cp*tp) (Megatron-Core requires
    sequence parallelism with TP under MoE; token_dispatcher.py's num_local_tokens)."""
    return w.mbs * w.seq / (w.cp * w.tp)


def expert_compute_s(w, gpu) -> float:
    """Forward seconds of one MoE layer's router and routed experts on the slowest EP rank: the
    router (an h x E matmul of its T tokens, 16-bit), and the grouped GEMM of rho*T*k rows over its
    E/ep experts (each 1/etp of the expert width) at `grouped_gemm_efficiency` of the dense rate,
    plus, with `gemm_traffic`, the grouped GEMM's operand bytes (its rows in and out, its E/ep
    experts' weights) and an FP8 run's casts of its inputs. The permutation and the activation
    function are the dense path's (blocks.kind_elementwise_bytes)."""
    a, m, p = w.arch, w.arch.moe, w.params
    h, fe, up = m.routed_width(a.hidden_size), m.expert_ffn_hidden_size / w.etp, 3 if a.gated_mlp else 2
    e = w.recipe.value_bytes
    tokens = routed_tokens(w)
    rows = p.moe_load_imbalance * tokens * m.experts_per_token * w.etp   # gathered over the ETP group
    flops = 2 * rows * h * fe * up
    router = 2 * tokens * a.hidden_size * m.num_experts
    moved = 0.0
    fp8 = w.recipe.low_precision
    if p.gemm_traffic:
        operand = w.recipe.operand_bytes
        weights = m.num_experts / w.ep * h * fe * up
        moved = operand * (rows * h + rows * fe + weights) + e * (rows * fe * (up - 1) + rows * h)
    if fp8:
        moved += rows * (h + fe) * w.recipe.cast_bytes(p)
    # fc1 (up - 1 outputs of fe) and fc2 (h outputs), each of the E/ep experts' rows a group of its own
    local, sms = m.num_experts / w.ep, gpu.streaming_multiprocessors
    waves = (up - 1) / (up * grouped_wave_efficiency(rows / local, fe * (up - 1), local, sms, p.matmul_tile)) \
        + 1 / (up * grouped_wave_efficiency(rows / local, h, local, sms, p.matmul_tile))
    return (flops * waves / (gpu.matmul_flops(w.recipe.precision) * p.grouped_gemm_efficiency)
            + router / gpu.matmul_flops("bf16" if fp8 else w.recipe.precision)
            + moved / (gpu.memory_bytes_per_s * gpu.memory_share(p)))


def moe_s(w, gpu, links: GroupLinks, cover: tuple[float, float] = (0.0, 0.0)) -> tuple[float, float]:
    """(forward, backward) seconds one MoE layer adds per micro-batch, averaged over the layers
    (x moe_layer_share of the model's `layer_kinds`): router and the routed experts' grouped GEMM
    on the slowest rank (rho x the mean tokens; expert_compute_s), the dispatch and combine
    all-to-alls over the EP group and the ETP all-gather / reduce-scatter. Attention, shared
    experts, dense MLPs and the permutation are the dense path's (layers.layer_gemms without
    `routed`). With `ep_overlap` s, Megatron-Core's EP A2A overlap (--overlap-moe-expert-parallel-comm:
    one micro-batch's forward interleaved with another's backward) hides up to s x the other
    pass's compute (`cover`: the rest of the layer's forward and backward seconds)."""
    a, m = w.arch, w.arch.moe
    share = moe_layer_share(a)
    if not share:
        return 0.0, 0.0
    h, k, rho = m.routed_width(a.hidden_size), m.experts_per_token, w.params.moe_load_imbalance
    e = w.recipe.value_bytes
    tokens = routed_tokens(w)
    rows = rho * tokens * k * w.etp
    compute = expert_compute_s(w, gpu)
    sort = dispatch_local_bytes(w.params, rows, tokens * k, tokens, h, e, m.num_experts / w.ep, w.ep * w.etp) \
        / (gpu.memory_bytes_per_s * gpu.memory_share(w.params))
    if not w.params.moe_permute_fusion:
        sort += unfused_permute_bytes(tokens * k, h, e) / (gpu.memory_bytes_per_s * gpu.memory_share(w.params))
    to, back = moe_alltoalls_s(w, links)
    if w.etp > 1 and not w.params.moe_allgather:  # all-gather before fc1, reduce-scatter after fc2 (ETP group)
        etp = (w.etp - 1) * rho * tokens * k * h * e / links.intra_bytes_per_s
        to, back = to + etp, back + etp
    s, paired = w.params.ep_overlap, ep_overlap_paired_share(w)
    if not (s and paired):
        return share * (compute + sort + to + back), share * (2 * compute + sort + to + back)
    slow = 1 + EP_A2A_OVERLAP_SLOWDOWN   # the all-to-all beside the compute runs longer (moe_kernels)
    fwd_x, bwd_x = ep_overlap_exposed(slow * to, slow * back, compute, cover, s, overlap_kept_share(w, gpu))
    # the micro-batch passes the schedule leaves unpaired (warm-up forwards, cool-down backwards) expose all
    fwd_x, bwd_x = paired * fwd_x + (1 - paired) * (to + back), paired * bwd_x + (1 - paired) * (to + back)
    return share * (compute + sort + fwd_x), share * (2 * compute + sort + bwd_x)


def moe_alltoalls_s(w, links: GroupLinks) -> tuple[float, float]:
    """(dispatch, combine) seconds of one MoE layer's all-to-alls for one micro-batch over the EP group on
    `links`: rho x the rank's routed tokens, k copies of h values each (the dispatch's as dispatch_value_bytes
    sends them), shrunk to the copies the routing and the dispatcher send (alltoall_s, dispatch_copies)."""
    m, p = w.arch.moe, w.params
    if p.moe_allgather:   # rings over the ep x etp group, consecutive ranks (ETP innermost), whatever the routing
        n, (dispatch, combine) = w.ep * w.etp, allgather_bytes(routed_tokens(w), m.routed_width(w.arch.hidden_size),
                                                              m.num_experts, w.recipe.value_bytes)
        return tuple((n - 1) * sum(ring_step_s(x, n, 1, links) for x in sizes) if n > 1 else 0.0
                     for sizes in (dispatch, (combine,)))
    h, k, tokens = m.routed_width(w.arch.hidden_size), m.experts_per_token, p.moe_load_imbalance * routed_tokens(w)
    spread = (m.num_experts, p.moe_routing, p.moe_rank_dedup, m.router_groups, m.router_group_topk)
    return tuple(alltoall_s(dispatch_bytes(tokens, k, h, b, w.ep), w.ep, w.etp, links, k, p.moe_node_dedup, spread)
                 for b in (dispatch_value_bytes(w.recipe), w.recipe.value_bytes))


def ep_overlap_exposed(dispatch: float, combine: float, experts: float, cover: tuple[float, float],
                       s: float, share: float = 1.0) -> tuple[float, float]:
    """(forward, backward) exposed all-to-all seconds of one MoE layer under Megatron-Core's EP A2A
    overlap (--overlap-moe-expert-parallel-comm), which pairs one micro-batch's forward F with another's
    backward B in three phases, each on a compute and a communication stream that wait for each other
    at the phase's end (megatron/core/models/common/model_chunk_schedule_plan.py,
    TransformerLayerSchedulePlan.run):
        comm:    B combine-backward | F dispatch -> B dispatch-backward     | F combine
        compute: F attention        | B expert dgrad + wgrad -> F experts   | B attention backward
    A phase exposes max(0, comm - s x compute) (s = `ep_overlap`); the middle one's two all-to-alls
    share the experts' 3x forward seconds (`experts`) and split their exposure between the passes.
    `dispatch`, `combine`: one all-to-all each (the backward's as long as the forward's); `cover`: the
    rest of the layer's forward and backward seconds (attention, shared experts: its attention node);
    `share`: the SMs the compute keeps while a DeepEP / HybridEP kernel runs (exposed_s)."""
    middle = exposed_s(2 * dispatch, s * 3 * experts, share) / 2
    return middle + exposed_s(combine, s * cover[1], share), exposed_s(combine, s * cover[0], share) + middle


def cp_s(w, links: GroupLinks, attention_fwd_s: float, attention_bwd_s: float) -> tuple[float, float]:
    """(forward, backward) exposed seconds of one layer's CP ring: cp - 1 steps forward sending
    |KV_local|, cp - 1 backward sending KV and dKV, each hidden behind that step's share of the
    attention core (TE's p2p ring; 1/cp of the core a step)."""
    if w.cp <= 1:
        return 0.0, 0.0
    kv = ring_kv_bytes(w)
    fwd = (w.cp - 1) * exposed_s(ring_step_s(kv, w.cp, w.tp, links), attention_fwd_s / w.cp)
    bwd = (w.cp - 1) * exposed_s(ring_step_s(2 * kv, w.cp, w.tp, links), attention_bwd_s / w.cp)
    return fwd, bwd
