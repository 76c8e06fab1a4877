"""Load and validate cluster, model and profile files into frozen dataclasses (SI units).

The only module that reads YAML. Every key is checked: an unknown or missing key, a wrong type
or an out-of-range number raises :class:`SpecError` naming the file, the key and the value.
Units are converted once, here: Gbit/s -> bytes/s, GiB -> bytes, $/h stays $/h.
"""

from __future__ import annotations

import csv
import io
import math
import os
import stat
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from fasop import limits
from fasop.errors import SpecError

GIB = 2**30
_ESTIMATOR_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
"""The `estimator` key's form; which names exist is the estimator registry's business
(estimators.make_estimator refuses an unknown one, naming this file and key)."""
CATALOG_ESTIMATORS = ("analytic",)
"""Estimators whose cluster specs name catalog GPUs (cluster_specs/catalog/, read by catalog.py)
instead of giving each node type's memory and links."""
LAYER_KINDS = ("embedding", "transformer", "encoder", "decoder", "head")
TRANSFORMER_KINDS = ("transformer", "encoder", "decoder")
_REPO_ROOT = Path(__file__).resolve().parent.parent


# ----------------------------------------------------------------------------- dataclasses
@dataclass(frozen=True, kw_only=True)
class NodeType:
    name: str
    """Key in the cluster spec, used on the command line and in `node_placement` (e.g. `a100`)."""
    instance: str
    """Cloud instance or machine name, for reports (e.g. `p4d.24xlarge`)."""
    gpu: str
    """GPU type; the key of this node's per-layer times in model profiles."""
    gpus_per_node: int
    memory_limit_bytes: float
    """GPU memory usable by training, per GPU (the OOM threshold)."""
    intra_node_bytes_per_s: float
    inter_node_bytes_per_s: float
    intra_node_shared: bool
    """True when concurrent rings inside the node share one bus (PCIe), dividing its bandwidth."""
    usd_per_hour: float
    spot_usd_per_hour: float | None


@dataclass(frozen=True, kw_only=True)
class ClusterSpec:
    path: str
    estimator: str
    """Which registered estimator scores plans on this cluster (estimators.make_estimator;
    README, 'Estimator variants'), e.g. `fasop-2024`."""
    node_types: dict[str, NodeType]
    p2p_inter_node_divisor: float
    p2p_intra_node_divisor: float
    memory_overhead_factor: float
    """A stage is out of memory when factor x estimated bytes exceeds the limit."""
    analytic: Any = None
    """The `analytic` estimator's physical constants (catalog.AnalyticParams), for its clusters."""


@dataclass(frozen=True, kw_only=True)
class ScalingTable:
    """Micro-batch scaling of a profiled layer time: f(b) = value at the largest point <= b;
    past the last point, `proportional` multiplies by b / last point, `constant` keeps it."""

    points: tuple[tuple[int, tuple[float, ...]], ...]
    """(micro-batch size, factors whose left-to-right product is the scale), ascending."""
    beyond: Literal["proportional", "constant"]

    def factor(self, b: int) -> float:
        chosen = self.points[0]
        for point in self.points:
            if point[0] <= b:
                chosen = point
        value = _product(chosen[1])
        last_b = self.points[-1][0]
        if b > last_b and self.beyond == "proportional":
            return value * b / last_b
        return value


