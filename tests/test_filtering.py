"""Rollout filter: RAGEN's reference cases, strategy rules, metrics, compaction."""

import jax.numpy as jnp
import numpy as np
import pytest

from ragen_jax.filtering import (
    FilterConfig,
    advantage_scale,
    bucket_size,
    compact,
    filter_rollouts,
    group_scores,
    select_groups,
    update_empty_streak,
)


# --- the six reference cases of ragen-behaviour.md section 5 (from RAGEN's own tests) ---
@pytest.mark.parametrize(
    "scores, value, mode, include_zero, expected",
    [
        ([4, 3, 2, 1], 0.6, "linear", True, [0, 1]),
        ([0, 0, 0], 0.9, "linear", True, []),
        ([4, 2, 0, 0], 1.0, "linear", True, [0, 1, 2, 3]),
        ([3, 1, 1, 0], 0.9, "linear", False, [0, 1, 2]),
        ([1, 1, 1], 0.6, "softmax", True, [0, 1]),
        ([10, 1, 0, 0], 0.9, "softmax", False, [0]),
    ],
)
def test_reference_cases(scores, value, mode, include_zero, expected):
    kept = select_groups(
        np.array(scores, float), "top_p", value, include_zero=include_zero, prob_mode=mode
    )
    assert kept.tolist() == expected


@pytest.mark.parametrize(
    "scores, value, mode, expected",
    [
        ([10, 1, 0, 0], 0.9, "linear", [0]),
        ([4, 2, 0, 0], 0.9, "linear", [0, 1]),
        ([4, 2, 0, 0], 0.9, "softmax", [0, 1]),
        ([1, 1, 1, 0], 0.6, "softmax", [0, 1]),
    ],
)
def test_more_ragen_top_p_cases_excluding_zero(scores, value, mode, expected):
    kept = select_groups(np.array(scores, float), "top_p", value, include_zero=False, prob_mode=mode)
    assert kept.tolist() == expected


@pytest.mark.parametrize("num_tied, value, expected", [(10, 0.7, 7), (10, 0.9, 9), (5, 0.6, 3), (20, 0.35, 7)])
def test_softmax_top_p_stops_where_tied_groups_reach_the_value_exactly(num_tied, value, expected):
    # equal scores (common: groups with the same reward mix) put the cumulative mass exactly on the value; RAGEN's
    # float32 softmax + cumsum keep `expected` groups, the mathematical answer (a float32 ratio fell one ulp short
    # and kept one group more)
    kept = select_groups(np.full(num_tied, 0.57735), "top_p", value, prob_mode="softmax")
    assert kept.tolist() == list(range(expected))
    with_zeros = np.concatenate([np.full(num_tied, 0.7071), np.zeros(3)])
    assert select_groups(with_zeros, "top_p", value, include_zero=False, prob_mode="softmax").size == expected


def test_value_one_keeps_all_listed_in_any_order():
    for scores in ([0.0, 0.0, 0.0], [1.0, 3.0, 2.0]):
        assert select_groups(np.array(scores), "top_p", 1.0).tolist() == list(range(len(scores)))


def test_linear_top_p_keeps_nothing_when_threshold_unreachable():
    # Walk stops at the first non-positive score: [5, 0, 0, 5] sorted is [5, 5, 0, 0] -> reaches.
    assert select_groups(np.array([5.0, 0, 0, 5]), "top_p", 0.9).tolist() == [0, 3]
    # Smallest-first walk meets a non-positive score before reaching the threshold -> nothing.
    assert select_groups(np.array([-1.0, 4.0]), "top_p", 0.9, largest=False).tolist() == []


@pytest.mark.parametrize("value, eps", [(0.75, 0.0), (0.775, 0.01)])
def test_linear_top_p_stops_at_a_prefix_summing_exactly_to_the_threshold(value, eps):
    # 0.75 * 0.4 - 0 = 0.775 * 0.4 - 0.01 = 0.3 = 0.2 + 0.1: two groups reach it. RAGEN compares its running sum
    # with the float32 threshold in float32; compared in float64, 0.2f + 0.1f fell one ulp short and kept all three
    kept = select_groups(np.array([0.2, 0.1, 0.1]), "top_p", value, eps=eps)
    assert kept.tolist() == [0, 1]
    assert select_groups(np.array([0.1, 0.2, 0.1]), "top_p", value, eps=eps).tolist() == [0, 1]


