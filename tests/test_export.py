"""fasop export: Megatron-LM arguments, torchtitan recipe and node-rank table of hand-made plans.

Expected texts are written by hand from the plan (not produced by the code and pasted); the
layout string is parsed back by an independent parser following Megatron-Core's grammar
(01_megatron_lm.md §1.4); the rank table is checked against the plan's own rank grid."""

from __future__ import annotations

import csv
import re
import types

import pytest

from fasop.cli.command import main
from fasop.plans.plan import Plan
from fasop.plans.rowplan import RowPlan, plan_of_row, stage_layer_names
from fasop.report.export import hostfile, megatron, megatron_layout, node_table, torchtitan
from fasop.specs.types import ClusterSpec, ModelSpec, NodeType
from fasop.specs.types import Profile


def node(name: str, gpus: int = 4) -> NodeType:
    return NodeType(name=name, instance=name, gpu=name.upper(), gpus_per_node=gpus, memory_limit_bytes=40 * 2**30,
                    intra_node_bytes_per_s=1e11, inter_node_bytes_per_s=5e9, intra_node_shared=False,
                    usd_per_hour=1.0, spot_usd_per_hour=None)


A, B = node("big"), node("small")
CLUSTER = ClusterSpec(path="toy.yaml", estimator="fasop-2024", node_types={"big": A, "small": B},
                      p2p_inter_node_divisor=1.0, p2p_intra_node_divisor=1.0, memory_overhead_factor=1.0)


def model(kinds: tuple[str, ...], segments: tuple[str, ...] | None = None) -> ModelSpec:
    return ModelSpec(path="toy-model.yaml", name="toy", hidden_size=64, num_attention_heads=4, vocab_size=1000,
                     sequence_length=128, global_batch_size=32, tie_word_embeddings=False, bytes_per_element=2,
                     layer_kinds=kinds, layer_segments=segments or ("model",) * len(kinds),
                     profile=Profile(forward_s={}, fwd_bwd_factor=3.0, scaling={}))


GPT8 = model(("embedding",) + ("transformer",) * 8 + ("head",))  # 10 entries
T5 = model(("embedding",) + ("encoder",) * 2 + ("embedding",) + ("decoder",) * 2,
           ("encoder",) * 3 + ("decoder",) * 3)


def row_plan(tp, dp, pp, mbs, m, placement, partition, **extra) -> RowPlan:
    row = {"tp": str(tp), "dp": str(dp), "pp": str(pp), "mbs": str(mbs), "num_microbatches": str(m),
           "node_placement": placement, "partition": partition, "is_oom": "False", "is_zero_oom": "False"} | extra
    return plan_of_row(row, "x.csv rank 1", GPT8 if extra.pop("model", None) is None else T5, CLUSTER)


HEADER = "# fasop export --target {t}: x.csv rank 1\n"


def test_megatron_uneven_split_heterogeneous_order():
    # pp 4 over 4 nodes (tp 2, dp 2 per stage); stages hold E+1, 3, 3, 1+L transformer layers
    rp = row_plan(2, 2, 4, 1, 8, "big-small-small-big", "2-3-3-2")
    assert megatron(rp, GPT8).text == HEADER.format(t="megatron") + """\
# toy: tp 2, dp 2, pp 4, micro-batch 1, 8 micro-batches per step, global batch 16; nodes in order big-small-small-big
# layer-list entries per stage: 2-3-3-2
# --pipeline-model-parallel-layout needs Megatron-Core >= 0.13; E = embedding, t = transformer layer, L = head and loss, | between stages
# Megatron-Core < 0.13: --decoder-first-pipeline-num-layers 1 --decoder-last-pipeline-num-layers 1 instead of the layout
# 16-bit training as profiled: add --bf16 or --fp16
# as FASOP estimates: no activation recompute, no sequence parallelism, optimizer state replicated over data parallelism
MODEL_PARALLEL_ARGS=(
    --tensor-model-parallel-size 2
    --pipeline-model-parallel-size 4
    --micro-batch-size 1
    --global-batch-size 16
    --seq-length 128
    --num-layers 8
    --pipeline-model-parallel-layout "Et|t*3|t*3|tL"
)
"""


