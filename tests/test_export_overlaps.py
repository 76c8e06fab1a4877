"""The communication a plan's estimate hides is the communication its Megatron-LM export overlaps: the analytic
estimator reduces gradients during the backward and gathers ZeRO's weights during the next forward
(analytic.yaml `overlap_grad_reduce`, on by default), and a cluster's `tp_overlap` hides a share of the TP
collectives -- Megatron-Core does none of it unless told (`--overlap-grad-reduce`, `--overlap-param-gather`,
`--tp-comm-overlap`: DistributedDataParallelConfig / ModelParallelConfig default off). Before, no export wrote them."""

from __future__ import annotations

import csv
from pathlib import Path

from fasop.cli.command import main

DATA = Path(__file__).parent / "data"
TP_OVERLAP = DATA / "p5_tp_overlap_cluster.yaml"


def _plan(tmp_path, capsys, cluster: str, *flags: str, out: str = "r.csv") -> tuple[dict, str, str]:
    assert main(["search", "--model", "llama-3-8b", "--cluster", cluster, "--nodes", "p5=2", "--top", "1",
                 "--no-progress", "--out", str(tmp_path / out), *flags]) == 0
    capsys.readouterr()
    with open(tmp_path / out, newline="") as f:
        (row,) = csv.DictReader(f)
    assert main(["export", "--from", str(tmp_path / out), "--target", "megatron"]) == 0
    captured = capsys.readouterr()
    return row, captured.out.split("MODEL_PARALLEL_ARGS=(")[1], captured.err


def test_the_export_overlaps_the_reduction_the_estimate_hid(tmp_path, capsys):
    row, args, _ = _plan(tmp_path, capsys, "aws", "--zero", "1")
    assert int(row["dp"]) > 1
    assert "--overlap-grad-reduce" in args and "--overlap-param-gather" in args and "--use-distributed-optimizer" in args
    # ZeRO 0: no weight all-gather to overlap (arguments.py allows --overlap-param-gather only with a sharded optimizer)
    _, args, _ = _plan(tmp_path, capsys, "aws", "--zero", "0", out="z.csv")
    assert "--overlap-grad-reduce" in args and "--overlap-param-gather" not in args


def test_a_cluster_that_reduces_after_the_backward_exports_no_overlap(tmp_path, capsys):
    spec = (DATA.parent.parent / "fasop" / "data" / "cluster_specs" / "aws.yaml").read_text()
    after = tmp_path / "after.yaml"
    after.write_text(spec.replace("estimator: analytic\n", "estimator: analytic\nanalytic:\n  overlap_grad_reduce: false\n", 1))
    on, args_on, _ = _plan(tmp_path, capsys, "aws", "--zero", "1")
    off, args_off, _ = _plan(tmp_path, capsys, str(after), "--zero", "1", out="off.csv")
    assert "overlap" not in args_off and "--overlap-grad-reduce" in args_on
    assert float(off["step_time_s"]) > float(on["step_time_s"])   # the exposed reduction the flags hide


def _tp_row(tmp_path, capsys, sp: str, target: str = "megatron") -> tuple[str, str]:
    out = tmp_path / f"sp_{sp}.csv"
    assert main(["search", "--model", "llama-3-8b", "--cluster", str(TP_OVERLAP), "--nodes", "p5=2", "--every-plan",
                 "--no-progress", "--sequence-parallel", sp, "--out", str(out)]) == 0
    capsys.readouterr()
    with open(out, newline="") as f:
        rows = list(csv.DictReader(f))
    k = next(i for i, r in enumerate(rows) if int(r["tp"]) == 4 and r["is_oom"] == "False")
    assert main(["export", "--from", str(out), "--target", target, "--row", str(k + 1)]) == 0
    captured = capsys.readouterr()
    return captured.out.split("MODEL_PARALLEL_ARGS=(")[-1], captured.err


def test_a_clusters_tp_overlap_needs_sequence_parallelism(tmp_path, capsys):
    args, _ = _tp_row(tmp_path, capsys, "on")
    assert "--tp-comm-overlap" in args and "--sequence-parallel" in args
    args, err = _tp_row(tmp_path, capsys, "off")
    assert "--tp-comm-overlap" not in args and "tp_overlap 0.5" in err and "without sequence parallelism" in err
    # a cluster without it writes none
    _, args, _ = _plan(tmp_path, capsys, "aws")
    assert "--tp-comm-overlap" not in args
    # torchtitan's async TP is another scheme: said, not written
    text, err = _tp_row(tmp_path, capsys, "on", "torchtitan")
    assert "tp_overlap 0.5" in err and "async" in err and "enable_async_tensor_parallel" not in text.split("def fasop_plan")[1]


