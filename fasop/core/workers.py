"""Worker processes and signals: a process pool whose workers never outlive the parent, SIGTERM
handled as SIGINT is, and --workers kept to the CPU cores there are.

- Workers die with the parent, even on `kill -9`: on Linux each worker asks the kernel for
  SIGKILL when its parent dies (prctl PR_SET_PDEATHSIG); everywhere, a watchdog thread in each
  worker exits it within WATCHDOG_S of finding itself re-parented.
- Workers ignore SIGINT and take SIGTERM's default action: Ctrl-C and SIGTERM are the parent's to
  handle; it stops the workers (`stop`) and writes what it can.
- `sigterm_as_interrupt()`: in the CLI, SIGTERM raises `Terminated`, a KeyboardInterrupt, so every
  path that handles Ctrl-C handles it too; the exit status is 143 instead of 130.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from functools import lru_cache
from typing import TYPE_CHECKING

from fasop.core import limits

if TYPE_CHECKING:  # imported where a pool is made: a search without one starts faster
    import concurrent.futures as futures

WATCHDOG_S = 0.5
"""How often a worker checks that its parent is alive (where PR_SET_PDEATHSIG is not available)."""
_PR_SET_PDEATHSIG = 1


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread like Ctrl-C's KeyboardInterrupt."""


def exit_status(interrupt: BaseException) -> int:
    """130 for Ctrl-C (SIGINT), 143 for SIGTERM: 128 + the signal number, as shells report it."""
    return 128 + (signal.SIGTERM if isinstance(interrupt, Terminated) else signal.SIGINT)


_TERMINATED: list[bool] = [False]
"""Whether sigterm_as_interrupt's handler has run in this process."""


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """While inside, SIGTERM raises Terminated in the main thread (no-op outside the main thread)."""
    def raise_terminated(signum, frame):
        _TERMINATED[0] = True
        raise Terminated()

    try:
        previous = signal.signal(signal.SIGTERM, raise_terminated)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def terminable() -> Iterator[None]:
    """Around a wait on worker futures (`future.result()`, `futures.wait`, `as_completed`): a
    SIGTERM whose Terminated is raised inside the wait, between its Condition's release and
    re-acquire, surfaces as threading's RuntimeError "cannot release un-acquired lock" instead;
    after a SIGTERM that is the termination, raised as Terminated (a search or sweep then writes
    what it finished and exits 143, not a traceback and 1)."""
    try:
        yield
    except RuntimeError:
        if _TERMINATED[0]:
            raise Terminated() from None
        raise


def result_of(future):
    """`future.result()` under `terminable`."""
    with terminable():
        return future.result()


def completed(fs) -> Iterator:
    """`concurrent.futures.as_completed(fs)`, each wait under `terminable`."""
    import concurrent.futures as futures

    done = futures.as_completed(fs)
    while True:
        with terminable():
            future = next(done, None)
        if future is None:
            return
        yield future


def available_cores() -> int:
    """CPU cores this process may run on (the scheduler's affinity where the OS has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows
        return max(1, os.cpu_count() or 1)


def clamp_workers(requested: int) -> tuple[int, str | None]:
    """(workers to start, a note when fewer than requested): at most the available cores."""
    cores = min(available_cores(), limits.WORKERS)
    if requested <= cores:
        return requested, None
    shown = f"{requested:,}" if requested < 10**12 else f"{requested:.3g}"
    return cores, f"note: --workers {shown}: {cores} CPU core{'s' if cores > 1 else ''} available; using {cores}"


@lru_cache(maxsize=None)
def _pool_class() -> type:
    """A ProcessPoolExecutor that, left by an exception (Ctrl-C, SIGTERM, an error), stops its
    workers at once instead of waiting for the tasks they run. (Made on first use: importing
    concurrent.futures and multiprocessing costs a process that starts no pool ~10 ms.)"""
    import concurrent.futures

    class _Pool(concurrent.futures.ProcessPoolExecutor):
        def __exit__(self, exc_type, exc, tb):
            if exc_type is not None:
                stop(self)
                return False
            return super().__exit__(exc_type, exc, tb)

    return _Pool


_IMPORTING: list = []
"""The threads `import_in_background` started; `process_pool` waits for them before it forks."""


def import_in_background(*modules: str) -> None:
    """Import `modules` in a daemon thread while this process waits on its workers. A pool made later waits for
    it: a worker forked while another thread imports inherits that module's lock held, by a thread that does not
    exist in the worker, and waits on it forever."""
    import importlib
    import threading

    def load() -> None:
        for name in modules:
            importlib.import_module(name)

    thread = threading.Thread(target=load, daemon=True, name="fasop-import")
    _IMPORTING.append(thread)
    thread.start()


def process_pool(workers: int, initializer: Callable, initargs: tuple) -> futures.ProcessPoolExecutor:
    """A pool of `workers` processes, forked where the OS can (the parent's imports and caches
    come along), spawned elsewhere; each worker dies with this process (see the module doc).
    Background imports finish first (`import_in_background`)."""
    import multiprocessing

    while _IMPORTING:
        _IMPORTING.pop().join()

    context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else None)
    return _pool_class()(workers, mp_context=context, initializer=_start_worker,
                 initargs=(os.getpid(), initializer, initargs))


def stop(pool: futures.ProcessPoolExecutor) -> None:
    """Stop a pool now: cancel what has not started and end the workers (a task can take minutes)."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(STOP_S)
        if process.is_alive():  # SIGTERM not acted on (e.g. a worker forked mid-start, still in a lock)
            process.kill()
            process.join()


STOP_S = 5.0
"""Seconds `stop` waits for a worker to end on SIGTERM before it sends SIGKILL."""


def _start_worker(parent: int, initializer: Callable, initargs: tuple) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the parent's Terminated, inherited by fork
    _die_with(parent)
    initializer(*initargs)


def _die_with(parent: int) -> None:
    """Exit this process when `parent` dies: the kernel's parent-death signal where there is one,
    and a watchdog thread that polls the parent's id in any case."""
    if sys.platform.startswith("linux"):
        import ctypes
        import ctypes.util

        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)
    import threading

    threading.Thread(target=_watch, args=(parent,), daemon=True, name="fasop-parent-watchdog").start()


def _watch(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(WATCHDOG_S)
    os._exit(1)
