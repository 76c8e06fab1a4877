"""A calibration overlay: the analytic estimator's physical parameters fitted to a user's runs.

`fasop calibrate RUNS.csv --out overlay.yaml` writes one; `fasop search / pareto / validate
--calibration overlay.yaml` apply it on top of the catalog (gpus.yaml) and analytic.yaml. It holds
only physical keys, each within physical bounds, so that it can never carry a per-run fudge:

    gpus:                           # catalog GPU types (gpus.yaml names)
      A100-SXM4-80GB:
        matmul_efficiency: 0.82             # share of the 16-bit peak on large matmuls, (0.05, 1]
        memory_bandwidth_efficiency: 0.87   # share of the memory bandwidth, (0.05, 1]
        layer_overhead_s: 0.00012           # per layer and micro-batch forward (2x backward), [0, 0.005]
    link_efficiency:                # achieved share of a link kind's bandwidth, (0.05, 1]
      nvlink: 0.7
      network: 0.85

Every key is optional; any other key (a run's name, a plan, a model) is refused in one line.
A link kind's share replaces a GPU's own measured `intra_node_efficiency` over that kind.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from fasop.specs.catalog import LINKS, AnalyticParams, canonical, gpu_names, load_gpus, unknown_gpu
from fasop.specs.reader import Reader, read_yaml

GPU_KEYS = ("matmul_efficiency", "memory_bandwidth_efficiency", "layer_overhead_s")
"""Per GPU type, in the order `fasop calibrate` fits them."""
LINK_KINDS = LINKS + ("network",)
BOUNDS = {"matmul_efficiency": (0.05, 1.0), "memory_bandwidth_efficiency": (0.05, 1.0),
          "layer_overhead_s": (0.0, 0.005), "link_efficiency": (0.05, 1.0)}
"""Physical range of each parameter: an efficiency in (0.05, 1], an overhead in [0, 5 ms]."""


@dataclass(frozen=True)
class Calibration:
    """Fitted values by parameter name: `gpus.<GPU>.<key>` or `link_efficiency.<kind>`."""

    values: tuple[tuple[str, float], ...]

    @property
    def as_dict(self) -> dict[str, float]:
        return dict(self.values)


def gpu_parameter(gpu_name: str, key: str) -> str:
    return f"gpus.{gpu_name}.{key}"


def link_parameter(kind: str) -> str:
    return f"link_efficiency.{kind}"


def bounds_of(name: str) -> tuple[float, float]:
    return BOUNDS[name.split(".")[0] if name.startswith("link_efficiency.") else name.rsplit(".", 1)[1]]


def in_bounds(name: str, value: float) -> bool:
    low, high = bounds_of(name)
    return (low <= value if name.endswith("overhead_s") else low < value) and value <= high


def known_parameter(name: str) -> bool:
    """Whether `name` is a parameter an overlay may hold (a catalog GPU's key or a link kind)."""
    return canonical_parameter(name) is not None


def canonical_parameter(name: str) -> str | None:
    """`name` with its GPU type in the catalog's spelling (`gpus.H100.matmul_efficiency` ->
    `gpus.H100-SXM.matmul_efficiency`, as an overlay's GPU keys are read), or None for no parameter."""
    parts = name.split(".")
    if len(parts) == 2 and parts[0] == "link_efficiency":
        return name if parts[1] in LINK_KINDS else None
    if len(parts) != 3 or parts[0] != "gpus" or parts[2] not in GPU_KEYS:
        return None
    gpu = gpu_names().get(canonical(parts[1]))
    return None if gpu is None else gpu_parameter(gpu.name, parts[2])


def load_calibration(path: str | Path) -> Calibration:
    """The overlay at `path`, strictly: unknown keys, unknown GPU types, values out of bounds refused."""
    path = Path(path)
    top = Reader(path, read_yaml(path), "", ("gpus", "link_efficiency"))
    values = []
    if "gpus" in top.data:
        gpus = top.sub("gpus")
        seen: dict[str, str] = {}
        for name in list(gpus.data):
            gpu = gpu_names().get(canonical(str(name)))
            if gpu is None:
                raise gpus.error(name, unknown_gpu("", str(name)))
            if gpu.name in seen:   # an alias and the catalog name: one would silently win
                raise gpus.error(name, f"the same GPU type as {seen[gpu.name]!r} above ({gpu.name}): give its "
                                       "parameters once")
            seen[gpu.name] = str(name)
            one = gpus.sub(name, GPU_KEYS)
            values += [(gpu_parameter(gpu.name, key), _value(one, key)) for key in GPU_KEYS if key in one.data]
            one.done()
        gpus.done()
    if "link_efficiency" in top.data:
        links = top.sub("link_efficiency", LINK_KINDS)
        values += [(link_parameter(kind), _value(links, kind)) for kind in LINK_KINDS if kind in links.data]
        links.done()
    top.done()
    return Calibration(values=tuple(values))


def _value(r: Reader, key: str) -> float:
    name = link_parameter(key) if key in LINK_KINDS else gpu_parameter("x", key)
    low, high = bounds_of(name)
    why = f"in [{low:g}, {high:g}]" if key == "layer_overhead_s" else f"in ({low:g}, {high:g}]"
    return float(r.get(key, (int, float), check=lambda v: in_bounds(name, float(v)), why=why))


def apply_calibration(calibration: Calibration, params: AnalyticParams) -> AnalyticParams:
    """`params` with the overlay's link shares and calibrated GPU types (AnalyticParams.gpu)."""
    values = calibration.as_dict
    links = {kind: values[link_parameter(kind)] for kind in LINK_KINDS if link_parameter(kind) in values}
    gpus = {}
    for key, catalog_gpu in load_gpus().items():
        gpu = params.gpu(catalog_gpu)
        changes = {k: values[gpu_parameter(gpu.name, k)] for k in GPU_KEYS if gpu_parameter(gpu.name, k) in values}
        if gpu.intra_node_link in links and gpu.intra_node_efficiency is not None:
            changes["intra_node_efficiency"] = None   # the fitted share of its link kind applies
        if changes:
            gpus[key] = replace(gpu, **changes)
    merged = dict(params.calibration)
    merged.update(values)
    return replace(params, link_efficiency={**params.link_efficiency, **links},
                   calibrated_gpus={**params.calibrated_gpus, **gpus}, calibration=tuple(merged.items()))


def calibration_text(calibration: Calibration, comments: tuple[str, ...] = ()) -> str:
    """The overlay as YAML (floats written to round-trip exactly), `comments` as # lines on top."""
    lines = [f"# {c}" for c in comments]
    values = calibration.as_dict
    gpu_names = list(dict.fromkeys(n.split(".")[1] for n in values if n.startswith("gpus.")))
    if gpu_names:
        lines.append("gpus:")
        for gpu in gpu_names:
            lines.append(f"  {gpu}:")
            lines += [f"    {k}: {_float(values[gpu_parameter(gpu, k)])}" for k in GPU_KEYS
                      if gpu_parameter(gpu, k) in values]
    kinds = [k for k in LINK_KINDS if link_parameter(k) in values]
    if kinds:
        lines.append("link_efficiency:")
        lines += [f"  {k}: {_float(values[link_parameter(k)])}" for k in kinds]
    return "\n".join(lines) + "\n"


def _float(value: float) -> str:
    """repr, with a '.' in the mantissa (YAML 1.1 reads 1e-05 as text, 1.0e-05 as a float)."""
    text = repr(float(value))
    mantissa, e, exponent = text.partition("e")
    return text if not e or "." in mantissa else f"{mantissa}.0e{exponent}"