def test_megatron_even_split_needs_no_layout_and_settings_columns_become_flags():
    rp = row_plan(4, 1, 2, 2, 4, "big-big", "5-5", recompute="full", sequence_parallel="True", zero_stage="1",
                  precision="bf16")
    text = megatron(rp, GPT8).text
    assert "# even split (4 transformer layers a stage): Megatron's default, no layout\n" in text
    assert text.endswith("""MODEL_PARALLEL_ARGS=(
    --tensor-model-parallel-size 4
    --pipeline-model-parallel-size 2
    --micro-batch-size 2
    --global-batch-size 8
    --seq-length 128
    --recompute-granularity full
    --recompute-method uniform
    --recompute-num-layers 1
    --sequence-parallel
    --use-distributed-optimizer
    --bf16
)
""")
    assert "layout" not in text.split("MODEL_PARALLEL_ARGS")[1]


def test_megatron_data_parallel_only():
    rp = row_plan(1, 8, 1, 4, 1, "big-small", "10")
    assert megatron(rp, GPT8).text.endswith("""    --tensor-model-parallel-size 1
    --pipeline-model-parallel-size 1
    --micro-batch-size 4
    --global-batch-size 32
    --seq-length 128
)
""")


def test_megatron_shards_the_optimizer_when_the_plan_fits_only_so():
    rp = row_plan(1, 2, 4, 1, 4, "big-big", "1-3-3-3", is_oom="True", is_zero_oom="False")
    out = megatron(rp, GPT8)
    assert "    --use-distributed-optimizer\n" in out.text
    assert any("only with the optimizer state sharded" in w for w in out.warnings)


def test_megatron_warns_on_an_encoder_decoder_split():
    rp = plan_of_row({"tp": "1", "dp": "2", "pp": "4", "mbs": "1", "num_microbatches": "4",
                      "node_placement": "big-small", "partition": "1-2-1-2"}, "t5.csv rank 1", T5, CLUSTER)
    out = megatron(rp, T5)
    assert "layout" not in out.text.split("MODEL_PARALLEL_ARGS")[1]
    assert out.warnings == ("Megatron-LM cannot express this split: --pipeline-model-parallel-layout has no place "
                            "for decoder and encoder layers; pass the stages' layers by hand (FASOP's Megatron fork: "
                            "--balance 1-2-1-2, layer-list entries per stage)",)
    assert torchtitan(rp, T5).warnings[0].startswith("torchtitan cannot express this split")


