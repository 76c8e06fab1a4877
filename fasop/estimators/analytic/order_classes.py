"""Node orders that tie by construction: one exact bound for a whole class of orders, for the
order tree's cut of exact ties (search/orders.py; docs/partitions.md "Exact ties").

With one node per pipeline stage an order is its stages' node kinds. Its *class* given a prefix is
every order of the inventory that begins with the prefix's kinds and ends with a given kind. The
analytic estimate of an order is cost.step on cost.split_layers' split of it, and an interior
stage's place enters it only through

1. its hardware: its link to the next stage (NVLink domains larger than a node are positional);
2. its memory cap: 1F1B keeps more micro-batches in flight on the earlier stages;
3. split_layers' ties, broken by stage index;
4. the stage ends: the step waits for the latest stage end plus that stage's exposed DP sync.

`class_info` scores each recipe the estimator may pick (`workloads`) once per (first kind, last
kind) on the *canonical* order (the first kind, the interior kinds in kind order, the last kind),
where (1) each interior kind's stage hardware is the same at every interior position whatever kind
follows it, stage 0's whatever kind follows it, and every stage's link to the next is the same link.
A recipe is *uniform* where the first and last stages hold and fit what split_layers gives them
uncapped, (3) no two interior stages of different hardware ever compare equal in split_layers (no
value e + k x tau of one equals one of another, 2 <= k <= the most layers a stage can take, plus
one), and (4) every interior stage's exposed DP sync is under half of stage 0's backward drain (its
backward and its send, / v): no interior stage ends the step, which waits for stage 0 or the last
stage, and cost.step sums the stages before the last with math.fsum (same bits in any order).

`class_bound` certifies a class given its prefix: a uniform recipe is certified where (2) no cap
binds -- every interior position the class can put a kind at (the prefix's own, and the positions
after it for the kinds left) holds the layers split_layers starts and ends that kind with -- so each
order of the class gets the canonical counts per kind and the same step bits under it; the bound t
is the least step of the certified recipes, valid when every other recipe's pipeline floor
(slots.pipeline_floor: the same for every order of the class) is above t. Every order of the class
is then estimated at exactly t or does not fit -- or, where an interior stage's memory sits on the
boundary that max_layers and stage_memory round differently, above t: the cut needs only that no
order of the class is estimated below t, so it stays exact.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fasop.estimators.analytic import cost as C
from fasop.estimators.analytic.slots import pipeline_floor

FLOOR_MARGIN = 1e-9
"""A recipe's floor must exceed the estimate by this share to rule it out (the floor sums its
stages' rates in order: a few ulps apart from one order to another)."""


@dataclass(frozen=True)
class _Recipe:
    """What a class's certificate needs of one recipe, whatever the order of the interior kinds."""
    uniform: bool
    """Conditions 1, 3, 4 and the first and last stages' caps hold, and its uncapped split fits them."""
    step: float
    """cost.step of the uncapped split (the same bits on every order alike where no cap binds)."""
    floor: float
    """slots.pipeline_floor: no order alike's step under this recipe is below it."""
    need: dict
    """Per interior kind, the layers every position it stands at must hold (split_layers' start and end)."""
    caps: dict
    """Per interior kind, max_layers at each position."""


def class_bound(b, counts: Sequence[int], prefix: Sequence[int], last: int) -> float | None:
    """The step time every order of these nodes per kind (`counts`) that begins with the kinds
    `prefix` and ends with kind `last` is estimated at unless it does not fit; None where that is
    not certified (module doc). `b`: the shape's orders.AnalyticPrefixBounds."""
    info = b.class_info(counts, prefix[0], last)
    if info is None:
        return None
    left = list(counts)
    for k in (*prefix, last):
        left[k] -= 1
    if min(left) < 0:
        return None
    p = b.p
    placed = [(j, k) for j, k in enumerate(prefix[:p - 1]) if 0 < j < p - 1]
    free = range(len(prefix), p - 1)
    certified = []
    for r in info:
        if r.uniform and all(r.caps[k][j] >= r.need[k] for j, k in placed) \
                and all(min((r.caps[k][j] for j in free), default=r.need[k]) >= r.need[k]
                        for k, n in enumerate(left) if n):
            certified.append(r)
    if not certified:
        return None
    t = min(r.step for r in certified)
    chosen = {id(r) for r in certified}
    if any(id(r) not in chosen and not r.floor > t * (1 + FLOOR_MARGIN) for r in info):
        return None
    return t


