"""The config.json families beyond the dense Llama shape: mixture-of-experts, MLA, windowed
attention, hybrid Mamba-2 (keys per shared/reference/ecosystem/07_moe_cp_fsdp.md §1.1, HF's
defaults; docs/models.md gives each family's formulas and published counts).

- `mixtral` (and Grok-1's Mixtral-style `Grok1ModelForCausalLM`, which has no model_type):
  num_local_experts / num_experts, num_experts_per_tok, intermediate_size = expert width.
- `qwen2_moe`, `qwen3_moe`: num_experts, moe_intermediate_size, shared_expert_intermediate_size
  (Qwen2-MoE, with its sigmoid gate), decoder_sparse_step and mlp_only_layers pick the MoE layers;
  QK-norm on qwen3_moe. `qwen3`: the Llama shape with QK-norm.
- `deepseek_v2`, `deepseek_v3`, `kimi_k2`: MLA (q_lora_rank, kv_lora_rank, qk_nope/rope_head_dim,
  v_head_dim), n_routed_experts + n_shared_experts, first_k_dense_replace dense layers,
  num_nextn_predict_layers MTP modules (counted apart; a search trains them with --mtp-layers N),
  n_group / topk_group group-limited routing (also nemotron_h's).
- `gpt_oss`: experts with biases, router bias, attention biases and sinks, layer_types with
  sliding_window.
- `llama4` / `llama4_text`: text_config, interleave_moe_layer_step, a shared expert in every MoE
  layer, intermediate_size_mlp for the dense layers, attention_chunk_size (chunked attention on
  three layers of four).
- `qwen3_vl_moe_text`, `qwen3_vl_text`: Qwen3-VL's language models (its `text_config`), read as
  qwen3_moe / qwen3 (the same keys; the interleaved multimodal RoPE and the visual features added to
  the first layers' inputs change no weight matmul).
- `gemma2`, `gemma3` / `gemma3_text`: head_dim, four norms a layer, sliding windows
  (layer_types, or every other layer / sliding_window_pattern), final-logit soft-capping, tied; a key
  a config leaves out takes transformers' default (GEMMA_DEFAULTS: Google's Gemma 3 configs rely on them).
- `nemotron_h`: hybrid_override_pattern (or layers_block_type): M Mamba-2, * attention, - MLP,
  E MoE; relu² MLPs and experts (not gated), one norm per block, no position embedding (NoPE);
  moe_latent_size (Nemotron 3 Super / Ultra's latent MoE: routed experts on h -> latent tokens), the
  MTP block as mtp_layers_block_type or mtp_hybrid_override_pattern.
Every MoE family requires its routed-expert count and `num_experts_per_tok` (at most that count); layer-pattern
keys stay within num_hidden_layers. A key that would change the arithmetic in a way fasop does not model is
refused, naming it.
"""

from __future__ import annotations

import math

from fasop.core import limits
from fasop.core.errors import SpecError
from fasop.specs.architecture import MLA, Architecture, Mamba, MoE

MOE_FAMILIES = ("mixtral", "grok-1", "qwen2_moe", "qwen3_moe", "qwen3", "deepseek_v2", "deepseek_v3", "kimi_k2",
                "gpt_oss", "llama4", "llama4_text", "gemma2", "gemma3", "gemma3_text", "nemotron_h")
DENSE_FAMILIES = ("qwen3", "gemma2", "gemma3", "gemma3_text")
"""The families read here that have no experts: MoE keys in their configs are refused, as in hf_config's."""
_NEMOTRON_BLOCKS = {"M": "mamba", "*": "attention", "-": "mlp", "E": "experts",
                    "mamba": "mamba", "attention": "attention", "mlp": "mlp", "moe": "experts"}
_REFUSED = {"moe_latent_size": ("latent MoE (experts on a down-projected token)", ("nemotron_h",)),
            "moe_layer_freq": ("MoE every n-th layer other than 1", ()),
            "no_rope_layers": (None, ())}
"""Keys whose non-default values change the math in ways not modelled (None: accepted, no effect), and the
families that do model them (nemotron_h reads Nemotron 3 Super / Ultra's moe_latent_size)."""


