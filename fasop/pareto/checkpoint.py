"""A sweep's checkpoint: each finished composition appended as it finishes, so that an interrupted
sweep (Ctrl-C, SIGTERM, kill -9, a lost worker, a power cut) continues where it stopped.

One line per record, JSON: a header `{"fasop_checkpoint": 2, "fingerprint": ...}` naming the
inputs (specs, options, compositions, fasop version), then `{"index": i, "cutoff": c, "result":
...}` per finished composition, the result as data (fasop.pareto.records: every field checked
against its declared type on reading; nothing in the file can name code to run, so a checkpoint
from anyone is safe to read). Each line is flushed and fsync'ed before the next composition is
recorded; a last line cut short by a kill (no newline after it) is dropped on reading; a whole
line that is not a valid record, a file over CHECKPOINT_BYTES or a line over
CHECKPOINT_LINE_BYTES, a folder, a symbolic link or a device at the checkpoint's path are one-line
errors. The sweep's pruning is a function of its inputs (fasop.pareto.pruning), so a resumed sweep
asks for the same compositions with the same cut-offs and writes the bytes an uninterrupted one
would.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import stat
from pathlib import Path

from fasop.core.errors import FasopError
from fasop.core.limits import CHECKPOINT_BYTES, CHECKPOINT_LINE_BYTES
from fasop.pareto import records
from fasop.pareto.sweep import CompositionResult

VERSION = 2
"""2: results as JSON data (fasop.pareto.records); 1 held them pickled."""


def fingerprint(*inputs) -> str:
    """SHA-256 of the pickled inputs (frozen dataclasses, tuples, numbers: the same bytes for the
    same values in every run) and the fasop version. Pickle only writes here, to hash: nothing
    is ever unpickled."""
    from fasop import __version__

    return hashlib.sha256(pickle.dumps((__version__,) + inputs, protocol=4)).hexdigest()


class Checkpoint:
    """The checkpoint at `path` of a sweep with this fingerprint. resume=True reads what an
    earlier run of the same sweep finished (a checkpoint of other inputs is an error; none is a
    fresh start); without resume an existing checkpoint is an error (it holds an interrupted
    sweep's work). `compositions`: the sweep's, each record's composition checked against its
    index. The file is made at the first record: an interruption before any composition
    finishes leaves nothing behind."""

    def __init__(self, path: str | os.PathLike, fingerprint: str, *, resume: bool, compositions=None):
        self.path, self.fingerprint, self.compositions = Path(path), fingerprint, compositions
        self.done: dict[int, tuple[float, CompositionResult]] = {}
        self.file = None
        self.resumed = os.path.lexists(self.path)
        if self.resumed:
            _check_regular(self.path)
        if self.resumed and not resume:
            raise FasopError(f"--resume: {self.path} holds an interrupted sweep: add --resume to continue it, "
                             "or delete it to start again")
        if self.resumed:
            self._read()
        else:
            _check_writable(self.path)

    def _fail(self, what: str) -> FasopError:
        return FasopError(f"--resume: {self.path}: {what}; delete it or drop --resume")

    def _read(self) -> None:
        try:
            with open(self.path, "rb") as fh:
                if os.fstat(fh.fileno()).st_size > CHECKPOINT_BYTES:
                    raise self._fail(f"larger than {CHECKPOINT_BYTES >> 20} MiB, not a checkpoint fasop wrote")
                good = self._read_header(fh)
                while line := fh.readline(CHECKPOINT_LINE_BYTES + 1):
                    if not line.endswith(b"\n"):
                        if len(line) > CHECKPOINT_LINE_BYTES:
                            raise self._fail(f"a record over {CHECKPOINT_LINE_BYTES >> 20} MiB")
                        break  # the last line, cut short by a kill: keep what came before
                    self._add(line, good)
                    good += len(line)
                cut = fh.tell() > good
        except OSError as exc:
            raise self._fail(f"cannot read: {exc.strerror}") from None
        if cut:  # drop a cut line, so that new records start on a line of their own
            with open(self.path, "r+b") as fh:
                fh.truncate(good)

    def _read_header(self, fh) -> int:
        line = fh.readline(CHECKPOINT_LINE_BYTES + 1)
        try:
            header = json.loads(line) if line.endswith(b"\n") else None
        except (ValueError, RecursionError):
            header = None
        if not isinstance(header, dict) or header.get("fasop_checkpoint") != VERSION:
            raise self._fail("not a checkpoint of this fasop version")
        if header.get("fingerprint") != self.fingerprint:
            raise self._fail("made by a sweep with other inputs (specs, options or fasop version)")
        return len(line)

    def _add(self, line: bytes, offset: int) -> None:
        """One whole record line, checked: its index, cut-off and result."""
        try:
            entry = json.loads(line)
            if not isinstance(entry, dict) or set(entry) != {"index", "cutoff", "result"}:
                raise records.RecordError("not a record (index, cutoff, result)")
            index, cutoff = entry["index"], entry["cutoff"]
            count = len(self.compositions) if self.compositions is not None else records.INT_LIMIT
            if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < count:
                raise records.RecordError(f"index {str(index)[:20]!r} is not a composition of this sweep")
            if cutoff is not None and (isinstance(cutoff, bool) or not isinstance(cutoff, (int, float))):
                raise records.RecordError("cutoff is not a number")
            result = records.decode(entry["result"])
            if self.compositions is not None and result.composition != self.compositions[index]:
                raise records.RecordError(f"record {index} is of another composition")
        except (ValueError, RecursionError) as exc:  # RecordError, bad JSON, an int of 5,000 digits, deep nesting
            raise self._fail(f"the record at byte {offset} is not valid ({str(exc)[:200]})") from None
        self.done[index] = (float("inf") if cutoff is None else float(cutoff), result)

    def record(self, index: int, cutoff: float, result: CompositionResult) -> None:
        """Append one finished composition, on disk before this returns."""
        if self.file is None:
            new = not os.path.lexists(self.path)
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o666)
                self.file = os.fdopen(fd, "a")
            except OSError as exc:
                raise FasopError(f"--out-prefix: cannot write {str(self.path)!r}: {exc.strerror}") from None
            if new:
                self.file.write(json.dumps({"fasop_checkpoint": VERSION, "fingerprint": self.fingerprint}) + "\n")
        self.file.write(json.dumps({"index": index, "cutoff": None if cutoff == float("inf") else cutoff,
                                    "result": records.encode(result)}, separators=(",", ":")) + "\n")
        _sync(self.file)

    def close(self, *, remove: bool = False) -> None:
        if self.file is not None:
            self.file.close()
        if remove:
            self.path.unlink(missing_ok=True)


def _check_regular(path: Path) -> None:
    """A one-line error when what is at `path` is not a regular file fasop could have written (a
    folder, a symbolic link, a FIFO, a device): never read through, never written through."""
    mode = os.lstat(path).st_mode
    if not stat.S_ISREG(mode):
        what = "a symbolic link" if stat.S_ISLNK(mode) else "a folder" if stat.S_ISDIR(mode) else "not a regular file"
        raise FasopError(f"--resume: {path}: is {what}, not a checkpoint; remove it or choose another --out-prefix")


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
