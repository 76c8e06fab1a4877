"""A FASOP model spec's profile: its per-layer CSV and the micro-batch scaling tables."""

from __future__ import annotations

from pathlib import Path

from fasop.core import limits
from fasop.specs.files import read_profile_csv, show
from fasop.specs.reader import Reader
from fasop.specs.types import Profile, ScalingTable


def read_profile(path: Path, r: Reader, kinds: tuple[str, ...]) -> Profile:
    file = path.parent / r.get("file", str)
    factor = r.number("fwd_bwd_factor", (int, float), *limits.FACTOR)
    scaling_reader = r.sub("microbatch_scaling")
    r.done()
    forward = read_profile_csv(file, len(kinds))
    scaling = {}
    for gpu in scaling_reader.data:
        per_gpu = scaling_reader.sub(gpu)
        for kind in per_gpu.data:
            if kind not in kinds:
                raise per_gpu.error(kind, f"no layer of this kind in the layer list {sorted(set(kinds))}")
            scaling[(gpu, kind)] = _scaling_table(per_gpu.sub(kind, ("points", "beyond")))
        per_gpu.done()
    scaling_reader.done()
    for gpu, _tp in forward:
        for kind in sorted(set(kinds)):
            if (gpu, kind) not in scaling:
                raise scaling_reader.error(f"{gpu}.{kind}", "missing: every profiled GPU needs a table per layer kind")
    return Profile(forward_s=forward, fwd_bwd_factor=float(factor), scaling=scaling)


def _scaling_table(r: Reader) -> ScalingTable:
    raw = r.get("points", dict)
    beyond = r.get("beyond", str, check=lambda v: v in ("proportional", "constant"), why="proportional or constant")
    r.done()
    points = Reader(r.path, raw, r.qualified("points"))
    low, high = limits.FACTOR
    for b, value in raw.items():
        if not isinstance(b, int) or isinstance(b, bool) or not 1 <= b <= limits.GLOBAL_BATCH_SIZE:
            raise points.error(b, f"micro-batch sizes must be integers from 1 to {limits.GLOBAL_BATCH_SIZE:,}")
        factors = value if isinstance(value, list) else [value]
        if not 1 <= len(factors) <= limits.SCALING_FACTORS or not all(
                isinstance(f, (int, float)) and not isinstance(f, bool) and low <= f <= high for f in factors):
            raise points.error(b, f"must be a number from {low:g} to {high:g} or a list of 1 to "
                               f"{limits.SCALING_FACTORS} of them, got {show(value)}")
    if not raw:
        raise r.error("points", "needs at least one entry")
    table = tuple((b, tuple(float(f) for f in (v if isinstance(v, list) else [v]))) for b, v in sorted(raw.items()))
    return ScalingTable(points=table, beyond=beyond)
