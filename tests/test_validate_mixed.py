"""`fasop validate` rows on mixed clusters: rank order -> each stage's and replica's GPU type,
`stage_gpus` overriding it, `layers_per_stage`, a mixed-replica stage at its slowest replica's pace,
and bad cells as one line with exit status 2."""

import csv
import io

import pytest

from fasop.cli import main
from fasop.report.validate import validate

CLUSTER = """\
estimator: analytic
node_types:
  big:
    instance: big
    gpu: V100-SXM2-16GB
    gpus_per_node: 4
    inter_node_gbit_per_s: 10
    usd_per_hour: 0
    price_date: 2025-01-01
    price_source: none
  small:
    instance: small
    gpu: T4
    gpus_per_node: 2
    inter_node_gbit_per_s: 10
    usd_per_hour: 0
    price_date: 2025-01-01
    price_source: none
"""
HEADER = ("name,num_layers,hidden_size,num_attention_heads,seq_len,vocab_size,gpu,cluster,nodes,num_gpus,tp,pp,dp,"
          "global_batch_size,micro_batch_size,precision,fused_attention,layers_per_stage,stage_gpus,measured_seconds_per_iter")
# 24 blocks of GPT-2 medium; 6 GPUs = big (4) then small (2); tp 1, dp 3, pp 2:
# stage 0 = ranks 0-2 (big), stage 1 = ranks 3-5: rank 3 on big, ranks 4, 5 on small
ROW = "r,24,1024,16,1024,50257,,c.yaml,\"big=1,small=1\",6,1,2,3,24,1,fp16,0,{split},{stages},1.0"


def _run(tmp_path, *rows, header=HEADER):
    (tmp_path / "c.yaml").write_text(CLUSTER)
    path = tmp_path / "runs.csv"
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


def _out(report):
    return [p.row for p in report.predictions]


def test_rank_order_fixes_each_stage_and_replica(tmp_path):
    """A stage spanning two node types has its replicas on both (Megatron rank order)."""
    row = _out(validate(_run(tmp_path, ROW.format(split="", stages=""))))[0]
    assert row["stage_gpus"] == "V100-SXM2-16GB|V100-SXM2-16GB/T4/T4"
    assert row["gpu"] == "V100-SXM2-16GB+T4" and row["cluster"] == "c.yaml"


def test_tp_lanes_then_replicas_then_stages(tmp_path):
    """tp 2, dp 1, pp 3 on big=1,small=1: ranks 0-1 stage 0, 2-3 stage 1 (big), 4-5 stage 2 (small)."""
    row = ROW.format(split="", stages="").replace(",6,1,2,3,24,", ",6,2,3,1,24,")
    assert _out(validate(_run(tmp_path, row)))[0]["stage_gpus"] == "V100-SXM2-16GB|V100-SXM2-16GB|T4"


def test_stage_gpus_overrides_the_rank_order(tmp_path):
    rows = _out(validate(_run(tmp_path, ROW.format(split="", stages="T4|T4/T4/V100-SXM2-16GB"),
                              ROW.format(split="", stages="T4|V100-SXM2-16GB"))))
    assert rows[0]["stage_gpus"] == "T4|T4/T4/V100-SXM2-16GB"
    assert rows[1]["stage_gpus"] == "T4|V100-SXM2-16GB"   # one name: every replica of the stage


def test_layers_per_stage_is_the_split_used(tmp_path):
    rows = _out(validate(_run(tmp_path, ROW.format(split="10-14", stages=""), ROW.format(split="", stages=""))))
    assert rows[0]["layers_per_stage"] == "10-14"
    assert sum(map(int, rows[1]["layers_per_stage"].split("-"))) == 24    # fasop's own split


def test_a_mixed_replica_stage_is_never_faster_than_its_slowest_replica_alone(tmp_path):
    """Stage 1 with replicas V100/T4/T4 against the same stage all T4 and all V100, same links and
    split: the replicas on T4 set the pace (equal to all-T4: the V100 replica waits), and a T4 on
    replica 0 never makes the V100 replicas 1, 2 faster than they are in an all-V100 stage."""
    v, t = "V100-SXM2-16GB", "T4"
    rows = _out(validate(_run(tmp_path, *(ROW.format(split="12-12", stages=f"{v}|{s}")
                                          for s in (f"{v}/{t}/{t}", t, v, f"{t}/{v}/{v}")))))
    mixed, slow, fast, mostly_fast = (r["predicted_seconds_per_iter"] for r in rows)
    assert mixed >= slow > fast and mostly_fast >= fast
    assert mixed == pytest.approx(slow, rel=1e-12)   # the T4 replicas 1, 2 are the same in both


