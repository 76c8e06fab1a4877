"""Signals and worker processes (fasop/core/workers.py): SIGTERM behaves like Ctrl-C (the finished
part written, marked incomplete, exit 143), and no worker outlives its parent, even on kill -9.

These run `python -m fasop` in a subprocess on the shipped gpt2xl spec, long enough (a pareto
sweep over 168 compositions takes ~40 s on 2 cores) to be signalled half-way. Linux only: they
read /proc for the worker processes.
"""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO
from fasop.core.workers import available_cores, clamp_workers

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc (Linux)")

PARETO = [sys.executable, "-m", "fasop", "pareto", "--model", "gpt2xl", "--cluster", "fasop-paper-pareto",
          "--max-nodes", "a100=12,a10=12", "--workers", "2", "--out-prefix", "sweep", "--no-progress",
          "--exhaustive"]  # every composition searched: pruned, the sweep takes ~5 s, too short to signal half-way
SEARCH = [sys.executable, "-m", "fasop", "search", "--model", "gpt2xl", "--cluster", "fasop-paper-pareto",
          "--nodes", "a100=4,a10=6", "--heterogeneous", "--placements", "all", "--workers", "2", "--out", "s.csv",
          "--no-progress", "--every-plan"]  # every plan estimated (~45 s): the default top 5 ends in ~1 s


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _alive(pid: int) -> bool:
    """Running (a zombie, dead but not yet reaped by init, counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _start(argv: list[str], cwd: Path) -> tuple[subprocess.Popen, list[int]]:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while len(workers := _children(proc.pid)) < 2:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the workers did not start"
        time.sleep(0.1)
    return proc, workers


def _gone_within(pids: list[int], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while any(_alive(pid) for pid in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


@pytest.mark.skipif(available_cores() < 2, reason="needs 2 cores for 2 workers")
def test_sigterm_during_pareto_writes_the_finished_part_and_exits_143(tmp_path):
    proc, workers = _start(PARETO, tmp_path)
    checkpoint = tmp_path / "sweep_pareto.checkpoint"
    deadline = time.monotonic() + 120
    # signalled once a composition is finished (the checkpoint's header and one record), not
    # after a fixed sleep: a faster machine would finish the sweep before it
    while not (checkpoint.exists() and checkpoint.read_text().count("\n") >= 2):
        assert proc.poll() is None, "the sweep ended before the signal: make it longer"
        assert time.monotonic() < deadline, "no composition finished in 120 s"
        time.sleep(0.05)
    assert proc.poll() is None, "the sweep ended before the signal: make it longer"
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert _gone_within(workers, 5)
    assert "interrupted after" in err and "Traceback" not in err
    with open(tmp_path / "sweep_pareto.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert 1 <= len(rows) < 168
    assert {row["complete"] for row in rows} == {"False"}
    assert not (tmp_path / "sweep_pareto.png").exists()  # no plots of a partial sweep
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "sweep_pareto.checkpoint", "sweep_pareto.csv"]  # no temporary file; the checkpoint --resume continues from


@pytest.mark.skipif(available_cores() < 2, reason="needs 2 cores for 2 workers")
def test_sigterm_during_search_writes_the_plans_estimated_marked_incomplete(tmp_path):
    """Like pareto: the plans estimated before the signal are written with complete=False (issue
    30 item 7; before, nothing was written)."""
    proc, workers = _start([a for a in SEARCH if a != "--no-progress"], tmp_path)
    first = proc.stderr.readline()  # a progress line (every 5 s): some plans are estimated and kept
    assert first.startswith("fasop: estimating:"), first
    assert proc.poll() is None, "the search ended before the signal: make it longer"
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert _gone_within(workers, 5)
    assert "interrupted after" in err and "complete=False" in err and "Traceback" not in err
    with open(tmp_path / "s.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert rows and {row["complete"] for row in rows} == {"False"}
    times = [float(r["step_time_s"]) for r in rows if r["is_oom"] == "False"]
    assert times == sorted(times)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.csv"]  # no temporary file


@pytest.mark.skipif(available_cores() < 2, reason="needs 2 cores for 2 workers")
@pytest.mark.parametrize("argv", [PARETO, SEARCH], ids=["pareto", "search"])
def test_kill_9_of_the_parent_takes_the_workers_with_it(tmp_path, argv):
    """PR_SET_PDEATHSIG (and the watchdog thread where it is missing): no worker left after 5 s."""
    proc, workers = _start(argv, tmp_path)
    time.sleep(1)
    proc.kill()
    proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert _gone_within(workers, 5), [pid for pid in workers if _alive(pid)]


def test_workers_above_the_cores_are_clamped_with_a_note():
    cores = available_cores()
    assert clamp_workers(1) == (1, None)
    assert clamp_workers(cores) == (cores, None)
    workers, note = clamp_workers(10**20)
    assert workers == cores and note.startswith("note: --workers 1e+20: ") and f"using {cores}" in note


WATCHDOG_ONLY = """
import os, sys, time
from fasop.core import workers
parent = os.getpid()
child = os.fork()
if child == 0:
    sys.platform = "darwin"  # no PR_SET_PDEATHSIG: the watchdog thread alone
    workers._die_with(parent)
    time.sleep(60)
    os._exit(0)
