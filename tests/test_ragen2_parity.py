"""RAGEN-2 parity on hand-computed cases: the filter's group score and kept-set rules, the MI proxy's formula,
normalisation, metric names and signs (RAGEN's rollout_filter.py and collapse_metrics.py)."""

import math

import numpy as np
import pytest

from ragen_jax.diagnostics.mi import mi_estimates
from ragen_jax.filtering import FilterConfig, filter_rollouts, select_groups


def test_group_score_is_the_unbiased_std_of_total_rewards():
    # [0, 1, 0, 1]: variance 1/3 (ddof=1), std sqrt(1/3); not the population std 0.5 nor the variance itself
    res = filter_rollouts(np.array([0.0, 1.0, 0.0, 1.0, 2.0, 2.0, 2.0, 2.0]), 4, FilterConfig())
    assert res.scores.tolist() == pytest.approx([math.sqrt(1 / 3), 0.0])
    assert res.metrics["rollout/filter_zero_count"] == 1.0


def test_kept_set_rules_by_hand():
    scores = np.array([1.0, 3.0, 3.0, 0.0])
    # linear: 0.5 * 7 - 0.01 = 3.49; the tied 3s go in group order, 3 < 3.49 <= 6: groups 1 and 2
    assert select_groups(scores, "top_p", 0.5).tolist() == [1, 2]
    # a value whose threshold one group already meets is inclusive: 3/7 * 7 - 0.01 <= 3
    assert select_groups(scores, "top_p", 3 / 7).tolist() == [1]
    # top_k counts all G groups: int(0.5 * 4) = 2; min_p keeps scores >= value * max
    assert select_groups(scores, "top_k", 0.5).tolist() == [1, 2]
    assert select_groups(scores, "min_p", 0.3).tolist() == [0, 1, 2]
    # include_zero=False drops the zero group before anything else: top_k then has 3 candidates for its 2
    assert select_groups(scores, "top_k", 1.0, include_zero=False).tolist() == [0, 1, 2]


def test_mi_proxy_on_a_two_by_two_case():
    # row 0 prefers its own prompt (-1 vs -3); row 1 scores alike under both (-2, -2)
    L = np.array([[-1.0, -3.0], [-2.0, -2.0]])
    m, _ = mi_estimates(L, np.array([0, 1]), lengths=np.array([1, 1]))
    marginal0 = math.log((math.exp(-1) + math.exp(-3)) / 2)  # -1.566219: logsumexp over columns - log N
    assert m["mi_estimate"] == pytest.approx(((-1 - marginal0) + 0.0) / 2)  # 0.283110 > 0: input-dependent
    assert m["mi_upper_bound"] == pytest.approx(math.log(2))
    assert m["conditional_entropy_est"] == pytest.approx(1.5)  # -mean(matched)
    assert m["reasoning_entropy_est"] == pytest.approx(-(marginal0 - 2) / 2)  # -mean(marginal) = H(Z|X) + MI
    std = abs(marginal0 + 2) / 2  # population std of the marginals
    assert m["mi_zscore"] == pytest.approx((-1 - marginal0) / (std + 1e-3) / 2)
    # row 1's tie goes to the first column (torch.argmax's first maximum), not its own: 1 of 2 retrieved
    assert m["retrieval_accuracy"] == 0.5 and m["retrieval_chance_level"] == 0.5
    assert m["retrieval_above_chance"] == 0.0
    assert m["retrieval_accuracy_at_2"] == 1.0 and m["retrieval_chance_level_at_2"] == 1.0
