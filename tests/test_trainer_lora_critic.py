"""PPO under LoRA: the critic is a LoRA model too (RAGEN's critic lora_rank / lora_alpha / target_modules), its base
weights frozen, its adapters and value head trained, and a run with a warm start resumes it exactly."""

import jax
import numpy as np
import pytest

from ragen_jax.trainer import Trainer
from test_trainer_e2e import bandit_config


def _leaves(tree):
    return [np.asarray(x) for x in jax.tree.leaves(tree)]


def _paths(state):
    from flax import nnx

    return {"/".join(map(str, p)) for p, _ in nnx.to_flat_state(state)}


def _config(workdir):
    c = bandit_config(workdir)  # PPO with a critic
    c.model.lora.rank = 4
    c.diagnostics.every, c.val.every, c.trainer.total_steps = 0, 0, 1
    c.warmstart.update(enabled=True, source="random", num_demos=16, steps=2, batch_size=8, lr=3e-3, warmup_steps=0)
    return c


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_the_critic_trains_adapters_and_head_over_frozen_base_weights_and_resumes(tmp_path):
    trainer = Trainer(_config(tmp_path))
    assert trainer.models.critic is not None
    trained = _paths(trainer.models.critic.trainable)
    assert trained and all("lora_" in p or p.startswith("score/") for p in trained)
    assert not any("lora_" in p for p in _paths(trainer.models.critic.frozen))
    base = _leaves(trainer.models.critic.frozen)
    assert sum(x.size for x in _leaves(trainer.models.critic.trainable)) < sum(x.size for x in base) / 4

    trainer.train()  # warm start (the critic then copies the policy's adapters), one RL step, a checkpoint
    assert all(np.array_equal(a, b) for a, b in zip(base, _leaves(trainer.models.critic.frozen)))  # base stays frozen
    assert trainer.state.updates_applied > 0

    cfg = _config(tmp_path)
    cfg.trainer.resume, cfg.trainer.total_steps = True, 1
    resumed = Trainer(cfg)
    assert resumed.state.start_step == 1
    for a, b in ((trainer.models.critic.frozen, resumed.models.critic.frozen), (trainer.models.critic.trainable, resumed.models.critic.trainable),
                 (trainer.models.critic_optim.state, resumed.models.critic_optim.state)):
        assert all(np.array_equal(x, y) for x, y in zip(_leaves(a), _leaves(b)))
