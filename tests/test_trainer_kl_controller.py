"""The KL-in-reward coefficient: fixed, or veRL's adaptive controller moving it towards a target KL."""

import pytest

from ragen_jax.config import validate_config
from ragen_jax.trainer import Trainer
from test_trainer_e2e import bandit_config


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_the_adaptive_controller_moves_the_coefficient_and_a_fixed_one_keeps_it(tmp_path):
    cfg = bandit_config(tmp_path, use_kl_in_reward=True, kl_penalty="low_var_kl", kl_ctrl_type="adaptive",
                        kl_ctrl_coef=0.1, kl_ctrl_target=0.01, kl_ctrl_horizon=100.0)
    cfg.trainer.save_every, cfg.val.every, cfg.diagnostics.every = 0, 0, 0
    trainer = Trainer(cfg)
    first = trainer.train_step(0)
    second = trainer.train_step(1)
    rows = first["train/num_samples"]
    assert first["actor/reward_kl_penalty_coeff"] == pytest.approx(0.1)
    error = min(max(first["actor/reward_kl_penalty"] / 0.01 - 1.0, -0.2), 0.2)
    assert second["actor/reward_kl_penalty_coeff"] == pytest.approx(0.1 * (1 + error * rows / 100.0), rel=1e-5)
    assert second["actor/reward_kl_penalty_coeff"] != pytest.approx(0.1)
    # veRL's critic/rewards are the scores after the penalty: lower once the policy has left its reference
    assert second["actor/reward_kl_penalty"] > 0 and second["critic/rewards/mean"] < second["critic/score/mean"]
    assert "kl_in_reward_coef" in trainer.state.counters()  # checkpointed with the other counters
    trainer.run = trainer.run.replace(**{"algo.kl_ctrl_type": "fixed"})
    coef = trainer.state.kl_in_reward_coef
    trainer.train_step(2)
    assert trainer.train_step(3)["actor/reward_kl_penalty_coeff"] == pytest.approx(coef)


def test_controller_settings_are_checked(tmp_path):
    cfg = bandit_config(tmp_path)
    cfg.algo.kl_ctrl_type = "adaptiv"
    with pytest.raises(ValueError, match="kl_ctrl_type"):
        validate_config(cfg)
    cfg.algo.kl_ctrl_type, cfg.algo.kl_ctrl_horizon = "adaptive", 0.0
    with pytest.raises(ValueError, match="kl_ctrl_horizon"):
        validate_config(cfg)


def test_ragens_reward_variance_collapse_rule():
    """Baseline = mean std of the first `window` trained steps; stop after `window` steps in a row below
    ratio x baseline (RAGEN's agent_trainer); window 0 is off."""
    from ragen_jax.trainer.early_stop import reward_collapse

    first, recent, stops = [], [], []
    stds = [0.4, 0.6, 0.5] + [0.04, 0.03, 0.02, 0.01] + [0.06] + [0.01, 0.02, 0.03]  # baseline 0.5: threshold 0.05
    for std in stds:
        first, recent, collapsed = reward_collapse(first, recent, std, window=3, ratio=0.1)
        stops.append(collapsed)
    assert first == [0.4, 0.6, 0.5]
    assert stops == [False] * 5 + [True, True, False, False, False, True]
    assert reward_collapse([], [], 0.0, window=0, ratio=0.1) == ([], [], False)
    zero_base = ([0.0] * 3, [], False)
    for _ in range(5):  # a zero baseline never stops the run (nothing is below 0)
        zero_base = reward_collapse(zero_base[0], zero_base[1], 0.0, window=3, ratio=0.1)
    assert not zero_base[2]


def test_the_step_whose_reward_std_collapsed_is_not_trained(tmp_path):
    """RAGEN checks the reward-variance collapse after the filter and stops before that step's update (its
    agent_trainer breaks out of the loop there): the run's last policy is the previous step's."""
    import jax
    import numpy as np

    cfg = bandit_config(tmp_path, use_critic=False, adv_estimator="grpo")
    cfg.trainer.save_every, cfg.val.every, cfg.diagnostics.every = 0, 0, 0
    cfg.trainer.early_stop.reward_collapse_window, cfg.trainer.early_stop.reward_collapse_ratio = 1, 0.1
    trainer = Trainer(cfg)
    trainer.state.reward_std_first = [100.0]  # a baseline every step's std falls below a tenth of
    before = [np.asarray(x) for x in jax.tree.leaves(trainer.models.actor.trainable)]
    metrics = trainer.train_step(0)
    assert all(np.array_equal(a, np.asarray(b)) for a, b in zip(before, jax.tree.leaves(trainer.models.actor.trainable)))
    assert "actor/pg_loss" not in metrics
    assert metrics["early_stop/reward_collapse"] == 1.0 and metrics["train/update_skipped_reward_collapse"] == 1.0
    assert trainer.stop_reason(metrics).startswith("the in-group reward std collapsed")