print(child, flush=True)
os._exit(0)  # the parent dies, its child is left to the watchdog
"""


def test_the_watchdog_alone_ends_an_orphaned_worker(tmp_path):
    """Where the kernel's parent-death signal is missing (macOS), the watchdog thread exits a
    worker within WATCHDOG_S of its parent's death."""
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", WATCHDOG_ONLY], env=env, capture_output=True, text=True, timeout=30)
    child = int(out.stdout.split()[0])
    assert _gone_within([child], 5)


def _deaf_to_sigterm():
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def _mark_and_sleep(path: Path) -> None:
    path.write_text("running")
    time.sleep(60)


def test_stop_kills_a_worker_that_ignores_sigterm(monkeypatch, tmp_path):
    """A worker that does not act on SIGTERM (here: ignores it) is killed after STOP_S, so that
    Ctrl-C never waits on it; the task it ran is abandoned."""
    from fasop.core import workers

    monkeypatch.setattr(workers, "STOP_S", 0.2)
    before = set(_children(os.getpid()))
    pool = workers.process_pool(1, _deaf_to_sigterm, ())
    pool.submit(_mark_and_sleep, tmp_path / "mark")
    while not (tmp_path / "mark").exists():  # the worker runs the task, its initializer done
        time.sleep(0.01)
    started = set(_children(os.getpid())) - before
    workers.stop(pool)
    assert started and not any(_alive(pid) for pid in started)


def test_a_sigterm_inside_a_futures_wait_is_a_termination_not_a_lock_error(tmp_path):
    """SIGTERM's Terminated raised between a Condition's release and re-acquire inside
    future.result() surfaces as threading's RuntimeError "cannot release un-acquired lock" (seen
    in CI): after a SIGTERM, result_of raises Terminated for it; before one the error stands.
    In a process of its own: the SIGTERM is real and its mark stays in that process."""
    script = """
import os, signal, time
from fasop.core import workers

class Broken:
    def result(self):
        raise RuntimeError("cannot release un-acquired lock")

try:
    workers.result_of(Broken())
except RuntimeError:
    print("before: RuntimeError")
with workers.sigterm_as_interrupt():
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
    except workers.Terminated:
        print("sigterm: Terminated")
    try:
        workers.result_of(Broken())
    except workers.Terminated:
        print("after: Terminated")
    try:
        with workers.terminable():  # around futures.wait, as the pareto executors wait
            raise RuntimeError("cannot release un-acquired lock")
    except workers.Terminated:
        print("wait: Terminated")
"""
    out = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert out.stdout.split("\n")[:4] == ["before: RuntimeError", "sigterm: Terminated", "after: Terminated",
                                          "wait: Terminated"], out


def test_completed_yields_every_future_as_it_finishes():
    import concurrent.futures as futures

    from fasop.core.workers import completed

    with futures.ThreadPoolExecutor(2) as pool:
        fs = [pool.submit(pow, 2, k) for k in range(5)]
        assert sorted(f.result() for f in completed(fs)) == [1, 2, 4, 8, 16]
    assert list(completed([])) == []
