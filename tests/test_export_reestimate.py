"""An export describes the plan fasop estimated: the recipe read back from the exported flags
(Megatron-LM) or recipe (torchtitan) and estimated again gives the row's step time and memory.

What is protected here (issue 30, item 1): an fp8 plan exports Megatron-LM's FP8 flags with
--bf16 and torchtitan's float8 converter; a ZeRO-2 plan exports Megatron-FSDP's optim_grads
sharding (not --use-distributed-optimizer, whose main-grad buffer stays whole) and torchtitan's
FSDP without resharding after forward; an interleaved plan on an uneven split exports v x pp model
chunks; `--precision fp8` on GPUs without FP8 units is refused.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

import fasop
from fasop.cli.command import main

SEARCH = ["search", "--model", "llama-3-8b", "--cluster", "aws", "--nodes", "p5=2", "--top", "3", "--out", "r.csv",
          "--no-progress", "--precision", "fp8", "--zero", "2", "--virtual-stages", "2"]


def megatron_recipe(text: str, pp: int) -> dict:
    zero = 1 if "--use-distributed-optimizer" in text else 0
    if m := re.search(r"--data-parallel-sharding-strategy (\w+)", text):
        zero = {"no_shard": 0, "optim": 1, "optim_grads": 2, "optim_grads_params": 3}[m.group(1)]
    precision = "nvfp4" if "--fp4-recipe nvfp4" in text else "mxfp8" if "--fp8-recipe mxfp8" in text \
        else "fp8" if "--fp8-format" in text else "fp16" if "--fp16" in text else "bf16"
    assert precision in ("bf16", "fp16") or "--bf16" in text  # FP8 / FP4 matmuls inside bf16 training
    recompute = m.group(1) if (m := re.search(r"--recompute-granularity (\w+)", text)) else "none"
    if m := re.search(r"--num-virtual-stages-per-pipeline-rank (\d+)", text):
        v = int(m.group(1))
    elif m := re.search(r'--pipeline-model-parallel-layout "([^"]*)"', text):
        v = len(m.group(1).split("|")) // pp
    else:
        v = 1
    return {"zero": zero, "precision": precision, "recompute": recompute, "virtual_stages": v,
            "sequence_parallel": "--sequence-parallel" in text}


def torchtitan_recipe(text: str, pp: int) -> dict:
    shard = int(re.search(r"p.data_parallel_shard_degree = (\d+)", text).group(1))
    zero = 0 if shard == 1 else 2 if 'fsdp_reshard_after_forward = "never"' in text else 3
    parts = text.split("p.module_fqns_per_model_part = [")[1].split("    ]")[0].count("        [") \
        if "p.module_fqns_per_model_part = [" in text else pp
    v = parts // pp if "Interleaved1F1B" in text else 1
    ac = re.search(r"config.activation_checkpoint = (\w+)", text).group(1)
    converters = {"Float8LinearConverter": "fp8", "MXFP8LinearConverter": "mxfp8", "NVFP4LinearConverter": "nvfp4"}
    return {"zero": zero, "precision": next((p for c, p in converters.items() if c in text), "bf16"),
            "recompute": {"SelectiveAC": "selective", "FullAC": "full", "None": "none"}[ac],
            "virtual_stages": v, "sequence_parallel": "enable_sequence_parallel = True" in text}


def _explain(path, capsys, rank) -> dict:
    assert main(["explain", "--from", str(path), "--rank", str(rank), "--model", "llama-3-8b", "--cluster", "aws",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    out.pop("where")
    return out


@pytest.mark.parametrize("target", ["megatron", "torchtitan"])
def test_exports_re_estimate_to_the_row(tmp_path, monkeypatch, capsys, target):
    monkeypatch.chdir(tmp_path)
    assert main(SEARCH) == 0
    with open("r.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    capsys.readouterr()
    checked = 0
    for row in rows:
        pp = int(row["pp"])
        assert main(["export", "--from", "r.csv", "--rank", row["rank"], "--model", "llama-3-8b", "--cluster", "aws",
                     "--target", target]) == 0
        text = capsys.readouterr().out
        recipe = (megatron_recipe if target == "megatron" else torchtitan_recipe)(text, pp)
        want = {"zero": int(row["zero"]), "precision": row["precision"], "recompute": row["recompute"],
                "virtual_stages": int(row["virtual_stages"]), "sequence_parallel": row["sequence_parallel"] == "True"}
        if target == "torchtitan":  # torchtitan has no ZeRO-1; its selective AC is not Megatron's: compared apart
            want["recompute"] = recipe["recompute"] if row["recompute"] == "selective" else want["recompute"]
        assert recipe == want, (row["rank"], text)
        again = dict(row) | {k: str(v) for k, v in recipe.items()}
        again["sequence_parallel"] = str(recipe["sequence_parallel"])
        with open("again.csv", "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(row))
            writer.writeheader()
            writer.writerow(again)
        assert _explain("again.csv", capsys, row["rank"]) == _explain("r.csv", capsys, row["rank"])
        checked += pp > 1 and int(row["virtual_stages"]) == 2 and len(set(row["partition"].split("-"))) > 1
    assert checked >= 1  # an interleaved plan on an uneven split among them


def test_fp8_on_gpus_without_fp8_units_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    argv = ["search", "--model", "llama-3-8b", "--cluster", "aws", "--nodes", "p4d=1", "--top", "1", "--out", "o.csv",
            "--no-progress", "--precision"]
    assert main(argv + ["fp8"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "A100-SXM4-40GB has no FP8 tensor cores" in err
    assert main(argv + ["bf16,fp8"]) == 0  # dropped where no plan could use it
    with open("o.csv", newline="") as fh:
        assert {r["precision"] for r in csv.DictReader(fh)} == {"bf16"}


def test_virtual_stages_that_no_pipeline_can_use_are_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    argv = ["search", "--model", "llama-3-8b", "--cluster", "aws", "--nodes", "p4d=1", "--top", "1", "--out", "o.csv",
            "--no-progress", "--virtual-stages"]
    for v in ("3", "2,5"):
        assert main(argv + [v]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "--virtual-stages" in err and "32 transformer layers" in err
    assert not (tmp_path / "o.csv").exists()


# ---------------------------------------------------------------------------- MoE, CP, FSDP / HSDP plans
def megatron_degrees(text: str, num_gpus: int) -> dict:
    """The plan's degrees as Megatron-LM reads the exported flags (an MoE model's expert tensor
    parallelism defaults to tp, data parallelism is what is left: arguments.py)."""
    flag = lambda name, default: int(m.group(1)) if (m := re.search(rf"--{name} (\d+)", text)) else default  # noqa: E731
    tp, pp, cp = flag("tensor-model-parallel-size", 1), flag("pipeline-model-parallel-size", 1), \
        flag("context-parallel-size", 1)
    return {"tp": tp, "pp": pp, "cp": cp, "ep": flag("expert-model-parallel-size", 1),
            "etp": flag("expert-tensor-parallel-size", tp if "--num-experts" in text else 1),
            "dp": num_gpus // (tp * cp * pp),
            "replicas": flag("num-distributed-optimizer-instances", 1)}


def torchtitan_degrees(text: str, num_gpus: int) -> dict:
    key = lambda name, default: int(m.group(1)) if (m := re.search(rf"p\.{name} = (\d+)", text)) else default  # noqa: E731
    shard, replicate = key("data_parallel_shard_degree", 1), key("data_parallel_replicate_degree", 1)
    return {"tp": key("tensor_parallel_degree", 1), "pp": key("pipeline_parallel_degree", 1),
            "cp": key("context_parallel_degree", 1), "ep": key("expert_parallel_degree", 1), "etp": 1,
            "dp": shard * replicate, "replicas": replicate if shard > 1 else 1}


LONG_LLAMA = """name: llama-3-8b-64k
hf_config: {path}
training:
  sequence_length: 65536
  global_batch_size: 64
