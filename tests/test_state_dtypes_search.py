"""bf16 gradients and Adam moments in search, explain and export (--main-grads / --optimizer-states;
memory.state_dtypes): 2 bytes a gradient instead of 4 and 2 + 2 for the moments instead of 4 + 4,
by hand; a search where nothing fits in fp32 plans in bf16 and says so (DeepSeek-V3 on 4 p5 + 4
p6-b200, issue 29's acceptance); the Megatron-LM flags of such a row (arguments.py at d98e8a6:
--grad-reduce-in-bf16, --use-precision-aware-optimizer, --exp-avg-dtype / --exp-avg-sq-dtype bf16)
read back to the same estimate."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from fasop.cli.command import main

DEEPSEEK = Path(__file__).parent / "data" / "hf" / "deepseek-v3.json"
SEARCH = ["search", "--model", "llama-3-8b", "--cluster", "aws", "--nodes", "p4d=2", "--no-progress", "--show", "0",
          "--every-plan", "--recompute", "full"]


def _rows(path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def _memory(path, rank, capsys) -> list[dict]:
    capsys.readouterr()
    assert main(["explain", "--from", str(path), "--rank", rank, "--model", "llama-3-8b", "--cluster", "aws",
                 "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_bf16_states_by_hand(tmp_path, monkeypatch, capsys):
    """Same plan, same split: gradients halve (4 -> 2 bytes), the optimizer's 12 bytes (fp32 master +
    two fp32 moments) become 8; weights and activations do not move; the columns say which."""
    monkeypatch.chdir(tmp_path)
    assert main(SEARCH + ["--out", "fp32.csv"]) == 0
    assert main(SEARCH + ["--out", "bf16.csv", "--main-grads", "bf16", "--optimizer-states", "bf16"]) == 0
    a, b = _rows("fp32.csv"), _rows("bf16.csv")
    assert {(r["main_grads"], r["optimizer_states"]) for r in a} == {("fp32", "fp32")}
    assert {(r["main_grads"], r["optimizer_states"]) for r in b} == {("bf16", "bf16")}
    by_plan = {(r["tp"], r["dp"], r["pp"], r["mbs"], r["node_placement"]): r for r in b}
    checked = 0
    for r in a:
        twin = by_plan[(r["tp"], r["dp"], r["pp"], r["mbs"], r["node_placement"])]
        if r["partition"] != twin["partition"] or r["zero"] != twin["zero"] or checked >= 3:
            continue
        x, y = _memory("fp32.csv", r["rank"], capsys), _memory("bf16.csv", twin["rank"], capsys)
        for s, t in zip(x["stages"], y["stages"]):
            assert t["weights_bytes"] == s["weights_bytes"] and t["activations_bytes"] == s["activations_bytes"]
            assert t["gradients_bytes"] == pytest.approx(s["gradients_bytes"] / 2, rel=1e-12)
            assert t["optimizer_bytes"] == pytest.approx(s["optimizer_bytes"] * 8 / 12, rel=1e-12)
        checked += 1
    assert checked == 3


@pytest.mark.parametrize("flags, message", [
    (["--main-grads", "fp16"], "expected fp32 or bf16"),
    (["--optimizer-states", "fp32,bf16"], "expected fp32 or bf16"),
])
def test_bad_state_dtypes_are_one_line(tmp_path, monkeypatch, capsys, flags, message):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        main(SEARCH + ["--out", "x.csv"] + flags)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and message in err and err.count("\n") == 1 and not (tmp_path / "x.csv").exists()


def test_deepseek_v3_plans_on_four_p5_and_four_p6_b200(tmp_path, monkeypatch, capsys):
    """671B parameters need 9.8 TiB with fp32 gradients and moments even fully sharded (16 bytes a parameter:
    PyTorch FSDP's fp32 shard is the master), more than the 64 GPUs' 8.1 TiB; with bf16 ones 6.1 TiB: the search
    plans so (compute_source analytic) and says it; asked for fp32 it writes no plan and names the way out."""
    monkeypatch.chdir(tmp_path)
    base = ["search", "--model", str(DEEPSEEK), "--cluster", "aws", "--nodes", "p5=4,p6-b200=4", "--heterogeneous",
            "--no-progress", "--show", "0"]
    assert main(base + ["--out", "ds.csv"]) == 0
    out = capsys.readouterr().out
    rows = _rows("ds.csv")
    assert rows and {r["compute_source"] for r in rows} == {"analytic"} and {r["is_oom"] for r in rows} == {"False"}
    assert {(r["main_grads"], r["optimizer_states"]) for r in rows} == {("bf16", "bf16")}
    assert "exceed all the GPUs' memory: planned with bf16 ones" in out
    assert main(base + ["--out", "fp32.csv", "--main-grads", "fp32", "--optimizer-states", "fp32"]) == 0
    out = capsys.readouterr().out
    assert not _rows("fp32.csv") and "9.8 TiB" in out and "--main-grads bf16 --optimizer-states bf16: 6.1 TiB" in out


def test_the_megatron_flags_read_back_to_the_estimate(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(SEARCH + ["--out", "b.csv", "--main-grads", "bf16", "--optimizer-states", "bf16", "--top", "2"]) == 0
    row = next(r for r in _rows("b.csv") if r["zero"] == "1" and r["is_oom"] == "False")
    capsys.readouterr()
    base = ["--from", "b.csv", "--rank", row["rank"], "--model", "llama-3-8b", "--cluster", "aws"]
    assert main(["export", *base, "--target", "megatron"]) == 0
    text = capsys.readouterr().out
    for flag in ("--grad-reduce-in-bf16", "--use-precision-aware-optimizer", "--exp-avg-dtype bf16",
                 "--exp-avg-sq-dtype bf16", "--use-distributed-optimizer"):
        assert f"    {flag}\n" in text
    read = {"main_grads": "bf16" if "--grad-reduce-in-bf16" in text else "fp32",
            "optimizer_states": "bf16" if "--exp-avg-dtype bf16" in text else "fp32"}
    again = dict(row) | read
    with open("again.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(row))
        writer.writeheader()
        writer.writerow(again)
    first = _memory("b.csv", row["rank"], capsys)
    second = _memory("again.csv", row["rank"], capsys)
    assert first["step_time_s"] == second["step_time_s"] and first["stages"] == second["stages"]
    assert main(["export", *base, "--target", "torchtitan"]) == 0
    captured = capsys.readouterr()
    # torchtitan's TrainingConfig.mixed_precision_reduce is Literal["float32"]: a warning, not a key
    assert "mixed_precision_reduce =" not in captured.out and "main_grads bf16: torchtitan reduces" in captured.err
    assert "optimizer_states bf16" in captured.err