def class_info(b, counts: Sequence[int], first: int, last: int) -> list[_Recipe] | None:
    """Per recipe of the shape, its _Recipe for orders of `counts` from kind `first` to kind `last`;
    None where no order of them is certified (one node a stage, condition 1)."""
    p = b.p
    if b.per_stage != 1 or p < 3 or b.e.model.profile is not None \
            or any(k.gpus_per_node != b.g for k in b.kinds):
        return None
    left = list(counts)
    left[first] -= 1
    left[last] -= 1
    if min(left) < 0:
        return None
    order = (first, *(k for k, n in enumerate(left) for _ in range(n)), last)
    stages = _uniform_stages(b, order)
    return None if stages is None else [_recipe(b, w, stages, order) for w in b.ws]


def _recipe(b, w: C.Workload, stages, order: tuple[int, ...]) -> _Recipe:
    p, most = b.p, b.most
    per = [sum(C.layer_s(w, hw.gpu, hw.tp_link, hw.groups)) for hw in stages]
    ends = (sum(C.embedding_s(w, stages[0].gpu, stages[0].tp_link)), sum(C.head_s(w, stages[-1].gpu)))
    floor = pipeline_floor(b.m, w.recipe.virtual_stages, b.L, per, ends)
    extra = [0.0] * p
    extra[0] += ends[0]
    extra[-1] += ends[1] + sum(C.mtp_s(w, stages[-1]))
    free = C.split_layers(w, stages, caps=[most] * p)
    start = [max(1, n) for n in C.split_start(per, extra, b.L)]
    need: dict[int, int] = {}
    for i in range(1, p - 1):
        need[order[i]] = max(need.get(order[i], 0), start[i], free[i])
    caps = {k: [C.max_layers(w, j, stages[order.index(k, 1)].memory_limit_bytes, most) for j in range(p)]
            for k in need}
    uniform = (all(C.max_layers(w, i, stages[i].memory_limit_bytes, most) >= max(start[i], free[i])
                   for i in (0, p - 1))
               and all(C.stage_memory(w, free[i], i).total <= stages[i].memory_limit_bytes for i in (0, p - 1))
               and _tie_free(per, extra, stages, most))
    step = C.step(w, stages, free) if uniform else None
    uniform = uniform and _interior_never_last(w, step)
    return _Recipe(uniform, step.step_s if uniform else float("inf"), floor, need, caps)


def _uniform_stages(b, order: tuple[int, ...]):
    """The canonical order's stages (cost.stage_hardware) where condition 1 holds, else None."""
    sh, p, n = b.shape, b.p, len(b.kinds)
    nodes = [b.kinds[k] for k in order]
    stages = C.stage_hardware(sh.tp, sh.cp * sh.dp, p, nodes, [b.gpus[k] for k in order], b.e.params)
    links = {stages[0].next_link}

    def stage(i: int, kind: int, nxt: int):
        return C.one_stage(sh.tp, sh.cp * sh.dp, p, i, b.g, {i: b.kinds[kind], i + 1: b.kinds[nxt]},
                           {i: b.gpus[kind], i + 1: b.gpus[nxt]}, b.e.params)

    refs = {kind: stages[order.index(kind, 1)] for kind in set(order[1:-1])}
    for nxt in range(n):
        if stage(0, order[0], nxt) != stages[0]:
            return None
        for kind, ref in refs.items():
            for i in range(1, p - 1):
                hw = stage(i, kind, nxt)
                if hw != ref:
                    return None
                links.add(hw.next_link)
    return stages if len(links) == 1 else None


def _tie_free(per, extra, stages, most: int) -> bool:
    """Condition 3 where it matters: split_layers breaks ties by stage index, and stage 0 and the
    last stage keep their indices in every order alike, so only interior stages of different
    hardware must never compare equal (their values e + k x tau, 2 <= k <= most + 1)."""
    values: dict[float, object] = {}
    seen = set()
    for i in range(1, len(stages) - 1):
        hw = stages[i]
        if hw in seen:
            continue
        seen.add(hw)
        for k in range(2, most + 2):   # what it compares: a stage's time with its next layer, or at 2+ layers
            if values.setdefault(extra[i] + k * per[i], hw) != hw:
                return False
    return True


def _interior_never_last(w: C.Workload, step) -> bool:
    """Condition 4 on the canonical order's step."""
    drain = (step.stage_bwd_s[0] + step.p2p_s[0]) / w.recipe.virtual_stages
    return all(x <= 0.5 * drain for x in step.dp_exposed_s[1:-1])