def test_a_cluster_without_fused_kernels_launches_without_them(tmp_path, capsys):
    # analytic fused_attention / gradient_accumulation_fusion false: the estimate costs the unfused attention and the
    # separate accumulation, so the launch turns Megatron-Core's defaults off; the stock catalog turns nothing off
    row, args, _ = _plan(tmp_path, capsys, str(DATA / "p5_unfused_cluster.yaml"))
    assert "--attention-backend unfused" in args and "--no-gradient-accumulation-fusion" in args
    plain, args, _ = _plan(tmp_path, capsys, "aws", out="plain.csv")
    assert "--attention-backend" not in args and "gradient-accumulation" not in args
    assert float(row["step_time_s"]) > float(plain["step_time_s"])


def _row(tmp_path, capsys, name: str, model: str, cluster: str, nodes: str, pick, *flags: str) -> tuple[dict, str, str]:
    """Search --every-plan, export the first row `pick` accepts: (row, Megatron arguments, stderr)."""
    out = tmp_path / f"{name}.csv"
    assert main(["search", "--model", model, "--cluster", cluster, "--nodes", nodes, "--every-plan", "--no-progress",
                 "--out", str(out), *flags]) == 0
    capsys.readouterr()
    with open(out, newline="") as f:
        rows = list(csv.DictReader(f))
    k = next(i for i, r in enumerate(rows) if pick(r))
    assert main(["export", "--from", str(out), "--target", "megatron", "--row", str(k + 1)]) == 0
    captured = capsys.readouterr()
    return rows[k], captured.out.split("MODEL_PARALLEL_ARGS=(")[1], captured.err


def test_the_overlap_flags_follow_what_the_plan_reduces(tmp_path, capsys):
    # nothing reduced (dp x cp = 1, a dense model): no flag
    _, args, _ = _row(tmp_path, capsys, "one", "llama-3-8b", "aws", "p5=1", lambda r: r["dp"] == "1")
    assert "overlap" not in args
    # an MoE model at dp 1, tp 4, ep 1: its experts' gradients still reduce over tp x dp / (ep x etp) = 4 ranks
    _, args, _ = _row(tmp_path, capsys, "edp", "mixtral-8x7b", "aws", "p5=4",
                      lambda r: (r["dp"], r["tp"], r["ep"]) == ("1", "4", "1"), "--ep", "1")
    assert "--overlap-grad-reduce" in args
    # ZeRO 2 and 3 (Megatron-FSDP): both, the weights' gather too
    for zero in ("2", "3"):
        _, args, _ = _row(tmp_path, capsys, f"z{zero}", "llama-3-8b", "aws", "p5=2", lambda r: int(r["dp"]) > 1,
                          "--zero", zero)
        assert "--use-megatron-fsdp" in args and "--overlap-grad-reduce" in args and "--overlap-param-gather" in args


def test_tp_overlap_is_neither_written_nor_counted_where_megatron_cannot_run_it(tmp_path, capsys):
    # tp 1: nothing to overlap, no warning; NVFP4 (B200): TE's userbuffers take no NVFP4 quantizer
    _, args, err = _row(tmp_path, capsys, "tp1", "llama-3-8b", str(TP_OVERLAP), "p5=2", lambda r: r["tp"] == "1")
    assert "--tp-comm-overlap" not in args and "tp_overlap" not in err
    b200 = tmp_path / "b200.yaml"
    b200.write_text(TP_OVERLAP.read_text().replace("gpu: H100-SXM", "gpu: B200"))
    _, args, err = _row(tmp_path, capsys, "fp4", "llama-3-8b", str(b200), "p5=2", lambda r: r["tp"] == "4",
                        "--precision", "nvfp4", "--sequence-parallel", "on")
    assert "--tp-comm-overlap" not in args and "no NVFP4 quantizer" in err
    # and the estimate counted no overlap there: the same plans as on a cluster without tp_overlap
    plain = tmp_path / "plain.yaml"
    plain.write_text(b200.read_text().replace("analytic:\n  tp_overlap: 0.5\n", ""))
    for extra in ((), ("--bf16-layers", "8")):   # the run's 16-bit layers too: still an NVFP4 run
        with_overlap, without = (_row(tmp_path, capsys, f"c{i}", "llama-3-8b", str(c), "p5=2", lambda r: r["tp"] == "4",
                                      "--precision", "nvfp4", "--sequence-parallel", "on", *extra)[0]["step_time_s"]
                                 for i, c in enumerate((b200, plain)))
        assert with_overlap == without


