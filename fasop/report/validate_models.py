"""A `fasop validate` row's model: a config.json or shipped model spec its `model` cell names (read once per
version of the file: `fasop calibrate` predicts every run hundreds of times), else its architecture columns."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from fasop.core.errors import FasopError, SpecError
from fasop.report.validate_rows import ARCHITECTURE, Cells
from fasop.specs.architecture import gpt_architecture
from fasop.specs.files import named, path_kind
from fasop.specs.hf_config import architecture_from_config, config_file, read_config
from fasop.specs.load import load_model


def row_model(c: Cells, seq: int):
    """`model`: a config.json path relative to the CSV, or a shipped model's name; it replaces the
    architecture columns, which must then be empty."""
    given = [k for k in ARCHITECTURE + ("ffn_hidden_size", "num_kv_heads", "gated_mlp", "tied_embeddings")
             if c.text(k)]
    if given:
        raise c.error(given[0], "a row naming a `model` leaves the architecture columns empty")
    text = c.text("model")
    beside = c.path.parent / text
    try:
        if path_kind(beside) is not None:   # a config.json, or the folder holding one (a Hub snapshot)
            return architecture(str(config_file(beside)), "config", *_stamp(config_file(beside)))
        json = beside.suffix == ".json"
        spec = None if json else named(text, "model_specs", c.path.parent)
        if spec is None and _exists(beside):   # a FIFO, a device, a socket: nothing to read a config from
            raise SpecError(str(beside), "", "not a regular file or folder")
        if spec is None:
            why = "no such file or folder" + ("" if Path(text).is_absolute() else
                                              " (a `model` path is read from the CSV's folder)")
            if not json:
                why += f", nor a shipped model named {Path(text).name!r} (fasop list models)"
            raise SpecError(str(beside), "", why)
        return architecture(str(spec), "spec", *_stamp(Path(spec)))
    except FasopError as exc:
        raise c.error("model", str(exc)) from None


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except (OSError, ValueError):
        return False


def _stamp(path: Path) -> tuple[int, int]:
    """(modification time ns, size) of a file: a model read again once it changes."""
    st = path.stat()
    return st.st_mtime_ns, st.st_size


@lru_cache(maxsize=64)
def architecture(path: str, kind: str, mtime_ns: int, size: int):
    """The architecture of a config.json (`kind` config) or model spec (spec), read once per version of the file:
    `fasop calibrate` predicts every run hundreds of times. `validate` and `calibrate` clear it as they start (a
    spec's `hf_config` file is not in the key)."""
    if kind == "config":
        return architecture_from_config(read_config(Path(path)), path)
    return load_model(path).architecture


def columns_model(c: Cells, seq: int, tp: int):
    """The GPT-style architecture the row's columns give."""
    layers, hidden, heads = c.int("num_layers"), c.int("hidden_size"), c.int("num_attention_heads")
    vocab = c.int("vocab_size")
    gated = c.flag("gated_mlp", False)
    kv = c.int("num_kv_heads", heads)
    if heads % tp or heads % kv or hidden % heads:
        raise c.error("tp", f"tp = {tp}, heads = {heads}, kv heads = {kv}, hidden = {hidden}: heads must divide "
                            "by tp and kv heads, hidden by heads")
    return gpt_architecture(num_layers=layers, hidden_size=hidden, num_attention_heads=heads, vocab_size=vocab,
                            ffn_hidden_size=c.int("ffn_hidden_size", 0) or 0, num_kv_heads=kv, gated_mlp=gated,
                            tied_embeddings=c.flag("tied_embeddings", not gated), max_positions=seq)
