"""enumerate -> estimate -> ranked table. No printing, no files: the CLI does that.

The search streams: plans are generated lazily, estimated in chunks, and only what is kept is
held in memory. With `top=K` only the K fastest plans that fit in memory are kept, and a plan
whose lower bound (the estimator's `lower_bound`) is already slower than the K-th kept plan
is never partitioned or scheduled: pruning is exact, the kept set is the same as without it.
With `workers=N` chunks are estimated in N processes; results are merged in enumeration order,
so the output is the same, byte for byte, whatever N.
"""

from __future__ import annotations

import functools
import gc
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace

from fasop.core import limits
from fasop.core.errors import FasopError, NoPlan
from fasop.costs.estimate import Estimate
from fasop.estimators import Estimator, make_estimator, quick_bound_within
from fasop.partition.splits import PARTITIONERS
from fasop.plans.enumerate import (all_placements, combo_plan, count_orders, cyclic_placements, degree_list,
                                   grouped_placements, plans)
from fasop.plans.plan import Plan
from fasop.plans.space import DegreeSpace, split_options
from fasop.search.chunks import chunks, estimate_chunks, steady
from fasop.search.kept import Kept, Tally
from fasop.search.orders import OrderSearch, shape_key
from fasop.specs.files import show
from fasop.specs.types import ClusterSpec, ModelSpec, NodeType

PLACEMENTS = ("all", "cyclic", "grouped")
"""all: every distinct order of the node types, equivalent pipelines estimated once;
cyclic: FASOP's rotations of the --nodes list (no deduplication, as FASOP);
grouped: each type's nodes contiguous, every order of the types, equivalent pipelines once."""
DEFAULT_ITERATIONS = 12_500_000
"""FASOP's default number of training iterations for the cost column."""
MAX_ORDERS = 100_000
"""`--placements all` lists up to this many distinct node orders; past it, it needs `--top` and
searches them by branch and bound over order prefixes (orders.OrderSearch)."""
MAX_TREE_ORDERS = 10**10
"""Past this many distinct node orders even the branch and bound over orders is refused (64
nodes of 4 types: 6.6e35): its time grows with the orders that come close to the best plans.
Measured: 20 nodes of 3 types (1.3e8 orders), --top 5, about 2 minutes on 2 cores."""
TREE_ORDERS = 100
"""With `top`, `--placements all` searches more distinct node orders than this by branch and
bound over order prefixes (orders.OrderSearch) rather than listing them: same plans kept,
fewer estimated (8 nodes of 3 types, --top 1: 1.2 s instead of 2.0 s,
benchmarks/tree_vs_listing.py)."""
CHUNK = 64
"""Plans per estimation chunk (one unit of work for a worker process) when plans are partitioned
one by one (optimal partitioner, or --top)."""
BATCH_CHUNK = 2048
"""Plans per chunk for fasop-minmax without --top: the schedule is vectorised over a chunk's plans."""

Progress = Callable[[int, int], None]
"""progress(done, total): called as the search advances, over enumerated plans."""