class Keys:
    """Typed access to config keys with HF's defaults; errors name the key."""

    def __init__(self, cfg: dict, where: str, ceilings: dict):
        self.cfg, self.where, self.ceilings = cfg, where, ceilings

    def int(self, key: str, default=..., *, low: int = 1, high: int | None = None, why: str = "") -> int:
        """An integer in [low, high] (high: the key's ceiling unless given; `why` says where a given one comes
        from); absent or null: the default, or a missing required key."""
        value = self.cfg.get(key)
        if value is None:
            if default is ...:
                raise SpecError(self.where, key, "missing required key")
            return default
        high = self.ceilings.get(key, limits.HIDDEN_SIZE * 64) if high is None else high
        if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
            raise SpecError(self.where, key, f"must be an integer in [{low}, {high:,}]{why}, got {str(value)[:60]!r}")
        return value

    def number(self, key: str, default: float | None) -> float | None:
        """A finite real >= 0 (a cap, a scale); absent or null: the default."""
        value = self.cfg.get(key)
        if value is None:
            return default
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value <= 1e9:
            raise SpecError(self.where, key, f"must be a number in [0, 1e9], got {str(value)[:60]!r}")
        return float(value)

    def count(self, key: str, default: int = 0, **bounds) -> int:
        """An integer that may be 0 (a count of modules or layers); `bounds`: high and why, as int's."""
        return default if self.cfg.get(key) in (0, None) else self.int(key, low=0, **bounds)

    def flag(self, key: str, default: bool) -> bool:
        value = self.cfg.get(key, default)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise SpecError(self.where, key, f"must be true or false, got {value!r}")
        return value

    def rate(self, *keys: str) -> bool:
        """True when any of these dropout probabilities is > 0."""
        return any(isinstance(self.cfg.get(k), (int, float)) and self.cfg.get(k) > 0 for k in keys)

    def refuse(self, key: str, why: str):
        raise SpecError(self.where, key, f"{why} ({key} = {str(self.cfg.get(key))[:60]!r}): not modelled by fasop")


TEXT_MODELS = {"qwen3_vl_moe_text": "qwen3_moe", "qwen3_vl_text": "qwen3"}
"""A vision-language model's language model (`text_config`'s model_type) that is a family here."""


def family_of(cfg: dict) -> str | None:
    """The family of a config whose `model_type` is a string and `architectures` a list where it has no
    model_type (hf_config.architecture_from_config checks both first)."""
    if "model_type" not in cfg and any("Grok1" in str(a) for a in cfg.get("architectures") or ()):
        return "grok-1"
    return TEXT_MODELS.get(cfg.get("model_type"), cfg.get("model_type"))


def build(k: Keys, family: str) -> Architecture:
    k.int("moe_layer_freq", None)  # HF DeepSeek's `layer_idx % moe_layer_freq`: 0 or a negative is no frequency
    for key, (why, modelled) in _REFUSED.items():
        if why and family not in modelled and k.cfg.get(key) not in (None, 0, 1):
            k.refuse(key, why)
    builder = {"mixtral": _mixtral, "grok-1": _mixtral, "qwen2_moe": _qwen_moe, "qwen3_moe": _qwen_moe,
               "qwen3": _qwen_moe, "deepseek_v2": _deepseek, "deepseek_v3": _deepseek, "kimi_k2": _deepseek,
               "gpt_oss": _gpt_oss, "llama4": _llama4, "llama4_text": _llama4, "gemma2": _gemma,
               "gemma3": _gemma, "gemma3_text": _gemma, "nemotron_h": _nemotron_h}[family]
    return builder(k, family)