# ------------------------------------------------------------------ the layout grammar
def parse_layout(layout: str) -> list[list[str]]:
    """Megatron-Core's parser (pipeline_parallel_layer_layout.py, as quoted in 01_megatron_lm.md
    §1.4): commas removed, `(X)*n` then `c*n` expanded, split at '|', one symbol per layer."""
    layout = layout.replace(",", "")
    layout = re.sub(r"\(([^)]+)\)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), layout)
    layout = re.sub(r"(.)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), layout)
    stages = [list(stage) for stage in layout.split("|")]
    flat = [c for stage in stages for c in stage]
    assert set(flat) <= set("ELtm"), flat
    assert flat[0] == "E" and flat.count("E") == 1, "E first and once"
    assert flat[-1] == "L" and flat.count("L") == 1, "L last and once"
    return stages


@pytest.mark.parametrize("partition", [(2, 3, 3, 2), (1, 8, 1), (9, 1), (1, 1, 1, 1, 1, 1, 1, 1, 1, 1), (10,),
                                       (4, 1, 1, 4)])
def test_layout_parses_back_to_the_split(partition):
    layout, _ = megatron_layout(GPT8.layer_kinds, partition)
    stages = parse_layout(layout)
    assert len(stages) == len(partition)
    assert sum(stage.count("t") for stage in stages) == 8  # t count = --num-layers
    start = 0
    for stage, n in zip(stages, partition):  # each stage holds exactly its entries of the layer list
        symbols = {"embedding": "E", "transformer": "t", "head": "L"}
        assert stage == [symbols[k] for k in GPT8.layer_kinds[start:start + n]]
        start += n


def test_layout_of_stages_without_transformer_layers():
    assert megatron_layout(GPT8.layer_kinds, (1, 8, 1)) == ("E|t*8|L", "")


# ------------------------------------------------------------------ torchtitan
def test_torchtitan_recipe_runs_and_sets_the_split():
    rp = row_plan(2, 2, 4, 1, 8, "big-small-small-big", "2-3-3-2")
    text = torchtitan(rp, GPT8).text
    namespace: dict = {}
    exec(text.split("# The same as")[0], namespace)  # the recipe is valid Python
    config = types.SimpleNamespace(parallelism=types.SimpleNamespace(), training=types.SimpleNamespace())
    out = namespace["fasop_plan"](config)
    p = out.parallelism
    assert (p.tensor_parallel_degree, p.pipeline_parallel_degree, p.num_pp_microbatches) == (2, 4, 8)
    assert (p.data_parallel_replicate_degree, p.data_parallel_shard_degree) == (2, 1)
    assert p.enable_sequence_parallel is False and out.activation_checkpoint is None
    assert p.module_fqns_per_model_part == [["tok_embeddings", "layers.0"], ["layers.1", "layers.2", "layers.3"],
                                            ["layers.4", "layers.5", "layers.6"], ["layers.7", "norm", "lm_head"]]
    # tokens: micro-batch 1 x 128; a step: 8 micro-batches x dp 2 x 128
    assert out.training.num_tokens_per_microbatch_per_dp_rank == 128
    assert out.training.num_tokens_per_train_step == 2048
    # FASOP's plans are eager; torchtitan's HEAD captures fwd+bwd by default and refuses it with pp > 1
    assert out.training.disable_cuda_graphs is True
    assert text.endswith("--parallelism.tensor_parallel_degree 2 --parallelism.pipeline_parallel_degree 4 "
                         '--parallelism.pipeline_parallel_schedule "1F1B" --parallelism.num_pp_microbatches 8 '
                         "--parallelism.data_parallel_replicate_degree 2 --parallelism.data_parallel_shard_degree 1\n"
                         "--training.num_tokens_per_microbatch_per_dp_rank 128 "
                         "--training.num_tokens_per_train_step 2048 --training.max_context_length 128 "
                         "--training.disable_cuda_graphs\n")


# ------------------------------------------------------------------ node-rank table
def test_hostfile_text():
    rp = row_plan(1, 2, 4, 1, 8, "small-big", "2-3-3-2")  # 8 GPUs: two stages a node
    assert hostfile(rp).text == """\
# fasop export --target hostfile: x.csv rank 1
# tp 1, dp 2, pp 4: stage s runs global ranks s*2 .. s*2+1 (Megatron-LM's tp-dp-pp order and torchtitan's mesh:
# tensor-parallel fastest, pipeline slowest). Start node k on a machine of its node_type; use
# torchrun's static rendezvous (--node_rank), not --rdzv-backend c10d, which assigns node ranks itself.
node_rank  node_type  gpus  global_ranks  stages
0          small      4     0-3           0-1
1          big        4     4-7           2-3

# one command per node (MASTER_ADDR: the host of node 0):
torchrun --nnodes 2 --node_rank 0 --nproc_per_node 4 --master_addr $MASTER_ADDR --master_port 29500 $TRAIN_SCRIPT  # node 0: small
torchrun --nnodes 2 --node_rank 1 --nproc_per_node 4 --master_addr $MASTER_ADDR --master_port 29500 $TRAIN_SCRIPT  # node 1: big
"""


@pytest.mark.parametrize("tp,dp,pp,placement", [
    (2, 2, 4, "big-small-small-big"), (4, 2, 2, "small-big-big-small"), (1, 2, 8, "big-small-big-small"),
    (2, 8, 1, "small-small-big-big"), (1, 8, 2, "big-small-small-big"), (4, 4, 1, "big-big-big-small")])
def test_every_rank_of_stage_s_is_on_a_node_the_plan_gives_stage_s(tp, dp, pp, placement):
    names = placement.split("-")
    partition = "-".join(["1"] * (pp - 1) + [str(10 - pp + 1)])
    rp = row_plan(tp, dp, pp, 1, 4, placement, partition)
    table = node_table(rp)
    on = {r: (k, name) for k, name, _, ranks, _ in table for r in ranks}
    assert sorted(on) == list(range(16))
    for s in range(pp):
        for d in range(dp):
            for t in range(tp):
                rank = t + tp * (d + dp * s)  # Megatron-LM's tp-cp-ep-dp-pp grid (cp = ep = 1)
                k, name = on[rank]
                assert k in rp.plan.stage_node_indices[s] and name == names[k]
                assert s in table[k][4]


def test_stage_layer_names():
    assert stage_layer_names(GPT8, (2, 3, 3, 2)) == ["embedding, blocks 0", "blocks 1-3", "blocks 4-6",
                                                     "blocks 7, head"]
    assert stage_layer_names(T5, (2, 2, 2)) == ["embedding, encoder blocks 0", "encoder blocks 1, embedding",
                                                "decoder blocks 0-1"]


# ------------------------------------------------------------------ rows and the command line
@pytest.mark.parametrize("cells,message", [
    ({"tp": "0"}, "x.csv rank 1: tp: expected an integer >= 1, got '0'"),
    ({"node_placement": "big-huge"}, "x.csv rank 1: node_placement: node type 'huge' is not in toy.yaml"),
    ({"partition": "2-3-3"}, "x.csv rank 1: partition: '2-3-3' is not 4 counts >= 0 summing to the 10"),
    ({"dp": "4"}, "x.csv rank 1: tp x dp x pp = 32 does not use the 4 nodes"),
])
def test_bad_rows_name_the_column(cells, message):
    row = {"tp": "2", "dp": "2", "pp": "4", "mbs": "1", "num_microbatches": "8",
           "node_placement": "big-small-small-big", "partition": "2-3-3-2"} | cells
    with pytest.raises(Exception) as err:
        plan_of_row(row, "x.csv rank 1", GPT8, CLUSTER)
    assert str(err.value).startswith(message)


def test_cli_export_of_a_search_csv(tmp_path, capsys, monkeypatch, repo):
    monkeypatch.chdir(repo)
    csv = tmp_path / "bert_fasop-paper_a100x1-a10x1.csv"
    assert main(["search", "--model", "bert", "--cluster", "fasop-paper", "--nodes", "a100=1,a10=1",
                 "--heterogeneous", "--out", str(csv), "--show", "0", "--no-progress"]) == 0
    capsys.readouterr()
    out = tmp_path / "args.sh"
    assert main(["export", "--from", str(csv), "--rank", "1", "--target", "megatron", "--out", str(out)]) == 0
    text = out.read_text()
    row = __import__("csv").DictReader(open(csv)).__next__()
    assert f"    --pipeline-model-parallel-size {row['pp']}\n" in text
    assert main(["export", "--from", str(csv), "--rank", "999", "--target", "hostfile"]) == 2
    assert capsys.readouterr().err == f"fasop: error: {csv}: rank: no row has rank 999\n"
    assert main(["export", "--from", str(tmp_path / "plans.csv"), "--target", "hostfile"]) == 2
    assert capsys.readouterr().err == f"fasop: error: --from: {tmp_path / 'plans.csv'}: no such file\n"
    (tmp_path / "plans.csv").write_text(csv.read_text())  # a FASOP-2024 CSV names no specs: not guessed here
    assert main(["export", "--from", str(tmp_path / "plans.csv"), "--target", "hostfile"]) == 2
    assert "--model: required" in capsys.readouterr().err


def test_plan_dimensions_of_a_row():
    rp = row_plan(2, 2, 4, 1, 8, "big-small-small-big", "2-3-3-2")
    assert rp.plan == Plan(tp=2, dp=2, pp=4, mbs=1, global_batch_size=16, placement=(A, B, B, A))


def test_virtual_stages():
    """The analytic estimator's `virtual_stages` column: with a chunk per entry of the partition
    (pp x v entries) the layout has pp x v stages (Megatron: VPP = stages / pp); with one entry
    per rank, an even split becomes --num-virtual-stages-per-pipeline-rank, an uneven one a
    layout of v x pp chunks."""
    rp = row_plan(1, 4, 2, 1, 4, "big-big", "2-3-2-3", virtual_stages="2")
    text = megatron(rp, GPT8).text
    assert '    --pipeline-model-parallel-layout "Et|t*3|t*2|t*2L"\n' in text
    assert parse_layout("Et|t*3|t*2|t*2L") == [["E", "t"], ["t"] * 3, ["t"] * 2, ["t", "t", "L"]]
    assert 'p.pipeline_parallel_schedule = "Interleaved1F1B"' in torchtitan(rp, GPT8).text
    even = row_plan(1, 4, 2, 1, 4, "big-big", "5-5", virtual_stages="2")
    assert "    --num-virtual-stages-per-pipeline-rank 2\n" in megatron(even, GPT8).text
    # even (E+4t, 4t+L over 2 chunks each): every chunk named, no pipeline_parallel_layers_per_stage, which
    # counts the embedding and head as a layer each: ceil((8 + 1 + 1) / 2) = 5 stages, not 4 (torchtitan refuses)
    titan = torchtitan(even, GPT8).text
    assert "layers_per_stage" not in titan and titan.count("        [") == 4
    # uneven, one entry per rank (E+3t, 5t+L): each rank's layers over its 2 chunks (2+1, 3+2), in
    # model order chunk 0 of ranks 0, 1, then chunk 1: a layout of 2 x 2 stages (issue 30)
    uneven_rp = row_plan(1, 4, 2, 1, 4, "big-big", "4-6", virtual_stages="2")
    uneven = megatron(uneven_rp, GPT8)
    assert uneven.warnings == ()
    assert '    --pipeline-model-parallel-layout "Et*2|t*3|t|t*2L"\n' in uneven.text
    assert "--num-virtual" not in uneven.text.split("MODEL_PARALLEL_ARGS")[1]  # Megatron refuses both at once
    titan = torchtitan(uneven_rp, GPT8).text
    assert titan.count("        [") == 4 and '"tok_embeddings"' in titan.split("        [")[1]


def test_analytic_recipe_columns_become_flags():
    rp = row_plan(2, 2, 4, 1, 8, "big-small-small-big", "2-3-3-2", recompute="selective", zero="1",
                  sequence_parallel="True", precision="fp16", virtual_stages="1")
    tail = megatron(rp, GPT8).text.split("    --pipeline-model-parallel-layout")[1]
    assert tail == ''' "Et|t*3|t*3|tL"
    --recompute-granularity selective
    --sequence-parallel
    --use-distributed-optimizer
    --fp16
)
'''
    text = torchtitan(rp, GPT8).text
    assert "p.data_parallel_shard_degree = 2" in text and "config.activation_checkpoint = SelectiveAC.Config()" in text


def test_moe_layer_freq_is_megatrons_list_string():
    """DeepSeek-V3's first three dense layers, as Megatron-LM's own example writes them
    (07_moe_cp_fsdp.md §5.1: --moe-layer-freq "([0]*3+[1]*58)"); all MoE: the default, not written."""
    from fasop.report.export_megatron import moe_layer_freq

    assert moe_layer_freq(("dense",) * 3 + ("moe",) * 58) == "([0]*3+[1]*58)"
    assert moe_layer_freq(("moe", "dense") * 2) == "([1]*1+[0]*1+[1]*1+[0]*1)"
    assert moe_layer_freq(("moe",) * 4) == "" and moe_layer_freq(()) == ""
    assert moe_layer_freq(("mamba", "moe")) is None


def test_what_torchtitan_cannot_express_is_a_warning(tmp_path, monkeypatch, capsys):
    """Without ZeRO torchtitan's DDP has data_parallel_shard_degree 1, and EP borrows only from
    dp_shard x cp x tp: ep 8 with tp 1 cannot be written as estimated; etp > 1 is gone at its HEAD."""
    monkeypatch.chdir(tmp_path)
    assert main(["search", "--model", "mixtral-8x7b", "--cluster", "aws", "--nodes", "p5=4", "--zero", "0", "--ep", "8",
                 "--etp", "2", "--top", "1", "--no-progress", "--out", "m.csv"]) == 0
    capsys.readouterr()
    assert main(["export", "--from", "m.csv", "--rank", "1", "--model", "mixtral-8x7b", "--cluster", "aws",
                 "--target", "torchtitan"]) == 0
    text = capsys.readouterr().out
    assert "# warning: torchtitan cannot express etp 2" in text
    assert "# warning: torchtitan cannot express ep 8: it must divide data_parallel_shard_degree x cp x tp = 1" in text
    assert "p.expert_parallel_degree = 8" in text
    assert main(["export", "--from", "m.csv", "--rank", "1", "--model", "mixtral-8x7b", "--cluster", "aws",
                 "--target", "megatron"]) == 0
    text = capsys.readouterr().out
    assert "--expert-model-parallel-size 8" in text and "--expert-tensor-parallel-size 2" in text
    assert "--num-experts 8" in text and "--moe-token-dispatcher-type alltoall" in text


def test_the_sequence_length_estimated_is_the_one_exported():
    """A plan estimated at another sequence length (`--seq-len`) launches at that length: Megatron-LM's
    --seq-length and torchtitan's tokens per micro-batch both carry it."""
    from dataclasses import replace

    rp = row_plan(1, 8, 1, 4, 1, "big-small", "10")
    long = replace(GPT8, sequence_length=16384)
    assert "    --seq-length 16384\n" in megatron(rp, long).text
    assert "num_tokens_per_microbatch_per_dp_rank = 65536" in torchtitan(rp, long).text  # micro-batch 4


def _hand_export(tmp_path, capsys, target: str, **cells) -> str:
    """`fasop export` of one hand-written row of a Mixtral-8x7B plan on two p5 nodes (tp 2, ep 8, dp 8)."""
    row = {"mbs": "1", "tp": "2", "dp": "8", "pp": "1", "node_placement": "p5-p5", "partition": "34",
           "num_microbatches": "32", "cp": "1", "ep": "8", "etp": "1", "zero": "1", "recompute": "none",
           "sequence_parallel": "True", "precision": "bf16"} | cells
    path = tmp_path / "hand.csv"
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, list(row))
        writer.writeheader()
        writer.writerow(row)
    assert main(["export", "--from", str(path), "--row", "1", "--model", "mixtral-8x7b", "--cluster", "aws",
                 "--target", target]) == 0
    return capsys.readouterr().out


def test_megatron_fsdp_takes_its_checkpoint_format_and_gradient_dtype(tmp_path, capsys):
    """arguments.py asserts --ckpt-format fsdp_dtensor under Megatron-FSDP; its gradient buffer follows
    --megatron-fsdp-main-grads-dtype (default auto: the bf16 parameters'), not --grad-reduce-in-bf16."""
    fp32 = _hand_export(tmp_path, capsys, "megatron", zero="3", main_grads="fp32")
    assert "    --ckpt-format fsdp_dtensor\n    --megatron-fsdp-main-grads-dtype fp32\n" in fp32
    assert "CUDA_DEVICE_MAX_CONNECTIONS unset or above 1" in fp32
    bf16 = _hand_export(tmp_path, capsys, "megatron", zero="2", main_grads="bf16")
    assert "--megatron-fsdp-main-grads-dtype bf16" in bf16 and "--grad-reduce-in-bf16" not in bf16
    assert "--grad-reduce-in-bf16" in _hand_export(tmp_path, capsys, "megatron", zero="1", main_grads="bf16")


def test_fp8_with_moe_act_or_layernorm_recompute_uses_current_scaling(tmp_path, capsys):
    """Megatron-Core refuses delayed scaling (the default --fp8-recipe) with moe_act / layernorm recompute."""
    for modules in ("moe_act", "layernorm", "core_attn,layernorm", "core_attn, layernorm"):
        text = _hand_export(tmp_path, capsys, "megatron", precision="fp8", recompute=f"selective:{modules}")
        assert "--fp8-recipe tensorwise" in text
    assert "--fp8-recipe" not in _hand_export(tmp_path, capsys, "megatron", precision="fp8", recompute="selective:core_attn")


def test_what_megatron_refuses_of_an_moe_plan_is_a_warning(tmp_path, capsys):
    """MoE with tp > 1 needs sequence parallelism (moe_layer.py); HSDP's replicas must divide the experts'
    data-parallel group, tp x cp x dp / (ep x etp) = 2 here (parallel_state.py)."""
    assert "refuses tensor parallelism (2) without sequence parallelism" in \
        _hand_export(tmp_path, capsys, "megatron", sequence_parallel="False")
    text = _hand_export(tmp_path, capsys, "megatron", zero="3", dp_shard="2", dp_replicate="4")
    assert "# warning: --num-distributed-optimizer-instances 4 does not divide the expert data-parallel group (2" in text
    assert "does not divide" not in _hand_export(tmp_path, capsys, "megatron", zero="3", dp_shard="4", dp_replicate="2")


def test_torchtitan_trains_the_estimated_context_and_says_what_it_cannot_reduce(tmp_path, capsys):
    """training.max_context_length carries the sequence (default 2048); mixed_precision_reduce takes only
    float32 at torchtitan's HEAD, so bf16 gradient reduction is a warning, not a key; ZeRO 0 with cp > 1
    is sharded over cp by torchtitan's FSDP."""
    text = _hand_export(tmp_path, capsys, "torchtitan", zero="1", main_grads="bf16")
    assert "config.training.max_context_length = 4096" in text and "--training.max_context_length 4096" in text
    assert "mixed_precision_reduce" not in text.split("def fasop_plan")[1]
    assert "# warning: main_grads bf16: torchtitan reduces gradients in float32" in text
    cp = _hand_export(tmp_path, capsys, "torchtitan", zero="0", cp="2", dp="4", num_microbatches="64")
    assert "# warning: ZeRO stage 0 with cp 2: torchtitan shards the states over the cp ranks" in cp


def test_a_plan_by_flags_exports_the_recipe_it_was_explained_with(capsys):
    """Without a row, explain and export take the estimate's recipe (analytic defaults: the distributed
    optimizer), not FASOP's replicated optimizer state."""
    flags = ["--model", "llama-3-8b", "--cluster", "aws", "--placement", "p5", "--tp", "1", "--dp", "8", "--pp", "1"]
    assert main(["explain", *flags]) == 0
    assert "ZeRO-1" in capsys.readouterr().out
    assert main(["export", *flags, "--target", "megatron"]) == 0
    text = capsys.readouterr().out
    assert "--use-distributed-optimizer" in text and "optimizer state replicated" not in text


def test_node_type_names_that_extend_one_another_read_back(tmp_path):
    """`h100` beside `h100-spot` (names may hold '-'): a placement cell reads as the one sequence of names
    it spells; one that spells two (x, y and x-y) is refused, not silently read one way."""
    from fasop.core.errors import FasopError
    from fasop.plans.rowplan import placement_types

    two = ClusterSpec(path="c.yaml", estimator="analytic", node_types={"h100": node("h100"), "h100-spot": node("h100-spot")},
                      p2p_inter_node_divisor=1.0, p2p_intra_node_divisor=1.0, memory_overhead_factor=1.0)
    got = placement_types("h100-h100-spot-h100-spot-h100", two)
    assert [n.name for n in got] == ["h100", "h100-spot", "h100-spot", "h100"]
    three = ClusterSpec(path="c.yaml", estimator="analytic", node_types={k: node(k) for k in ("x", "y", "x-y")},
                        p2p_inter_node_divisor=1.0, p2p_intra_node_divisor=1.0, memory_overhead_factor=1.0)
    assert [n.name for n in placement_types("y-x", three)] == ["y", "x"]
    with pytest.raises(FasopError, match="reads as more than one sequence"):
        placement_types("x-y", three)
    with pytest.raises(FasopError, match="node type 'spot' is not in"):
        placement_types("h100-spot-spot", two)
    ab = ClusterSpec(path="c.yaml", estimator="analytic", node_types={k: node(k) for k in ("a-b", "a", "b-c")},
                     p2p_inter_node_divisor=1.0, p2p_intra_node_divisor=1.0, memory_overhead_factor=1.0)
    with pytest.raises(FasopError, match="node type 'z' is not in"):   # a, b-c read; the longest name, a-b, would not
        placement_types("a-b-c-z", ab)
    with pytest.raises(FasopError) as long:
        placement_types("x" * 100_000, two)
    assert len(str(long.value)) < 300


def test_an_moe_rows_stated_sequence_parallelism_is_scored_as_stated(tmp_path, capsys):
    """The search keeps sequence parallelism for an MoE model's tp > 1 plans, but a row that states it off
    is explained as it states (export warns that Megatron refuses it): not silently re-scored with it on."""
    steps = []
    for sp in ("False", "True"):
        _hand_export(tmp_path, capsys, "megatron", sequence_parallel=sp)   # writes hand.csv
        assert main(["explain", "--from", str(tmp_path / "hand.csv"), "--row", "1", "--model", "mixtral-8x7b",
                     "--cluster", "aws"]) == 0
        steps.append(next(x for x in capsys.readouterr().out.splitlines() if x.startswith("step ")))
    assert steps[0] != steps[1]
