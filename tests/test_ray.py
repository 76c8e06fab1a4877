"""`--executor ray` as users run it (docs/ray.md): the local executor's bytes, on a private local
instance and on a head started apart with token authentication; a worker's error stops the sweep
with one line; an unreachable address fails within a bounded time; SIGTERM exits 143 and keeps the
finished compositions; the workers' environment is checked; a dead worker's task is retried.

Ray is an optional extra (pip install 'fasop[ray]', ~240 MB), not in the test extra: without it
the Ray tests are skipped. docs/ray.md, "Tests", gives the command that runs them. Sweeps are tiny
(bert on fasop-paper, up to 1 A100 + 2 A10 nodes): a Ray start takes ~10-30 s on two shared cores.
The first two tests (no_plan reasons, a local worker's error) need no Ray.
"""

from __future__ import annotations

import math
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

import fasop.pareto.ray_executor as ray_executor
import fasop.pareto.sweep as sweep_module
from conftest import REPO
from fasop.cli.command import main
from fasop.core.errors import FasopError, NoPlan
from fasop.pareto.executors import SerialExecutor
from fasop.pareto.pruning import pruned_sweep
from fasop.pareto.sweep import compositions, sweep_job
from fasop.specs.files import shipped_folder
from fasop.specs.load import load_cluster, load_model

ITERATIONS = 1_000_000
MISSING_CATALOG = "/nonexistent/fasop/gpus.yaml"


def _argv(prefix, *extra, max_nodes="a100=1,a10=2"):
    return ["pareto", "--model", str(shipped_folder("model_specs") / "bert.yaml"), "--cluster",
            str(shipped_folder("cluster_specs") / "fasop-paper.yaml"), "--max-nodes", max_nodes, "--iterations",
            str(ITERATIONS), "--out-prefix", str(prefix), "--no-progress", *extra]


def _local_bytes(tmp_path) -> bytes:
    prefix = tmp_path / "local" / "bert"
    assert main(_argv(prefix, "--workers", "1")) == 0
    return prefix.with_name("bert_pareto.csv").read_bytes()


def _env() -> dict:
    """A subprocess's environment: this fasop importable (by the driver and by Ray's workers)."""
    return dict(os.environ, PYTHONPATH=str(REPO))


# ============================================================================ without Ray
def test_no_plan_rows_say_why(tmp_path, monkeypatch):
    """A composition without a valid plan is status no_plan, its reason in no_plan_reason."""
    real = sweep_module.search

    def search(model, cluster, inventory, **options):
        if len(inventory) == 3:
            raise NoPlan("no valid plan: 3 nodes (test)")
        return real(model, cluster, inventory, **options)

    monkeypatch.setattr(sweep_module, "search", search)
    prefix = tmp_path / "bert"
    assert main(_argv(prefix, "--workers", "1", "--exhaustive")) == 0
    import csv

    with open(prefix.with_name("bert_pareto.csv"), newline="") as fh:
        rows = {r["composition"]: r for r in csv.DictReader(fh)}
    assert rows["1xa100+2xa10"]["status"] == "no_plan"
    assert rows["1xa100+2xa10"]["no_plan_reason"] == "no valid plan: 3 nodes (test)"
    assert all(r["no_plan_reason"] == "" for k, r in rows.items() if k != "1xa100+2xa10")


def test_a_spec_error_in_the_search_stops_the_local_sweep(tmp_path, capsys, monkeypatch):
    """Not every error is "no plan": a catalog that cannot be read stops the sweep, exit 2."""
    from fasop.specs.catalog import load_gpus

    def search(*args, **options):
        load_gpus(MISSING_CATALOG)

    monkeypatch.setattr(sweep_module, "search", search)
    assert main(_argv(tmp_path / "bert", "--workers", "1")) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"fasop: error: {MISSING_CATALOG}") and err.count("\n") == 1, err
    assert not (tmp_path / "bert_pareto.csv").exists()


# ============================================================================ Ray in this process
@pytest.fixture(scope="module")
def local_ray():
    """A Ray instance for this module's in-process tests (2 CPUs), shut down after them."""
    ray = pytest.importorskip("ray", reason="Ray not installed (optional extra fasop[ray]); Ray executor untested")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # this module's jobs travel by value
    yield ray
    ray.shutdown()