"""

PARALLEL_CASES = {
    "moe": ("qwen3-30b-a3b", ["--nodes", "p5=2"]),
    "cp": ("long.yaml", ["--nodes", "p5=4"]),
    "fsdp": ("llama-3-8b", ["--nodes", "p5=4", "--zero", "3", "--hsdp", "on"]),
}


@pytest.mark.parametrize("case", sorted(PARALLEL_CASES))
@pytest.mark.parametrize("target", ["megatron", "torchtitan"])
def test_parallel_plans_export_and_re_estimate(tmp_path, monkeypatch, capsys, case, target):
    """An MoE plan (EP), a 64K-context Llama-3-8B plan (CP) and an FSDP plan with HSDP: the degrees
    read back from each export, written over the row's, re-estimate to the searched estimate."""
    monkeypatch.chdir(tmp_path)
    model, flags = PARALLEL_CASES[case]
    shipped = Path(fasop.__file__).resolve().parent / "data" / "model_specs" / "hf" / "llama-3-8b.json"
    (tmp_path / "long.yaml").write_text(LONG_LLAMA.format(path=shipped), encoding="utf-8")
    assert main(["search", "--model", model, "--cluster", "aws", "--top", "3", "--out", "r.csv", "--no-progress",
                 *flags]) == 0
    rows = [r for r in csv.DictReader(open("r.csv", newline="")) if r["rank"]]
    used = {"moe": "ep", "cp": "cp", "fsdp": "dp_replicate"}[case]
    assert any(int(r[used]) > 1 for r in rows), rows  # the searched plans use the dimension
    capsys.readouterr()
    for row in rows:
        num_gpus = int(row["num_gpus"])
        assert main(["export", "--from", "r.csv", "--rank", row["rank"], "--model", model, "--cluster", "aws",
                     "--target", target]) == 0
        text = capsys.readouterr().out
        got = (megatron_degrees if target == "megatron" else torchtitan_degrees)(text, num_gpus)
        zero = int(row["zero"])
        replicas = int(row["dp_replicate"]) if zero else 1
        want = {c: int(row[c]) for c in ("tp", "pp", "cp", "ep", "etp", "dp")} | {"replicas": replicas}
        if target == "torchtitan" and want["etp"] > 1:
            assert "torchtitan cannot express etp" in text
            want["etp"] = 1
        assert got == want, (row["rank"], text)
        again = dict(row) | {c: str(got[c]) for c in ("tp", "pp", "cp", "ep", "etp", "dp")}
        again["dp_replicate"] = str(got["replicas"] if zero else got["dp"])
        again["dp_shard"] = str(got["dp"] // int(again["dp_replicate"]))
        with open("again.csv", "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(row))
            writer.writeheader()
            writer.writerow(again)
        first = _explain_model("r.csv", capsys, row["rank"], model)
        assert first["step_time_s"] == pytest.approx(float(row["step_time_s"]), rel=5e-6)  # 6 digits in the CSV
        assert _explain_model("again.csv", capsys, row["rank"], model) == first


def _explain_model(path, capsys, rank, model) -> dict:
    assert main(["explain", "--from", str(path), "--rank", str(rank), "--model", model, "--cluster", "aws",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    out.pop("where")
    return out


@pytest.mark.parametrize("target", ["megatron", "torchtitan"])
def test_block_scaled_precisions_export_their_recipes(tmp_path, monkeypatch, capsys, target):
    """MXFP8 and NVFP4 plans (Blackwell) export Megatron-LM's --fp8-recipe mxfp8 / --fp4-format e2m1 --fp4-recipe
    nvfp4 inside --bf16 (TransformerConfig fp8_recipe, fp4, fp4_recipe), or torchtitan's MXFP8 / NVFP4 Linear
    converters, read back as the row's precision."""
    monkeypatch.chdir(tmp_path)
    for precision in ("mxfp8", "nvfp4"):
        assert main(["search", "--model", "llama-3-8b", "--cluster", "aws", "--nodes", "p6-b200=1", "--top", "3",
                     "--out", f"{precision}.csv", "--no-progress", "--precision", precision]) == 0
        with open(f"{precision}.csv", newline="") as fh:
            rows = list(csv.DictReader(fh))
        assert rows and {r["precision"] for r in rows} == {precision}
        capsys.readouterr()
        for row in rows:
            assert main(["export", "--from", f"{precision}.csv", "--rank", row["rank"], "--model", "llama-3-8b",
                         "--cluster", "aws", "--target", target]) == 0
            text = capsys.readouterr().out
            read = megatron_recipe if target == "megatron" else torchtitan_recipe
            assert read(text, int(row["pp"]))["precision"] == precision
            assert "no Megatron-LM flag known" not in text and "trains in bf16" not in text


@pytest.mark.parametrize("precision, experts", [("mxfp8", "MXFP8GroupedExpertsConverter"), ("fp8", "Float8GroupedExpertsConverter"),
                                                ("nvfp4", None)])
def test_an_moe_plans_experts_are_converted_or_warned(tmp_path, monkeypatch, capsys, precision, experts):
    """The routed experts' grouped GEMMs get torchtitan's converter of the plan's precision where one exists
    (after the Linear one); NVFP4 has none there: a warning says they stay bf16."""
    monkeypatch.chdir(tmp_path)
    assert main(["search", "--model", "mixtral-8x7b", "--cluster", "aws", "--nodes", "p6-b200=2", "--top", "1",
                 "--out", "m.csv", "--no-progress", "--precision", precision]) == 0
    capsys.readouterr()
    assert main(["export", "--from", "m.csv", "--target", "torchtitan"]) == 0
    out = capsys.readouterr()
    assert torchtitan_recipe(out.out, 1)["precision"] == precision
    if experts:
        assert out.out.index(experts + ".Config(") > out.out.index("LinearConverter.Config(")
    else:
        assert "no nvfp4 converter for the routed experts" in out.err and "GroupedExperts" not in out.out
