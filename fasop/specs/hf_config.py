"""Models from HuggingFace `config.json`: the families fasop models, read without `transformers`.

Three ways in:
- `--model path/to/config.json` (or a folder holding one): the config with default training
  settings (DEFAULT_* below);
- a model spec YAML with `hf_config:` (a path relative to the YAML, or the config's keys inline),
  `training:` (sequence_length, global_batch_size) and optionally a FASOP `profile:` for the
  layer list embedding, transformer x N, head;
- shipped models by name: fasop/data/model_specs/llama-3-8b.yaml, llama-3-70b, llama-3.1-405b, qwen2.5-7b,
  gpt3-175b, the GPT shapes of Narayanan et al. 2021 Table 1 (gpt-sc21-*), and the small models of
  mixed older-GPU clusters: gpt2, gpt2-medium, gpt2-large, gpt2-xl, opt-350m/1.3b/2.7b/6.7b,
  gpt-neo-1.3b/2.7b (docs/models.md).

Families (keys per shared/reference/ecosystem/03_hf_config_keys.md §3.1, with HF's defaults):
- `gpt2`: n_embd, n_layer, n_head, n_inner (None -> 4h), n_positions; GELU, LayerNorm, biases,
  learned positions, tied embeddings (default true), dropout.
- `opt`: hidden_size, num_hidden_layers, num_attention_heads, ffn_dim, word_embed_proj_dim (a
  narrower token embedding with project_in / project_out linears, OPT-350M), enable_bias,
  do_layer_norm_before (False: post-LN, no final norm); ReLU MLP, LayerNorm, learned positions
  offset by 2 (max_position_embeddings + 2 rows), tied embeddings, dropout.
- `gpt_neo`: hidden_size, num_layers, num_heads, intermediate_size (None -> 4h), attention_types
  (or attention_layers): the "local" layers attend to the last window_size tokens; GPT-2 otherwise
  (its Q/K/V projections have no bias: fasop counts one, 3h a layer, 0.01 % of the model).
- `bert`: hidden_size, num_hidden_layers, num_attention_heads, intermediate_size,
  max_position_embeddings; as GPT-2 (the MLM head is tied).
- `t5`: d_model, num_layers + num_decoder_layers, num_heads, d_kv, d_ff, feed_forward_proj
  (`gated-*` -> gated MLP); RMS-style norm without bias, relative positions, tied. The decoder's
  cross-attention is not modelled (its layers are costed as encoder layers).
- `llama`, `mistral`, `qwen2` (Qwen2 and Qwen2.5): hidden_size, num_hidden_layers,
  num_attention_heads, num_key_value_heads (None -> heads: GQA), head_dim (None -> h/heads),
  intermediate_size; gated MLP (SwiGLU, three matrices), RMSNorm, rotary positions, no dropout,
  tie_word_embeddings (default false), QKV bias (`attention_bias`; always on for qwen2).
The mixture-of-experts, MLA, windowed-attention and hybrid Mamba-2 families are read by
`hf_families.py`. A config whose language model sits under `text_config` (next to a vision
tower) is planned as that language model, with a note that the vision tower is not modelled;
other multimodal configs, and MoE keys in a dense family, are refused, naming the key.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from fasop.core import limits
from fasop.core.errors import SpecError
from fasop.specs import hf_families
from fasop.specs.architecture import Architecture
from fasop.specs.files import decode_utf8, path_kind, read_bounded, show
from fasop.specs.profiles import read_profile
from fasop.specs.reader import Reader
from fasop.specs.types import ModelSpec

FAMILIES = ("gpt2", "opt", "gpt_neo", "bert", "t5", "llama", "mistral", "qwen2") + hf_families.MOE_FAMILIES
DEFAULT_SEQUENCE_LENGTH = 4096
"""For a bare config.json: min(this, max_position_embeddings)."""
DEFAULT_GLOBAL_BATCH_SIZE = 256
"""For a bare config.json: sequences per step (about 1M tokens at 4096)."""
_MOE_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_intermediate_size", "num_experts_per_tok")
_MULTIMODAL_KEYS = ("vision_config", "audio_config", "vision_tower", "mm_projector_type")
_SPEC_KEYS = ("name", "hf_config", "training", "profile")
_CEILINGS = {key: high for keys, high in (
    (("n_layer", "num_hidden_layers", "num_layers", "num_decoder_layers"), limits.LAYERS),
    (("n_embd", "hidden_size", "d_model", "head_dim", "d_kv"), limits.HIDDEN_SIZE),
    (("n_head", "num_attention_heads", "num_key_value_heads", "num_heads"), limits.ATTENTION_HEADS),
    (("vocab_size",), limits.VOCAB_SIZE),
    (("n_positions", "max_position_embeddings"), limits.SEQUENCE_LENGTH * 64))
    for key in keys}
"""limits.py's ceilings for config.json keys (the FFN width: 64 x the hidden ceiling)."""
CONFIG_BYTES = 1 << 20
"""A config.json is at most 1 MiB (real ones: ~1-5 KB)."""