def test_ray_executor_writes_the_bytes_of_the_local_one(tmp_path, local_ray):
    want = _local_bytes(tmp_path)
    prefix = tmp_path / "ray" / "bert"
    assert main(_argv(prefix, "--round-size", "2", "--executor", "ray")) == 0
    assert prefix.with_name("bert_pareto.csv").read_bytes() == want


def _unreadable_catalog(job, comp, cutoff):
    """A Ray task whose worker cannot read fasop's GPU catalog (an install without its data)."""
    from fasop.specs.catalog import load_gpus

    load_gpus(MISSING_CATALOG)
    return job(comp, cutoff)


def test_a_worker_spec_error_fails_the_sweep_with_one_line(tmp_path, capsys, monkeypatch, local_ray):
    monkeypatch.setattr(ray_executor, "search_task", _unreadable_catalog)
    assert main(_argv(tmp_path / "bert", "--executor", "ray")) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[-1].startswith("fasop: error: --executor ray: the Ray worker searching "), err
    assert f"failed: SpecError: {MISSING_CATALOG}" in err[-1], err
    assert not (tmp_path / "bert_pareto.csv").exists()


def test_workers_of_another_fasop_are_refused(tmp_path, monkeypatch, local_ray):
    model, cluster = load_model("bert"), load_cluster("fasop-paper")
    comps = compositions({"a100": 1, "a10": 1})
    job = sweep_job(model, cluster, comps, placements="cyclic", partitioner="optimal", iterations=ITERATIONS,
                    spot=False, top=1, partition_budget=1000)
    monkeypatch.setattr(ray_executor, "worker_environment", _other_fasop_on_workers)
    with pytest.raises(FasopError) as exc:
        ray_executor.RayExecutor(job, None)
    assert "differ from this process in fasop version: '0.0.0-other'" in str(exc.value)
    assert "\n" not in str(exc.value)


def _other_fasop_on_workers(job):
    """worker_environment, except that Ray's workers (not this process) report another fasop version."""
    found = _REAL_ENVIRONMENT(job)
    return found if os.getpid() == _DRIVER else dict(found, **{"fasop version": "0.0.0-other"})


_REAL_ENVIRONMENT = ray_executor.worker_environment
_DRIVER = os.getpid()


class _DiesOnce:
    """A sweep job whose worker process dies the first time it is given composition `label`."""

    def __init__(self, job, label: str, flag: str):
        self.job, self.label, self.flag, self.options = job, label, flag, job.options

    def __call__(self, comp, cutoff=math.inf):
        if comp.label == self.label and not os.path.exists(self.flag):
            open(self.flag, "w").close()
            os._exit(1)
        return self.job(comp, cutoff)


def test_ray_retries_the_composition_of_a_dead_worker(tmp_path, local_ray):
    model, cluster = load_model("bert"), load_cluster("fasop-paper")
    comps = compositions({"a100": 1, "a10": 2})
    job = sweep_job(model, cluster, comps, placements="cyclic", partitioner="optimal", iterations=ITERATIONS,
                    spot=False, top=1, partition_budget=1000)
    flag = tmp_path / "died"
    executor = ray_executor.RayExecutor(_DiesOnce(job, "1xa100+1xa10", str(flag)), None, check=False)
    got = dict(pruned_sweep(job, comps, executor, prune=False))
    want = dict(pruned_sweep(job, comps, SerialExecutor(job), prune=False))
    assert flag.exists()
    assert [got[i].best.step_time_s for i in range(len(comps))] == [want[i].best.step_time_s for i in range(len(comps))]


# ============================================================================ Ray in a subprocess
@pytest.fixture
def ray_bin():
    pytest.importorskip("ray", reason="Ray not installed (optional extra fasop[ray]); Ray executor untested")
    return Path(sys.executable).parent / "ray"


