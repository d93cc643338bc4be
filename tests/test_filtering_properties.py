"""Property tests for the rollout filter's invariants (hypothesis)."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ragen_jax.filtering import FilterConfig, filter_rollouts, select_groups

# Scores on a 1/8 grid keep float sums exact, so threshold decisions do not depend on order.
grid_scores = st.lists(st.integers(0, 40).map(lambda v: v / 8.0), min_size=1, max_size=12)
strategy_args = st.sampled_from(
    [("top_p", "linear"), ("top_p", "softmax"), ("top_k", "linear"), ("top_k_abs", "linear"),
     ("min_p", "linear")]
)
values = st.sampled_from([0.1, 0.3, 0.5, 0.6, 0.9, 0.99, 1.0, 2.0])


@settings(max_examples=150, deadline=None)
@given(grid_scores, strategy_args, values, st.booleans(), st.booleans(), st.randoms())
def test_kept_scores_invariant_under_group_permutation(scores, strat, value, include_zero, largest, rnd):
    scores = np.array(scores)
    perm = np.array(rnd.sample(range(scores.size), scores.size))
    kwargs = dict(include_zero=include_zero, prob_mode=strat[1], largest=largest)
    kept = select_groups(scores, strat[0], value, **kwargs)
    kept_perm = select_groups(scores[perm], strat[0], value, **kwargs)
    # The multiset of kept scores never depends on group order (ties may swap equal groups) ...
    assert sorted(scores[kept]) == sorted(scores[perm][kept_perm])
    # ... and with distinct scores the kept set maps exactly through the permutation.
    if np.unique(scores).size == scores.size:
        assert sorted(perm[kept_perm].tolist()) == kept.tolist()


@settings(max_examples=150, deadline=None)
@given(grid_scores, strategy_args, values, st.booleans())
def test_never_keeps_zero_group_when_include_zero_false(scores, strat, value, largest):
    scores = np.array(scores)
    kept = select_groups(scores, strat[0], value, include_zero=False, prob_mode=strat[1], largest=largest)
    assert np.all(np.abs(scores[kept]) > 1e-10)
    assert kept.tolist() == sorted(set(kept.tolist()))


@settings(max_examples=100, deadline=None)
@given(grid_scores, st.sampled_from(["linear", "softmax"]))
def test_value_one_keeps_all(scores, mode):
    scores = np.array(scores)
    assert select_groups(scores, "top_p", 1.0, prob_mode=mode).tolist() == list(range(scores.size))
    nonzero = np.nonzero(scores)[0].tolist()
    assert select_groups(scores, "top_p", 1.0, include_zero=False, prob_mode=mode).tolist() == nonzero


@settings(max_examples=100, deadline=None)
@given(
    st.integers(1, 6),
    st.integers(1, 5),
    st.data(),
    strategy_args,
    values,
    st.booleans(),
)
def test_kept_groups_are_whole(num_groups, group_size, data, strat, value, include_zero):
    rewards = np.array(
        data.draw(st.lists(st.integers(-3, 3), min_size=num_groups * group_size,
                           max_size=num_groups * group_size)), float
    )
    cfg = FilterConfig(strategy=strat[0], value=value, prob_mode=strat[1], include_zero=include_zero)
    res = filter_rollouts(rewards, group_size, cfg)
    groups_of_kept = res.kept_traj // group_size
    for g in np.unique(groups_of_kept):
        assert np.sum(groups_of_kept == g) == group_size
    assert np.unique(groups_of_kept).tolist() == res.kept_groups.tolist()
    assert res.metrics["rollout/filter_kept_ratio"] == res.kept_groups.size / num_groups


@settings(max_examples=100, deadline=None)
@given(grid_scores, st.sampled_from([0.3, 0.6, 0.9]))
def test_linear_top_p_keeps_a_prefix_of_the_sorted_scores(scores, value):
    scores = np.array(scores)
    kept = select_groups(scores, "top_p", value)
    if kept.size:  # every kept group scores at least as high as every dropped one
        dropped = np.setdiff1d(np.arange(scores.size), kept)
        assert not dropped.size or scores[kept].min() >= scores[dropped].max()
        assert scores[kept].sum() >= value * scores.sum() - 0.01 - 1e-6
