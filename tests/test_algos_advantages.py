"""Advantage estimators against hand-computed cases and plain-loop numpy references."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragen_jax import algos
from ragen_jax.algos import AdvantageInputs


@pytest.fixture(params=["eager", "jit"])
def run(request):
    """Call fn(inputs, **hparams) eagerly or under jit (hparams static), rlax style."""

    def call(fn, inputs, **hparams):
        if request.param == "jit":
            return jax.jit(functools.partial(fn, **hparams))(inputs)
        return fn(inputs, **hparams)

    return call


def np_whiten(x, mask):
    m = mask.astype(bool)
    mean = x[m].mean()
    var = x[m].var(ddof=1)
    return np.where(m, (x - mean) / np.sqrt(var + 1e-8), 0.0)


def np_gae_loop(rewards, values, mask, gamma, lam):
    """veRL's loop written out: masked tokens carry next value and running GAE unchanged."""
    b, t = rewards.shape
    adv = np.zeros((b, t))
    for i in range(b):
        next_v, last = 0.0, 0.0
        for j in reversed(range(t)):
            if mask[i, j]:
                last = rewards[i, j] + gamma * next_v - values[i, j] + gamma * lam * last
                next_v = values[i, j]
                adv[i, j] = last
    return adv


# Turn 1 = tokens 0-1, env tokens 2-3 (big values that must be skipped), turn 2 = token 4.
MT_REWARDS = np.array([[0.0, 0.0, 0.0, 0.0, 1.0]])
MT_VALUES = np.array([[0.5, 0.6, 9.0, 9.0, 0.8]])
MT_MASK = np.array([[1, 1, 0, 0, 1]])


def test_gae_multi_turn_hand_computed(run):
    inputs = AdvantageInputs(jnp.asarray(MT_REWARDS), jnp.asarray(MT_MASK), values=jnp.asarray(MT_VALUES))
    adv, ret = run(algos.gae, inputs, gamma=0.9, lam=0.5, whiten=False)
    # t4: 1 - 0.8 = 0.2; t1: 0.9*0.8 - 0.6 + 0.45*0.2 = 0.21; t0: 0.9*0.6 - 0.5 + 0.45*0.21 = 0.1345
    raw = np.array([[0.1345, 0.21, 0.0, 0.0, 0.2]])
    np.testing.assert_allclose(adv, raw, atol=1e-6)
    np.testing.assert_allclose(ret, np.array([[0.6345, 0.81, 0.0, 0.0, 1.0]]), atol=1e-6)
    adv_w, ret_w = run(algos.gae, inputs, gamma=0.9, lam=0.5)
    np.testing.assert_allclose(adv_w, np_whiten(raw, MT_MASK), atol=1e-5)
    np.testing.assert_allclose(ret_w, ret, atol=1e-6)


def test_gae_matches_loop_reference_on_random_batch(run):
    rng = np.random.default_rng(0)
    rewards = rng.normal(size=(4, 12))
    values = rng.normal(size=(4, 12))
    mask = (rng.random((4, 12)) < 0.6).astype(np.int32)
    mask[:, 0] = 1
    inputs = AdvantageInputs(jnp.asarray(rewards, jnp.float32), jnp.asarray(mask),
                             values=jnp.asarray(values, jnp.float32))
    raw = np_gae_loop(rewards, values, mask, 0.95, 0.9)
    adv, ret = run(algos.gae, inputs, gamma=0.95, lam=0.9)
    np.testing.assert_allclose(ret, np.where(mask, raw + values, 0.0), atol=1e-5)
    np.testing.assert_allclose(adv, np_whiten(raw, mask), atol=1e-4)


def test_bilevel_gae_ragen_example(run):
    # RAGEN's own example: rewards at tokens 4 and 9, values 0.1..1.0, gamma = lam = 1, hg = 0.95.
    rewards = jnp.array([[0, 0, 0, 0, 1, 0, 0, 0, 0, 1.0]])
    values = jnp.arange(1, 11, dtype=jnp.float32)[None] / 10
    inputs = AdvantageInputs(rewards, jnp.ones((1, 10)), values=values)
    adv, ret = run(algos.bilevel_gae, inputs, gamma=1.0, lam=1.0, high_level_gamma=0.95, whiten=False)
    # High level: A(9) = 1 - 1.0 = 0; A(4) = 1 + 0.95 * 1.0 - 0.5 + 0 = 1.45.
    # Low level restarts at each turn end and walks back with gamma = lam = 1.
    expected = np.array([[1.85, 1.75, 1.65, 1.55, 1.45, 0.4, 0.3, 0.2, 0.1, 0.0]])
    np.testing.assert_allclose(adv, expected, atol=1e-5)
    np.testing.assert_allclose(ret, expected + np.asarray(values), atol=1e-5)