def architecture_from_config(cfg: dict, where: str) -> Architecture:
    """The Architecture of a parsed config.json; SpecError(where, key, ...) for what fasop cannot model."""
    if not isinstance(cfg, dict):
        raise SpecError(where, "", "a config.json must hold a JSON object")
    notes = ()
    if "text_config" in cfg:
        text = cfg["text_config"]
        if not isinstance(text, dict):
            raise SpecError(where, "text_config", "must be a JSON object")
        if "tie_word_embeddings" in cfg and "tie_word_embeddings" not in text:  # Qwen3-VL states it at the top
            text = text | {"tie_word_embeddings": cfg["tie_word_embeddings"]}
        cfg, where = text, f"{where}: text_config"
        notes = ("the language model only: the vision tower is not modelled",)
    for key in _MULTIMODAL_KEYS:
        if key in cfg:
            raise SpecError(where, key, "multimodal model without a text_config: fasop models the language model")
    if not isinstance(cfg.get("model_type", ""), str):
        raise SpecError(where, "model_type", f"must be a string, got {str(cfg['model_type'])[:60]!r}")
    if "model_type" not in cfg and not isinstance(cfg.get("architectures", []), list):
        raise SpecError(where, "architectures", f"must be a list of class names, got {str(cfg['architectures'])[:60]!r}")
    family = hf_families.family_of(cfg)
    if family is None:
        raise SpecError(where, "model_type", f"missing required key (supported: {', '.join(FAMILIES)})")
    if family not in hf_families.MOE_FAMILIES or family in hf_families.DENSE_FAMILIES:
        for key in _MOE_KEYS:
            if cfg.get(key) not in (None, 0, 1):
                raise SpecError(where, key, f"mixture-of-experts key ({key} = {str(cfg[key])[:60]!r}) in a dense "
                                            f"{family!r} config")
    if family not in FAMILIES:
        raise SpecError(where, "model_type", f"unsupported model_type {family!r} (supported: {', '.join(FAMILIES)})")
    build = {"gpt2": _gpt2, "opt": _opt, "gpt_neo": _gpt_neo, "bert": _bert, "t5": _t5}.get(family, _llama)
    if family in hf_families.MOE_FAMILIES:
        build = hf_families.build
    try:
        arch = build(_Keys(cfg, where, _CEILINGS), family)
    except ValueError as exc:
        raise SpecError(where, "", str(exc)) from None
    return replace(arch, notes=notes + arch.notes) if notes else arch


_Keys = hf_families.Keys


def _gpt2(k: _Keys, family: str) -> Architecture:
    h, heads = k.int("n_embd", 768), k.int("n_head", 12)
    return Architecture(family=family, num_layers=k.int("n_layer", 12), hidden_size=h, num_attention_heads=heads,
                        num_kv_heads=heads, head_dim=h // heads, ffn_hidden_size=k.int("n_inner", 4 * h),
                        vocab_size=k.int("vocab_size", 50257), tied_embeddings=k.flag("tie_word_embeddings", True),
                        max_positions=k.int("n_positions", 1024),
                        dropout=k.rate("resid_pdrop", "attn_pdrop", "embd_pdrop") or "resid_pdrop" not in k.cfg)


def _opt(k: _Keys, family: str) -> Architecture:
    """HF OPTForCausalLM: embed_tokens (vocab x word_embed_proj_dim), embed_positions
    (max_position_embeddings + 2 rows), project_in/out when word_embed_proj_dim != hidden_size."""
    h, heads = k.int("hidden_size"), k.int("num_attention_heads")
    if not k.flag("layer_norm_elementwise_affine", True):
        k.refuse("layer_norm_elementwise_affine", "LayerNorms without weights")
    pre = k.flag("do_layer_norm_before", True)
    return Architecture(family=family, num_layers=k.int("num_hidden_layers"), hidden_size=h, num_attention_heads=heads,
                        num_kv_heads=heads, head_dim=h // heads, ffn_hidden_size=k.int("ffn_dim"),
                        vocab_size=k.int("vocab_size"), tied_embeddings=k.flag("tie_word_embeddings", True),
                        linear_bias=k.flag("enable_bias", True), max_positions=k.int("max_position_embeddings"),
                        position_offset=2, embedding_width=k.int("word_embed_proj_dim", h),
                        final_norm=pre and not k.flag("_remove_final_layer_norm", False),
                        dropout=k.rate("dropout", "attention_dropout") or "dropout" not in k.cfg)