@dataclass(frozen=True, kw_only=True)
class Profile:
    forward_s: dict[tuple[str, int], tuple[float, ...]]
    """(gpu, tp) -> forward time of one sample-micro-batch per entry of the layer list, seconds."""
    fwd_bwd_factor: float
    scaling: dict[tuple[str, str], ScalingTable]
    """(gpu, layer kind) -> micro-batch scaling table."""

    def tp_degrees(self, gpus: tuple[str, ...]) -> tuple[int, ...]:
        """TP degrees profiled for every one of `gpus`, ascending."""
        sets = [{tp for (g, tp) in self.forward_s if g == gpu} for gpu in gpus]
        return tuple(sorted(set.intersection(*sets))) if sets else ()


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    path: str
    name: str
    hidden_size: int
    num_attention_heads: int
    vocab_size: int
    sequence_length: int
    global_batch_size: int
    tie_word_embeddings: bool
    bytes_per_element: int
    """Bytes of one activation or gradient element that GPUs exchange: pipeline sends, the DP
    gradient all-reduce and the tied-embedding sync (memory has its own bytes per parameter)."""
    layer_kinds: tuple[str, ...]
    """Kind of every entry of the layer list, in pipeline order."""
    layer_segments: tuple[str, ...]
    """Segment of every entry (`encoder`/`decoder` for encoder-decoder models, else `model`)."""
    profile: Profile | None = None
    """Profiled per-layer times (None: a model from a HuggingFace config, scored analytically)."""
    architecture: Any = None
    """The full shape (architecture.Architecture) for the analytic estimator; None for FASOP's specs."""

    @property
    def num_transformer_layers(self) -> int:
        return sum(kind in TRANSFORMER_KINDS for kind in self.layer_kinds)

    @property
    def segments(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(self.layer_segments))


def _product(factors: tuple[float, ...]) -> float:
    value = factors[0]
    for f in factors[1:]:
        value = value * f
    return value


# ----------------------------------------------------------------------------- file helpers
def _shipped_folder(folder: str) -> Path:
    """The shipped `folder`: in the source tree (a clone, an editable install), else the copy an
    installed wheel carries as fasop/shipped/<folder> (pyproject.toml)."""
    source = _REPO_ROOT / folder
    return source if source.is_dir() else Path(__file__).resolve().parent / "shipped" / folder


def spec_folders(folder: str) -> tuple[Path, ...]:
    """Where spec names are looked up: ./folder first, then the shipped folder."""
    return (Path.cwd() / folder, _shipped_folder(folder))


def shipped_specs(folder: str) -> list[Path]:
    """The shipped specs of `folder` (`model_specs` or `cluster_specs`), by name."""
    return sorted(_shipped_folder(folder).glob("*.yaml"), key=lambda p: p.stem)


def resolve(name_or_path: str, folder: str) -> Path:
    """A spec given as a path, or as a name in `folder` (./folder first, then fasop's own)."""
    try:
        candidate = Path(name_or_path)
        if candidate.suffix in (".yaml", ".yml") or candidate.parent != Path(".") or not name_or_path:
            if not candidate.exists():
                raise SpecError(str(candidate), "", "no such file")
            return candidate
        for root in spec_folders(folder):
            path = root / f"{name_or_path}.yaml"
            if path.exists():
                return path
    except (OSError, ValueError) as exc:  # a name too long, or with a NUL byte
        raise SpecError(show(name_or_path, quote=False), "", f"cannot use as a spec name or path: {exc}") from None
    known = [p.stem for p in shipped_specs(folder)]
    listing = f"known: {', '.join(known)}" if known else "no shipped specs found: give the path of a .yaml file"
    raise SpecError(name_or_path, "", f"no spec named {name_or_path!r} in {folder}/ ({listing})")


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


class _Mapping(dict):
    """A YAML mapping that remembers the line of each key (for error messages)."""

    line: int = 0
    lines: dict


