"""Runs one shard of the fuzz cases (tests/fuzz_cases.py) in this process, under limits, and
prints one JSON line per case, then one with this process's peak memory.

    python tests/fuzz_worker.py SHARD SHARDS BASE_FOLDER

Limits: address space MEMORY_BYTES for the whole process (an allocation past it fails, and the
case is reported as a traceback); CASE_S CPU seconds (SIGPROF) and CASE_WALL_S wall seconds
(SIGALRM) per case, either reported as a hang. Each case runs in BASE_FOLDER/c<id>/work through fasop.cli.command.main, stdout and stderr
captured.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import resource
import signal
import stat
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MPLBACKEND", "Agg")

MEMORY_BYTES = 1 << 30
"""1 GiB of address space (the interpreter with numpy, pandas and matplotlib loaded takes ~0.25 GiB)."""
CASE_S = 20
"""CPU seconds a case may take (its process's user + system time, SIGPROF): a hang that spins,
however loaded the machine is."""
CASE_WALL_S = 120
"""Wall seconds a case may take (SIGALRM): a hang that waits (e.g. on a FIFO nobody writes),
generous so that a busy machine does not read as a hang."""


class _Hang(BaseException):
    pass


def _alarm(signum, frame):
    raise _Hang()


def _make_special(path: Path, kind: str) -> None:
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dir":
        path.mkdir()
    elif kind in ("devzero", "devnull"):
        path.symlink_to(f"/dev/{kind[3:]}")
    elif kind == "device":  # a null device (root only), else a link to /dev/null (which only root could replace)
        try:
            os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        except OSError:
            path.symlink_to("/dev/null")
    elif kind == "link":
        (path.parent / "target.csv").write_text("keep\n")
        path.symlink_to("target.csv")
    elif kind == "dangling":
        path.symlink_to("nowhere.csv")


def _files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if not p.is_dir() or p.is_symlink()}


def run_case(case: dict, base: Path, fasop_main) -> dict:
    case_dir = base / f"c{case['id']}"
    work = case_dir / "work"
    work.mkdir(parents=True)
    for name, content in case["files"].items():
        (work / name).write_bytes(content.encode() if isinstance(content, str) else content)
    for name, kind in case.get("special", {}).items():
        _make_special(work / name, kind)
    before = _files(work)
    os.chdir(work)
    out, err, error = io.StringIO(), io.StringIO(), ""
    start = time.monotonic()
    signal.setitimer(signal.ITIMER_PROF, CASE_S)
    signal.alarm(CASE_WALL_S)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = fasop_main(case["argv"])
    except SystemExit as exc:  # argparse
        status = exc.code if isinstance(exc.code, int) else 2
    except _Hang:
        status = "hang"
    except BaseException:  # noqa: BLE001 -- exactly what the harness looks for
        status, error = "traceback", traceback.format_exc()
    finally:
        signal.alarm(0)
        signal.setitimer(signal.ITIMER_PROF, 0)
        os.chdir(base)
    elapsed = time.monotonic() - start
    new = sorted(_files(work) - before)
    return {"id": case["id"], "family": case["family"], "expect": case["expect"], "argv": case["argv"][:12],
            "status": status, "stderr": err.getvalue()[-3000:], "stdout_chars": len(out.getvalue()), "error": error[-3000:], "seconds": elapsed,
            "new": new, "outside": sorted(p.name for p in case_dir.iterdir() if p.name != "work"),
            "link_target": (work / "target.csv").read_text() if (work / "target.csv").exists() else None,
            "inside": case.get("inside")}


def main(shard: int, shards: int, base: str) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    signal.signal(signal.SIGALRM, _alarm)
    signal.signal(signal.SIGPROF, _alarm)
    from fuzz_cases import all_cases

    from fasop.cli.command import main as fasop_main

    base_path = Path(base).resolve()
    for case in all_cases():
        if case["id"] % shards == shard:
            print(json.dumps(run_case(case, base_path, fasop_main)), flush=True)
    print(json.dumps({"maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}), flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
