"""Plans the launch targets run: what review s25 found written that Megatron-LM or torchtitan refuse at start.

- Sequence parallelism scatters a context-parallel rank's seq / cp tokens over its tp ranks (Megatron-Core
  tensor_parallel/mappings.py asserts them divisible by tp): a search leaves it off where they do not split, an
  MoE model (whose layers need it at tp > 1) leaves out such tp, and a results row or a plan by flags at such a
  sequence is refused in one line.
- `--hsdp on` on an MoE model: HSDP only where its replicas divide the experts' data-parallel group
  (Megatron-Core parallel_state.py; torchtitan parallel_dims.py: ep divides dp_shard x cp x tp), with a note.
- The plan by flags takes the degrees and stage a search CSV row has: --cp, --ep, --etp, --zero.
- A torchtitan export's header carries every warning it prints (the float8 converters' too).
"""

from __future__ import annotations

import csv

import pytest

from fasop.cli.command import main
from fasop.plans.enumerate import degrees
from fasop.plans.space import degree_space, sp_splits
from fasop.specs.load import load_model
from fasop.cli.args import with_step_shape


def _rows(path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_sequence_parallelism_needs_tp_to_split_a_ranks_tokens():
    assert sp_splits(4096, 2) and sp_splits(4096, 8, cp=4) and sp_splits(4097, 1)
    assert not sp_splits(4097, 2) and not sp_splits(4098, 4) and sp_splits(6144, 4, cp=6)
    assert not sp_splits(12 * 1024 + 6, 4, cp=2)   # 6147 tokens a rank, odd


def test_an_moe_model_leaves_out_the_tp_its_sequence_does_not_split():
    moe = with_step_shape(load_model("mixtral-8x7b"), 4097, None)
    combos = list(degrees(num_nodes=2, gpus_per_node=8, tp_degrees=(1, 2, 4, 8), global_batch_size=256,
                          num_transformer_layers=32, space=degree_space(moe)))
    assert combos and {c[0] for c in combos} == {1}
    even = with_step_shape(load_model("mixtral-8x7b"), 4098, None)   # 2049 a rank at tp 2: tp 4, 8 left out
    combos = list(degrees(num_nodes=2, gpus_per_node=8, tp_degrees=(1, 2, 4, 8), global_batch_size=256,
                          num_transformer_layers=32, space=degree_space(even)))
    assert {c[0] for c in combos} == {1, 2}


def test_a_dense_search_turns_sequence_parallelism_off_where_tp_does_not_split(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for seq, name in ((4097, "odd.csv"), (4096, "even.csv")):
        assert main(["search", "--model", "llama-3-8b", "--cluster", "aws", "--nodes", "p5=1", "--seq-len", str(seq),
                     "--top", "200", "--no-progress", "--out", name]) == 0
    odd, even = _rows(tmp_path / "odd.csv"), _rows(tmp_path / "even.csv")
    assert {r["tp"] for r in odd} >= {"2", "4", "8"} and {r["sequence_parallel"] for r in odd} == {"False"}
    assert {r["sequence_parallel"] for r in even if r["tp"] != "1"} == {"True"}
    capsys.readouterr()
    row = next(i for i, r in enumerate(even, start=1) if r["tp"] == "2")
    assert main(["explain", "--from", "even.csv", "--row", str(row), "--model", "llama-3-8b", "--cluster", "aws",
                 "--seq-len", "4097"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "tp: 2 does not split a rank's sequence of 4097 tokens" in err


def test_an_moe_plan_at_a_sequence_its_tp_does_not_split_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["search", "--model", "mixtral-8x7b", "--cluster", "aws", "--nodes", "p5=1", "--seq-len", "4098",
                 "--top", "1", "--no-progress", "--out", "s.csv"]) == 0
    assert "note: mixtral-8x7b at 4,098 tokens a sequence: tp 4, 8 left out" in capsys.readouterr().out
    argv = ["--model", "mixtral-8x7b", "--cluster", "aws", "--placement", "p5-p5", "--tp", "2", "--dp", "4",
            "--pp", "2", "--ep", "8"]
    assert main(["export", *argv, "--seq-len", "4097", "--target", "megatron"]) == 2
    err = capsys.readouterr().err
    assert "its MoE layers need sequence parallelism at tp > 1" in err and "Traceback" not in err
    assert main(["export", *argv, "--seq-len", "4098", "--target", "megatron"]) == 0
    out = capsys.readouterr().out
    assert "--seq-length 4098" in out and "--sequence-parallel" in out


def test_hsdp_on_an_moe_model_only_where_its_replicas_divide_the_experts_group(tmp_path, monkeypatch, capsys):
    """Qwen3-30B-A3B on 4 p5 (8 GPUs a node): HSDP shards over a node's ranks; at ep 16 and 32 with tp 1 the
    experts' data-parallel group (32 / ep) is not a multiple of the 4 replicas, so no plan is HSDP."""
    monkeypatch.chdir(tmp_path)
    assert main(["search", "--model", "qwen3-30b-a3b", "--cluster", "aws", "--nodes", "p5=4", "--zero", "3", "--hsdp",
                 "on", "--ep", "8,16,32", "--top", "40", "--no-progress", "--out", "h.csv"]) == 0
    out = capsys.readouterr().out
    assert "note: --hsdp on: qwen3-30b-a3b's plans use HSDP only where ep x etp divides" in out
    rows = _rows(tmp_path / "h.csv")
    for r in rows:
        tp, cp, dp, ep, etp = (int(r[k]) for k in ("tp", "cp", "dp", "ep", "etp"))
        replicas = int(r["dp_replicate"])
        if replicas > 1:
            assert (tp * cp * dp // (ep * etp)) % replicas == 0, r
    assert any(int(r["dp_replicate"]) > 1 for r in rows)   # ep 8 at tp 1: 4 experts' replicas, 4 HSDP replicas


def test_the_plan_by_flags_takes_context_and_expert_degrees_and_the_zero_stage(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["export", "--model", "mixtral-8x7b", "--cluster", "aws", "--placement", "p5-p5", "--tp", "2", "--dp",
                 "4", "--pp", "2", "--ep", "4", "--etp", "2", "--zero", "0", "--target", "megatron"]) == 0
    out = capsys.readouterr().out
    assert "--expert-model-parallel-size 4" in out and "--expert-tensor-parallel-size 2" in out
    assert "--use-distributed-optimizer" not in out
    assert main(["explain", "--model", "llama-3-8b", "--cluster", "aws", "--placement", "p5-p5", "--cp", "2", "--dp",
                 "8", "--seq-len", "32768", "--global-batch-size", "16", "--zero", "3"]) == 0
    out = capsys.readouterr().out
    assert "tp1-cp2-dp8-pp1" in out and "ZeRO-3" in out
    assert main(["search", "--model", "mixtral-8x7b", "--cluster", "aws", "--nodes", "p5=2", "--top", "1",
                 "--no-progress", "--out", "m.csv"]) == 0
    capsys.readouterr()
    for flag in ("--cp", "--ep", "--etp", "--zero"):
        assert main(["explain", "--from", "m.csv", "--model", "mixtral-8x7b", "--cluster", "aws", flag, "1"]) == 2
        assert f"{flag}: for the plan by flags" in capsys.readouterr().err


@pytest.mark.parametrize("flags, warning", [
    (("--precision", "nvfp4", "--nodes", "p6-b200=2"), "torchtitan has no nvfp4 converter for the routed experts"),
    (("--precision", "fp8", "--bf16-layers", "2", "--nodes", "p5=2"), "bf16_layers 2: written converters quantize"),
])
def test_a_torchtitan_export_writes_every_warning_it_prints(tmp_path, monkeypatch, capsys, flags, warning):
    monkeypatch.chdir(tmp_path)
    assert main(["search", "--model", "qwen3-30b-a3b", "--cluster", "aws", *flags, "--top", "1", "--no-progress",
                 "--out", "q.csv"]) == 0
    capsys.readouterr()
    assert main(["export", "--from", "q.csv", "--model", "qwen3-30b-a3b", "--cluster", "aws", "--target", "torchtitan",
                 "--out", "q.py"]) == 0
    err = capsys.readouterr().err
    written = (tmp_path / "q.py").read_text()
    assert warning in err and warning in written
    printed = [line.split("warning: ", 1)[1] for line in err.splitlines() if "warning: " in line]
    assert printed and all(w in written for w in printed)


def test_the_mtp_note_only_where_the_modules_are_not_planned(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    base = ["search", "--model", "deepseek-v3", "--cluster", "aws", "--nodes", "p6-b200=8", "--zero", "3", "--recompute",
            "full", "--top", "1", "--no-progress"]   # the one recipe it fits with on 64 B200
    assert main([*base, "--out", "a.csv"]) == 0
    assert "multi-token-prediction module(s) not planned" in capsys.readouterr().out
    assert main([*base, "--mtp-layers", "1", "--out", "b.csv"]) == 0
    assert "not planned" not in capsys.readouterr().out
    assert {r["mtp_layers"] for r in _rows(tmp_path / "b.csv")} == {"1"}


def test_the_plan_by_flags_of_a_windowed_model_takes_the_cp_exchange_it_runs(tmp_path, monkeypatch, capsys):
    """GPT-OSS's sliding windows refuse the CP ring: a plan by flags with --cp takes Ulysses' all-to-alls (the first
    exchange its attention runs), as a search ranks it; ZeRO above 0 with nothing to shard and a batch dp x mbs does
    not divide are one line naming the flags."""
    monkeypatch.chdir(tmp_path)
    assert main(["explain", "--model", "gpt-oss-20b", "--cluster", "aws", "--placement", "p5", "--cp", "2", "--dp", "4",
                 "--ep", "8", "--seq-len", "32768", "--global-batch-size", "16"]) == 0
    assert "cp 2 (a2a)" in capsys.readouterr().out
    assert main(["explain", "--model", "llama-3-8b", "--cluster", "aws", "--placement", "p5", "--tp", "8", "--zero",
                 "3"]) == 2
    assert "--zero: 3 with dp x cp = 1: nothing to shard" in capsys.readouterr().err
    assert main(["explain", "--model", "llama-3-8b", "--cluster", "aws", "--placement", "p5", "--dp", "8",
                 "--global-batch-size", "7"]) == 2
    assert "--dp / --mbs: dp 8 x mbs 1 does not divide the global batch 7 (--global-batch-size)" in capsys.readouterr().err


def test_plots_of_plans_by_flags_at_other_shapes_or_splits_are_other_files(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    base = ["plot", "--model", "llama-3-8b", "--cluster", "aws", "--placement", "p5", "--tp", "2", "--dp", "2", "--pp",
            "2", "--figures", "memory", "--out-dir", "pl"]
    for extra in ((), ("--seq-len", "4096"), ("--global-batch-size", "64"), ("--partition", "20-14")):
        assert main([*base, *extra]) == 0
    names = sorted(p.name for p in (tmp_path / "pl").glob("*.png"))
    assert len(names) == 4 and any("_seq4096" in n for n in names) and any("_gbs64" in n for n in names) \
        and any("_split20-14" in n for n in names)
