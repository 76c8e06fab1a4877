"""Hostile input to what issue 29 added: bad cells, keys and flags get one line, exit status 2.

Each case corrupts one thing -- a `fasop validate` CSV cell of the MoE / CP / FSDP columns, a cluster
YAML's analytic key, or a search / pareto / explain / export flag -- with a wrong type, a negative,
zero, NaN, inf, a huge value, a boolean, an unknown name or text with commas and newlines, and asserts
the bad-input contract: `main` returns 2 (argparse: SystemExit 2), exactly one line on stderr that
names the file / key / column and the value, nothing on stdout, no traceback, and no output file.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from conftest import REPO
from fasop.cli.command import main

DATA = REPO / "tests" / "data"
HF = DATA / "hf"

MOE_HEADER = ("name,model,gpu,num_gpus,tp,pp,cp,dp,ep,etp,zero,dp_shard,task,seq_len,global_batch_size,"
              "micro_batch_size,moe_dispatcher,ep_overlap,precision,recompute,recompute_num_layers,main_grads,"
              "optimizer_states,mtp_layers,fused_elementwise,measured_seconds_per_iter,measured_peak_mem_gib")
QWEN = {"name": "qwen", "model": str(HF / "qwen3-30b-a3b.json"), "gpu": "H100-SXM", "num_gpus": "16", "tp": "1",
        "pp": "1", "cp": "1", "dp": "16", "ep": "16", "etp": "1", "zero": "1", "dp_shard": "", "task": "pretrain",
        "seq_len": "4096", "global_batch_size": "1024", "micro_batch_size": "1", "moe_dispatcher": "hybridep",
        "ep_overlap": "0", "precision": "bf16", "recompute": "none", "recompute_num_layers": "",
        "main_grads": "bf16", "optimizer_states": "", "mtp_layers": "", "fused_elementwise": "",
        "measured_seconds_per_iter": "24.7138", "measured_peak_mem_gib": ""}
"""Qwen3-30B-A3B EP16 on 16 H100 (moe_megatron_bridge_docs_h100.csv's second run, 48 layers, no MTP)."""
DEEPSEEK = {**QWEN, "name": "dsv3", "model": str(HF / "deepseek-v3.json"), "gpu": "GB200", "num_gpus": "256",
            "tp": "1", "pp": "4", "dp": "64", "ep": "64", "seq_len": "4096", "global_batch_size": "8192",
            "moe_dispatcher": "", "precision": "mxfp8", "measured_seconds_per_iter": "13.342"}
"""DeepSeek-V3 (61 layers, one MTP module) on 256 GB200 -- enough to exercise mtp_layers."""


def _fails(capsys, argv: list[str], out: Path) -> str:
    """The bad-input contract; the one stderr line."""
    try:
        code = main(argv)
    except SystemExit as exc:      # argparse's own refusal of a flag's value
        code = exc.code
    stdout, err = capsys.readouterr()
    assert code == 2, (stdout, err)
    assert "Traceback" not in err
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert " error: " in err
    assert not out.exists() and not list(out.parent.glob("*.tmp*"))
    return err


def _write_runs(tmp_path: Path, row: dict) -> Path:
    path = tmp_path / "runs.csv"
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, MOE_HEADER.split(","))
        w.writeheader()
        w.writerow(row)
    return path


def test_a_task_as_tables_write_it_is_the_same_run(tmp_path, capsys):
    """`pretraining`, `Pre-Train`, `full_sft`: the same full-training step as `pretrain` / `sft`."""
    steps = set()
    for i, task in enumerate(("pretrain", "pretraining", "Pre-Train", "sft", "full_sft", "")):
        folder = tmp_path / str(i)
        folder.mkdir()
        out = folder / "out.csv"
        assert main(["validate", str(_write_runs(folder, {**QWEN, "task": task})), "--out", str(out)]) == 0
        steps.add(next(csv.DictReader(out.open()))["predicted_seconds_per_iter"])
    assert len(steps) == 1
    capsys.readouterr()