def _gpt_neo(k: _Keys, family: str) -> Architecture:
    """HF GPTNeoForCausalLM: GPT-2's layer with local (windowed) attention on the `local` layers;
    its q_proj, k_proj, v_proj have no bias, out_proj and the MLP do (modeling_gpt_neo.py)."""
    h, heads, n = k.int("hidden_size"), k.int("num_heads"), k.int("num_layers")
    kinds = _neo_attention_layers(k, n)
    window = k.int("window_size", 256)
    return Architecture(family=family, num_layers=n, hidden_size=h, num_attention_heads=heads, num_kv_heads=heads,
                        head_dim=h // heads, ffn_hidden_size=k.int("intermediate_size", 4 * h),
                        vocab_size=k.int("vocab_size", 50257), tied_embeddings=k.flag("tie_word_embeddings", True),
                        max_positions=k.int("max_position_embeddings", 2048), window=window, qkv_bias=False,
                        windowed_layers=tuple(i for i, t in enumerate(kinds) if t == "local"),
                        dropout=k.rate("resid_dropout", "attention_dropout", "embed_dropout")
                        or "resid_dropout" not in k.cfg)


def _neo_attention_layers(k: _Keys, n: int) -> list:
    """Each layer's attention ("global" / "local"): attention_types [[pattern, repeats], ...]
    expanded as GPTNeoConfig.expand_attention_types_params does, else attention_layers."""
    types = k.cfg.get("attention_types")
    if types is None:
        layers = k.cfg.get("attention_layers") or ["global"] * n
    else:
        ok = isinstance(types, list) and all(
            isinstance(p, list) and len(p) == 2 and isinstance(p[0], list) and isinstance(p[1], int)
            and not isinstance(p[1], bool) and 1 <= p[1] <= n for p in types)
        if not ok:
            raise SpecError(k.where, "attention_types", f"must list [[pattern], repeats] pairs, got {str(types)[:60]!r}")
        layers = [t for pattern, repeat in types for _ in range(repeat) for t in pattern[:n]]
    if not isinstance(layers, list) or len(layers) != n or not set(map(str, layers)) <= {"global", "local"}:
        bad = [t for t in layers if t not in ("global", "local")] if isinstance(layers, list) else [layers]
        got = repr(str(bad[0])[:60]) if bad else f"{len(layers)} layers"
        raise SpecError(k.where, "attention_types", f"must give {n} layers of global / local, got {got}")
    return layers


def _bert(k: _Keys, family: str) -> Architecture:
    h, heads = k.int("hidden_size", 768), k.int("num_attention_heads", 12)
    return Architecture(family=family, num_layers=k.int("num_hidden_layers", 12), hidden_size=h,
                        num_attention_heads=heads, num_kv_heads=heads, head_dim=h // heads,
                        ffn_hidden_size=k.int("intermediate_size", 3072), vocab_size=k.int("vocab_size", 30522),
                        tied_embeddings=k.flag("tie_word_embeddings", True),
                        max_positions=k.int("max_position_embeddings", 512),
                        dropout=k.rate("hidden_dropout_prob") or "hidden_dropout_prob" not in k.cfg)


def _t5(k: _Keys, family: str) -> Architecture:
    enc = k.int("num_layers", 6)
    proj = k.cfg.get("feed_forward_proj", "relu")
    return Architecture(family=family, num_layers=enc + k.int("num_decoder_layers", enc),
                        hidden_size=k.int("d_model", 512), num_attention_heads=k.int("num_heads", 8),
                        num_kv_heads=k.int("num_heads", 8), head_dim=k.int("d_kv", 64), ffn_hidden_size=k.int("d_ff", 2048),
                        vocab_size=k.int("vocab_size", 32128), gated_mlp=str(proj).startswith("gated-"),
                        tied_embeddings=k.flag("tie_word_embeddings", True), linear_bias=False, norm="rmsnorm",
                        position="relative", dropout=k.rate("dropout_rate") or "dropout_rate" not in k.cfg)


