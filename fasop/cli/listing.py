"""`fasop list models|clusters`: the shipped specs, one line each (name, then what it holds)."""

from __future__ import annotations

from fasop.core.errors import FasopError
from fasop.specs.files import shipped_specs
from fasop.specs.load import load_cluster, load_model


def spec_lines(what: str) -> list[str]:
    """One line per shipped spec of `what` ("models" or "clusters"), by name; a spec that does
    not load is listed with its error, so the listing itself never fails."""
    folder = {"models": "model_specs", "clusters": "cluster_specs"}[what]
    paths = shipped_specs(folder)
    if not paths:
        return [f"no shipped {what} found (fasop installed without its {folder}/): give spec files by path"]
    width = max(len(p.stem) for p in paths)
    lines = []
    for path in paths:
        try:
            summary = _model(str(path)) if what == "models" else _cluster(str(path))
        except FasopError as exc:
            summary = f"does not load: {exc}"
        lines.append(f"{path.stem.ljust(width)}  {summary}")
    return lines


def _model(path: str) -> str:
    m = load_model(path)
    if m.profile is None:
        source = "no profile (analytic estimator, HuggingFace config)"
    else:
        source = "profiled on " + ", ".join(sorted({gpu for gpu, _ in m.profile.forward_s}))
    return (f"{m.num_transformer_layers} layers, hidden {m.hidden_size:,}, {m.num_attention_heads} heads, "
            f"batch {m.global_batch_size:,} x {m.sequence_length:,} tokens; {source}")


def _cluster(path: str) -> str:
    c = load_cluster(path)
    nodes = ", ".join(f"{name}: {n.gpus_per_node}x {n.gpu} ${n.usd_per_hour:,.2f}/h" for name, n in c.node_types.items())
    return nodes if c.estimator == "analytic" else f"{nodes}  [{c.estimator}: profiled models only]"