class _Refused(yaml.MarkedYAMLError):
    """YAML that parses but that specs do not allow (duplicate keys, aliases, deep nesting)."""


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, stricter: no anchors or aliases, nesting at most limits.YAML_DEPTH,
    duplicate and merge (`<<`) keys refused, mappings remember their keys' lines, and a scalar
    that cannot be converted (an integer of 5,000 digits) is a YAML error, not a ValueError."""

    def __init__(self, stream):
        super().__init__(stream)
        self.depth = 0

    def compose_node(self, parent, index):
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            raise _Refused(problem="YAML anchors and aliases (&name, *name) are not allowed in specs",
                           problem_mark=event.start_mark)
        self.depth += 1
        try:
            if self.depth > limits.YAML_DEPTH:
                raise _Refused(problem=f"nested deeper than {limits.YAML_DEPTH} levels", problem_mark=event.start_mark)
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def construct_object(self, node, deep=False):
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, OverflowError, TypeError) as exc:
            raise _Refused(problem=f"cannot convert {show(node.value)}: {str(exc).splitlines()[0][:80]}",
                           problem_mark=node.start_mark) from None

    def construct_strict_mapping(self, node) -> _Mapping:
        mapping = _Mapping()
        mapping.line, mapping.lines = node.start_mark.line + 1, {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise _Refused(problem="merge keys (<<) are not allowed in specs", problem_mark=key_node.start_mark)
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in mapping
            except TypeError:
                raise _Refused(problem="a mapping key must be a plain value", problem_mark=key_node.start_mark) from None
            if duplicate:
                raise _Refused(problem=f"duplicate key {show(key)} (first at line {mapping.lines[key]})",
                               problem_mark=key_node.start_mark)
            mapping[key] = self.construct_object(value_node, deep=True)
            mapping.lines[key] = key_node.start_mark.line + 1
        return mapping


_StrictLoader.add_constructor("tag:yaml.org,2002:map", _StrictLoader.construct_strict_mapping)
_StrictLoader.add_constructor("tag:yaml.org,2002:seq", lambda loader, node: loader.construct_sequence(node, deep=True))


def _read_yaml(path: Path) -> dict:
    text = decode_utf8(path, read_bounded(path, limits.SPEC_BYTES))
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 (a SafeLoader)
    except _Refused as exc:
        raise SpecError(str(path), f"line {exc.problem_mark.line + 1}", exc.problem) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else "?"
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SpecError(str(path), "", f"malformed YAML at {where}: {show(problem)}") from None
    except RecursionError:  # unreachable with the depth limit; kept as a last guard
        raise SpecError(str(path), "", "malformed YAML: nested too deeply") from None
    if not isinstance(data, dict):
        raise SpecError(str(path), "", "top level must be a mapping")
    return data


class _Reader:
    """Strict access to one YAML mapping: every key read once, leftovers are errors.

    `known`, when given, lists every key the section may hold; other keys are rejected up
    front, so a misspelt required key is reported as unknown rather than as missing.
    """

    def __init__(self, path: Path, data: Any, key: str, known: tuple[str, ...] = ()):
        if not isinstance(data, dict):
            raise SpecError(str(path), key or "(top level)", f"must be a mapping, got {show(data)}")
        self.path, self.data, self.key, self.seen, self.known = path, data, key, set(), known
        if known:
            self._reject_unknown(known)

    def _name(self, key: Any) -> str:
        key = show(key, quote=False)
        return f"{self.key}.{key}" if self.key else key

    def error(self, key: Any, message: str) -> SpecError:
        line = getattr(self.data, "lines", {}).get(key) if isinstance(key, (str, int)) else None
        return SpecError(str(self.path), self._name(key), message + (f" (line {line})" if line else ""))

    def get(self, key: str, kind: type | tuple, default: Any = ..., check=None, why: str = "") -> Any:
        self.seen.add(key)
        if key not in self.data:
            if default is ...:
                raise self.error(key, "missing required key")
            return default
        value = self.data[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        ok = isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)
        if not ok:
            names = " or ".join(k.__name__ for k in kinds)
            raise self.error(key, f"must be {names}, got {show(value)}")
        if isinstance(value, float) and not math.isfinite(value):
            raise self.error(key, f"must be finite, got {show(value)}")
        if isinstance(value, str) and not (len(value) <= limits.TEXT_CHARS and value.isprintable()):
            raise self.error(key, f"must be printable text of at most {limits.TEXT_CHARS:,} characters, "
                             f"got {show(value)}")
        if check is not None and not check(value):
            raise self.error(key, f"must be {why}, got {show(value)}")
        return value

    def positive(self, key: str, kind=(int, float), default: Any = ..., *, high: float) -> Any:
        return self.number(key, kind, 0, high, default, above=True)

    def number(self, key: str, kind, low: float, high: float, default: Any = ..., *, above: bool = False) -> Any:
        """A number in [low, high] (in (low, high] with `above`); `high` is a ceiling of limits.py."""
        relation = ">" if above else ">="
        value = self.get(key, kind, default, lambda v: v > low if above else v >= low, f"{relation} {low:g}")
        if value is not default and value > high:
            raise self.error(key, f"must be <= {high:,g}, fasop's ceiling (README: Limits), got {show(value)}")
        return value

    def sub(self, key: str, known: tuple[str, ...] = ()) -> "_Reader":
        return _Reader(self.path, self.get(key, dict), self._name(key), known)

    def _reject_unknown(self, known) -> None:
        extra = [k for k in self.data if k not in known]
        if extra:
            raise self.error(extra[0], f"unknown key (known: {', '.join(sorted(map(str, known)))})")

    def done(self) -> None:
        assert self.seen <= set(self.known or self.seen), f"{self.key}: read keys missing from known"
        self._reject_unknown(self.seen)


# ----------------------------------------------------------------------------- cluster
_CLUSTER_KEYS = ("estimator", "links", "memory", "node_types")
_LINKS_KEYS = ("p2p_inter_node_divisor", "p2p_intra_node_divisor")
_NODE_TYPE_KEYS = ("instance", "gpu", "gpus_per_node", "memory_limit_gib", "intra_node_gbit_per_s",
                   "inter_node_gbit_per_s", "intra_node_shared", "usd_per_hour", "spot_usd_per_hour")


def load_cluster(name_or_path: str) -> ClusterSpec:
    path = resolve(name_or_path, "cluster_specs")
    data = _read_yaml(path)
    if data.get("estimator") in CATALOG_ESTIMATORS:
        from fasop.catalog import load_catalog_cluster  # catalog.py reads YAML through this module
        return load_catalog_cluster(path, data)
    top = _Reader(path, data, "", _CLUSTER_KEYS)
    estimator = top.get("estimator", str, check=_ESTIMATOR_NAME.fullmatch,
                        why="an estimator name (letters, digits, '-', '_', '.'), e.g. fasop-2024")
    links = top.sub("links", _LINKS_KEYS)
    inter_div = links.number("p2p_inter_node_divisor", (int, float), *limits.DIVISOR)
    intra_div = links.number("p2p_intra_node_divisor", (int, float), *limits.DIVISOR)
    links.done()
    memory = top.sub("memory", ("overhead_factor",))
    overhead = memory.number("overhead_factor", (int, float), 1, limits.OVERHEAD_FACTOR)
    memory.done()
    types_reader = top.sub("node_types")
    node_types = {}
    for name in types_reader.data:
        if not isinstance(name, str) or not name.replace("_", "").replace(".", "").isalnum():
            raise types_reader.error(str(name), "node type names are letters, digits, '_' and '.'")
        node_types[name] = _node_type(types_reader.sub(name, _NODE_TYPE_KEYS), name)
    if not node_types:
        raise types_reader.error("", "at least one node type is required")
    top.done()
    return ClusterSpec(path=str(path), estimator=estimator, node_types=node_types,
                       p2p_inter_node_divisor=float(inter_div), p2p_intra_node_divisor=float(intra_div),
                       memory_overhead_factor=float(overhead))


def _node_type(r: _Reader, name: str) -> NodeType:
    spot = r.number("spot_usd_per_hour", (int, float), 0, limits.USD_PER_HOUR, None)
    node = NodeType(
        name=name,
        instance=r.get("instance", str),
        gpu=r.get("gpu", str),
        gpus_per_node=r.positive("gpus_per_node", int, high=limits.GPUS_PER_NODE),
        memory_limit_bytes=float(r.positive("memory_limit_gib", high=limits.MEMORY_GIB)) * GIB,
        intra_node_bytes_per_s=float(r.number("intra_node_gbit_per_s", (int, float), *limits.GBIT_PER_S)) * 1e9 / 8,
        inter_node_bytes_per_s=float(r.number("inter_node_gbit_per_s", (int, float), *limits.GBIT_PER_S)) * 1e9 / 8,
        intra_node_shared=r.get("intra_node_shared", bool),
        usd_per_hour=float(r.number("usd_per_hour", (int, float), 0, limits.USD_PER_HOUR)),
        spot_usd_per_hour=None if spot is None else float(spot),
    )
    r.done()
    return node


# ----------------------------------------------------------------------------- model
_MODEL_KEYS = ("name", "architecture", "training", "layers", "profile")
_ARCHITECTURE_KEYS = ("hidden_size", "num_hidden_layers", "num_decoder_layers", "num_attention_heads",
                      "vocab_size", "tie_word_embeddings")
_TRAINING_KEYS = ("sequence_length", "global_batch_size", "bytes_per_element")


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except (OSError, ValueError):  # a name too long for the file system, a NUL byte: not a folder
        return False


def load_model(name_or_path: str) -> ModelSpec:
    candidate = Path(name_or_path)
    if candidate.suffix == ".json" or _is_dir(candidate):
        from fasop.hf_config import load_config_json  # hf_config.py reads YAML through this module
        return load_config_json(candidate)
    path = resolve(name_or_path, "model_specs")
    data = _read_yaml(path)
    if "hf_config" in data:
        from fasop.hf_config import load_hf_spec
        return load_hf_spec(path, data)
    top = _Reader(path, data, "", _MODEL_KEYS)
    name = top.get("name", str)
    arch = top.sub("architecture", _ARCHITECTURE_KEYS)
    hidden = arch.positive("hidden_size", int, high=limits.HIDDEN_SIZE)
    n_layers = arch.positive("num_hidden_layers", int, high=limits.LAYERS)
    n_dec = arch.number("num_decoder_layers", int, 0, limits.LAYERS, 0)
    heads = arch.positive("num_attention_heads", int, high=limits.ATTENTION_HEADS)
    vocab = arch.positive("vocab_size", int, high=limits.VOCAB_SIZE)
    tie = arch.get("tie_word_embeddings", bool)
    arch.done()
    train = top.sub("training", _TRAINING_KEYS)
    seq = train.positive("sequence_length", int, high=limits.SEQUENCE_LENGTH)
    gbs = train.positive("global_batch_size", int, high=limits.GLOBAL_BATCH_SIZE)
    bytes_per_element = train.get("bytes_per_element", int, 2, lambda v: v in (1, 2, 4), "1, 2 or 4")
    train.done()
    kinds, segments = _layer_list(path, top.get("layers", list))
    counts = {k: kinds.count(k) for k in TRANSFORMER_KINDS}
    expected = {"encoder": n_layers, "decoder": n_dec} if n_dec else {"transformer": n_layers}
    for kind, n in expected.items():
        if counts[kind] != n:
            raise SpecError(str(path), "layers", f"has {counts[kind]} {kind} layers but architecture says {n}")
    profile = _profile(path, top.sub("profile", ("file", "fwd_bwd_factor", "microbatch_scaling")), kinds)
    top.done()
    return ModelSpec(path=str(path), name=name, hidden_size=hidden, num_attention_heads=heads,
                     vocab_size=vocab, sequence_length=seq, global_batch_size=gbs,
                     tie_word_embeddings=tie, bytes_per_element=bytes_per_element,
                     layer_kinds=kinds, layer_segments=segments, profile=profile)


def _layer_list(path: Path, entries: list) -> tuple[tuple[str, ...], tuple[str, ...]]:
    kinds: list[str] = []
    segments: list[str] = []
    for i, entry in enumerate(entries):
        r = _Reader(path, entry, f"layers[{i}]", ("kind", "count", "segment"))
        kind = r.get("kind", str, check=lambda v: v in LAYER_KINDS, why=f"one of {LAYER_KINDS}")
        count = r.positive("count", int, 1, high=limits.LAYERS)
        segment = r.get("segment", str, "model")
        r.done()
        if len(kinds) + count > limits.LAYERS:
            raise r.error("count", f"the layer list passes {limits.LAYERS:,} entries, fasop's ceiling (README: Limits)")
        kinds += [kind] * count
        segments += [segment] * count
    if not kinds:
        raise SpecError(str(path), "layers", "must list at least one layer")
    order = list(dict.fromkeys(segments))
    if segments != sorted(segments, key=order.index):
        raise SpecError(str(path), "layers", f"segments must be contiguous, got {order}")
    return tuple(kinds), tuple(segments)


def _profile(path: Path, r: _Reader, kinds: tuple[str, ...]) -> Profile:
    file = path.parent / r.get("file", str)
    factor = r.number("fwd_bwd_factor", (int, float), *limits.FACTOR)
    scaling_reader = r.sub("microbatch_scaling")
    r.done()
    forward = _profile_csv(file, len(kinds))
    scaling = {}
    for gpu in scaling_reader.data:
        per_gpu = scaling_reader.sub(gpu)
        for kind in per_gpu.data:
            if kind not in kinds:
                raise per_gpu.error(kind, f"no layer of this kind in the layer list {sorted(set(kinds))}")
            scaling[(gpu, kind)] = _scaling_table(per_gpu.sub(kind, ("points", "beyond")))
        per_gpu.done()
    scaling_reader.done()
    for gpu, _tp in forward:
        for kind in sorted(set(kinds)):
            if (gpu, kind) not in scaling:
                raise scaling_reader.error(f"{gpu}.{kind}", "missing: every profiled GPU needs a table per layer kind")
    return Profile(forward_s=forward, fwd_bwd_factor=float(factor), scaling=scaling)


def _scaling_table(r: _Reader) -> ScalingTable:
    raw = r.get("points", dict)
    beyond = r.get("beyond", str, check=lambda v: v in ("proportional", "constant"), why="proportional or constant")
    r.done()
    points = _Reader(r.path, raw, r._name("points"))
    low, high = limits.FACTOR
    for b, value in raw.items():
        if not isinstance(b, int) or isinstance(b, bool) or not 1 <= b <= limits.GLOBAL_BATCH_SIZE:
            raise points.error(b, f"micro-batch sizes must be integers from 1 to {limits.GLOBAL_BATCH_SIZE:,}")
        factors = value if isinstance(value, list) else [value]
        if not 1 <= len(factors) <= limits.SCALING_FACTORS or not all(
                isinstance(f, (int, float)) and not isinstance(f, bool) and low <= f <= high for f in factors):
            raise points.error(b, f"must be a number from {low:g} to {high:g} or a list of 1 to "
                               f"{limits.SCALING_FACTORS} of them, got {show(value)}")
    if not raw:
        raise r.error("points", "needs at least one entry")
    table = tuple((b, tuple(float(f) for f in (v if isinstance(v, list) else [v]))) for b, v in sorted(raw.items()))
    return ScalingTable(points=table, beyond=beyond)


PROFILE_COLUMNS = ("gpu", "tp", "layer_index", "seconds")


def _profile_csv(file: Path, num_layers: int) -> dict[tuple[str, int], tuple[float, ...]]:
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
    low, high = limits.LAYER_SECONDS
    for line, row in enumerate(rows[1:], start=2):
        if not row:
            continue  # a blank line
        where = f"line {line}"
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
        if value is None or not low <= value <= high:
            raise SpecError(str(file), where, f"seconds must be a number from {low:g} to {high:g}, got {show(seconds)}")
        per_layer = table.setdefault((gpu, int(tp)), {})
        if int(index) in per_layer:
            raise SpecError(str(file), where, f"a second row for gpu={gpu} tp={int(tp)} layer_index={int(index)}")
        per_layer[int(index)] = value
    for (gpu, tp), per_layer in table.items():
        if len(per_layer) != num_layers:
            missing = [i for i in range(num_layers) if i not in per_layer]
            raise SpecError(str(file), f"{gpu} tp={tp}", f"has {len(per_layer)} layers, the layer list has "
                            f"{num_layers} (missing layer_index {missing[0]})")
    if not table:
        raise SpecError(str(file), "", "profile is empty")
    return {key: tuple(per_layer[i] for i in range(num_layers)) for key, per_layer in sorted(table.items())}


def _float(text: str) -> float | None:
    """A finite decimal number (no nan/inf, no '_' separators), else None."""
    if not text or "_" in text or not text.isascii():
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


# ----------------------------------------------------------------------------- shared readers
# The other spec loaders (catalog.py: GPU catalog and catalog clusters; hf_config.py: models
# from HuggingFace config.json) read YAML through these, so that this stays the one YAML module.
read_yaml = _read_yaml
Reader = _Reader
read_profile = _profile
