"""How a node type looks in every figure of a run: its marker and colour, by its place in the
cluster spec; dollars on an axis; whether a line fits on a chart. No matplotlib here
(report/plots.py draws)."""

from __future__ import annotations

KIND_STYLE = ({"marker": "o", "color": "#1f77b4"}, {"marker": "s", "color": "#2ca02c"},
              {"marker": "^", "color": "#9467bd"}, {"marker": "v", "color": "#8c564b"},
              {"marker": "P", "color": "#e377c2"}, {"marker": "X", "color": "#bcbd22"},
              {"marker": "<", "color": "#17becf"}, {"marker": ">", "color": "#393b79"})
"""Homogeneous node types in --max-nodes order, each its own marker and colour (a ninth type
and beyond reuse them: a legend that long is unreadable anyway); mixed compositions use MIXED_STYLE."""
MIXED_STYLE = {"marker": "D", "color": "#7f7f7f"}


def node_type_styles(type_order: list[str]) -> dict[str, dict]:
    """{node type: its marker and colour}, by the node type's place in `type_order` (the cluster
    spec's node types, in the spec's order): one node type looks the same in every figure of a
    run (the frontier's points, the stage labels of the timeline and the memory figure)."""
    return {name: KIND_STYLE[i % len(KIND_STYLE)] for i, name in enumerate(type_order)}


def fits_on_chart(value: float, data: list[float]) -> bool:
    """Whether a deadline or budget line at `value` fits on the chart of `data` (at most twice
    its largest value): a line far beyond would stretch the axis over empty space, to infinity."""
    return bool(data) and value <= 2 * max(data)


def usd(value: float, _pos=None) -> str:
    """Dollars as an axis label: $950, $12.5k, $3M."""
    if abs(value) >= 1e9:
        return f"${value:.3g}"
    if abs(value) >= 1e6:
        return f"${value / 1e6:g}M"
    if abs(value) >= 1e3:
        return f"${value / 1e3:g}k"
    return f"${value:g}"


def wrap_name(name: str, chars: int) -> str:
    """A GPU or node name in lines of at most `chars` characters, broken after its '-'s (a part
    longer than that stays whole): 'A100-SXM4-80GB' in 5 -> 'A100-\\nSXM4-\\n80GB'. Tick labels of
    neighbouring bars then do not overprint."""
    lines: list[str] = []
    for part in name.replace("-", "-\n").split("\n"):
        if lines and len(lines[-1]) + len(part) <= chars:
            lines[-1] += part
        else:
            lines.append(part)
    return "\n".join(lines)



CROWDED_SHARE = 0.1
"""A frontier taking less than this share of a linear axis's range sits merged in a corner."""


def crowded(values: list[float], frontier: list[float]) -> bool:
    """Whether on a linear axis over `values` the `frontier`'s would take less than CROWDED_SHARE of
    it (the frontier crammed into a corner by far-off points) while the values span at least 3x,
    so that a logarithmic axis spreads them."""
    lo, hi = min(values, default=0.0), max(values, default=0.0)
    if not frontier or lo <= 0 or hi < 3 * lo:
        return False
    return max(frontier) - min(frontier) < CROWDED_SHARE * (hi - lo)


def wrap_note(text: str, chars: int = 48) -> str:
    """A note under an axis in lines of at most `chars` characters (it must not run off the figure)."""
    import textwrap

    return textwrap.fill(text, chars)
