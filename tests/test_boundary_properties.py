"""Properties of the input boundary (fasop/specs/load.py's reader, fasop/core/limits.py), over generated
values: a value is accepted exactly when it lies in its stated range; anything else, including
arbitrary bytes in place of a whole file, is one SpecError line naming the file and key, never
another exception."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from fasop.core import limits  # noqa: E402
from fasop.core.errors import FasopError, SpecError  # noqa: E402
from fasop.report.output import safe_name  # noqa: E402
from fasop.search.engine import parse_counts  # noqa: E402
from fasop.specs.load import load_cluster, load_model  # noqa: E402
from test_bad_input import CLUSTER, MODEL, PROFILE  # noqa: E402

SETTINGS = settings(max_examples=150, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])


def _load(kind: str, text: str | bytes, profile: str | bytes = PROFILE):
    with tempfile.TemporaryDirectory() as folder:
        spec = Path(folder) / f"{kind}.yaml"
        spec.write_bytes(text.encode() if isinstance(text, str) else text)
        (Path(folder) / "tiny.profile.csv").write_bytes(profile.encode() if isinstance(profile, str) else profile)
        return (load_model if kind == "model" else load_cluster)(str(spec))


def _one_line(exc: Exception) -> None:
    assert "\n" not in str(exc) and len(str(exc)) < 2000


@SETTINGS
@given(st.integers(min_value=-(10**40), max_value=10**40) | st.integers(min_value=-3, max_value=3 * limits.HIDDEN_SIZE))
def test_hidden_size_accepted_exactly_in_range(value):
    try:
        model = _load("model", MODEL.replace("hidden_size: 64", f"hidden_size: {value}"))
    except SpecError as exc:
        _one_line(exc)
        assert "architecture.hidden_size" in str(exc)
        assert not 1 <= value <= limits.HIDDEN_SIZE
    else:
        assert 1 <= value <= limits.HIDDEN_SIZE and model.hidden_size == value


@SETTINGS
@given(st.floats(allow_nan=True, allow_infinity=True, width=64))
def test_bandwidth_accepted_exactly_in_range(value):
    low, high = limits.GBIT_PER_S
    text = CLUSTER.replace("    inter_node_gbit_per_s: 40\n", f"    inter_node_gbit_per_s: {_yaml_float(value)}\n")
    try:
        cluster = _load("cluster", text)
    except SpecError as exc:
        _one_line(exc)
        assert "node_types.a10.inter_node_gbit_per_s" in str(exc)
        assert not (math.isfinite(value) and low <= value <= high)
    else:
        assert low <= value <= high and cluster.node_types["a10"].inter_node_bytes_per_s == value * 1e9 / 8


def _yaml_float(value: float) -> str:
    if math.isnan(value):
        return ".nan"
    if math.isinf(value):
        return ".inf" if value > 0 else "-.inf"
    text = repr(value)
    return text if "." in text or "e" not in text else text.replace("e", ".0e", 1)  # YAML 1.1 floats need a dot


@SETTINGS
@given(st.binary(max_size=400) | st.text(max_size=400).map(str.encode))
def test_any_bytes_as_a_cluster_spec_are_loaded_or_one_line(data):
    try:
        _load("cluster", data)
    except SpecError as exc:
        _one_line(exc)


@SETTINGS
@given(st.integers(min_value=0, max_value=len(CLUSTER)), st.binary(min_size=1, max_size=8))
def test_bytes_inserted_into_a_valid_spec_are_loaded_or_one_line(at, junk):
    data = CLUSTER.encode()
    try:
        _load("cluster", data[:at] + junk + data[at:])
    except SpecError as exc:
        _one_line(exc)


@SETTINGS
@given(st.text(alphabet=st.sampled_from("AB10,.\"\n -eé\x00tp"), max_size=200))
def test_any_profile_text_is_loaded_within_limits_or_one_line(body):
    try:
        model = _load("model", MODEL, "gpu,tp,layer_index,seconds\n" + body)
    except SpecError as exc:
        _one_line(exc)
    else:
        low, high = limits.LAYER_SECONDS
        assert all(low <= s <= high for times in model.profile.forward_s.values() for s in times)


@SETTINGS
@given(st.text(max_size=60))
def test_any_nodes_text_is_an_inventory_within_limits_or_one_line(text):
    cluster = _load("cluster", CLUSTER)
    try:
        counts = parse_counts(text, cluster, "--nodes")
    except FasopError as exc:
        _one_line(exc)
    else:
        assert set(counts) <= set(cluster.node_types) and all(1 <= n <= limits.NODES for n in counts.values())


@SETTINGS
@given(st.text(max_size=300))
def test_a_safe_name_is_one_plain_component(text):
    name = safe_name(text)
    assert name and "/" not in name and "\\" not in name and "\0" not in name
    assert not name.startswith((".", "-")) and len(name) <= 100 and name.isprintable()