@pytest.mark.parametrize("change, message", [
    ({"stages": "T4|T4|T4"}, "stage_gpus: 3 stages ('|'-separated)"),
    ({"stages": "T4|T4/T4"}, "stage_gpus: stage 1: 2 replicas ('/'-separated), dp is 3"),
    ({"stages": "T4|H300"}, "stage_gpus: unknown GPU type 'H300'"),
    ({"split": "10-10"}, "layers_per_stage: '10-10': each stage >= 1 block and 24 blocks in all (got 20)"),
    ({"split": "a-b"}, "layers_per_stage: expected 2 positive integers joined by '-'"),
    ({"nodes": "big=1,small=2"}, "nodes: 'big=1,small=2' holds 8 GPUs, num_gpus is 6"),
    ({"nodes": "big=1,tiny=1"}, "nodes: unknown node type 'tiny'"),
    ({"cluster": "nowhere.yaml"}, "cluster: nowhere.yaml: no such file"),
    ({"cluster": ""}, "nodes: needs a `cluster`"),
    ({"cluster": "", "nodes": ""}, "gpu: empty: a row names a `gpu` or a `cluster`"),
    ({"gpu": "A100-SXM4-80GB"}, "gpu: 'A100-SXM4-80GB' is not a GPU of the row's nodes 'big=1,small=1' (V100-SXM2-16GB, T4)"),
    ({"gpu": "T4+A10G"}, "gpu: 'A10G' is not a GPU of the row's nodes"),
    ({"stages": "T4|A10G"}, "stage_gpus: A10G is not a GPU of the row's nodes (T4, V100-SXM2-16GB)"),
    ({"gpn": "4"}, "gpus_per_node: 4: the row's nodes hold their own (big 4, small 2); leave it empty"),
    ({"precision": "fp64"}, "precision: expected one of bf16, fp16, fp8, fp32, tf32, mxfp8, nvfp4, got 'fp64'"),
])
def test_a_bad_cell_is_one_line_exit_2(tmp_path, capsys, change, message):
    row, header = ROW.format(split=change.get("split", ""), stages=change.get("stages", "")), HEADER
    row = row.replace("c.yaml", change.get("cluster", "c.yaml")).replace("fp16", change.get("precision", "fp16"))
    row = row.replace("1024,50257,,", f"1024,50257,{change.get('gpu', '')},")
    if "gpn" in change:   # a gpus_per_node column after the measured seconds
        row, header = row + f",{change['gpn']}", HEADER + ",gpus_per_node"
    if "nodes" in change:
        row = row.replace('"big=1,small=1"', f'"{change["nodes"]}"')
    path = _run(tmp_path, row, header=header)
    assert main(["validate", str(path), "--out", str(tmp_path / "o.csv")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    assert f"runs.csv: line 2: {message}" in err, err


@pytest.mark.parametrize("gpu", ["", "T4", "v100-sxm2-16gb+T4"])
def test_a_gpu_cell_beside_nodes_names_theirs(tmp_path, gpu):
    """The nodes decide the hardware; a `gpu` cell naming one or all of their GPUs is accepted, the same row
    (and a `gpus_per_node` equal to every node's)."""
    row = ROW.format(split="", stages="").replace("1024,50257,,", f"1024,50257,{gpu},")
    bare = _out(validate(_run(tmp_path, ROW.format(split="", stages=""))))[0]
    assert _out(validate(_run(tmp_path, row)))[0]["predicted_seconds_per_iter"] == bare["predicted_seconds_per_iter"]


def test_the_output_names_each_stage_gpu(tmp_path):
    out = tmp_path / "o.csv"
    assert main(["validate", str(_run(tmp_path, ROW.format(split="", stages=""))), "--out", str(out)]) == 0
    row = next(csv.DictReader(io.StringIO(out.read_text())))
    assert row["stage_gpus"] == "V100-SXM2-16GB|V100-SXM2-16GB/T4/T4" and row["layers_per_stage"]


# Sailor's measured runs (tests/data/VALIDATION_SOURCES.md, "Mixed-GPU runs"), uncalibrated, at the
# figures measured with Sailor's runtime stated in its cluster files (micro_batch_sync, p2p_blocking,
# Grace host; estimators/analytic/host.py) (MAPE %, max |error| %); the bounds keep them from getting
# worse. Before that: mixed 28.3 / 42.2, homogeneous 31.8 / 62.9, v0 9.2 / 13.7 (predicted slow: the
# added costs move it further; its Turing fp32 matmuls sit at the unmeasured 0.5 share, VALIDATION_SOURCES.md).
# Since 2026-11-28 the rows state what Sailor's OPT / GPT-Neo code runs -- no attention-probability dropout
# (`dropout` 0) -- and fp32 unfused attention pays Megatron's torch softmax path (a masked_fill pass): 13.3 / 36.3
# -> 14.3 / 36.8 (homogeneous), 18.7 / 39.7 -> 18.7 / 39.9 (mixed), 13.0 / 16.5 -> 16.6 / 20.2 (v0, its code not in
# the repository at its commit: dropout left to the default; slow for the Turing matmul share above).
SAILOR = {"sailor_mixed.csv": (18.7, 39.9), "sailor_mixed_v0.csv": (16.6, 20.2), "sailor_homogeneous.csv": (14.3, 36.8)}


@pytest.mark.parametrize("name", sorted(SAILOR))
def test_sailor_measured_runs_within_their_bounds(name):
    from pathlib import Path
    report = validate(Path(__file__).parent / "data" / name)
    mape, worst = SAILOR[name]
    assert report.mape <= mape + 0.5 and report.max_error <= worst + 0.5, (report.mape, report.max_error)


def test_sailor_peak_memory_with_the_runs_own_attention():
    """Sailor's Clariden runs' memory (26 rows, GH200; `max_mem`, NVML's used memory at the last logged
    pipeline instruction: process_results.py get_mem): 8.4 % MAPE, max 27.5 %, once the rows state that
    Sailor's OPT / GPT-Neo keep no attention-probability dropout (was 50.4 %, max 111.7 %: the s x s
    dropout mask and output of every in-flight micro-batch)."""
    from pathlib import Path
    report = validate(Path(__file__).parent / "data" / "sailor_homogeneous.csv")
    errors = [abs(e) for e in report.memory_errors]
    assert len(errors) == 26 and 100 * sum(errors) / len(errors) <= 9.0 and 100 * max(errors) <= 28.0


def test_a_file_of_cluster_rows_needs_no_gpu_column(tmp_path):
    """Rows that all name a cluster may leave the `gpu` column out altogether (its nodes name the
    GPUs); the same rows with an empty `gpu` column predict the same; without `cluster` either,
    the header is refused."""
    path = _run(tmp_path, ROW.format(split="", stages=""))
    with_column = _out(validate(path))[0]
    without = _out(validate(_drop_column(path, "gpu")))[0]
    assert without["predicted_seconds_per_iter"] == with_column["predicted_seconds_per_iter"]
    assert without["stage_gpus"] == "V100-SXM2-16GB|V100-SXM2-16GB/T4/T4"
    with pytest.raises(Exception, match="missing required column 'gpu'"):
        validate(_drop_column(path, "cluster"))


def _drop_column(path, column: str):
    """`path` rewritten without `column` (header and cells)."""
    rows = list(csv.DictReader(io.StringIO(path.read_text())))
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=[c for c in rows[0] if c != column])
    writer.writeheader()
    writer.writerows({k: v for k, v in r.items() if k != column} for r in rows)
    path.write_text(out.getvalue())
    return path


def test_a_row_states_whether_its_code_runs_dropout(tmp_path):
    """`dropout` 0: the run's code keeps no dropout (Sailor's OPT: no attention-probability dropout, its
    residual dropouts commented out), so no s x s mask and output stored and moved: less memory and time
    than the same row with 1 (Megatron's default); anything but 0 / 1 is one line naming the column."""
    import csv
    from pathlib import Path
    from fasop.core.errors import FasopError
    src = Path(__file__).parent / "data" / "sailor_homogeneous.csv"
    rows = list(csv.DictReader(src.open()))
    (tmp_path / "sailor_clariden_cluster.yaml").write_text((src.parent / "sailor_clariden_cluster.yaml").read_text())

    def run(value):
        out = tmp_path / f"d{value}.csv"
        with out.open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerow({**rows[-1], "dropout": value})
        return validate(out).predictions[0].row
    off, on = run("0"), run("1")
    assert off["predicted_peak_mem_gib"] < on["predicted_peak_mem_gib"]
    assert off["predicted_seconds_per_iter"] < on["predicted_seconds_per_iter"]
    with pytest.raises(FasopError) as e:
        run("2")
    assert "dropout" in str(e.value) and "\n" not in str(e.value)


def test_a_gpus_per_node_cell_equal_to_the_nodes_is_accepted(tmp_path):
    row = 'r,24,1024,16,1024,50257,,c.yaml,"big=2",8,1,2,4,24,1,fp16,0,,,1.0'
    bare = _out(validate(_run(tmp_path, row)))[0]["predicted_seconds_per_iter"]
    assert _out(validate(_run(tmp_path, row + ",4", header=HEADER + ",gpus_per_node")))[0][
        "predicted_seconds_per_iter"] == bare
