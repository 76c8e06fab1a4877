"""model_math: per-layer parameters, activations and volumes by hand, and `bytes_per_element`
meaning the same thing in every transfer."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from fasop.costs import model_math
from fasop.costs.memory import stage_elements
from fasop.estimators.fasop2024 import comm as fasop2024_comm
from test_cost_pieces import model, node, plan

f32 = np.float32


def test_parameters_by_hand():
    assert model_math.transformer_params(8) == 12 * 64 == 768
    assert model_math.embedding_params(8, 16) == 128
    assert [model_math.layer_params(k, 8, 16) for k in ("embedding", "transformer", "encoder", "decoder", "head")] == \
           [128, 768, 768, 768, 128]


def test_activation_bytes_by_hand():
    """h=8, v=16, s=4, a=2, b=1, tp=1, pp=2, 2 in flight: transformer 4*1*2*8*(10 + 24 + 5*2*4/8)
    = 64*39 = 2496; embedding 4*1*8*2*2 = 128; head 4*4*8 + 4*4*16 = 384."""
    sizes = dict(h=8, v=16, s=4, a=2, b=1, tp=1, pp=2, in_flight=2)
    assert model_math.activation_bytes("transformer", **sizes) == 2496
    assert model_math.activation_bytes("embedding", **sizes) == 128
    assert model_math.activation_bytes("head", **sizes) == 384


def test_memory_counts_what_model_math_counts():
    """A stage's parameters per GPU are the sum of its layers' / tp (tp = 2: 768 + 128 halves)."""
    params, act = stage_elements(plan(2, 1, 2, node(gpus=4)), model(), ("embedding", "transformer"))
    assert params == (128 + 768) / 2


@pytest.mark.parametrize("bytes_per_element", [1, 2, 4])
def test_bytes_per_element_scales_every_transfer_alike(bytes_per_element):
    """p2p, DP all-reduce and embedding sync all move elements of bytes_per_element bytes: their
    times scale with it, each exactly (powers of two)."""
    base, other = model(), dataclasses.replace(model(), bytes_per_element=bytes_per_element)
    p = plan(1, 2, 2, node(), node())
    ratio = bytes_per_element / 2
    assert fasop2024_comm.p2p_volume(p, other) == fasop2024_comm.p2p_volume(p, base) * ratio == 1 * 4 * 8 * bytes_per_element
    assert fasop2024_comm.embedding_seconds(p, other, 100.0) == fasop2024_comm.embedding_seconds(p, base, 100.0) * ratio
    dp = [fasop2024_comm.dp_allreduce_seconds(p, f32(1000), f32(100), False, b.bytes_per_element) for b in (base, other)]
    assert dp[1] == dp[0] * ratio
