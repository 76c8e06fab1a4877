"""The analytic estimator's recipe options: what a search tries when not told, the allowed values
checked, and low precisions dropped where the inventory has no tensor cores for them."""

from __future__ import annotations

from fasop.core.errors import FasopError
from fasop.estimators.analytic.layers import PRECISIONS, RECOMPUTES, ZERO_STAGES

DEFAULTS = {"recompute": ("none", "full"), "zero": (1,), "sequence_parallel": (True,), "virtual_stages": (1,),
            "precision": ("bf16",), "hsdp": (False,)}
"""What a search tries when not told: no recompute and full recompute (the faster that fits; under
FlashAttention selective recompute keeps what no recompute keeps at no gain, and full recompute
lets bigger micro-batches or fewer stages fit: docs/analytic.md, "Default recipe"), the distributed
optimizer, sequence parallelism with tp > 1, no interleaving, bf16, no HSDP."""


def parse_recipes(options: dict) -> dict:
    """The allowed recipe values from the search options (defaults: DEFAULTS), checked."""
    out = {}
    for key, default in DEFAULTS.items():
        values = tuple(dict.fromkeys(options.get(key) or default))
        allowed = {"recompute": RECOMPUTES, "zero": ZERO_STAGES, "sequence_parallel": (False, True),
                   "precision": PRECISIONS, "hsdp": (False, True)}.get(key)
        bad = [v for v in values if (allowed is not None and v not in allowed)
               or (key == "virtual_stages" and not (isinstance(v, int) and v >= 1))]
        if bad:
            raise FasopError(f"--{key.replace('_', '-')}: {bad[0]!r} is not one of "
                             f"{', '.join(map(str, allowed or ('integers >= 1',)))}")
        out[key] = values
    return out


def without_missing_units(recipes: dict, gpus: list, low: str = "fp8") -> dict:
    """`recipes` with fp8 (or `low`: mxfp8, nvfp4) dropped where a GPU of the inventory has no such
    tensor cores (catalog fp8_tflops null: A100, A10G, V100, ...; mxfp8 / nvfp4: all but Blackwell):
    every plan uses every node, so no plan of it could train so (its CSV's precision column then
    never says it). That precision alone: a one-line error."""
    lacking = sorted({g.name for g in gpus if g.peak_flops.get(low) is None})
    if not lacking:
        return recipes
    if recipes["precision"] == (low,):
        units = "FP8" if low == "fp8" else low.upper()
        raise FasopError(f"--precision {low}: {', '.join(lacking)} has no {units} tensor cores (the GPU catalog's "
                         f"{low}_tflops is null); use --precision bf16, or nodes with {units} "
                         f"({'H100, H200, L4, ...' if low == 'fp8' else 'B200, B300, GB200, GB300'})")
    return recipes | {"precision": tuple(p for p in recipes["precision"] if p != low)}
