"""Which context-, expert- and expert-tensor-parallel degrees a search tries (docs/search.md,
"Context and expert parallelism"; the group rules in docs/parallelism.md).

Defaults cover the dimensions where the model calls for them and add nothing where it does not,
so a dense model at its usual context searches exactly the plans it always did:

- cp: 1, and for a sequence of at least LONG_SEQUENCE tokens the powers of two that leave each
  rank at least MIN_CP_TOKENS of it (Megatron-LM's MoE guide: CP "when sequence length >= 8K";
  each of a rank's 2*cp chunks must stay large enough to keep its attention GEMMs efficient);
  every cp must split the sequence into 2*cp equal chunks (Megatron-LM arguments.py:
  seq_length % (2*cp) == 0, the causal load balancing of docs/parallelism.md).
- ep: every divisor of the routed experts of an MoE model (Megatron-Core moe_layer.py: the
  experts divide evenly over the EP group), 1 for a dense one.
- etp: 1 (Megatron-LM's MoE guide recommends ETP 1 for fine-grained MoE; torchtitan has no ETP
  since #3167): other degrees only when asked for.
- (tp, cp) pairs of an MoE model whose rank's share of the sequence (seq / cp tokens) tp does not split: its
  MoE layer needs sequence parallelism at tp > 1 (moe_layer.py), which scatters those tokens over the tp ranks
  (tensor_parallel/mappings.py: "First dimension of the tensor should be divisible by tensor parallel size";
  a dense model's plan then runs without SP: estimators/analytic/recipes.py).
- (tp, cp) pairs none of the allowed CP exchanges (--cp-comm: the ring, Ulysses' all-to-alls, the
  all-gather) can run for the model's attention are not enumerated (specs/architecture.py `cp_comm_problem`:
  Transformer Engine's rules -- sliding windows refuse the ring, attention sinks the ring and the all-gather,
  a2a needs heads / tp divisible by cp).

A degree the user names that the model cannot take is refused with one line naming the flag.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from fasop.core.errors import FasopError
from fasop.specs.architecture import Architecture
from fasop.specs.types import ModelSpec

LONG_SEQUENCE = 16384
"""Sequences from this many tokens get context-parallel degrees by default."""
MIN_CP_TOKENS = 4096
"""Default cp degrees leave each rank at least this many tokens of a sequence."""


@dataclass(frozen=True)
class DegreeSpace:
    """The cp degrees and (ep, etp) pairs a search tries on every (tp, dp, pp)."""
    cp: tuple[int, ...] = (1,)
    experts: tuple[tuple[int, int], ...] = ((1, 1),)
    """(ep, etp) pairs, ep outer."""
    exchanges: CpExchanges | None = None
    """The CP exchanges allowed for the model (None: any (tp, cp) runs)."""
    moe_sequence: int = 0
    """An MoE model's sequence length (its tp > 1 needs sequence parallelism, tp dividing seq / cp); 0: dense."""

    @property
    def dense(self) -> bool:
        """Only cp = ep = etp = 1: FASOP's plans, nothing added."""
        return self.cp == (1,) and self.experts == ((1, 1),)

    def runs(self, tp: int, cp: int) -> bool:
        """Whether some allowed CP exchange runs the model at tp x cp, and an MoE model's sequence parallelism
        splits a rank's seq / cp tokens over tp."""
        if self.moe_sequence and not sp_splits(self.moe_sequence, tp, cp):
            return False
        return cp == 1 or self.exchanges is None or self.exchanges.runs(tp, cp)


