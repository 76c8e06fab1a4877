"""The `optimal` partitioner on FASOP-2024's cost model: the split of a plan with the lowest
estimated step time among those that fit in memory (or among all splits when none fits), by
exact branch and bound with cuts (partition.optimal), its schedules the estimator's (1F1B,
p2p-ends-only), its step time FASOP's float32 max over stages of end + DP all-reduce, +
the embedding all-reduce (docs/estimators.md §5, §7).
"""

from __future__ import annotations

from collections import OrderedDict
from functools import partial

import numpy as np

from fasop.costs.memory import stage_need
from fasop.estimators.fasop2024.batch import Prepared
from fasop.estimators.fasop2024.memory import PARAM_BYTES
from fasop.partition.milp import certify
from fasop.partition.polish import polish
from fasop.partition.splits import Found, finite_runs, optimal
from fasop.partition.zigzag import ZigzagBound, with_zigzag, zigzag_completion
from fasop.schedule.bounds import SweepBound, sweep_completion, with_sweep
from fasop.schedule import native
from fasop.schedule.legs import (  # noqa: F401 -- by_last_stage re-exported
    LegBound, Legs, by_last_stage, leg_completion, with_legs)
from fasop.schedule.pipeline import critical_path, one_f_one_b, one_f_one_b_bound, stage_chains
from fasop.schedule.reverse_sweep import (  # noqa: F401 -- reversed_times re-exported
    ReverseSweepBound, flipped_bound, reversed_times, sweep_prefix_completion)

# `Fasop2024Estimator` in annotations: the estimator (estimator.py) that calls in; not imported, as it imports this module

