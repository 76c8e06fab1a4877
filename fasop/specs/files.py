"""Finding and reading spec files, without YAML: names -> paths, bounded reads, strict UTF-8,
one-line renderings of bad values, and the per-layer profile CSV.

reader.py (the one YAML module), load.py, catalog.py, hf_config.py, prices.py and report/validate.py read their
files through these, so every file fasop reads is bounded and every error is one line.
"""

from __future__ import annotations

import csv
import io
import math
import os
import stat
from importlib import resources
from pathlib import Path
from typing import Any

from fasop.core import limits
from fasop.core.errors import SpecError

def shipped_folder(folder: str) -> Path:
    """The shipped `folder` (`model_specs` or `cluster_specs`): package data under fasop/data/,
    found through importlib.resources, so an installed wheel, an editable install and a clone all
    read the same files."""
    return Path(str(resources.files("fasop") / "data" / folder))


def data_digest() -> str:
    """SHA-256 over the files fasop ships under fasop/data/ (names and bytes, in name order): two
    installs that read the same specs and catalog have the same digest (Ray's workers' check)."""
    import hashlib

    root = Path(str(resources.files("fasop") / "data"))
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def spec_folders(folder: str) -> tuple[Path, ...]:
    """Where spec names are looked up: ./folder first, then the shipped folder."""
    return (Path.cwd() / folder, shipped_folder(folder))


def shipped_specs(folder: str) -> list[Path]:
    """The shipped specs of `folder` (`model_specs` or `cluster_specs`), by name."""
    return sorted(shipped_folder(folder).glob("*.yaml"), key=lambda p: p.stem)


def resolve(name_or_path: str, folder: str) -> Path:
    """A spec given as a path, or as a name in `folder` (`named`, which also reads a model's Hub repository
    id `org/Name` that is no path here)."""
    try:
        candidate = Path(name_or_path)
        if candidate.suffix in (".yaml", ".yml") or candidate.parent != Path(".") or not name_or_path:
            if candidate.exists():
                return candidate
            hub = hub_id(name_or_path, folder)
            spec = named(name_or_path, folder) if hub else None
            if spec is None:
                shipped = f", nor a {folder}/ spec named {candidate.name!r}" if hub else ""
                raise SpecError(str(candidate), "", f"no such file{shipped}")
            return spec
        spec = named(name_or_path, folder)
        if spec is not None:
            return spec
    except (OSError, ValueError) as exc:  # a name too long, or with a NUL byte
        raise SpecError(show(name_or_path, quote=False), "", f"cannot use as a spec name or path: {exc}") from None
    known = [p.stem for p in shipped_specs(folder)]
    listing = f"known: {', '.join(known)}" if known else "no shipped specs found: give the path of a .yaml file"
    raise SpecError(name_or_path, "", f"no spec named {name_or_path!r} in {folder}/ ({listing})")


def hub_id(text: str, folder: str, base: Path = Path(".")) -> bool:
    """Whether `text` reads as a model's Hub repository id (`Qwen/Qwen2.5-7B`): two parts, the first no folder
    in `base` (nor `.`, `..`, `~`), no spec file suffix. Clusters have no Hub: never for them."""
    parts = Path(text).parts
    return (folder == "model_specs" and len(parts) == 2 and parts[0] not in (".", "..", "~", "/")
            and Path(text).suffix not in (".yaml", ".yml", ".json") and path_kind(base / parts[0]) is None)


def named(text: str, folder: str, base: Path = Path(".")) -> Path | None:
    """The spec of `folder` named `text` (./folder first, then fasop's own), or in another case where exactly
    one spec of a folder has it (`Qwen3-30B-A3B`, as its hub repository); a Hub id's last part (`hub_id`, its
    organisation no folder in `base`). Never a path: None where no spec has the name."""
    if hub_id(text, folder, base):
        text = Path(text).name
    elif Path(text).parent != Path("."):
        return None
    for root in spec_folders(folder):
        path = root / f"{text}.yaml"
        if path_kind(path) == "file":
            return path
    for root in spec_folders(folder):
        same = [p for p in sorted(root.glob("*.yaml")) if p.stem.lower() == text.lower()]
        if len(same) == 1:
            return same[0]
    return None


def path_kind(path: Path) -> str | None:
    """"file", "dir" or None (nothing there, or a name the file system refuses: too long, a NUL byte)."""
    try:
        return "dir" if path.is_dir() else "file" if path.is_file() else None
    except (OSError, ValueError):
        return None


def show(value: Any, *, quote: bool = True) -> str:
    """`value` for a one-line error message: its repr (a printable string unquoted when not
    `quote`), cut to limits.SHOWN_CHARS characters."""
    text = value if not quote and isinstance(value, str) and value.isprintable() else _repr(value)
    if len(text) > limits.SHOWN_CHARS:
        text = text[:limits.SHOWN_CHARS] + f"... ({len(text):,} characters)"
    return text


