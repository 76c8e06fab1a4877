"""DeepSeek-V3's multi-token-prediction module on the last pipeline stage: its parameters, activations
and the word-embedding gradient sync it brings (Megatron-Core gpt_model.py builds the embedding where
`pre_process or mtp_process`; finalize_model_grads.py all-reduces its gradient between the stages)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from fasop.estimators.analytic import cost as C
from fasop.estimators.analytic import memory as M
from fasop.estimators.analytic.layers import Recipe, total_params
from fasop.specs.catalog import default_params, find_gpu
from fasop.specs.hf_config import architecture_from_config, read_config

DATA = Path(__file__).parent / "data"


def _deepseek(**degrees):
    a = architecture_from_config(read_config(DATA / "hf" / "deepseek-v3.json"), "deepseek-v3")
    w = C.Workload(arch=a, seq=4096, mbs=1, tp=degrees.get("tp", 1), dp=8, pp=degrees.get("pp", 4),
                   num_microbatches=32, recipe=Recipe(), params=default_params(), ep=8, mtp=1)
    return a, w


def test_the_mtp_module_has_the_published_size():
    # DeepSeek-V3's Hub checkpoint: 685B = 671B main model + 14B MTP module, whose layer 61 stores its
    # own copies of the embedding and the output head (V x h = 129,280 x 7,168 = 0.927B each). In
    # training the head is the main model's (shared on the last stage), the embedding a copy there
    a, w = _deepseek()
    dense, routed = M.mtp_param_split(w, first=False)
    table = 129_280 * 7_168
    assert a.vocab_size * a.embed_width == table
    assert total_params(a) + dense + routed + table == pytest.approx(685e9, abs=0.6e9)
    # on the first stage too (pp = 1) the embedding is already there: only the module itself
    assert sum(M.mtp_param_split(w, first=True)) == pytest.approx(dense + routed - table)
    assert M.mtp_param_split(replace(w, mtp=0), first=False) == (0.0, 0.0)


def test_the_last_stage_holds_the_module_sharded_like_the_model():
    a, w = _deepseek(tp=2)
    none = replace(w, mtp=0)
    dense, routed = M.mtp_param_split(w, first=False)
    with_mtp, without = M.stage_param_split(w, 15, False, True), M.stage_param_split(none, 15, False, True)
    assert with_mtp[0] - without[0] == pytest.approx(dense / 2)      # dense parts over tp = 2
    assert with_mtp[1] - without[1] == pytest.approx(routed / 8)     # routed experts over ep = 8
    assert M.stage_param_split(w, 15, False, False) == M.stage_param_split(none, 15, False, False)  # other stages


def test_the_module_keeps_its_own_logits_and_layer_for_the_backward():
    a, w = _deepseek()
    extra = M.stage_memory(w, 15, 3).activations - M.stage_memory(replace(w, mtp=0), 15, 3).activations
    logits = 4 * 4096 * 1 * 129_280           # its loss's fp32 logits, 4 s b V / t (Korthikanti §4.1)
    concat = 2 * 4096 * 7_168 * 2             # the 2h-wide input of its projection, 16-bit
    assert extra == pytest.approx(M.mtp_activation_bytes(w))
    assert extra > logits + concat
    assert M.stage_memory(w, 15, 0).activations == M.stage_memory(replace(w, mtp=0), 15, 0).activations


def test_the_embedding_gradient_is_synced_between_the_first_and_last_stage():
    from fasop.estimators.analytic import hardware as H
    from fasop.specs.types import NodeType
    a, w = _deepseek()
    gpu = find_gpu("H100-SXM")
    node = NodeType(name="p5", instance="p5", gpu="H100-SXM", gpus_per_node=8, memory_limit_bytes=gpu.memory_bytes,
                    intra_node_bytes_per_s=gpu.intra_node_bytes_per_s, inter_node_bytes_per_s=400e9,
                    intra_node_shared=False, usd_per_hour=0.0, spot_usd_per_hour=None)
    stages = H.stage_hardware(1, 8, 4, (node,) * 4, (gpu,) * 4, default_params())
    counts = (15, 15, 15, 16)
    assert C.step(replace(w, mtp=0), stages, counts).embedding_sync_s == 0.0   # untied, no MTP: nothing shared
    sync = C.step(w, stages, counts).embedding_sync_s
    table = 129_280 * 7_168 * 4 / 400e9 * 8   # fp32 gradients, 2 ranks: about the table once over a 50 GB/s hop
    assert 0.5 * table < sync < 3 * table


LIGHTNING = DATA / "hf" / "nemotron-3.5-lightning-30b-a3b.json"


def _plan_of(estimator, inventory, pp):
    from fasop.plans.enumerate import combo_plan
    return combo_plan((1, len(inventory) * 8 // pp, pp, 1, 1, 8, 1),
                      global_batch_size=estimator.model.global_batch_size, placement=tuple(inventory))


def test_a_search_trains_the_modules_it_is_told_to():
    from fasop.estimators import make_estimator
    from fasop.search.engine import parse_nodes
    from fasop.specs.load import load_cluster, load_model
    model, cluster = load_model(str(LIGHTNING)), load_cluster("aws")
    assert model.architecture.mtp_layers == 1
    inventory = parse_nodes("p6-b200=2", cluster)
    columns = {}
    for given in (None, (0,), (1,), (2,)):
        e = make_estimator(model, cluster, inventory, **({} if given is None else {"mtp_layers": given}))
        plan = _plan_of(e, inventory, 2)
        got = e.estimate(plan)
        columns[given] = (dict(got.extra_columns)["mtp_layers"], got.step_time_s, got.memory.stage_bytes[-1])
    assert columns[None] == columns[(0,)]                                    # default: the main model only
    assert columns[None][0] == 0 and columns[(2,)][0] == 2
    assert columns[(0,)][1] < columns[(1,)][1] < columns[(2,)][1]          # each depth costs the last stage time
    assert columns[(0,)][2] < columns[(1,)][2] < columns[(2,)][2]          # and memory


def test_mtp_layers_on_a_model_without_a_module_is_refused(tmp_path, capsys):
    from fasop.cli.command import main
    status = main(["search", "--model", "llama-3-8b", "--cluster", "aws", "--nodes", "p5=1", "--mtp-layers", "1",
                   "--out", str(tmp_path / "x.csv"), "--no-progress"])
    err = capsys.readouterr().err
    assert status == 2 and "--mtp-layers: 1: the model has no multi-token-prediction module" in err
    assert "Traceback" not in err and not (tmp_path / "x.csv").exists()


def test_the_layout_puts_each_depth_on_the_last_stage_before_the_loss():
    from fasop.report.export_megatron import megatron_layout
    kinds = ("embedding",) + ("transformer",) * 6 + ("head",)
    assert megatron_layout(kinds, (3, 3, 2), mtp=1) == ("Et*2|t*3|tmL", "")
    assert megatron_layout(kinds, (3, 3, 2), mtp=2)[0].endswith("|tmmL")
    assert megatron_layout(kinds, (3, 3, 2))[0].endswith("|tL")


@pytest.mark.parametrize("column, cell, message", [
    ("mtp_layers", "abc", "mtp_layers: expected a count of multi-token-prediction depths, got 'abc'"),
    ("mtp_layers", "1", "mtp_layers: 1: llama-3-8b has no multi-token-prediction module"),
    ("cuda_graphs", "moe,moe_router", "cuda_graphs: moe and moe_router"),
    ("cuda_graphs", "attn,bogus", "cuda_graphs: expected none, full_iteration or a comma list"),
])
@pytest.mark.parametrize("command", ["export", "explain"])
def test_a_rows_software_cells_are_checked_not_dropped(tmp_path, capsys, column, cell, message, command):
    """A CSV row edited to a value the search could not have written is refused with its column (before,
    export wrote it as eager and without MTP)."""
    from conftest import with_cell
    from fasop.cli.command import main
    out = tmp_path / "s.csv"
    assert main(["search", "--model", "llama-3-8b", "--cluster", "aws", "--nodes", "p5=1", "--top", "1",
                 "--out", str(out), "--no-progress"]) == 0
    with_cell(out, column, cell)
    capsys.readouterr()
    extra = ["--target", "megatron"] if command == "export" else []
    assert main([command, "--from", str(out), "--rank", "1", "--model", "llama-3-8b", "--cluster", "aws", *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and "rank 1" in err and "Traceback" not in err, err


def test_explain_names_the_modules_on_the_last_stage():
    from fasop.plans.rowplan import stage_layer_names
    from fasop.specs.load import load_model
    model = load_model("gpt2xl")
    entries = len(model.layer_kinds)
    split = (entries // 2, entries - entries // 2)
    assert stage_layer_names(model, split)[-1].endswith(", head") and "MTP" not in stage_layer_names(model, split)[-1]
    assert stage_layer_names(model, split, 1)[-1].endswith(", MTP, head")
    assert stage_layer_names(model, split, 2)[-1].endswith(", MTP x2, head")
    assert stage_layer_names(model, split, 1)[0] == stage_layer_names(model, split)[0]


def test_a_plan_by_flags_states_its_mtp_depths(capsys):
    from fasop.cli.command import main
    base = ["explain", "--model", str(LIGHTNING), "--cluster", "aws", "--placement", "p6-b200-p6-b200", "--dp", "8",
            "--pp", "2"]
    assert main(base + ["--mtp-layers", "2"]) == 0
    assert ", MTP x2, head" in capsys.readouterr().out
    assert main(base) == 0
    assert "MTP" not in capsys.readouterr().out.split("\n\n")[1]
    assert main(["explain", "--model", "llama-3-8b", "--cluster", "aws", "--placement", "p5", "--tp", "8",
                 "--mtp-layers", "1"]) == 2
    assert "mtp_layers: 1: llama-3-8b has no multi-token-prediction module" in capsys.readouterr().err
