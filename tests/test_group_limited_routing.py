"""Group-limited routing (DeepSeek-V3's node-limited routing: config.json n_group / topk_group,
Megatron-Core --moe-router-num-groups / --moe-router-group-topk): a token's k experts lie in
topk_group of the n_group expert groups, so a deduplicating dispatcher (DeepEP, HybridEP) sends it to
fewer ranks and domains than under unlimited routing (moe_kernels.dispatch_copies)."""

import itertools
import json
import random
from math import comb
from pathlib import Path

import pytest

import fasop
from fasop.estimators.analytic.moe_kernels import dispatch_copies
from fasop.core.errors import SpecError
from fasop.specs.load import load_model


def test_deepseek_v3_on_eight_nodes_by_hand():
    """EP 64 over 8 domains of 8, 256 experts in 8 groups of 32 (one group a domain), top 4 groups, k 8.
    Across: a domain is touched when its group is picked (4/8) and one of the 8 picks lands in it
    (1 - (3/4)^8): 7 x 1/2 x (1 - 0.75^8), against 7 x (1 - (7/8)^8) without groups. Inside (per rank,
    4 experts, a group spans 8 ranks): 7 x 1/2 x (1 - (1 - 1/32)^8)."""
    inside, across = dispatch_copies(8, 256, 64, 8, "uniform", True, True, 8, 4)
    assert across == pytest.approx(7 * 0.5 * (1 - 0.75 ** 8))
    assert inside == pytest.approx(7 * 0.5 * (1 - (31 / 32) ** 8))
    free = dispatch_copies(8, 256, 64, 8, "uniform", True, True)
    assert free[1] == pytest.approx(7 * (1 - (7 / 8) ** 8)) and across < 0.7 * free[1]


def test_two_groups_a_domain_by_hand():
    """EP 32 over 4 domains of 8 (two groups a domain): the domain's picked groups c are hypergeometric,
    P(0, 1, 2) = 15/70, 40/70, 15/70 (C(2,c) C(6,4-c) / C(8,4)); touched 1 - E[(1 - c/4)^8]."""
    miss = 15 / 70 + 40 / 70 * 0.75 ** 8 + 15 / 70 * 0.5 ** 8
    assert dispatch_copies(8, 256, 32, 8, "uniform", True, False, 8, 4)[1] == pytest.approx(3 * (1 - miss))


def test_no_limit_is_the_unlimited_formula():
    """One group, or every group picked, is routing without groups; so is a layout whose blocks split the
    groups unevenly (taken as without groups); per-expert copies never depend on the groups."""
    free = dispatch_copies(8, 256, 64, 8, "uniform", True, True)
    assert dispatch_copies(8, 256, 64, 8, "uniform", True, True, 1, 1) == free
    assert dispatch_copies(8, 256, 64, 8, "uniform", True, True, 8, 8) == pytest.approx(free)
    assert dispatch_copies(4, 96, 2, 1, "uniform", True, False, 3, 1) == \
        dispatch_copies(4, 96, 2, 1, "uniform", True, False)
    assert dispatch_copies(8, 256, 64, 8, "uniform", False, False, 8, 4) == \
        dispatch_copies(8, 256, 64, 8, "uniform", False, False)


def test_round_robin_ignores_the_groups():
    """The benchmark gates (AutoModel's FakeBalancedGate, torchtitan's forced balance) pick neighbouring
    experts whatever the groups."""
    assert dispatch_copies(8, 256, 64, 8, "round_robin", True, True, 8, 4) == \
        dispatch_copies(8, 256, 64, 8, "round_robin", True, True)


def _enumerated(k, experts, groups, top, units):
    """Mean over the blocks of P(touched), every choice of `top` groups enumerated (all equally likely),
    the k picks uniform over the chosen groups' experts with replacement."""
    size, block = experts // groups, experts // units
    total, seen = 0.0, {}
    for u in range(units):
        lo, hi = u * block, (u + 1) * block
        overlaps = tuple(sorted(max(0, min(hi, (h + 1) * size) - max(lo, h * size)) for h in range(groups)))
        if overlaps not in seen:   # the groups are alike: only the multiset of overlaps matters
            miss = sum((1 - sum(overlaps[h] for h in chosen) / (top * size)) ** k
                       for chosen in itertools.combinations(range(groups), top))
            seen[overlaps] = 1 - miss / comb(groups, top)
        total += seen[overlaps]
    return total / units


def test_closed_forms_equal_the_choices_enumerated():
    """On 200 random aligned shapes (blocks holding whole groups, or groups spanning whole blocks), the
    copies across equal (domains - 1) x the enumerated mean and the copies inside (rank dedup) equal
    (n_in - 1) x the enumerated mean over ranks."""
    rng = random.Random(29)
    for _ in range(200):
        groups = rng.choice([2, 4, 8, 16])
        top = rng.randint(1, min(groups - 1, 12))
        k = rng.randint(top, 12)
        ep = rng.choice([2, 4, 8, 16, 32])
        n_in = rng.choice([d for d in (1, 2, 4, 8) if ep % d == 0])
        experts = max(groups, ep) * rng.choice([1, 2, 3])
        inside, across = dispatch_copies(k, experts, ep, n_in, "uniform", True, True, groups, top)
        domains = ep // n_in
        assert across == pytest.approx((domains - 1) * _enumerated(k, experts, groups, top, domains), rel=1e-9)
        assert inside == pytest.approx((n_in - 1) * _enumerated(k, experts, groups, top, ep), rel=1e-9)


def test_huge_group_counts_answer_at_once():
    """A config's group count is bounded only by its expert count (64 x 2^20): the hypergeometric sum keeps
    the terms within 12 standard deviations of its mean, so 2^20 groups and k = 2^16 answer at once, and
    its value stays a probability."""
    inside, across = dispatch_copies(2 ** 16, 2 ** 26, 8, 1, "uniform", True, False, 2 ** 20, 2 ** 15)
    assert 0 < across <= 7


def test_configs_carry_their_groups(tmp_path):
    """DeepSeek-V3 ships n_group 8, topk_group 4; Kimi-K2 1 / 1; DeepSeek-V2's `greedy` top-k ignores them;
    a group count that does not divide the experts, or more groups picked than experts, is refused."""
    m = load_model("deepseek-v3").architecture.moe
    assert (m.router_groups, m.router_group_topk) == (8, 4)
    m = load_model("kimi-k2").architecture.moe
    assert (m.router_groups, m.router_group_topk) == (1, 1)
    shipped = json.loads((Path(fasop.__file__).parent / "data/model_specs/hf/deepseek-v3.json").read_text())

    def load(**changes):
        path = tmp_path / "config.json"
        path.write_text(json.dumps({**shipped, **changes}))
        return load_model(str(path)).architecture.moe
    greedy = load(topk_method="greedy")
    assert (greedy.router_groups, greedy.router_group_topk) == (1, 1)
    with pytest.raises(SpecError, match="n_group.*must divide n_routed_experts"):
        load(n_group=7)
    with pytest.raises(SpecError, match="topk_group.*at most"):
        load(topk_group=9, n_group=16)
