"""Issue 29's acceptance: every Megatron-LM flag and torchtitan key an export of an MoE, CP, FSDP,
MTP, hybrid latent-MoE, activation-offloading or block-recompute plan writes exists in the stock projects -- read from their sources, not
from a list of ours. The sources are git snapshots of NVIDIA/Megatron-LM and pytorch/torchtitan
(FASOP_MEGATRON_LM / FASOP_TORCHTITAN: a git directory; by default the workplace's mirrors); a
machine without them skips.

Megatron-LM: a flag is an `add_argument('--flag'` of megatron/training/arguments.py, or a field of a
config dataclass its ArgumentGroupFactory turns into `--field-name` (`--no-field-name` for a boolean
whose default is True, or the `arg_names` of the field's `argparse_meta`: argument_utils.py) -- TransformerConfig and its ModelParallelConfig base, the
training configs -- less the fields arguments.py excludes from the transformer factory. torchtitan: a
key `config.<section>.<name>` or `p.<name>` (parallelism) is a field of torchtitan/config/configs.py."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from fasop.cli.command import main

MEGATRON = Path(os.environ.get("FASOP_MEGATRON_LM", "/work/.mirror/NVIDIA+Megatron-LM/repo"))
TORCHTITAN = Path(os.environ.get("FASOP_TORCHTITAN", "/work/.mirror/pytorch+torchtitan/repo"))
CONFIG_FILES = ("megatron/core/transformer/transformer_config.py", "megatron/core/model_parallel_config.py",
                "megatron/training/config/common_config.py", "megatron/training/config/training_config.py",
                "megatron/training/config/resilience_config.py")

GB200 = str(Path(__file__).parent / "data" / "gb200_nvl72_cluster.yaml")
HYBRIDEP = str(Path(__file__).parent / "data" / "gb200_nvl72_hybridep_cluster.yaml")
TP_OVERLAP = str(Path(__file__).parent / "data" / "p5_tp_overlap_cluster.yaml")
# (model, search flags): plans whose exports carry the dimensions
PLANS = [
    ("deepseek-v3", ["--nodes", "p5=16,p6-b200=16", "--heterogeneous", "--mtp-layers", "1"]),   # EP, MTP, MLA, layout
    ("mixtral-8x7b", ["--nodes", "p5=4", "--etp", "1,2", "--cp", "1,2"]),                        # EP / ETP, CP
    ("llama-3-70b", ["--nodes", "p5=8", "--cp", "2", "--zero", "3", "--seq-len", "32768"]),      # CP, FSDP
    ("nemotron-3-super-120b-a12b", ["--nodes", "p6-b200=8"]),                                     # hybrid, latent MoE
    ("llama-3-70b", ["--cluster", GB200, "--nodes", "gb200=16", "--zero", "3", "--precision", "fp8",  # offloading
                     "--seq-len", "8192", "--global-batch-size", "128", "--offload-layers", "40"]),
    ("llama-3-70b", ["--nodes", "p5=8", "--recompute", "full", "--recompute-layers", "5"]),        # block recompute
    ("llama-3-8b", ["--nodes", "p6-b200=1", "--precision", "mxfp8"]),                              # MXFP8
    ("llama-3-8b", ["--nodes", "p6-b200=1", "--precision", "nvfp4", "--bf16-layers", "4"]),       # NVFP4, 16-bit layers
    ("mixtral-8x7b", ["--nodes", "p6-b200=2", "--precision", "mxfp8"]),                            # MXFP8 experts
    ("qwen3-30b-a3b", ["--cluster", HYBRIDEP, "--nodes", "gb200=4"]),                               # flex, EP overlap
    ("llama-3-70b", ["--cluster", TP_OVERLAP, "--nodes", "p5=4", "--sequence-parallel", "on"]),     # TP overlap
    ("llama-3-8b", ["--cluster", str(Path(__file__).parent / "data" / "p5_unfused_cluster.yaml"), "--nodes", "p5=1"]),
]


def _show(repo: Path, path: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "show", f"HEAD:{path}"], capture_output=True, text=True,
                          check=True).stdout


def _exports(tmp_path, monkeypatch, capsys, target: str) -> str:
    monkeypatch.chdir(tmp_path)
    text = ""
    for i, (model, flags) in enumerate(PLANS):
        out = f"p{i}.csv"
        cluster = [] if "--cluster" in flags else ["--cluster", "aws"]
        assert main(["search", "--model", model, *cluster, "--top", "1", "--out", out, *flags]) == 0
        capsys.readouterr()
        assert main(["export", "--from", out, "--target", target]) == 0
        text += capsys.readouterr().out
    return text


@pytest.mark.skipif(not (MEGATRON / "HEAD").exists() and not (MEGATRON / ".git").exists(),
                    reason="no Megatron-LM snapshot on this machine")
def test_every_megatron_flag_of_the_exports_exists(tmp_path, monkeypatch, capsys):
    text = _exports(tmp_path, monkeypatch, capsys, "megatron")
    flags = set(re.findall(r"^\s+(--[a-z0-9][a-z0-9-]*)", text, re.M))
    assert {"--expert-model-parallel-size", "--context-parallel-size", "--use-megatron-fsdp", "--ckpt-format",
            "--megatron-fsdp-main-grads-dtype",
            "--moe-latent-size", "--moe-router-num-groups", "--moe-router-group-topk", "--hybrid-layer-pattern", "--mtp-num-layers", "--cpu-offloading-num-layers", "--recompute-method",
            "--fp8-recipe", "--fp4-format", "--fp4-recipe", "--first-last-layers-bf16", "--num-layers-at-end-in-bf16",
            "--moe-token-dispatcher-type", "--moe-flex-dispatcher-backend", "--moe-flex-dispatcher-num-sms",
            "--moe-router-dtype", "--moe-permute-fusion", "--overlap-moe-expert-parallel-comm",
            "--overlap-grad-reduce", "--overlap-param-gather", "--tp-comm-overlap", "--no-gradient-accumulation-fusion",
            "--attention-backend"} <= flags
    arguments = _show(MEGATRON, "megatron/training/arguments.py")
    excluded = set(re.findall(r'^\s+"([a-z0-9_]+)",', arguments.split("transformer_factory = ")[0]
                              .rsplit("exclude = [", 1)[-1], re.M))
    fields, renamed = {}, set()
    for path in CONFIG_FILES:
        source = _show(MEGATRON, path)
        for name, default in re.findall(r"^    ([a-z][a-z0-9_]*): [^=\n]+(?:= *([^\n]*))?$", source, re.M):
            fields.setdefault(name, default.strip())
        renamed |= set(re.findall(r'"arg_names": \[([^\]]*)\]', source))   # a field's own flag name (argparse_meta)
    missing = []
    for flag in sorted(flags):
        name = flag[2:].replace("-", "_")
        negated = name.removeprefix("no_")
        as_field = (name in fields and name not in excluded) or \
            (negated != name and fields.get(negated, "").startswith("True") and negated not in excluded)
        named = any(f'"{flag}"' in names for names in renamed)
        if f"'{flag}'" not in arguments and f'"{flag}"' not in arguments and not as_field and not named:
            missing.append(flag)
    assert not missing, f"not in Megatron-LM's arguments: {missing}"


@pytest.mark.skipif(not (TORCHTITAN / "HEAD").exists() and not (TORCHTITAN / ".git").exists(),
                    reason="no torchtitan snapshot on this machine")
def test_every_torchtitan_key_of_the_exports_exists(tmp_path, monkeypatch, capsys):
    text = _exports(tmp_path, monkeypatch, capsys, "torchtitan")
    configs = _show(TORCHTITAN, "torchtitan/config/configs.py")
    fields = set(re.findall(r"^    ([a-z][a-z0-9_]*): ", configs, re.M))
    keys = set(re.findall(r"^\s+p\.([a-z0-9_]+) = ", text, re.M))
    keys |= set(re.findall(r"^\s+config\.(?!model_spec\.)[a-z_]+\.([a-z0-9_]+) = ", text, re.M))
    spec = set(re.findall(r"^\s+config\.model_spec\.([a-z0-9_]+) = ", text, re.M))   # a ModelSpec's fields
    assert spec == {"model"} and re.search(r"^    model: ", _show(TORCHTITAN, "torchtitan/protocols/model_spec.py"), re.M)
    assert re.search(r"^        model_spec: ", _show(TORCHTITAN, "torchtitan/trainer.py"), re.M)
    keys |= set(re.findall(r"--[a-z_]+\.([a-z0-9_]+)", text))
    assert {"context_parallel_degree", "expert_parallel_degree", "data_parallel_shard_degree"} <= keys
    missing = sorted(k for k in keys if k not in fields)
    assert not missing, f"not fields of torchtitan's configs: {missing}"
    # every class the exports import, and every argument they give its Config, exists where they import it from
    imports = {(module, name.strip()) for module, names in re.findall(r"from (torchtitan(?:\.\w+)+) import ([\w, ]+)", text)
               for name in names.split(",")}
    assert {("torchtitan.components.quantization", "MXFP8LinearConverter"),
            ("torchtitan.components.quantization", "MXFP8GroupedExpertsConverter")} <= imports
    base = _show(TORCHTITAN, "torchtitan/components/quantization/__init__.py")
    for module, name in sorted(imports):
        path = module.replace(".", "/")
        package = subprocess.run(["git", "-C", str(TORCHTITAN), "cat-file", "-e", f"HEAD:{path}.py"]).returncode
        source = _show(TORCHTITAN, f"{path}/__init__.py" if package else f"{path}.py")
        if package:   # a package re-exporting the class: follow its `from .x import (... name ...)`
            sub = re.search(rf"from \.(\w+) import \([^)]*\b{name}\b", source) or re.search(rf"from \.(\w+) import [^\n]*\b{name}\b", source)
            assert sub, f"{module} exports no {name}"
            source = _show(TORCHTITAN, f"{path}/{sub.group(1)}.py")
        assert re.search(rf"^class {name}\b", source, re.M), f"{module} has no class {name}"
        for call in re.findall(rf"{name}\.Config\(([^)]*)\)", text):
            for arg in re.findall(r"(\w+)=", call):
                assert re.search(rf"^\s+{arg}: ", source + base, re.M), f"{name}.Config has no field {arg}"
