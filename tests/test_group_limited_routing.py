"""Group-limited routing (DeepSeek-V3's node-limited routing: config.json n_group / topk_group,
Megatron-Core --moe-router-num-groups / --moe-router-group-topk): a token's k experts lie in
topk_group of the n_group expert groups, so a deduplicating dispatcher (DeepEP, HybridEP) sends it to
fewer ranks and domains than under unlimited routing (moe_kernels.dispatch_copies)."""

import json
from math import comb
from pathlib import Path

import numpy as np
import pytest

import fasop
from fasop.estimators.analytic.moe_kernels import dispatch_copies
from fasop.core.errors import SpecError
from fasop.specs.load import load_model


def test_deepseek_v3_on_eight_nodes_by_hand():
    """EP 64 over 8 domains of 8, 256 experts in 8 groups of 32 (one group a domain), 4 groups picked, k 8:
    each picked group holds 2 of the token's experts, so a domain is touched when its group is picked:
    across 7 x (1 - C(7,4)/C(8,4)) = 3.5, against 7 x (1 - (7/8)^8) = 4.59 without groups. Inside (per rank,
    4 experts of its group's 32): 7 x 4/8 x (1 - C(28,2)/C(32,2))."""
    inside, across = dispatch_copies(8, 256, 64, 8, "uniform", True, True, 8, 4)
    assert across == pytest.approx(3.5)
    assert inside == pytest.approx(7 * 0.5 * (1 - 378 / 496))
    free = dispatch_copies(8, 256, 64, 8, "uniform", True, True)
    assert free[1] == pytest.approx(7 * (1 - (7 / 8) ** 8)) and across < 0.8 * free[1]


def test_two_groups_a_domain_by_hand():
    """EP 32 over 4 domains of 8 (two groups a domain): touched unless neither of its groups is picked,
    1 - C(6,4)/C(8,4) = 55/70."""
    assert dispatch_copies(8, 256, 32, 8, "uniform", True, False, 8, 4)[1] == pytest.approx(3 * 55 / 70)


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


def _simulated(k, experts, groups, top, units, tokens=4000, seed=29):
    """Megatron-Core's group_limited_topk on random logits (its forced-balance benchmark routing): sigmoid
    scores, a group scored by the sum of its top k/top, the `top` best groups kept, the token's k best
    experts among theirs; the mean share of the blocks of experts/units each token touches."""
    rng = np.random.default_rng(seed)
    scores = 1 / (1 + np.exp(-rng.standard_normal((tokens, experts))))
    by_group = np.sort(scores.reshape(tokens, groups, -1), axis=2)[:, :, -(k // top):].sum(axis=2)
    kept = np.zeros((tokens, groups), dtype=bool)
    np.put_along_axis(kept, np.argsort(-by_group, axis=1)[:, :top], True, axis=1)
    masked = np.where(np.repeat(kept, experts // groups, axis=1), scores, -1.0)
    blocks = np.argsort(-masked, axis=1)[:, :k] // (experts // units)
    return np.mean([len(set(row)) for row in blocks.tolist()]) / units


@pytest.mark.parametrize("k, experts, groups, top, units", [
    (8, 256, 8, 4, 8), (8, 256, 8, 4, 64), (8, 256, 8, 4, 4), (8, 256, 8, 4, 32), (6, 160, 8, 3, 16),
    (6, 160, 8, 3, 8), (4, 64, 16, 2, 4), (8, 128, 4, 2, 16), (5, 60, 6, 2, 12), (8, 256, 8, 4, 2)])
def test_closed_forms_follow_megatrons_router_simulated(k, experts, groups, top, units):
    """The copies across `units` domains of one rank each follow Megatron's router simulated on 4,000 tokens within
    6 % (the closed form splits the k evenly over the picked groups; the router's split varies a little),
    and never touch more blocks than k distinct experts drawn from all (1 - C(E - B, k) / C(E, k), B = E/units)."""
    across = dispatch_copies(k, experts, units, 1, "uniform", True, False, groups, top)[1]
    share = across / (units - 1)
    assert share == pytest.approx(_simulated(k, experts, groups, top, units), rel=0.06)
    block = experts // units
    assert share <= 1 - comb(experts - block, k) / comb(experts, k) + 1e-12


def test_huge_group_counts_answer_at_once():
    """A config's group count is bounded only by its expert count (64 x 2^20): closed forms, no sum over
    groups: 2^20 groups of 64 experts, 2^15 of them picked for k = 2^16 over 8 domains, each domain holding
    2^17 groups, is certain to be touched."""
    assert dispatch_copies(2 ** 16, 2 ** 26, 8, 1, "uniform", True, False, 2 ** 20, 2 ** 15)[1] == pytest.approx(7)


def test_configs_carry_their_groups(tmp_path):
    """DeepSeek-V3 ships n_group 8, topk_group 4; Kimi-K2 1 / 1; `topk_method` greedy (DeepSeek-V2's default)
    ignores the groups; a group count that does not divide the experts, more groups picked than n_group or
    k, more experts than the picked groups hold, n_group without topk_group, or an unknown topk_method are
    refused in one line naming the key."""
    m = load_model("deepseek-v3").architecture.moe
    assert (m.router_groups, m.router_group_topk) == (8, 4)
    m = load_model("kimi-k2").architecture.moe
    assert (m.router_groups, m.router_group_topk) == (1, 1)
    shipped = json.loads((Path(fasop.__file__).parent / "data/model_specs/hf/deepseek-v3.json").read_text())

    def load(drop=(), **changes):
        cfg = {key: value for key, value in {**shipped, **changes}.items() if key not in drop}
        path = tmp_path / "config.json"
        path.write_text(json.dumps(cfg))
        return load_model(str(path)).architecture.moe
    for greedy in (load(topk_method="greedy"), load(model_type="deepseek_v2", drop=("topk_method",))):
        assert (greedy.router_groups, greedy.router_group_topk) == (1, 1)
    plain = load(drop=("n_group", "topk_group"))
    assert (plain.router_groups, plain.router_group_topk) == (1, 1)
    refused = [({"n_group": 7}, "n_group.*must divide n_routed_experts"),
               ({"topk_group": 9, "n_group": 16}, "topk_group.*at most"),
               ({"n_group": 64, "topk_group": 1}, "num_experts_per_tok.*at most the 4 experts"),
               ({"topk_method": 5}, "topk_method.*must be one of.*got 5"),
               ({"topk_method": "random"}, "topk_method.*got 'random'")]
    for changes, message in refused:
        with pytest.raises(SpecError, match=message):
            load(**changes)
    with pytest.raises(SpecError, match="topk_group.*missing: n_group 8 needs it"):
        load(drop=("topk_group",))
