"""Models from HuggingFace config.json (fasop/specs/hf_config.py)."""

import json

import pytest

from fasop.core.errors import SpecError
from fasop.specs.hf_config import architecture_from_config
from fasop.specs.load import load_model

LLAMA = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
         "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 128256, "hidden_act": "silu",
         "max_position_embeddings": 8192}


def test_llama_family_keys():
    a = architecture_from_config(LLAMA, "x")
    assert (a.num_kv_heads, a.head_dim, a.ffn_hidden_size, a.gated_mlp, a.tied_embeddings, a.norm, a.qkv_bias) == \
        (8, 128, 14336, True, False, "rmsnorm", False)
    assert architecture_from_config(LLAMA | {"head_dim": 256}, "x").head_dim == 256
    assert architecture_from_config({**LLAMA, "model_type": "qwen2"}, "x").qkv_bias
    mha = dict(LLAMA)
    del mha["num_key_value_heads"]
    assert architecture_from_config(mha, "x").num_kv_heads == 32


def test_gpt2_bert_t5_defaults():
    gpt2 = architecture_from_config({"model_type": "gpt2"}, "x")
    assert (gpt2.hidden_size, gpt2.num_layers, gpt2.ffn_hidden_size, gpt2.tied_embeddings, gpt2.max_positions) == \
        (768, 12, 3072, True, 1024)
    bert = architecture_from_config({"model_type": "bert", "hidden_size": 1024, "num_hidden_layers": 24,
                                     "num_attention_heads": 16, "intermediate_size": 4096}, "x")
    assert bert.ffn_hidden_size == 4096 and bert.vocab_size == 30522
    t5 = architecture_from_config({"model_type": "t5", "feed_forward_proj": "gated-gelu", "num_layers": 24}, "x")
    assert t5.num_layers == 48 and t5.gated_mlp and t5.head_dim == 64


@pytest.mark.parametrize("extra, key", [({"num_local_experts": 8, "num_experts_per_tok": 2}, "num_local_experts"),
                                        ({"n_routed_experts": 256}, "n_routed_experts"),
                                        ({"vision_config": {}}, "vision_config"),
                                        ({"text_config": {}}, "text_config")])
def test_moe_and_multimodal_are_refused_naming_the_key(extra, key):
    with pytest.raises(SpecError, match=f"^cfg.json: {key}: "):
        architecture_from_config(LLAMA | extra, "cfg.json")


def test_unknown_family_and_bad_values():
    with pytest.raises(SpecError, match="model_type: unsupported model_type 'gemma'"):
        architecture_from_config(LLAMA | {"model_type": "gemma"}, "x")
    with pytest.raises(SpecError, match=r"hidden_size: must be an integer in \[1, 1,048,576\], got '4096'"):
        architecture_from_config(LLAMA | {"hidden_size": "4096"}, "x")
    with pytest.raises(SpecError, match="num_hidden_layers: missing required key"):
        architecture_from_config({k: v for k, v in LLAMA.items() if k != "num_hidden_layers"}, "x")


def test_model_flag_takes_a_config_json_or_its_folder(tmp_path):
    (tmp_path / "my-llama").mkdir()
    (tmp_path / "my-llama" / "config.json").write_text(json.dumps(LLAMA))
    by_folder = load_model(str(tmp_path / "my-llama"))
    by_file = load_model(str(tmp_path / "my-llama" / "config.json"))
    assert by_folder.name == by_file.name == "my-llama"
    assert by_folder.architecture == by_file.architecture and by_folder.profile is None
    assert by_folder.sequence_length == 4096 and by_folder.layer_kinds.count("transformer") == 32
    (tmp_path / "broken.json").write_text("{\"model_type\": ")
    with pytest.raises(SpecError, match="broken.json: malformed JSON at line 1"):
        load_model(str(tmp_path / "broken.json"))


def test_shipped_models_by_name():
    for name in ("llama-3-8b", "llama-3-70b", "llama-3.1-405b", "qwen2.5-7b", "gpt3-175b", "gpt-sc21-1.7b"):
        model = load_model(name)
        assert model.architecture is not None and model.sequence_length >= 2048, name
