"""Memory of one GPU of a pipeline stage under the analytic model (docs/estimators.md §A4).

Weights 2, gradients `gradient_reduce_bytes` (4: fp32 main grads) and Adam 12 (fp32 master
weights, m, v) bytes per parameter, divided by dp for what ZeRO shards (1: optimizer, 2: +
gradients, 3: + weights); activations per layer (analytic_layers.activation_bytes) x layers x
the micro-batches in flight at the stage: min(p - i, m) under 1F1B, x (1 + (p - 1)/(p v))
interleaved (Korthikanti et al. 2022 §4.2.3); plus the framework overhead.

With experts, context parallelism and FSDP (fasop/estimators/analytic/parallel.py): the routed
experts are held 1/(ep*etp) per GPU, the rest 1/tp (Megatron-LM theoretical_memory_usage.py); the
sharded states divide over the DP x CP group (HSDP: its shard degree) for dense parameters and
over the expert data-parallel group for experts; activations are those of s/cp tokens; an MoE
layer adds its dispatch buffers (the permuted tokens received and sent back).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from fasop.estimators.analytic import block_recompute as BR
from fasop.estimators.analytic import blocks as B
from fasop.estimators.analytic import context as CX
from fasop.estimators.analytic import layers as L
from fasop.estimators.analytic import moe_kernels as MK
from fasop.estimators.analytic import offload as OF
from fasop.estimators.analytic import parallel as P
from fasop.estimators.analytic.layers import Workload


WEIGHT_BYTES = 2
"""16-bit weights (bf16/fp16; FP8 runs keep bf16 weights and cast per matmul)."""
ADAM_BYTES = 12
"""fp32 master weights + Adam's first and second moments."""
FP32_ADAM_BYTES = 8
"""An fp32 / tf32 run: Adam's two moments; the fp32 weights are the master copy."""


def weight_bytes(w: Workload) -> int:
    """Bytes per weight a GPU holds: 2 (16-bit copy of the fp32 master), 4 in an fp32 / tf32 run."""
    return w.recipe.value_bytes


def optimizer_bytes(w: Workload) -> int:
    """Optimizer state bytes per parameter: fp32 master + m + v (12), or m + v (8) in an fp32 run; with
    bf16 moments (`adam_moment_bytes` 2: Megatron-Core's precision-aware optimizer) 4 + 2 + 2 = 8."""
    moments = 2 * (4 - w.params.adam_moment_bytes)
    return (FP32_ADAM_BYTES if w.recipe.value_bytes == 4 else ADAM_BYTES) - moments


def state_dtypes(p, bf16_grads: bool, bf16_moments: bool):
    """AnalyticParams `p` with 16-bit gradients (kept and reduced in 2 bytes: the step reads them
    twice, gradient norm and Adam, 2 bytes each) and / or bf16 Adam moments (2 bytes each, read and written; Transformer
    Engine's FusedAdam with master weights writes the 16-bit weight itself: no master re-read for the
    copy) -- analytic.yaml's `optimizer_step_bytes` 38 becomes 34, 26, 22. fp32 / tf32 runs keep fp32.
    Megatron-LM: --grad-reduce-in-bf16; --use-precision-aware-optimizer --exp-avg-dtype bf16
    --exp-avg-sq-dtype bf16 (a search's --main-grads / --optimizer-states, a validate row's columns)."""
    if not (bf16_grads or bf16_moments):
        return p
    full = ("fp32", "tf32")
    grads = {k: v if k in full or not bf16_grads else 2 for k, v in p.gradient_reduce_bytes.items()}
    step = {k: v if k in full else v - 2 * (p.gradient_reduce_bytes[k] - grads[k]) - (12 if bf16_moments else 0)
            for k, v in p.optimizer_step_bytes.items()}
    return replace(p, adam_moment_bytes=2 if bf16_moments else p.adam_moment_bytes,
                   gradient_reduce_bytes=grads, optimizer_step_bytes=step)


