"""`fasop calibrate` fits what its overlay does (review s25), and its inputs are safe from its outputs.

- The fit sets only the parameters the overlay will hold: a link kind it leaves out keeps each GPU's own share
  (H100's measured NVLink 0.82), and the "before" column shows that share, not analytic.yaml's 0.65 -- so the
  printed "after" is what `fasop validate --calibration` of the written overlay prints.
- One run: no leave-one-out (nothing is left to fit), said so; counts in the singular.
- `--out` that is the file the command reads (calibrate, validate, export) is refused before any work.
- An overlay giving one GPU type twice (an alias and its catalog name) is refused; `--fit` takes the aliases an
  overlay takes.
"""

from __future__ import annotations

import pytest

from fasop.cli.command import main
from fasop.report.validate import validate
from fasop.specs.calibration import apply_calibration, load_calibration
from fasop.specs.catalog import default_params
from fasop.core.errors import FasopError

TP8 = ("name,model,gpu,num_gpus,tp,pp,dp,zero,seq_len,global_batch_size,micro_batch_size,precision,recompute,"
       "sequence_parallel,tp_overlap,measured_seconds_per_iter\n"
       "tp8 h100,llama-3-8b,H100-SXM,8,8,1,1,1,8192,64,1,bf16,none,1,0,13.19\n")


def test_one_run_fitted_is_predicted_by_its_overlay_as_printed(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tp8.csv").write_text(TP8)
    assert main(["calibrate", "tp8.csv", "--out", "tp8.yaml"]) == 0
    out = capsys.readouterr().out
    assert [line.split()[1] for line in out.splitlines() if line.startswith("link_efficiency.nvlink")] == ["0.82"]
    assert "over 1 run (no leave-one-out: nothing to fit without it)" in out and "1 parameter fitted" in (tmp_path / "tp8.yaml").read_text()
    after = float(next(line for line in out.splitlines() if line.startswith("tp8 h100")).split()[4])
    overlay = load_calibration(tmp_path / "tp8.yaml")
    assert [name for name, _ in overlay.values] == ["gpus.H100-SXM.matmul_efficiency"]
    report = validate(tmp_path / "tp8.csv", apply_calibration(overlay, default_params()))
    assert report.predictions[0].row["predicted_seconds_per_iter"] == pytest.approx(after, rel=1e-3)
    assert after == pytest.approx(13.19, rel=1e-3)


@pytest.mark.parametrize("argv", [
    ["calibrate", "runs.csv", "--out", "runs.csv"],
    ["validate", "runs.csv", "--out", "./runs.csv"],
    ["validate", "link.csv", "--out", "runs.csv"],
])
def test_an_output_that_is_the_input_is_refused(tmp_path, monkeypatch, capsys, argv):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs.csv").write_text(TP8)
    (tmp_path / "link.csv").symlink_to("runs.csv")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "is the runs CSV it reads" in err and err.count("\n") == 1
    assert (tmp_path / "runs.csv").read_text() == TP8


def test_an_export_does_not_write_over_its_results_csv(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["search", "--model", "llama-3-8b", "--cluster", "aws", "--nodes", "p5=1", "--top", "1",
                 "--no-progress", "--out", "s.csv"]) == 0
    before = (tmp_path / "s.csv").read_bytes()
    capsys.readouterr()
    assert main(["export", "--from", "s.csv", "--model", "llama-3-8b", "--cluster", "aws", "--target", "megatron",
                 "--out", "s.csv"]) == 2
    assert "is the results CSV it reads" in capsys.readouterr().err
    assert (tmp_path / "s.csv").read_bytes() == before


def test_an_overlay_naming_a_gpu_twice_is_refused_and_fit_takes_aliases(tmp_path, capsys):
    twice = tmp_path / "twice.yaml"
    twice.write_text("gpus:\n  H100:\n    matmul_efficiency: 0.6\n  H100-SXM:\n    matmul_efficiency: 0.9\n")
    with pytest.raises(FasopError, match="the same GPU type as 'H100' above"):
        load_calibration(twice)
    (tmp_path / "tp8.csv").write_text(TP8)
    assert main(["calibrate", str(tmp_path / "tp8.csv"), "--fit", "gpus.H100.matmul_efficiency"]) == 0
    assert "gpus.H100-SXM.matmul_efficiency" in capsys.readouterr().out


def test_runs_files_past_their_bounds_are_refused_at_once(tmp_path):
    """A measured second below a microsecond (5e-324: an infinite error) is one line; a runs CSV past 10,000 runs
    and a calibration past 100 (whose leave-one-out grows with the square of the runs) are refused before any work."""
    head, row = TP8.splitlines()
    (tmp_path / "tiny.csv").write_text(head + "\n" + row.replace("13.19", "5e-324") + "\n")
    with pytest.raises(FasopError, match=r"measured_seconds_per_iter: expected a positive number in \[1e-06, 1e\+06\]"):
        validate(tmp_path / "tiny.csv")
    (tmp_path / "many.csv").write_text(head + "\n" + (row + "\n") * 10_001)
    with pytest.raises(FasopError, match="10,001 runs, more than the 10,000"):
        validate(tmp_path / "many.csv")
    (tmp_path / "calib.csv").write_text(head + "\n" + (row + "\n") * 101)
    from fasop.report.calibrate import calibrate

    with pytest.raises(FasopError, match="101 runs, more than the 100 calibrate fits"):
        calibrate(tmp_path / "calib.csv")
