"""Each stage of the training step on its own (ragen_jax/trainer/stages): inputs in, a typed result out; and the
stages called one by one give `Trainer.train_step`'s parameters exactly."""

from __future__ import annotations

import types

import jax
import numpy as np
import pytest

from ragen_jax.filtering import FilterConfig
from ragen_jax.rollout.types import RolloutResult, TrajectoryBatch
from ragen_jax.trainer import stages
from ragen_jax.trainer.early_stop import StepSignals, after_selection, early_stop_reason
from ragen_jax.trainer.state import RunState


def _episode(reward: float, error: str = ""):
    return types.SimpleNamespace(total_reward=reward, error=error)


def _batch(episode_ids, length: int = 4) -> TrajectoryBatch:
    n = len(episode_ids)
    zeros = np.zeros((n, length), np.float32)
    return TrajectoryBatch(tokens=np.arange(n * length, dtype=np.int32).reshape(n, length),
                           attention_mask=np.ones((n, length), bool), loss_mask=np.ones((n, length), np.float32),
                           sample_logprobs=zeros, raw_logprobs=zeros, token_rewards=zeros,
                           turn_ids=np.zeros((n, length), np.int32), group_ids=np.asarray(episode_ids) // 2,
                           episode_ids=np.asarray(episode_ids, np.int32), scores=np.zeros(n, np.float32),
                           same_context=np.ones((n, length), bool), token_versions=np.zeros((n, length), np.int32))


def test_step_seeds_advance_by_the_groups_of_a_step():
    env = types.SimpleNamespace(train_seed=100, groups=2, group_size=3)
    seeds, gids = stages.step_seeds(env, 4)
    assert seeds.tolist() == [108, 108, 108, 109, 109, 109] and gids.tolist() == [0, 0, 0, 1, 1, 1]


def test_select_keeps_the_filters_groups_and_leaves_failed_episodes_out():
    """Groups of 2: group 0 (rewards 1, 0) carries signal, group 1 (1, 1) none, group 2 (0, 1) has one failed
    episode. top_p 0.9 without zero-variance groups keeps groups 0 and 2; episode 5's env failed: not trained."""
    episodes = [_episode(1.0), _episode(0.0), _episode(1.0), _episode(1.0), _episode(0.0), _episode(1.0, "boom")]
    result = RolloutResult(episodes=episodes, batch=_batch([0, 1, 2, 3, 4, 5, 5]), metrics={}, timing={})
    sel = stages.select(result, 2, FilterConfig(strategy="top_p", value=1.0, include_zero=False))
    assert sel.ok.tolist() == [True] * 5 + [False]
    assert sel.metrics["rollout/env_error_ratio"] == pytest.approx(1 / 6)
    assert 1 not in sel.filter.kept_groups and 0 in sel.filter.kept_groups
    assert sel.rows.tolist() == [0, 1]  # group 2 broke (its survivor has no baseline) and episode 5 failed


def test_the_training_batch_pads_to_whole_mini_batches_with_rows_of_their_own():
    from ragen_jax import sharding

    mesh = sharding.make_mesh({"data": -1})
    batch = stages.training_batch(_batch([0, 1, 2, 3, 4]), np.array([1, 3, 4]), 4, mesh)
    assert batch.row_valid.tolist() == [True, True, True, False]
    assert batch.host["episode_ids"].tolist()[:3] == [1, 3, 4] and batch.host["episode_ids"][3] < 0
    assert batch.host["group_ids"][3] < 0 and batch.host["loss_mask"][3].sum() == 0  # joins no real group
    assert batch.trained_tokens == 12.0 and set(batch.dev) >= {"positions", "row_valid", "tokens"}


def test_after_selection_counts_the_step_and_its_streaks():
    es = types.SimpleNamespace(reward_collapse_window=2, reward_collapse_ratio=0.5)
    state = RunState(kl_in_reward_coef=0.0)

    def selection(kept, std, measured=1):
        fres = types.SimpleNamespace(kept_ratio=len(kept) / 4, empty=not kept, measured_groups=measured,
                                     metrics={"rollout/in_group_reward_std": std})
        return types.SimpleNamespace(filter=fres, in_group_std=std)

    metrics, skip = after_selection(state, selection([], 0.0), es, empty_stop_steps=2)
    assert skip == "empty" and state.empty_streak == 1 and metrics["early_stop/filter_empty"] == 0.0
    metrics, skip = after_selection(state, selection([], 0.0), es, empty_stop_steps=2)
    assert metrics["early_stop/filter_empty"] == 1.0 and state.steps_run == 2
    assert early_stop_reason(state, StepSignals(), types.SimpleNamespace(
        reward_collapse_window=2, reward_collapse_ratio=0.5, reward_std_patience=0, val_patience=0,
        skipped_updates=0, max_policy_kl=0), 2).startswith("the filter kept nothing for 2 steps")
    for std in (1.0, 1.0, 0.1):  # the baseline (mean 1.0) over two steps, then one low step
        metrics, skip = after_selection(state, selection([0, 1], std), es, empty_stop_steps=2)
    assert state.empty_streak == 0 and skip is None and state.reward_std_recent == [0.1]
    metrics, skip = after_selection(state, selection([0, 1], 0.2), es, empty_stop_steps=2)
    assert skip == "reward_collapse" and metrics["early_stop/reward_collapse"] == 1.0