def np_bilevel_loop(rewards, values, mask, ends, gamma, lam, hg):
    """RAGEN's two passes written as loops over explicit turn ends."""
    b, t = rewards.shape
    adv = np.zeros((b, t))
    for i in range(b):
        updated = rewards[i].copy()
        end_pos = [j for j in range(t) if ends[i, j]]
        last = 0.0
        for k in reversed(range(len(end_pos))):
            p = end_pos[k]
            nv = values[i, end_pos[k + 1]] if k + 1 < len(end_pos) else 0.0
            last = rewards[i, p] + hg * nv - values[i, p] + hg * lam * last
            updated[p] = last + values[i, p]
        valid = [j for j in range(t) if mask[i, j]]
        last = 0.0
        for k in reversed(range(len(valid))):
            p = valid[k]
            if ends[i, p]:
                last = updated[p] - values[i, p]
            else:
                nv = values[i, valid[k + 1]] if k + 1 < len(valid) else 0.0
                last = updated[p] + gamma * nv - values[i, p] + gamma * lam * last
            adv[i, p] = last
    return adv


def test_bilevel_gae_explicit_turn_ends_multi_turn(run):
    # Two rows, three turns separated by env tokens; a zero-reward middle turn is still a turn
    # when the ends come from the mask (it would be merged into the next turn by RAGEN's rule).
    mask = np.array([[1, 1, 0, 1, 1, 0, 0, 1, 0],
                     [1, 0, 1, 1, 1, 0, 1, 1, 1]])
    rewards = np.zeros((2, 9))
    rewards[0, [1, 7]] = [0.5, 1.0]
    rewards[1, [0, 4, 8]] = [-0.1, 0.0, 2.0]
    values = np.random.default_rng(1).normal(size=(2, 9))
    ends = np.asarray(algos.turn_ends_from_mask(jnp.asarray(mask)))
    np.testing.assert_array_equal(ends[0], [0, 1, 0, 0, 1, 0, 0, 1, 0])
    inputs = AdvantageInputs(jnp.asarray(rewards, jnp.float32), jnp.asarray(mask),
                             values=jnp.asarray(values, jnp.float32), turn_end_mask=jnp.asarray(ends))
    expected = np_bilevel_loop(rewards, values, mask, ends, 0.99, 0.9, 0.8)
    adv, ret = run(algos.bilevel_gae, inputs, gamma=0.99, lam=0.9, high_level_gamma=0.8, whiten=False)
    np.testing.assert_allclose(adv, expected, atol=1e-5)
    np.testing.assert_allclose(ret, np.where(mask, expected + values, 0.0), atol=1e-5)
    adv_w, _ = run(algos.bilevel_gae, inputs, gamma=0.99, lam=0.9, high_level_gamma=0.8)
    np.testing.assert_allclose(adv_w, np_whiten(expected, mask), atol=1e-4)


def test_bilevel_default_turn_ends_are_nonzero_rewards():
    mask = jnp.ones((1, 6))
    rewards = jnp.array([[0, 0, 0.3, 0, 0, 1.0]])
    values = jnp.linspace(0.1, 0.6, 6)[None]
    implicit = algos.bilevel_gae(AdvantageInputs(rewards, mask, values=values), whiten=False)
    explicit = algos.bilevel_gae(AdvantageInputs(rewards, mask, values=values,
                                                 turn_end_mask=rewards != 0), whiten=False)
    np.testing.assert_allclose(implicit[0], explicit[0])
    # With gamma = 1 the high level differs from plain GAE only by the 0.95 turn discount.
    plain = algos.gae(AdvantageInputs(rewards, mask, values=values), whiten=False)[0]
    assert not np.allclose(implicit[0], plain)
    high_1 = algos.bilevel_gae(AdvantageInputs(rewards, mask, values=values), high_level_gamma=1.0, whiten=False)
    np.testing.assert_allclose(high_1[0], plain, atol=1e-6)


