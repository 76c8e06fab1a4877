"""compute.ProfileCompute as a compute source: forward and backward seconds per layer apart."""

from __future__ import annotations

import pytest

from fasop.costs.compute import ProfileCompute
from fasop.specs.load import load_model


@pytest.mark.parametrize("name", ["bert", "t5"])
def test_profile_layer_times_split_fwd_bwd_by_the_specs_factor(name):
    """Forward = the profiled forward time x micro-batch scaling; backward = (factor - 1) x it;
    together the layer's fwd+bwd (layer_costs), whatever the factor."""
    model = load_model(name)
    source = ProfileCompute.of(model)
    k = model.profile.fwd_bwd_factor
    assert source.forward_share == pytest.approx(1 / k)
    gpu, tp = next(iter(model.profile.forward_s))
    for mbs in (1, 2, 8):
        times, costs = source.layer_times(gpu, tp, mbs), source.layer_costs(gpu, tp, mbs).seconds
        profiled = model.profile.forward_s[(gpu, tp)]
        for layer, (f, b, total) in enumerate(zip(times.forward_s, times.backward_s, costs)):
            scale = model.profile.scaling[(gpu, model.layer_kinds[layer])].factor(mbs)
            assert f == pytest.approx(profiled[layer] * scale, rel=1e-12)
            assert b == pytest.approx((k - 1) * f, rel=1e-12)
            assert f + b == pytest.approx(total, rel=1e-12)