def sp_splits(seq: int, tp: int, cp: int = 1) -> bool:
    """Whether sequence parallelism can scatter a CP rank's seq / cp tokens over tp ranks (Megatron-Core
    tensor_parallel/mappings.py `_split_along_first_dim`: divisible by the tensor-parallel size)."""
    return tp == 1 or not (seq // cp) % tp


@dataclass(frozen=True)
class CpExchanges:
    """A model's attention and the CP exchanges a search allows (--cp-comm; CP_COMMS by default)."""
    arch: Architecture
    comms: tuple[str, ...]

    def runs(self, tp: int, cp: int) -> bool:
        return any(not self.arch.cp_comm_problem(tp, cp, c) for c in self.comms)


DENSE = DegreeSpace()


def num_experts(model: ModelSpec) -> int:
    """The routed experts of the model's MoE layers; 0 for a dense model."""
    arch = model.architecture
    return arch.moe.num_experts if arch is not None and arch.moe is not None else 0


def default_cp(sequence_length: int) -> tuple[int, ...]:
    """1, and for a long sequence the powers of two with >= MIN_CP_TOKENS tokens a rank."""
    if sequence_length < LONG_SEQUENCE:
        return (1,)
    out, c = [1], 2
    while sequence_length // c >= MIN_CP_TOKENS and not sequence_length % (2 * c):
        out.append(c)
        c *= 2
    return tuple(out)


def degree_space(model: ModelSpec, *, cp: tuple[int, ...] | None = None, ep: tuple[int, ...] | None = None,
                 etp: tuple[int, ...] | None = None) -> DegreeSpace:
    """The degrees a search of `model` tries: the flags' values where given (checked), else the
    defaults of the module doc."""
    seq, experts = model.sequence_length, num_experts(model)
    if model.architecture is None and any(v is not None and set(v) != {1} for v in (cp, ep, etp)):
        flag = "--cp" if cp else "--ep" if ep else "--etp"
        raise FasopError(f"{flag}: model {model.name} has no architecture to split (a profiled FASOP spec); "
                         "only 1 is possible")
    cps = tuple(sorted(set(cp))) if cp else default_cp(seq)
    for c in cps:
        if c > 1 and seq % (2 * c):
            raise FasopError(f"--cp: {c} does not split {model.name}'s sequence of {seq} tokens into 2 x {c} "
                             f"equal chunks (Megatron-Core needs sequence_length % (2*cp) == 0)")
    if not experts:
        for flag, values in (("--ep", ep), ("--etp", etp)):
            if values and set(values) != {1}:
                raise FasopError(f"{flag}: {model.name} has no experts (a dense model); only 1 is possible")
        return DegreeSpace(cp=cps)
    eps = tuple(sorted(set(ep))) if ep else tuple(divisors(experts))
    bad = [e for e in eps if experts % e]
    if bad:
        raise FasopError(f"--ep: {bad[0]} does not divide {model.name}'s {experts} routed experts")
    etps = tuple(sorted(set(etp))) if etp else (1,)
    return DegreeSpace(cp=cps, experts=tuple((e, t) for e in eps for t in etps), moe_sequence=seq)


def divisors(n: int) -> list[int]:
    """The divisors of n, ascending, found up to its square root (an expert count may be 2^26)."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return small + [n // d for d in reversed(small) if d * d != n]


DEGREE_KEYS = ("cp", "ep", "etp")
"""The search options (beside the estimator's recipes) that name degrees: `--cp`, `--ep`, `--etp`."""


def split_options(model: ModelSpec, options: dict | None) -> tuple[DegreeSpace, dict]:
    """(the degree space, the other options: the estimator's) of a search's options."""
    options = dict(options or {})
    given = {k: options.pop(k) for k in DEGREE_KEYS if k in options}
    space = degree_space(model, **given)
    if model.architecture is None or max(space.cp) == 1:
        return space, options
    exchanges = CpExchanges(model.architecture, allowed_comms(model, options.get("cp_comm")))
    never = [c for c in space.cp if "cp" in given and not exchanges.runs(1, c)]   # tp only makes heads fewer
    if never:
        why = "; ".join(model.architecture.cp_comm_problem(1, never[0], c) for c in exchanges.comms)
        raise FasopError(f"--cp: {never[0]}: no CP exchange allowed runs {model.name} at cp {never[0]}, whatever the "
                         f"tp ({why})")
    return replace(space, exchanges=exchanges), options


CP_COMMS = ("p2p", "a2a", "all_gather")
"""Context parallelism's exchanges fasop plans, in the order a run that names none is read (context.default_comm):
Megatron-Core's --cp-comm-type p2p (ring), a2a (Ulysses) and all_gather (K and V gathered whole, Llama 3's; TE's
spelling, which Megatron-Core passes through)."""


def allowed_comms(model: ModelSpec, given: tuple[str, ...] | None) -> tuple[str, ...]:
    """The CP exchanges a search tries (--cp-comm, else all), refused in one line where the model can run none
    of them at any degree (the ring and the all-gather refuse by the attention's kind, not its heads)."""
    comms = tuple(given or CP_COMMS)
    problem = model.architecture.cp_comm_problem
    why = [problem(1, 2, c) for c in comms if c != "a2a"]
    if "a2a" not in comms and all(why):
        others = ",".join(c for c in CP_COMMS if c not in comms and (c == "a2a" or not problem(1, 2, c)))
        raise FasopError(f"--cp-comm {','.join(comms)}: {'; '.join(why)} ({model.name}); use --cp-comm {others}")
    return comms