GROUP_REWARDS = np.zeros((5, 4))
GROUP_REWARDS[:, 2] = [1.0, 0.0, 0.0, 3.0, 5.0]  # groups: rows {0, 1, 2}, {3}, {4}
GROUP_REWARDS[0, 3] = 1.0  # row 0 score = 2
GROUP_IDS = np.array([7, 7, 7, 3, 9])
GROUP_MASK = np.array([[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 1, 0], [1, 1, 1, 0], [0, 1, 1, 0]])


def _group_inputs():
    return AdvantageInputs(jnp.asarray(GROUP_REWARDS, jnp.float32), jnp.asarray(GROUP_MASK),
                           group_ids=jnp.asarray(GROUP_IDS))


@pytest.mark.parametrize("norm", [True, False])
def test_grpo_and_drgrpo_hand_computed(run, norm):
    adv, ret = run(algos.grpo, _group_inputs(), norm_adv_by_std_in_grpo=norm)
    # group 7 scores [2, 0, 0]: mean 2/3, unbiased std sqrt(4/3); singletons: mean 0, std 1.
    centred = np.array([4 / 3, -2 / 3, -2 / 3, 3.0, 5.0])
    std = np.array([np.sqrt(4 / 3)] * 3 + [1.0, 1.0])
    per_row = centred / (std + 1e-6) if norm else centred
    expected = per_row[:, None] * GROUP_MASK
    np.testing.assert_allclose(adv, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ret, expected, rtol=1e-5, atol=1e-6)


def test_rloo_hand_computed(run):
    adv, _ = run(algos.rloo, _group_inputs())
    # row 0: 2 - mean(0, 0) = 2; rows 1, 2: 0 - mean(2, 0) = -1; singletons keep their score.
    expected = np.array([2.0, -1.0, -1.0, 3.0, 5.0])[:, None] * GROUP_MASK
    np.testing.assert_allclose(adv, expected, rtol=1e-5, atol=1e-6)


def test_reinforce_plus_plus_baseline_hand_computed(run):
    """RAGEN's adv_estimator=reinforce_plus_plus_baseline (veRL's): score minus group mean (0 for a group of one)
    on every sampled token, whitened over the batch's sampled tokens (unbiased variance); returns = advantages."""
    adv, ret = run(algos.ADVANTAGE_ESTIMATORS.get("reinforce_plus_plus_baseline"), _group_inputs())
    centred = np.array([4 / 3, -2 / 3, -2 / 3, 3.0, 5.0])[:, None] * np.ones((1, 4))
    tokens = centred[GROUP_MASK > 0]
    expected = (centred - tokens.mean()) / np.sqrt(tokens.var(ddof=1) + 1e-8) * GROUP_MASK
    np.testing.assert_allclose(adv, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ret, expected, rtol=1e-5, atol=1e-6)


def _ragen_grpo_reference(scores, index, episode_ids, norm, eps=1e-6):
    """RAGEN's `compute_grpo_outcome_advantage` loop with episode ids: one score per (group, episode), the
    first row seen; torch.std is unbiased; a group of one has mean 0 and std 1."""
    seen, by_group = set(), {}
    for i, score in enumerate(scores):
        if (index[i], episode_ids[i]) not in seen:
            seen.add((index[i], episode_ids[i]))
            by_group.setdefault(index[i], []).append(score)
    out = []
    for i, score in enumerate(scores):
        group = np.asarray(by_group[index[i]], np.float64)
        mean, std = (0.0, 1.0) if len(group) == 1 else (group.mean(), group.std(ddof=1))
        out.append((score - mean) / (std + eps) if norm else score - mean)
    return np.asarray(out)


