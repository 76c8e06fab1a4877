"""The MoE layer's kernels and schedule shares beside the all-to-all (parallel.moe_s uses them): the
grouped GEMM's tile and wave quantization per local expert, the permutation bytes of Megatron-Core's
alltoall dispatcher and of its unfused path, and under EP overlap the share of the compute kept beside
the all-to-all and the share of micro-batch passes the schedule pairs; and the copies of a routed token
a dispatch sends inside its NVLink domain and across the network, by routing and dispatcher
(dispatch_copies).

Sources: docs/estimators.md §A1.1 (Megatron-LM @d98e8a6 moe_utils.py, token_dispatcher.py,
pipeline_parallel/combined_1f1b.py and schedules.py; Megatron-Bridge @067f987 perf recipes; NVIDIA's
"Matrix Multiplication Background User's Guide"; Lee et al. 2025, arXiv 2507.03114).
"""

from __future__ import annotations

import math
from functools import lru_cache

EP_A2A_OVERLAP_SLOWDOWN = 0.31
"""How much longer the EP all-to-all kernels run when Megatron-Core's EP overlap puts them beside the
other micro-batch's compute (they share SMs, HBM and L2 with it; the mirror of `overlap_slowdown`,
which slows the compute). Measured in Megatron-Bridge's HybridEP A/B (Qwen3-30B-A3B, 16 H100, EP16;
skills/nemo-mbridge-perf-expert-parallel-overlap/SKILL.md @067f987, Nsight Systems on rank 0, the
same 463,348 kernels each case): communication concurrent with GEMM and attention 9.079 ms = 0.11 %
of the communication time with the overlap off, 3,958.997 ms = 36.55 % with it on -- 8.25 s of
communication kernels against 10.83 s: 10.83 / 8.25 - 1 = 0.31 (0.25-0.37 as 0.11 % is rounded).
One profile of one backend; kernel time includes waits on peers. docs/estimators.md §A1.1."""


def grouped_wave_efficiency(m: float, n: float, groups: float, sms: int, tile: tuple[int, int]) -> float:
    """Share of the GPU's tile slots a grouped GEMM of `groups` m x n outputs keeps busy (one group a
    local expert, m its rows): each group is tiled on its own -- its last row of tiles partly empty
    when m is not a multiple of the tile (a local expert's rows/(E/ep), small at large E or small
    batches) -- and all groups' tiles run in whole waves over the SMs (CUTLASS grouped GEMM, one
    persistent launch over every problem's tiles; NVIDIA "Matrix Multiplication Background User's
    Guide": tile and wave quantization). The better tile orientation; 1 without an SM count or tile."""
    if not sms or tile == (1, 1) or m <= 0:
        return 1.0
    best = 0.0
    for r, c in (tile, tile[::-1]):
        tiles = groups * math.ceil(m / r) * math.ceil(n / c)
        best = max(best, groups * m * n / (math.ceil(tiles / sms) * sms * r * c))
    return best


def local_sort_bytes(rows: float, h: int, elem_bytes: float, local_experts: float) -> float:
    """Bytes of the receiving rank's second permutation, per pass: Megatron-Core's alltoall dispatcher
    sorts the rows it received by local expert after the dispatch all-to-all ("Permutation 2",
    `sort_chunks_by_idxs`) and restores their rank order before the combine ("Unpermutation 2";
    token_dispatcher.py, both only when num_local_experts > 1). Each reads and writes the rows:
    2 x 2 x rows*h*B; the backward sorts the gradients once more each way. Charged for the plain
    alltoall dispatcher only: the flex dispatchers differ (DeepEP permutes its received tokens after
    the dispatch, HybridEP fuses the permutation into its dispatch kernel) and a row that says `flex`
    does not say which."""
    return 4 * rows * h * elem_bytes if local_experts > 1 else 0.0


def dispatch_local_bytes(params, rows: float, copies: float, tokens: float, h: int, elem_bytes: float,
                         local_experts: float, group: int) -> float:
    """Bytes per pass a rank's dispatcher moves beside the dense path's permutation of its T tokens' `copies`
    (T x k), by dispatcher: none under a flex one (moe_node_dedup); the alltoall's sort by local expert
    (local_sort_bytes); under the allgather dispatcher (moe_allgather; Megatron-Core
    MoEAllGatherTokenDispatcher, token_dispatcher.py @d98e8a6, and Transformer Engine's permutation kernels,
    one program a token of their input) the permutation reads every one of the `group` = ep x etp ranks'
    tokens and the unpermutation writes an output row for each (`restore_shape` the gathered shape, rows of
    no local expert zero), the backward the same the other way: 2 (group - 1) T h B more than the dense
    path's T; and the `rows` the rank's experts take (rho x etp x T x k) are written and read where the
    dense path counts T x k: 2 (rows - copies) h B."""
    if params.moe_node_dedup:
        return 0.0
    if params.moe_allgather:
        return 2 * ((group - 1) * tokens + max(0.0, rows - copies)) * h * elem_bytes if group > 1 else 0.0
    return local_sort_bytes(rows, h, elem_bytes, local_experts)


