"""Learning test (slow): on Bandit, PPO and GRPO each raise the probability of the high arm.

The tiny policy is first warm-started on demonstrations that pick an arm at random, so it knows
the answer format but has no preference; RL must then find the high-reward arm of each pair from
rewards alone. Success = chose the high arm, measured at temperature 1 on 128 validation episodes.
"""

import numpy as np
import pytest

from configs.base import apply_tiny, get_base_config
from ragen_jax.config_check import validate_config
from ragen_jax.rollout.demos import demo_rows, play_oracle_episodes
from ragen_jax.trainer.loop import Trainer
from ragen_jax.trainer.warmstart import prepare_sft_data, train_sft

STEPS = 25
MARGIN = 0.15


def bandit_trainer(workdir, algo: str) -> Trainer:
    c = get_base_config()
    apply_tiny(c)
    c.env.name = "Bandit"
    c.env.groups, c.env.group_size = 8, 8
    c.env.max_turn = c.env.max_actions_per_turn = c.env.max_actions_per_traj = 1
    c.rollout.response_length, c.rollout.max_model_len = 16, 384
    c.rollout.context_mode = "full"
    c.val.groups, c.val.batch_size, c.val.temperature, c.val.every = 128, 128, 1.0, 0
    c.trainer.total_steps, c.trainer.save_every, c.trainer.export_hf = STEPS, 0, False
    c.trainer.mini_batch_size, c.trainer.micro_batch_size, c.trainer.epochs = 32, 32, 2
    c.diagnostics.every = 0
    c.warmstart.steps, c.warmstart.batch_size, c.warmstart.lr = 150, 64, 1e-3
    if algo == "grpo":
        # Group-mean baseline without std scaling (Dr.GRPO's advantage). With std scaling GRPO
        # prefers the low-variance arm here: groups where no risky pull paid out get unit-scale
        # pushes toward the safe arm (measured 0.453 -> 0.219 in 25 steps).
        c.algo.update(dict(preset="grpo", adv_estimator="grpo", use_critic=False, norm_adv_by_std_in_grpo=False,
                           loss_agg_mode="seq-mean-token-mean"))
    c.optim.actor.lr, c.optim.critic.lr = 1e-4, 1e-3
    c.workdir = str(workdir)
    validate_config(c)
    return Trainer(c)


def warm_start_without_preference(trainer: Trainer) -> None:
    rng = np.random.default_rng(0)
    seeds = list(range(50_000, 50_000 + trainer.batch_size))
    episodes = []
    for _ in range(8):
        episodes += play_oracle_episodes(trainer.train_env, seeds, trainer.tokenizer, trainer.rollout_cfg,
                                         policy=lambda state: [2 * int(state.pair) + int(rng.integers(2))])
        seeds = [s + trainer.batch_size for s in seeds]
    data = prepare_sft_data(demo_rows(episodes, trainer.tokenizer, trainer.rollout_cfg))
    train_sft(trainer, data, steps=trainer.cfg.warmstart.steps)
    trainer.reset_reference()


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["ppo", "grpo"])
def test_rl_raises_high_arm_probability(tmp_path, algo):
    trainer = bandit_trainer(tmp_path, algo)
    warm_start_without_preference(trainer)
    key = "val/Bandit/success"
    before, _ = trainer.run_validation(0)
    assert before["val/Bandit/action_is_valid"] > 0.75  # the format is learned (sampled at T=1)
    assert 0.25 < before[key] < 0.75  # ... but no arm preference yet
    for step in range(STEPS):
        trainer.train_step(step)
    after, _ = trainer.run_validation(STEPS)
    print(f"{algo}: P(high arm) {before[key]:.3f} -> {after[key]:.3f}")
    assert after[key] >= before[key] + MARGIN