def test_grpo_counts_an_episode_once_whatever_its_turn_rows(run):
    # single_turn rows: a 3-turn success (reward 1 on each of its rows) and a 1-turn failure of one group
    rewards = np.zeros((4, 3), np.float32)
    rewards[:3, 2] = 1.0
    inputs = AdvantageInputs(jnp.asarray(rewards), jnp.ones((4, 3)), group_ids=jnp.array([0, 0, 0, 0]),
                             episode_ids=jnp.array([5, 5, 5, 6]))
    adv, _ = run(algos.grpo, inputs)
    np.testing.assert_allclose(adv[:, 0], [1 / np.sqrt(2)] * 3 + [-1 / np.sqrt(2)], rtol=1e-5, atol=1e-6)
    per_row, _ = run(algos.grpo, inputs.replace(episode_ids=None))  # the rows counted as 4 episodes
    np.testing.assert_allclose(per_row[:, 0], [0.5, 0.5, 0.5, -1.5], rtol=1e-5, atol=1e-6)


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
@pytest.mark.parametrize("norm", [True, False])
@pytest.mark.parametrize("seed", range(4))
def test_grpo_with_episode_ids_matches_ragen(run, norm, seed):
    rng = np.random.default_rng(seed)
    n = 23
    episode_ids = np.sort(rng.integers(0, 9, n))  # rows of an episode are adjacent, as the batch builds them
    group_of_episode = rng.integers(0, 3, 9)
    group_ids = group_of_episode[episode_ids]
    rewards = np.zeros((n, 4), np.float32)
    rewards[:, -1] = rng.integers(0, 3, n)  # per-turn rows of one episode may score differently (turn scores)
    inputs = AdvantageInputs(jnp.asarray(rewards), jnp.ones((n, 4)), group_ids=jnp.asarray(group_ids),
                             episode_ids=jnp.asarray(episode_ids))
    adv, _ = run(algos.grpo, inputs, norm_adv_by_std_in_grpo=norm)
    expected = _ragen_grpo_reference(rewards.sum(-1), group_ids, episode_ids, norm)
    np.testing.assert_allclose(adv[:, 0], expected, rtol=1e-5, atol=1e-6)


def test_rloo_leaves_out_the_rows_whole_episode(run):
    rewards = np.zeros((5, 2), np.float32)
    rewards[:, 1] = [2.0, 2.0, 0.0, 1.0, 4.0]  # episode 1 has two turn rows; episodes 1, 2, 3 form a group
    inputs = AdvantageInputs(jnp.asarray(rewards), jnp.ones((5, 2)), group_ids=jnp.array([0, 0, 0, 0, 1]),
                             episode_ids=jnp.array([1, 1, 2, 3, 4]))
    adv, _ = run(algos.rloo, inputs)
    # episode 1: 2 - mean(0, 1); episode 2: 0 - mean(2, 1); episode 3: 1 - mean(2, 0); a lone episode keeps 4
    np.testing.assert_allclose(adv[:, 0], [1.5, 1.5, -1.5, 0.0, 4.0], rtol=1e-5, atol=1e-6)


def test_reinforce_plus_plus_hand_computed(run):
    rewards = np.array([[0.0, 0.5, 0.0, 0.0, 1.0], [0.0, 0.0, 2.0, 0.0, 0.0]])
    mask = np.array([[1, 1, 0, 1, 1], [1, 1, 1, 0, 0]])
    inputs = AdvantageInputs(jnp.asarray(rewards, jnp.float32), jnp.asarray(mask))
    adv, ret = run(algos.reinforce_plus_plus, inputs, gamma=0.5)
    # row 0 (token 2 is an env token, skipped): G4 = 1, G3 = 0.5, G1 = 0.5 + 0.25 = 0.75, G0 = 0.375
    # row 1: G2 = 2, G1 = 1, G0 = 0.5
    expected_ret = np.array([[0.375, 0.75, 0.0, 0.5, 1.0], [0.5, 1.0, 2.0, 0.0, 0.0]])
    np.testing.assert_allclose(ret, expected_ret, atol=1e-6)
    np.testing.assert_allclose(adv, np_whiten(expected_ret, mask), atol=1e-5)


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_estimators_zero_outside_mask_and_stop_gradient():
    rng = np.random.default_rng(3)
    mask = jnp.asarray(rng.random((3, 7)) < 0.5)
    inputs = AdvantageInputs(jnp.asarray(rng.normal(size=(3, 7)), jnp.float32), mask,
                             values=jnp.asarray(rng.normal(size=(3, 7)), jnp.float32),
                             group_ids=jnp.array([0, 0, 1]))
    for name in ["gae", "bilevel_gae", "grpo", "rloo", "reinforce_plus_plus"]:
        adv, ret = algos.compute_advantages(name, inputs, gamma=0.9, lam=0.8, high_level_gamma=0.7,
                                            norm_adv_by_std_in_grpo=True, unused_key=1)
        assert np.all(np.asarray(adv)[~np.asarray(mask)] == 0), name
        assert np.all(np.asarray(ret)[~np.asarray(mask)] == 0), name
    grad = jax.grad(lambda v: algos.gae(inputs.replace(values=v))[0].sum())(inputs.values)
    assert np.all(np.asarray(grad) == 0)