@dataclass(frozen=True, kw_only=True)
class SearchResult:
    estimates: tuple[Estimate, ...]
    """The kept plans, fastest first (ties keep enumeration order): every estimated plan, or
    with `top` the K fastest that fit in memory."""
    inventory: tuple[NodeType, ...]
    iterations: int
    usd_per_hour: float
    """Price of the whole inventory per hour."""
    num_candidates: int = 0
    """Plans enumerated (placements x degrees x micro-batch sizes)."""
    num_duplicates: int = 0
    """Plans skipped because an equivalent pipeline (same signature) was already estimated."""
    num_pruned: int = 0
    """With `top`: plans proved unable to enter the kept set (slower than the K-th kept plan by
    a lower bound or a cut-off search, or no split fits in memory)."""
    num_estimated_oom: int = 0
    """Estimated plans that do not fit in memory (without `top`; with it they count as pruned)."""
    top: int | None = None
    misfits: tuple[tuple[str, int], ...] = ()
    """Estimated plans that do not fit in memory, by the reason their estimator gives (the
    analytic one: weights, activations, both); empty for estimators that give none."""
    interrupted: BaseException | None = None
    """The KeyboardInterrupt (Ctrl-C, SIGTERM) that stopped the search (`estimates`: the chunks done); None: complete."""
    num_done: int = 0  # plans enumerated or ruled out when the search ended (num_candidates when complete)

    @property
    def num_oom(self) -> int:
        return sum(e.memory.is_oom for e in self.estimates)

    @property
    def num_estimated(self) -> int:
        return self.num_candidates - self.num_duplicates - self.num_pruned

    @property
    def best_fitting(self) -> Estimate | None:
        return next((e for e in self.estimates if not e.memory.is_oom), None)


def parse_counts(text: str, cluster: ClusterSpec, flag: str, minimum: int = 1) -> dict[str, int]:
    """`a100=1,a10=3` -> {"a100": 1, "a10": 3}, in the order given; each count >= minimum."""
    counts: dict[str, int] = {}
    for item in text.split(","):
        name, sep, count = (part.strip() for part in item.partition("="))
        digits = count.lstrip("0") or "0"  # no int() of 10,000 digits below
        if not sep or not (count.isascii() and count.isdigit()) or (len(digits) < 8 and int(digits) < minimum):
            raise FasopError(f"{flag}: expected TYPE=COUNT with COUNT >= {minimum}, got {show(item.strip())}")
        if len(digits) > 7 or int(digits) > limits.NODES:
            raise FasopError(f"{flag}: {show(item.strip())}: at most {limits.NODES:,} nodes, fasop's ceiling "
                             "(README: Limits)")
        if name not in cluster.node_types:
            raise FasopError(f"{flag}: unknown node type {show(name)} in {cluster.path} "
                             f"(known: {', '.join(cluster.node_types)})")
        if name in counts:
            raise FasopError(f"{flag}: node type {name!r} given twice")
        counts[name] = int(count)
    nodes = sum(counts.values())
    gpus = sum(n * cluster.node_types[name].gpus_per_node for name, n in counts.items())
    if nodes > limits.NODES or gpus > limits.GPUS:
        raise FasopError(f"{flag}: {nodes:,} nodes with {gpus:,} GPUs in all, more than fasop's ceiling of "
                         f"{limits.NODES:,} nodes and {limits.GPUS:,} GPUs (README: Limits)")
    return counts


def parse_nodes(text: str, cluster: ClusterSpec) -> tuple[NodeType, ...]:
    """`a100=1,a10=3` -> the inventory, in the order given."""
    return tuple(node for name, n in parse_counts(text, cluster, "--nodes").items()
                 for node in [cluster.node_types[name]] * n)


def check_strategies(placements: str, partitioner: str, iterations: int) -> None:
    """One-line errors for an unknown placement strategy or partitioner, or iterations < 1."""
    if placements not in PLACEMENTS:
        raise FasopError(f"--placements: unknown strategy {placements!r} (known: {', '.join(PLACEMENTS)})")
    if partitioner not in PARTITIONERS:
        raise FasopError(f"--partitioner: unknown partitioner {partitioner!r} (known: {', '.join(PARTITIONERS)})")
    if iterations < 1:
        raise FasopError(f"--iterations: must be >= 1, got {iterations}")


def placements_of(inventory: Sequence[NodeType], strategy: str) -> tuple[Iterator[tuple[NodeType, ...]], int]:
    """(node orders, how many) for a placement strategy (`all` up to MAX_ORDERS orders)."""
    if strategy == "cyclic":
        orders = cyclic_placements(inventory)
        return iter(orders), len(orders)
    if strategy == "grouped":
        kinds = len({n.name for n in inventory})
        if math.factorial(kinds) > MAX_ORDERS:  # k! orders of k types, listed
            raise FasopError(f"--placements grouped: {kinds} node types have {math.factorial(kinds):.2g} orders, more "
                             f"than {MAX_ORDERS:,}: use --placements cyclic, or fewer node types")
        orders = grouped_placements(inventory)
        return iter(orders), len(orders)
    return all_placements(inventory), count_orders(inventory)


