"""The pipeline floor of the analytic order bounds (orders.AnalyticPrefixBounds), from per-stage
(tau, e, cap) columns: stage i's cycle with n_i layers is at least c_i = e_i + n_i x tau_i, with
1 <= n_i <= cap_i and sum_i n_i = L, and analytic_cost.step's pipeline is

    P = (m - 1/v) x max_i c_i + sum_i c_i / v.

Its *slots* are the values e_i + k tau_i, 1 <= k <= cap_i. Let M = max_i c_i, a slot value; every
split uses L slots at most M, so M >= lambda, the L-th smallest slot (and >= every e_i + tau_i).
Let lambda' be the least slot value above lambda. Either M >= lambda', and sum_i c_i is at least
S_min = sum_i e_i + sum_i tau_i (every stage holds a layer) + the L - p cheapest taus of the slots
with k >= 2; or M = lambda (no slot lies between), so every layer sits in a slot <= lambda and
sum_i c_i is at least S_lambda, the same sum over the slots <= lambda only. Hence

    P >= min((m - 1/v) lambda + S_lambda / v, (m - 1/v) lambda' + S_min / v).

With m in the hundreds the first term is nearly a fixed order's exact pipeline; the floor that
took only the L cheapest layer times anywhere (and no layer on every stage) stayed ~1 % below
it, so that tens of thousands of DeepSeek-V3 orders within 1 % of the kept plans were each
estimated (docs/partitions.md, "Node orders past listing"). For unfixed stages the columns are the optimistic
multiset of orders.py (paces ascending paired with caps descending, the least e): for every cost
x and value y, that multiset has at least as many slots k >= 2 of tau <= x and value <= y as any
completion's stages (min(cap, (y - e) / tau) summed over the stages of tau <= x is largest in
the sorted pairing, and both of its arguments dominate), and a pace sum no completion's taus
beat, so both sums stay floors. The floor returned is never below the simple one, and the
tightened part is lowered by ROUNDING (the estimate sums the same terms in another order).
"""

from __future__ import annotations

import numpy as np

ROUNDING = 1e-9
"""Relative slack of the tightened floor for floating-point summation order (as bound.least_bound's)."""


def slot_floor(tau: np.ndarray, extra: np.ndarray, cap: np.ndarray, layers: int, m: int, v: np.ndarray,
               levels: dict, threshold: float | None = None) -> np.ndarray:
    """Per row (recipe): a pipeline time no split of `layers` layers over the columns (stages)
    beats (module doc); inf where none fits. tau, extra, cap: (rows, stages); v: (rows,);
    `levels`: a cache of 1..k as floats, by k. Given a search's `threshold` (which only falls), the
    simple floors are returned where tightening cannot move any row across it."""
    n, stages = tau.shape
    most = int(cap.max(initial=0))
    if not most or stages * most < layers:
        return np.full(n, np.inf)
    k = levels.get(most)
    if k is None:
        k = levels[most] = np.arange(1, most + 1, dtype=float)
    open_slot = k <= cap[:, :, None]
    slots = np.where(open_slot, extra[:, :, None] + tau[:, :, None] * k, np.inf).reshape(n, -1)
    level = np.maximum(np.partition(slots, layers - 1, axis=1)[:, layers - 1], (extra + tau).max(axis=1))
    costs = np.where(open_slot, tau[:, :, None], np.inf).reshape(n, -1)
    total = np.partition(costs, layers - 1, axis=1)[:, :layers].sum(axis=1) + extra.sum(axis=1)
    bad = np.isinf(level) | (cap.min(axis=1) < 1)  # too few slots, or a stage holds no layer: nothing fits
    simple = (m - 1 / v) * np.where(bad, 0.0, level) + total / v
    simple[bad] = np.inf
    # the tightened floor is at most its first term, (m - 1/v + p/v) lambda (each cycle at most lambda
    # there): where no row has its simple floor within the threshold and that ceiling above it,
    # tightening prunes nothing now (cached, the simple floors stay floors, only less sharp later)
    ceiling = (m - 1 / v + stages / v) * np.where(bad, 0.0, level) * (1 + ROUNDING)
    idle = threshold is not None and not ((simple <= threshold) & (ceiling > threshold)).any()
    if bad.all() or stages > layers or idle:
        return simple
    with np.errstate(invalid="ignore"):  # inf - inf where a row has no slot: bad, replaced below
        tight = _tight(tau, extra, slots, costs, level, layers, m, v)
    return np.where(bad, np.inf, np.maximum(simple, np.where(np.isnan(tight), 0.0, tight) * (1 - ROUNDING)))


def _tight(tau: np.ndarray, extra: np.ndarray, slots: np.ndarray, costs: np.ndarray, level: np.ndarray,
           layers: int, m: int, v: np.ndarray) -> np.ndarray:
    """min((m - 1/v) lambda + S_lambda / v, (m - 1/v) lambda' + S_min / v) per row (module doc)."""
    n, stages = tau.shape
    rest = layers - stages  # layers beyond one per stage
    base = tau.sum(axis=1) + extra.sum(axis=1)
    later = costs.reshape(n, stages, -1).copy()
    later[:, :, 0] = np.inf  # k = 1: every stage's first layer, in base
    later = later.reshape(n, -1)
    if rest > 0:
        least = np.partition(later, rest - 1, axis=1)[:, :rest].sum(axis=1)
        within = np.where(slots <= level[:, None], later, np.inf)
        least_within = np.partition(within, rest - 1, axis=1)[:, :rest].sum(axis=1)
    else:
        least = least_within = np.zeros(n)
    above = np.where(slots > level[:, None], slots, np.inf).min(axis=1)
    return np.minimum((m - 1 / v) * level + (base + least_within) / v, (m - 1 / v) * above + (base + least) / v)


def pipeline_floor(m: int, v: int, layers: int, taus: list[float], ends: tuple[float, float]) -> float:
    """A step time no split of `layers` identical layers over stages of per-layer times `taus`
    beats, the first stage also running the embedding (ends[0]) and the last the head (ends[1]):
    the slowest stage is at least the split's continuous relaxation T = (L + e0/tau0 + e1/tau1) /
    sum(1/tau_i), the stages sum to at least L x min tau + e0 + e1, and analytic_cost.step is
    m x max + (sum - max)/v = (m - 1/v) x max + sum / v."""
    level = (layers + ends[0] / taus[0] + ends[1] / taus[-1]) / sum(1 / t for t in taus)
    return (m - 1 / v) * level + (layers * min(taus) + ends[0] + ends[1]) / v
