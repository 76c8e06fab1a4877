"""Context parallelism's all-to-all (Ulysses) exchange beside the ring: Transformer Engine's rules for which
one a model runs, the all-to-alls' volumes and seconds by hand, the search's `cp_comm` dimension and column,
explain's re-estimate, the exports' flags, and `fasop validate`'s `cp_comm` column."""

from __future__ import annotations

import csv
import json
from dataclasses import replace
from pathlib import Path

import pytest

from fasop.cli.command import main
from fasop.estimators.analytic import context as CX
from fasop.estimators.analytic import cost as C
from fasop.estimators.analytic.layers import Recipe
from fasop.estimators.analytic.parallel import GroupLinks
from fasop.report.validate import validate
from fasop.specs.architecture import gpt_architecture
from fasop.specs.catalog import default_params, find_gpu
from fasop.specs.hf_config import architecture_from_config, read_config

DATA = Path(__file__).resolve().parent / "data"


def _hf(name: str):
    return architecture_from_config(read_config(DATA / "hf" / name), DATA / "hf" / name)


def _rows(path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


# ----------------------------------------------------------------------------- volumes and seconds by hand
def test_a2a_volumes_by_hand():
    """GQA h 1024, 16 heads of 64, 4 KV heads; b 1, s 8192, cp 4, tp 2, 16-bit: a rank holds 2,048 tokens of
    8 query heads (512 wide) and 2 KV heads (128 wide), and sends 3/4 of each tensor."""
    a = gpt_architecture(num_layers=2, hidden_size=1024, num_attention_heads=16, vocab_size=1000, num_kv_heads=4)
    assert a.attention_widths == (1024, 256, 256, 1024)
    q, k, v, out = CX.a2a_sent_bytes(a, 1, 8192, 4, 2, 2)
    assert (q, k, v, out) == (2048 * 512 * 2 * 0.75, 2048 * 128 * 2 * 0.75, 2048 * 128 * 2 * 0.75, 2048 * 512 * 2 * 0.75)
    assert q == 1_572_864 and k == 393_216


def test_multi_head_volume_is_ulysses_4nh_over_p():
    """DeepSpeed-Ulysses: the QKV all-to-all carries 3Nh and the context's Nh, 4Nh in all over the group; one of
    P ranks sends (P - 1)/P of its 4 (N/P) h."""
    a = gpt_architecture(num_layers=2, hidden_size=2048, num_attention_heads=16, vocab_size=1000)
    n, p = 32768, 8
    assert sum(CX.a2a_sent_bytes(a, 1, n, p, 1, 1)) == pytest.approx(4 * (n / p) * 2048 * (p - 1) / p)


def test_mla_sends_its_up_projected_heads():
    a = _hf("deepseek-v3.json")   # 128 heads, d_qk 192 (128 nope + 64 rope), d_v 128
    assert a.attention_widths == (128 * 192, 128 * 192, 128 * 128, 128 * 128)


def test_the_mla_ring_sends_keys_and_values_at_their_own_widths():
    """DeepSeek-V3's ring step carries 128 x (192 + 128) = 40,960 values a token (07_moe_cp_fsdp.md §3.1), not
    2 x 128 x 192: b 1, s 4096, cp 2, tp 1, 16-bit, inside a node at 100 GB/s, nothing hidden (no attention)."""
    from fasop.estimators.analytic import parallel as P
    w = _workload(_hf("deepseek-v3.json"), cp=2, tp=1, comm="p2p", seq=4096)
    fwd, bwd = P.cp_s(w, GroupLinks(100e9, 50e9, 0.0, 0.0, 8), 0.0, 0.0)
    assert fwd == pytest.approx(2048 * 40960 * 2 / 100e9) and bwd == pytest.approx(2 * fwd)


def _workload(a, *, cp, tp, comm="a2a", mbs=1, seq=8192):
    return C.Workload(arch=a, seq=seq, mbs=mbs, tp=tp, dp=1, pp=1, num_microbatches=1,
                      recipe=Recipe(cp_comm=comm), params=default_params(), cp=cp)


def test_a2a_seconds_inside_a_node_by_hand():
    """cp 4 at tp 2 on 8-GPU nodes: the group is inside the node, all on NVLink at 100 GB/s; four all-to-alls,
    one latency each, none hidden, the backward as much."""
    a = gpt_architecture(num_layers=2, hidden_size=1024, num_attention_heads=16, vocab_size=1000, num_kv_heads=4)
    links = GroupLinks(100e9, 50e9, 1e-6, 5e-6, 8)
    fwd, bwd = CX.a2a_s(_workload(a, cp=4, tp=2), links)
    sent = 2 * 1_572_864 + 2 * 393_216
    assert fwd == bwd == pytest.approx(sent / 100e9 + 4 * 1e-6)


def test_a2a_seconds_across_nodes_by_hand():
    """cp 4 at tp 4 on 8-GPU nodes: ranks 4 apart, two members a node: 1/3 of each tensor's bytes over NVLink,
    2/3 over the GPU's 1/8 share of the node's NIC, the two at once (the slower bounds each all-to-all)."""
    a = gpt_architecture(num_layers=2, hidden_size=1024, num_attention_heads=16, vocab_size=1000, num_kv_heads=4)
    links = GroupLinks(100e9, 80e9, 1e-6, 5e-6, 8)
    fwd, _ = CX.a2a_s(_workload(a, cp=4, tp=4), links)
    per = [x for x in CX.a2a_sent_bytes(a, 1, 8192, 4, 4, 2)]
    assert fwd == pytest.approx(sum(max(x / 3 / 100e9 + 1e-6, 2 * x / 3 / 10e9 + 5e-6) for x in per))


def test_the_ring_and_a2a_take_the_same_attention_flops_and_differ_only_in_the_exchange():
    a = gpt_architecture(num_layers=2, hidden_size=4096, num_attention_heads=32, vocab_size=32000, num_kv_heads=8)
    h100 = find_gpu("H100-SXM")
    free = GroupLinks(float("inf"), float("inf"), 0.0, 0.0, 8)
    ring = C.layer_s(_workload(a, cp=4, tp=1, comm="p2p", seq=32768), h100, None, free)
    a2a = C.layer_s(_workload(a, cp=4, tp=1, comm="a2a", seq=32768), h100, None, free)
    assert ring == pytest.approx(a2a)   # free links: no exchange costs anything either way


# ----------------------------------------------------------------------------- Transformer Engine's rules
def test_sliding_windows_and_sinks_refuse_the_ring():
    oss = _hf("gpt-oss-120b.json")   # alternating 128-token windows, attention sinks; 64 heads, 8 KV heads
    assert "sliding-window" in oss.cp_comm_problem(1, 2, "p2p")
    sinks = replace(oss, window=0, windowed_layers=())
    assert "attention sinks" in sinks.cp_comm_problem(1, 2, "p2p")
    assert oss.cp_comm_problem(1, 8, "a2a") == ""            # 64 and 8 heads a rank, both divide by 8
    assert "(32 and 4 at tp 2)" in oss.cp_comm_problem(2, 8, "a2a")
    assert oss.cp_comm_problem(8, 2, "a2a")                  # one KV head a rank
    assert oss.cp_comm_problem(8, 1, "p2p") == oss.cp_comm_problem(8, 1, "a2a") == ""   # no CP: nothing to refuse
    assert CX.default_comm(oss, 1, 2) == "a2a"


def test_all_gather_runs_windows_not_sinks():
    """TE's all-gather exchange: sliding windows run (AttnFuncWithCPAndKVAllGather adjusts the window per step), a
    softmax other than the vanilla one does not; no rule on the heads."""
    oss = _hf("gpt-oss-120b.json")
    assert "attention sinks" in oss.cp_comm_problem(1, 2, "all_gather")
    gemma = _hf("gemma-3-27b-it.json")   # 32 heads, 16 KV heads, 1,024-token windows on 5 layers of 6, no sinks
    assert "sliding-window" in gemma.cp_comm_problem(1, 2, "p2p")
    assert gemma.cp_comm_problem(1, 32, "all_gather") == "" and gemma.cp_comm_problem(1, 32, "a2a")
    assert CX.default_comm(gemma, 1, 32) == "all_gather" and CX.default_comm(gemma, 1, 16) == "a2a"
    assert CX.default_comm(oss, 1, 16) == "p2p"   # nothing TE runs: a measured run is scored as the default ring


def test_all_gather_seconds_by_hand():
    """K and V gathered in cp - 1 ring steps each, inside the node at 100 GB/s with 1 us a step; the backward
    gathers them again and reduce-scatters dK, dV: twice the forward. GQA 16 heads of 64, 4 KV heads, b 1,
    s 8192, cp 4, tp 2: a rank's K is 2,048 x 128 values."""
    a = gpt_architecture(num_layers=2, hidden_size=1024, num_attention_heads=16, vocab_size=1000, num_kv_heads=4)
    links = GroupLinks(100e9, 50e9, 1e-6, 5e-6, 8)
    fwd, bwd = CX.all_gather_s(_workload(a, cp=4, tp=2, comm="all_gather"), links)
    step = 2048 * 128 * 2 / 100e9 + 1e-6
    assert fwd == pytest.approx(2 * 3 * step) and bwd == pytest.approx(2 * fwd)


def test_the_ring_always_beats_the_all_gather_so_the_grid_drops_it():
    """Same bytes in two collectives instead of one, none hidden: where the ring runs, all_gather is never tried."""
    from fasop.estimators.analytic.recipes import parse_recipes, recipe_grid
    from fasop.plans.plan import Plan
    from fasop.specs.load import load_cluster
    node = load_cluster("aws").node_types["p5"]
    plan = Plan(tp=1, dp=1, pp=1, mbs=1, global_batch_size=1, placement=(node,), cp=8)
    llama = gpt_architecture(num_layers=2, hidden_size=4096, num_attention_heads=32, vocab_size=1000, num_kv_heads=8)
    r = parse_recipes({"recompute": ("none",)})
    assert {x.cp_comm for x in recipe_grid(r, plan, 2, False, arch=llama)} == {"p2p", "a2a"}
    gemma = _hf("gemma-3-27b-it.json")
    assert {x.cp_comm for x in recipe_grid(r, plan, 2, False, arch=gemma)} == {"a2a", "all_gather"}
    a = gpt_architecture(num_layers=2, hidden_size=4096, num_attention_heads=32, vocab_size=1000, num_kv_heads=8)
    links = GroupLinks(100e9, 50e9, 1e-6, 5e-6, 8)
    from fasop.estimators.analytic import parallel as P
    ring = P.cp_s(_workload(a, cp=4, tp=2, comm="p2p"), links, 0.0, 0.0)
    gather = CX.all_gather_s(_workload(a, cp=4, tp=2, comm="all_gather"), links)
    assert ring[0] < gather[0] and ring[1] < gather[1]   # even with no attention to hide behind


def test_full_attention_runs_both():
    llama = gpt_architecture(num_layers=80, hidden_size=8192, num_attention_heads=64, vocab_size=128256, num_kv_heads=8)
    assert llama.cp_comm_problem(8, 4, "p2p") == "" and CX.default_comm(llama, 4, 2) == "p2p"
    assert llama.cp_comm_problem(4, 2, "a2a") == ""
    assert llama.cp_comm_problem(4, 4, "a2a")               # 2 KV heads a rank do not split 4 ways


@pytest.mark.parametrize("seed", range(5))
def test_a2a_runs_exactly_where_both_head_counts_split_over_tp_x_cp(seed):
    """Generated GQA and MLA shapes: a2a is refused iff tp x cp does not divide the query heads or the KV heads
    (MLA: its per-head keys, as many as the queries); the ring's rule never looks at the heads."""
    import random
    rng = random.Random(seed)
    for _ in range(200):
        kv = rng.choice([1, 2, 4, 8, 16])
        heads = kv * rng.choice([1, 2, 3, 4, 8])
        a = gpt_architecture(num_layers=2, hidden_size=64 * heads, num_attention_heads=heads, vocab_size=100,
                             num_kv_heads=kv)
        tp, cp = rng.choice([1, 2, 4, 8]), rng.choice([2, 3, 4, 8, 16])
        assert bool(a.cp_comm_problem(tp, cp, "a2a")) == bool(heads % (tp * cp) or kv % (tp * cp))
        assert a.cp_comm_problem(tp, cp, "p2p") == ""
    mla = _hf("deepseek-v3.json")
    assert mla.cp_comm_problem(8, 16, "a2a") == "" and mla.cp_comm_problem(8, 32, "a2a")


def test_a_recipe_names_one_of_the_two():
    with pytest.raises(ValueError, match="cp_comm='ring'"):
        Recipe(cp_comm="ring")


# ----------------------------------------------------------------------------- search, explain, export
SEARCH = ["search", "--model", "gpt-oss-120b", "--cluster", "aws", "--nodes", "p5=4", "--seq-len", "32768",
          "--global-batch-size", "64", "--no-progress", "--show", "0", "--iterations", "1"]


def test_a_windowed_model_plans_cp_with_a2a_only(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(SEARCH + ["--cp", "1,2,4,8", "--top", "20", "--out", "o.csv"]) == 0
    rows = _rows("o.csv")
    assert {r["cp"] for r in rows} - {"1"}, "some kept plan uses CP"
    for r in rows:
        assert r["cp_comm"] == ("a2a" if r["cp"] != "1" else "")
        tp, cp = int(r["tp"]), int(r["cp"])
        assert (8 // tp) % cp == 0 or cp == 1     # only tp x cp whose KV heads split


def test_the_printed_table_says_each_plans_exchange(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    assert main(SEARCH[:-4] + ["--iterations", "1", "--cp", "1,8", "--top", "3", "--out", "t.csv"]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(line.split() for line in lines if line.startswith("rank"))
    assert header[header.index("cp") + 1] == "cp_comm"
    rows = [line.split() for line in lines if line.split()[:1] and line.split()[0].isdigit()]
    assert rows and all(r[header.index("cp_comm")] == ("a2a" if r[header.index("cp")] != "1" else "-") for r in rows)


def test_a_windowed_model_without_sinks_plans_a2a_or_all_gather(tmp_path, monkeypatch, capsys):
    """Gemma-3 27B at 64K (sliding windows, no sinks): the ring refused, a2a where its 16 KV heads split, all_gather
    at any cp; a row of each re-estimates, and the Megatron-LM export names its exchange."""
    monkeypatch.chdir(tmp_path)
    gemma = str(DATA / "hf" / "gemma-3-27b-it.json")
    base = ["search", "--model", gemma, "--cluster", "aws", "--nodes", "p5=4", "--seq-len", "65536",
            "--global-batch-size", "16", "--no-progress", "--show", "0", "--iterations", "1"]
    assert main(base + ["--cp", "2,4,8,16,32", "--every-plan", "--out", "g.csv"]) == 0
    rows = _rows("g.csv")
    assert {r["cp_comm"] for r in rows} == {"a2a", "all_gather"}
    assert all(r["cp_comm"] == "all_gather" for r in rows if 16 % (int(r["tp"]) * int(r["cp"])))   # a2a cannot split
    fit = [r for r in rows if r["is_oom"] == "False"]
    for comm in ("a2a", "all_gather"):
        row = min((r for r in fit if r["cp_comm"] == comm), key=lambda r: float(r["step_time_s"]))
        with open(f"{comm}.csv", "w", newline="") as fh:
            writer = csv.DictWriter(fh, list(row))
            writer.writeheader()
            writer.writerow(row)
        capsys.readouterr()
        assert main(["explain", "--from", f"{comm}.csv", "--model", gemma, "--cluster", "aws", "--json"]) == 0
        got = json.loads(capsys.readouterr().out)["step_time_s"]
        assert got == pytest.approx(float(row["step_time_s"]), rel=1e-5)
        assert main(["export", "--from", f"{comm}.csv", "--model", gemma, "--cluster", "aws", "--target", "megatron"]) == 0
        assert f"--cp-comm-type {comm}" in capsys.readouterr().out
        # torchtitan's CP all-gathers K and V (decoder_sharding.py @b5bcd76): a warning unless the row scored that
        assert main(["export", "--from", f"{comm}.csv", "--model", gemma, "--cluster", "aws", "--target", "torchtitan"]) == 0
        assert ("all-gathers K and V" in capsys.readouterr().err) == (comm != "all_gather")
    assert main(base + ["--cp", "2", "--cp-comm", "p2p", "--out", "x.csv"]) == 2   # the hint names both that may run
    assert "use --cp-comm a2a,all_gather" in capsys.readouterr().err


def test_all_gather_holds_k_v_and_their_gradients_whole_once():
    """One layer's backward holds K and V gathered whole and dK, dV at full length: 2 b s (k + v)/tp 16-bit values
    beside the stored activations, once a stage (not per layer or micro-batch in flight)."""
    from fasop.estimators.analytic.memory import stage_memory
    a = gpt_architecture(num_layers=4, hidden_size=1024, num_attention_heads=16, vocab_size=1000, num_kv_heads=4)
    ring, gather = (_workload(a, cp=4, tp=2, comm=c) for c in ("p2p", "all_gather"))
    extra = 2 * 1 * 8192 * (256 + 256) / 2 * 2
    assert CX.all_gather_buffer_bytes(gather) == extra
    for layers in (1, 3):
        assert stage_memory(gather, layers, 0).activations - stage_memory(ring, layers, 0).activations == extra


def test_the_ring_alone_on_a_windowed_model_is_one_clear_error(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(SEARCH + ["--cp", "2", "--cp-comm", "p2p", "--out", "x.csv"]) == 2
    err = capsys.readouterr().err
    assert "--cp-comm p2p" in err and "sliding-window" in err and "use --cp-comm a2a" in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "x.csv").exists()


def test_a_bad_exchange_name_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as err:
        main(SEARCH + ["--cp", "2", "--cp-comm", "ring", "--out", "x.csv"])
    assert err.value.code == 2 and "--cp-comm" in capsys.readouterr().err


def test_an_a2a_row_re_estimates_and_exports_its_exchange(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(SEARCH + ["--cp", "8", "--top", "1", "--out", "a.csv"]) == 0
    (row,) = _rows("a.csv")
    assert (row["cp"], row["cp_comm"]) == ("8", "a2a")
    capsys.readouterr()
    assert main(["explain", "--from", "a.csv", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["step_time_s"] == pytest.approx(float(row["step_time_s"]), rel=1e-5)
    assert main(["explain", "--from", "a.csv"]) == 0
    text = capsys.readouterr().out
    assert "cp 8 (a2a)" in text and "CP all-to-alls (a2a)" in text
    assert main(["export", "--from", "a.csv", "--target", "megatron"]) == 0
    assert "--context-parallel-size 8" in (out := capsys.readouterr().out) and "--cp-comm-type a2a" in out
    assert main(["export", "--from", "a.csv", "--target", "torchtitan"]) == 0
    assert "torchtitan's context parallelism all-gathers K and V" in capsys.readouterr().err


def test_the_ring_and_a2a_both_searched_on_full_attention(tmp_path, monkeypatch):
    """Llama-3-8B (32 heads, 8 KV heads) at 32K tokens: every kept CP plan says its exchange; --cp-comm a2a
    keeps only the tp x cp whose KV heads split, and the ring alone never writes a2a."""
    monkeypatch.chdir(tmp_path)
    base = ["search", "--model", "llama-3-8b", "--cluster", "aws", "--nodes", "p5=2", "--seq-len", "32768",
            "--global-batch-size", "16", "--cp", "2,4,8", "--every-plan", "--no-progress", "--show", "0",
            "--iterations", "1"]
    assert main(base + ["--out", "both.csv"]) == 0
    assert main(base + ["--cp-comm", "a2a", "--out", "a2a.csv"]) == 0
    assert main(base + ["--cp-comm", "p2p", "--out", "p2p.csv"]) == 0
    both, a2a, p2p = _rows("both.csv"), _rows("a2a.csv"), _rows("p2p.csv")
    assert {r["cp_comm"] for r in p2p} == {"p2p"} and {r["cp_comm"] for r in a2a} == {"a2a"}
    assert all((8 // int(r["tp"])) % int(r["cp"]) == 0 for r in a2a)
    assert len(p2p) > len(a2a)
    key = lambda r: tuple(r[c] for c in ("tp", "cp", "dp", "pp", "mbs", "node_placement"))  # noqa: E731
    best = {key(r): float(r["step_time_s"]) for r in both}
    for r in a2a + p2p:   # both allowed: each plan at the faster of the two
        assert best[key(r)] <= float(r["step_time_s"]) * (1 + 1e-9)


@pytest.mark.parametrize("command", ["explain", "export"])
def test_a_results_row_with_a_bad_exchange_is_refused(tmp_path, monkeypatch, capsys, command):
    """explain and export read a row's exchange alike: one TE refuses (or none, which is the ring such a row
    was scored with) is one line, exit 2; a padded cell is the value."""
    monkeypatch.chdir(tmp_path)
    assert main(SEARCH + ["--cp", "8", "--top", "1", "--out", "b.csv"]) == 0
    header, line = (tmp_path / "b.csv").read_text().splitlines()[:2]
    cells = line.split(",")
    at = header.split(",").index("cp_comm")
    more = ["--target", "megatron"] if command == "export" else []
    for value, message in (("ring", "cp_comm: expected p2p, a2a or all_gather"), ("p2p", "cp_comm: p2p: Transformer Engine's CP ring"),
                           ("", "cp_comm: p2p (the empty cell: Megatron-Core's default")):
        cells[at] = value
        (tmp_path / "b.csv").write_text(header + "\n" + ",".join(cells) + "\n")
        capsys.readouterr()
        assert main([command, "--from", "b.csv", *more]) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1
    cells[at] = " A2A "
    (tmp_path / "b.csv").write_text(header + "\n" + ",".join(cells) + "\n")
    assert main([command, "--from", "b.csv", *more]) == 0


def test_a_row_without_the_column_is_the_ring_it_was_scored_with(tmp_path, monkeypatch, capsys):
    """A CSV written before the column: explain re-estimates and export writes the ring, as it was scored."""
    monkeypatch.chdir(tmp_path)
    assert main(["search", "--model", "llama-3-8b", "--cluster", "aws", "--nodes", "p5=2", "--seq-len", "32768",
                 "--global-batch-size", "16", "--cp", "4", "--cp-comm", "p2p", "--top", "1", "--no-progress",
                 "--show", "0", "--iterations", "1", "--out", "r.csv"]) == 0
    (row,) = _rows("r.csv")
    with open("old.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, [c for c in row if c != "cp_comm"])
        writer.writeheader()
        writer.writerow({k: v for k, v in row.items() if k != "cp_comm"})
    capsys.readouterr()
    assert main(["explain", "--from", "old.csv", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["step_time_s"] == pytest.approx(float(row["step_time_s"]), rel=1e-5)
    assert main(["export", "--from", "old.csv", "--target", "megatron"]) == 0
    assert "--cp-comm-type p2p" in capsys.readouterr().out


def test_a_cp_degree_no_exchange_runs_is_refused(tmp_path, monkeypatch, capsys):
    """GPT-OSS's 8 KV heads do not split 16 ways and its windows refuse the ring: --cp 16 runs at no tp."""
    monkeypatch.chdir(tmp_path)
    assert main(SEARCH + ["--cp", "1,16", "--out", "x.csv"]) == 2
    err = capsys.readouterr().err
    assert "--cp: 16: no CP exchange allowed runs gpt-oss-120b at cp 16" in err and not (tmp_path / "x.csv").exists()


def test_recomputing_the_attention_core_runs_its_exchange_again():
    """selective:core_attn reruns TE's attention forward, CP exchange included (its all-to-alls, none hidden):
    the rerun on the group's links exceeds the rerun on free links by exactly one forward exchange."""
    a = gpt_architecture(num_layers=2, hidden_size=4096, num_attention_heads=32, vocab_size=32000, num_kv_heads=8)
    h100 = find_gpu("H100-SXM")
    links = GroupLinks(100e9, 50e9, 1e-6, 5e-6, 8)
    free = GroupLinks(float("inf"), float("inf"), 0.0, 0.0, 8)

    def rerun(on) -> float:
        bwd = {}
        for modules in ((), ("core_attn",)):
            w = C.Workload(arch=a, seq=32768, mbs=1, tp=1, dp=1, pp=1, num_microbatches=1, params=default_params(),
                           cp=4, recipe=Recipe(recompute="selective" if modules else "none", recompute_modules=modules,
                                               cp_comm="a2a"))
            bwd[modules] = C.layer_s(w, h100, None, on)[1]
        return bwd[("core_attn",)] - bwd[()]

    exchange = CX.a2a_s(_workload(a, cp=4, tp=1, seq=32768), links)[0]
    assert exchange > 0 and rerun(links) == pytest.approx(rerun(free) + exchange)


# ----------------------------------------------------------------------------- validate
HEADER = "name,model,gpu,num_gpus,tp,pp,cp,dp,ep,etp,zero,seq_len,global_batch_size,micro_batch_size,precision,recompute," \
         "measured_seconds_per_iter,cp_comm"


def _csv(tmp_path, row: str) -> Path:
    (tmp_path / "hf").mkdir(exist_ok=True)
    for name in ("gpt-oss-120b.json", "qwen3-30b-a3b.json", "gemma-3-27b-it.json"):
        (tmp_path / "hf" / name).write_text((DATA / "hf" / name).read_text())
    path = tmp_path / "runs.csv"
    path.write_text(HEADER + "\n" + row + "\n")
    return path


def test_validate_takes_the_exchange_a_row_states_or_the_one_its_model_runs(tmp_path):
    row = "g,hf/gpt-oss-120b.json,H100-SXM,16,1,1,2,8,8,1,1,32768,16,1,bf16,full,30,{}"
    empty = validate(_csv(tmp_path, row.format(""))).predictions[0]
    stated = validate(_csv(tmp_path, row.format("a2a"))).predictions[0]
    assert empty.row["predicted_seconds_per_iter"] == stated.row["predicted_seconds_per_iter"]
    assert empty.row["cp_comm"] == stated.row["cp_comm"] == "a2a"   # the output says which exchange was scored
    assert empty.row["cp_comm"] == stated.row["cp_comm"] == "a2a"   # the output says which exchange was scored
    q = "q,hf/qwen3-30b-a3b.json,H100-SXM,16,1,1,4,4,16,1,1,32768,16,1,bf16,full,30,{}"   # 32 heads, 4 KV heads
    ring = validate(_csv(tmp_path, q.format("p2p"))).predictions[0].row["predicted_seconds_per_iter"]
    a2a = validate(_csv(tmp_path, q.format("a2a"))).predictions[0].row["predicted_seconds_per_iter"]
    assert validate(_csv(tmp_path, q.format(""))).predictions[0].row["predicted_seconds_per_iter"] == ring
    assert ring != a2a
    g = "g,hf/gemma-3-27b-it.json,H100-SXM,32,1,1,32,1,1,1,3,65536,1,1,bf16,full,30,"   # 16 KV heads: not 32 ways
    assert validate(_csv(tmp_path, g)).predictions[0].row["cp_comm"] == "all_gather"
    # a measured run at a tp x cp no exchange of today's TE runs (GPT-OSS: sinks, 8 KV heads at cp 16) is scored as
    # Megatron-Core's default ring, not refused: the run happened
    o = "g,hf/gpt-oss-120b.json,H100-SXM,16,1,1,16,1,8,1,1,65536,16,1,bf16,full,30,"
    assert validate(_csv(tmp_path, o)).predictions[0].row["cp_comm"] == "p2p"


@pytest.mark.parametrize("row, message", [
    ("g,hf/gpt-oss-120b.json,H100-SXM,16,1,1,2,8,8,1,1,32768,16,1,bf16,full,30,p2p", "cp_comm: p2p: Transformer Engine"),
    ("q,hf/qwen3-30b-a3b.json,H100-SXM,16,2,1,4,2,4,1,1,32768,16,1,bf16,full,30,a2a", "cp_comm: a2a: a2a (Ulysses) CP"),
    ("q,hf/qwen3-30b-a3b.json,H100-SXM,16,1,1,2,8,8,1,1,32768,16,1,bf16,full,30,ring", "cp_comm: expected one of p2p, a2a"),
])
def test_validate_refuses_an_exchange_transformer_engine_refuses(tmp_path, row, message):
    with pytest.raises(Exception, match="line 2: ") as err:
        validate(_csv(tmp_path, row))
    assert message in str(err.value)