SEED_ORDERS = 24
"""The order tree is seeded from the grouped orders (grouped_seed) up to this many of them (4 node types)."""
AUTO_TOP = 5
"""`fasop search` without --top on more than AUTO_TOP_PLANS plans keeps the AUTO_TOP fastest that
fit (found exactly, by branch and bound), and says so; --every-plan lists them all."""
AUTO_TOP_PLANS = 10_000
"""Plans past which `fasop search` without --top keeps only the AUTO_TOP fastest: estimating
every plan of 8 nodes of 4 types (2,520 orders, 186,480 plans) took over 20 minutes and 600 MB."""


def plan_count(model: ModelSpec, cluster: ClusterSpec, inventory: Sequence[NodeType], *, placements: str,
               partitioner: str, estimator_options: dict | None = None) -> tuple[int, int]:
    """(plans, distinct node orders) a search of `inventory` enumerates (0 plans when no degree
    combination is valid); cheap: nothing is estimated."""
    space, options = split_options(model, estimator_options)
    estimator = make_estimator(model, cluster, inventory, partitioner=partitioner, **options)
    combos = degree_list(inventory, tp_degrees=estimator.tp_degrees(), global_batch_size=model.global_batch_size,
                         num_transformer_layers=model.num_transformer_layers, space=runnable_space(space, estimator))
    num_orders = count_orders(inventory) if placements == "all" else placements_of(inventory, placements)[1]
    return num_orders * len(combos), num_orders


def _collector_paused(function: Callable) -> Callable:
    """`function` with Python's cyclic garbage collector paused while it runs (then enabled again
    if it was). A search makes thousands of small objects (plans, estimates, their tuples) that
    never form cycles and that reference counting frees; the collector's passes over them took
    9 % of a search of t5 on a10=8 with FASOP's choices, 4 % on a100=1,a10=7 and 3 % of bert on
    a10=4 (medians of 100 alternated searches with the collector on and off). A search leaves no cyclic
    garbage (test_a_search_leaves_no_cyclic_garbage): what it made is freed as it returns."""
    @functools.wraps(function)
    def paused(*args, **kwargs):
        if not gc.isenabled():
            return function(*args, **kwargs)
        gc.disable()
        try:
            return function(*args, **kwargs)
        finally:
            gc.enable()
    return paused