def test_the_uncorrupted_rows_run(tmp_path, capsys):
    """Protects the cases' meaning: each base row is valid, so each refusal comes from its one cell."""
    for i, row in enumerate((QWEN, DEEPSEEK, {**DEEPSEEK, "mtp_layers": "2"},
                             {**QWEN, "recompute": "full", "recompute_num_layers": "48"},
                             {**QWEN, "recompute": "none", "recompute_num_layers": "0"})):
        folder = tmp_path / str(i)
        folder.mkdir()
        out = folder / "out.csv"
        assert main(["validate", str(_write_runs(folder, row)), "--out", str(out)]) == 0
        assert out.exists()
    capsys.readouterr()


def test_a_measured_batch_past_the_planning_ceiling_is_validated(tmp_path, capsys):
    """A published run's batch may pass the 16,384 a searched plan may take (Megatron-Bridge's weak scaling
    doubles it with the GPUs: 32,768 on 512); validate's estimate is closed form in the micro-batch count, so it
    reads up to limits.MEASURED_GLOBAL_BATCH_SIZE. Twice the batch on the same plan: twice the micro-batches,
    a step of at least twice the pipeline's."""
    from fasop.core import limits

    steps = []
    for gbs in (16384, 32768, limits.MEASURED_GLOBAL_BATCH_SIZE):
        folder = tmp_path / str(gbs)
        folder.mkdir()
        out = folder / "out.csv"
        assert main(["validate", str(_write_runs(folder, {**QWEN, "global_batch_size": str(gbs)})), "--out", str(out)]) == 0
        steps.append(float(next(csv.DictReader(out.open()))["predicted_seconds_per_iter"]))
    assert limits.GLOBAL_BATCH_SIZE < 32768 <= limits.MEASURED_GLOBAL_BATCH_SIZE
    assert 1.9 * steps[0] < steps[1] < 2.1 * steps[0] and steps[2] > 31 * steps[1]
    capsys.readouterr()
    out = tmp_path / "out.csv"
    big = str(2 * limits.MEASURED_GLOBAL_BATCH_SIZE)
    err = _fails(capsys, ["validate", str(_write_runs(tmp_path, {**QWEN, "global_batch_size": big})), "--out", str(out)], out)
    assert "global_batch_size" in err and big in err


NUMBERS = ["x", "-1", "nan", "inf", "1e300", "1.5", "True", "a,b", "a\nb", "9" * 25]
CELLS = (
    [(col, v, v) for col in ("cp", "ep", "etp", "dp_shard", "mtp_layers", "recompute_num_layers") for v in NUMBERS]
    + [(col, "0", "0") for col in ("cp", "ep", "etp", "dp_shard")]
    + [("zero", v, v.lower()) for v in ("4", "-1", "x", "nan", "1.5", "True", "1,2")]
    + [("task", v, v.lower()) for v in ("finetune", "1", "nan", "pretrain,sft", "LoRA", "peft")]
    + [("moe_dispatcher", v, v.lower()) for v in ("a2a", "1", "inf", "deepep\nflex")]
    + [("ep_overlap", v, v) for v in ("nan", "inf", "-inf", "-0.1", "1.5", "1e300", "True", "x", "0,5")]
    + [("main_grads", v, v.lower()) for v in ("fp16", "True", "1", "nan", "bf16,fp32")]
    + [("optimizer_states", v, v.lower()) for v in ("fp8", "True", "0", "inf")]
    + [("fused_elementwise", v, v) for v in ("2", "-1", "Truth", "nan", "y", "1e300", "0,1")]
    + [("measured_peak_mem_gib", v, v) for v in ("0", "-1", "nan", "inf", "1e300", "x", "True", "5,5")]
    + [("model", v, v) for v in ("no-such-model", "missing.json", "a,b")]
    + [("recompute", v, shown) for v, shown in (
        ("selective:", "lists no module"), ("selective: , ", "lists no module"), ("selective:foo", "'foo'"),
        ("selective:core_attn|mlp", "'core_attn|mlp'"), ("selective:moe,,mlp", "unknown module ''"),
        ("none:core_attn", "none:core_attn"), ("full:mlp", "full:mlp"), ("True", "true"), ("1", "1"))]
)