def _base(k: Keys, family: str, **kw) -> dict:
    """The Llama-shaped keys every family shares (RMSNorm, RoPE, no biases, no dropout, untied)."""
    h, heads = k.int("hidden_size"), k.int("num_attention_heads")
    layers = kw.pop("num_layers", None) or k.int("num_hidden_layers")
    out = dict(family=family, num_layers=layers, hidden_size=h, num_attention_heads=heads,
               num_kv_heads=k.int("num_key_value_heads", heads), head_dim=k.int("head_dim", h // heads),
               ffn_hidden_size=k.int("intermediate_size"), vocab_size=k.int("vocab_size"), gated_mlp=True,
               tied_embeddings=k.flag("tie_word_embeddings", False), linear_bias=False, norm="rmsnorm",
               position="rotary", max_positions=k.int("max_position_embeddings", 0),
               dropout=k.rate("attention_dropout"), rope_mscale=_yarn_mscale(k))
    out.update(kw)
    return out


def _yarn_mscale(k: Keys) -> float:
    """Megatron-Core's YaRN concentration factor for `rope_scaling` (1.0 unless rope_type yarn):
    yarn_rotary_pos_embedding.py `_yarn_get_concentration_factor`, m(f, c) = 0.1 c ln f + 1 (1 for
    f <= 1): m(f, 1) without `mscale` / `mscale_all_dim`, else m(f, mscale) / m(f, mscale_all_dim)."""
    rs = k.cfg.get("rope_scaling")
    if not isinstance(rs, dict) or (rs.get("rope_type") or rs.get("type")) != "yarn":
        return 1.0
    def m(f, c):
        return 1.0 if f <= 1 else 0.1 * c * math.log(f) + 1.0
    scaled = Keys({f"rope_scaling.{key}": rs.get(key) for key in ("factor", "mscale", "mscale_all_dim")},
                  k.where, k.ceilings)
    f, c, c_all = (scaled.number(f"rope_scaling.{key}", None) for key in ("factor", "mscale", "mscale_all_dim"))
    if f is None:
        return 1.0
    return m(f, 1.0) if c is None or c_all is None else m(f, c) / m(f, c_all)


def _routed(k: Keys, *keys: str) -> tuple[int, int]:
    """(routed experts, experts a token picks): the first of `keys` the config gives (the family's expert
    count; none given: keys[0] is the missing key) and `num_experts_per_tok`, at most that many (a router
    cannot pick more experts than there are; HF's top-k would fail)."""
    key = next((key for key in keys if k.cfg.get(key) is not None), keys[0])
    experts, per_token = k.int(key), k.int("num_experts_per_tok")
    if per_token > experts:
        raise SpecError(k.where, "num_experts_per_tok", f"must be at most {key} ({experts}), got {per_token}")
    return experts, per_token


def _mixtral(k: Keys, family: str) -> Architecture:
    grok = family == "grok-1"  # four RMSNorms a layer (pre/post attention and MoE), tied embeddings
    experts, per_token = _routed(k, *(("num_experts", "num_local_experts") if grok else
                                     ("num_local_experts", "num_experts")))
    moe = MoE(num_experts=experts, experts_per_token=per_token, expert_ffn_hidden_size=k.int("intermediate_size"))
    return Architecture(**_base(k, family, moe=moe, layer_norms=4 if grok else 2,
                                tied_embeddings=k.flag("tie_word_embeddings", grok)))


def _qwen_moe(k: Keys, family: str) -> Architecture:
    n = k.int("num_hidden_layers")
    qwen2 = family == "qwen2_moe"
    if family != "qwen3" and k.cfg.get("num_experts") is None:  # 0 is HF's dense model; absent is no count
        raise SpecError(k.where, "num_experts", "missing required key (the routed experts; 0: every MLP dense)")
    experts = 0 if family == "qwen3" else k.count("num_experts")
    if not experts:   # Qwen3 dense, or a Qwen-MoE config of 0 experts: the family's attention, every MLP dense
        return Architecture(**_base(k, family, qk_norm=not qwen2, qkv_bias=qwen2 or k.flag("attention_bias", False)))
    experts, per_token = _routed(k, "num_experts")
    step = k.int("decoder_sparse_step", 1, high=n, why=" (at most num_hidden_layers)")
    dense = k.cfg.get("mlp_only_layers") or []
    if not isinstance(dense, list) or not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < n
                                              for i in dense):
        raise SpecError(k.where, "mlp_only_layers", f"must be a list of layer indices below {n}, got {str(dense)[:60]!r}")
    kinds = tuple("moe" if i not in dense and (i + 1) % step == 0 else "dense" for i in range(n))
    moe = MoE(num_experts=experts, experts_per_token=per_token, expert_ffn_hidden_size=k.int("moe_intermediate_size"),
              shared_experts=1 if qwen2 and k.count("shared_expert_intermediate_size") else 0,
              shared_ffn_hidden_size=k.count("shared_expert_intermediate_size") if qwen2 else 0, shared_gate=qwen2)
    return Architecture(**_base(k, family, moe=moe, layer_kinds=kinds, qk_norm=not qwen2,
                                qkv_bias=qwen2 or k.flag("attention_bias", False)))