@_collector_paused
def search(model: ModelSpec, cluster: ClusterSpec, inventory: Sequence[NodeType], *, heterogeneous: bool = False,
           placements: str = "all", partitioner: str = "optimal", iterations: int = DEFAULT_ITERATIONS,
           top: int | None = None, workers: int = 1, partition_budget: int | None = None,
           progress: Progress | None = None, max_orders: int | None = None,
           cutoff: float = float("inf"), estimator_options: dict | None = None,
           keep_on_interrupt: bool = False, seed_orders: bool = True) -> SearchResult:
    """Estimate the plans for `inventory` and rank them by step time (see the module doc).
    cutoff (with `top`): keep only plans of at most this step time; the plans kept are the K
    fastest that fit among those, found with the cutoff as the pruning threshold from the start
    (fasop.pareto.frontier gives a composition the step time past which it cannot reach the frontier).
    partition_budget: search-tree nodes the optimal partitioner may visit per plan, past which it
    keeps the best split found and reports its gap (None: every split proven optimal where it can
    be, by branch and bound and then a MILP certificate, split_milp). max_orders (default MAX_ORDERS): past this
    many distinct node orders, `placements="all"` needs `top`. With `top`, past max_orders or
    TREE_ORDERS orders, the orders are searched by branch and bound (orders.OrderSearch)
    instead of listed. estimator_options: passed to the estimator (the analytic one's allowed
    recipes: recompute, zero, sequence_parallel, virtual_stages, precision). keep_on_interrupt: a
    KeyboardInterrupt returns what is finished (`interrupted` set) instead of propagating.
    seed_orders: before an order tree, search the grouped orders for its threshold and visiting
    order (grouped_seed; the same plans kept, found sooner)."""
    _check_options(inventory, placements=placements, partitioner=partitioner, iterations=iterations, top=top,
                   workers=workers, partition_budget=partition_budget, heterogeneous=heterogeneous)
    space, options = split_options(model, estimator_options)
    estimator = make_estimator(model, cluster, inventory, partitioner=partitioner, partition_budget=partition_budget,
                               **options)
    combos = _degree_combos(model, inventory, estimator, space)
    if cutoff < float("inf") and top is None:
        raise ValueError("search: a cutoff needs top")
    orders, num_orders = placements_of(inventory, placements)
    total = num_orders * len(combos)
    every = len(combos)
    by_prefix = _by_prefix(cluster, estimator, placements, num_orders, top, MAX_ORDERS if max_orders is None else max_orders)
    first: dict = {}
    if by_prefix and seed_orders:  # grouped orders' plans: a threshold and a visiting order (grouped_seed)
        seed = grouped_seed(model, cluster, inventory, heterogeneous=heterogeneous, partitioner=partitioner,
                            iterations=iterations, top=top, partition_budget=partition_budget, cutoff=cutoff,
                            estimator_options=estimator_options, workers=workers, keep_on_interrupt=keep_on_interrupt)
        if isinstance(seed, SearchResult):  # interrupted while seeding: what it found, marked incomplete
            return replace(seed, num_candidates=total, num_done=0)
        cutoff, first = seed
    if cutoff < float("inf"):  # degrees whose quick bound (any placement) is above the cutoff: none of their plans
        combos = _within_cutoff(combos, model, inventory, estimator, cutoff)
    expect_shapes = getattr(estimator, "expect_shapes", None)
    if expect_shapes is not None:
        expect_shapes(combo[:3] for combo in combos)
    precut = num_orders * (every - len(combos))  # resolved before any work: progress counts them done
    kept, tally, report, tree, accounted = Kept(top, cutoff), Tally(pruned=precut), steady(progress, total), None, None
    if by_prefix:
        tree = OrderSearch(estimator, inventory, combos, kept.threshold, lambda n: report(precut + n), first, kept.kth)
        candidates: Iterator[tuple[int, Plan]] = iter(tree)
        accounted = lambda: precut + tree.resolved()  # noqa: E731
    else:
        candidates = enumerate(plans(orders, combos, global_batch_size=model.global_batch_size))
    if placements != "cyclic":  # cyclic: FASOP's, no dedupe
        candidates = tally.unique(candidates, estimator)
    size = BATCH_CHUNK if partitioner == "fasop-minmax" and top is None else CHUNK
    spec = (model, cluster, tuple(inventory), partitioner, partition_budget, options)
    interrupted, done = None, 0
    try:
        for done, results in estimate_chunks(chunks(candidates, size), estimator, spec, top, kept.values, workers,
                                             accounted, set(), cutoff):
            tally.add(results, kept)
            report(done)
    except KeyboardInterrupt as exc:  # keep what is finished: the caller writes it, marked incomplete
        if not keep_on_interrupt:
            raise
        interrupted = exc
    else:
        report(total)
        if tree is not None:
            tally.add_tree(tree)
    return SearchResult(estimates=kept.ranked(), inventory=tuple(inventory), iterations=iterations,
                        usd_per_hour=estimator.usd_per_s * 3600, num_candidates=total,
                        num_duplicates=tally.duplicates, num_pruned=tally.pruned,
                        num_estimated_oom=tally.oom, top=top, misfits=tuple(sorted(tally.misfits.items())),
                        interrupted=interrupted, num_done=total if interrupted is None else done)


