"""YaRN's attention factor and Megatron-Core's unfused RoPE (docs/estimators.md "YaRN RoPE, unfused"):
the factor from config.json by Megatron-Core's rule, the bytes hand-counted, the step slower by them."""

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

from fasop.core.errors import SpecError
from fasop.estimators.analytic import eager as E
from fasop.specs.hf_config import architecture_from_config, read_config

HF = Path(__file__).resolve().parents[1] / "fasop" / "data" / "model_specs" / "hf"


def arch(name, **changes):
    cfg = read_config(HF / f"{name}.json")
    cfg.update(changes)
    return architecture_from_config(cfg, name)


def test_yarn_factor_by_megatron_cores_rule():
    # gpt-oss: factor 32, no mscale keys -> 0.1 ln 32 + 1 (yarn_rotary_pos_embedding.py)
    assert arch("gpt-oss-120b").rope_mscale == pytest.approx(0.1 * math.log(32) + 1)   # 1.3466
    # DeepSeek-V3: factor 40 with mscale = mscale_all_dim = 1 -> their ratio, 1
    assert arch("deepseek-v3").rope_mscale == 1.0
    # mscale 0.707 against mscale_all_dim 1 at factor 4: (0.0707 ln 4 + 1) / (0.1 ln 4 + 1)
    a = arch("gpt-oss-120b", rope_scaling={"rope_type": "yarn", "factor": 4, "mscale": 0.707, "mscale_all_dim": 1})
    assert a.rope_mscale == pytest.approx((0.0707 * math.log(4) + 1) / (0.1 * math.log(4) + 1))
    assert arch("gpt-oss-120b", rope_scaling=None).rope_mscale == 1.0
    assert arch("gpt-oss-120b", rope_scaling={"rope_type": "yarn", "factor": 1.0}).rope_mscale == 1.0
    assert arch("qwen3-30b-a3b").rope_mscale == 1.0


def test_bad_yarn_factor_names_the_key():
    with pytest.raises(SpecError, match="rope_scaling.factor"):
        arch("gpt-oss-120b", rope_scaling={"rope_type": "yarn", "factor": "big"})


def test_unfused_rope_bytes_hand_counted():
    a = arch("gpt-oss-120b")          # q 64 x 64 = 4096, kv 8 x 64 = 512, every layer attention
    # (12 - 2) bytes per value byte x 2 (bf16) x b s = 4 x 4096 x (4096 + 512), one TP rank
    assert E.unfused_rope_extra_bytes(a, 4, 4096, 1, 2) == 10 * 2 * 4 * 4096 * 4608 == 1_509_949_440
    assert E.unfused_rope_extra_bytes(a, 4, 4096, 2, 2) == 1_509_949_440 / 2
    assert E.unfused_rope_extra_bytes(replace(a, rope_mscale=1.0), 4, 4096, 1, 2) == 0.0
    assert E.unfused_rope_extra_bytes(arch("deepseek-v3"), 4, 4096, 1, 2) == 0.0


def test_validate_row_slower_by_the_rope_bytes(tmp_path):
    """The GPT-OSS perf_summary row predicts slower with the factor than without, and by about the
    bytes over the GPU's memory rate (forward + 2 x in the backward, 36 layers x 5 micro-batches)."""
    from fasop.report.validate import validate
    data = Path(__file__).resolve().parent / "data"
    rows = [line for line in (data / "moe_megatron_bridge_perf_summary.csv").read_text().splitlines()
            if line.startswith(("name,", "GPT-OSS-120B GB200"))]
    (tmp_path / "hf").mkdir()
    cfg = json.loads((data / "hf" / "gpt-oss-120b.json").read_text())
    (tmp_path / "hf" / "gpt-oss-120b.json").write_text(json.dumps(cfg))
    (tmp_path / "yarn.csv").write_text("\n".join(rows) + "\n")
    cfg["rope_scaling"] = None
    (tmp_path / "hf" / "plain.json").write_text(json.dumps(cfg))
    (tmp_path / "plain.csv").write_text("\n".join(rows).replace("hf/gpt-oss-120b.json", "hf/plain.json") + "\n")
    slow = validate(tmp_path / "yarn.csv").predictions[0].row["predicted_seconds_per_iter"]
    fast = validate(tmp_path / "plain.csv").predictions[0].row["predicted_seconds_per_iter"]
    extra = 3 * 36 * 5 * 1_509_949_440 / 8e12     # at GB200's 8 TB/s peak: the share only raises it
    assert extra <= slow - fast <= extra / 0.7