def allgather_bytes(tokens: float, h: int, experts: int, elem_bytes: float) -> tuple[tuple[float, ...], float]:
    """(the dispatch's collectives, the combine's) bytes each rank adds to Megatron-Core's allgather dispatcher
    over its ep x etp group (MoEAllGatherTokenDispatcher.token_dispatch / token_combine @d98e8a6): the
    dispatch all-gathers every rank's T tokens (T x h), routing probabilities (T x E, the router's dtype:
    the activations', Megatron-Core's default `moe_router_dtype`) and routing map (T x E bools), three
    collectives; the combine reduce-scatters the unpermuted T x h outputs of the whole group. Independent of
    top-k and of the routing (moe/README.md: "Best For: TP-only setups, small EP, large Top-K"). The backward
    runs the other collective of each (the routing map, gathered without gradient, not: its T x E bytes and
    latencies counted there too)."""
    return (tokens * h * elem_bytes, tokens * experts * elem_bytes, tokens * experts), tokens * h * elem_bytes


def allgather_buffer_bytes(tokens: float, h: int, elem_bytes: float, group: int) -> float:
    """Bytes of one MoE layer's gathered tokens (the global buffer the all-gather fills, group x T x h)
    and of its unpermuted output before the reduce-scatter (as many), held once a stage beside the
    stored activations, as CP's all-gather buffers are; none in a group of one (no gather: the alltoall's)."""
    return 2 * group * tokens * h * elem_bytes if group > 1 else 0.0


def unfused_permute_bytes(rows: float, h: int, elem_bytes: float) -> float:
    """Bytes a rank's first permutation and its unpermutation move per pass beyond the fused kernels the
    dense path charges, when `moe_permute_fusion` is false (Megatron-Core moe_utils.py `permute` /
    `unpermute`, unfused path; `rows` = N = T·k copies of the T local tokens):
    forward: `tokens.index_select(0, sorted_indices)` reads the N copies, not T tokens (N - T); the
    unpermutation multiplies the N rows by their probabilities (read + write, 2N) and scatter-adds them
    into a zero-filled T x h output (T written first): 3N·h·B in all;
    backward: the scatter-add's gradient gathers N rows (read + write) and the product's gradient
    reads and writes them again and reads the tokens for the probabilities' gradient (6N against the
    fused kernel's 2N + T), the index_select's gradient zero-fills its T x h input: 4N·h·B.
    Averaged over the two passes (moe_s adds it to each): 3.5N·h·B. Atomics, the argsort over the
    T x E routing map and the extra kernels' launches are not counted."""
    return 3.5 * rows * h * elem_bytes


def overlap_kept_share(w, gpu) -> float:
    """Share of its rate the compute keeps beside an EP all-to-all under EP overlap: a DeepEP / HybridEP
    kernel holds `moe_comm_sms` of the GPU's SMs for its whole run, the compute gets the rest; NCCL's
    `alltoall` kernels contend as any NCCL collective does, 1 / (1 + overlap_slowdown) (Lee et al. 2025,
    as data_parallel.overlap_share charges a DP bucket's reduction)."""
    sms = gpu.streaming_multiprocessors
    if w.params.moe_node_dedup:
        return 1.0 - w.params.moe_comm_sms / sms if sms else 1.0
    return 1.0 / (1.0 + w.params.overlap_slowdown)