f32 = np.float32
FIRST_NODES = 50
"""Without a budget (--partition-budget), search-tree nodes of the first, exact branch and bound
per plan; a split it leaves unproven is polished and proven by the settle pass
(`SplitSearch.certified`). Measured on gpt2xl and t5 a100=1,a10=7 (default search, with
SETTLE_NODES 400 -> 800): unproven 54 -> 42 and 64 -> 50 at about the same CPU time, the nodes
going to the settle pass's tighter bounds instead; with every later step, 100 -> 50 nodes
leave the same unproven at ~0.1 s less CPU on gpt2xl (30 nodes: ~0.2 s more)."""
SETTLE_NODES = 800
FIRST_CUTS = 0
"""Without a budget, cuts (partition.optimal's max_cuts: critical chains of the best splits
found, each traced in Python by schedule.critical_path, ~2 ms on 16 stages x 64 micro-batches)
of the first branch and bound. Measured on FASOP's experiments (default search): 2 -> 0 leaves
the same splits unproven at ~0.4 s less CPU on gpt2xl and t5 a100=1,a10=7 (its proofs are the
settle passes')."""
CUTS_AFTER = 100
"""Without a budget, the passes after the first learn their cuts only once they have visited this
many nodes (partition.optimal's cuts_after): most settle passes prove their split within a few
nodes, and a cut costs a traced schedule (~1-5 ms on 16-32 stages). Measured on FASOP's
experiments (default search, SplitSearch.certified's CPU, min of 3): 0 / 30 / 100 / 200 / 400
nodes: gpt2xl a100=1,a10=7 2.49-2.54 / 2.37-2.39 / 2.25-2.44 / 2.23 / 2.29 s, t5 a100=1,a10=7
2.58-2.68 / 2.30-2.37 / 2.21-2.34 / 2.23 / 2.30 s, the same splits left unproven."""
SETTLE_CUTS = 2
"""Cuts of the settle, legs and close passes (and of a search with --partition-budget): 0
leaves gpt2xl a100=1,a10=7 9 unproven instead of 7, 1 proves the same at the same time."""
CLOSE_GAP = 2e-2
"""A plan that every step of `SplitSearch.certified` leaves unproven, its split within this gap
(relative) of its best lower bound, gets one more forward settle pass (`SplitSearch.closed`):
CLOSE_NODES nodes with the zigzag chains, or SWEEP_CLOSE_NODES with the sweep where there are
none. Measured on FASOP's experiments (default search): the splits the earlier steps leave open
lie within 0.1-1 % of their bounds. With the sweep alone and 3000 nodes, only those within 0.1 %
fit the issue's 2x of dbfe47e's time (gpt2xl a100=1,a10=7 7, t5 a100=1,a10=7 4 left open);
with the zigzag chains and every step since, 2 % (gpt2xl 0, t5 0)."""
CLOSE_NODES = 4000
"""Search-tree nodes of that pass with the zigzag chains: measured as above, 3000 leave one of
gpt2xl a100=1,a10=7's splits open (it needs ~3300); the others close within 300-2500."""
ZIGZAG_MIN_MICROBATCHES = 3
"""With fewer micro-batches the only zigzag chain is the last stage's steady chain, which the
sweep bound already holds (schedule_zigzag: w_i <= m - 2)."""
SWEEP_CLOSE_NODES = 8000
"""... and with the sweep (fewer micro-batches): measured as above, gpt2xl a100=1,a10=7's one
such split left open (16 stages, 2 micro-batches) needs 6000-8000 (~0.1 s)."""
SETTLE_LAST_STAGES = 3
"""The settle passes' (forward and reverse) nodes that fix all stages but the last three are one
node each, the splits below them evaluated (partition.optimal's `last_stages`; the first pass
and the legs pass: 2). Measured on FASOP's experiments (default search): 2 -> 3 proves gpt2xl
a10=8's last split (forward) and one more of t5 a100=1,a10=7's (reverse), at +0.0-0.1 s of CPU
each; 4 costs seconds (gpt2xl a10=8 0.27 -> 1.26 s)."""
"""Search-tree nodes of the settle pass (`SplitSearch.certified`) per unproven plan."""
REVERSE_NODES = 1000
"""Search-tree nodes of the reverse settle pass (`SplitSearch.reverse`) per plan the settle pass
leaves unproven. Measured on gpt2xl and t5 a100=1,a10=7 (default search): 500 / 1000 / 2000
nodes leave 13 / 11 / 11 and 14 / 12 / 10 unproven, at +0.0 / +0.1 / +0.4 s of CPU."""
FIRST_REVERSE_NODES = 500
"""... of its first run; a split the close step (`SplitSearch.closed`) leaves open gets a second
run of REVERSE_NODES. Measured on FASOP's experiments (default search, SplitSearch.certified's
CPU, min of 3, all splits proven either way): 1000 / 500 / 300 nodes first: gpt2xl a100=1,a10=7
2.47 / 2.22 / 2.29 s (its reverse passes mostly fail; the zigzag chains of the close step prove
those splits), t5 a100=1,a10=7 2.26 / 2.39 / 2.67 s (two of its splits need 500-1000 nodes)."""
REVERSE_CUTS = 8
"""Cuts (partition.optimal's max_cuts) of the reverse settle pass: measured as above (1000
nodes), 2 / 4 / 8 / 16 cuts leave 12 / 8 / 7 / 7 of t5's unproven at the same CPU time (gpt2xl's
11 throughout); the forward passes gain nothing from more."""
LEG_MAX_MICROBATCHES = 4
"""Plans of at most this many micro-batches that the settle pass leaves unproven get the legs
pass (`SplitSearch.legged`). Measured on FASOP's experiments (default search): their chains go
out with several micro-batches in a row and turn before the last stage, which the sweep misses;
with more micro-batches the legs bound proved no more splits than the sweep, at ~3x its cost."""
LEG_NODES = 100
"""Search-tree nodes of each branch and bound of the legs pass: measured as above, 50, 100 and
300 prove the same splits (those it proves, it proves in a few nodes)."""
RECENT_SHAPES = 16
"""Plan shapes (stage GPU types, tp, micro-batch, pp, m, memory limits) whose stage-time tables
the optimal partitioner keeps for the next plan of the same shape (a plan and its equivalents
under other placements usually come together)."""
RECENT_BYTES = 1 << 28
"""... and fewer when their stage-time tables (stages x (layers + 1)^2 floats each) pass 256 MiB
together: a long layer list on many stages (limits.LAYERS) stays within memory."""


def optimal_split(e: "Fasop2024Estimator", p: Prepared, recent: OrderedDict, cutoff: float = np.inf) -> Found | None:
    """The split of `p` with the lowest estimated step time (SplitSearch). With a finite cutoff:
    None unless a fitting split is at most the cutoff. `recent`: stage-time tables of the latest
    plan shapes, kept between calls."""
    return SplitSearch(e, p, recent).run(cutoff)