def _llama(k: _Keys, family: str) -> Architecture:
    h, heads = k.int("hidden_size"), k.int("num_attention_heads")
    return Architecture(family=family, num_layers=k.int("num_hidden_layers"), hidden_size=h,
                        num_attention_heads=heads, num_kv_heads=k.int("num_key_value_heads", heads),
                        head_dim=k.int("head_dim", h // heads), ffn_hidden_size=k.int("intermediate_size"),
                        vocab_size=k.int("vocab_size"), gated_mlp=True,
                        tied_embeddings=k.flag("tie_word_embeddings", False),
                        qkv_bias=family == "qwen2" or k.flag("attention_bias", False),
                        linear_bias=k.flag("mlp_bias", False), norm="rmsnorm", position="rotary",
                        max_positions=k.int("max_position_embeddings", 0), dropout=k.rate("attention_dropout"))


# ----------------------------------------------------------------------------- model specs
def read_config(path: Path) -> dict:
    text = decode_utf8(path, read_bounded(path, CONFIG_BYTES, " config.json"))
    def bounded_int(digits: str) -> int:  # int() of 5,000 digits: a ValueError, and slow before it
        if len(digits) > 30:
            raise SpecError(str(path), "", f"an integer of {len(digits):,} digits (at most 30)")
        return int(digits)

    def unique(pairs: list) -> dict:  # a key given twice: json keeps the last, silently
        out = dict(pairs)
        if len(out) < len(pairs):
            seen = set()
            twice = next(k for k, _ in pairs if k in seen or seen.add(k))
            raise SpecError(str(path), str(twice)[:60], "key given more than once")
        return out

    try:
        return json.loads(text, parse_int=bounded_int, object_pairs_hook=unique)
    except json.JSONDecodeError as exc:
        raise SpecError(str(path), "", f"malformed JSON at line {exc.lineno}: {exc.msg}") from None
    except RecursionError:
        raise SpecError(str(path), "", "JSON nested too deeply") from None


def config_file(path: Path) -> Path:
    """A config.json, or the one in a folder (a Hub snapshot's layout)."""
    if path_kind(path) != "dir":
        return path
    if path_kind(path / "config.json") != "file":
        raise SpecError(str(path), "", "folder holds no config.json")
    return path / "config.json"


def load_config_json(path: Path) -> ModelSpec:
    """`--model path/to/config.json` or a folder holding one, with the default training settings."""
    file = config_file(path)
    arch = architecture_from_config(read_config(file), str(file))
    seq = min(DEFAULT_SEQUENCE_LENGTH, arch.max_positions or DEFAULT_SEQUENCE_LENGTH)
    name = file.parent.name if file.name == "config.json" else file.stem
    return model_spec(arch, path=str(file), name=name, sequence_length=seq,
                      global_batch_size=DEFAULT_GLOBAL_BATCH_SIZE)


def load_hf_spec(path: Path, data: dict) -> ModelSpec:
    """A model spec YAML with `hf_config:` (file or inline mapping) and `training:`."""
    top = Reader(path, data, "", _SPEC_KEYS)
    name = top.get("name", str)
    source = top.get("hf_config", (str, dict))
    if isinstance(source, str):
        file = path.parent / source
        if path_kind(file) != "file":  # named in the spec: the spec and its key say where the name came from
            what = "a folder, not a config.json" if path_kind(file) == "dir" else "no such file"
            raise SpecError(str(path), "hf_config", f"{show(source)}: {what} (a path relative to the spec's folder)")
        arch = architecture_from_config(read_config(file), str(file))
    else:
        arch = architecture_from_config(source, f"{path}: hf_config")
    train = top.sub("training", ("sequence_length", "global_batch_size"))
    seq = train.positive("sequence_length", int, high=limits.SEQUENCE_LENGTH)
    gbs = train.positive("global_batch_size", int, high=limits.GLOBAL_BATCH_SIZE)
    train.done()
    spec = model_spec(arch, path=str(path), name=name, sequence_length=seq, global_batch_size=gbs)
    if "profile" in top.data:
        sub = top.sub("profile", ("file", "fwd_bwd_factor", "microbatch_scaling"))
        spec = _with_profile(spec, read_profile(path, sub, spec.layer_kinds))
    top.done()
    return spec


def model_spec(arch: Architecture, *, path: str, name: str, sequence_length: int,
               global_batch_size: int) -> ModelSpec:
    """The ModelSpec of an Architecture: layer list embedding, transformer x N, head."""
    kinds = ("embedding",) + ("transformer",) * arch.num_layers + ("head",)
    return ModelSpec(path=path, name=name, hidden_size=arch.hidden_size, num_attention_heads=arch.num_attention_heads,
                     vocab_size=arch.vocab_size, sequence_length=sequence_length, global_batch_size=global_batch_size,
                     tie_word_embeddings=arch.tied_embeddings, bytes_per_element=2, layer_kinds=kinds,
                     layer_segments=("model",) * len(kinds), profile=None, architecture=arch)


def _with_profile(spec: ModelSpec, profile) -> ModelSpec:
    from dataclasses import replace
    return replace(spec, profile=profile)
