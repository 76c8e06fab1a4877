"""`--executor ray`: a sweep's compositions as Ray tasks (docs/ray.md).

- Which Ray: with --ray-address (or $RAY_ADDRESS) that cluster; without, a private local
  instance (`address="local"`, --workers CPUs) started for the run and stopped after it, never a
  cluster a `ray start` left running on the machine. `description` says which, for the CLI to print.
- Connecting is bounded: the address's host and port are probed within `connect_timeout_s` first --
  reachable over TCP, and answering HTTP/2's preface as a gRPC server does -- so an unreachable address,
  or a port that is not Ray's (which Ray's client would retry for minutes), fails in that time with one line.
- Token authentication (Ray >= 2.5x turns it on by default): `ray.init` with an explicit address
  only sends a token when RAY_AUTH_MODE=token; when that variable is unset and a token is
  available (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token, where Ray looks), token
  mode is set for this process. A failed connection's line says what to set.
- Signals: `ray.init` installs a SIGTERM handler that exits 15; the handler in effect before
  it (the CLI's: SIGTERM raises Terminated) is put back, so SIGTERM exits 143 and keeps the
  finished compositions. Waiting for results polls (`ray.wait` with a timeout) so a signal is
  acted on within WAIT_S.
- The workers' environment: before the first task, one cheap task on every alive node returns
  its fasop version, the digest of its package data and whether it can make the estimator for
  each node type; any difference from this process refuses the sweep with one line.
- A task's error: NoPlan never leaves the worker (it is the composition's no_plan reason);
  any other error stops the sweep with one line naming the composition and the worker's error.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Sequence
from pathlib import Path

from fasop.core.errors import FasopError
from fasop.pareto.sweep import Composition, CompositionResult, SweepJob

CONNECT_TIMEOUT_S = 30.0
"""Default of --ray-connect-timeout: seconds to reach the address before giving up."""
CHECK_TIMEOUT_S = 300.0
"""Seconds the workers' environment check may take (a node may start its first worker slowly)."""
WAIT_S = 0.5
"""How often the driver wakes while it waits for a task (signals are handled in between)."""
MAX_RETRIES = 2
"""Times Ray runs a task again after the worker running it died."""
AUTH_HELP = ("if the cluster uses token authentication (Ray's default from 2.5x), set RAY_AUTH_TOKEN to the "
             "head's token (`ray get-auth-token` there) or RAY_AUTH_TOKEN_PATH to a file holding it (docs/ray.md)")


def search_task(job: SweepJob, comp: Composition, cutoff: float) -> CompositionResult:
    """A composition's search, as a Ray task runs it."""
    return job(comp, cutoff)


def worker_environment(job: SweepJob) -> dict[str, str]:
    """What the sweep needs of the process it runs in: fasop's version, the digest of the
    package data (specs, catalog) and the error, if any, of making the estimator of one node of
    each type (where the catalog is read)."""
    from fasop import __version__
    from fasop.estimators import make_estimator
    from fasop.specs.files import data_digest

    errors = []
    for name in job.prices:
        try:
            make_estimator(job.model, job.cluster, (job.cluster.node_types[name],),
                           partitioner=job.options["partitioner"], partition_budget=job.options["partition_budget"],
                           **job.options.get("estimator_options", {}))
        except Exception as exc:  # noqa: BLE001 - reported, whatever it is
            errors.append(f"{name}: {type(exc).__name__}: {_first_line(exc)}")
    return {"fasop version": __version__, "package data digest": data_digest(), "estimator": "; ".join(errors)}


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[-1] if "Traceback" in text else (text.splitlines() or [""])[0]


H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
"""HTTP/2's client connection preface and an empty SETTINGS frame (RFC 9113 §3.4): a gRPC server (Ray's GCS, the
Ray Client server) answers with its own SETTINGS frame (type 4 in the fourth byte of its 9-byte header)."""


def probe(address: str, timeout_s: float) -> None:
    """One line when nothing listens at the host:port `address` resolves to within timeout_s, or what listens
    there does not speak gRPC (HTTP/2) within it -- Ray's own client would retry such a port for minutes (20
    attempts of ~40 s at Ray 2.60, printing its errors); not checked with RAY_USE_TLS (a TLS handshake first)."""
    target = _host_port(address)
    if target is None:
        return
    host, port = target
    deadline = time.monotonic() + timeout_s   # connecting and the answer together
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            if _tls():
                return
            answer = _h2_answer(sock, deadline)
    except ConnectionResetError:   # accepted, then reset before the connect returned: reached, not Ray
        answer = b""
    except OSError as exc:
        reason = "timed out" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc))
        raise FasopError(f"--ray-address: cannot reach Ray at {address!r} ({host}:{port}) within "
                         f"--ray-connect-timeout {timeout_s:g} s: {reason}") from None
    if answer is not None and len(answer) == 9 and answer[3] == 4:
        return
    said = "it sent nothing" if answer is None else "it closed the connection" if not answer else \
        f"it answered {answer!r}"
    raise FasopError(f"--ray-address: {address!r} ({host}:{port}) accepts connections but does not answer as Ray "
                     f"(gRPC) within --ray-connect-timeout {timeout_s:g} s: {said}; give the head's GCS port (`ray "
                     "start --head --port`, default 6379; not the dashboard's 8265) or ray://host:10001 (Ray Client)")


