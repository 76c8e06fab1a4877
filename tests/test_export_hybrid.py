"""Megatron-LM export of a hybrid Mamba model (Nemotron 3, `hybrid_override_pattern`): the layer
pattern with the plan's split as '|' between stages (Megatron-LM arguments.py
--hybrid-layer-pattern; the deprecated --hybrid-override-pattern forwards to it), the Mamba-2
mixer's shape (--mamba-num-heads / -head-dim / -state-dim / -num-groups, TransformerConfig), no
--pipeline-model-parallel-layout or --num-layers (arguments.py refuses them with a pattern); read
back, the flags re-estimate to the row. torchtitan, which has no Mamba model, gets a warning."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

import fasop
from fasop.cli.command import main
from fasop.report.export_megatron import hybrid_pattern
from fasop.report.export_settings import transformer_counts

MODEL = "nemotron-3-nano-30b-a3b"
CONFIG = json.loads((Path(fasop.__file__).resolve().parent / "data" / "model_specs" / "hf" / f"{MODEL}.json")
                    .read_text(encoding="utf-8"))


def test_pattern_by_hand():
    # embedding + 4 layers + head over two stages 3-3: stage 0 embedding M E, stage 1 * M head
    kinds = ("embedding",) + ("transformer",) * 4 + ("head",)
    assert hybrid_pattern(("mamba", "experts", "attention", "mamba"), kinds, (3, 3)) == "ME|*M"
    # a whole Transformer layer is two of Megatron's: attention, then its MLP or experts
    assert hybrid_pattern(("dense", "moe", "mamba", "mlp"), kinds, (2, 4)) == "*-|*EM-"


def _search(*flags, nodes="p5=2") -> list[dict]:
    assert main(["search", "--model", MODEL, "--cluster", "aws", "--nodes", nodes, "--top", "3", "--out", "r.csv",
                 "--no-progress", *flags]) == 0
    with open("r.csv", newline="") as fh:
        return [r for r in csv.DictReader(fh) if r["rank"]]


def _export(row, capsys, target="megatron") -> str:
    capsys.readouterr()
    assert main(["export", "--from", "r.csv", "--rank", row["rank"], "--model", MODEL, "--cluster", "aws",
                 "--target", target]) == 0
    return capsys.readouterr().out


def _explain(path, rank, capsys) -> dict:
    assert main(["explain", "--from", path, "--rank", rank, "--model", MODEL, "--cluster", "aws", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    out.pop("where")
    return out


@pytest.mark.parametrize("flags, nodes", [((), "p5=2"), (("--virtual-stages", "2"), "p5=4")])
def test_hybrid_export_re_estimates_to_the_row(tmp_path, monkeypatch, capsys, flags, nodes):
    monkeypatch.chdir(tmp_path)
    rows = _search(*flags, nodes=nodes)
    assert any(int(r["pp"]) > 1 for r in rows)
    interleaved = 0
    for row in rows:
        text = _export(row, capsys)
        flag = lambda name: int(re.search(rf"--{name} (\d+)", text).group(1))  # noqa: E731
        assert "--pipeline-model-parallel-layout" not in text and "--num-layers" not in text
        assert "--moe-layer-freq" not in text and "warning" not in text
        assert (flag("mamba-num-heads"), flag("mamba-head-dim"), flag("mamba-state-dim"), flag("mamba-num-groups")) \
            == (CONFIG["mamba_num_heads"], CONFIG["mamba_head_dim"], CONFIG["ssm_state_size"], CONFIG["n_groups"])
        pattern = re.search(r'--hybrid-layer-pattern "([^"]*)"', text).group(1)
        assert pattern.replace("|", "") == CONFIG["hybrid_override_pattern"]
        segments = pattern.split("|")
        pp = flag("pipeline-model-parallel-size")
        v = len(segments) // pp  # Megatron derives the virtual stages from the segments
        assert len(segments) == pp * v and v == int(row["virtual_stages"])
        interleaved += v > 1
        # per pipeline rank (chunk k of rank r is segment k*pp + r), the row's transformer layers
        per_rank = [sum(len(segments[k * pp + r]) for k in range(v)) for r in range(pp)]
        kinds = ("embedding",) + ("transformer",) * len(CONFIG["hybrid_override_pattern"]) + ("head",)
        partition = tuple(int(x) for x in row["partition"].split("-"))
        assert per_rank == transformer_counts(kinds, partition)
        # read back: degrees and split written over the row re-estimate to it
        counts = per_rank[:]
        counts[0] += 1
        counts[-1] += 1
        again = dict(row) | {"tp": str(flag("tensor-model-parallel-size")), "pp": str(pp),
                             "ep": str(flag("expert-model-parallel-size")), "partition": "-".join(map(str, counts)),
                             "virtual_stages": str(v)}
        with open("again.csv", "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(row))
            writer.writeheader()
            writer.writerow(again)
        first = _explain("r.csv", row["rank"], capsys)
        assert first["step_time_s"] == pytest.approx(float(row["step_time_s"]), rel=5e-6)
        assert _explain("again.csv", row["rank"], capsys) == first
    assert interleaved or not flags


def test_torchtitan_warns_it_has_no_mamba_model(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    row = _search()[0]
    assert "torchtitan has no hybrid Mamba" in _export(row, capsys, "torchtitan")
