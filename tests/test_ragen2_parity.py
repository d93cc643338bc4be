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


def test_mi_zscores_by_hand_per_token_sequence_and_ema():
    # row 0 prefers its own prompt; row 1 scores alike under both. Row lengths 2 and 1: summed log-probs [[-2, -6],
    # [-2, -2]]. RAGEN: z = mean((matched - marginal) / (std(marginal) + eps)), std over the rows (population)
    L, lengths = np.array([[-1.0, -3.0], [-2.0, -2.0]]), np.array([2, 1])
    m0 = math.log((math.exp(-1) + math.exp(-3)) / 2)
    s0 = math.log((math.exp(-2) + math.exp(-6)) / 2)
    std, std_seq = abs(m0 + 2) / 2, abs(s0 + 2) / 2
    m, ema = mi_estimates(L, np.array([0, 1]), lengths=lengths, ema=(0.5, 0.25), ema_decay=0.9, std_eps=0.01)
    assert m["mi_seq_estimate"] == pytest.approx((-2 - s0) / 2)
    assert m["mi_zscore"] == pytest.approx((-1 - m0) / (std + 0.01) / 2)
    assert m["mi_zscore_seq"] == pytest.approx((-2 - s0) / (std_seq + 0.01) / 2)
    ema_std, ema_seq = 0.9 * 0.5 + 0.1 * std, 0.9 * 0.25 + 0.1 * std_seq  # the EMA moves before it divides
    assert ema == pytest.approx((ema_std, ema_seq))
    assert (m["marginal_std_ema"], m["marginal_std_ema_seq"]) == pytest.approx((ema_std, ema_seq))
    assert m["mi_zscore_ema"] == pytest.approx((-1 - m0) / (ema_std + 0.01) / 2)
    assert m["mi_zscore_ema_seq"] == pytest.approx((-2 - s0) / (ema_seq + 0.01) / 2)
    first, _ = mi_estimates(L, np.array([0, 1]), lengths=lengths, std_eps=0.01)  # no EMA yet: this step's std
    assert first["mi_zscore_ema"] == pytest.approx(first["mi_zscore"])


def test_retrieval_above_chance_by_hand():
    # three prompts; rows 0 and 2 rank their own first, row 1 second
    L = np.array([[0.0, -1.0, -2.0], [0.0, -1.0, -2.0], [-2.0, -1.0, 0.0]])
    m, _ = mi_estimates(L, np.array([0, 1, 2]), lengths=np.ones(3))
    assert (m["retrieval_accuracy"], m["retrieval_chance_level"]) == pytest.approx((2 / 3, 1 / 3))
    assert m["retrieval_above_chance"] == pytest.approx(1 / 3)
    assert (m["retrieval_accuracy_at_2"], m["retrieval_chance_level_at_2"]) == pytest.approx((1.0, 2 / 3))
    assert m["retrieval_above_chance_at_2"] == pytest.approx(1 / 3)
    assert m["retrieval_above_chance_at_8"] == pytest.approx(0.0)  # k = min(8, N) = 3 columns: chance 1
    # prompts 0 and 1 identical (RAGEN's column signatures): row 1's first pick is right; chance per row 2/3, 2/3, 1/3
    dup, _ = mi_estimates(L, np.array([0, 1, 2]), lengths=np.ones(3), col_keys=["a", "a", "b"])
    assert dup["retrieval_accuracy"] == 1.0 and dup["retrieval_chance_level"] == pytest.approx(5 / 9)
    assert dup["retrieval_above_chance"] == pytest.approx(4 / 9)
    assert dup["retrieval_chance_level_at_2"] == 1.0 and dup["retrieval_above_chance_at_2"] == 0.0  # capped at 1