def test_missing_inputs_have_clear_errors():
    inputs = AdvantageInputs(jnp.zeros((2, 3)), jnp.ones((2, 3)))
    with pytest.raises(ValueError, match="values"):
        algos.gae(inputs)
    with pytest.raises(ValueError, match="group_ids"):
        algos.grpo(inputs)


def test_custom_estimator_by_registration_and_import_path():
    @algos.ADVANTAGE_ESTIMATORS.register("test_sign_of_score")
    def sign_of_score(inputs, *, scale=1.0):
        score = inputs.token_level_rewards.sum(-1, keepdims=True)
        adv = scale * jnp.sign(score) * inputs.response_mask
        return adv, adv

    try:
        inputs = AdvantageInputs(jnp.array([[0.0, 2.0], [0.0, -1.0]]), jnp.array([[1, 1], [0, 1]]))
        adv, _ = algos.compute_advantages("test_sign_of_score", inputs, scale=2.0, gamma=0.5)
        np.testing.assert_allclose(adv, [[2.0, 2.0], [0.0, -2.0]])
        via_path = algos.compute_advantages("ragen_jax.algos.advantages:grpo", inputs.replace(
            group_ids=jnp.array([0, 0])), norm_adv_by_std_in_grpo=False)
        np.testing.assert_allclose(via_path[0], [[1.5, 1.5], [0.0, -1.5]])
    finally:
        algos.ADVANTAGE_ESTIMATORS.unregister("test_sign_of_score")


_GAE = jax.jit(functools.partial(algos.gae, gamma=0.97, lam=0.85, whiten=False))
_BILEVEL = jax.jit(functools.partial(algos.bilevel_gae, gamma=0.97, lam=0.85, high_level_gamma=0.9, whiten=False))


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**31 - 1))
def test_property_gae_and_bilevel_match_loop_references(seed):
    rng = np.random.default_rng(seed)
    shape = (3, 8)
    mask = (rng.random(shape) < 0.6).astype(np.int32)
    rewards = np.where(rng.random(shape) < 0.3, rng.normal(size=shape), 0.0)
    values = rng.normal(size=shape)
    gamma, lam, hg = 0.97, 0.85, 0.9
    inputs = AdvantageInputs(jnp.asarray(rewards, jnp.float32), jnp.asarray(mask),
                             values=jnp.asarray(values, jnp.float32))
    adv, _ = _GAE(inputs)
    np.testing.assert_allclose(adv, np_gae_loop(rewards, values, mask, gamma, lam), atol=1e-4)
    adv, _ = _BILEVEL(inputs)
    expected = np_bilevel_loop(rewards, values, mask, rewards != 0, gamma, lam, hg)
    np.testing.assert_allclose(adv, expected, atol=1e-4)


@pytest.mark.parametrize("name", ["grpo", "rloo"])
def test_group_statistics_stay_in_full_float32(name):
    # A float32 dot runs in TF32 (GPU) or bfloat16 (TPU) by default: a group mean taken by a matmul rounds the
    # rewards (10.9 -> 10.898), and a group of equal rewards then gets advantages near -1 instead of 0.
    rewards = np.zeros((6, 3), np.float32)
    rewards[:, -1] = [10.9, 10.9, 10.9, 10.9, 0.3, 1.7]
    inputs = AdvantageInputs(jnp.asarray(rewards), jnp.ones((6, 3)), group_ids=jnp.array([0, 0, 0, 0, 1, 1]),
                             episode_ids=jnp.arange(6))
    jaxpr = str(jax.make_jaxpr(algos.ADVANTAGE_ESTIMATORS.get(name))(inputs))
    assert "dot_general" not in jaxpr
    adv, _ = algos.compute_advantages(name, inputs)
    np.testing.assert_allclose(np.asarray(adv)[:4], 0.0, atol=1e-5)  # a TF32 mean is 2e-3 off: GRPO gives +0.87
