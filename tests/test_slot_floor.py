"""The analytic order bounds' pipeline floor (fasop/estimators/analytic/slots.py): never above any
split's pipeline, never below the simple floor, and tight on a hand-computed case."""

from __future__ import annotations

import itertools

import numpy as np

from fasop.estimators.analytic.slots import slot_floor


def _pipeline(tau, extra, n, m, v):
    cycles = [e + k * t for t, e, k in zip(tau, extra, n)]
    return (m - 1 / v) * max(cycles) + sum(cycles) / v


def _best_split(tau, extra, cap, layers, m, v):
    splits = (n for n in itertools.product(*(range(1, c + 1) for c in cap)) if sum(n) == layers)
    return min((_pipeline(tau, extra, n, m, v) for n in splits), default=float("inf"))


def _floor(tau, extra, cap, layers, m, v, threshold=None):
    args = [np.array([x], dtype=float) for x in (tau, extra, cap)]
    return float(slot_floor(*args, layers, m, np.array([float(v)]), {}, threshold)[0])


def test_hand_case_two_stages():
    # tau (1, 2), no extra, L = 3, m = 10, v = 1. Splits: (2, 1): max 2, sum 4 -> 9 x 2 + 4 = 22;
    # (1, 2): max 4, sum 5 -> 41. The L cheapest layer times anywhere (1 + 1 + 1) gave 9 x 2 + 3 = 21;
    # with a layer on every stage and only slots <= lambda = 2: 3 + 1 = 4 -> 22, the best split.
    assert _best_split((1, 2), (0, 0), (3, 3), 3, 10, 1) == 22
    assert abs(_floor((1, 2), (0, 0), (3, 3), 3, 10, 1) - 22) < 1e-6
    # a search whose threshold is already below the simple floor (21) gets it untightened: pruned either way
    assert _floor((1, 2), (0, 0), (3, 3), 3, 10, 1, threshold=20.0) == 21
    assert abs(_floor((1, 2), (0, 0), (3, 3), 3, 10, 1, threshold=21.5) - 22) < 1e-6
    # nor where the tightened floor's ceiling, (m - 1/v + p/v) lambda = 22, is within it
    assert _floor((1, 2), (0, 0), (3, 3), 3, 10, 1, threshold=23.0) == 21


def test_never_above_a_split_never_below_the_simple_floor():
    rng = np.random.default_rng(29)
    for _ in range(400):
        p = int(rng.integers(1, 5))
        layers = int(rng.integers(p, 3 * p + 3))
        tau = rng.choice([0.5, 1.0, 1.5, 2.0], size=p) * rng.uniform(0.9, 1.1, size=p)
        extra = rng.uniform(0, 2, size=p) * (rng.random(size=p) < 0.5)
        cap = rng.integers(1, layers + 1, size=p)
        m, v = int(rng.integers(1, 30)), int(rng.choice([1, 2]))
        best = _best_split(tuple(tau), tuple(extra), tuple(int(c) for c in cap), layers, m, v)
        got = _floor(tau, extra, cap, layers, m, v)
        if best == float("inf"):
            continue
        assert got <= best * (1 + 1e-12), (tau, extra, cap, layers, m, v, got, best)
        k = np.arange(1, layers + 1)
        slots = np.sort([e + t * j for t, e, c in zip(tau, extra, cap) for j in k if j <= c])
        level = max(slots[layers - 1], (extra + tau).max())
        costs = np.sort([t for t, c in zip(tau, cap) for j in k if j <= c])
        simple = (m - 1 / v) * level + (costs[:layers].sum() + extra.sum()) / v
        assert got >= simple * (1 - 1e-12)


def test_no_split_fits_is_inf():
    assert _floor((1, 1), (0, 0), (1, 0), 2, 4, 1) == float("inf")
    assert _floor((1, 1), (0, 0), (1, 1), 3, 4, 1) == float("inf")