def test_the_mini_batch_order_shuffles_the_real_rows_and_puts_padding_last():
    valid = np.array([True, True, True, False, True, False])
    order = stages.mini_batch_order(np.random.default_rng([0, 3]), valid)
    assert sorted(order[:4].tolist()) == [0, 1, 2, 4] and order[4:].tolist() == [3, 5]
    assert (order == stages.mini_batch_order(np.random.default_rng([0, 3]), valid)).all()  # the same on every host


def test_the_report_merges_in_stage_order_then_timing():
    out = stages.step_report({"a": 1.0, "b": 1.0}, {"b": 2.0}, timing={"timing_s/x": 3.0})
    assert out == {"a": 1.0, "b": 2.0, "timing_s/x": 3.0}
    assert stages.skipped_update("empty") == {"train/update_skipped_empty": 1.0}


def test_the_stages_one_by_one_are_train_step(tmp_path):
    """collect -> select -> (state) -> training_batch -> score -> advantages -> update, called by hand on one trainer,
    leave the same parameters as train_step on another."""
    from ragen_jax.trainer import Trainer
    from test_trainer_e2e import bandit_config

    def trainer(name):
        cfg = bandit_config(tmp_path / name, use_critic=False, adv_estimator="grpo")
        cfg.trainer.save_every, cfg.val.every, cfg.diagnostics.every = 0, 0, 0
        return Trainer(cfg)

    whole, by_hand = trainer("whole"), trainer("by_hand")
    whole.train_step(0)
    run, models = by_hand.run, by_hand.models
    collected = by_hand.collect(0)
    selection = stages.select(collected.result, run.env.group_size, run.filter)
    _, skip = after_selection(by_hand.state, selection, run.trainer.early_stop, run.filter.empty_stop_steps)
    assert skip is None
    batch = stages.training_batch(collected.result.batch, selection.rows, run.trainer.mini_batch_size, by_hand.mesh)
    scored = stages.score(models, by_hand.fns, batch, run.algo, run.trainer.micro_batch_size, 0.0)
    batch, metrics, _ = stages.advantages(by_hand.fns, scored, selection.filter.kept_ratio, run.filter.loss_scaling,
                                          False, False)
    updated = stages.update(models, by_hand.fns, batch, 0, run.trainer, models.learning_rates(0, 0))
    assert updated.actor_trained and not updated.critic_trained and updated.updates
    for a, b in zip(jax.tree.leaves(whole.models.actor.trainable), jax.tree.leaves(models.actor.trainable)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_the_gradient_analysis_runs_when_due_and_changes_no_parameter(tmp_path):
    """diagnostics.gradient_every: RAGEN-2's gradient split on the batch the update starts from, at steps 1, N + 1,
    ...; an analysis only: the parameters after the step are those of a run without it."""
    from ragen_jax.trainer import Trainer
    from test_trainer_e2e import bandit_config

    def trainer(name, every):
        cfg = bandit_config(tmp_path / name, use_critic=False, adv_estimator="grpo")
        cfg.trainer.save_every, cfg.val.every, cfg.diagnostics.every = 0, 0, 0
        cfg.diagnostics.gradient_every, cfg.diagnostics.gradient_buckets = every, 2
        return Trainer(cfg)

    analysed, plain = trainer("analysed", 2), trainer("plain", 0)
    first, second = analysed.train_step(0), analysed.train_step(1)
    plain.train_step(0)
    plain.train_step(1)
    assert "actor/grad_norm/task" in first and "timing_s/gradient_analysis" in first  # step 1 is due
    assert "actor/grad_norm/task" not in second  # step 2 is not (steps 1, 3, 5, ...)
    for a, b in zip(jax.tree.leaves(analysed.models.actor.trainable), jax.tree.leaves(plain.models.actor.trainable)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
