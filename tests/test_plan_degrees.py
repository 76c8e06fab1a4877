"""Context, expert and expert-tensor parallelism in the search (issue 29, item 2): which degrees
are enumerated (Megatron-Core: world = tp*cp*dp*pp for attention, the expert groups etp x ep x edp
carved out of a stage's tp*cp*dp ranks), the defaults that cover them where the model calls for
them, the flags' one-line refusals, and the dense search left as it was.
"""

from __future__ import annotations

import csv
import itertools

import pytest

from fasop.cli.command import main
from fasop.plans.enumerate import degrees
from fasop.plans.space import DENSE, DegreeSpace, default_cp, degree_space
from fasop.specs.load import load_model


def test_degrees_on_four_gpus_counted_by_hand():
    """1 node of 4 GPUs, tp 1/2/4, global batch 2, 2 layers, cp 1/2, ep 1/2:
    tp1 cp1: dp2 pp2 (mbs 1) x ep 1,2 = 2; tp1 cp2: dp1 pp2 (mbs 1,2) x 2 = 4, dp2 pp1 (mbs 1) x 2 = 2;
    tp2 cp1: dp1 pp2 (mbs 1,2) x 2 = 4, dp2 pp1 x 2 = 2; tp2 cp2: dp1 pp1 (mbs 1,2) x 2 = 4;
    tp4 cp1: dp1 pp1 (mbs 1,2) x 2 = 4; tp4 cp2: 4/4 = 1 rank left, no cp 2. 22 in all."""
    space = DegreeSpace(cp=(1, 2), experts=((1, 1), (2, 1)))
    got = list(degrees(num_nodes=1, gpus_per_node=4, tp_degrees=(1, 2, 4), global_batch_size=2,
                       num_transformer_layers=2, space=space))
    assert len(got) == 22 and len(set(got)) == 22
    dense = list(degrees(num_nodes=1, gpus_per_node=4, tp_degrees=(1, 2, 4), global_batch_size=2,
                         num_transformer_layers=2))
    assert len(dense) == 6
    assert [c[:4] for c in got if c[4:] == (1, 1, 1)] == dense  # the dense plans, in FASOP's order