def ep_overlap_refusal(*, pp: int, virtual_stages: int, recompute: str, recompute_modules: tuple[str, ...], mtp: int,
                       precision: str, graphed: tuple[str, ...], zero: int, hybrid: bool) -> str:
    """Why Megatron-Core refuses its EP A2A overlap (--overlap-moe-expert-parallel-comm) for a plan; '' where it
    runs it. Megatron-LM @d98e8a6: transformer_config.py asserts a virtual pipeline when pp > 1, no full
    recompute, no `moe` among the recomputed modules, at most one MTP depth, a bf16 / fp16 model, no
    Transformer Engine graph of the `moe` / `mlp` scope; mcore_fsdp_adapter.py no per-layer CUDA graph under
    Megatron-FSDP (ZeRO 2 / 3 in a Megatron export); and the schedule asks the model for
    `build_schedule_plan`, which only GPTModel has (combined_1f1b.py; a hybrid Mamba model has none)."""
    per_layer = [g for g in graphed if g not in ("none", "full_iteration")]
    for refused, why in ((pp > 1 and virtual_stages == 1, "a pipeline without virtual stages"),
                         (recompute == "full", "full recompute"), ("moe" in recompute_modules, "moe recompute"),
                         (mtp > 1, f"{mtp} MTP depths (at most 1)"),
                         (precision in ("fp32", "tf32"), f"a {precision} model (bf16 or fp16 only)"),
                         (bool({"moe", "mlp"} & set(graphed)), "CUDA graphs of the moe or mlp scope"),
                         (zero >= 2 and bool(per_layer), "Megatron-FSDP and per-layer CUDA graphs"),
                         (hybrid, "a hybrid Mamba model (no overlap schedule plan: combined_1f1b.py)")):
        if refused:
            return why
    return ""


def workload_ep_overlap_refusal(w) -> str:
    """ep_overlap_refusal for a Workload's plan, which also needs expert parallelism (transformer_config.py)."""
    if w.ep == 1:
        return "ep 1 (it needs expert parallelism)"
    r = w.recipe
    return ep_overlap_refusal(pp=w.pp, virtual_stages=r.virtual_stages, recompute=r.recompute,
                              recompute_modules=r.recompute_modules, mtp=w.mtp, precision=r.precision,
                              graphed=w.params.host.graphed, zero=r.zero, hybrid=w.arch.hybrid)


def ep_overlap_paired_share(w) -> float:
    """Share of a rank's micro-batch passes that Megatron-Core's EP A2A overlap pairs (a forward with
    another micro-batch's backward); the others run alone and expose their all-to-alls in full.
    megatron/core/pipeline_parallel/combined_1f1b.py, schedules.py (Megatron-LM @d98e8a6):
    - pp 1 (`combined_1f1b_schedule_for_no_pipelining`): the first micro-batch's forward and the last
      one's backward run alone, (m - 1)/m of the passes paired;
    - interleaved (pp > 1, v chunks): the warm-up forwards, (p - r - 1)·2 + (v - 1)·p + 1 on rank r
      (`get_pp_rank_microbatches`: one more than without the overlap "to ensure the forward and
      backward computations are independent"), and as many cool-down backwards run alone: of m·v
      chunk passes, 1 - W/(m·v), W the mean over the ranks, (p - 1) + (v - 1)·p + 1;
    - where Megatron-Core refuses the overlap (ep_overlap_refusal), 0."""
    m, p, v = w.num_microbatches, w.pp, w.recipe.virtual_stages
    if workload_ep_overlap_refusal(w):
        return 0.0
    if p == 1:
        return (m - 1) / m
    return max(0.0, 1.0 - ((p - 1) + (v - 1) * p + 1) / (m * v))


ROUTINGS = ("uniform", "round_robin")
"""How a run's router spreads tokens over the experts: `uniform` (learned or forced-balanced routing, each
token's k experts as good as random: Megatron-Core's --moe-router-force-load-balancing, fasop's default), or
`round_robin` (token t takes experts t*k ... t*k + k - 1 mod E: torchtitan's `debug.moe_force_load_balance`,
models/common/moe.py `_debug_force_load_balance_routing` @b5bcd76, and NeMo AutoModel's `fake_balanced_gate`,
components/moe/layers.py `FakeBalancedGate` -- a token's experts are neighbours, on as few ranks as k allows)."""


