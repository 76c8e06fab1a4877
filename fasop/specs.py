"""Load and validate cluster, model and profile files into frozen dataclasses (SI units).

The only module that reads YAML. Every key is checked: an unknown or missing key, a wrong type
or an out-of-range number raises :class:`SpecError` naming the file, the key and the value.
Units are converted once, here: Gbit/s -> bytes/s, GiB -> bytes, $/h stays $/h.
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

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
def resolve(name_or_path: str, folder: str) -> Path:
    """A spec given as a path, or as a name in `folder` (./folder first, then fasop's own)."""
    candidate = Path(name_or_path)
    if candidate.suffix in (".yaml", ".yml") or candidate.parent != Path("."):
        if not candidate.is_file():
            raise SpecError(str(candidate), "", "no such file")
        return candidate
    for root in (Path.cwd(), _REPO_ROOT):
        path = root / folder / f"{name_or_path}.yaml"
        if path.is_file():
            return path
    known = sorted(p.stem for p in (_REPO_ROOT / folder).glob("*.yaml"))
    raise SpecError(name_or_path, "", f"no spec named {name_or_path!r} in {folder}/ (known: {', '.join(known)})")


def _read_yaml(path: Path) -> dict:
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise SpecError(str(path), "", f"cannot read: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else "?"
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SpecError(str(path), "", f"malformed YAML at {where}: {problem}") from None
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
            raise SpecError(str(path), key or "(top level)", f"must be a mapping, got {data!r}")
        self.path, self.data, self.key, self.seen, self.known = path, data, key, set(), known
        if known:
            self._reject_unknown(known)

    def _name(self, key: str) -> str:
        return f"{self.key}.{key}" if self.key else str(key)

    def error(self, key: str, message: str) -> SpecError:
        return SpecError(str(self.path), self._name(key), message)

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
            raise self.error(key, f"must be {names}, got {value!r}")
        if isinstance(value, float) and not math.isfinite(value):
            raise self.error(key, f"must be finite, got {value!r}")
        if check is not None and not check(value):
            raise self.error(key, f"must be {why}, got {value!r}")
        return value

    def positive(self, key: str, kind=(int, float), default: Any = ...) -> Any:
        return self.get(key, kind, default, lambda v: v > 0, "> 0")

    def sub(self, key: str, known: tuple[str, ...] = ()) -> "_Reader":
        return _Reader(self.path, self.get(key, dict), self._name(key), known)

    def _reject_unknown(self, known) -> None:
        extra = [k for k in self.data if k not in known]
        if extra:
            raise self.error(str(extra[0]), f"unknown key (known: {', '.join(sorted(map(str, known)))})")

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
    inter_div = links.positive("p2p_inter_node_divisor")
    intra_div = links.positive("p2p_intra_node_divisor")
    links.done()
    memory = top.sub("memory", ("overhead_factor",))
    overhead = memory.get("overhead_factor", (int, float), check=lambda v: v >= 1, why=">= 1")
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
    spot = r.get("spot_usd_per_hour", (int, float), None, lambda v: v >= 0, ">= 0")
    node = NodeType(
        name=name,
        instance=r.get("instance", str),
        gpu=r.get("gpu", str),
        gpus_per_node=r.positive("gpus_per_node", int),
        memory_limit_bytes=float(r.positive("memory_limit_gib")) * GIB,
        intra_node_bytes_per_s=float(r.positive("intra_node_gbit_per_s")) * 1e9 / 8,
        inter_node_bytes_per_s=float(r.positive("inter_node_gbit_per_s")) * 1e9 / 8,
        intra_node_shared=r.get("intra_node_shared", bool),
        usd_per_hour=float(r.get("usd_per_hour", (int, float), check=lambda v: v >= 0, why=">= 0")),
        spot_usd_per_hour=None if spot is None else float(spot),
    )
    r.done()
    return node


# ----------------------------------------------------------------------------- model
_MODEL_KEYS = ("name", "architecture", "training", "layers", "profile")
_ARCHITECTURE_KEYS = ("hidden_size", "num_hidden_layers", "num_decoder_layers", "num_attention_heads",
                      "vocab_size", "tie_word_embeddings")
_TRAINING_KEYS = ("sequence_length", "global_batch_size", "bytes_per_element")


def load_model(name_or_path: str) -> ModelSpec:
    candidate = Path(name_or_path)
    if candidate.suffix == ".json" or candidate.is_dir():
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
    hidden = arch.positive("hidden_size", int)
    n_layers = arch.positive("num_hidden_layers", int)
    n_dec = arch.get("num_decoder_layers", int, 0, lambda v: v >= 0, ">= 0")
    heads = arch.positive("num_attention_heads", int)
    vocab = arch.positive("vocab_size", int)
    tie = arch.get("tie_word_embeddings", bool)
    arch.done()
    train = top.sub("training", _TRAINING_KEYS)
    seq = train.positive("sequence_length", int)
    gbs = train.positive("global_batch_size", int)
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
        count = r.positive("count", int, 1)
        segment = r.get("segment", str, "model")
        r.done()
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
    factor = r.positive("fwd_bwd_factor")
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
    points = []
    for b, value in sorted(raw.items(), key=lambda kv: kv[0] if isinstance(kv[0], int) else -1):
        factors = tuple(value) if isinstance(value, list) else (value,)
        if not isinstance(b, int) or isinstance(b, bool) or b < 1:
            raise r.error(f"points.{b}", "micro-batch sizes must be integers >= 1")
        if not factors or not all(isinstance(f, (int, float)) and not isinstance(f, bool) and f > 0 for f in factors):
            raise r.error(f"points.{b}", f"must be a positive number or a list of them, got {value!r}")
        points.append((b, tuple(float(f) for f in factors)))
    if not points:
        raise r.error("points", "needs at least one entry")
    return ScalingTable(points=tuple(points), beyond=beyond)


def _profile_csv(file: Path, num_layers: int) -> dict[tuple[str, int], tuple[float, ...]]:
    try:
        with open(file, newline="") as fh:
            rows = list(csv.DictReader(fh))
    except OSError as exc:
        raise SpecError(str(file), "", f"cannot read profile: {exc.strerror}") from None
    table: dict[tuple[str, int], dict[int, float]] = {}
    for line, row in enumerate(rows, start=2):
        try:
            key = (row["gpu"], int(row["tp"]))
            index, seconds = int(row["layer_index"]), float(row["seconds"])
        except (KeyError, TypeError, ValueError):
            raise SpecError(str(file), f"line {line}", f"needs columns gpu,tp,layer_index,seconds; got {row}") from None
        if not (seconds > 0 and math.isfinite(seconds)) or key[1] < 1 or not 0 <= index < num_layers:
            raise SpecError(str(file), f"line {line}", f"out of range: tp={key[1]} layer_index={index} seconds={seconds}")
        table.setdefault(key, {})[index] = seconds
    for (gpu, tp), per_layer in table.items():
        if len(per_layer) != num_layers:
            missing = [i for i in range(num_layers) if i not in per_layer]
            raise SpecError(str(file), f"{gpu} tp={tp}", f"has {len(per_layer)} layers, the layer list has "
                            f"{num_layers} (missing layer_index {missing[0]})")
    if not table:
        raise SpecError(str(file), "", "profile is empty")
    return {key: tuple(per_layer[i] for i in range(num_layers)) for key, per_layer in sorted(table.items())}


# ----------------------------------------------------------------------------- shared readers
# The other spec loaders (catalog.py: GPU catalog and catalog clusters; hf_config.py: models
# from HuggingFace config.json) read YAML through these, so that this stays the one YAML module.
read_yaml = _read_yaml
Reader = _Reader
read_profile = _profile