def test_degrees_are_exactly_megatron_cores_rule():
    """Every (tp, dp, pp, mbs, cp, ep, etp) with tp | G, tp*cp*dp*pp = W, pp <= layers, dp | batch,
    mbs | batch/dp, ep*etp | tp*cp*dp: no more, no fewer (brute force over all small degrees)."""
    space = DegreeSpace(cp=(1, 2, 4), experts=tuple((e, t) for e in (1, 2, 4, 8) for t in (1, 2)))
    n, g, batch, layers = 2, 8, 8, 6
    got = set(degrees(num_nodes=n, gpus_per_node=g, tp_degrees=(1, 2, 4, 8), global_batch_size=batch,
                      num_transformer_layers=layers, space=space))
    want = {(tp, dp, pp, mbs, cp, ep, etp)
            for tp, dp, pp, mbs, cp in itertools.product((1, 2, 4, 8), range(1, 17), range(1, 17), range(1, 9), (1, 2, 4))
            for ep, etp in space.experts
            if tp * cp * dp * pp == n * g and pp <= layers and not batch % dp and not (batch // dp) % mbs
            and not (tp * cp * dp) % (ep * etp)}
    assert got == want


def test_default_cp_covers_long_sequences_only():
    assert default_cp(8192) == (1,)
    assert default_cp(16384) == (1, 2, 4)
    assert default_cp(65536) == (1, 2, 4, 8, 16)
    assert default_cp(131072) == (1, 2, 4, 8, 16, 32)


def test_default_ep_is_every_divisor_of_the_experts():
    assert degree_space(load_model("llama-3-8b")) == DENSE
    qwen = degree_space(load_model("qwen3-30b-a3b"))  # 128 routed experts
    assert qwen.cp == (1,) and [ep for ep, _ in qwen.experts] == [1, 2, 4, 8, 16, 32, 64, 128]
    assert {etp for _, etp in qwen.experts} == {1}
    mixtral = degree_space(load_model("mixtral-8x7b"), etp=(1, 2))
    assert mixtral.experts == ((1, 1), (1, 2), (2, 1), (2, 2), (4, 1), (4, 2), (8, 1), (8, 2))


def test_divisors_in_order_for_any_count():
    """Every divisor once, increasing: squares (36, 49), primes, DeepSeek-V2's 160; and the 27 of 2^26 (the
    expert-count ceiling) without a loop over 2^26 counts."""
    from fasop.plans.space import divisors as listed
    divisors = lambda n: tuple(listed(n))  # noqa: E731
    assert divisors(1) == (1,) and divisors(97) == (1, 97) and divisors(49) == (1, 7, 49)
    assert divisors(36) == (1, 2, 3, 4, 6, 9, 12, 18, 36)
    assert divisors(160) == (1, 2, 4, 5, 8, 10, 16, 20, 32, 40, 80, 160)
    assert divisors(2 ** 26) == tuple(2 ** i for i in range(27))


@pytest.mark.parametrize("model, flags, words", [
    ("llama-3-8b", ["--cp", "3"], ["--cp: 3", "8192", "2 x 3"]),
    ("llama-3-8b", ["--ep", "2"], ["--ep:", "no experts"]),
    ("llama-3-8b", ["--etp", "2"], ["--etp:", "no experts"]),
    ("qwen3-30b-a3b", ["--ep", "1,3"], ["--ep: 3", "128 routed experts"]),
])
def test_bad_degrees_are_refused_in_one_line(tmp_path, monkeypatch, capsys, model, flags, words):
    monkeypatch.chdir(tmp_path)
    assert main(["search", "--model", model, "--cluster", "aws", "--nodes", "p5=1", "--no-progress",
                 "--out", "o.csv", *flags]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and all(w in err for w in words), err
    assert not (tmp_path / "o.csv").exists()


def test_degree_flags_need_the_analytic_estimator(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["search", "--model", "gpt2xl", "--cluster", "fasop-paper", "--nodes", "a100=1",
                 "--no-progress", "--cp", "2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--cp" in err and "takes no training recipe" in err
    with pytest.raises(SystemExit) as exc:  # argparse: not a degree
        main(["search", "--model", "llama-3-8b", "--cluster", "aws", "--nodes", "p5=1", "--cp", "0"])
    assert exc.value.code == 2 and "--cp: expected integers from 1" in capsys.readouterr().err


def _rows(path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_moe_search_enumerates_expert_parallelism(tmp_path, monkeypatch, capsys):
    """Qwen3-30B-A3B on two p5 nodes: every plan's ep divides the 128 experts and its stage's ranks,
    num_gpus = tp*cp*dp*pp, EDP = tp*cp*dp/(ep*etp); the fastest plans use EP."""
    monkeypatch.chdir(tmp_path)
    assert main(["search", "--model", "qwen3-30b-a3b", "--cluster", "aws", "--nodes", "p5=2", "--no-progress",
                 "--out", "moe.csv"]) == 0
    out = capsys.readouterr().out
    rows = _rows("moe.csv")
    assert {int(r["ep"]) for r in rows} == {1, 2, 4, 8, 16}  # 16 GPUs: ep <= a stage's ranks
    for r in rows:
        tp, cp, dp, pp, ep, etp = (int(r[c]) for c in ("tp", "cp", "dp", "pp", "ep", "etp"))
        assert tp * cp * dp * pp == int(r["num_gpus"]) == 16
        assert 128 % ep == 0 and (tp * cp * dp) % (ep * etp) == 0
        assert int(r["dp_shard"]) * int(r["dp_replicate"]) == dp
    assert int(rows[0]["ep"]) > 1
    assert "  ep  " in out.splitlines()[1]  # the printed table shows the ep column


def test_hsdp_shards_within_a_node(tmp_path, monkeypatch, capsys):
    """--hsdp on: the states sharded over the DP ranks of one node (8 / (tp*cp)), replicated
    across the 4 nodes' replicas; --zero 0 rows are plain DDP (dp_shard 1)."""
    monkeypatch.chdir(tmp_path)
    assert main(["search", "--model", "llama-3-8b", "--cluster", "aws", "--nodes", "p5=4", "--no-progress",
                 "--zero", "0,3", "--hsdp", "on", "--out", "h.csv"]) == 0
    for r in _rows("h.csv"):
        tp, cp, dp = (int(r[c]) for c in ("tp", "cp", "dp"))
        shard, replicate = int(r["dp_shard"]), int(r["dp_replicate"])
        if r["zero"] == "0":
            assert (shard, replicate) == (1, dp)
        elif dp > 8 // (tp * cp):
            assert (shard, replicate) == (8 // (tp * cp), dp * tp * cp // 8)
        else:  # the DP group fits in a node: HSDP is FSDP
            assert (shard, replicate) == (dp, 1)


def test_rates_of_node_types_named_with_a_dash(tmp_path, monkeypatch):
    """`p6-b200` holds the placement's separator: the mfu / tokens-per-GPU columns count the
    row's num_nodes_<type> columns instead of splitting node_placement (a KeyError before)."""
    monkeypatch.chdir(tmp_path)
    assert main(["search", "--model", "llama-3-8b", "--cluster", "aws", "--nodes", "p6-b200=1,p5=1", "--heterogeneous",
                 "--top", "2", "--no-progress", "--out", "b.csv"]) == 0
    rows = _rows("b.csv")
    assert rows and all(0 < float(r["mfu"]) < 1 for r in rows)
    assert all(float(r["tokens_per_s_per_gpu"]) == pytest.approx(float(r["tokens_per_s"]) / 16, rel=1e-5)  # 6 digits
               for r in rows)


@pytest.mark.parametrize("flags, asked, hint", [
    (["--ep", "16"], "ep x etp 16x1", "with ep = etp = 1 there are plans"),
    (["--ep", "8", "--etp", "2"], "ep x etp 8x2", "with ep = etp = 1 there are plans"),
    (["--cp", "16"], "cp 16", "with cp 1 there are plans"),
])
def test_no_valid_plan_names_the_degrees_asked_and_the_one_that_cannot_fit(tmp_path, capsys, flags, asked, hint):
    # one node of 8 H100: ep 16, ep 8 x etp 2 (16 ranks a stage) and cp 16 leave no plan; the line says which
    assert main(["search", "--model", "qwen3-30b-a3b", "--cluster", "aws", "--nodes", "p5=1", "--top", "1",
                 "--no-progress", "--out", str(tmp_path / "x.csv")] + flags) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no valid plan: 1 nodes (8 GPUs)" in err and f", {asked}," in err and hint in err
    assert not (tmp_path / "x.csv").exists()
