"""Results that describe themselves (issue 30, item 3): an analytic results CSV names its model
and cluster specs, price basis and fasop version in columns, so explain / plot / export --from
work on a CSV that was renamed, moved or saved by a spreadsheet, and refuse with one line when the
spec it names cannot be found; default output names carry what distinguishes runs.
"""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import pytest

from fasop.cli.command import main

SEARCH = ["search", "--model", "qwen2.5-7b", "--cluster", "aws", "--nodes", "p4d=1", "--top", "2", "--no-progress"]


@pytest.fixture
def qwen_csv(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(SEARCH + ["--out", "q.csv"]) == 0
    capsys.readouterr()
    return tmp_path / "q.csv"


def _first_line(capsys, *argv) -> str:
    assert main(list(argv)) == 0, capsys.readouterr().err
    return capsys.readouterr().out.splitlines()[0]


def test_the_columns_name_the_specs(qwen_csv):
    with open(qwen_csv, newline="") as fh:
        row = next(csv.DictReader(fh))
    assert (row["model"], row["model_spec"], row["cluster_spec"], row["price_basis"]) == \
        ("qwen2.5-7b", "qwen2.5-7b", "aws", "on-demand")
    assert row["fasop_version"]


def test_a_renamed_and_moved_csv_explains_its_own_model(qwen_csv, tmp_path, capsys):
    moved = tmp_path / "elsewhere" / "llama-3-8b_aws_p4dx1.csv"  # a name that would guess Llama-3-8B
    moved.parent.mkdir()
    shutil.move(qwen_csv, moved)
    assert _first_line(capsys, "explain", "--from", str(moved)).startswith("qwen2.5-7b on aws")
    assert main(["export", "--from", str(moved), "--target", "megatron"]) == 0
    assert "# qwen2.5-7b:" in capsys.readouterr().out


def test_a_spreadsheet_saved_csv_explains(qwen_csv, tmp_path, capsys):
    with open(qwen_csv, newline="") as fh:
        rows = list(csv.reader(fh))
    saved = tmp_path / "Book1.csv"
    with open(saved, "w", newline="") as fh:
        csv.writer(fh, quoting=csv.QUOTE_ALL, lineterminator="\r\n").writerows(rows)
    assert _first_line(capsys, "explain", "--from", str(saved)).startswith("qwen2.5-7b on aws")


def test_a_spec_that_cannot_be_found_is_one_line(qwen_csv, tmp_path, capsys):
    text = qwen_csv.read_text().replace(",qwen2.5-7b,aws,", ",/nowhere/mistral.yaml,aws,")
    (tmp_path / "r.csv").write_text(text)
    assert main(["explain", "--from", "r.csv"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "/nowhere/mistral.yaml" in err and "model_spec" in err


def test_a_missing_csv_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["explain", "--from", "missing.csv"]) == 2
    assert capsys.readouterr().err == "fasop: error: --from: missing.csv: no such file\n"


def test_default_names_carry_spot_tokens_and_recipes(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(SEARCH + ["--spot", "--tokens", "1000000000", "--recompute", "full"]) == 0
    assert main(SEARCH) == 0
    names = sorted(p.name for p in (tmp_path / "results").iterdir())
    assert names == ["qwen2.5-7b_aws_p4dx1.csv", "qwen2.5-7b_aws_p4dx1_spot_tokens1e+09_recompute-full.csv"]


def test_mfu_and_tokens_per_gpu_by_hand(tmp_path, monkeypatch, capsys):
    """mfu = model FLOPs a sample x samples/s / (8 H100 x the dense peak of the plan's precision):
    1979 TFLOP/s for fp8, 989 for bf16 (the GPU catalog); FASOP-2024 CSVs get no such columns."""
    from fasop.report.explain import model_flop_per_sample
    from fasop.specs.load import load_model

    monkeypatch.chdir(tmp_path)
    assert main(["search", "--model", "llama-3-8b", "--cluster", "aws", "--nodes", "p5=1", "--top", "2", "--out",
                 "r.csv", "--no-progress", "--precision", "bf16,fp8"]) == 0
    with open("r.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    header = list(rows[0])
    assert header[header.index("tokens_per_s") + 1:header.index("tokens_per_s") + 3] == ["mfu", "tokens_per_s_per_gpu"]
    flop = model_flop_per_sample(load_model("llama-3-8b"))
    for row in rows:
        peak = {"fp8": 1979e12, "bf16": 989e12}[row["precision"]] * 8
        assert float(row["mfu"]) == pytest.approx(flop * float(row["samples_per_s"]) / peak, rel=1e-3)
        assert float(row["tokens_per_s_per_gpu"]) == pytest.approx(float(row["tokens_per_s"]) / 8, rel=1e-5)  # 6 digits
        assert 0 < float(row["mfu"]) < 1
    assert main(["search", "--model", "bert", "--cluster", "fasop-paper", "--nodes", "a10=2", "--out", "b.csv",
                 "--no-progress"]) == 0
    with open("b.csv", newline="") as fh:
        assert "mfu" not in next(csv.reader(fh)) and "model_spec" not in fh.read()


def test_default_names_carry_the_parallelism_flags_and_the_placements(tmp_path, monkeypatch, capsys):
    # --hsdp, --cp, --ep, --etp are recipe flags as well (two searches that differ in them wrote one file);
    # a --placements other than the command's default changes the plans searched too
    monkeypatch.chdir(tmp_path)
    base = ["search", "--model", "qwen3-30b-a3b", "--cluster", "aws", "--nodes", "p5=1", "--top", "1", "--no-progress",
            "--show", "0"]
    for extra in (["--zero", "3", "--hsdp", "off"], ["--zero", "3", "--hsdp", "on,off"], ["--ep", "8", "--etp", "1"],
                  ["--cp", "1,2"], ["--placements", "grouped"], ["--placements", "all"]):
        assert main(base + extra) == 0
    assert main(["pareto", "--model", "qwen3-30b-a3b", "--cluster", "aws", "--max-nodes", "p5=1", "--ep", "8",
                 "--no-progress", "--placements", "cyclic"]) == 0
    names = sorted(p.name for p in (tmp_path / "results").iterdir() if p.suffix == ".csv")
    assert names == ["qwen3-30b-a3b_aws_ep-8_pareto.csv", "qwen3-30b-a3b_aws_p5x1.csv",
                     "qwen3-30b-a3b_aws_p5x1_cp-1-2.csv", "qwen3-30b-a3b_aws_p5x1_ep-8_etp-1.csv",
                     "qwen3-30b-a3b_aws_p5x1_placements-grouped.csv", "qwen3-30b-a3b_aws_p5x1_zero-3_hsdp-off.csv",
                     "qwen3-30b-a3b_aws_p5x1_zero-3_hsdp-on-off.csv"]


def test_a_search_where_nothing_fits_writes_the_analytic_header_all_the_same(tmp_path, monkeypatch, capsys):
    # a spreadsheet or script reading the CSV finds the same columns whether or not a plan fits
    monkeypatch.chdir(tmp_path)
    base = ["search", "--model", "llama-3-8b", "--cluster", "aws", "--nodes", "p5=1", "--top", "1", "--no-progress"]
    assert main(base + ["--out", "fits.csv"]) == 0
    assert main(base + ["--seq-len", "16777216", "--global-batch-size", "1", "--out", "none.csv"]) == 0
    assert "no plan fits in GPU memory" in capsys.readouterr().out
    fits, none = (Path(name).read_text().splitlines() for name in ("fits.csv", "none.csv"))
    assert none == fits[:1] and len(fits) == 2 and "stage_memory_limit_gib" in none[0] and "model_spec" in none[0]
