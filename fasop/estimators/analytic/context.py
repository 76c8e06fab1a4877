"""Context parallelism's exchanges beyond the ring (parallel.cp_s): the all-to-all (Ulysses) and the all-gather ones'
costs, and the exchange a run that states none used. Which one TE runs for a model is Architecture.cp_comm_problem,
which the search's enumeration applies too.

Megatron-Core hands CP to Transformer Engine's `attn_forward_func_with_cp` (`--cp-comm-type`,
NVIDIA/TransformerEngine @d0067d0 `transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py`):

- `p2p` (the default): the ring of K / V chunks, each step overlapped with a step of attention
  (parallel.cp_s). TE refuses it for sliding-window attention ("Context parallelism does not support
  sliding window attention with cp_comm_type='p2p'": a2a and all_gather only) and for any softmax but
  the vanilla one ("only supports softmax_type='learnable' with cp_comm_type = 'a2a'": GPT-OSS's sinks).
- `a2a` (DeepSpeed-Ulysses, arXiv 2309.14509): each rank holds s/cp tokens of all its heads; before the
  attention core one all-to-all each of Q, K and V leaves it all s tokens of heads/cp heads, after it
  one of the context brings the rank's own tokens back (`AttnFuncWithCPAndQKVOA2A.forward`:
  `flash_attn_a2a_communicate` of ["q", "k", "v"], then of ["out"]); the backward runs the mirror
  image, dout before and dq, dk, dv after (`.backward`). The core waits for them: nothing hides them.
  TE asks that the heads of Q and of K / V on a rank both divide by cp ("cp_comm_type='a2a' requires
  num_heads % cp_size == 0 for Q, K, V"), per TP rank (heads / tp).
- `all_gather` (Llama 3 §3.3.2; `AttnFuncWithCPAndKVAllGather`, "KV all-gather between CP ranks is exposed"):
  K and V all-gathered whole before the core (`gather_along_first_dim` of k, of v), gathered again in the backward,
  and dK, dV reduce-scattered back (`reduce_scatter_along_first_dim`, 16-bit): each a ring of cp - 1 steps of a
  rank's |K_local| or |V_local| over the CP group's links, none hidden. Sliding windows run, sinks do not. It sends
  the ring's bytes in two collectives instead of one, with nothing hidden: never faster than the ring, so a search
  tries it only where the ring is refused (recipes.recipe_grid).

Per layer and micro-batch a rank sends (cp - 1)/cp of each tensor: b (s/cp) width / tp values of
Q (heads x d_qk), K (kv heads x d_qk), V (kv heads x d_v) and the context (heads x d_v); MLA's up-projected
keys are per head (d_qk = d_nope + d_rope), as Megatron-Core passes them to the core. Four all-to-alls
forward, four backward, each over the CP group's links (parallel.alltoall_s: ranks tp apart, NVLink
inside a node or NVLink domain, else the node's NIC shared by its GPUs) with one latency each. Attention's
FLOPs are 1/cp of the full sequence's as with the balanced ring; activations are those of s/cp tokens
either way. The reordering copies of the received chunks are not counted.
"""

from __future__ import annotations

from fasop.estimators.analytic import parallel as P
from fasop.plans.space import CP_COMMS
from fasop.specs.architecture import Architecture


def a2a_sent_bytes(a: Architecture, b: int, s: int, cp: int, t: int, elem_bytes: float) -> tuple[float, ...]:
    """Bytes one rank sends in each forward all-to-all (Q, K, V, the context): (cp - 1)/cp of its
    b x (s/cp) x width/t values; the backward sends as much (dout, then dq, dk, dv)."""
    return tuple(b * (s / cp) * width / t * elem_bytes * (cp - 1) / cp for width in a.attention_widths)


def default_comm(a: Architecture, tp: int, cp: int) -> str:
    """The exchange a measured run that states none used: Megatron-Core's default p2p, else a2a, else all_gather --
    the first TE @d0067d0 runs for the model at tp x cp; the ring where none does (the run happened: an older TE,
    or another attention backend, ran it -- scored as Megatron-Core's default rather than refused)."""
    return next((c for c in CP_COMMS if not a.cp_comm_problem(tp, cp, c)), "p2p")


def a2a_s(w, links: P.GroupLinks) -> tuple[float, float]:
    """(forward, backward) seconds of one layer's Ulysses all-to-alls (module doc), none hidden."""
    sent = a2a_sent_bytes(w.arch, w.mbs, w.seq, w.cp, w.tp, w.recipe.value_bytes)
    each = sum(P.alltoall_s(x, w.cp, w.tp, links) for x in sent)
    return each, each


def all_gather_s(w, links: P.GroupLinks) -> tuple[float, float]:
    """(forward, backward) seconds of one layer's all-gather exchange (module doc), none hidden: the forward's two
    all-gathers (K, V), the backward's two again and the two reduce-scatters of dK, dV."""
    k, v = w.arch.attention_widths[1:3]
    local = [w.mbs * (w.seq / w.cp) * width / w.tp * w.recipe.value_bytes for width in (k, v)]
    fwd = sum((w.cp - 1) * P.ring_step_s(x, w.cp, w.tp, links) for x in local)
    return fwd, 2 * fwd


def all_gather_buffer_bytes(w) -> float:
    """What one layer's backward under the all-gather exchange holds beside the stored activations: K and V
    gathered whole again and the full-length dK, dV before their reduce-scatter, 2 b s (k + v)/tp values
    (TE `AttnFuncWithCPAndKVAllGather.backward`: k_ag, v_ag, dk, dv at cp x the local length)."""
    k, v = w.arch.attention_widths[1:3]
    return 2 * w.mbs * w.seq * (k + v) / w.tp * w.recipe.value_bytes


def cp_s(w, links: P.GroupLinks, attention_fwd_s: float, attention_bwd_s: float) -> tuple[float, float]:
    """(forward, backward) exposed seconds of one layer's CP exchange: the recipe's a2a, all_gather or p2p ring."""
    if w.cp > 1 and w.recipe.cp_comm == "a2a":
        return a2a_s(w, links)
    if w.cp > 1 and w.recipe.cp_comm == "all_gather":
        return all_gather_s(w, links)
    return P.cp_s(w, links, attention_fwd_s, attention_bwd_s)
