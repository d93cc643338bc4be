"""End to end: the trainer on Bandit with the tiny model (events, checkpoints, resume, LoRA, custom loss)."""

import glob

import pytest

import jax
import numpy as np

from configs.base import apply_tiny, get_base_config
from ragen_jax.algos import ppo_clip_loss
from ragen_jax.config import validate_config
from ragen_jax.rollout import group_seeds
from ragen_jax.trainer import Trainer


def bandit_config(workdir, **algo):
    c = get_base_config()
    apply_tiny(c)
    c.env.name = "Bandit"
    c.env.groups, c.env.group_size = 2, 4
    c.env.max_turn, c.env.max_actions_per_turn, c.env.max_actions_per_traj = 1, 1, 1
    c.val.groups, c.val.batch_size, c.val.every = 8, 8, 2
    c.rollout.response_length = 12
    c.rollout.max_model_len = 384
    c.rollout.context_mode = "full"
    c.trainer.total_steps = 2
    c.trainer.mini_batch_size = 4
    c.trainer.micro_batch_size = 2
    c.trainer.save_every = 1
    c.trainer.export_hf = False
    c.diagnostics.every = 1
    c.diagnostics.max_pairs = 8
    c.algo.update(algo)
    c.workdir = str(workdir)
    validate_config(c)
    return c


def _leaves(tree):
    return [np.asarray(x) for x in jax.tree.leaves(tree)]


@pytest.mark.slow  # the default run checks exact resume in test_trainer_resume.py
def test_train_writes_events_checkpoints_and_resumes_exactly(tmp_path):
    full = Trainer(bandit_config(tmp_path / "full"))
    summary = full.train()
    assert summary["val_success_start"] is not None and len(summary["val_history"]) >= 2
    assert glob.glob(str(tmp_path / "full" / "tb" / "events.out.tfevents.*"))
    assert full.checkpointer.latest_step() == 1

    part = Trainer(bandit_config(tmp_path / "part"))
    part.cfg.unlock()
    part.cfg.trainer.total_steps = 1
    part.train()
    cfg = bandit_config(tmp_path / "part")
    cfg.trainer.resume = True
    resumed = Trainer(cfg)
    assert resumed.state.start_step == 1
    resumed.train()
    for a, b in zip(_leaves(full.actor.trainable), _leaves(resumed.models.actor.trainable)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    for a, b in zip(_leaves(full.critic.trainable), _leaves(resumed.models.critic.trainable)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_validation_and_training_share_their_sampling_programs(tmp_path):
    """Validation (temperature 0.5) and training (temperature 1) with equal batches use one engine, whose
    programs take the temperature as an argument: the training rollout compiles no decode program of its own."""
    trainer = Trainer(bandit_config(tmp_path))
    assert trainer.val_engine is trainer.engine
    assert trainer.run.val.temperature != trainer.run.rollout.temperature
    trainer.run_validation(0)
    decode_programs = lambda: {k for k in trainer.engine.sampler._programs if k[0] == "decode"}  # noqa: E731
    after_validation = decode_programs()
    seeds, gids = group_seeds(1, trainer.run.env.groups, trainer.run.env.group_size)
    res = trainer.engine.run(trainer.models.sampling_params(), trainer.train_env, seeds, gids, jax.random.key(0), tag="t")
    assert len(res.episodes) == trainer.batch_size and after_validation and decode_programs() == after_validation


CALLS = []


def doubled_ppo(logprobs, old_logprobs, advantages, response_mask, **kw):
    """A custom loss reachable by import path: PPO scaled by two."""
    CALLS.append(1)
    loss, metrics = ppo_clip_loss(logprobs, old_logprobs, advantages, response_mask, **kw)
    return 2.0 * loss, metrics


@pytest.mark.slow  # default run: custom losses in test_trainer_steps.py, LoRA training in test_models_lora.py
def test_grpo_lora_and_custom_loss_train_only_adapters(tmp_path):
    cfg = bandit_config(tmp_path, preset="grpo", adv_estimator="grpo", use_critic=False,
                        loss_agg_mode="seq-mean-token-mean",
                        custom_policy_loss="test_trainer_e2e:doubled_ppo")
    cfg.model.lora.rank = 4
    cfg.trainer.save_every = 0
    cfg.val.every = 0
    CALLS.clear()
    trainer = Trainer(cfg)
    frozen_before = _leaves(trainer.models.actor.frozen)
    trainable_before = _leaves(trainer.models.actor.trainable)
    trainer.train()
    assert CALLS  # the custom loss was traced into the jitted update
    assert trainer.models.critic is None
    assert all(np.array_equal(a, b) for a, b in zip(frozen_before, _leaves(trainer.models.actor.frozen)))
    assert any(not np.array_equal(a, b) for a, b in zip(trainable_before, _leaves(trainer.models.actor.trainable)))
    assert sum(x.size for x in trainable_before) < sum(x.size for x in frozen_before) / 4


@pytest.mark.slow  # default run: whole mini-batches of kept rows in test_trainer_filter.py
def test_unfiltered_multi_turn_rows_fill_whole_mini_batches(tmp_path):
    """single_turn mode gives one row per turn: 4 episodes x 3 turns = 12 rows, not a multiple of the
    mini-batch (8). With no filter the batch must still be padded to whole mini-batches."""
    c = get_base_config()
    apply_tiny(c)
    c.env.name = "FrozenLake"
    c.env.groups, c.env.group_size, c.env.max_turn = 2, 2, 3
    c.rollout.response_length, c.rollout.max_model_len = 8, 512
    c.filter.value, c.filter.include_zero = 1.0, True
    c.val.every, c.val.at_start = 0, False
    c.trainer.total_steps, c.trainer.mini_batch_size, c.trainer.micro_batch_size = 1, 8, 8
    c.trainer.save_every, c.trainer.export_hf = 0, False
    c.diagnostics.every = 0
    c.workdir = str(tmp_path)
    validate_config(c)
    trainer = Trainer(c)
    metrics = trainer.train_step(0)
    assert metrics["train/num_samples"] == 12 and metrics["rollout/filter_kept_ratio"] == 1.0
    assert np.isfinite(metrics["actor/loss"])