def test_linear_top_p_smallest_walks_ascending():
    kept = select_groups(np.array([4.0, 3.0, 2.0, 1.0]), "top_p", 0.5, largest=False)
    assert kept.tolist() == [1, 2, 3]  # 1 + 2 + 3 = 6 >= 0.5 * 10 - 0.01


def test_top_k_and_top_k_abs():
    scores = np.array([0.5, 3.0, 2.0, 0.0, 1.0])
    assert select_groups(scores, "top_k", 0.4).tolist() == [1, 2]  # int(0.4*5) = 2
    assert select_groups(scores, "top_k", 0.01).tolist() == [1]  # at least one
    assert select_groups(scores, "top_k", 0.4, largest=False).tolist() == [0, 3]
    assert select_groups(scores, "top_k_abs", 3).tolist() == [1, 2, 4]
    assert select_groups(scores, "top_k_abs", 99).tolist() == [0, 1, 2, 3, 4]
    # k counts all groups, capped by the non-zero ones that remain.
    assert select_groups(scores, "top_k", 1.0, include_zero=False).tolist() == [0, 1, 2, 4]


def test_min_p():
    scores = np.array([1.0, 4.0, 2.0, 3.0])
    assert select_groups(scores, "min_p", 0.5).tolist() == [1, 2, 3]
    assert select_groups(scores, "min_p", 0.5, largest=False).tolist() == [0, 2]


def test_bad_options_name_the_problem():
    with pytest.raises(ValueError, match="strategy"):
        select_groups(np.ones(3), "top_q", 0.5)
    with pytest.raises(ValueError, match="prob_mode"):
        select_groups(np.ones(3), "top_p", 0.5, prob_mode="cubic")
    with pytest.raises(ValueError, match="multiple of group_size"):
        group_scores(np.ones(7), 2)
    with pytest.raises(ValueError, match="entropy"):
        group_scores(np.ones(4), 2, "entropy")
    with pytest.raises(ValueError, match="Unknown filter option 'rollout_filter_ration'"):
        FilterConfig.from_mapping({"rollout_filter_ration": 0.5})


def test_ragens_older_ratio_key_is_the_value_when_the_value_is_absent():
    # agent_trainer: getattr(rollout_cfg, "rollout_filter_value", getattr(rollout_cfg, "rollout_filter_ratio", ...))
    assert FilterConfig.from_mapping({"rollout_filter_ratio": 0.5}).value == 0.5
    both = {"rollout_filter_ratio": 0.5, "rollout_filter_value": 0.75}
    assert FilterConfig.from_mapping(both).value == 0.75
    assert FilterConfig.from_mapping({"rollout_filter_ratio": 0.5, "value": 0.25}).value == 0.25


def test_group_scores_metrics():
    rewards = np.array([0.0, 1.0, 2.0, 2.0, 5.0, 9.0])
    scores, stats = group_scores(rewards, 2)
    np.testing.assert_allclose(scores, [np.sqrt(0.5), 0.0, np.sqrt(8.0)])  # unbiased std
    np.testing.assert_allclose(group_scores(rewards, 2, "reward")[0], [0.5, 2.0, 7.0])
    np.testing.assert_allclose(group_scores(rewards, 2, "reward_sum")[0], [1.0, 4.0, 14.0])
    np.testing.assert_allclose(stats["max"], [1.0, 2.0, 9.0])
    ent = np.array([1.0, 3.0, 2.0, 2.0, 0.0, 0.0])
    np.testing.assert_allclose(group_scores(None, 2, "entropy", entropy=ent)[0], [2.0, 2.0, 0.0])
    np.testing.assert_allclose(
        group_scores(None, 2, "entropy_variance", entropy=ent)[0], [np.sqrt(2.0), 0.0, 0.0]
    )
    np.testing.assert_allclose(group_scores(None, 3, "length", length=np.arange(6))[0], [1.0, 4.0])


