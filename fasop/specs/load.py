"""Load and validate cluster and model files into frozen dataclasses (SI units).

Every key is checked: an unknown or missing key, a wrong type or an out-of-range number raises
:class:`SpecError` naming the file, the key and the value. Units are converted once, here:
Gbit/s -> bytes/s, GiB -> bytes, $/h stays $/h. Catalog clusters (`estimator: analytic`) go to
catalog.py, HuggingFace configs to hf_config.py.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path

from fasop.core import limits
from fasop.core.errors import SpecError
from fasop.specs.files import path_kind, resolve, show
from fasop.specs.profiles import read_profile
from fasop.specs.reader import Reader, read_yaml
from fasop.specs.types import CATALOG_ESTIMATORS, GIB, LAYER_KINDS, TRANSFORMER_KINDS, ClusterSpec, ModelSpec, NodeType

_ESTIMATOR_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
"""The `estimator` key's form; which names exist is the estimator registry's business
(estimators.make_estimator refuses an unknown one, naming this file and key)."""


# ----------------------------------------------------------------------------- cluster
_CLUSTER_KEYS = ("estimator", "links", "memory", "node_types")
_LINKS_KEYS = ("p2p_inter_node_divisor", "p2p_intra_node_divisor")
_NODE_TYPE_KEYS = ("instance", "gpu", "gpus_per_node", "memory_limit_gib", "intra_node_gbit_per_s",
                   "inter_node_gbit_per_s", "intra_node_shared", "usd_per_hour", "spot_usd_per_hour")


def load_cluster(name_or_path: str) -> ClusterSpec:
    path = resolve(name_or_path, "cluster_specs")
    data = read_yaml(path)
    if data.get("estimator") in CATALOG_ESTIMATORS:
        from fasop.specs.catalog_clusters import load_catalog_cluster  # (FASOP's clusters never import the catalog)

        return load_catalog_cluster(path, data)
    _check_form(path, data)
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


def _check_form(path: Path, data: dict) -> None:
    """A spec whose `estimator` is no catalog estimator is read in the profiled form (`links:`, `memory:`, node
    types with their memory and links); one with neither section is a catalog spec whose estimator name is wrong
    (`analytc`): refused naming that value, not the `links:` it lacks."""
    name = data.get("estimator")
    if not isinstance(name, str) or "links" in data or "memory" in data:
        return
    close = difflib.get_close_matches(name, CATALOG_ESTIMATORS, n=1, cutoff=0.6)
    if not close:   # another estimator's spec (fasop-2024) missing its sections: the reader names the first
        return
    raise SpecError(str(path), "estimator", f"{show(name)} is not a catalog estimator ({', '.join(CATALOG_ESTIMATORS)}), "
                                            f"and the spec has no links: or memory: section, which the other "
                                            f"estimators' specs (fasop-2024) need; did you mean {close[0]!r}?")


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


def load_model(name_or_path: str) -> ModelSpec:
    candidate = Path(name_or_path)
    if candidate.suffix == ".json" or path_kind(candidate) == "dir":
        from fasop.specs.hf_config import load_config_json  # (FASOP's profiled models never import it)

        return load_config_json(candidate)
    path = resolve(name_or_path, "model_specs")
    data = read_yaml(path)
    if "hf_config" in data:
        from fasop.specs.hf_config import load_hf_spec

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
