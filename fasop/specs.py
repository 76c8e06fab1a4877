"""Load and validate cluster, model and profile files into frozen dataclasses (SI units).

The only module that reads YAML. Every key is checked: an unknown or missing key, a wrong type
or an out-of-range number raises :class:`SpecError` naming the file, the key and the value.
Units are converted once, here: Gbit/s -> bytes/s, GiB -> bytes, $/h stays $/h.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import yaml

from fasop import limits
from fasop.errors import SpecError
from fasop.spec_files import decode_utf8, read_bounded, read_profile_csv, resolve, shipped_specs, show  # noqa: F401
# the spec values, re-exported: `fasop.specs` loads them and names them
from fasop.spec_types import (CATALOG_ESTIMATORS, GIB, LAYER_KINDS, TRANSFORMER_KINDS, ClusterSpec,  # noqa: F401
                              ModelSpec, NodeType, Profile, ScalingTable)

_ESTIMATOR_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
"""The `estimator` key's form; which names exist is the estimator registry's business
(estimators.make_estimator refuses an unknown one, naming this file and key)."""


class _Mapping(dict):
    """A YAML mapping that remembers its line and the line of each key (for error messages)."""

    def __init__(self, line: int):
        super().__init__()
        self.line, self.lines = line, {}


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
        mapping = _Mapping(node.start_mark.line + 1)
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


def read_yaml(path: Path) -> dict:
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


class Reader:
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

    def qualified(self, key: Any) -> str:
        key = show(key, quote=False)
        return f"{self.key}.{key}" if self.key else key

    def error(self, key: Any, message: str) -> SpecError:
        line = getattr(self.data, "lines", {}).get(key) if isinstance(key, (str, int)) else None
        return SpecError(str(self.path), self.qualified(key), message + (f" (line {line})" if line else ""))

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

    def sub(self, key: str, known: tuple[str, ...] = ()) -> "Reader":
        return Reader(self.path, self.get(key, dict), self.qualified(key), known)

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
    data = read_yaml(path)
    if data.get("estimator") in CATALOG_ESTIMATORS:
        from fasop.catalog import load_catalog_cluster  # catalog.py reads YAML through this module
        return load_catalog_cluster(path, data)
    top = Reader(path, data, "", _CLUSTER_KEYS)
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


def _node_type(r: Reader, name: str) -> NodeType:
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
    data = read_yaml(path)
    if "hf_config" in data:
        from fasop.hf_config import load_hf_spec
        return load_hf_spec(path, data)
    top = Reader(path, data, "", _MODEL_KEYS)
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
    profile = read_profile(path, top.sub("profile", ("file", "fwd_bwd_factor", "microbatch_scaling")), kinds)
    top.done()
    return ModelSpec(path=str(path), name=name, hidden_size=hidden, num_attention_heads=heads,
                     vocab_size=vocab, sequence_length=seq, global_batch_size=gbs,
                     tie_word_embeddings=tie, bytes_per_element=bytes_per_element,
                     layer_kinds=kinds, layer_segments=segments, profile=profile)


def _layer_list(path: Path, entries: list) -> tuple[tuple[str, ...], tuple[str, ...]]:
    kinds: list[str] = []
    segments: list[str] = []
    for i, entry in enumerate(entries):
        r = Reader(path, entry, f"layers[{i}]", ("kind", "count", "segment"))
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


def read_profile(path: Path, r: Reader, kinds: tuple[str, ...]) -> Profile:
    file = path.parent / r.get("file", str)
    factor = r.number("fwd_bwd_factor", (int, float), *limits.FACTOR)
    scaling_reader = r.sub("microbatch_scaling")
    r.done()
    forward = read_profile_csv(file, len(kinds))
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


def _scaling_table(r: Reader) -> ScalingTable:
    raw = r.get("points", dict)
    beyond = r.get("beyond", str, check=lambda v: v in ("proportional", "constant"), why="proportional or constant")
    r.done()
    points = Reader(r.path, raw, r.qualified("points"))
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