@dataclass(frozen=True, kw_only=True)
class MemoryParts:
    weights: float
    gradients: float
    optimizer: float
    activations: float
    overhead: float

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer + self.activations + self.overhead

    def misfit(self, limit: float) -> str:
        """'' when it fits; else which part alone exceeds `limit` with the overhead: `weights`
        (weights, gradients, optimizer), `activations`, `both`; `activations` when only their sum does."""
        if self.total <= limit:
            return ""
        states = self.weights + self.gradients + self.optimizer + self.overhead > limit
        acts = self.activations + self.overhead > limit
        return "both" if states and acts else "weights" if states else "activations"


@lru_cache(maxsize=1 << 16)
def stage_params(w: Workload, layers: int, first: bool, last: bool) -> float:
    """Parameters one GPU of a stage holds: its 1/tp share of the dense ones, 1/(ep*etp) of the experts."""
    dense, experts = stage_param_split(w, layers, first, last)
    return dense + experts


@lru_cache(maxsize=1 << 16)
def stage_param_split(w: Workload, layers: int, first: bool, last: bool) -> tuple[float, float]:
    """(dense, routed experts) parameters one GPU of a stage holds. `layers.layer_params` counts a
    whole layer, routed experts included; layers.expert_layer_params is their share."""
    a = w.arch
    routed = L.expert_layer_params(a)
    n = layers * (L.layer_params(a) - routed)
    if first:
        n += L.embedding_params(a)
    if last:
        shared = a.tied_embeddings and first
        n += L.head_params(a) - (a.vocab_size * a.embed_width if shared else 0)
    mtp_dense, mtp_routed = mtp_param_split(w, first) if last else (0.0, 0.0)
    return (n + mtp_dense) / w.tp, (layers * routed + mtp_routed) / (w.ep * w.etp)


def root_params(w: Workload, stage: int) -> float:
    """Parameters of stage `stage`'s FSDP root unit on one GPU: what it holds outside its Transformer
    layers -- the embedding on the first stage, the final norm and output head on the last (not the
    MTP modules: units of their own). PyTorch FSDP wraps each block as a unit and leaves these to the
    root (torchtitan parallelize_llama.py `fully_shard(model)` after the blocks, to 2025-07's #1094;
    fms-fsdp's block auto-wrap policy): gathered first and kept gathered through the backward
    (cost.fsdp_sync_s times it; stage_memory holds it), reduced last."""
    first, last = stage == 0, stage == w.pp - 1
    dense, routed = stage_param_split(w, 0, first, last)
    if last and w.mtp:
        mtp_dense, mtp_routed = mtp_param_split(w, first)
        dense, routed = dense - mtp_dense / w.tp, routed - mtp_routed / (w.ep * w.etp)
    return dense + routed


def mtp_block(w: Workload) -> Workload:
    """The Workload of one multi-token-prediction module's block: its layers (Architecture.mtp_kinds)
    at the plan's degrees and recipe (cost.mtp_s times it, mtp_param_split / stage_memory hold it)."""
    a = w.arch
    return replace(w, mtp=0, arch=replace(a, layer_kinds=a.mtp_kinds, num_layers=len(a.mtp_kinds),
                                          windowed_layers=(), mtp_layers=0, mtp_kinds=()))


def mtp_param_split(w: Workload, first: bool) -> tuple[float, float]:
    """(dense, routed experts) parameters of the last stage's `w.mtp` multi-token-prediction modules,
    all TP / EP ranks together: each has two norms, the 2h -> h projection, its block's layers and
    a final norm (DeepSeek-V3 §2.2; blocks.mtp_module_params); they read the word embedding, so an untied
    model's last stage also holds a copy of it when it is not the first (Megatron-Core
    gpt_model.py:173 builds the embedding where `pre_process or mtp_process`; its gradient is
    all-reduced with the first stage's, finalize_model_grads.py:146)."""
    a = w.arch
    if not (w.mtp and a.mtp_kinds):
        return 0.0, 0.0
    dense, routed = B.mtp_module_params(a)
    embedding = a.vocab_size * a.embed_width if not (first or a.tied_embeddings) else 0
    return w.mtp * dense + embedding, w.mtp * routed


def head_activation_bytes(a: Architecture, b: int, s: int, t: int, per_logit: int = 4) -> float:
    """The last stage's logits for the loss at its peak: `per_logit` bytes each (loss_bytes; Megatron-Core's
    fp32 logits, Korthikanti et al. 2022 §4.1: 4sbV/t)."""
    return per_logit * s * b * a.vocab_size / t


