"""The dense peak FLOP/s an explained plan's MFU divides by: the hardware catalog's, or `--peak-tflops`
as the user names the GPUs (fasop.specs.gpu_names: a catalog name, an alias, what nvidia-smi prints)."""

from __future__ import annotations

from pathlib import Path

from fasop.core.errors import FasopError
from fasop.specs.catalog import find_gpu, gpu_names
from fasop.specs.gpu_names import canonical, starts


def catalog_peaks(gpus, precision: str) -> dict[str, float]:
    """Dense peak FLOP/s of each GPU type the hardware catalog knows, in `precision`, else its 16-bit peak."""
    out = {}
    for name in gpus:
        try:
            peaks = find_gpu(name).peak_flops
        except FasopError:
            continue
        peak = peaks.get(precision) or peaks.get("bf16") or peaks.get("fp16")
        if peak:
            out[name] = peak
    return out


def given_peaks(given: dict[str, float], gpus, cluster) -> dict[str, float]:
    """--peak-tflops keyed by the plan's GPUs (`gpus`). A name the catalog knows (a GPU's name in any case, an
    alias, a tool's name: gpu_names) means that GPU only (`H100`: H100-SXM, not H100-PCIe; `A10`: not A10G);
    another, the one GPU of the cluster it is the start of up to a non-digit (`A100` for A100-SXM4-80GB, not
    `A10`; one that could be two is refused).
    A GPU of the cluster the plan does not use is no error (one flag for every row of a CSV); a name meaning
    none of the cluster's GPUs is refused in one line (a typo would silently keep the catalog's peak)."""
    table, out = gpu_names(), {}
    known = list(dict.fromkeys(list(gpus) + [n.gpu for n in cluster.node_types.values()]))
    for name, peak in given.items():
        key = canonical(name)
        means = table.get(key)
        if means is not None:
            hit = [g for g in known if canonical(g) == key or table.get(canonical(g)) is means]
        else:
            hit = [g for g in known if starts(name, g)]
        if not hit:
            raise FasopError(f"--peak-tflops: {name!r} names no GPU of {Path(cluster.path).name} (its GPUs: "
                             f"{', '.join(known)})")
        if means is None and len(hit) > 1:
            raise FasopError(f"--peak-tflops: {name!r} could be {' or '.join(hit)}: name one")
        out |= {g: peak for g in hit if g in gpus}
    return out
