"""Knobs and defaults of today's practice (issue 30, item 4): --seq-len and --global-batch-size
for any model that can take them, carried into the CSV so explain/export re-estimate the same
step; a bare config.json says what it assumed; a catalog model's default length is 20 tokens per
parameter (Chinchilla), FASOP's specs keep 12,500,000 iterations; --tokens takes 15e12; when no
plan fits, the first recipe that would fit is named; the default recipe set finds the fastest
plan that no recompute, selective or full recompute alone finds.
"""

from __future__ import annotations

import csv
import json
import math

import pytest

from fasop.cli.command import main
from fasop.estimators.analytic.layers import total_params
from fasop.specs.load import load_model


def _rows(path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def _search(tmp_path, name: str, *flags: str, model: str = "llama-3-8b", nodes: str = "p4d=2") -> list[dict]:
    out = tmp_path / f"{name}.csv"
    assert main(["search", "--model", model, "--cluster", "aws", "--nodes", nodes, "--out", str(out),
                 "--no-progress", *flags]) == 0
    return _rows(out)


def test_seq_len_and_global_batch_size_shape_the_step(tmp_path, capsys):
    """4,096 x 1,024 = 4,194,304 tokens a step, like the spec's 8,192 x 512, but twice the sequences:
    every plan has twice the micro-batches; 15e12 tokens = ceil(15e12 / 4,194,304) steps."""
    spec = _search(tmp_path, "spec", "--tokens", "15000000000000")
    shaped = _search(tmp_path, "shaped", "--seq-len", "4096", "--global-batch-size", "1024", "--tokens", "15e12")
    steps = math.ceil(15e12 / (4096 * 1024))
    assert {r["iterations"] for r in spec} == {r["iterations"] for r in shaped} == {str(steps)}
    assert {(r["sequence_length"], r["global_batch_size"]) for r in shaped} == {("4096", "1024")}
    assert {(r["sequence_length"], r["global_batch_size"]) for r in spec} == {("8192", "512")}
    by_plan = {(r["tp"], r["dp"], r["pp"], r["mbs"]): r for r in spec}
    pairs = [(r, by_plan[k]) for r in shaped if (k := (r["tp"], r["dp"], r["pp"], r["mbs"])) in by_plan]
    assert pairs and all(int(a["num_microbatches"]) == 2 * int(b["num_microbatches"]) for a, b in pairs)
    capsys.readouterr()
    assert main(["explain", "--from", str(tmp_path / "shaped.csv"), "--json"]) == 0
    explained = json.loads(capsys.readouterr().out)
    first = next(r for r in shaped if r["rank"] == "1")
    assert explained["step_time_s"] == pytest.approx(float(first["step_time_s"]), rel=5e-6)  # the CSV's step (6 digits), re-estimated


def test_tokens_refuses_what_is_not_a_whole_count(capsys):
    for bad in ("1.5e-3", "15e", "1e400", "nan"):
        with pytest.raises(SystemExit) as exc:
            main(["search", "--model", "llama-3-8b", "--cluster", "aws", "--nodes", "p4d=1", "--tokens", bad])
        assert exc.value.code == 2
        assert "--tokens" in capsys.readouterr().err


def test_seq_len_is_refused_for_a_profiled_model(tmp_path, capsys):
    assert main(["search", "--model", "gpt2xl", "--cluster", "fasop-paper", "--nodes", "a100=1", "--seq-len", "2048",
                 "--out", str(tmp_path / "x.csv")]) == 2
    err = capsys.readouterr().err
    assert "--seq-len" in err and "profile" in err and "1024" in err


def test_catalog_models_default_to_20_tokens_per_parameter(tmp_path, capsys):
    rows = _search(tmp_path, "default")
    model = load_model("llama-3-8b")
    tokens = 20 * round(total_params(model.architecture))
    assert {r["iterations"] for r in rows} == {str(math.ceil(tokens / (512 * 8192)))}
    assert "20 tokens per parameter (Chinchilla)" in capsys.readouterr().out


def test_fasop_specs_keep_fasop_iterations(tmp_path, capsys):
    out = tmp_path / "gpt2xl.csv"
    assert main(["search", "--model", "gpt2xl", "--cluster", "fasop-paper", "--nodes", "a100=1", "--out", str(out),
                 "--no-progress"]) == 0
    assert {r["iterations"] for r in _rows(out)} == {"12500000"}
    assert "tokens per parameter" not in capsys.readouterr().out


def test_bare_config_json_says_what_it_assumed(tmp_path, capsys):
    from fasop.specs.files import shipped_folder

    config = shipped_folder("model_specs") / "hf" / "qwen3-8b.json"
    _search(tmp_path, "bare", model=str(config))
    notes = [line for line in capsys.readouterr().out.splitlines() if "bare config.json" in line]
    assert len(notes) == 1 and "sequence length 4,096" in notes[0] and "global batch 256" in notes[0]
    _search(tmp_path, "bare2", "--seq-len", "2048", "--global-batch-size", "128", model=str(config))
    assert "bare config.json" not in capsys.readouterr().out  # nothing assumed


def test_no_fit_names_the_recipe_that_would(tmp_path, capsys):
    """Llama-3.1-405B on 16 p5 (128 H100): nothing fits with selective recompute (the issue's case)."""
    rows = _search(tmp_path, "405b", "--recompute", "selective", "--top", "5", model="llama-3.1-405b", nodes="p5=16")
    assert all(r["is_oom"] == "True" for r in rows)
    out = capsys.readouterr().out
    hint = [line for line in out.splitlines() if line.startswith("no plan fits with recompute selective")]
    assert len(hint) == 1 and "fit with --recompute full" in hint[0], out


@pytest.mark.parametrize("model, nodes", [("llama-3-8b", "p4d=2"), ("qwen3-30b-a3b", "p5=2")])
def test_default_recipes_find_the_fastest_plan(tmp_path, capsys, model, nodes):
    """The default (no recompute, full recompute) is never slower than selective, none or full alone
    (measured: docs/analytic.md, "Default recipe")."""
    best = {}
    for recompute in ("none", "selective", "full", None):
        flags = ("--top", "1") + (("--recompute", recompute) if recompute else ())
        rows = _search(tmp_path, f"{model}-{recompute}", *flags, model=model, nodes=nodes)
        best[recompute] = min(float(r["step_time_s"]) for r in rows if r["is_oom"] == "False")
    assert best[None] == min(best.values())
    assert best["selective"] == best["none"]  # under FlashAttention: the same memory, the same time


def test_pareto_with_no_fit_names_the_recipe_that_would(tmp_path, capsys):
    """`fasop pareto` as `fasop search`: 16 p5 (128 H100) for Llama-3.1-405B, the only composition,
    has no plan that fits with selective recompute; the line names full recompute, counting compositions."""
    assert main(["pareto", "--model", "llama-3.1-405b", "--cluster", "aws", "--max-nodes", "p5=16", "--min-nodes",
                 "p5=16", "--recompute", "selective", "--no-progress", "--workers", "1",
                 "--out-prefix", str(tmp_path / "p")]) == 0
    out = capsys.readouterr().out
    assert "frontier: empty" in out
    hint = [line for line in out.splitlines() if line.startswith("no plan fits with recompute selective")]
    assert len(hint) == 1 and "1 composition fits with --recompute full (fastest" in hint[0], out