EAGER_LOSS_BYTES = 12
"""Bytes per logit at the loss of a PyTorch FSDP stack running eager: torchtitan computes
`F.cross_entropy(pred.float(), labels)` (components/loss.py `cross_entropy_loss` @b5bcd76; fms-fsdp the same on
`.float()` logits) and drops the 16-bit `pred` before the backward (trainer.py `del pred`); the log-softmax
keeps its fp32 output (4 bytes), and its backward holds it beside the fp32 gradient coming in (nll_loss's,
dense) and the fp32 gradient going out: 12 bytes a logit while every layer's activations are still held.
Megatron-Core's vocab-parallel cross-entropy works in place on one fp32 copy (4); a compiled loss
(torchtitan `compile.components` "loss") is fused by Inductor and is taken as 4 too. NeMo AutoModel's benchmark
recipes differ and a row cannot say so: MaskedCrossEntropy with `fp32_upcast: false` (16-bit logits, about 6
bytes) on a model built in bf16 (`from_config` torch_dtype "auto" -> bfloat16: 8 state bytes a parameter, not 16).
Checked on torchtitan's Llama 3 8B runs of tests/data/fsdp_torchtitan_issues_memory.csv (peak *reserved*
memory): the measured peak less the model's without this term is 11.1-14.2 GiB at MBS 2 on H100 (the term: 15.66),
30.9-32.2 at MBS 4 on H200 (31.31), 33.2-39.7 at MBS 5 on B200 / GB200 (39.14); docs/estimators.md §A4."""


def loss_bytes(w: Workload) -> int:
    """Bytes per logit the last stage holds at the loss (EAGER_LOSS_BYTES for an eager PyTorch FSDP stack)."""
    return EAGER_LOSS_BYTES if torch_fsdp(w) and not w.params.fused_elementwise else 4


def torch_fsdp(w: Workload) -> bool:
    """Whether the run is PyTorch FSDP (FSDP1 / FSDP2): a ZeRO-3 plan that is not Megatron-FSDP."""
    return w.recipe.zero >= 3 and not w.params.megatron_fsdp


def embedding_activation_bytes(a: Architecture, b: int, s: int, t: int, sp: bool) -> float:
    """The first stage's embedding-dropout mask (Korthikanti et al. 2022 §4.1: sbh; /t with SP)."""
    return (s * b * a.hidden_size if a.dropout else 0) / (t if sp else 1)


def mtp_activation_bytes(w: Workload) -> float:
    """What the last stage keeps per micro-batch for its MTP modules' backward: each block's layers'
    activations, the 2h-wide input of the projection and the module's own fp32 logits for its loss."""
    a, b, s, t = w.arch, w.mbs, w.local_seq, w.tp
    if not (w.mtp and a.mtp_kinds):
        return 0.0
    block = BR.activation_bytes(mtp_block(w)) * len(a.mtp_kinds)
    concat = 2 * s * b * a.hidden_size * w.recipe.value_bytes / t
    return w.mtp * (block + concat + head_activation_bytes(a, b, s, t))


def torch_fsdp_master(w: Workload) -> bool:
    """Whether the run is PyTorch FSDP (FSDP1 / FSDP2: a ZeRO-3 plan that is not Megatron-FSDP) in mixed
    precision, whose sharded parameter is the fp32 master copy itself -- the 16-bit weights exist only
    gathered, unit by unit (FSDP2 MixedPrecisionPolicy param_dtype, FSDP1's `_mp_shard`): a GPU keeps
    4 + 4 + 8 = 16 bytes per sharded parameter (fp32 parameter, gradient, Adam's moments), not the
    2 + 4 + 12 of a 16-bit shard beside a master (Megatron-FSDP, the distributed optimizer)."""
    return torch_fsdp(w) and w.recipe.value_bytes < 4