def test_cp_needs_fused_attention(tmp_path, capsys):
    # Transformer Engine's context parallelism has no unfused path: a cluster without fused attention plans no CP
    # (an explicit --cp 2 is refused in one line), and a CP row exported against it is refused
    unfused = str(DATA / "p5_unfused_cluster.yaml")
    assert main(["search", "--model", "llama-3-8b", "--cluster", unfused, "--nodes", "p5=2", "--cp", "2",
                 "--no-progress", "--out", str(tmp_path / "cp.csv")]) == 2
    assert "context parallelism needs a fused attention kernel" in capsys.readouterr().err
    assert main(["search", "--model", "llama-3-8b", "--cluster", unfused, "--nodes", "p5=2", "--cp", "1,2",
                 "--every-plan", "--no-progress", "--out", str(tmp_path / "cp.csv")]) == 0
    with open(tmp_path / "cp.csv", newline="") as f:
        assert {r["cp"] for r in csv.DictReader(f)} == {"1"}
    assert main(["search", "--model", "llama-3-8b", "--cluster", "aws", "--nodes", "p5=2", "--cp", "2", "--top", "1",
                 "--no-progress", "--out", str(tmp_path / "fused.csv")]) == 0
    capsys.readouterr()
    for command in (["export", "--target", "megatron"], ["explain"]):
        assert main([*command, "--from", str(tmp_path / "fused.csv"), "--cluster", unfused]) == 2
        assert "context parallelism needs a fused attention kernel" in capsys.readouterr().err
    # GPUs below sm80 (V100, p3): the 32K-token search plans no CP, and says why; --cp 2 alone is refused
    v100 = ["search", "--model", "llama-3-8b", "--cluster", "aws", "--nodes", "p3=4", "--seq-len", "32768",
            "--global-batch-size", "8", "--no-progress", "--every-plan"]
    assert main([*v100, "--out", str(tmp_path / "v.csv")]) == 0
    assert "context parallelism not searched" in capsys.readouterr().out
    with open(tmp_path / "v.csv", newline="") as f:
        assert {r["cp"] for r in csv.DictReader(f)} == {"1"}
    assert main([*v100, "--cp", "2", "--out", str(tmp_path / "v2.csv")]) == 2
    assert "--cp 2: context parallelism needs a fused attention kernel" in capsys.readouterr().err


def test_what_a_cluster_turns_off_megatron_fsdp_and_torchtitan_run_anyway(tmp_path, capsys):
    # Megatron-FSDP overlaps the reduction whatever the cluster says (megatron_fsdp.py): a warning
    spec = (DATA.parent.parent / "fasop" / "data" / "cluster_specs" / "aws.yaml").read_text()
    after = tmp_path / "after.yaml"
    after.write_text(spec.replace("estimator: analytic\n", "estimator: analytic\nanalytic:\n  overlap_grad_reduce: false\n", 1))
    _, args, err = _row(tmp_path, capsys, "fsdp", "llama-3-8b", str(after), "p5=2", lambda r: int(r["dp"]) > 1,
                        "--zero", "3")
    assert "--use-megatron-fsdp" in args and "overlap" not in args and "Megatron-FSDP overlaps the reduction" in err
    # torchtitan runs SDPA's flash kernel and has no accumulation switch: both said
    _plan(tmp_path, capsys, str(DATA / "p5_unfused_cluster.yaml"), out="tt.csv")
    assert main(["export", "--from", str(tmp_path / "tt.csv"), "--target", "torchtitan"]) == 0
    err = capsys.readouterr().err
    assert "fused_attention is off" in err and "gradient_accumulation_fusion is off" in err


def test_a_pareto_composition_without_fused_attention_has_no_cp_plan(tmp_path, capsys, monkeypatch):
    # V100 compositions with --cp 2 only: each a no_plan with the reason (the sweep goes on; its bound is inf)
    monkeypatch.chdir(tmp_path)
    assert main(["pareto", "--model", "llama-3-8b", "--cluster", "aws", "--max-nodes", "p3=2", "--seq-len", "32768",
                 "--global-batch-size", "8", "--cp", "2", "--out-prefix", "pa", "--no-progress"]) == 0
    assert "2 with no valid plan" in capsys.readouterr().out
    with open(tmp_path / "pa_pareto.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["status"] for r in rows] == ["no_plan", "no_plan"]
    assert all("context parallelism needs a fused attention kernel" in r[list(r)[-1]] for r in rows)
