"""A sweep's checkpoint: each finished composition appended as it finishes, so that an interrupted
sweep (Ctrl-C, SIGTERM, kill -9, a lost worker, a power cut) continues where it stopped.

One line per record, JSON: a header `{"fasop_checkpoint": 1, "fingerprint": ...}` naming the
inputs (specs, options, compositions, fasop version), then `{"index": i, "cutoff": c, "result":
...}` per finished composition, the result pickled (base64) so that it comes back bit for bit.
Each line is flushed and fsync'ed before the next composition is recorded; a last line cut short
by a kill is dropped on reading. A checkpoint is trusted like a script (pickle): resume only your
own. The sweep's pruning is a function of its inputs (fasop.pareto.pruning), so a resumed sweep asks for
the same compositions with the same cut-offs and writes the bytes an uninterrupted one would.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import pickle
from pathlib import Path

from fasop.core.errors import FasopError
from fasop.pareto.sweep import CompositionResult

VERSION = 1


def fingerprint(*inputs) -> str:
    """SHA-256 of the pickled inputs (frozen dataclasses, tuples, numbers: the same bytes for the
    same values in every run) and the fasop version."""
    from fasop import __version__

    return hashlib.sha256(pickle.dumps((__version__,) + inputs, protocol=4)).hexdigest()


class Checkpoint:
    """The checkpoint at `path` of a sweep with this fingerprint. resume=True reads what an
    earlier run of the same sweep finished (a checkpoint of other inputs is an error; none is a
    fresh start); without resume an existing checkpoint is an error (it holds an interrupted
    sweep's work). The file is made at the first record: an interruption before any composition
    finishes leaves nothing behind."""

    def __init__(self, path: str | os.PathLike, fingerprint: str, *, resume: bool):
        self.path, self.fingerprint = Path(path), fingerprint
        self.done: dict[int, tuple[float, CompositionResult]] = {}
        self.file = None
        self.resumed = self.path.exists()
        if self.resumed and not resume:
            raise FasopError(f"--resume: {self.path} holds an interrupted sweep: add --resume to continue it, "
                             "or delete it to start again")
        if self.resumed:
            self._read()
        else:
            _check_writable(self.path)

    def _read(self) -> None:
        with open(self.path, "rb") as fh:
            data = fh.read()
        lines = data.split(b"\n")
        try:
            header = json.loads(lines[0])
        except ValueError:
            header = None
        if not isinstance(header, dict) or header.get("fasop_checkpoint") != VERSION:
            raise FasopError(f"--resume: {self.path}: not a fasop checkpoint; delete it or drop --resume")
        if header.get("fingerprint") != self.fingerprint:
            raise FasopError(f"--resume: {self.path}: made by a sweep with other inputs (specs, options or "
                             "fasop version); delete it or drop --resume")
        good = len(lines[0]) + 1
        for line in lines[1:-1]:  # the last item follows the last newline: empty, or a line cut short
            try:
                entry = json.loads(line)
                result = pickle.loads(base64.b64decode(entry["result"]))
            except Exception:  # noqa: BLE001 -- a line cut short by a kill: keep what came before
                break
            cutoff = float("inf") if entry["cutoff"] is None else float(entry["cutoff"])
            self.done[int(entry["index"])] = (cutoff, result)
            good += len(line) + 1
        if good < len(data):  # drop a cut line, so that new records start on a line of their own
            with open(self.path, "r+b") as fh:
                fh.truncate(good)

    def record(self, index: int, cutoff: float, result: CompositionResult) -> None:
        """Append one finished composition, on disk before this returns."""
        if self.file is None:
            new = not self.path.exists()
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self.file = open(self.path, "a")
            except OSError as exc:
                raise FasopError(f"--out-prefix: cannot write {str(self.path)!r}: {exc.strerror}") from None
            if new:
                self.file.write(json.dumps({"fasop_checkpoint": VERSION, "fingerprint": self.fingerprint}) + "\n")
        blob = base64.b64encode(pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)).decode()
        self.file.write(json.dumps({"index": index, "cutoff": None if cutoff == float("inf") else cutoff,
                                    "result": blob}) + "\n")
        _sync(self.file)

    def close(self, *, remove: bool = False) -> None:
        if self.file is not None:
            self.file.close()
        if remove:
            self.path.unlink(missing_ok=True)


def _check_writable(path: Path) -> None:
    """A one-line error now, not after the first composition, when `path` cannot be made: its
    nearest existing ancestor must be a folder this process may write in."""
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
        what = "not a folder" if not folder.is_dir() else "permission denied"
        raise FasopError(f"--out-prefix: cannot write {str(path)!r}: {str(folder)!r}: {what}")


def _sync(fh) -> None:
    fh.flush()
    os.fsync(fh.fileno())
