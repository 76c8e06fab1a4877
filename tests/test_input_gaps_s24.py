"""Input gaps of review s24: config.json mixture-of-experts keys, a cluster spec's estimator name, a model
spec's hf_config path.

Every MoE family refuses a config without its routed-expert count (none is planned as a dense model), a
`num_experts_per_tok` above that count, and layer-pattern keys outside the model's layers, each in one line
naming the file, the key and the value. A catalog cluster spec with a misspelt `estimator` names that value,
not the `links:` section it lacks; a config.json without `model_type` says so; a model spec whose `hf_config`
file is not there names the spec and its key. Configs and specs are small texts written here.
"""

from __future__ import annotations

import json

import pytest

from fasop.cli.command import main
from fasop.core.errors import SpecError
from fasop.specs.hf_config import architecture_from_config
from fasop.specs.load import load_cluster, load_model

SHAPE = {"hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
         "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 512}
"""The dense part every small MoE config below shares."""
MOE = {
    "qwen3_moe": ("num_experts", SHAPE | {"model_type": "qwen3_moe", "num_experts": 8, "num_experts_per_tok": 2,
                                          "moe_intermediate_size": 32}),
    "qwen2_moe": ("num_experts", SHAPE | {"model_type": "qwen2_moe", "num_experts": 8, "num_experts_per_tok": 2,
                                          "moe_intermediate_size": 32, "shared_expert_intermediate_size": 64}),
    "mixtral": ("num_local_experts", SHAPE | {"model_type": "mixtral", "num_local_experts": 8,
                                              "num_experts_per_tok": 2}),
    "grok-1": ("num_experts", SHAPE | {"architectures": ["Grok1ModelForCausalLM"], "num_experts": 8,
                                       "num_experts_per_tok": 2}),
    "deepseek_v3": ("n_routed_experts", SHAPE | {"model_type": "deepseek_v3", "n_routed_experts": 8,
                                                 "num_experts_per_tok": 2, "moe_intermediate_size": 32,
                                                 "n_shared_experts": 1, "q_lora_rank": 16, "kv_lora_rank": 16,
                                                 "qk_nope_head_dim": 8, "qk_rope_head_dim": 8, "v_head_dim": 8,
                                                 "first_k_dense_replace": 1}),
    "gpt_oss": ("num_local_experts", SHAPE | {"model_type": "gpt_oss", "num_local_experts": 8,
                                              "num_experts_per_tok": 2, "head_dim": 16, "sliding_window": 32}),
    "llama4_text": ("num_local_experts", SHAPE | {"model_type": "llama4_text", "num_local_experts": 8,
                                                  "num_experts_per_tok": 1, "intermediate_size_mlp": 256,
                                                  "interleave_moe_layer_step": 2}),
    "nemotron_h": ("n_routed_experts", {"model_type": "nemotron_h", "hidden_size": 8, "hybrid_override_pattern": "M*-E",
                                        "num_attention_heads": 2, "num_key_value_heads": 1, "intermediate_size": 4,
                                        "vocab_size": 10, "mamba_num_heads": 2, "mamba_head_dim": 4,
                                        "ssm_state_size": 3, "n_groups": 1, "conv_kernel": 4, "chunk_size": 2,
                                        "n_routed_experts": 8, "num_experts_per_tok": 1, "moe_intermediate_size": 4}),
}
"""family -> (the key holding its routed-expert count, a complete small config with 8 experts)."""


def refusal(cfg: dict) -> str:
    """The one-line message refusing `cfg` (read as cfg.json)."""
    with pytest.raises(SpecError) as exc:
        architecture_from_config(cfg, "cfg.json")
    assert "\n" not in str(exc.value)
    return str(exc.value)


def without(cfg: dict, key: str) -> dict:
    return {k: v for k, v in cfg.items() if k != key}


@pytest.mark.parametrize("family", list(MOE))
def test_the_complete_small_configs_plan_eight_experts(family):
    """Protects the refusals' meaning: each small config is valid until one key is changed."""
    assert architecture_from_config(MOE[family][1], "cfg.json").moe.num_experts == 8


# ----------------------------------------------------------------------------- 1. the expert count
@pytest.mark.parametrize("family", list(MOE))
def test_a_moe_config_without_its_expert_count_is_refused_naming_the_key(family):
    """Qwen2-MoE / Qwen3-MoE without num_experts were planned as dense models; every family refuses alike."""
    key, cfg = MOE[family]
    assert refusal(without(cfg, key)).startswith(f"cfg.json: {key}: missing required key")


def test_a_qwen_moe_config_with_zero_experts_is_hfs_dense_model_and_a_negative_count_is_refused():
    """num_experts 0 is transformers' own dense Qwen-MoE (every MLP dense); -4 is no count."""
    cfg = MOE["qwen3_moe"][1]
    assert architecture_from_config(cfg | {"num_experts": 0}, "cfg.json").moe is None
    assert refusal(cfg | {"num_experts": -4}) == "cfg.json: num_experts: must be an integer in [0, 67,108,864], got '-4'"


def test_the_qwen_vl_language_model_without_num_experts_is_refused_in_its_text_config():
    cfg = {"model_type": "qwen3_vl_moe", "vision_config": {},
           "text_config": without(MOE["qwen3_moe"][1], "num_experts") | {"model_type": "qwen3_vl_moe_text"}}
    assert refusal(cfg).startswith("cfg.json: text_config: num_experts: missing required key")


@pytest.mark.parametrize("family", ["qwen3", "gemma2"])
def test_moe_keys_in_a_dense_family_read_beside_the_moe_ones_are_refused(family):
    """qwen3 and gemma2 go through hf_families but have no experts: num_experts was silently dropped."""
    assert refusal(SHAPE | {"model_type": family, "num_experts": 8}).startswith("cfg.json: num_experts: mixture-of-experts key")


# ----------------------------------------------------------------------------- 2. top-k and layer patterns
@pytest.mark.parametrize("family", list(MOE))
def test_more_experts_per_token_than_experts_is_refused_naming_the_value(family):
    key, cfg = MOE[family]
    assert refusal(cfg | {"num_experts_per_tok": 9}) == f"cfg.json: num_experts_per_tok: must be at most {key} (8), got 9"
    assert architecture_from_config(cfg | {"num_experts_per_tok": 8}, "cfg.json").moe.experts_per_token == 8


@pytest.mark.parametrize("value", [0, -1])
@pytest.mark.parametrize("family", ["qwen3_moe", "gpt_oss", "deepseek_v3"])
def test_zero_or_negative_experts_per_token_is_refused(family, value):
    assert refusal(MOE[family][1] | {"num_experts_per_tok": value}).startswith(
        f"cfg.json: num_experts_per_tok: must be an integer in [1, ")


@pytest.mark.parametrize("key, value, message", [
    ("first_k_dense_replace", 5, "must be an integer in [0, 4] (at most num_hidden_layers), got '5'"),
    ("first_k_dense_replace", -1, "must be an integer in [0, 4] (at most num_hidden_layers), got '-1'"),
    ("moe_layer_freq", 0, "must be an integer in [1, 67,108,864], got '0'"),
])
def test_deepseek_layer_keys_out_of_range_are_refused(key, value, message):
    """first_k_dense_replace past the 4 layers was accepted silently; moe_layer_freq 0 (HF divides by it) read as 1."""
    assert refusal(MOE["deepseek_v3"][1] | {key: value}) == f"cfg.json: {key}: {message}"


def test_deepseek_dense_layers_may_be_all_of_them():
    arch = architecture_from_config(MOE["deepseek_v3"][1] | {"first_k_dense_replace": 4}, "cfg.json")
    assert arch.layer_kinds == ("dense",) * 4


@pytest.mark.parametrize("key, value, message", [
    ("decoder_sparse_step", 0, "must be an integer in [1, 4] (at most num_hidden_layers), got '0'"),
    ("decoder_sparse_step", -2, "must be an integer in [1, 4] (at most num_hidden_layers), got '-2'"),
    ("decoder_sparse_step", 5, "must be an integer in [1, 4] (at most num_hidden_layers), got '5'"),
    ("mlp_only_layers", [4], "must be a list of layer indices below 4, got '[4]'"),
    ("mlp_only_layers", [-1], "must be a list of layer indices below 4, got '[-1]'"),
    ("mlp_only_layers", [True], "must be a list of layer indices below 4, got '[True]'"),
])
def test_qwen_moe_layer_pattern_keys_out_of_range_are_refused(key, value, message):
    assert refusal(MOE["qwen3_moe"][1] | {key: value}) == f"cfg.json: {key}: {message}"


def test_qwen_moe_layer_pattern_in_range_picks_the_moe_layers():
    arch = architecture_from_config(MOE["qwen3_moe"][1] | {"decoder_sparse_step": 2, "mlp_only_layers": [1]},
                                    "cfg.json")
    assert arch.layer_kinds == ("dense", "dense", "dense", "moe")


@pytest.mark.parametrize("value", [0, 5])
def test_llama4_interleave_step_outside_the_layers_is_refused(value):
    assert refusal(MOE["llama4_text"][1] | {"interleave_moe_layer_step": value}) == \
        f"cfg.json: interleave_moe_layer_step: must be an integer in [1, 4] (at most num_hidden_layers), got '{value}'"


# ----------------------------------------------------------------------------- 3c. model_type
def test_a_config_without_model_type_says_the_key_is_missing():
    """It said '... in a dense None config' (MoE keys) or 'unsupported model_type None'."""
    for cfg in (without(MOE["qwen3_moe"][1], "model_type"), SHAPE):
        message = refusal(cfg)
        assert message.startswith("cfg.json: model_type: missing required key (supported: gpt2, ")
        assert "None" not in message


# ----------------------------------------------------------------------------- the CLI: one line, exit 2
CATALOG_CLUSTER = """\
estimator: {estimator}
node_types:
  h100:
    instance: box.8
    gpu: H100-SXM
    gpus_per_node: 8
    inter_node_gbit_per_s: 400
    usd_per_hour: 10
    price_source: test
"""


def cli_refusal(capsys, tmp_path, argv: list[str]) -> str:
    """The bad-input contract (exit 2, one line on stderr, nothing on stdout, no result file); the message."""
    out_csv = tmp_path / "results" / "out.csv"
    assert main([*argv, "--out", str(out_csv), "--no-progress"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("fasop: error: ") and err.count("\n") == 1, err
    assert not out_csv.parent.exists() or not any(out_csv.parent.iterdir())
    return err.removeprefix("fasop: error: ").rstrip("\n")


def write(path, text: str):
    path.write_text(text)
    return str(path)


def test_search_refuses_a_qwen_moe_config_without_num_experts(tmp_path, capsys):
    cluster = write(tmp_path / "cluster.yaml", CATALOG_CLUSTER.format(estimator="analytic"))
    model = write(tmp_path / "cfg.json", json.dumps(without(MOE["qwen3_moe"][1], "num_experts")))
    message = cli_refusal(capsys, tmp_path, ["search", "--model", model, "--cluster", cluster, "--nodes", "h100=1"])
    assert message.startswith(f"{model}: num_experts: missing required key")


def test_a_misspelt_catalog_estimator_is_named_with_the_allowed_one(tmp_path, capsys):
    """`estimator: analytc` read the file as a FASOP spec and said 'links: missing required key'."""
    good = write(tmp_path / "good.yaml", CATALOG_CLUSTER.format(estimator="analytic"))
    assert load_cluster(good).estimator == "analytic"
    cluster = write(tmp_path / "cluster.yaml", CATALOG_CLUSTER.format(estimator="analytc"))
    message = cli_refusal(capsys, tmp_path, ["search", "--model", "llama-3-8b", "--cluster", cluster,
                                             "--nodes", "h100=1"])
    assert message.startswith(f"{cluster}: estimator: 'analytc' is not a catalog estimator (analytic)")
    assert message.endswith("did you mean 'analytic'?") and "links: missing" not in message


def test_a_profiled_spec_without_links_still_names_links(tmp_path):
    """The estimator is blamed only where the file has neither FASOP section (links:, memory:)."""
    text = "estimator: fasop-2024\nmemory:\n  overhead_factor: 1.1\nnode_types: {}\n"
    with pytest.raises(SpecError, match=r"cluster\.yaml: links: missing required key$"):
        load_cluster(write(tmp_path / "cluster.yaml", text))
    # a fasop-2024 spec with neither section, or another estimator's name nothing like a catalog one: the same
    for name in ("fasop-2024", "my-estimator"):
        with pytest.raises(SpecError, match=r"cluster\.yaml: links: missing required key$"):
            load_cluster(write(tmp_path / "cluster.yaml", f"estimator: {name}\nnode_types: {{}}\n"))


# ----------------------------------------------------------------------------- 3d. hf_config
MODEL_SPEC = "name: small\nhf_config: {config}\ntraining:\n  sequence_length: 128\n  global_batch_size: 8\n"


def test_a_model_spec_whose_hf_config_is_not_there_names_the_spec_and_key(tmp_path, capsys):
    write(tmp_path / "cfg.json", json.dumps(MOE["mixtral"][1]))
    assert load_model(write(tmp_path / "good.yaml", MODEL_SPEC.format(config="cfg.json"))).architecture.moe
    spec = write(tmp_path / "model.yaml", MODEL_SPEC.format(config="missing.json"))
    with pytest.raises(SpecError) as exc:
        load_model(spec)
    assert str(exc.value) == f"{spec}: hf_config: 'missing.json': no such file (a path relative to the spec's folder)"
    cluster = write(tmp_path / "cluster.yaml", CATALOG_CLUSTER.format(estimator="analytic"))
    message = cli_refusal(capsys, tmp_path, ["search", "--model", spec, "--cluster", cluster, "--nodes", "h100=1"])
    assert message.startswith(f"{spec}: hf_config: 'missing.json': no such file")
    (tmp_path / "folder").mkdir()
    with pytest.raises(SpecError, match=r"model\.yaml: hf_config: 'folder': a folder, not a config\.json"):
        load_model(write(tmp_path / "model.yaml", MODEL_SPEC.format(config="folder")))


# ----------------------------------------------------------------------------- 3a. validate's choice cells
VALIDATE_CSV = ("num_layers,hidden_size,num_attention_heads,seq_len,vocab_size,gpu,num_gpus,tp,pp,dp,"
                "global_batch_size,measured_seconds_per_iter,{column}\n"
                "4,256,4,512,1000,H100-SXM,8,1,1,8,64,0.5,{value}\n")


@pytest.mark.parametrize("column, value, allowed", [
    ("zero", "7", "0, 1, 2, 3"), ("precision", "fp7", "bf16, fp16"), ("recompute", "partial", "none, selective, full"),
    ("cp_comm", "xyz", "p2p, a2a, all_gather"), ("task", "pretrainx", "pretrain, sft")])
def test_a_validate_cell_outside_its_choices_names_the_csv_line_and_column(tmp_path, capsys, column, value, allowed):
    """Not a CLI flag nobody gave (`--zero: 7 is not one of ...`): the CSV, its line, the column."""
    good = write(tmp_path / "good.csv", VALIDATE_CSV.format(column="name", value="row"))
    assert main(["validate", good]) == 0
    capsys.readouterr()
    runs = write(tmp_path / "runs.csv", VALIDATE_CSV.format(column=column, value=value))
    assert main(["validate", runs]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.startswith(f"fasop: error: {runs}: line 2: {column}: ") and f"{value!r}" in err and allowed in err


@pytest.mark.parametrize("family, qk_norm, qkv_bias", [("qwen2_moe", False, True), ("qwen3_moe", True, False)])
def test_a_qwen_moe_config_of_zero_experts_keeps_its_familys_attention(family, qk_norm, qkv_bias):
    # transformers' dense Qwen-MoE (num_experts 0): Qwen2-MoE's attention has q/k/v biases and no QK-norm,
    # Qwen3-MoE's QK-norm and no biases; the parameters are those of the same config as the dense family
    cfg = MOE[family][1] | {"num_experts": 0}
    arch = architecture_from_config(cfg, "cfg.json")
    assert arch.moe is None and (arch.qk_norm, arch.qkv_bias) == (qk_norm, qkv_bias)
    dense = architecture_from_config({k: v for k, v in cfg.items() if "expert" not in k and k != "moe_intermediate_size"}
                                     | {"model_type": family.replace("_moe", "")}, "dense.json")
    assert (arch.qk_norm, arch.qkv_bias) == (dense.qk_norm, dense.qkv_bias)