class SplitSearch:
    """What partition.optimal asks of one plan: evaluate splits, bound partial ones, cut."""

    def __init__(self, e: "Fasop2024Estimator", p: Prepared, recent: OrderedDict):
        plan = self.plan = p.plan
        self.e, self.p = e, p
        self.pp, self.m, self.send_first, self.send_last = plan.pp, plan.num_microbatches, p.p2p[0], p.p2p[-1]
        self.layout = e.layout(plan)
        self.embedding = float(self.layout.embedding_s)
        self.sends_fwd, self.sends_bwd = np.zeros((self.pp, 1)), np.zeros((self.pp, 1))
        self.sends_fwd[0], self.sends_bwd[self.pp - 1] = self.send_first, self.send_last  # p2p-ends-only
        self.every: np.ndarray | None = None  # `times`
        self.fitting, self.tables, self.oom_tables = self._tables(recent)
        self.dp_rows: np.ndarray | None = None  # `rows`
        self.extras: dict[int, float] = {}
        self.cuts: dict[tuple[int, ...], tuple[np.ndarray, float]] = {}
        self.values: dict[tuple[int, ...], float] = {}  # step times of the splits evaluated (each pipeline's own)
        self.stages = np.arange(self.pp)
        self.weights = e.steady_weights(self.pp, self.m)
        bound = partial(one_f_one_b_bound, num_stages=self.pp, num_microbatches=self.m, weights=self.weights,
                        send_first=self.send_first, send_last=self.send_last)
        self.bound, self.tight = partial(bound, round_trips=False), partial(bound, round_trips=True)
        """partition.Bound: the chains of schedule_bounds.one_f_one_b_bound; `tight` with the two
        round trips: tighter, but it changes the search's order, and within a budget the split
        found; used only to prove (the settle passes of `certified`), with the sweep."""

    @property
    def budget(self) -> dict:
        """partition.optimal's callbacks and options (made per call: held here, its bound methods
        would make a reference cycle, left to the cyclic collector)."""
        return {"bound": self.bound, "evaluate": self.evaluate, "cut": self.cut, "extra": self.extra,
                "seeds": [s.reported for s in self.p.splits],
                "max_nodes": FIRST_NODES if self.e.max_nodes is None else self.e.max_nodes,
                "stage_weights": self.weights,
                "max_cuts": FIRST_CUTS if self.e.max_nodes is None else SETTLE_CUTS,
                "cuts_after": CUTS_AFTER if self.e.max_nodes is None else 0}

    def _tables(self, recent: OrderedDict) -> tuple:
        """(the stage times that fit, inf elsewhere; the dynamic programmes' tables over them, over all
        stage times), kept in `recent` for plans of the same shape (a few MB each: the latest only)."""
        plan, layout = self.plan, self.layout
        key = (tuple(t.gpu for t in self.p.stage_types), plan.tp, plan.mbs, self.pp, self.m, layout.limits)
        if key in recent:
            recent.move_to_end(key)
        else:
            need = stage_need(plan, self.e.model, self.e.cluster, param_bytes=PARAM_BYTES)
            if native.kernels is not None:  # stacked, masked and its finite runs found in one pass in C
                planes = self.e.compute.planes([(t.gpu, plan.tp, plan.mbs) for t in self.p.stage_types])
                fitting, runs = np.empty((self.pp,) + need.shape), np.empty((self.pp, len(need), 2), dtype=np.int64)
                native.kernels.fit_table(self.e.compute.table, len(need), np.array(planes, dtype=np.int64), need,
                                         np.array(layout.limits, dtype=float), fitting, runs)
                recent[key] = (fitting, {"runs": runs}, {})  # partition.finite_runs' key
            else:
                fitting = np.where(~(need[None] > np.array(layout.limits)[:, None, None]), self.times, np.inf)
                recent[key] = (fitting, {}, {})
            while len(recent) > max(1, min(RECENT_SHAPES, RECENT_BYTES // (2 * fitting.nbytes))):
                recent.popitem(last=False)
        return recent[key]

    def rows(self) -> np.ndarray:
        """Each stage's DP all-reduce (float32) by stage 0's layers (row), as the estimate computes it
        (the estimator's dp_costs: its table's row, each stage's bus column); made on first use."""
        if self.dp_rows is None:
            self.dp_rows = np.ascontiguousarray(self.e.dp_table(self.plan, self.layout)[
                :, [int(t.intra_node_shared) for t in self.p.stage_types]])  # rows read by `evaluate`
        return self.dp_rows

    def extra(self, stage0_layers: int) -> float:
        """Stage 0's gradient all-reduce (depends on its layers) + the embedding all-reduce."""
        if stage0_layers not in self.extras:
            self.extras[stage0_layers] = float(self.rows()[stage0_layers, 0]) + self.embedding
        return self.extras[stage0_layers]

    @property
    def times(self) -> np.ndarray:
        """Every stage time, fitting or not (the stack of the stages' tables, made on first use:
        the searches over `fitting` evaluate only splits that fit, read there)."""
        if self.every is None:
            self.every = np.stack([c.matrix for c in self.p.costs])
        return self.every

    def stage_compute(self, splits: list[tuple[int, ...]], times: np.ndarray | None = None) -> np.ndarray:
        """(pp, splits) compute seconds per stage: the entries of `times`, the same sums as
        Prepared.stage_compute."""
        edges = np.zeros((len(splits), self.pp + 1), dtype=np.intp)
        np.cumsum(np.array(splits, dtype=np.intp), axis=1, out=edges[:, 1:])  # an array: numpy wraps a list slowly
        return (self.times if times is None else times)[self.stages, edges[:, :-1], edges[:, 1:]].T

    def evaluate(self, splits: list[tuple[int, ...]]) -> list[float]:
        """The step time of many splits at once: the estimate's float32 operations, so its values;
        each split once per plan (every pass starts from the splits of the one before)."""
        if not (new := [s for s in dict.fromkeys(splits) if s not in self.values]):
            pass
        elif native.kernels is not None:  # the stage ends by the same operations in C (schedule/_splits.h)
            counts, ends = np.array(new, dtype=np.int64), np.empty((len(new), self.pp))
            args = (counts, self.pp, self.m, self.e.fwd_bwd_factor, self.sends_fwd[:, 0], self.sends_bwd[:, 0], ends)
            native.kernels.split_ends(self.fitting, self.fitting.shape[1], *args)
            if not np.isfinite(ends).all():  # a split that does not fit (another caller's): every stage time
                native.kernels.split_ends(self.times, self.times.shape[1], *args)
            step = (ends.astype(f32) + self.rows()[counts[:, 0]]).max(axis=1) + f32(self.embedding)
            self.values.update(zip(new, step.tolist()))
        else:
            comp = self.stage_compute(new)
            ones = np.ones(len(new))
            ends = one_f_one_b(*self.e.split(comp), self.sends_fwd * ones, self.sends_bwd * ones, self.m).astype(f32)
            dp = np.stack([self.rows()[c[0]] for c in new], axis=1)
            self.values.update(zip(new, ((ends + dp).max(axis=0) + f32(self.embedding)).tolist()))
        return [self.values[s] for s in splits]

    def steady_floor(self, counts: np.ndarray, stage_times: np.ndarray) -> np.ndarray:
        """A lower bound on the step time of each split (rows of layer counts, and of their stage
        times as stage_compute's transposed): stage 0's end is at least every stage's steady
        chain (schedule_bounds.steady_weights: all stage times + both end sends + c_i t_i), and
        the step time at least that end + stage 0's extra (its DP all-reduce + the embedding's)."""
        comp = stage_times.T
        chain = comp.sum(axis=0) + (self.weights[:, None] * comp).max(axis=0) + (self.send_first + self.send_last)
        return chain + (self.rows()[counts[:, 0], 0].astype(float) + self.embedding)  # `extra` of each

    def cut(self, split: tuple[int, ...]) -> tuple[np.ndarray, float]:
        """The critical chain of `split` as a cut (partition.Cut), once per split: every pass asks
        for its best split's."""
        if split not in self.cuts:
            _, weights, const = critical_path(self.stage_compute([split], self.fitting), self.sends_fwd, self.sends_bwd, self.m,
                                              fwd_bwd_factor=self.e.fwd_bwd_factor)
            self.cuts[split] = (weights[:, 0], float(const[0]))
        return self.cuts[split]

    def swept(self):
        """`tight` raised to the longest backward sweep (schedule_bounds.SweepBound)."""
        sends = {"send_fwd": self.sends_fwd[:, 0], "send_bwd": self.sends_bwd[:, 0]}
        key = ("sweep", self.send_first, self.send_last)  # the advances wait for the sends
        if key not in self.tables:
            self.tables[key] = sweep_completion(self.fitting, self.m, fwd_bwd_factor=self.e.fwd_bwd_factor, **sends,
                                                runs=finite_runs(self.fitting, self.tables))
        return with_sweep(self.tight, SweepBound(self.tables[key], num_microbatches=self.m,
                                                 fwd_bwd_factor=self.e.fwd_bwd_factor,
                                                 send_first=self.send_first, send_last=self.send_last, **sends))

    def zigzagged(self):
        """`swept` raised to the longest zigzag chain (schedule_zigzag.ZigzagBound: a steady run
        at an early stage, then its last forward on and back before the cool-down)."""
        if "zigzag" not in self.tables:
            self.tables["zigzag"] = zigzag_completion(self.fitting)
        return with_zigzag(self.swept(), ZigzagBound(self.tables["zigzag"], num_microbatches=self.m,
                                                     fwd_bwd_factor=self.e.fwd_bwd_factor,
                                                     send_first=self.send_first, send_last=self.send_last))

    def reverse(self, found: Found, nodes: int | None = None) -> Found:
        """The settle pass from `found` over the stages in reverse order (the last stage fixed
        first), bounded by the backward sweep relaxed on the free first stages
        (schedule_bounds.ReverseSweepBound) and the cuts; stage 0's extra (fixed last) at its
        least over stage 0's layer counts."""
        pp, layers = self.pp, self.fitting.shape[1] - 1
        sends = {"send_fwd": self.sends_fwd[:, 0], "send_bwd": self.sends_bwd[:, 0]}
        key = ("reverse", self.send_first, self.send_last)
        if key not in self.tables:
            self.tables[key] = (sweep_prefix_completion(self.fitting, self.m, fwd_bwd_factor=self.e.fwd_bwd_factor,
                                                        runs=finite_runs(self.fitting, self.tables), **sends),
                                reversed_times(self.fitting), {})
        table, flipped, tables = self.tables[key]
        sweep = ReverseSweepBound(table, num_microbatches=self.m, fwd_bwd_factor=self.e.fwd_bwd_factor,
                                  send_first=self.send_first, send_last=self.send_last, **sends)
        least_extra = min(self.extra(n) for n in range(1, layers - pp + 2))

        def cut(split):  # valid for every split: its extra is at least least_extra
            weights, const = self.cut(split[::-1])
            return weights[::-1].copy(), const

        found_r = optimal(flipped, bound=flipped_bound(sweep, pp, layers),
                          evaluate=lambda splits: self.evaluate([split[::-1] for split in splits]), cut=cut,
                          extra=lambda n: least_extra, seeds=[found.split[::-1]], settle=True, max_nodes=nodes or REVERSE_NODES, max_cuts=REVERSE_CUTS,
                          last_stages=SETTLE_LAST_STAGES, tables=tables, cuts_after=CUTS_AFTER)
        if found_r.objective < found.objective:
            return Found(found_r.split[::-1], found_r.objective, found_r.proven, found_r.bound)
        return Found(found.split, found.objective, found_r.proven, found_r.bound)

    def legs_bound(self, fitting: np.ndarray, tables: dict, legs: Legs):
        """`tight` raised to the longest chain out and back (schedule_legs.LegBound: the backward
        sweep, with the way out's first forwards in a row and a turn at any stage)."""
        key = ("legs", self.send_first, self.send_last)  # the chains wait for the sends
        if key not in tables:
            tables[key] = leg_completion(fitting, legs)
        return with_legs(self.tight, LegBound(tables[key], legs))

    def legged(self, found: Found) -> Found:
        """The settle pass with the legs bound from `found`; if it leaves it unproven, once per
        layer count of the last stage (its first layer fixed: the free stages' bound then knows
        which stages a chain that turns early leaves out), each above the best split so far.
        Proven when every one is."""
        legs = Legs(self.pp, self.m, fwd_bwd_factor=self.e.fwd_bwd_factor, send_fwd=self.sends_fwd[:, 0],
                    send_bwd=self.sends_bwd[:, 0])
        options = self.budget | {"max_nodes": LEG_NODES, "max_cuts": SETTLE_CUTS}
        plain = optimal(self.fitting, tables=self.tables, settle=True, **(options | {
            "seeds": [found.split], "bound": self.legs_bound(self.fitting, self.tables, legs)}))
        if plain.objective < found.objective:
            found = plain
        if plain.proven:
            return Found(found.split, found.objective, True, found.objective)
        for fitting in by_last_stage(self.fitting, found.split):
            tables: dict = {}
            part = optimal(fitting, tables=tables, settle=True, above=found.objective, **(options | {
                "seeds": [found.split], "bound": self.legs_bound(fitting, tables, legs)}))
            if part is not None and not part.proven:
                return Found(found.split, found.objective, False, max(found.bound, plain.bound))
            if part is not None and part.split and part.objective < found.objective:
                found = part
        return Found(found.split, found.objective, True, found.objective)

    def certified(self, found: Found | None) -> Found | None:
        """Without a budget (max_nodes None), a split the branch and bound leaves unproven is
        proven: its split is polished (partition_polish.polish: one-layer moves while they help), then
        the branch and bound runs again, now only to prove that no split is faster by more than
        its margin (many splits of equal time: layers moved between stages of one GPU type),
        with the sweep bound; then over the stages from the last one (`reverse`); then, for few
        micro-batches, with the chains out and back (`legged`); then the MILP
        (split_milp.certify, on programs small enough); then, where the gap left is small, the
        settle pass again with more nodes and the zigzag chains (`closed`); then the reverse pass
        again with more nodes (a faster split the close step found is often proven at once).
        Each step starts from the best split so far and stops at the first proof."""
        if found is None or found.proven or self.e.max_nodes is not None:
            return found
        split, value = polish(found.split, found.objective, self.fitting, self.evaluate, lower=self.steady_floor)
        if value < found.objective:
            found = Found(split, value, False, found.bound)
        settled = optimal(self.fitting, tables=self.tables, settle=True, last_stages=SETTLE_LAST_STAGES,
                          **(self.budget | {"seeds": [found.split], "bound": self.swept(), "max_nodes": SETTLE_NODES,
                                            "max_cuts": SETTLE_CUTS}))
        if settled.objective < found.objective:
            found = settled
        if settled.proven:
            return Found(found.split, found.objective, True, found.objective)
        found = self.reverse(found, FIRST_REVERSE_NODES)
        if found.proven:
            return found
        if self.m <= LEG_MAX_MICROBATCHES:
            legged = self.legged(found)
            if legged.proven:
                return legged
            found = legged
        sure = certify(self.fitting, lambda t: stage_chains(t, self.sends_fwd[:, 0], self.sends_bwd[:, 0], self.m,
                                                            fwd_bwd_factor=self.e.fwd_bwd_factor),
                       self.rows().astype(float) + self.embedding, lambda split: self.evaluate([split])[0], found.split,
                       found.objective)
        found = Found(sure.split, sure.objective, sure.proven, max(sure.bound, settled.bound, found.bound))
        if found.proven:
            return found
        found = self.closed(found)
        if found.proven:
            return found
        again = self.reverse(found)  # more nodes, from the best split so far
        return Found(again.split, again.objective, again.proven,
                     again.objective if again.proven else max(found.bound, again.bound))

    def closed(self, found: Found) -> Found:
        """The close step of `certified`: a split left unproven within CLOSE_GAP of its bound gets
        one more forward settle pass, with the zigzag chains where they exist (CLOSE_NODES), else
        with the sweep (SWEEP_CLOSE_NODES)."""
        if found.objective - found.bound > CLOSE_GAP * found.objective:
            return found
        zigzag = self.m >= ZIGZAG_MIN_MICROBATCHES
        closer = optimal(self.fitting, tables=self.tables, settle=True, last_stages=SETTLE_LAST_STAGES,
                         **(self.budget | {"seeds": [found.split], "max_cuts": SETTLE_CUTS,
                                           "max_nodes": CLOSE_NODES if zigzag else SWEEP_CLOSE_NODES,
                                           "bound": self.zigzagged() if zigzag else self.swept()}))
        best = closer if closer.objective < found.objective else found
        return Found(best.split, best.objective, closer.proven,
                     best.objective if closer.proven else max(found.bound, closer.bound))

    def run(self, cutoff: float = np.inf) -> Found | None:
        if cutoff < np.inf:
            # The search stops early once it knows its result is above the cutoff; otherwise its
            # result is the one without cutoff, so a plan's estimate never depends on the cutoff
            # (top-K runs equal full runs, any --workers).
            found = self.certified(optimal(self.fitting, above=cutoff, tables=self.tables, **self.budget))
            return None if found is None or not found.objective <= cutoff else found
        found = self.certified(optimal(self.fitting, tables=self.tables, **self.budget))
        if found is None:  # nothing fits: the fastest of all splits, flagged OOM, proven as above
            self.fitting, self.tables = self.times, self.oom_tables
            found = self.certified(optimal(self.fitting, tables=self.tables, **self.budget))
        return found
