"""Where a sweep's compositions are searched: in this process, in local worker processes, or on a
Ray cluster. One small interface, so that fasop.pareto.pruning schedules the same way on all three:

    executor.submit(tasks)        # [(index, composition, cutoff)], started in the executor's order
    executor.pending              # tasks submitted and not yet returned
    executor.next_result()        # (index, CompositionResult) of a finished task, blocking
    executor.close()              # stop now: cancel what has not started, end the workers
    executor.bounds(comps)        # optional: pruning.bounds of the compositions, computed there

A task is `SweepJob(composition, cutoff)`, a pure function of its inputs, so the results do not
depend on the executor, the number of workers or the order tasks finish in. A worker process
that dies (killed, out of memory) has its compositions run again on a fresh pool, up to
MAX_RETRIES times each; Ray retries its tasks itself (`max_retries`; fasop.pareto.ray_executor).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from fasop.core.errors import FasopError
from fasop.core.workers import process_pool, terminable
from fasop.core.workers import stop as _stop
from fasop.pareto.sweep import Composition, CompositionResult, Interrupted, SweepJob, init_sweep_worker, sweep_worker

Task = tuple[int, Composition, float]
"""(composition index, composition, cutoff step time; inf: none)."""
MAX_RETRIES = 2
"""Times a composition is run again after the worker running it died."""
EXECUTORS = ("local", "ray")


class SerialExecutor:
    """Tasks run in this process when asked for a result, in composition order."""

    def __init__(self, job: SweepJob):
        self.job, self.queue = job, deque()

    @property
    def pending(self) -> int:
        return len(self.queue)

    def submit(self, tasks: Sequence[Task]) -> None:
        self.queue.extend(sorted(tasks, key=lambda t: t[0]))

    def next_result(self) -> tuple[int, CompositionResult]:
        index, comp, cutoff = self.queue.popleft()
        return index, self.job(comp, cutoff)

    def close(self) -> None:
        self.queue.clear()


class PoolExecutor:
    """Tasks run in `workers` local processes, the largest compositions first (no worker is left
    with a big one at the end). A dead worker breaks the pool: a new pool runs what was left."""

    def __init__(self, job: SweepJob, workers: int):
        self.job, self.workers = job, workers
        self.pool = None
        self.running: dict = {}
        self.retries: dict[int, int] = {}

    @property
    def pending(self) -> int:
        return len(self.running)

    def submit(self, tasks: Sequence[Task]) -> None:
        if self.pool is None:
            self.pool = process_pool(self.workers, init_sweep_worker, (self.job,))
        for task in sorted(tasks, key=lambda t: (-t[1].num_nodes, t[0])):
            self.running[self.pool.submit(sweep_worker, task[1], task[2])] = task

    def bounds(self, comps: Sequence[Composition]) -> list[tuple[float, float]]:
        """pruning.bounds of `comps`, in composition order, computed by the workers in slices
        (about four a worker); in this process if a worker dies meanwhile."""
        from concurrent.futures.process import BrokenProcessPool

        from fasop.pareto.pruning import bound_worker, bounds

        if self.pool is None:
            self.pool = process_pool(self.workers, init_sweep_worker, (self.job,))
        size = max(1, -(-len(comps) // (4 * self.workers)))
        try:
            return [b for part in self.pool.map(bound_worker, [comps[i:i + size] for i in range(0, len(comps), size)])
                    for b in part]
        except BrokenProcessPool:
            _stop(self.pool)
            self.pool = None
            return bounds(self.job, comps)

    def next_result(self) -> tuple[int, CompositionResult]:
        import concurrent.futures as futures
        from concurrent.futures.process import BrokenProcessPool

        with terminable():
            done, _ = futures.wait(self.running, return_when=futures.FIRST_COMPLETED)
        # finished compositions before an interruption or a lost worker among the same done
        # futures: a worker interrupted on its second task has finished its first, keep that one
        finished = [f for f in done if f.exception() is None]
        future = min(finished or done, key=lambda f: self.running[f][0])
        task = self.running.pop(future)
        try:
            return task[0], future.result()
        except Interrupted:
            raise KeyboardInterrupt from None
        except BrokenProcessPool:
            self._restart(task)
            return self.next_result()

    def _restart(self, lost: Task) -> None:
        """A worker died: run every unfinished task again on a new pool (each at most MAX_RETRIES
        times; past that, a one-line error naming the composition)."""
        tasks = [lost] + [task for f, task in self.running.items() if not (f.done() and f.exception() is None)]
        finished = {f: task for f, task in self.running.items() if f.done() and f.exception() is None}
        for index, comp, _ in tasks:
            self.retries[index] = self.retries.get(index, 0) + 1
            if self.retries[index] > MAX_RETRIES:
                raise FasopError(f"--max-nodes: the worker process searching {comp.label} died "
                                 f"{self.retries[index]} times (out of memory?); rerun with --resume and "
                                 "fewer --workers, or leave that composition out")
        _stop(self.pool)
        self.pool, self.running = None, finished
        self.submit(tasks)

    def close(self) -> None:
        if self.pool is not None:
            _stop(self.pool)
            self.pool = None
        self.running = {}


def make_executor(job: SweepJob, kind: str = "local", workers: int = 1, ray_address: str | None = None,
                  ray_connect_timeout_s: float | None = None):
    """The executor for --executor (local: this process when workers == 1, else a process pool;
    ray: fasop.pareto.ray_executor, a private local instance of `workers` CPUs without an address)."""
    if kind not in EXECUTORS:
        raise FasopError(f"--executor: unknown executor {kind!r} (known: {', '.join(EXECUTORS)})")
    if kind == "ray":
        from fasop.pareto.ray_executor import CONNECT_TIMEOUT_S, RayExecutor

        return RayExecutor(job, ray_address, cpus=workers, connect_timeout_s=ray_connect_timeout_s or CONNECT_TIMEOUT_S)
    if workers < 1:
        raise FasopError(f"--workers: must be >= 1, got {workers}")
    return SerialExecutor(job) if workers == 1 else PoolExecutor(job, workers)