def state_shards(w: Workload) -> tuple[int, int]:
    """(dense, expert) ranks ZeRO / FSDP shard a GPU's states over: the dense ones over the DP x CP
    group (HSDP: its `shard` ranks), the routed experts' over the expert data-parallel group
    (Megatron-Core's distributed optimizer shards each over its own gradient group; under HSDP
    the same share of it)."""
    shard = w.shard or w.dp * w.cp
    edp = P.expert_data_parallel(w.tp, w.cp, w.dp, w.ep, w.etp) if w.arch.moe is not None else w.dp * w.cp
    return shard, max(1, edp * shard // (w.dp * w.cp))


def in_flight(w: Workload, stage: int) -> float:
    """Micro-batches whose activations stage `stage` holds at its peak (1F1B warm-up depth)."""
    k = min(w.pp - stage, w.num_microbatches)
    v = w.recipe.virtual_stages
    return k * (1 + (w.pp - 1) / (w.pp * v)) if v > 1 else k


@lru_cache(maxsize=1 << 16)
def stage_memory(w: Workload, layers: int, stage: int) -> MemoryParts:
    a, r, d = w.arch, w.recipe, w.dp
    first, last = stage == 0, stage == w.pp - 1
    dense, experts = stage_param_split(w, layers, first, last)
    grad_bytes = w.params.gradient_reduce_bytes[r.precision]
    t, b, s = w.tp, w.mbs, w.local_seq
    per_layer, bf16 = BR.activation_bytes(w), BR.bf16_share(w)
    if bf16:   # a low-precision run's 16-bit layers keep unquantized matmul inputs
        per_layer = BR.mix((per_layer,), (BR.activation_bytes(BR.one_precision(w)),), bf16)[0]
    if a.moe is not None and r.recompute != "full":
        # activation_bytes holds the k permuted copies of the mean rank's tokens (blocks.py); the
        # busiest EP rank receives rho x as many: its dispatch buffers' excess over the mean
        per_layer += P.moe_layer_share(a) * P.dispatch_buffer_bytes(
            P.routed_tokens(w), a.moe.experts_per_token, a.moe.routed_width(a.hidden_size), r.value_bytes,
            w.params.moe_load_imbalance - 1)
    acts = OF.kept_layers(w, layers) * per_layer * in_flight(w, stage)   # less what goes to host memory
    if a.moe is not None and w.params.moe_allgather and P.moe_layer_share(a):   # one MoE layer's gathered tokens
        acts += MK.allgather_buffer_bytes(P.routed_tokens(w), a.moe.routed_width(a.hidden_size), r.value_bytes,
                                          w.ep * w.etp)
    if w.cp > 1 and r.cp_comm == "all_gather":   # one layer's backward holds K, V and dK, dV whole (context.py)
        acts += CX.all_gather_buffer_bytes(w)
    if first:
        acts += embedding_activation_bytes(a, b, s, t, r.sequence_parallel) * in_flight(w, stage)
    if last:
        acts += head_activation_bytes(a, b, s, t, loss_bytes(w)) + mtp_activation_bytes(w)
    dense_shard, expert_shard = state_shards(w)
    master = torch_fsdp_master(w)   # PyTorch FSDP: the fp32 master shard is the parameter, no 16-bit shard beside it
    states = P.state_bytes(dense=dense, experts=experts, zero=r.zero, dense_shard=dense_shard,
                           expert_shard=expert_shard, weight_bytes=0 if master else weight_bytes(w),
                           grad_bytes=grad_bytes, adam_bytes=optimizer_bytes(w))
    weights = states.weights
    if r.zero >= 3:   # FSDP: the gathered units beside the shards (one layer = one unit), and the root kept
        unit = sum(stage_param_split(w, 1, False, False))
        weights += P.fsdp_unsharded_bytes(unit, r.value_bytes, grad_bytes)
        weights += root_params(w, stage) * r.value_bytes * (1 if master else 1 - 1 / dense_shard)
    return MemoryParts(weights=weights, gradients=states.gradients, optimizer=states.optimizer,
                       activations=acts, overhead=w.params.framework_overhead_bytes)


@lru_cache(maxsize=1 << 16)
def max_layers(w: Workload, stage: int, limit: float, most: int) -> int:
    """Most layers stage `stage` can hold within `limit` bytes (memory is linear in layers)."""
    base = stage_memory(w, 0, stage).total
    one = stage_memory(w, 1, stage).total - base
    if base + one > limit:
        return 0
    return min(most, int((limit - base) / one))