@pytest.mark.parametrize("column,value,shown", CELLS, ids=lambda x: repr(x)[:30])
def test_bad_validate_cell(tmp_path, capsys, column, value, shown):
    out = tmp_path / "results" / "out.csv"
    out.parent.mkdir()
    err = _fails(capsys, ["validate", str(_write_runs(tmp_path, {**QWEN, column: value})), "--out", str(out)], out)
    assert f"runs.csv: line 2: {column}: " in err
    assert repr(shown)[1:-1][:40] in err


@pytest.mark.parametrize("row,column,message", [
    ({**QWEN, "recompute_num_layers": "5", "recompute": "none"}, "recompute_num_layers",
     "5 needs recompute full (Megatron's --recompute-method block), the row's recompute is none"),
    ({**QWEN, "recompute_num_layers": "5", "recompute": "selective:mlp,core_attn"}, "recompute_num_layers",
     "the row's recompute is selective:core_attn,mlp"),
    ({**QWEN, "recompute_num_layers": "5", "recompute": "selective"}, "recompute_num_layers",
     "the row's recompute is selective"),
    ({**QWEN, "recompute_num_layers": "49", "recompute": "full"}, "recompute_num_layers",
     "49 is more than the model's 48 layers"),
    ({**QWEN, "recompute_num_layers": "256", "recompute": "full"}, "recompute_num_layers",
     "256 is more than the model's 48 layers"),
    ({**QWEN, "mtp_layers": "1"}, "mtp_layers", "1: the model has no multi-token-prediction module"),
    ({**DEEPSEEK, "mtp_layers": "62"}, "mtp_layers", "62 is more than the model's 61 layers"),
    ({**DEEPSEEK, "mtp_layers": "65536"}, "mtp_layers", "65536 is more than the model's 61 layers"),
    ({**QWEN, "ep": "65536"}, "ep", "ep = 65536"),
    ({**QWEN, "etp": "65536"}, "ep", "etp = 65536"),
    ({**QWEN, "dp_shard": "65536"}, "dp_shard", "65536 does not divide dp x cp = 16"),
    ({**QWEN, "cp": "65536"}, "num_gpus", "tp x pp x cp x dp"),
], ids=lambda x: x if isinstance(x, str) else None)
def test_contradicting_or_huge_validate_cell(tmp_path, capsys, row, column, message):
    """Cells well-typed alone but refused with the row: a stated block recompute without full
    recompute, more recomputed or MTP layers than the model has (65,536 MTP depths were costed, a
    124,000 s step), degrees the row's ranks or experts cannot hold."""
    out = tmp_path / "out.csv"
    err = _fails(capsys, ["validate", str(_write_runs(tmp_path, row)), "--out", str(out)], out)
    assert f"line 2: {column}: " in err and message in err


YAML_VALUES = ["x", "-1", "2", ".nan", ".inf", "-.inf", "1e300", "1.0e+300", "true", "'a,b'", '"a\\nb"', "[]",
               "{}", "null", "''", "99999999999999999999999"]


@pytest.mark.parametrize("key,value", [(k, v) for k in ("fused_elementwise", "fsdp_copy_out", "overlap_slowdown")
                                       for v in YAML_VALUES if not (k != "overlap_slowdown" and v == "true")]
                         + [("fused_elementwise", "0"), ("fsdp_copy_out", "1"), ("overlap_slowdown", "false")]
                         + [(k, v) for k in ("moe_comm_sms", "adam_moment_bytes") for v in ("0", "2", "4", ".nan")])