def test_filter_rollouts_metrics_and_rows():
    # groups: std [0.707, 0, 2.83, 1.41]; top_p 0.9 linear excluding zeros keeps groups 0, 2, 3.
    rewards = np.array([0.0, 1.0, 2.0, 2.0, 5.0, 9.0, 1.0, 3.0])
    cfg = FilterConfig.from_mapping(
        {"rollout_filter_strategy": "top_p", "rollout_filter_value": 0.9,
         "rollout_filter_include_zero": False, "rollout_filter_type": "largest"}
    )
    res = filter_rollouts(rewards, 2, cfg)
    assert res.kept_groups.tolist() == [0, 2, 3]
    assert res.kept_traj.tolist() == [0, 1, 4, 5, 6, 7]
    m = res.metrics
    std = np.array([np.sqrt(0.5), 0.0, np.sqrt(8.0), np.sqrt(2.0)])
    assert m["rollout/in_group_reward_std"] == pytest.approx(std.mean())
    assert m["rollout/chosen_in_group_reward_std"] == pytest.approx(std[[0, 2, 3]].mean())
    assert m["rollout/in_group_reward_mean"] == pytest.approx(np.mean([0.5, 2.0, 7.0, 2.0]))
    assert m["rollout/chosen_in_group_reward_max"] == pytest.approx(np.mean([1.0, 9.0, 3.0]))
    assert m["rollout/in_group_reward_sum"] == pytest.approx(np.mean([1.0, 4.0, 14.0, 4.0]))
    assert m["rollout/in_group_std"] == m["rollout/in_group_reward_std"]
    assert m["rollout/filter_kept_count"] == 3.0
    assert m["rollout/filter_kept_ratio"] == pytest.approx(0.75)
    assert m["rollout/filter_zero_count"] == 1.0
    assert res.kept_ratio == pytest.approx(0.75) and not res.empty


def test_ragen_reward_sum_example():
    # RAGEN's test: top_k 0.5 on reward_sum keeps groups 0 and 2; sums 6.0 / 8.5 averaged.
    per_token = np.array([[3, 2], [1, 4], [2, 1], [1, 2], [2, 2], [1, 2], [0, 1], [0, 0]], float)
    cfg = FilterConfig(strategy="top_k", value=0.5, metric="reward_sum")
    res = filter_rollouts(per_token.sum(-1), 2, cfg)
    assert res.kept_traj.tolist() == [0, 1, 4, 5]
    assert res.metrics["rollout/in_group_reward_sum"] == pytest.approx(6.0)
    assert res.metrics["rollout/chosen_in_group_reward_sum"] == pytest.approx(8.5)


def test_empty_filter_streak_and_metrics():
    cfg = FilterConfig(strategy="top_p", value=0.9, include_zero=False, empty_stop_steps=2)
    empty = filter_rollouts(np.ones(8), 4, cfg)
    full = filter_rollouts(np.arange(8.0), 4, cfg)
    assert empty.empty and empty.metrics["rollout/chosen_in_group_reward_std"] == 0.0
    streak, stop, m = update_empty_streak(0, empty, cfg.empty_stop_steps)
    assert (streak, stop, m["rollout/empty_after_filter"]) == (1, False, 1.0)
    streak, stop, m = update_empty_streak(streak, empty, cfg.empty_stop_steps)
    assert (streak, stop, m["rollout/consecutive_empty_after_filter_steps"]) == (2, True, 2.0)
    assert update_empty_streak(streak, full, 2)[:2] == (0, False)
    assert update_empty_streak(9, empty, 0)[1] is False


def test_advantage_scale():
    assert advantage_scale(0.25, "none") == 1.0
    assert advantage_scale(0.25, "linear") == 0.25
    assert advantage_scale(0.25, "sqrt") == pytest.approx(0.5)
    with pytest.raises(ValueError):
        advantage_scale(0.5, "log")


def test_bucket_size():
    assert bucket_size(0, multiple=32) == 0
    assert bucket_size(48, multiple=32) == 64
    assert bucket_size(33, pow2=True) == 64
    assert bucket_size(40, pow2=True, multiple=32, cap=128) == 64
    assert bucket_size(100, pow2=True, cap=112) == 112
    with pytest.raises(ValueError, match="exceed"):
        bucket_size(9, cap=8)


def test_compact_gathers_pads_and_keeps_array_kind():
    batch = {
        "tokens": jnp.arange(24, dtype=jnp.int32).reshape(8, 3),
        "mask": jnp.ones((8, 3), bool),
        "reward": np.arange(8, dtype=np.float32),
    }
    kept = np.array([2, 3, 6])
    out, valid = compact(batch, kept, multiple=4)
    assert valid.tolist() == [True, True, True, False]
    np.testing.assert_array_equal(out["tokens"][:3], np.asarray(batch["tokens"])[kept])
    assert not np.asarray(out["mask"][3]).any() and np.asarray(out["tokens"][3]).sum() == 0
    assert isinstance(out["reward"], np.ndarray) and out["reward"].tolist() == [2, 3, 6, 0]
    assert isinstance(out["tokens"], jnp.ndarray)
    with pytest.raises(ValueError, match="leading"):
        compact({"a": np.zeros(4), "b": np.zeros(5)}, kept)
    with pytest.raises(ValueError, match="kept_rows"):
        compact(batch, np.array([8]))