def _repr(value: Any) -> str:
    try:
        return repr(value)
    except ValueError:  # an int of more than 4,300 digits
        return f"<an integer of about {value.bit_length() * 0.30103:,.0f} digits>"


def read_bounded(path: Path, limit: int, what: str = "") -> bytes:
    """The bytes of a regular file of at most `limit` bytes; SpecError for anything else (a
    folder, a device such as /dev/zero, a FIFO, a file too large), without reading past the limit."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # a FIFO must not block the open
    except (OSError, ValueError) as exc:
        raise SpecError(str(path), "", f"cannot read{what}: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise SpecError(str(path), "", f"cannot read{what}: not a regular file")
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(limit + 1)
    except OSError as exc:  # e.g. /proc/self/mem: regular, unreadable
        raise SpecError(str(path), "", f"cannot read{what}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise SpecError(str(path), "", f"larger than fasop's limit of {limit:,} bytes (README: Limits)")
    return data


def decode_utf8(path: Path, data: bytes) -> str:
    """Strict UTF-8 (a leading byte-order mark is dropped); the first bad byte's line on error."""
    try:
        return data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise SpecError(str(path), f"line {line}", f"not UTF-8 text (byte 0x{data[exc.start]:02x})") from None



PROFILE_COLUMNS = ("gpu", "tp", "layer_index", "seconds")


def read_profile_csv(file: Path, num_layers: int) -> dict[tuple[str, int], tuple[float, ...]]:
    """gpu,tp,layer_index,seconds rows: exactly these columns, one row per (gpu, tp, layer_index),
    tp and layer_index plain decimal integers, seconds within limits.LAYER_SECONDS."""
    text = decode_utf8(file, read_bounded(file, limits.PROFILE_BYTES, " profile"))
    try:
        rows = list(csv.reader(io.StringIO(text, newline="")))
    except csv.Error as exc:
        raise SpecError(str(file), "", f"malformed CSV: {show(str(exc))}") from None
    if not rows or tuple(rows[0]) != PROFILE_COLUMNS:
        raise SpecError(str(file), "line 1", f"the header must be {','.join(PROFILE_COLUMNS)}, "
                        f"got {show(','.join(rows[0]) if rows else '', quote=False)}")
    table: dict[tuple[str, int], dict[int, float]] = {}
    for line, row in enumerate(rows[1:], start=2):
        if not row:
            continue  # a blank line
        gpu, tp, index, value = _profile_row(file, f"line {line}", row, num_layers)
        per_layer = table.setdefault((gpu, tp), {})
        if index in per_layer:
            raise SpecError(str(file), f"line {line}", f"a second row for gpu={gpu} tp={tp} layer_index={index}")
        per_layer[index] = value
    for (gpu, tp), per_layer in table.items():
        if len(per_layer) != num_layers:
            missing = [i for i in range(num_layers) if i not in per_layer]
            raise SpecError(str(file), f"{gpu} tp={tp}", f"has {len(per_layer)} layers, the layer list has "
                            f"{num_layers} (missing layer_index {missing[0]})")
    if not table:
        raise SpecError(str(file), "", "profile is empty")
    return {key: tuple(per_layer[i] for i in range(num_layers)) for key, per_layer in sorted(table.items())}


def _profile_row(file: Path, where: str, row: list[str], num_layers: int) -> tuple[str, int, int, float]:
    """(gpu, tp, layer_index, seconds) of one profile row, each checked."""
    if len(row) != len(PROFILE_COLUMNS):
        raise SpecError(str(file), where, f"needs the {len(PROFILE_COLUMNS)} columns {','.join(PROFILE_COLUMNS)}, "
                        f"got {len(row)} fields: {show(','.join(row), quote=False)}")
    gpu, tp, index, seconds = (cell.strip() for cell in row)
    if not gpu or not gpu.isprintable():
        raise SpecError(str(file), where, f"gpu must be a name, got {show(gpu)}")
    if not (tp.isascii() and tp.isdigit() and 1 <= int(tp) <= limits.TP_DEGREE):
        raise SpecError(str(file), where, f"tp must be an integer from 1 to {limits.TP_DEGREE:,}, got {show(tp)}")
    if not (index.isascii() and index.isdigit() and int(index) < num_layers):
        raise SpecError(str(file), where, f"layer_index must be an integer from 0 to {num_layers - 1} "
                        f"(the layer list has {num_layers} entries), got {show(index)}")
    value = _float(seconds)
    low, high = limits.LAYER_SECONDS
    if value is None or not low <= value <= high:
        raise SpecError(str(file), where, f"seconds must be a number from {low:g} to {high:g}, got {show(seconds)}")
    return gpu, int(tp), int(index), value


def _float(text: str) -> float | None:
    """A finite decimal number (no nan/inf, no '_' separators), else None."""
    if not text or "_" in text or not text.isascii():
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None