def test_an_unreachable_address_fails_within_the_timeout(tmp_path, ray_bin):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = time.monotonic()
    run = subprocess.run([sys.executable, "-m", "fasop", *_argv(tmp_path / "bert", "--executor", "ray",
                          "--ray-address", f"127.0.0.1:{port}", "--ray-connect-timeout", "5")],
                         env=_env(), cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert run.returncode == 2, run.stderr
    assert time.monotonic() - start < 60
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith(f"fasop: error: --ray-address: cannot reach Ray at '127.0.0.1:{port}'"), run.stderr


SLOW_DRIVER = """
import sys, time
import fasop.pareto.ray_executor as rx
def slow(job, comp, cutoff):
    time.sleep(3.0)
    return job(comp, cutoff)
rx.search_task = slow
from fasop.cli.command import main
sys.exit(main(sys.argv[1:]))
"""


def _records(path: Path) -> int:
    return max(0, len(path.read_bytes().splitlines()) - 1) if path.exists() else 0


def test_sigterm_during_a_ray_sweep_exits_143_and_keeps_the_finished(tmp_path, ray_bin):
    """SIGTERM after the first composition finished: exit 143, the finished ones in the CSV
    (complete=False) and the checkpoint; --resume (here with the local executor) then writes
    the bytes of an uninterrupted run."""
    want = _local_bytes(tmp_path)
    prefix = tmp_path / "t" / "bert"
    checkpoint = prefix.with_name("bert_pareto.checkpoint")
    process = subprocess.Popen([sys.executable, "-c", SLOW_DRIVER, *_argv(prefix, "--executor", "ray",
                                "--workers", "2", "--round-size", "1")], env=_env(), cwd=tmp_path,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while process.poll() is None and _records(checkpoint) < 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert process.poll() is None, process.stderr.read()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=120) == 143, process.stderr.read()
    finally:
        if process.poll() is None:
            process.kill()
    err = process.stderr.read()
    assert "fasop: interrupted after " in err and "rerun with --resume" in err, err
    kept = _records(checkpoint)
    assert 1 <= kept < 5
    assert prefix.with_name("bert_pareto.csv").read_text().count(",False,") >= kept  # complete=False rows
    assert main(_argv(prefix, "--workers", "1", "--round-size", "1", "--resume")) == 0
    assert prefix.with_name("bert_pareto.csv").read_bytes() == want


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


@pytest.fixture
def token_head(ray_bin):
    """A Ray head started apart (`ray start --head --block`, token authentication on, its own
    temp dir), in its own process group, which teardown ends (SIGTERM, then SIGKILL)."""
    port, token = _free_port(), secrets.token_hex(32)
    temp = tempfile.mkdtemp(prefix="fray", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
    env = dict(_env(), RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token)
    head = subprocess.Popen([str(ray_bin), "start", "--head", f"--port={port}", "--num-cpus=2", "--block",
                             "--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={temp}"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and head.poll() is None:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.5)
        assert head.poll() is None, "ray start --head exited"
        yield port, token
    finally:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(head.pid, sig)
                head.wait(timeout=30)
                break
            except (ProcessLookupError, subprocess.TimeoutExpired):
                continue


def test_a_head_started_apart_with_token_auth_gives_the_local_bytes(tmp_path, token_head):
    """Joined with --ray-address; the driver has the token (RAY_AUTH_TOKEN) but no RAY_AUTH_MODE:
    fasop turns token mode on (ray.init with an explicit address does not)."""
    port, token = token_head
    want = _local_bytes(tmp_path)
    prefix = tmp_path / "head" / "bert"
    env = {k: v for k, v in _env().items() if k not in ("RAY_AUTH_MODE", "RAY_ADDRESS")} | {"RAY_AUTH_TOKEN": token}
    run = subprocess.run([sys.executable, "-m", "fasop", *_argv(prefix, "--executor", "ray", "--ray-address",
                          f"127.0.0.1:{port}")], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert f"note: --executor ray: the Ray cluster at 127.0.0.1:{port}: 1 node, 2 CPUs" in run.stderr
    assert prefix.with_name("bert_pareto.csv").read_bytes() == want


def _server(answer: bytes | None):
    """A TCP server on a free port of every interface (Ray reads 127.0.0.1 as this node's address) that, per
    connection, sends `answer` at once (None: nothing) and keeps the connection open a while."""
    import threading

    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("0.0.0.0", 0))
    listener.listen()

    def serve():
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            if answer is not None:
                conn.sendall(answer)
            time.sleep(3)
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    return listener, listener.getsockname()[1]


@pytest.mark.parametrize("answer, said", [
    (b"HTTP/1.1 400 Bad Request\r\n\r\n", "it answered b'HTTP/1.1 '"),   # an HTTP/1 server: the dashboard's port
    (b"-ERR unknown command\r\n", "it answered b'-ERR unkn'"),           # a Redis
    (None, "it sent nothing"),
])
def test_a_port_that_does_not_speak_grpc_is_refused_within_the_connect_timeout(answer, said):
    """Ray's client retries a port that accepts TCP but is not its GCS for some 14 minutes (20 attempts of ~41 s,
    Ray 2.60, printing its errors): the probe sends HTTP/2's preface and wants a gRPC server's SETTINGS frame back."""
    listener, port = _server(answer)
    start = time.monotonic()
    with pytest.raises(FasopError) as err, listener:
        ray_executor.probe(f"127.0.0.1:{port}", 1.0)
    assert time.monotonic() - start < 5.0   # the 1 s timeout, with room for a loaded machine
    text = str(err.value)
    assert "accepts connections but does not answer as Ray (gRPC) within --ray-connect-timeout 1 s" in text
    assert said in text and "\n" not in text


def test_a_grpc_server_passes_the_probe():
    listener, port = _server(bytes([0, 0, 6, 4, 0, 0, 0, 0, 0]) + bytes(6))   # SETTINGS, one setting
    with listener:
        ray_executor.probe(f"127.0.0.1:{port}", 2.0)


def test_the_probe_leaves_tls_to_ray(monkeypatch):
    """With RAY_USE_TLS the connection starts with a TLS handshake: only reachability is checked."""
    monkeypatch.setenv("RAY_USE_TLS", "1")
    listener, port = _server(None)
    with listener:
        ray_executor.probe(f"127.0.0.1:{port}", 1.0)


def test_the_probe_is_bounded_as_a_whole_and_a_reset_is_no_ray():
    """A server that drips a byte at a time is refused within the connect timeout, not per byte; one that
    resets the connection after accepting it is reachable, and not Ray."""
    import threading

    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("0.0.0.0", 0))
    listener.listen()

    def drip():
        conn, _ = listener.accept()
        try:
            for _ in range(12):
                time.sleep(0.9)
                conn.sendall(b"x")
        except OSError:   # the probe has given up and closed
            pass
        conn.close()

    threading.Thread(target=drip, daemon=True).start()
    start = time.monotonic()
    with pytest.raises(FasopError, match="does not answer as Ray"), listener:
        ray_executor.probe(f"127.0.0.1:{listener.getsockname()[1]}", 1.0)
    assert time.monotonic() - start < 5.0   # a timeout per byte would read 9 bytes: 8.1 s

    import struct

    resetter = socket.socket()
    resetter.bind(("0.0.0.0", 0))
    resetter.listen()

    def reset():
        conn, _ = resetter.accept()
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.close()   # RST

    threading.Thread(target=reset, daemon=True).start()
    with pytest.raises(FasopError, match="accepts connections but does not answer as Ray"), resetter:
        ray_executor.probe(f"127.0.0.1:{resetter.getsockname()[1]}", 1.0)


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "1e9", "abc"])
def test_a_connect_timeout_that_would_not_bound_the_wait_is_refused(tmp_path, capsys, value):
    """--ray-connect-timeout is seconds in (0, 3600]: 0, nan, inf (a traceback in the probe once) and a huge value
    are refused by the parser, before Ray is needed."""
    with pytest.raises(SystemExit) as exc:
        main(["pareto", "--model", "bert", "--cluster", str(shipped_folder("cluster_specs") / "fasop-paper.yaml"),
              "--max-nodes", "a100=1", "--executor", "ray", "--ray-address", "127.0.0.1:1",
              "--ray-connect-timeout", value, "--out-prefix", str(tmp_path / "r")])
    assert exc.value.code == 2
    assert "--ray-connect-timeout: expected seconds in (0, 3600]" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())
