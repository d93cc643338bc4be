"""Bandit: arm names, payouts, success, invalid names, exact observation text, gymnax API."""

import jax
import numpy as np
import pytest

from envs import registry
from envs.batch import JaxEnvBatch
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
    _, states = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(KEY, 4000), params)
    lo = 2 * states.pair  # name ids: 2k the low arm of pair k, 2k + 1 its high arm
    step = jax.jit(jax.vmap(env.step_env, in_axes=(None, 0, 0, None)))
    _, s_lo, r_lo, t_lo, i_lo = step(KEY, states, lo, params)
    _, s_hi, r_hi, t_hi, i_hi = step(KEY, states, lo + 1, params)
    assert np.allclose(r_lo, 0.1) and not np.asarray(i_lo["success"]).any() and np.asarray(t_lo).all()
    assert set(np.unique(np.asarray(r_hi)).tolist()) == {0.0, 1.0}
    assert float(np.mean(r_hi)) == pytest.approx(0.25, abs=0.03)
    assert np.asarray(i_hi["success"]).all()
    one = jax.tree.map(lambda x: x[0], s_lo)
    lo_name = ARM_PAIRS["train"][int(one.pair)][0]
    assert env.render_text(one) == f"{lo_name}: 0.1 points"


# RAGEN's BanditEnv (ragen/env/bandit/env.py) reset with these gym seeds, recorded once by running it:
# (seed, low arm, high arm, arm shown first, high arm's payout, low arm's payout)
RAGEN_EPISODES = [
    (0, "Technician", "Youtuber", "Technician", 1.0, 0.1), (1, "Clerk", "Freelancer", "Freelancer", 1.0, 0.1),
    (2, "Accountant", "StockBroker", "Accountant", 0.0, 0.1), (7, "Technician", "Youtuber", "Youtuber", 0.0, 0.1),
    (123, "Planner", "Artist", "Planner", 1.0, 0.1), (10000, "Clerk", "Freelancer", "Clerk", 0.0, 0.1),
    (10001, "Planner", "Artist", "Artist", 0.0, 0.1), (424242, "Pharmacist", "Musician", "Pharmacist", 0.0, 0.1),
]


@pytest.mark.parametrize("pull", ["high", "low"])
def test_a_seed_gives_ragens_episode(pull):
    env = Bandit()
    batch = JaxEnvBatch(env, len(RAGEN_EPISODES))
    obs = batch.reset([e[0] for e in RAGEN_EPISODES], instances=[0] * len(RAGEN_EPISODES))
    arms = [e[2] if pull == "high" else e[1] for e in RAGEN_EPISODES]
    result = batch.step([[env.action_lookup[a.lower()]] for a in arms], np.ones(len(arms), bool))
    for i, (seed, lo, hi, first, hi_pay, lo_pay) in enumerate(RAGEN_EPISODES):
        second = hi if first == lo else lo
        assert f"named {first} and {second}\n" in obs[i], seed
        assert result.rewards[i] == pytest.approx(hi_pay if pull == "high" else lo_pay), seed
        assert bool(result.success[i]) == (pull == "high")


def test_group_members_draw_independently_like_ragens_instance_counter():
    """RAGEN adds each env's instance counter to the group's seed: members of a group are the episodes of
    seed + instance; the same seeds and instances replay exactly."""
    env = Bandit()
    batch = JaxEnvBatch(env, 16)
    obs = batch.reset([10000] * 16)
    alone = JaxEnvBatch(env, 1)
    for i in (0, 5, 15):
        assert alone.reset([10000 + i], instances=[0]) == [obs[i]]
    assert batch.episode_seeds == [10000 + i for i in range(16)]
    assert JaxEnvBatch(env, 16).reset([10000] * 16) == obs


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_payout_and_order_frequencies_over_seeds():
    env = Bandit()
    batch = JaxEnvBatch(env, 2000)
    batch.reset(list(range(2000)), instances=[0] * 2000)
    state = jax.device_get(batch.state)
    assert np.mean(state.hi_pays) == pytest.approx(0.25, abs=0.03)
    assert np.mean(state.hi_first) == pytest.approx(0.5, abs=0.04)
    counts = np.bincount(state.pair, minlength=12)
    assert counts.min() > 2000 / 12 * 0.7 and counts.max() < 2000 / 12 * 1.3
    # two training steps' rollouts (different seeds) pay independently, row by row
    first, second = JaxEnvBatch(env, 2000), JaxEnvBatch(env, 2000)
    first.reset(list(range(10000, 12000)))
    second.reset(list(range(12000, 14000)))
    a, b = np.asarray(first.state.hi_pays), np.asarray(second.state.hi_pays)
    assert np.mean(a == b) == pytest.approx(0.25 ** 2 + 0.75 ** 2, abs=0.04)


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


def test_another_pairs_arm_is_a_lookup_miss_through_the_batch():
    """RAGEN's per-episode lookup holds the episode's two names only: another pair's arm is a lookup miss
    (`action_in_lookup` False, which the rollout penalises), the episode's own arms are not."""
    env = Bandit()
    batch = JaxEnvBatch(env, 2)
    batch.reset([0, 0], instances=[0, 0])  # seed 0: Technician / Youtuber
    own, other = env.action_lookup["technician"], env.action_lookup["teacher"]
    result = batch.step([[own], [other]], np.ones(2, bool))
    assert [info["action_in_lookup"] for info in result.infos] == [True, False]
    assert [info["action_is_valid"] for info in result.infos] == [True, False]
