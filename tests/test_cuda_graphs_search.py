"""CUDA graphs in search, explain and export (--cuda-graphs; issue 29's Grace-hosted GB200 / GB300):
what a run captures issues no kernel from the host (estimators/analytic/host.py), by hand on a
host-bound layer and through a whole search; the flag's one-line refusals (Megatron-Core's module
rules, the model's layers, full recompute beside per-layer graphs); the CSV column and explain's
re-estimate; the Megatron-LM flags (checked against Megatron-LM's own source where its snapshot is
on this machine) and torchtitan's `training.disable_cuda_graphs`."""

from __future__ import annotations

import csv
import json
import re
import subprocess
from pathlib import Path

import pytest

from fasop.cli.command import main
from fasop.estimators.analytic import cost as C
from fasop.estimators.analytic import host as H
from fasop.estimators.analytic.layers import Recipe
from fasop.specs.architecture import gpt_architecture
from fasop.specs.catalog import default_params, find_gpu
from fasop.specs.host_ops import search_scopes

DATA = Path(__file__).resolve().parent / "data"
GB200 = DATA / "gb200_nvl72_cluster.yaml"
P, GB = default_params(), find_gpu("GB200")
TINY = gpt_architecture(num_layers=4, hidden_size=256, num_attention_heads=4, vocab_size=32000, max_positions=128)
LAUNCH = 19.7e-6  # catalog GB200 kernel_launch_s: the tray's Grace host
SEARCH = ["search", "--model", "gpt2", "--cluster", str(GB200), "--nodes", "gb200=1", "--seq-len", "256",
          "--global-batch-size", "8", "--recompute", "none", "--zero", "0", "--no-progress", "--show", "0",
          "--every-plan"]