def test_bad_cluster_analytic_key(tmp_path, capsys, key, value):
    """A cluster's `analytic:` keys through `fasop validate` (and so `fasop calibrate`): bool keys take
    only true / false, overlap_slowdown a finite share; moe_comm_sms and adam_moment_bytes are set by a
    row's `moe_dispatcher` / `optimizer_states`, not by a cluster: unknown keys."""
    yaml = (DATA / "ibm_a100_400g_cluster.yaml").read_text()
    yaml = yaml.replace("  fused_elementwise: false", "  #").replace("  fsdp_copy_out: false", "  #")
    (tmp_path / "ibm_a100_400g_cluster.yaml").write_text(yaml.replace("analytic:\n", f"analytic:\n  {key}: {value}\n", 1))
    runs = (DATA / "fsdp_ibm_pytorch_blog.csv").read_text().splitlines()[:2]
    (tmp_path / "runs.csv").write_text("\n".join(runs) + "\n")
    out = tmp_path / "out.csv"
    err = _fails(capsys, ["validate", str(tmp_path / "runs.csv"), "--out", str(out)], out)
    assert f"ibm_a100_400g_cluster.yaml: analytic.{key}: " in err
    assert "unknown key" in err if key in ("moe_comm_sms", "adam_moment_bytes") else "got " in err


def test_calibrate_refuses_a_bad_cell(tmp_path, capsys):
    """`fasop calibrate` reads validate's rows: the same one line, and no overlay written."""
    out = tmp_path / "overlay.yaml"
    path = _write_runs(tmp_path, {**QWEN, "ep_overlap": "nan"})
    err = _fails(capsys, ["calibrate", str(path), "--out", str(out)], out)
    assert "line 2: ep_overlap: expected a share in [0, 1], got 'nan'" in err


FLAG_VALUES = {
    "--cp": ["x", "-1", "0", "nan", "inf", "1e300", "1.5", "True", "", "1,,2", "a,b", "1\n2", "2000", "9" * 5000],
    "--ep": ["x", "-1", "0", "nan", "1e300", "True", "", "1,,2", "2048", "9" * 5000],
    "--etp": ["x", "-1", "0", "inf", "1.5", "", "65", "9" * 5000],
    "--zero": ["x", "-1", "4", "nan", "1.5", "True", "", "0,,1", "1\n2"],
    "--hsdp": ["x", "2", "-1", "nan", "", "on,,off", "yes"],
    "--seq-len": ["x", "-1", "0", "nan", "inf", "1e300", "1.5", "True", "", "1,2", "99999999999999999999999",
                  "9" * 5000],
    "--global-batch-size": ["x", "-1", "0", "nan", "inf", "1e300", "1.5", "True", "", "99999999999999999999999"],
    "--tokens": ["x", "-1", "0", "nan", "inf", "1e300", "1.5", "True", "", "1,000", "9" * 5000],
}


@pytest.mark.parametrize("command", ["search", "pareto"])
@pytest.mark.parametrize("flag,value", [(f, v) for f, vs in FLAG_VALUES.items() for v in vs],
                         ids=lambda x: repr(x)[:20])
def test_bad_search_flag(tmp_path, capsys, command, flag, value):
    out = tmp_path / "results" / "out.csv"
    argv = (["search", "--model", "llama-3-8b", "--cluster", "aws", "--nodes", "p5=1", "--out", str(out)]
            if command == "search" else
            ["pareto", "--model", "llama-3-8b", "--cluster", "aws", "--max-nodes", "p5=1",
             "--out-prefix", str(out.parent / "p")])
    err = _fails(capsys, argv + ["--no-progress", f"{flag}={value}"], out)
    assert f"argument {flag}: " in err
    assert not out.parent.exists()
    assert (repr(value)[1:-1] if len(value) < 30 else "characters") in err or "expected" in err


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    folder = tmp_path_factory.mktemp("searched")
    out = folder / "s.csv"
    assert main(["search", "--model", "llama-3-8b", "--cluster", "aws", "--nodes", "p5=2", "--out", str(out),
                 "--no-progress"]) == 0
    return out


@pytest.mark.parametrize("command", ["explain", "export"])
@pytest.mark.parametrize("flag,value", [(f, v) for f in ("--seq-len", "--global-batch-size")
                                        for v in FLAG_VALUES[f]], ids=lambda x: repr(x)[:20])
def test_bad_plan_flag(tmp_path, capsys, searched, command, flag, value):
    capsys.readouterr()
    out = tmp_path / "launch.sh"
    argv = [command, "--from", str(searched), "--rank", "1", f"{flag}={value}"]
    err = _fails(capsys, argv + (["--target", "megatron", "--out", str(out)] if command == "export" else []), out)
    assert f"argument {flag}: " in err
