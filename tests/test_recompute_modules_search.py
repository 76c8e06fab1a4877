"""`--recompute selective:<modules>` in search, explain and export (issue 29 item 3): Megatron-LM's
--recompute-modules lists as recipe values the search scores like none / selective / full, written
in one spelling in the CSV, re-estimated by explain from the row, exported as Megatron-LM flags
(torchtitan has no module lists: a warning)."""

from __future__ import annotations

import csv
import json

import pytest

from fasop.cli.command import main
from fasop.estimators.analytic.modules import split_recompute

SEARCH = ["search", "--model", "llama-3-8b", "--cluster", "aws", "--nodes", "p4d=2", "--no-progress", "--show", "0"]


def _rows(path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_module_lists_are_recipe_values_in_one_spelling(tmp_path, monkeypatch):
    """`mlp,layernorm,mlp` after `selective:` belongs to it (module names are not modes): three values;
    the CSV writes the set sorted, so two spellings of one list are one recipe."""
    monkeypatch.chdir(tmp_path)
    assert main(SEARCH + ["--recompute", "none,selective:mlp,layernorm,mlp,full", "--out", "a.csv"]) == 0
    assert main(SEARCH + ["--recompute", "selective:layernorm,mlp,full,none", "--out", "b.csv"]) == 0
    a, b = _rows("a.csv"), _rows("b.csv")
    assert {r["recompute"] for r in a} <= {"none", "selective:layernorm,mlp", "full"}
    assert "selective:layernorm,mlp" in {r["recompute"] for r in a}
    key = lambda r: (r["tp"], r["dp"], r["pp"], r["mbs"])  # noqa: E731
    assert sorted((key(r), r["recompute"], r["step_time_s"]) for r in a) \
        == sorted((key(r), r["recompute"], r["step_time_s"]) for r in b)


def test_a_module_list_is_costed_between_none_and_full(tmp_path, monkeypatch):
    """Rerunning the MLP and norms costs more backward than none and less than full recompute, for
    one plan and micro-batch (same degrees, each recipe alone), where all three fit with the same
    split (memory moves the split of a tight plan: then less recompute can be slower)."""
    monkeypatch.chdir(tmp_path)
    times = {}
    for value in ("none", "selective:mlp,layernorm", "full"):
        assert main(SEARCH + ["--recompute", value, "--out", f"{value[:4]}.csv", "--every-plan"]) == 0
        times[value] = {(r["tp"], r["dp"], r["pp"], r["mbs"], r["partition"]): float(r["step_time_s"])
                        for r in _rows(f"{value[:4]}.csv") if r["is_oom"] == "False"}
    common = set(times["none"]) & set(times["full"]) & set(times["selective:mlp,layernorm"])
    assert len(common) > 5
    for k in common:
        assert times["none"][k] < times["selective:mlp,layernorm"][k] < times["full"][k]


@pytest.mark.parametrize("value, message", [
    ("selective:mlp,attention", "expected values from none, selective, full or selective:<modules>"),
    ("selective:", "lists no module"),
    ("mlp", "expected values from"),
])
def test_bad_module_lists_are_one_line(tmp_path, monkeypatch, capsys, value, message):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        main(SEARCH + ["--recompute", value, "--out", "x.csv"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and not (tmp_path / "x.csv").exists()


def test_a_module_list_row_is_explained_and_exported_as_estimated(tmp_path, monkeypatch, capsys):
    """explain re-estimates the row with its module list (the CSV's step time); the Megatron-LM
    export writes --recompute-granularity selective --recompute-modules <the modules>, which read back
    give the same recipe and so the same estimate; torchtitan warns that it has no module lists."""
    monkeypatch.chdir(tmp_path)
    assert main(SEARCH + ["--recompute", "selective:moe_act,mlp,layernorm", "--out", "s.csv"]) == 0
    row = next(r for r in _rows("s.csv") if r["is_oom"] == "False")
    assert row["recompute"] == "selective:layernorm,mlp,moe_act"
    capsys.readouterr()
    base = ["--from", "s.csv", "--rank", row["rank"], "--model", "llama-3-8b", "--cluster", "aws"]
    assert main(["explain", *base, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["step_time_s"] == pytest.approx(float(row["step_time_s"]), rel=5e-6)
    assert main(["export", *base, "--target", "megatron"]) == 0
    text = capsys.readouterr().out
    flags = text.split("--recompute-modules ")[1].split("\n")[0].split()
    assert "--recompute-granularity selective" in text and flags == ["layernorm", "mlp", "moe_act"]
    assert split_recompute("selective:" + ",".join(flags)) == ("selective", ("layernorm", "mlp", "moe_act"))
    assert main(["export", *base, "--target", "torchtitan"]) == 0
    assert "takes no module list" in capsys.readouterr().err
