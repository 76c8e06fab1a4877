"""A validate row that states Megatron-Core's EP A2A overlap (`ep_overlap`) ran a plan Megatron-Core accepts
it with (transformer_config.py @d98e8a6: ep > 1, a virtual pipeline when pp > 1, no full recompute, no `moe`
recompute, ...; moe_kernels.ep_overlap_refusal): a stated plan it refuses is one line naming the column, and
the recipe choices the row leaves open are taken among those it runs with."""

from pathlib import Path

import pytest

from fasop.core.errors import FasopError
from fasop.report.validate import validate

HEAD = ("name,model,gpu,num_gpus,tp,pp,cp,dp,ep,etp,zero,seq_len,global_batch_size,micro_batch_size,virtual_pp,"
        "moe_dispatcher,ep_overlap,precision,recompute,measured_seconds_per_iter\n")
# Mixtral-8x7B (32 layers, 8 experts) on 64 H100, EP 8
PLAN = "mixtral-8x7b,H100-SXM,64,1,{pp},1,{dp},{ep},1,1,4096,256,1,{vp},alltoall,{overlap},bf16,{recompute},1"


def _rows(tmp_path: Path, *rows: dict) -> Path:
    lines = [f"r{i}," + PLAN.format(**{"pp": 1, "dp": 64, "ep": 8, "vp": "", "overlap": 1, "recompute": "none"} | r)
             for i, r in enumerate(rows)]
    (tmp_path / "r.csv").write_text(HEAD + "\n".join(lines) + "\n")
    return tmp_path / "r.csv"


@pytest.mark.parametrize("row, why", [
    ({"recompute": "full"}, "full recompute"),
    ({"recompute": "selective:moe"}, "moe recompute"),
    ({"ep": 1}, "ep 1"),
    ({"pp": 2, "dp": 32, "vp": 1}, "a pipeline without virtual stages"),
    ({"pp": 2, "dp": 32, "recompute": "full"}, "full recompute"),   # the stated one, not an open choice's
])
def test_a_stated_overlap_on_a_plan_megatron_refuses_it_for_is_one_line(tmp_path, row, why):
    with pytest.raises(FasopError, match=rf"r.csv: line 2: ep_overlap: 1: Megatron-Core refuses its EP overlap with {why}"):
        validate(_rows(tmp_path, row))


def test_the_choices_a_row_leaves_open_are_ones_the_overlap_runs_with(tmp_path):
    # 16 GPUs (dp 16), recompute empty: only full recompute fits, which the row without the overlap picks; the row
    # stating it cannot have recomputed fully, and is estimated with the fastest plan the overlap runs with
    plan = "mixtral-8x7b,H100-SXM,16,1,1,1,16,8,1,1,4096,128,,,alltoall,{},bf16,,1\n"
    (tmp_path / "o.csv").write_text(HEAD + "a," + plan.format("") + "b," + plan.format(1))
    unstated, stated = validate(tmp_path / "o.csv").predictions
    assert unstated.row["recompute"] == "full" and unstated.row["fits"]
    assert stated.row["recompute"] == "none" and "recompute=none" in stated.row["picked"]


def test_a_recipes_overlap_on_a_plan_it_cannot_run_is_estimated_without_it(tmp_path):
    # GB200's MXFP8 MoE recipes run the overlap (gpus.yaml moe_software): a row leaving the cell empty on a plan
    # Megatron-Core refuses it for (full recompute) is not refused; it is estimated as the row stating none
    plan = "mixtral-8x7b,GB200,64,1,1,1,64,8,1,1,4096,256,1,,alltoall,{},mxfp8,full,1\n"
    (tmp_path / "g.csv").write_text(HEAD + "a," + plan.format("") + "b," + plan.format(0))
    recipe, none = validate(tmp_path / "g.csv").predictions
    assert recipe.row["predicted_seconds_per_iter"] == none.row["predicted_seconds_per_iter"]


def test_an_interleaved_row_whose_micro_batches_pp_does_not_divide_says_the_rule(tmp_path):
    # 6 micro-batches on pp 4 with 5 virtual stages: Megatron-Core's interleaved schedule runs it only with a
    # --microbatch-group-size-per-virtual-pipeline-stage of 6 (schedules.py), fasop models the default group (pp)
    (tmp_path / "v.csv").write_text(
        "name,model,gpu,num_gpus,tp,pp,dp,seq_len,global_batch_size,micro_batch_size,virtual_pp,precision,recompute,"
        "measured_seconds_per_iter\nv,llama-3-70b,H100-SXM,32,8,4,1,8192,6,1,5,bf16,selective,1\n")
    with pytest.raises(FasopError, match=r"line 2: micro_batch_size: .*micro-batches a multiple of pp .*"
                                         r"--microbatch-group-size-per-virtual-pipeline-stage"):
        validate(tmp_path / "v.csv")