@lru_cache(maxsize=1024)
def dispatch_copies(k: int, experts: int, ep: int, n_in: int, routing: str, node_dedup: bool,
                    rank_dedup: bool, groups: int = 1, group_topk: int = 1) -> tuple[float, float]:
    """(inside, outside): copies of one routed token a rank sends, on the mean, to the other ranks of its
    NVLink domain (n_in of the ep ranks a domain, n = ep/n_in domains, E/ep experts a rank) and across the
    network. Per expert (Megatron's `alltoall`): k(n_in - 1)/ep and k(ep - n_in)/ep under either routing.
    `node_dedup` (DeepEP, HybridEP): once per remote domain holding any of the token's experts, which
    NVLink then forwards (DeepSeek-V3 report §3.2.2; Megatron `--moe-token-dispatcher-type flex`);
    `rank_dedup` (DeepEP, whose layout marks each (token, rank) pair once, `is_token_in_rank`, and which
    permutes to experts on the receiving rank): once per rank of its domain holding any. Uniform: a rank
    holds one of a token's k experts with probability 1 - (1 - 1/ep)^k, a domain 1 - (1 - n_in/ep)^k
    (k experts drawn with replacement); round_robin: the mean ranks and domains each token's k neighbouring experts span
    (_mean_span; every rank's tokens take the same experts, so the sender's own domain is any of the n
    alike). Round robin over domains that do not divide the EP group is taken as uniform. Uniform routing
    limited to `group_topk` of `groups` expert groups (DeepSeek-V3's node-limited routing; Megatron-Core
    applies it to the forced-balanced random logits too): _touched; round robin ignores the groups (the
    benchmark gates pick the neighbours whatever the groups); across domains that do not divide the EP
    group, as without groups."""
    inside, outside = k * (n_in - 1) / ep, k * (ep - n_in) / ep
    n = ep / n_in
    if routing == "round_robin" and experts and experts % ep == 0 and ep % n_in == 0:
        g, local = math.gcd(k, experts), experts // ep
        ranks, domains = _mean_span(k, g, local, ep), _mean_span(k, g, local * n_in, ep // n_in)
        return (ranks * (n_in - 1) / ep if rank_dedup else inside,
                domains * (n - 1) / n if node_dedup else outside)
    domain = _touched(k, experts, groups, group_topk, ep // n_in) if ep % n_in == 0 else 1 - (1 - n_in / ep) ** k
    return ((n_in - 1) * _touched(k, experts, groups, group_topk, ep) if rank_dedup else inside,
            (n - 1) * domain if node_dedup else outside)


def _touched(k: int, experts: int, groups: int, top: int, units: int) -> float:
    """Mean over `units` equal blocks of contiguous experts (ranks, or domains) of the probability that a
    token's k experts include one of the block's. Without groups, k experts at random (with replacement,
    as dispatch_copies draws them): 1 - (1 - 1/units)^k. With groups, Megatron-Core's group_limited_topk: a group
    scores the sum of its top k/top experts and the token takes the `top` best groups, then its k best
    experts among theirs, so under random logits each chosen group is a random `top` of `groups` and
    holds k/top of the k (floor or ceil), distinct and at random among its S = E/groups. A block holding
    K = groups/units whole groups is touched when one of them is chosen: 1 - C(groups - K, top) /
    C(groups, top). A block of B = E/units experts inside a group: top/groups x (1 - C(S - B, m) / C(S, m)),
    m its group's share of the k. Blocks that split groups unevenly: taken as without groups."""
    top = min(top, k)   # fewer experts than groups: each takes its own group
    if groups <= 1 or top >= groups or not experts or experts % groups or experts % units \
            or (groups % units and units % groups):
        return 1 - (1 - 1 / units) ** k
    if groups % units == 0:
        return 1 - _comb_ratio(groups - groups // units, groups, top)
    size, block = experts // groups, experts // units
    q, r = divmod(k, top)
    # `r` of the chosen groups hold q + 1 of the token's experts, the others q (capped at the group's size)
    miss = ((top - r) * _comb_ratio(size - block, size, min(q, size))
            + r * _comb_ratio(size - block, size, min(q + 1, size))) / top
    return top / groups * (1 - miss)


def _comb_ratio(fewer: int, n: int, r: int) -> float:
    """C(fewer, r) / C(n, r): the chance that r distinct picks of n all avoid n - fewer of them."""
    if r > fewer:
        return 0.0
    return math.exp(math.lgamma(fewer + 1) - math.lgamma(fewer - r + 1) - math.lgamma(n + 1) + math.lgamma(n - r + 1))


def _mean_span(k: int, g: int, unit: int, units: int) -> float:
    """Mean count of the `units` blocks of `unit` consecutive experts that k neighbouring experts span when
    their first is t*k mod E over t: the starts are the multiples of g = gcd(k, E), each once a period, so
    within a block they are the multiples of c = gcd(g, unit). With k - 1 = q*unit + r, a run spans q + 1
    blocks, one more where it starts at or past unit - r; all `units` once q + 1 reaches them."""
    q, r = divmod(k - 1, unit)
    if q + 1 >= units:
        return float(units)
    c = math.gcd(g, unit)
    steps = unit // c
    return q + 1 + (steps - -(-(unit - r) // c)) / steps
