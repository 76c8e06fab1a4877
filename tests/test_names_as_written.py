"""Names as people write them: GPUs (fasop/specs/gpu_names.py: the catalog's, its aliases, what tools print),
Megatron-Bridge's precision names and n/a cells in validate rows, spec names in another case."""

import csv
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fasop.core.errors import FasopError, SpecError
from fasop.specs.catalog import canonical, find_gpu, gpu_names
from fasop.specs.files import shipped_folder
from fasop.specs.load import load_cluster

DATA = Path(__file__).resolve().parent / "data"


@pytest.mark.parametrize("written, gpu", [
    ("H100", "H100-SXM"), ("DGX-H100", "H100-SXM"), ("NVIDIA H100 80GB HBM3", "H100-SXM"), ("h100-sxm5", "H100-SXM"),
    ("NVIDIA H100 PCIe", "H100-PCIe"), ("NVIDIA A100-SXM4-80GB", "A100-SXM4-80GB"), ("Tesla V100-SXM2-32GB", "V100-SXM2-32GB"),
    ("Tesla T4", "T4"), ("NVIDIA GeForce RTX 4090", "RTX-4090"), ("NVIDIA RTX A6000", "RTX-A6000"),
    ("AMD Instinct MI300X", "MI300X"), ("HGX B200", "B200"), ("DGX-GB200", "GB200"), ("DGX-GB300", "GB300"),
    ("NVIDIA DGX B300", "B300"), ("B300 SXM6 AC", "B300"),
])
def test_names_tools_and_tables_print_find_the_catalog_gpu(written, gpu):
    assert find_gpu(written).name == gpu


@pytest.mark.parametrize("written", ["NVIDIA", "DGX", "H300"])
def test_a_name_that_is_no_one_gpu_is_refused_with_the_catalogs_names(written):
    with pytest.raises(SpecError, match=rf"unknown GPU type '{written}' \(catalog: A100-SXM4-40GB, A100-SXM4-80GB"):
        find_gpu(written)


@pytest.mark.parametrize("written, could", [("A100", "A100-SXM4-40GB or A100-SXM4-80GB"), ("NVIDIA A100", "A100-SXM4-40GB or A100-SXM4-80GB"),
                                            ("V100", "V100-SXM2 or V100-SXM2-16GB or V100-SXM2-32GB or V100-PCIe")])
def test_a_name_two_parts_share_names_both(written, could):
    """`A100` is the 40 and the 80 GB part alike: the refusal names the two to choose from before the catalog."""
    with pytest.raises(SpecError, match=rf"unknown GPU type '{written}' \(could be {could}: name one; catalog: A100-SXM4-40GB"):
        find_gpu(written)


@pytest.mark.parametrize("written", ["A", "H20", "B2", "A10X"])
def test_a_name_that_starts_others_only_at_a_digit_names_none(written):
    """`H20` is no start of H200 (a digit follows: another part), nor `A` of A100 / A10: no "could be" list."""
    with pytest.raises(SpecError) as err:
        find_gpu(written)
    assert "could be" not in str(err.value)


@pytest.mark.parametrize("written, gpu", [("A100 80GB", "A100-SXM4-80GB"), ("A100-40GB", "A100-SXM4-40GB"),
                                          ("A100-SXM-80GB", "A100-SXM4-80GB"), ("H100 80GB", "H100-SXM"),
                                          ("H200 141GB", "H200"), ("B200 180GB", "B200"), ("B300-288GB", "B300")])
def test_a_name_with_its_memory_finds_the_part(written, gpu):
    """Tables name a part by its memory where the catalog names it by its module: the same GPU."""
    assert find_gpu(written).name == gpu


def test_an_alias_that_names_another_gpu_is_refused(tmp_path):
    text = (shipped_folder("cluster_specs") / "catalog" / "gpus.yaml").read_text()
    bad = tmp_path / "gpus.yaml"
    bad.write_text(text.replace("aliases: [B300 SXM6 AC,", "aliases: [B300 SXM6 AC, NVIDIA B200,"))
    with pytest.raises(SpecError, match=r"B300: aliases: 'NVIDIA B200' already names B200"):
        gpu_names(str(bad))


def test_every_shipped_alias_finds_its_gpu_and_adds_a_name():
    gpus = {g.name: g for g in gpu_names().values()}
    aliases = [(a, g) for g in gpus.values() for a in g.aliases]
    assert aliases, "the catalog ships aliases"
    for alias, gpu in aliases:
        assert find_gpu(alias) is gpu and canonical(alias) != canonical(gpu.name), alias


