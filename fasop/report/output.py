"""Where results go, and how they are written (docs/limits.md).

- A name comes from the user's --out / --out-prefix, or from a sanitised spec name
  (`safe_name`): a default name is one file-name component, so it stays inside results/.
- `--out ""` and a name ending in a folder separator are refused; so is a target that exists and
  is a symbolic link, a folder, a device or anything else that is not a regular file: fasop never
  follows, replaces or writes into those.
- A missing parent folder is created (as `mkdir -p` would).
- `write_files` writes every file of a result to a temporary file in its target's folder, and
  renames them over the targets only once all are complete: a result (CSV + PNG + SVG) is all
  written or none, and an error or interrupt leaves no temporary file behind.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import stat
import tempfile
from collections.abc import Sequence
from pathlib import Path

from fasop.core.errors import FasopError

_UNSAFE = re.compile(r"[^A-Za-z0-9._+=-]+")


def safe_name(text: str, fallback: str = "fasop") -> str:
    """`text` as one file-name component: runs of characters other than letters, digits and
    `._+=-` become `_`; leading dots and dashes go (no hidden file, no option, no `..`)."""
    name = _UNSAFE.sub("_", text).lstrip(".-")[:100]
    return name or fallback


def user_path(text: str | None, flag: str) -> Path | None:
    """A --out / --out-prefix value as a path (None when not given); one line for a value that
    cannot name a file."""
    if text is None:
        return None
    if not text.strip():
        raise FasopError(f"{flag}: empty file name")
    if "\0" in text:
        raise FasopError(f"{flag}: a file name cannot contain a NUL byte")
    if text.endswith(("/", os.sep)) or Path(text).name in ("", ".", ".."):
        raise FasopError(f"{flag}: {text!r} names a folder; give a file name inside it")
    return Path(text)


def check_target(path: Path, flag: str) -> None:
    """Refuse a target that exists and is not a regular file (a link, a folder, a device, a FIFO)."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        _check_folder(path, flag)
        return
    except OSError as exc:
        raise FasopError(f"{flag}: cannot write {str(path)!r}: {exc.strerror}") from None
    if stat.S_ISLNK(info.st_mode):
        raise FasopError(f"{flag}: cannot write {str(path)!r}: a symbolic link (fasop does not write through links)")
    if stat.S_ISDIR(info.st_mode):
        raise FasopError(f"{flag}: cannot write {str(path)!r}: Is a directory")
    if not stat.S_ISREG(info.st_mode):
        raise FasopError(f"{flag}: cannot write {str(path)!r}: not a regular file (a device, FIFO or socket)")


def not_the_input(path: Path, source, flag: str, what: str) -> None:
    """Refuse an output that is the input file `source` (the same file by another name too): writing it would
    destroy what the command reads."""
    if source is None:
        return
    try:
        same = os.path.samefile(path, source)
    except OSError:   # either is missing: not the same file
        return
    if same:
        raise FasopError(f"{flag}: {str(path)!r} is {what} ({source}); write to another file")


def _check_folder(path: Path, flag: str) -> None:
    """Refuse a new file whose nearest existing folder above it is not a folder this user may write in
    (the folders between are made when it is written): before the work, not after."""
    above = Path(os.path.abspath(path)).parent
    while not os.path.lexists(above) and above.parent != above:
        above = above.parent
    if not os.path.isdir(above):
        raise FasopError(f"{flag}: cannot write {str(path)!r}: {str(above)!r} is not a folder")
    if not os.access(above, os.W_OK | os.X_OK):
        raise FasopError(f"{flag}: cannot write {str(path)!r}: Permission denied in {str(above)!r}")


def write_files(files: Sequence[tuple[Path, str | bytes]], flag: str) -> list[Path]:
    """Write every (path, text or bytes), all or none (see the module doc); the paths written."""
    for path, _ in files:
        check_target(path, flag)
    temps: list[tuple[str, Path]] = []
    try:
        for path, content in files:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                temps.append((_write_temp(path, content), path))
            except OSError as exc:
                raise FasopError(f"{flag}: cannot write {str(path)!r}: {exc.strerror or exc}") from None
        for tmp, path in temps:
            check_target(path, flag)  # again: made in the meantime?
        with _signals_held():  # Ctrl-C or SIGTERM between two renames would leave part of the result
            for i, (tmp, path) in enumerate(temps):
                try:
                    os.replace(tmp, path)
                except OSError as exc:
                    for done_tmp, done in temps[:i]:  # undo: none of the result rather than part of it
                        Path(done).unlink(missing_ok=True)
                    raise FasopError(f"{flag}: cannot write {str(path)!r}: {exc.strerror or exc}") from None
    finally:
        for tmp, _ in temps:
            Path(tmp).unlink(missing_ok=True)
    return [path for path, _ in files]


@contextlib.contextmanager
def _signals_held():
    """SIGINT and SIGTERM held back (delivered on leaving) where the OS can, in this thread."""
    held = {signal.SIGINT, signal.SIGTERM}
    try:
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    except (AttributeError, OSError, ValueError):  # no pthread_sigmask (Windows)
        yield
        return
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _write_temp(path: Path, content: str | bytes) -> str:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name[:100]}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; a results file is like any other
        data = content.encode() if isinstance(content, str) else content
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return tmp


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
