"""A search's plans estimated chunk by chunk, in this process or in worker processes.

With `top`, a chunk's plans go in order of their quick lower bounds and a plan that provably
cannot enter the K fastest that fit is not estimated (None); the kept set is the same however
the plans are split into chunks and processes. Results come back in chunk order, so the search's
output is the same, byte for byte, whatever the number of workers.
"""

from __future__ import annotations

import bisect
import gc
import itertools
import time
from collections.abc import Callable, Iterator, Sequence

from fasop.costs.estimate import Estimate
from fasop.estimators import Estimator, make_estimator
from fasop.plans.plan import Plan
from fasop.specs.types import ClusterSpec, ModelSpec


def chunks(items: Iterator, size: int) -> Iterator[list]:
    while chunk := list(itertools.islice(items, size)):
        yield chunk


STEADY_S = 1.0
"""A rising count goes to the progress callback at least this often, however small its rise."""


def steady(progress: Callable[[int, int], None] | None, total: int,
           clock: Callable[[], float] = time.monotonic) -> Callable[[int], None]:
    """report(done) for a search's `progress(done, total)`: passes on counts that go up (chunks
    back from workers may say less than the order tree already did), each 0.1 % of the total and
    always the last (done = total), and a smaller rise when STEADY_S has passed since the last
    passed on: an order tree proving its plans against near-equal orders resolves few plans a
    second, and its progress must still show it is alive (docs/partitions.md: exact ties)."""
    step, last, at = max(1, total // 1000), [-1, -1], [clock()]  # [last passed on, last seen], when passed

    def report(done: int) -> None:
        if progress is None or done <= last[1]:
            return
        last[1] = done
        if done - last[0] >= step or done >= total or clock() - at[0] >= STEADY_S:
            last[0], at[0] = done, clock()
            progress(done, total)
    return report


def estimate_chunk(estimator: Estimator, chunk: list[tuple[int, Plan]], top: int | None,
                   kept: Sequence[float], asked: set[bytes],
                   cutoff: float = float("inf")) -> list[tuple[int, Estimate | None]]:
    """Estimates of a chunk of (index, plan). Without `top`, every plan's. With `top`, given the
    step times of the plans kept so far (`kept`, ascending), None for a plan that cannot enter
    the K fastest that fit: its lower bound, or its optimal-partitioner search cut off at the
    K-th step time, says so. Plans go in order of their lower bounds and the cut-off tightens as
    they do; a plan's estimate never depends on the cut-off and ties at it are kept for the
    search's kept set to break by index, so that set is the same however the plans are split into
    chunks and processes (the estimator's `estimate_below`). `asked`: digests of the signatures
    asked about so far (updated): the whole search's in one process, the chunk's own in a worker.
    `cutoff`: the threshold until K plans are kept."""
    if top is None:
        return list(zip((i for i, _ in chunk), estimator.estimate_many([p for _, p in chunk])))
    values = sorted(kept)[:top]
    quick = [estimator.quick_bound(plan) for _, plan in chunk]
    results: dict[int, Estimate | None] = {}
    for k in sorted(range(len(chunk)), key=lambda k: (quick[k], k)):  # promising plans first
        index, plan = chunk[k]
        threshold = values[top - 1] if len(values) >= top else cutoff
        if quick[k] > threshold or (threshold < float("inf") and estimator.lower_bound(plan, threshold) > threshold):
            results[index] = None
            continue
        if top == 1 and not _first_of_its_kind(estimator, plan, asked):
            # an equivalent pipeline (FASOP's cyclic placements repeat them) was estimated here
            # before, with a lower index: this one ties with it and loses the tie
            results[index] = None
            continue
        estimate = estimator.estimate_below(plan, threshold)  # ties at the threshold: the kept set decides
        if estimate is not None:
            bisect.insort(values, estimate.step_time_s)
            del values[top:]
        results[index] = estimate
    return [(index, results[index]) for index, _ in chunk]


def signature_key(estimator: Estimator, plan: Plan) -> bytes:
    """16-byte digest of the plan's signature: bounded memory per unique pipeline."""
    from hashlib import blake2b  # (imported on first use: a search that never asks starts ~2 ms sooner)

    return blake2b(repr(estimator.signature(plan)).encode(), digest_size=16).digest()


def _first_of_its_kind(estimator: Estimator, plan: Plan, asked: set[bytes]) -> bool:
    """False when `estimator` was already asked about a plan with the same signature (`asked`:
    their digests; plans of a chunk are asked in index order among equals, chunks in order)."""
    key = signature_key(estimator, plan)
    if key in asked:
        return False
    asked.add(key)
    return True


def estimate_chunks(chunks: Iterator[list], estimator: Estimator, spec: tuple, top: int | None,
                     kept: Callable[[], list[float]], workers: int, accounted: Callable[[], int] | None,
                     asked: set[bytes], cutoff: float = float("inf")) -> Iterator[tuple[int, list]]:
    """(plans enumerated or ruled out so far, results) per chunk, in chunk order. accounted():
    that count when the chunk was made (default: the chunk's last index + 1)."""
    def done(chunk: list) -> int:
        return chunk[-1][0] + 1 if accounted is None else accounted()

    if workers == 1:
        for chunk in chunks:
            yield done(chunk), estimate_chunk(estimator, chunk, top, kept(), asked, cutoff)
        return
    from fasop.core.workers import process_pool, result_of

    with process_pool(workers, _init_worker, spec) as pool:
        window: list = []
        for chunk in chunks:  # at most 2 chunks per worker in flight: bounded memory
            window.append((done(chunk), pool.submit(_worker_chunk, chunk, top, kept(), cutoff)))
            if len(window) >= 2 * workers:
                count, future = window.pop(0)
                yield count, result_of(future)
        for count, future in window:
            yield count, result_of(future)


_WORKER: dict = {}


def _init_worker(model: ModelSpec, cluster: ClusterSpec, inventory: tuple, partitioner: str,
                 partition_budget: int | None, options: dict) -> None:
    gc.enable()  # forked from a search, whose collector is paused (search._collector_paused): workers live on
    _WORKER["estimator"] = make_estimator(model, cluster, inventory, partitioner=partitioner,
                                          partition_budget=partition_budget, **options)


def _worker_chunk(chunk: list[tuple[int, Plan]], top: int | None,
                  kept: list[float], cutoff: float = float("inf")) -> list[tuple[int, Estimate | None]]:
    # the chunk's own memo of signatures, not the process's: which process ran which chunks
    # before is the scheduler's choice, and the counts in the summary must not depend on it
    return estimate_chunk(_WORKER["estimator"], chunk, top, kept, set(), cutoff)