def _deepseek(k: Keys, family: str) -> Architecture:
    n = k.int("num_hidden_layers")
    mla = MLA(q_lora_rank=k.count("q_lora_rank"), kv_lora_rank=k.int("kv_lora_rank"),
              qk_nope_head_dim=k.int("qk_nope_head_dim"), qk_rope_head_dim=k.int("qk_rope_head_dim"),
              v_head_dim=k.int("v_head_dim"))
    first = k.count("first_k_dense_replace", high=n, why=" (at most num_hidden_layers)")
    experts, per_token = _routed(k, "n_routed_experts")
    moe = MoE(num_experts=experts, experts_per_token=per_token,
              expert_ffn_hidden_size=k.int("moe_intermediate_size"), shared_experts=k.count("n_shared_experts"),
              **_router_groups(k, family))
    mtp = k.count("num_nextn_predict_layers")
    notes = (f"{mtp} multi-token-prediction module(s) not planned (--mtp-layers {mtp} trains them on the "
             "last stage, as pretrained)",) if mtp else ()
    heads = k.int("num_attention_heads")
    return Architecture(**_base(k, family, mla=mla, moe=moe, num_kv_heads=heads, head_dim=mla.qk_head_dim,
                                layer_kinds=tuple("dense" if i < first else "moe" for i in range(n)),
                                mtp_layers=mtp, mtp_kinds=("moe",) if mtp else (), notes=notes))


TOPK_METHODS = ("greedy", "group_limited_greedy", "noaux_tc")
"""DeepSeek's `topk_method` values (HF DeepseekV2Config: greedy, its default, and group_limited_greedy;
DeepseekV3Config: noaux_tc); only `greedy` ignores the groups."""