def grouped_seed(model: ModelSpec, cluster: ClusterSpec, inventory: Sequence[NodeType], *, top: int, cutoff: float,
                 **options) -> tuple[float, dict] | SearchResult:
    """(threshold, first) for the order tree, from the K fastest plans that fit with each type's
    nodes together (`--placements grouped`: a few orders a degree shape). threshold: the K-th of
    their step times if there are K, else `cutoff`. They have distinct signatures and are among
    the orders the tree walks, so the K-th kept of the whole search is at most theirs: cutting
    above it drops no plan the search keeps, and the tree finds them again (the same rows, ties
    broken by index as before). first: the fastest of them per degree shape; the tree visits
    those shapes first. Without these the tree's threshold is the K-th of the first shapes it
    walks, whatever they are worth: a bare DeepSeek-V3 config.json on p5=16,p6-b200=16 walked
    tp 4 x dp 4 x pp 16's near-equal orders for over ten minutes at 3.59 s a step, while a
    grouped order of tp 2 x dp 8 x pp 16 takes 3.16 s (docs/partitions.md). Interrupted with
    `keep_on_interrupt`: the grouped search's result, marked interrupted."""
    if math.factorial(len({n.name for n in inventory})) > min(SEED_ORDERS, MAX_ORDERS):
        return cutoff, {}
    grouped = search(model, cluster, inventory, placements="grouped", top=top, cutoff=cutoff, seed_orders=False,
                     **options)
    if grouped.interrupted is not None:
        return grouped
    first: dict = {}
    for e in grouped.estimates:  # the K fastest that fit, at most the cutoff, fastest first
        first.setdefault(shape_key(e.plan), e.step_time_s)
    return (grouped.estimates[top - 1].step_time_s if len(grouped.estimates) >= top else cutoff), first


def _within_cutoff(combos: list, model: ModelSpec, inventory: Sequence[NodeType], estimator: Estimator,
                   cutoff: float) -> list:
    """The degree combinations whose quick bound (which holds for any placement) is within `cutoff`."""
    gbs, within = model.global_batch_size, quick_bound_within(estimator)
    return [combo for combo in combos
            if within(combo_plan(combo, global_batch_size=gbs, placement=tuple(inventory)), cutoff) <= cutoff]


def _check_options(inventory: Sequence[NodeType], *, placements: str, partitioner: str, iterations: int,
                   top: int | None, workers: int, partition_budget: int | None, heterogeneous: bool) -> None:
    """One-line errors for search's options, in the order a user reads them."""
    check_strategies(placements, partitioner, iterations)
    if top is not None and top < 1:
        raise FasopError(f"--top: must be >= 1, got {top}")
    if workers < 1:
        raise FasopError(f"--workers: must be >= 1, got {workers}")
    if partition_budget is not None and partition_budget < 1:
        raise FasopError(f"--partition-budget: must be >= 1, got {partition_budget}")
    types = list(dict.fromkeys(n.name for n in inventory))
    if len(types) > 1 and not heterogeneous:
        raise FasopError(f"--nodes mixes node types {', '.join(types)}: add --heterogeneous to search plans across them")


NO_FUSED_CP = ("context parallelism needs a fused attention kernel (Transformer Engine's CP has no unfused path), "
               "which this job has not (its GPUs below sm80, or the cluster's analytic fused_attention false)")
"""Why a job plans no CP (runnable_space), as the search, its note and explain / export say it."""