def test_filter_then_compact_drops_compute_of_filtered_groups():
    rewards = np.array([0, 0, 1, 0, 1, 1, 0, 1, 0, 0, 0, 0, 1, 1, 1, 1], float)
    res = filter_rollouts(rewards, 4, FilterConfig(value=0.9, include_zero=False))
    batch = {"r": np.repeat(rewards[:, None], 5, axis=1)}
    out, valid = compact(batch, res.kept_traj, multiple=4)
    assert out["r"].shape[0] == 8 < rewards.size  # two groups of four kept
    np.testing.assert_array_equal(out["r"][:, 0], rewards[res.kept_traj])


def test_a_group_that_env_failures_left_with_one_member_is_not_kept():
    """Failed episodes leave their group's score; a group left with one healthy member has no baseline
    (GRPO's group-of-one rule would train on its raw score), so it never trains, whatever the strategy."""
    rewards = np.array([1, 0, 0, 0, 1, 0, 1, 0, 5, 0, 0, 0], float)
    valid = np.array([1, 1, 1, 1, 1, 0, 0, 0, 1, 1, 0, 1], bool)
    res = filter_rollouts(rewards, 4, FilterConfig(), valid=valid)  # the no-op filter keeps every group ...
    assert res.kept_groups.tolist() == [0, 2]  # ... but group 1's one healthy member
    assert res.metrics["rollout/groups_broken_by_env_errors"] == 1.0
    assert res.scores[1] == 0.0
    # with groups of one (no group statistics at all), a healthy episode still trains
    single = filter_rollouts(rewards[:3], 1, FilterConfig(), valid=np.array([1, 0, 1], bool))
    assert single.kept_groups.tolist() == [0, 2]
    assert "rollout/groups_broken_by_env_errors" not in filter_rollouts(rewards, 4, FilterConfig()).metrics


def test_groups_broken_by_env_errors_stay_out_of_the_in_group_figures():
    """Group 1 keeps one healthy member: its std is 0 by definition, not a measurement, so it joins neither the
    in_group std (the reward-collapse early stop reads in_group_reward_std) nor the zero count; its one reward
    is still a mean, max and sum. Group 3 lost both members: it has no figure at all."""
    rewards = np.array([0.0, 2.0, 3.0, 7.0, 1.0, 1.0, 4.0, 4.0])
    valid = np.array([1, 1, 1, 0, 1, 1, 0, 0], bool)
    m = filter_rollouts(rewards, 2, FilterConfig(), valid=valid).metrics
    assert m["rollout/in_group_reward_std"] == pytest.approx(np.sqrt(2) / 2)  # groups 0 (std sqrt 2) and 2 (0)
    assert m["rollout/in_group_std"] == m["rollout/in_group_reward_std"]
    assert m["rollout/in_group_reward_mean"] == pytest.approx((1 + 3 + 1) / 3)
    assert m["rollout/in_group_reward_max"] == pytest.approx((2 + 3 + 1) / 3)
    assert m["rollout/in_group_reward_sum"] == pytest.approx((2 + 3 + 2) / 3)
    assert m["rollout/filter_zero_count"] == 1.0  # group 2's equal rewards, not groups 1 and 3
    assert m["rollout/filter_kept_ratio"] == pytest.approx(2 / 4)  # over all groups, as RAGEN's
    everyone_failed = filter_rollouts(rewards, 2, FilterConfig(), valid=np.zeros(8, bool)).metrics
    assert everyone_failed["rollout/in_group_reward_std"] == 0.0 and everyone_failed["rollout/filter_zero_count"] == 0


@pytest.mark.parametrize(
    "name, canonical",
    [("reward_std", "reward_variance"), ("entropy_std", "entropy_variance"), ("Reward_Variance", "reward_variance"),
     ("LENGTH", "length"), (None, "reward_variance")],
)
def test_metric_names_resolve_as_ragen_build_rollout_filter(name, canonical):
    # RAGEN's build_rollout_filter lower-cases the metric, defaults None to reward_variance and maps the
    # aliases reward_std -> reward_variance, entropy_std -> entropy_variance
    cfg = FilterConfig.from_mapping({"rollout_filter_metric": name})
    assert cfg.metric == canonical
    ent = np.array([1.0, 3.0, 2.0, 2.0])
    rewards = np.array([0.0, 1.0, 2.0, 5.0])
    res = filter_rollouts(rewards, 2, cfg, entropy=ent, length=ent)
    expected = filter_rollouts(rewards, 2, FilterConfig(metric=canonical), entropy=ent, length=ent)
    np.testing.assert_array_equal(res.scores, expected.scores)
    assert res.metrics == expected.metrics


