"""Bandit: arm names, payouts, success, invalid names, exact observation text, gymnax API."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from envs import registry
from envs.bandit import ARM_PAIRS, Bandit

KEY = jax.random.PRNGKey(0)


def test_reset_shows_a_pair_in_random_order_with_exact_text():
    env = Bandit()
    firsts = []
    for i in range(60):
        _, state = env.reset(jax.random.PRNGKey(i))
        a, b = env.episode_arm_names(state)
        assert (a, b) in ARM_PAIRS["train"] or (b, a) in ARM_PAIRS["train"]
        firsts.append((a, b) in ARM_PAIRS["train"])
        text = env.render_text(state)
        assert text == (
            "You are playing a bandit game. Goal: Maximize your total reward by choosing which arm to pull. \n"
            "Game Rules: \n"
            f"1. There are 2 arms, named {a} and {b}\n"
            "2. Each arm has its own reward distribution, related to their names. \n"
            "3. Analyze the symbolic meaning of each arm's name to guess how their reward distribution might behave.\n"
            "4. Based on the symbolic meaning of their names, which arm do you think is more likely to give higher "
            f"rewards on average? Choose between {a} and {b}, and output like <answer> {a} </answer> or "
            f"<answer> {b} </answer>.\n")
    assert 0.2 < np.mean(firsts) < 0.8
    assert env.instruction() == ""


def test_payouts_and_success():
    env = Bandit()
    params = env.default_params
    _, state = env.reset(KEY)
    lo_name, hi_name = ARM_PAIRS["train"][int(state.pair)]
    lo, hi = env.action_lookup[lo_name.lower()], env.action_lookup[hi_name.lower()]
    keys = jax.random.split(KEY, 4000)
    step = jax.jit(jax.vmap(env.step_env, in_axes=(0, None, None, None)))
    _, s_lo, r_lo, t_lo, i_lo = step(keys, state, lo, params)
    _, s_hi, r_hi, t_hi, i_hi = step(keys, state, hi, params)
    assert np.allclose(r_lo, 0.1) and not np.asarray(i_lo["success"]).any() and np.asarray(t_lo).all()
    assert set(np.unique(np.asarray(r_hi)).tolist()) == {0.0, 1.0}
    assert float(np.mean(r_hi)) == pytest.approx(0.25, abs=0.03)
    assert np.asarray(i_hi["success"]).all()
    one = jax.tree.map(lambda x: x[0], s_lo)
    assert env.render_text(one) == f"{lo_name}: 0.1 points"


def test_name_not_in_episode_is_invalid_and_episode_continues():
    env = Bandit()
    _, state = env.reset(KEY)
    other = ARM_PAIRS["train"][(int(state.pair) + 1) % 12][0]
    _, new, reward, terminated, info = env.step_env(KEY, state, env.action_lookup[other.lower()], env.default_params)
    assert float(reward) == 0.0 and not bool(terminated)
    assert not bool(info["action_is_valid"]) and not bool(info["action_is_effective"])


def test_test_split_and_registry():
    env = registry.make("BanditTest")
    assert env.action_names == [n for pair in ARM_PAIRS["test"] for n in pair]
    assert env.action_lookup["dataScientist".lower()] == env.action_names.index("DataScientist")
    with pytest.raises(ValueError, match="arm_names"):
        Bandit(arm_names="dev")


def test_gymnax_api():
    env = Bandit()
    obs0, state = env.reset(KEY)
    obs, state2, reward, terminated, truncated, info = env.step(KEY, state, obs0[0])
    assert bool(terminated) and "final_observation" in info
    assert int(info["final_observation"][2]) == int(obs0[0])  # the pulled arm, before the auto-reset
    assert int(state2.pulled) == -1
