"""`fasop search --bf16-layers N[,N]`: the model's last N layers keep 16-bit matmuls in an fp8 / mxfp8 / nvfp4
run (Megatron-Core first_last_layers_bf16, num_layers_at_end_in_bf16), at most a pipeline stage's layers;
the CSV's bf16_layers column, explain's re-estimate, the Megatron-LM export's flags."""

from __future__ import annotations

import csv
import json

import pytest

from fasop.cli.command import main

SEARCH = ["search", "--model", "llama-3-8b", "--cluster", "aws", "--nodes", "p6-b200=2", "--no-progress", "--show", "0",
          "--iterations", "1"]


def _rows(path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_sixteen_bit_layers_are_a_recipe_dimension(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runs = {}
    for name, flags in (("low", ["--precision", "nvfp4"]), ("mixed", ["--precision", "nvfp4", "--bf16-layers", "4"]),
                        ("high", ["--precision", "bf16", "--bf16-layers", "4"]),
                        ("either", ["--precision", "nvfp4", "--bf16-layers", "0,4"])):
        assert main(SEARCH + flags + ["--every-plan", "--out", f"{name}.csv"]) == 0
        runs[name] = {(r["tp"], r["dp"], r["pp"], r["mbs"]): r for r in _rows(f"{name}.csv")}
    assert {r["bf16_layers"] for r in runs["high"].values()} == {"0"}   # a 16-bit run has none to add
    # 32 layers: pp 16 holds 2 a stage, the most Megatron-Core allows -- the row says what was estimated
    assert {r["bf16_layers"] for k, r in runs["mixed"].items() if k[2] == "16"} == {"2"}
    assert {r["bf16_layers"] for k, r in runs["mixed"].items() if k[2] != "16"} == {"4"}
    step = lambda name, k: float(runs[name][k]["step_time_s"])  # noqa: E731
    fit = [k for k in runs["low"] if all(runs[n][k]["is_oom"] == "False" and runs[n][k]["recompute"] ==
                                         runs["low"][k]["recompute"] for n in runs)]
    assert fit and all(step("low", k) < step("mixed", k) < step("high", k) for k in fit)   # NVFP4 the faster on B200
    assert all(runs["either"][k]["bf16_layers"] == "0" and step("either", k) == step("low", k) for k in fit)


def test_a_row_re_estimates_and_exports_its_sixteen_bit_layers(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(SEARCH + ["--precision", "nvfp4", "--bf16-layers", "4", "--top", "1", "--out", "b.csv"]) == 0
    (row,) = _rows("b.csv")
    assert row["bf16_layers"] == "4"
    capsys.readouterr()
    assert main(["explain", "--from", "b.csv", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["step_time_s"] == pytest.approx(float(row["step_time_s"]), rel=1e-5)
    assert main(["export", "--from", "b.csv", "--target", "megatron"]) == 0
    text = capsys.readouterr().out
    assert "--first-last-layers-bf16" in text and "--num-layers-at-end-in-bf16 4" in text
    assert "--num-layers-at-start-in-bf16 0" in text and "--fp4-recipe nvfp4" in text


def test_fp8_with_sixteen_bit_layers_exports_current_scaling(tmp_path, monkeypatch, capsys):
    """Megatron-Core refuses BF16 first / last layers under delayed scaling, the export's FP8 default."""
    monkeypatch.chdir(tmp_path)
    assert main(SEARCH + ["--precision", "fp8", "--bf16-layers", "2", "--top", "1", "--out", "c.csv"]) == 0
    capsys.readouterr()
    assert main(["export", "--from", "c.csv", "--target", "megatron"]) == 0
    text = capsys.readouterr().out
    assert "--fp8-recipe tensorwise" in text and "--fp8-amax-history-len" not in text


@pytest.mark.parametrize("value", ["-1", "x", "4,"])
def test_a_bad_count_is_one_clear_error(tmp_path, monkeypatch, capsys, value):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as err:
        main(SEARCH + ["--precision", "nvfp4", "--bf16-layers", value, "--out", "d.csv"])
    assert err.value.code == 2
    assert "--bf16-layers" in capsys.readouterr().err
    assert not (tmp_path / "d.csv").exists()


def test_a_results_row_with_a_bad_count_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(SEARCH + ["--precision", "nvfp4", "--bf16-layers", "4", "--top", "1", "--out", "e.csv"]) == 0
    text = (tmp_path / "e.csv").read_text().replace(",nvfp4,", ",nvfp4,", 1)
    header, line = text.splitlines()[:2]
    cells = line.split(",")
    cells[header.split(",").index("bf16_layers")] = "33"
    (tmp_path / "e.csv").write_text(header + "\n" + ",".join(cells) + "\n")
    capsys.readouterr()
    assert main(["explain", "--from", "e.csv"]) == 2
    assert "bf16_layers: expected a count of layers at most the model's, got '33'" in capsys.readouterr().err