def test_non_empty_step_logs_the_reset_streak():
    # RAGEN logs both rollout/empty_after_filter and rollout/consecutive_empty_after_filter_steps every trained
    # step (0.0 after a step that kept groups), so the streak's curve returns to 0 rather than stopping
    cfg = FilterConfig(strategy="top_p", value=0.9, include_zero=False)
    full = filter_rollouts(np.arange(8.0), 4, cfg)
    streak, stop, m = update_empty_streak(3, full, 5)
    assert (streak, stop) == (0, False)
    assert m == {"rollout/empty_after_filter": 0.0, "rollout/consecutive_empty_after_filter_steps": 0.0}


# --- user metrics (FILTER_METRICS) ---
def test_a_registered_filter_metric_scores_groups_by_its_quantity():
    from ragen_jax.filtering import FILTER_METRICS, FilterMetric, metric_quantity

    seen = {}

    def longest_member(stats):
        seen.update(stats)
        return np.where(stats["valid"], stats["values"], 0.0).max(axis=1)

    FILTER_METRICS.register("LongestMember", FilterMetric("length", longest_member))
    try:
        cfg = FilterConfig(metric="LongestMember", strategy="top_k", value=0.5)
        assert cfg.metric == "LongestMember" and metric_quantity(cfg.metric) == "length"  # kept as written
        length, valid = np.array([3.0, 9.0, 4.0, 5.0]), np.array([True, False, True, True])
        res = filter_rollouts(np.zeros(4), 2, cfg, length=length, valid=valid)
        np.testing.assert_allclose(res.scores, [3.0, 5.0])  # the failed member's 9 does not count
        assert res.kept_groups.tolist() == [1]
        assert seen["values"].shape == (2, 2) and seen["valid"].tolist() == [[True, False], [True, True]]
        np.testing.assert_allclose(seen["mean"], [3.0, 4.5])
        assert res.metrics["rollout/in_group_length_mean"] == pytest.approx(3.75)
    finally:
        FILTER_METRICS.unregister("LongestMember")


@pytest.mark.parametrize("metric, message", [
    ("tests_missing_module:score", "filter metric 'tests_missing_module:score': Cannot import module"),
    ("numpy:mean", r'is the function .mean.: wrap it, FilterMetric\("reward", fn\); a metric is FilterMetric'),
    ("rewrd_variance", r"Unknown filter metric 'rewrd_variance'; choose one of \[.*'reward_variance'"),
])
def test_a_filter_metric_that_is_not_one_is_refused_by_name(metric, message):
    with pytest.raises(ValueError, match=message):
        FilterConfig(metric=metric)


def test_a_filter_metric_reading_a_quantity_the_trainer_does_not_measure_names_it():
    """A misspelt quantity was reported as the whole FilterMetric repr 'not a FilterMetric', which it is."""
    from ragen_jax.filtering import FILTER_METRICS, FilterMetric

    FILTER_METRICS.register("test_rewards_metric", FilterMetric("rewards", lambda stats: stats["std"]))
    try:
        with pytest.raises(ValueError, match=r"'test_rewards_metric' reads the quantity 'rewards', which the trainer "
                           r"does not measure; a metric is FilterMetric\(quantity, score\) with quantity one of"):
            FilterConfig(metric="test_rewards_metric")
    finally:
        FILTER_METRICS.unregister("test_rewards_metric")


@pytest.mark.parametrize("score, message", [
    (lambda stats: stats["mean"][:1], r"one finite score per group \[3\]; got shape \(1,\)"),
    (lambda stats: np.full_like(stats["mean"], np.nan), "with 3 not finite"),
    (lambda stats: 1 / 0, "ZeroDivisionError"),
])
def test_a_filter_metric_breaking_its_contract_stops_the_run_before_any_model_is_built(score, message):
    from configs.sokoban import get_config
    from ragen_jax.config import validate_config
    from ragen_jax.filtering import FILTER_METRICS, FilterMetric

    FILTER_METRICS.register("test_broken_metric", FilterMetric("reward", score))
    try:
        cfg = get_config("tiny")
        cfg.filter.metric = "test_broken_metric"
        with pytest.raises(ValueError, match=f"config.filter.metric: 'test_broken_metric' failed.*{message}"):
            validate_config(cfg)
    finally:
        FILTER_METRICS.unregister("test_broken_metric")
