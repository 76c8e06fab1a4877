"""The optimal partitioner's node loop compiled (kernel `branch_and_bound`,
fasop/schedule/_node_loop.h): `run` hands a search of partition.optimal to it when the kernels are
built and the search's bound is one the loop knows (`parts`: the chains of one_f_one_b_bound,
raised to the backward sweep and the zigzag chains, or the reverse sweep alone); otherwise it
returns None and the search runs its own Python loop, the reference. Either way the same nodes are
visited in the same order, the same splits are evaluated and the bounds are the same bits
(tests/test_node_loop.py): the loop calls the kernels the Python loop calls, on the same arrays.
What needs the cost model stays in Python, called back from the loop: evaluating the splits
found and learning cuts (`_Search.flush`) and stage 0's extra time.
"""

from __future__ import annotations

import functools
import weakref

import numpy as np

from fasop.schedule import native
from fasop.schedule.bounds import one_f_one_b_bound, round_trip_weights

DONE, BUDGET, ABOVE = 0, 1, 2
"""The kernel's status: searched to the end; stopped at max_nodes; every open node above `above`
and nothing found at or below it."""
MAX_CUTS = 64
"""Most cuts the compiled loop keeps per node (BB_MAX_CUTS); a search allowed more runs in Python."""
ENABLED = True
"""False: every search runs its Python loop (the tests compare the two)."""

_EXTRAS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""Per search (while it lives): extra(n) by layer count n, NaN where not yet asked."""
_EMPTY = np.zeros(0)
_c = np.ascontiguousarray


def parts(bound, pp: int, layers: int) -> tuple | None:
    """The kernel's (chain, sweep, zigzag, reverse) arguments for `bound` (a partition.Bound of a
    search over pp stages and `layers` layers), or None when the loop does not know it."""
    kind = getattr(bound, "compiled", None)
    if kind is not None and kind[0] == "reverse":
        _, sweep, flipped_pp, flipped_layers = kind
        if (flipped_pp, flipped_layers) != (pp, layers):
            return None
        return None, None, None, (_c(sweep.weights), _c(sweep.waits), _c(sweep.table), sweep.start, sweep.sends)
    zigzag = sweep = None
    if kind is not None and kind[0] == "zigzag":
        _, bound, z = kind
        zigzag = (np.array(z.steady, dtype=float), _c(z.turn[0]), _c(z.no_turn[0]), _c(z.table), z.start[0],
                  float(z.sends))
        kind = getattr(bound, "compiled", None)
    if kind is not None and kind[0] == "sweep":
        _, bound, s = kind
        sweep = (_c(s.weights), _c(s.waits), _c(s.table), s.start, float(s.sends))
    if not (isinstance(bound, functools.partial) and bound.func is one_f_one_b_bound and not bound.args):
        return None
    keywords = bound.keywords
    m = keywords["num_microbatches"]
    if keywords["num_stages"] != pp:
        return None
    trips = round_trip_weights(pp, m) if keywords.get("round_trips", True) else np.full(pp, -1.0)
    chain = (_c(keywords["weights"], dtype=float), _c(trips, dtype=float), float(keywords["send_first"]),
             float(keywords["send_last"]), float(m))
    return chain, sweep, zigzag, None


def _state(search) -> tuple:
    """(best objective, cut weights, cut constants, cut completion tables) of a search."""
    return float(search.best[0]), _c(search.cut_w), _c(search.cut_c), _c(search.cut_tables)


def run(search, max_nodes: int | None) -> tuple[int, float] | None:
    """Search's best-first loop (partition.splits._Search.run's) in C: (status, floor: the lowest
    bound of an open node when it stopped), or None where it runs in Python. The splits found
    are left pending on the search, as its Python loop leaves them."""
    return _call(search, max_nodes, root_only=False)


def least(search) -> float | None:
    """partition.optimal's `least` (the least bound of the root's children, before any cut) in C,
    or None where the search runs in Python or the root has no child."""
    got = _call(search, None, root_only=True)
    return got[1] if got is not None and got[0] == DONE else None


def _call(search, max_nodes: int | None, root_only: bool) -> tuple[int, float] | None:
    if native.kernels is None or not ENABLED or search.max_cuts > MAX_CUTS:
        return None
    found = parts(search.bound, search.n, search.num_layers)
    if found is None:
        return None

    def flush(pending: list, visited: int) -> tuple:
        search.visited = visited  # the cuts wait for `cuts_after` nodes
        search.flush()
        return _state(search)

    extras = _EXTRAS.get(search)  # stage 0's extra by layer count: asked once for `least` and `run`
    if extras is None:
        extras = _EXTRAS[search] = np.full(search.size, np.nan)
    capped = (_EMPTY, _EMPTY) if search.capped is None else (_c(search.capped), _c(search.below))
    options = (float(search.margin), bool(search.settle), float(search.above), float(search.least), int(search.batch),
               int(search.last_stages), -1 if max_nodes is None else int(max_nodes), root_only)
    status, floor, visited = native.kernels.branch_and_bound(
        _c(search.times, dtype=float), search.n, search.size, _c(search.least_sum), _c(search.least_max),
        _c(search.least_wmax), *capped, found, options, (search.extra, flush, search.evaluate, search.pending, extras),
        _state(search))
    search.visited = visited
    return status, floor