def _h2_answer(sock: socket.socket, deadline: float) -> bytes | None:
    """The first 9 bytes the server sends after HTTP/2's preface by `deadline` (time.monotonic; fewer where it
    closes or resets the connection, or the time runs out), None where it sends nothing in time (a gRPC server
    sends its SETTINGS at once)."""
    got = b""
    try:
        sock.sendall(H2_PREFACE)
        while len(got) < 9:
            sock.settimeout(max(deadline - time.monotonic(), 1e-3))
            chunk = sock.recv(9 - len(got))
            if not chunk:
                break
            got += chunk
    except TimeoutError:
        return got or None
    except (ConnectionResetError, BrokenPipeError):   # reached, then refused: not a Ray server either
        return got
    return got


def _tls() -> bool:
    return os.environ.get("RAY_USE_TLS", "0").strip().lower() not in ("", "0", "false", "no")


def _host_port(address: str) -> tuple[str, int] | None:
    """(host, port) Ray would connect to for `address` (ray://host:port, host:port, auto)."""
    if address.startswith("ray://"):
        rest = address[len("ray://"):]
    else:
        try:  # Ray's own reading: auto -> the last `ray start` here; localhost -> this node's IP
            from ray._private.services import canonicalize_bootstrap_address

            rest = canonicalize_bootstrap_address(address) or ""
        except (ImportError, AttributeError):
            rest = address
        except (ValueError, ConnectionError) as exc:
            raise FasopError(f"--ray-address: {address!r}: {_first_line(exc)}") from None
    host, sep, port = rest.rpartition(":")
    if not sep or not port.isdigit():
        if address == "auto":
            raise FasopError("--ray-address auto: no Ray cluster started on this machine (ray start --head)")
        raise FasopError(f"--ray-address: {address!r} is not HOST:PORT or ray://HOST:PORT")
    return host.strip("[]"), int(port)


def token_available() -> bool:
    """Whether this process has a Ray authentication token where Ray looks for one."""
    if os.environ.get("RAY_AUTH_TOKEN"):
        return True
    path = os.environ.get("RAY_AUTH_TOKEN_PATH") or str(Path.home() / ".ray" / "auth_token")
    return os.path.isfile(path)


def _use_token_auth(ray) -> None:
    """RAY_AUTH_MODE=token for this process when it is unset and a token is available (ray.init
    with an explicit address does not do this itself)."""
    if "RAY_AUTH_MODE" in os.environ or not token_available():
        return
    os.environ["RAY_AUTH_MODE"] = "token"
    try:  # Ray caches its config at import: read RAY_AUTH_MODE again (Ray's own way, authentication_token_setup)
        from ray._raylet import Config

        Config.initialize("")
    except (ImportError, AttributeError):
        pass


def connect(ray, address: str | None, cpus: int, connect_timeout_s: float) -> str:
    """ray.init as the module doc says; a line saying which Ray runs the sweep."""
    from fasop.core.workers import Terminated

    options = {"log_to_driver": False, "include_dashboard": False, "configure_logging": False}
    previous = signal.getsignal(signal.SIGTERM)
    try:
        if address is None:
            ray.init(address="local", num_cpus=cpus, **options)
        else:
            if connect_timeout_s <= 0:
                raise FasopError(f"--ray-connect-timeout: must be > 0, got {connect_timeout_s:g}")
            probe(address, connect_timeout_s)
            _use_token_auth(ray)
            ray.init(address=address, **options)
    except SystemExit as exc:  # Ray's own SIGTERM handler, during ray.init
        if exc.code == signal.SIGTERM:
            raise Terminated() from None
        raise
    except (ConnectionError, ValueError, RuntimeError, TimeoutError, ray.exceptions.RayError) as exc:
        help_ = "" if token_available() else f"; {AUTH_HELP}"
        where = "start a local Ray instance" if address is None else f"connect to Ray at {address!r}"
        raise FasopError(f"--ray-address: cannot {where}: {_first_line(exc)}{help_}") from None
    finally:
        if previous is not None and signal.getsignal(signal.SIGTERM) is not previous:
            signal.signal(signal.SIGTERM, previous)
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    total = int(sum(n.get("Resources", {}).get("CPU", 0) for n in nodes))
    if address is None:
        return f"a private local Ray instance with {total} CPUs (--ray-address joins a cluster)"
    return f"the Ray cluster at {address}: {len(nodes)} node{'s' * (len(nodes) != 1)}, {total} CPUs"