def runnable_space(space: DegreeSpace, estimator: Estimator) -> DegreeSpace:
    """`space` less the context-parallel degrees the estimator's job cannot run: Transformer Engine's context
    parallelism has no unfused attention path (dot_product_attention/utils.py disables UnfusedDotProductAttention
    for it, and Megatron-LM's `--attention-backend unfused` leaves no backend), so a job without fused attention
    (GPUs below sm80, or a cluster's analytic `fused_attention: false`) plans cp 1 only; NoPlan where that is none."""
    if getattr(estimator, "context_parallel", True) or max(space.cp) == 1:
        return space
    if 1 not in space.cp:
        raise NoPlan(f"--cp {','.join(map(str, space.cp))}: {NO_FUSED_CP}: use --cp 1")
    return replace(space, cp=(1,))


def _degree_combos(model: ModelSpec, inventory: Sequence[NodeType], estimator: Estimator, space: DegreeSpace) -> list:
    """The valid (tp, dp, pp, mbs, cp, ep, etp) of the inventory; FasopError when there is none."""
    space = runnable_space(space, estimator)
    tp_degrees = estimator.tp_degrees()
    combos = degree_list(inventory, tp_degrees=tp_degrees, global_batch_size=model.global_batch_size,
                         num_transformer_layers=model.num_transformer_layers, space=space)
    if not combos:
        gpus = sum(n.gpus_per_node for n in inventory)
        shown = lambda xs: ", ".join(xs[:6]) + (", ..." if len(xs) > 6 else "")  # noqa: E731
        asked = [f"cp {shown([str(c) for c in space.cp])}"] if space.cp != (1,) else []
        asked += [f"ep x etp {shown(['x'.join(map(str, e)) for e in space.experts])}"] if space.experts != ((1, 1),) else []
        # the dimension without which plans exist, where one does (an explicit --cp / --ep / --etp that cannot fit)
        alone = [name for name, less in (("cp 1", replace(space, cp=(1,))), ("ep = etp = 1", replace(space, experts=((1, 1),))))
                 if less != space and degree_list(inventory, tp_degrees=tp_degrees, global_batch_size=model.global_batch_size,
                                                 num_transformer_layers=model.num_transformer_layers, space=less)]
        raise NoPlan(f"no valid plan: {len(inventory)} nodes ({gpus} GPUs), TP degrees {list(tp_degrees)}, "
                     + "".join(f"{a}, " for a in asked) + f"global batch {model.global_batch_size}, "
                     f"{model.num_transformer_layers} layers" + "".join(f"; with {name} there are plans" for name in alone))
    return combos


def _by_prefix(cluster: ClusterSpec, estimator: Estimator, placements: str, num_orders: int, top: int | None,
               max_orders: int) -> bool:
    """Whether `--placements all` searches the node orders by branch and bound over their
    prefixes (orders.OrderSearch) rather than listing them; one-line errors where neither can."""
    tree_capable = getattr(estimator, "prefix_bounds", None) is not None
    by_prefix = placements == "all" and (num_orders > max_orders or (
        top is not None and num_orders > TREE_ORDERS and tree_capable))
    if by_prefix and not tree_capable:
        raise FasopError(f"--placements all: {num_orders:,} distinct node orders (more than {max_orders:,}), too many "
                         f"to list, and estimator {cluster.estimator!r} ({cluster.path}) has no bounds over node order "
                         "prefixes to search them by branch and bound; use --placements grouped or cyclic")
    if placements == "all" and num_orders > MAX_TREE_ORDERS:
        raise FasopError(f"--placements all: {num_orders:.2g} distinct node orders, more than the exact search "
                         f"over orders takes on ({MAX_TREE_ORDERS:.0e}); use --placements grouped (each type's "
                         "nodes together) or cyclic")
    if by_prefix and top is None:
        raise FasopError(f"--placements all: {num_orders:,} distinct node orders (more than {max_orders:,}), "
                         "too many plans to list: add --top K (the K fastest, found exactly by branch and bound "
                         "over node orders) or use --placements grouped or cyclic")
    return by_prefix