def test_a_cluster_spec_and_a_validate_row_may_name_the_gpu_as_nvidia_smi_does(tmp_path):
    text = (shipped_folder("cluster_specs") / "gcp.yaml").read_text().replace("gpu: H100-SXM", "gpu: NVIDIA H100 80GB HBM3")
    path = tmp_path / "smi.yaml"
    path.write_text(text)
    assert load_cluster(str(path)).node_types["a3-highgpu-8g"].gpu == "H100-SXM"
    rows = (DATA / "nemo_gpt3_175b_h100.csv").read_text().splitlines()
    head, first = rows[0], rows[1]
    assert ",H100-SXM," in first
    runs = tmp_path / "runs.csv"
    for name in ("H100-SXM", "DGX-H100"):
        runs.write_text(head + "\n" + first.replace(",H100-SXM,", f",{name},") + "\n")
        out = subprocess.run([sys.executable, "-m", "fasop", "validate", str(runs)], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        if name == "H100-SXM":
            same = out.stdout
    assert out.stdout == same


@pytest.mark.parametrize("written, precision", [("FP8-CS", "fp8"), ("fp8_ds", "fp8"), ("FP8-MX", "mxfp8"), ("MXFP8", "mxfp8"),
                                                ("FP8-SC", "fp8"), ("fp8_blockwise", "fp8"), ("bfloat16", "bf16"),
                                                ("fp8mx", "mxfp8"), ("FP8 CS", "fp8"), (" MXFP8 ", "mxfp8"),
                                                ("FP4", "nvfp4")])
def test_megatron_bridges_precision_names_are_the_precisions_they_run(tmp_path, written, precision):
    """A row transcribed from Megatron-Bridge's tables (FP8-CS, FP8-DS, FP8-MX) predicts as fasop's name for it."""
    rows = (DATA / "moe_megatron_bridge_perf_summary.csv").read_text().splitlines()
    head, row = rows[0], next(r for r in rows[1:] if r.startswith("Qwen3-30B-A3B GB200"))
    assert ",mxfp8," in row

    def predicted(cell):
        runs = tmp_path / "runs.csv"
        runs.write_text(head + "\n" + row.replace(",mxfp8,", f",{cell},") + "\n")
        shutil.copytree(DATA / "hf", tmp_path / "hf", dirs_exist_ok=True)
        out = tmp_path / "out.csv"
        done = subprocess.run([sys.executable, "-m", "fasop", "validate", str(runs), "--out", str(out)],
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return next(csv.DictReader(out.open()))

    got, same = predicted(written), predicted(precision)
    assert got["precision"] == precision and got["predicted_seconds_per_iter"] == same["predicted_seconds_per_iter"]


def test_a_precision_no_one_knows_is_refused_in_one_line(tmp_path):
    with (DATA / "nemo_gpt3_175b_h100.csv").open() as f:
        rows = list(csv.DictReader(f))
    runs = tmp_path / "runs.csv"
    with runs.open("w", newline="") as f:
        out = csv.DictWriter(f, fieldnames=list(rows[0]))
        out.writeheader()
        out.writerow(rows[0] | {"precision": "FP8-XX"})
    done = subprocess.run([sys.executable, "-m", "fasop", "validate", str(runs)], capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and not done.stdout
    assert "line 2: precision: expected one of bf16" in done.stderr and "'fp8-xx'" in done.stderr


def test_an_optional_cells_n_a_is_an_empty_cell_and_a_required_ones_is_refused(tmp_path):
    """Megatron-Bridge's tables print `n/a` for a degree a run does not use (VP without a pipeline, EP of a
    dense model): transcribed, it states nothing, as an empty cell; in a required column it is refused."""
    with (DATA / "moe_megatron_bridge_perf_summary.csv").open() as f:
        rows = list(csv.DictReader(f))
    shutil.copytree(DATA / "hf", tmp_path / "hf")

    def run(**cells):
        runs = tmp_path / "runs.csv"
        with runs.open("w", newline="") as f:
            out = csv.DictWriter(f, fieldnames=list(rows[0]))
            out.writeheader()
            out.writerow(rows[4] | cells)
        return subprocess.run([sys.executable, "-m", "fasop", "validate", str(runs)], capture_output=True, text=True)

    assert rows[4]["virtual_pp"] == "1" and rows[4]["pp"] == "1"
    empty, stated = run(virtual_pp="", mtp_layers=""), run(virtual_pp="n/a", mtp_layers="N/A")
    assert empty.returncode == stated.returncode == 0 and stated.stdout == empty.stdout
    refused = run(tp="n/a")
    assert refused.returncode == 2 and "line 2: tp: expected an integer, got 'n/a'" in refused.stderr


def test_a_spec_name_in_another_case_is_the_shipped_spec(tmp_path, monkeypatch):
    """`--model Qwen3-30B-A3B` (as the hub writes it) is the shipped `qwen3-30b-a3b`; `AWS` is `aws`; a name
    no spec has in any case is refused with the known names."""
    from fasop.specs.load import load_model
    assert load_model("Qwen3-30B-A3B") == load_model("qwen3-30b-a3b")
    assert load_cluster("AWS").node_types.keys() == load_cluster("aws").node_types.keys()
    with pytest.raises(SpecError, match=r"no spec named 'Qwen4' in model_specs/ \(known: bert, "):
        load_model("Qwen4")
    # a Hub repository id that is no path here names the shipped spec of its last part; one with no such spec is
    # refused naming both readings
    assert load_model("Qwen/Qwen3-30B-A3B") == load_model("qwen3-30b-a3b")
    assert load_model("deepseek-ai/DeepSeek-V3").name == "deepseek-v3"
    assert load_model("Qwen/Qwen2.5-7B").name == "qwen2.5-7b"               # a dot in the id is no file suffix
    with pytest.raises(SpecError, match=r"Qwen/Qwen4: no such file, nor a model_specs/ spec named 'Qwen4'"):
        load_model("Qwen/Qwen4")
    with pytest.raises(SpecError, match=r"a/b/qwen3-30b-a3b: no such file$"):   # a path of three parts: a path
        load_model("a/b/qwen3-30b-a3b")
    # a folder of the user's own specs is never read as a Hub organisation (its spec given without .yaml is a
    # missing file, not the shipped spec of that name), and clusters have no Hub
    (tmp_path / "mine").mkdir()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SpecError, match=r"mine/llama-3-8b: no such file$"):
        load_model("mine/llama-3-8b")
    with pytest.raises(SpecError, match=r"org/aws: no such file$"):
        load_cluster("org/aws")
    runs = tmp_path / "runs.csv"
    rows = (DATA / "moe_megatron_bridge_perf_summary.csv").read_text().splitlines()
    row = next(r for r in rows[1:] if r.startswith("Qwen3-30B-A3B GB200"))
    out = []
    for model in ("qwen3-30b-a3b", "Qwen3-30B-A3B"):
        runs.write_text(rows[0] + "\n" + row.replace("hf/qwen3-30b-a3b.json", model) + "\n")
        done = subprocess.run([sys.executable, "-m", "fasop", "validate", str(runs)], capture_output=True, text=True,
                              cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        out.append(done.stdout)
    assert out[0] == out[1]


def test_peak_tflops_keys_by_alias_tool_name_and_name_start():
    from types import SimpleNamespace

    from fasop.report.peaks import given_peaks
    cluster = SimpleNamespace(path="c.yaml", node_types={"p5": SimpleNamespace(gpu="H100-SXM"),
                                                         "g6": SimpleNamespace(gpu="L4"),
                                                         "p4": SimpleNamespace(gpu="A100-SXM4-80GB")})
    plan = {"H100-SXM": 8, "A100-SXM4-80GB": 8}
    for h100 in ("H100", "NVIDIA H100 80GB HBM3", "h100_sxm5"):      # aliases, nvidia-smi's name
        assert given_peaks({h100: 5e14}, plan, cluster) == {"H100-SXM": 5e14}
    assert given_peaks({"A100": 3e14}, plan, cluster) == {"A100-SXM4-80GB": 3e14}   # the start of its name
    assert given_peaks({"L4": 1e14}, plan, cluster) == {}                # the cluster's, not this plan's: no error
    with pytest.raises(FasopError, match=r"--peak-tflops: 'A10' names no GPU of c.yaml \(its GPUs: H100-SXM, "
                                         r"A100-SXM4-80GB, L4\)"):
        given_peaks({"A10": 1e14}, plan, cluster)                        # the catalog's A10, not in this cluster
    # a catalog name means that GPU only, whatever the order of the keys; an empty or two-way name is refused
    mixed = SimpleNamespace(path="m.yaml", node_types={k: SimpleNamespace(gpu=k) for k in
                                                       ("A10", "A10G", "H100-SXM", "H100-PCIe", "GB200", "GH200")})
    used = {"A10": 1, "A10G": 1, "H100-SXM": 8, "H100-PCIe": 8}
    for keys in ({"A10G": 2.0, "A10": 1.0}, {"A10": 1.0, "A10G": 2.0}):
        assert given_peaks(keys, used, mixed) == {"A10": 1.0, "A10G": 2.0}
    assert given_peaks({"H100": 5.0}, used, mixed) == {"H100-SXM": 5.0}   # the alias: not H100-PCIe
    with pytest.raises(FasopError, match=r"'G' could be GB200 or GH200: name one"):
        given_peaks({"G": 1.0}, used, mixed)
    with pytest.raises(FasopError, match=r"'_' names no GPU of m.yaml"):
        given_peaks({"_": 1.0}, used, mixed)


@pytest.mark.parametrize("written, name", [("GB200 NVL72", "GB200"), ("GB300 NVL72", "GB300"), ("B200 SXM", "B200"),
                                           ("H100 SXM5 80GB", "H100-SXM"), ("H200 SXM", "H200"), ("HGX B300", "B300"),
                                           ("NVIDIA B200", "B200"), ("DGX-B300", "B300")])
def test_blackwell_and_hopper_parts_as_tables_write_them(written, name):
    assert find_gpu(written).name == name