def check_workers(ray, job_ref, job: SweepJob) -> None:
    """One `worker_environment` task on every alive node with CPUs; one line naming the first
    node whose answer differs from this process's."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    want = worker_environment(job)
    task = ray.remote(num_cpus=1, max_retries=0)(worker_environment)
    nodes = [n for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) >= 1]
    refs = {task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote(job_ref):
            n.get("NodeManagerAddress", n["NodeID"]) for n in nodes}
    for ref, node in refs.items():
        try:
            got = ray.get(ref, timeout=CHECK_TIMEOUT_S)
        except ray.exceptions.GetTimeoutError:
            raise FasopError(f"--executor ray: the workers on node {node} did not answer fasop's environment "
                             f"check within {CHECK_TIMEOUT_S:g} s") from None
        except ray.exceptions.RayError as exc:
            raise FasopError(f"--executor ray: the workers on node {node} cannot run fasop: "
                             f"{_cause(exc)} (install this fasop on every node: docs/ray.md)") from None
        for key, value in want.items():
            if got.get(key) != value:
                raise FasopError(f"--executor ray: the workers on node {node} differ from this process in {key}: "
                                 f"{got.get(key) or 'none'!r}, here {value or 'none'!r} (install this fasop "
                                 "on every node: docs/ray.md)")


def _cause(exc: BaseException) -> str:
    """`Type: message` of the error a Ray task raised (of the Ray error itself when it has none)."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException):
        return f"{type(cause).__name__}: {_first_line(cause)}"
    return f"{type(exc).__name__}: {_first_line(exc)}"


class RayExecutor:
    """Tasks run as Ray tasks (one CPU each), see the module doc. address None: $RAY_ADDRESS, else
    a private local instance with `cpus` CPUs. A Ray already initialised in this process (a
    library caller's) is used as it is, and left running."""

    def __init__(self, job: SweepJob, address: str | None, *, cpus: int = 1,
                 connect_timeout_s: float = CONNECT_TIMEOUT_S, check: bool = True):
        try:
            import ray
        except ImportError:
            raise FasopError("--executor ray: Ray is not installed; pip install 'fasop[ray]'") from None
        self.ray, self.running, self.owned = ray, {}, False
        if ray.is_initialized():
            self.description = "the Ray instance this process had initialised"
        else:
            self.description = connect(ray, address or os.environ.get("RAY_ADDRESS") or None, cpus,
                                       connect_timeout_s)
            self.owned = True
        try:
            self.job = ray.put(job)
            if check:
                check_workers(ray, self.job, job)
        except BaseException:
            self.close()
            raise
        self.remote = ray.remote(num_cpus=1, max_retries=MAX_RETRIES)(search_task)
        self.sigterm, self.previous = False, _note_sigterm(self)

    def _wait(self) -> list:
        """The next finished task (polled: a signal is handled between polls). Ray turns an
        exception raised by a signal handler inside its calls into a plain KeyboardInterrupt:
        a SIGTERM's is made Terminated again (exit 143, not 130)."""
        from fasop.core.workers import Terminated

        ready: list = []
        try:
            while not ready:
                ready, _ = self.ray.wait(list(self.running), num_returns=1, timeout=WAIT_S)
        except KeyboardInterrupt:
            if self.sigterm:
                raise Terminated() from None
            raise
        return ready

    @property
    def pending(self) -> int:
        return len(self.running)

    def submit(self, tasks: Sequence[tuple[int, Composition, float]]) -> None:
        for task in sorted(tasks, key=lambda t: (-t[1].num_nodes, t[0])):
            self.running[self.remote.remote(self.job, task[1], task[2])] = task

    def next_result(self) -> tuple[int, CompositionResult]:
        ready = self._wait()
        index, comp, _ = self.running.pop(ready[0])
        try:
            return index, self.ray.get(ready[0])
        except self.ray.exceptions.RayError as exc:
            raise FasopError(f"--executor ray: the Ray worker searching {comp.label} failed: {_cause(exc)}") from None

    def close(self) -> None:
        for ref in self.running:
            self.ray.cancel(ref, force=True)
        self.running = {}
        if getattr(self, "previous", None) is not None:
            signal.signal(signal.SIGTERM, self.previous)
            self.previous = None
        if self.owned:
            self.owned = False
            self.ray.shutdown()


def _note_sigterm(executor: RayExecutor):
    """Have SIGTERM set executor.sigterm before the handler in effect runs; that handler (to put
    back on close), or None where none can be set (not the main thread, no Python handler)."""
    previous = signal.getsignal(signal.SIGTERM)
    if not callable(previous):
        return None

    def note(signum, frame):
        executor.sigterm = True
        previous(signum, frame)

    try:
        signal.signal(signal.SIGTERM, note)
    except ValueError:  # not the main thread
        return None
    return previous