def _rows(path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def _layer(setting: str) -> tuple[float, float]:
    p = H.graphed(P, TINY, setting)
    w = C.Workload(arch=TINY, seq=128, mbs=1, tp=1, dp=1, pp=1, num_microbatches=1, recipe=Recipe(), params=p)
    return C.layer_s(w, GB, C.Link(100e9, 0.0))


def test_a_host_bound_layer_by_hand():
    """A 256-wide layer of 128 tokens takes microseconds on a B200; eager, its host issues the dense
    block's 20 forward and 40 backward kernels (analytic.yaml kernels_per_layer) at the Grace host's
    19.7 us each: 0.394 ms and 0.788 ms, the layer's time. Captured whole, the GPU's time alone; attn
    captured, half the dense block (10 and 20 kernels) is left to the host."""
    eager, whole, attn = _layer("none"), _layer("full_iteration"), _layer("attn")
    assert eager == pytest.approx((20 * LAUNCH, 40 * LAUNCH), rel=1e-12)
    assert attn == pytest.approx((10 * LAUNCH, 20 * LAUNCH), rel=1e-12)
    assert whole[0] < 20e-6 and whole[1] < 40e-6               # the GPU's own microseconds
    assert H.issue_s(H.graphed(P, TINY, "full_iteration"), GB) == (0.0, 0.0)


def test_a_search_costs_the_step_eager_and_graphed(tmp_path, monkeypatch):
    """gpt2 (12 layers) at 256 tokens on one GB200 tray, the tp1-dp4-pp1 plan at micro-batch 1 (2
    micro-batches a replica): eager, each layer pass is its 60 kernels at 19.7 us; graphed, its GPU time.
    The pipelines differ by exactly 2 x 12 x (60 x 19.7 us - the layer's GPU time); the column says which."""
    monkeypatch.chdir(tmp_path)
    assert main(SEARCH + ["--out", "eager.csv"]) == 0
    assert main(SEARCH + ["--out", "graphed.csv", "--cuda-graphs", "full_iteration"]) == 0
    pick = lambda rows: next(r for r in rows if (r["tp"], r["dp"], r["pp"], r["mbs"]) == ("1", "4", "1", "1"))  # noqa: E731
    eager, graphed = pick(_rows("eager.csv")), pick(_rows("graphed.csv"))
    assert (eager["cuda_graphs"], graphed["cuda_graphs"]) == ("none", "full_iteration")
    from fasop.specs.load import load_model
    a = load_model("gpt2").architecture
    p = H.graphed(P, a, "full_iteration")
    w = C.Workload(arch=a, seq=256, mbs=1, tp=1, dp=4, pp=1, num_microbatches=2, recipe=Recipe(), params=p)
    gpu = sum(C.layer_s(w, GB, C.Link(900e9, 0.0)))       # tp 1: the link is not used
    assert gpu < 60 * LAUNCH
    saved = 2 * 12 * (60 * LAUNCH - gpu)
    assert float(eager["pipeline_time_s"]) - float(graphed["pipeline_time_s"]) == pytest.approx(saved, rel=1e-4)
    assert float(graphed["step_time_s"]) < float(eager["step_time_s"])


@pytest.mark.parametrize("setting", ["full_iteration", "attn,moe_router,moe_preprocess"])
def test_a_graphed_top_k_is_the_every_plan_search_s_first_k(tmp_path, monkeypatch, setting):
    """The bounds that prune a --top search are the graphed estimator's own: it keeps the same plans."""
    monkeypatch.chdir(tmp_path)
    base = ["search", "--model", "qwen3-30b-a3b", "--cluster", str(GB200), "--nodes", "gb200=4", "--no-progress",
            "--show", "0", "--global-batch-size", "64", "--cuda-graphs", setting]
    assert main(base + ["--top", "4", "--out", "top.csv"]) == 0
    assert main(base + ["--every-plan", "--out", "all.csv"]) == 0
    fitting = [r for r in _rows("all.csv") if r["is_oom"] == "False"][:4]
    key = lambda r: (r["tp"], r["ep"], r["dp"], r["pp"], r["mbs"], r["recompute"], r["step_time_s"])  # noqa: E731
    assert [key(r) for r in _rows("top.csv")] == [key(r) for r in fitting]


@pytest.mark.parametrize("value, message", [
    ("attn,bogus", "expected none, full_iteration or a comma list of attn"),
    ("full_iteration,attn", "full_iteration stands alone"),
    ("moe,moe_router", "moe and moe_router exclude each other"),
    ("moe_preprocess", "moe_preprocess needs moe_router"),
    ("", "expected none, full_iteration"),
])
def test_bad_settings_are_one_line(tmp_path, monkeypatch, capsys, value, message):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        main(SEARCH + ["--out", "x.csv", "--cuda-graphs", value])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and message in err and err.count("\n") == 1 and not (tmp_path / "x.csv").exists()


@pytest.mark.parametrize("flags, message", [
    (["--cuda-graphs", "moe_router"], "--cuda-graphs: moe_router: the model has no layer it captures in"),
    (["--cuda-graphs", "mamba"], "--cuda-graphs: mamba: the model has no layer it captures in"),
    (["--cuda-graphs", "attn", "--recompute", "full"], "--recompute full: Megatron-Core recomputes whole layers only"),
])
def test_what_the_model_or_recipe_cannot_capture_is_one_line(tmp_path, monkeypatch, capsys, flags, message):
    monkeypatch.chdir(tmp_path)
    base = [f for f in SEARCH if f not in ("--recompute", "none")] if "--recompute" in flags else SEARCH
    assert main(base + ["--out", "x.csv"] + flags) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err and not (tmp_path / "x.csv").exists()


def test_per_layer_graphs_drop_full_recompute_from_the_default(tmp_path, monkeypatch):
    """Megatron-Core refuses full recompute beside per-layer graphs: the default none,full tries none
    only (--every-plan: every row, none of them full); a whole-iteration graph takes full recompute."""
    monkeypatch.chdir(tmp_path)
    base = [f for f in SEARCH if f not in ("--recompute", "none")]
    assert main(base + ["--out", "a.csv", "--cuda-graphs", "attn,mlp"]) == 0
    assert main(base + ["--out", "w.csv", "--cuda-graphs", "full_iteration", "--recompute", "full"]) == 0
    assert {(r["recompute"], r["cuda_graphs"]) for r in _rows("a.csv")} == {("none", "attn,mlp")}
    assert {(r["recompute"], r["cuda_graphs"]) for r in _rows("w.csv")} == {("full", "full_iteration")}


def test_the_flag_needs_the_analytic_estimator(tmp_path, capsys):
    assert main(["search", "--model", "bert", "--cluster", "fasop-paper", "--nodes", "a100=1", "--cuda-graphs",
                 "full_iteration", "--out", str(tmp_path / "x.csv")]) == 2
    assert "--cuda-graphs: the fasop-2024 estimator" in capsys.readouterr().err


def test_scope_spelling_is_sorted_and_one():
    assert search_scopes("moe_router, attn,moe_preprocess") == (("attn", "moe_preprocess", "moe_router"), "")
    assert search_scopes("NONE") == ((), "") and search_scopes("full_iteration") == (("full_iteration",), "")


@pytest.fixture(scope="module")
def graphed_rows(tmp_path_factory):
    out = tmp_path_factory.mktemp("g") / "g.csv"
    assert main(["search", "--model", "qwen3-30b-a3b", "--cluster", str(GB200), "--nodes", "gb200=2", "--no-progress",
                 "--show", "0", "--top", "3", "--cuda-graphs", "attn,moe_router,moe_preprocess", "--out", str(out)]) == 0
    return out, _rows(out)


def test_explain_re_estimates_the_graphed_row_and_says_so(graphed_rows, capsys):
    out, rows = graphed_rows
    row = rows[0]
    base = ["--from", str(out), "--rank", row["rank"], "--model", "qwen3-30b-a3b", "--cluster", str(GB200)]
    capsys.readouterr()
    assert main(["explain", *base, "--json"]) == 0
    x = json.loads(capsys.readouterr().out)
    assert x["step_time_s"] == pytest.approx(float(row["step_time_s"]), rel=5e-6)
    assert x["cuda_graphs"] == "attn,moe_preprocess,moe_router"
    assert main(["explain", *base]) == 0
    assert "CUDA graphs attn,moe_preprocess,moe_router" in capsys.readouterr().out.splitlines()[1]


def test_an_eager_moe_search_on_gb200_says_how_to_plan_it_graphed(tmp_path, monkeypatch, capsys):
    """GB200's published MoE runs capture graphs (catalog validate_software): an eager search says so once."""
    monkeypatch.chdir(tmp_path)
    base = ["search", "--model", "qwen3-30b-a3b", "--cluster", str(GB200), "--nodes", "gb200=2", "--no-progress",
            "--show", "0", "--top", "1", "--out", "x.csv"]
    assert main(base) == 0
    assert capsys.readouterr().out.count("note: planned eager; GB200 MoE runs are published captured") == 1
    assert main(base + ["--cuda-graphs", "none"]) == 0 and "planned eager" not in capsys.readouterr().out
    assert main(SEARCH + ["--out", "d.csv"]) == 0 and "planned eager" not in capsys.readouterr().out  # dense


def _megatron(out: Path, rank: str, capsys, model: str = "qwen3-30b-a3b") -> tuple[str, str]:
    capsys.readouterr()
    assert main(["export", "--from", str(out), "--rank", rank, "--model", model, "--cluster", str(GB200),
                 "--target", "megatron"]) == 0
    captured = capsys.readouterr()
    return captured.out, captured.err


def test_megatron_flags_of_per_layer_graphs(graphed_rows, capsys):
    out, rows = graphed_rows
    text, _ = _megatron(out, rows[0]["rank"], capsys)
    for flag in ("--cuda-graph-impl transformer_engine", "--cuda-graph-modules attn moe_preprocess moe_router",
                 "--te-rng-tracker"):
        assert f"    {flag}\n" in text
    assert "--cuda-graph-scope" not in text and "--no-check-for-nan-in-loss-and-grad" not in text


def test_megatron_flags_of_a_whole_iteration_and_the_moe_warning(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(SEARCH + ["--out", "d.csv", "--cuda-graphs", "full_iteration", "--top", "1"]) == 0
    text, err = _megatron(tmp_path / "d.csv", _rows("d.csv")[0]["rank"], capsys, "gpt2")
    assert all(f"    {f}\n" in text for f in ("--cuda-graph-impl full_iteration", "--no-check-for-nan-in-loss-and-grad",
                                              "--te-rng-tracker"))
    assert "--cuda-graph-modules" not in text and "warning" not in err     # a dense model: nothing to warn
    assert main(["search", "--model", "qwen3-30b-a3b", "--cluster", str(GB200), "--nodes", "gb200=2", "--no-progress",
                 "--show", "0", "--top", "1", "--cuda-graphs", "full_iteration", "--out", "m.csv"]) == 0
    text, err = _megatron(tmp_path / "m.csv", _rows("m.csv")[0]["rank"], capsys)
    assert "--cuda-graph-impl full_iteration" in text and "--moe-expert-rank-capacity-factor 1.5" in err


def test_torchtitan_says_whether_to_capture(tmp_path, monkeypatch, capsys):
    """torchtitan's HEAD captures fwd+bwd unless training.disable_cuda_graphs; it refuses capture with pp > 1."""
    monkeypatch.chdir(tmp_path)
    assert main(SEARCH + ["--out", "e.csv"]) == 0
    assert main(SEARCH + ["--out", "g.csv", "--cuda-graphs", "full_iteration"]) == 0

    def recipe(path, rows, pp):
        row = next(r for r in rows if r["pp"] == pp)
        capsys.readouterr()
        assert main(["export", "--from", path, "--rank", row["rank"], "--model", "gpt2", "--cluster", str(GB200),
                     "--target", "torchtitan"]) == 0
        captured = capsys.readouterr()
        return re.search(r"config.training.disable_cuda_graphs = (\w+)", captured.out).group(1), captured.err

    assert recipe("e.csv", _rows("e.csv"), "1")[0] == "True"
    assert recipe("g.csv", _rows("g.csv"), "1") == ("False", "")
    value, err = recipe("g.csv", _rows("g.csv"), "2")
    assert value == "True" and "torchtitan captures no graph with pipeline parallelism" in err


MEGATRON = Path("/work/.mirror/NVIDIA+Megatron-LM/repo")


def _stock(path: str) -> str:
    return subprocess.run(["git", "-C", str(MEGATRON), "show", f"HEAD:{path}"], capture_output=True, text=True,
                          check=True).stdout


@pytest.mark.skipif(not MEGATRON.exists(), reason="Megatron-LM's snapshot is not on this machine")
def test_every_graph_flag_exists_in_megatron_lm(graphed_rows, tmp_path, monkeypatch, capsys):
    """Each flag the export writes for graphs is an add_argument of arguments.py or a field of a config
    dataclass its ArgumentGroupFactory turns into `--field-name` (TransformerConfig, RNGConfig), and
    every value is one of the field's Literal / CudaGraphModule names."""
    out, rows = graphed_rows
    text = _megatron(out, rows[0]["rank"], capsys)[0]
    monkeypatch.chdir(tmp_path)
    assert main(SEARCH + ["--out", "d.csv", "--cuda-graphs", "full_iteration", "--top", "1"]) == 0
    text += _megatron(tmp_path / "d.csv", _rows("d.csv")[0]["rank"], capsys, "gpt2")[0]
    arguments = _stock("megatron/training/arguments.py")
    config = _stock("megatron/core/transformer/transformer_config.py")
    fields = config + _stock("megatron/training/config/common_config.py")
    enums = _stock("megatron/core/transformer/enums.py")
    flags = {line.split()[0]: line.split()[1:] for line in text.splitlines()
             if line.startswith("    --") and ("graph" in line or "rng" in line or "nan" in line)}
    assert set(flags) == {"--cuda-graph-impl", "--cuda-graph-modules", "--te-rng-tracker",
                          "--no-check-for-nan-in-loss-and-grad"}
    for flag in flags:
        field = flag[2:].replace("-", "_")
        assert f"'{flag}'" in arguments or re.search(rf"^    {field}: ", fields, re.M), flag
    impl = re.search(r"^    cuda_graph_impl: Literal\[([^\]]*)\]", config, re.M).group(1)
    assert {"'transformer_engine'", "'full_iteration'"} <= set(v.strip() for v in impl.split(","))
    modules = enums.split("class CudaGraphModule")[1].split("class ")[0]
    assert all(re.search(rf"^    {m} = \d", modules, re.M) for m in ("attn", "moe_router", "moe_preprocess"))


def test_the_plan_by_flags_takes_the_setting_and_a_csv_row_keeps_its_own(graphed_rows, capsys):
    """explain / export --placement ... --cuda-graphs: the plan estimated as captured (tp 4 at micro-batch 1
    is host-bound on the Grace trays); beside --from it is refused in one line (the row says what it was)."""
    plan = ["--model", "qwen3-30b-a3b", "--cluster", str(GB200), "--placement", "gb200-gb200", "--tp", "4",
            "--dp", "2", "--global-batch-size", "64", "--json"]
    times = {}
    for setting in ("none", "full_iteration"):
        capsys.readouterr()
        assert main(["explain", *plan, "--cuda-graphs", setting]) == 0
        x = json.loads(capsys.readouterr().out)
        times[setting] = x["step_time_s"]
        assert x["cuda_graphs"] == setting
    assert times["full_iteration"] < 0.8 * times["none"]
    assert main(["export", *plan[:-1], "--cuda-graphs", "attn,moe_router", "--target", "megatron"]) == 0
    assert "    --cuda-graph-modules attn moe_router\n" in capsys.readouterr().out
    out, rows = graphed_rows
    assert main(["explain", "--from", str(out), "--rank", "1", "--model", "qwen3-30b-a3b", "--cluster", str(GB200),
                 "--cuda-graphs", "none"]) == 2
    err = capsys.readouterr().err
    assert "--cuda-graphs: for the plan by flags" in err and err.count("\n") == 1
    assert main(["explain", "--model", "gpt2xl", "--cluster", "fasop-paper", "--placement", "a100-a10-a10-a10",
                 "--dp", "4", "--cuda-graphs", "full_iteration"]) == 2
    assert "--cuda-graphs: the fasop-2024 estimator" in capsys.readouterr().err


def test_an_eager_setting_keeps_the_params_object_the_estimators_share():
    """A sweep's estimators share their tables by the params object (workloads.shared_tables): an
    eager --cuda-graphs (the default) must not make a new one (it did: the Llama-3-70B CP / FSDP
    search's seed and tree each built their own Workloads, 4.2 s CPU instead of 3.1)."""
    from fasop.estimators.analytic import host
    from fasop.specs.catalog import default_params
    from fasop.specs.load import load_model
    params, arch = default_params(), load_model("llama-3-8b").architecture
    assert host.graphed(params, arch, "none") is params
    graphed = host.graphed(params, arch, "full_iteration")
    assert graphed is not params and graphed.host.graphed == ("full_iteration",)
    assert host.graphed(graphed, arch, "full_iteration") is graphed


def test_a_graphed_module_saves_host_time_only_in_the_layers_it_captures_in():
    """attn captures attention (not a Mamba mixer nor a lone experts sublayer), mlp dense MLPs, moe the
    experts side, mamba the Mamba mixer (Megatron-Core CudaGraphModule); full_iteration everything."""
    from fasop.specs.catalog import default_params, find_gpu
    from fasop.specs.hf_config import architecture_from_config, read_config
    a = architecture_from_config(read_config(Path(__file__).parent / "data" / "hf" / "nemotron-3.5-lightning-30b-a3b.json"),
                                 "lightning")
    assert {"mamba", "attention", "experts"} <= set(a.kinds)
    p, gpu = default_params(), find_gpu("GB200")
    issue = lambda setting, kind: sum(H.kind_issue_s(H.graphed(p, a, setting), gpu, a, kind))  # noqa: E731
    eager = {k: issue("none", k) for k in ("mamba", "attention", "experts")}
    assert issue("attn", "mamba") == eager["mamba"] and issue("attn", "experts") == eager["experts"]
    assert issue("attn", "attention") < eager["attention"]
    assert issue("mamba", "mamba") < eager["mamba"] and issue("mamba", "attention") == eager["attention"]
    dense_mamba = sum(k * H.kernel_launch_s(p, gpu) for k in p.kernels_per_layer)  # a mixer's whole dense-block issue
    assert eager["mamba"] - issue("mamba", "mamba") == pytest.approx(dense_mamba)
    assert issue("full_iteration", "mamba") == 0.0
