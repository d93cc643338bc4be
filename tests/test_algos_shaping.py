"""RAGEN's advantage options after the estimator: soft reweighting by group std, GRPO length weighting, zeroing."""

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest

from ragen_jax.algos.shaping import length_weights, shape_advantages, soft_advantage_weights


def _ragen_soft_weights(scores, index):
    """agent_trainer: GRPO's per-prompt std (torch.std, a prompt of one: 1), divided by the largest + 1e-6."""
    std = {}
    for g in np.unique(index):
        s = scores[index == g]
        std[g] = 1.0 if len(s) == 1 else float(np.std(s, ddof=1))
    top = max(std.values())
    return np.array([std[g] / (top + 1e-6) for g in index])


def test_soft_weights_match_ragen():
    rng = np.random.default_rng(0)
    scores = rng.integers(0, 3, 12).astype(np.float32)
    index = np.array([0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 4])
    mask = np.ones((12, 5), np.float32)
    got = soft_advantage_weights(jnp.asarray(scores), jnp.asarray(index), jnp.asarray(mask))
    np.testing.assert_allclose(got, _ragen_soft_weights(scores, index), rtol=1e-5, atol=1e-6)


def test_padding_rows_take_no_part_in_the_largest_std():
    scores = jnp.array([0.0, 2.0, 1.0, 1.0, 0.0])  # groups {0, 1} std 1.41, {2, 3} std 0; row 4 is padding
    mask = jnp.ones((5, 3)).at[4].set(0.0)
    weights = soft_advantage_weights(scores, jnp.array([0, 0, 1, 1, -1]), mask)
    np.testing.assert_allclose(weights[:4], [1, 1, 0, 0], atol=1e-5)  # a lone padding row (std 1) is not the max


def test_length_weights_match_ragen():
    mask = np.zeros((4, 10), np.float32)
    for r, n in enumerate([2, 4, 6, 8]):
        mask[r, :n] = 1
    mean = 5.0
    np.testing.assert_allclose(length_weights(jnp.asarray(mask)), [mean / 2, mean / 4, mean / 6, mean / 8], rtol=1e-5,
                               atol=1e-6)
    padded = np.concatenate([mask, np.zeros((2, 10), np.float32)])
    np.testing.assert_allclose(length_weights(jnp.asarray(padded))[:4], [mean / 2, mean / 4, mean / 6, mean / 8],
                               rtol=1e-5, atol=1e-6)


def test_shape_advantages_applies_each_option():
    adv = jnp.ones((3, 4))
    mask = jnp.array([[1, 1, 0, 0], [1, 1, 1, 1], [1, 1, 1, 1]], jnp.float32)
    scores, groups = jnp.array([1.0, 0.0, 0.0]), jnp.array([0, 0, 1])
    assert (shape_advantages(adv, mask, scores, groups) == adv).all()
    soft = shape_advantages(adv, mask, scores, groups, soft_reweight=True)
    np.testing.assert_allclose(soft[:, 0], [0.7071 / 1.0, 0.7071 / 1.0, 1.0], rtol=1e-3)  # std 0.707 vs a lone 1
    np.testing.assert_allclose(shape_advantages(adv, mask, scores, groups, length_weight=True)[:, 0],
                               [10 / 3 / 2, 10 / 3 / 4, 10 / 3 / 4], rtol=1e-5, atol=1e-6)
    assert not shape_advantages(adv, mask, scores, groups, soft_reweight=True, zero=True).any()


@pytest.mark.parametrize("option", ["soft_advantage_reweight", "grpo_advantage_length_weight", "zero_task_advantage"])
def test_the_trainers_advantages_apply_the_configured_option(option):
    from ragen_jax.trainer.steps import make_step_fns
    from test_algos_step_integration import BASE, ROWS, TX, split_actor

    rng = np.random.default_rng(1)
    mask = (rng.random((4, 6)) < 0.7).astype(np.float32)
    mask[:, 0] = 1
    rewards = np.zeros_like(mask)
    rewards[:, 0] = [1.0, 0.0, 2.0, 2.5]
    args = (jnp.asarray(rewards), jnp.asarray(mask), jnp.zeros_like(jnp.asarray(mask)), jnp.array([0, 0, 1, 1]))
    graphdef = split_actor()[0]
    plain, _ = make_step_fns(graphdef, None, BASE, TX, None, ROWS)["advantages"](*args)
    shaped, _ = make_step_fns(graphdef, None, dataclasses.replace(BASE, **{option: True}), TX, None,
                              ROWS)["advantages"](*args)
    expected = shape_advantages(plain, jnp.asarray(mask), jnp.asarray(rewards).sum(-1), args[3], **{
        "soft_advantage_reweight": {"soft_reweight": True}, "grpo_advantage_length_weight": {"length_weight": True},
        "zero_task_advantage": {"zero": True}}[option])
    np.testing.assert_allclose(shaped, expected, rtol=1e-6, atol=1e-6)
    assert np.abs(np.asarray(shaped) - np.asarray(plain)).max() > 1e-3
