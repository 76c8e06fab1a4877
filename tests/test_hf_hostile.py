"""Generated hostile configs: every real config.json of tests/data/hf with one to three of its keys
(or the keys the families read) set to a value of the wrong type, sign or size. The loader either
plans the model or refuses it with one line naming the file -- never another exception, never NaN
in what it builds."""
import json
import math
import random
from dataclasses import fields
from pathlib import Path

import pytest

from fasop.core.errors import SpecError
from fasop.specs.hf_config import architecture_from_config

HF = Path(__file__).parent / "data" / "hf"
CONFIGS = sorted(HF.glob("*.json"))
DENSE = [{"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 100, "n_positions": 128},
         {"model_type": "t5", "d_model": 64, "num_layers": 2, "num_heads": 4, "d_kv": 16, "d_ff": 128, "vocab_size": 100,
          "feed_forward_proj": "gated-gelu"},
         {"model_type": "gpt_neo", "hidden_size": 64, "num_layers": 2, "num_heads": 4, "vocab_size": 100,
          "attention_types": [[["global", "local"], 1]], "max_position_embeddings": 128},
         {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
          "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 100},
         {"model_type": "opt", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "ffn_dim": 128,
          "vocab_size": 100, "max_position_embeddings": 128}]
"""Small configs of the dense families (gpt2, t5, gpt_neo, llama, opt) beside the real MoE ones."""
VALUES = [0, -1, 1.5, -0.5, 10**12, 2**31, float("nan"), float("inf"), "abc", "", None, True, [], [1, 2], {},
          {"rope_type": "yarn", "factor": "x"}, "M*E?", ["sliding_attention"] * 3, [{}], [[1]], [None], ["M", {}]]
READ = ["model_type", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
        "intermediate_size", "vocab_size", "tie_word_embeddings", "rope_scaling", "max_position_embeddings",
        "num_local_experts", "num_experts", "n_routed_experts", "num_experts_per_tok", "moe_intermediate_size",
        "n_shared_experts", "shared_expert_intermediate_size", "decoder_sparse_step", "mlp_only_layers",
        "first_k_dense_replace", "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim",
        "v_head_dim", "n_group", "topk_group", "topk_method", "num_nextn_predict_layers", "layer_types",
        "sliding_window", "sliding_window_pattern", "final_logit_softcapping", "interleave_moe_layer_step",
        "hybrid_override_pattern", "mamba_num_heads", "mamba_head_dim", "ssm_state_size", "n_groups",
        "conv_kernel", "chunk_size", "moe_latent_size", "mtp_hybrid_override_pattern", "text_config"]


def _finite(arch) -> bool:
    for f in fields(arch):
        v = getattr(arch, f.name)
        if isinstance(v, float) and not math.isfinite(v):
            return False
    return True


def _cases(n: int = 600):
    rng = random.Random(20261129)
    for i in range(n):
        path = rng.choice(CONFIGS + DENSE)
        cfg = json.loads(json.dumps(path)) if isinstance(path, dict) else json.loads(path.read_text())
        target = cfg["text_config"] if "text_config" in cfg and rng.random() < 0.8 else cfg
        changed = []
        for _ in range(rng.choice((1, 1, 2, 3))):
            key = rng.choice(READ + list(target))
            target[key] = rng.choice(VALUES)
            changed.append(key)
        name = path["model_type"] if isinstance(path, dict) else path.stem
        yield pytest.param(cfg, id=f"{i}-{name}-{'+'.join(changed)}")


@pytest.mark.parametrize("cfg", list(_cases()))
def test_a_hostile_config_is_planned_or_refused_in_one_line(cfg):
    try:
        arch = architecture_from_config(cfg, "hostile.json")
    except SpecError as exc:
        assert "hostile.json" in str(exc) and "\n" not in str(exc)
    else:
        assert arch.num_layers >= 1 and arch.hidden_size >= 1 and _finite(arch)