def _router_groups(k: Keys, family: str) -> dict:
    """n_group / topk_group: the routed experts in n_group equal groups, each token's experts within
    topk_group of them (Megatron-Core's group_limited_topk scores a group by its top k / topk_group
    experts, so topk_group may not exceed k, and the chosen groups must hold k experts); none under
    `topk_method` greedy (deepseek_v2's default). Both keys absent: no groups; n_group without
    topk_group is refused rather than guessed."""
    method = k.cfg.get("topk_method", "greedy" if family == "deepseek_v2" else None)
    if method is not None and method not in TOPK_METHODS:
        raise SpecError(k.where, "topk_method", f"must be one of {', '.join(TOPK_METHODS)}, got {repr(method)[:60]}")
    if method == "greedy":
        return {}
    groups = k.int("n_group", 1)
    if groups > 1 and k.cfg.get("topk_group") is None:
        raise SpecError(k.where, "topk_group", f"missing: n_group {groups} needs it (the groups a token may use)")
    top = k.int("topk_group", 1)
    experts, per_token = k.int("n_routed_experts"), k.int("num_experts_per_tok")
    if experts % groups:
        raise SpecError(k.where, "n_group", f"must divide n_routed_experts ({experts}), got {groups}")
    if top > min(groups, per_token):
        raise SpecError(k.where, "topk_group", f"must be at most n_group ({groups}) and num_experts_per_tok "
                                               f"({per_token}), got {top}")
    if per_token > top * (experts // groups):
        raise SpecError(k.where, "num_experts_per_tok", f"must be at most the {top * (experts // groups)} experts of "
                                                        f"topk_group ({top}) groups, got {per_token}")
    return {"router_groups": groups, "router_group_topk": top}


def _windowed(k: Keys, n: int, window: int, default_sliding) -> tuple[int, ...]:
    """Layers with a sliding window: `layer_types` when given, else default_sliding(i)."""
    types = k.cfg.get("layer_types")
    if types is None:
        return tuple(i for i in range(n) if default_sliding(i)) if window else ()
    if not isinstance(types, list) or len(types) != n \
            or not all(t in ("sliding_attention", "full_attention") for t in types):
        raise SpecError(k.where, "layer_types", f"must list {n} of sliding_attention / full_attention, "
                                                f"got {str(types)[:60]!r}")
    return tuple(i for i, t in enumerate(types) if t == "sliding_attention")


def _gpt_oss(k: Keys, family: str) -> Architecture:
    n, window = k.int("num_hidden_layers"), k.count("sliding_window")
    experts, per_token = _routed(k, "num_local_experts")
    moe = MoE(num_experts=experts, experts_per_token=per_token, expert_ffn_hidden_size=k.int("intermediate_size"),
              expert_bias=True)
    bias = k.flag("attention_bias", True)
    return Architecture(**_base(k, family, moe=moe, qkv_bias=bias, o_bias=bias, attention_sinks=True,
                                window=window, windowed_layers=_windowed(k, n, window, lambda i: i % 2 == 0)))


def _llama4(k: Keys, family: str) -> Architecture:
    n = k.int("num_hidden_layers")
    step = k.int("interleave_moe_layer_step", 1, high=n, why=" (at most num_hidden_layers)")
    kinds = tuple("moe" if i % step == step - 1 else "dense" for i in range(n))
    f = k.int("intermediate_size")
    experts, per_token = _routed(k, "num_local_experts")
    moe = MoE(num_experts=experts, experts_per_token=per_token, expert_ffn_hidden_size=f, shared_experts=1,
              shared_ffn_hidden_size=f)
    chunk = k.count("attention_chunk_size")
    interval = k.int("no_rope_layer_interval", 4)  # every 4th layer is global NoPE attention
    return Architecture(**_base(k, family, moe=moe, layer_kinds=kinds, ffn_hidden_size=k.int("intermediate_size_mlp"),
                                window=chunk, window_kind="chunked",
                                windowed_layers=tuple(i for i in range(n) if chunk and (i + 1) % interval)))


GEMMA_DEFAULTS = {
    "gemma2": dict(vocab_size=256_000, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
                   num_attention_heads=8, num_key_value_heads=4, head_dim=256, max_position_embeddings=8192,
                   sliding_window=4096, final_logit_softcapping=30.0, tie_word_embeddings=True),
    "gemma3_text": dict(vocab_size=262_208, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
                        num_attention_heads=8, num_key_value_heads=4, head_dim=256, max_position_embeddings=131_072,
                        sliding_window=4096, tie_word_embeddings=True)}
"""What transformers' Gemma2Config / Gemma3TextConfig take for a key a config leaves out (their __init__
defaults, the 2B / 4B shapes): Google's Gemma 3 configs name only where a size differs (google/gemma-3-27b-it's
text_config has no vocab_size, no max_position_embeddings)."""


def _gemma(k: Keys, family: str) -> Architecture:
    k = Keys({**GEMMA_DEFAULTS["gemma2" if family == "gemma2" else "gemma3_text"], **k.cfg}, k.where, k.ceilings)
    n, window = k.int("num_hidden_layers"), k.count("sliding_window")
    if family == "gemma2":
        sliding = lambda i: i % 2 == 0
    else:
        pattern = k.int("sliding_window_pattern", 6)
        sliding = lambda i: (i + 1) % pattern != 0
    cap = k.number("final_logit_softcapping", 0.0)
    return Architecture(**_base(k, family, layer_norms=4, qk_norm=family != "gemma2", window=window,
                                windowed_layers=_windowed(k, n, window, sliding), logit_softcap=cap))


def _block(name) -> bool:
    """A Nemotron-H block name (`M`, `*`, `-`, `E` or its word); a config may hold anything."""
    return isinstance(name, str) and name in _NEMOTRON_BLOCKS


def _nemotron_h(k: Keys, family: str) -> Architecture:
    pattern = k.cfg.get("hybrid_override_pattern")
    key = "hybrid_override_pattern"
    if pattern is None:
        key, pattern = "layers_block_type", k.cfg.get("layers_block_type")
    blocks = list(pattern) if isinstance(pattern, (str, list)) else None
    if not blocks or any(not _block(b) for b in blocks):
        bad = next((b for b in blocks or () if not _block(b)), pattern)
        raise SpecError(k.where, key, f"block {str(bad)[:40]!r} is not one of M, *, -, E "
                                      "(mamba, attention, mlp, moe)")
    if len(blocks) > limits.LAYERS:
        raise SpecError(k.where, key, f"{len(blocks):,} layers, more than fasop plans ({limits.LAYERS})")
    kinds = tuple(_NEMOTRON_BLOCKS[b] for b in blocks)
    if "num_hidden_layers" in k.cfg and k.int("num_hidden_layers") != len(kinds):
        raise SpecError(k.where, "num_hidden_layers", f"{k.cfg['num_hidden_layers']} layers but {key} lists {len(kinds)}")
    if k.cfg.get("mlp_hidden_act", "relu2") != "relu2":
        k.refuse("mlp_hidden_act", "an MLP activation other than relu2")
    mamba = Mamba(num_heads=k.int("mamba_num_heads"), head_dim=k.int("mamba_head_dim"),
                  state_size=k.int("ssm_state_size"), groups=k.int("n_groups", 8), conv_kernel=k.int("conv_kernel", 4),
                  chunk_size=k.int("chunk_size", 128), conv_bias=k.flag("use_conv_bias", True),
                  proj_bias=k.flag("mamba_proj_bias", False))
    moe = None
    if "experts" in kinds:
        experts, per_token = _routed(k, "n_routed_experts")
        moe = MoE(num_experts=experts, experts_per_token=per_token,
                  expert_ffn_hidden_size=k.int("moe_intermediate_size"), shared_experts=k.count("n_shared_experts"),
                  shared_ffn_hidden_size=k.count("moe_shared_expert_intermediate_size"),
                  latent_size=k.count("moe_latent_size"), **_router_groups(k, family))
    heads = k.int("num_attention_heads")
    head_dim = k.int("head_dim", 0) or k.int("attention_head_dim", k.int("hidden_size") // heads)
    mtp = k.count("num_nextn_predict_layers")
    # the MTP module's blocks: a list of names (mtp_layers_block_type) or a pattern string as the decoder's
    # (mtp_hybrid_override_pattern, Nemotron 3 Super's "*E": Megatron-Bridge nemotron_h_bridge.py _hf_mtp_config)
    block = k.cfg.get("mtp_layers_block_type") or k.cfg.get("mtp_hybrid_override_pattern") or ()
    block = list(block) if isinstance(block, str) else block
    if isinstance(block, list) and len(block) > limits.LAYERS:
        raise SpecError(k.where, "mtp_hybrid_override_pattern" if "mtp_hybrid_override_pattern" in k.cfg
                        else "mtp_layers_block_type", f"{len(block):,} blocks, more than fasop plans ({limits.LAYERS})")
    known = mtp and block and isinstance(block, list) and all(_block(b) for b in block)
    mtp_kinds = tuple(_NEMOTRON_BLOCKS[b] for b in block) if known else ()
    # no position embedding (Megatron-Bridge nemotron_h_bridge.py: "Mamba doesn't use position embeddings",
    # position_embedding_type "none"; Megatron-Core HybridModel's default): the attention layers run no RoPE
    return Architecture(**_base(k, family, num_layers=len(kinds), layer_kinds=kinds, mamba=mamba, moe=moe,
                                head_dim=head_dim, gated_mlp=False, layer_norms=1, position="none",
                                mtp_layers=mtp if known else 0,
                                mtp_kinds=mtp_kinds,
                                notes=(f"{mtp} multi-token-prediction module(s) not planned (--mtp-layers "
                                       f"{mtp} trains them on the last stage)" if known else
                                       f"{mtp} multi-token-prediction module(s) not planned (block type unknown)",)
                                if mtp else ()))
