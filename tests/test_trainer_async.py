"""Asynchronous StarPO (trainer.schedule="async"): the same stages in a rollout worker and a learner.

max_staleness 0 is the synchronous run bit for bit; at 1 the worker plays the next step's rollout while the learner
updates, tokens record the versions that drew them and no trained token is staler than the bound; a crashed worker
ends the run with one error; "drop" drops and counts batches too stale."""

from __future__ import annotations

import threading
import time

import jax
import numpy as np
import pytest

from envs.protocols import HostEnv
from ragen_jax.trainer import Trainer
from ragen_jax.trainer.async_run import AsyncSchedule, RolloutWorkerError, WeightChannel, staleness_metrics
from test_trainer_e2e import bandit_config


def _config(tmp_path, **trainer):
    cfg = bandit_config(tmp_path, use_critic=False, adv_estimator="grpo")
    cfg.trainer.save_every, cfg.val.every, cfg.diagnostics.every = 0, 0, 0
    for key, value in trainer.items():
        cfg.trainer[key] = value
    return cfg


def _recorded(trainer):
    """Record every rollout the trainer's engine plays (its episodes' response tokens)."""
    played = []
    run = trainer.engine.run

    def recording(*args, **kwargs):
        result = run(*args, **kwargs)
        played.append([[r.response_tokens for r in ep.history if r.response_tokens is not None]
                       for ep in result.episodes])
        return result

    trainer.engine.run = recording
    return played


def _leaves(trainer):
    return [np.asarray(x) for x in jax.tree.leaves(trainer.models.actor.trainable)]


def _async_steps(trainer, steps: int):
    schedule = AsyncSchedule(trainer, 0)
    metrics = []
    try:
        for step in range(steps):
            collected, extra = schedule.batch_for(step)
            metrics.append({**trainer.learn(collected, step), **extra})
            schedule.published(step)
    finally:
        schedule.close()
    return metrics


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_max_staleness_zero_is_the_synchronous_run_bit_for_bit(tmp_path):
    sync = Trainer(_config(tmp_path / "sync"))
    sync_played = _recorded(sync)
    sync_metrics = [sync.train_step(step) for step in range(3)]
    asynchronous = Trainer(_config(tmp_path / "async", schedule="async", max_staleness=0))
    assert asynchronous.asynchronous and asynchronous.val_engine is not asynchronous.engine
    async_played = _recorded(asynchronous)
    async_metrics = _async_steps(asynchronous, 3)
    assert async_played == sync_played  # the same trajectories, token for token
    assert all(np.array_equal(a, b) for a, b in zip(_leaves(sync), _leaves(asynchronous)))  # the same parameters
    for s, a in zip(sync_metrics, async_metrics):
        assert a["actor/pg_loss"] == s["actor/pg_loss"] and a["async/staleness_max"] == 0.0
        assert a["async/staleness_hist_0"] == 1.0


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_max_staleness_one_overlaps_and_bounds_every_trained_token(tmp_path):
    trainer = Trainer(_config(tmp_path, schedule="async", max_staleness=1))
    metrics = _async_steps(trainer, 4)
    for step, m in enumerate(metrics):
        assert 0.0 <= m["async/staleness_max"] <= 1.0, (step, m)
        assert m["async/staleness_hist_0"] + m["async/staleness_hist_1"] == pytest.approx(1.0)
        assert m["async/rollout_index"] == step and np.isfinite(m["actor/pg_loss"])
    assert trainer.state.rollout_index == 4  # what a checkpoint keeps: the next rollout the learner takes


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_the_drop_policy_drops_and_counts_batches_too_stale(tmp_path):
    """The worker runs ahead freely; at max_staleness 0 every batch the learner did not see drawn with its own
    version is dropped, counted in tokens, and never trained."""
    trainer = Trainer(_config(tmp_path, schedule="async", max_staleness=0, staleness_policy="drop"))
    metrics = _async_steps(trainer, 3)
    assert all(m["async/staleness_max"] == 0.0 for m in metrics)
    assert metrics[-1]["async/dropped_tokens"] >= 0.0
    assert metrics[-1]["async/rollout_index"] >= 2


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_a_crashed_rollout_worker_ends_the_run_with_its_error(tmp_path):
    trainer = Trainer(_config(tmp_path, schedule="async", max_staleness=1))
    real = trainer.collect

    def crashing(index, weights=None):
        if index == 1:
            raise ZeroDivisionError("the worker broke")
        return real(index, weights=weights)

    trainer.collect = crashing
    with pytest.raises(RolloutWorkerError, match="The rollout worker crashed: ZeroDivisionError: the worker broke"):
        _async_steps(trainer, 3)


def test_the_weight_channel_hands_out_copies_and_stops_readers():
    channel = WeightChannel()
    params = {"w": jax.numpy.ones(3)}
    channel.publish(0, params)
    version, got = channel.latest()
    assert version == 0 and got["w"] is not params["w"]  # a copy: the learner's update donates its buffers
    assert channel.poll(0) is None and channel.poll(-1)[0] == 0
    done = threading.Event()

    def wait():
        channel.wait_for(1)
        done.set()

    threading.Thread(target=wait, daemon=True).start()
    time.sleep(0.1)
    assert not done.is_set()
    channel.publish(1, params)
    assert done.wait(5)
    channel.close()
    from ragen_jax.trainer.async_run import RolloutStopped

    with pytest.raises(RolloutStopped):
        channel.poll(1)


def test_staleness_metrics_are_over_the_trained_tokens():
    class Batch:
        loss_mask = np.array([[0, 1, 1, 1], [1, 1, 0, 0]], np.float32)
        token_versions = np.array([[9, 3, 3, 2], [3, 2, 1, 1]], np.int32)

    m = staleness_metrics(Batch, step=3, max_staleness=1)
    assert m["async/staleness_max"] == 1.0 and m["async/staleness_mean"] == pytest.approx(2 / 5)
    assert (m["async/staleness_hist_0"], m["async/staleness_hist_1"]) == (0.6, 0.4)


class Blocking(HostEnv):
    """In a batch of 4, episode 0's first step waits until the other three have stepped twice: with the envs stepped
    while the other slots decode it is released; stepped in turn with decoding (the old schedule), it waits out its
    time."""

    action_lookup = {"a": 0, "b": 1}
    action_names = ["A", "B"]
    steps = 0
    lock = threading.Lock()
    released = threading.Event()
    released_by_others = None  # what episode 0's wait saw: True when the other episodes released it
    built = 0
    step_timeout_s = 60.0

    def __init__(self):
        self.instance = Blocking.built
        Blocking.built += 1

    def instruction(self):
        return "Pick A or B."

    def reset(self, seed):
        self.turn = 0
        return "Pick one.", {}

    def step(self, action):
        self.turn += 1
        if self.instance == 0 and self.turn == 1:
            Blocking.released_by_others = Blocking.released.wait(300)
        else:
            with Blocking.lock:
                Blocking.steps += 1
                if Blocking.steps >= 2 * 3:  # the other three episodes of the batch, two turns each
                    Blocking.released.set()
        return "Again.", 0.0, self.turn >= 3, False, {}


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_host_envs_step_while_the_other_slots_decode(tmp_path):
    """One slow env step no longer stops every other episode: the continuous engine steps host envs in the
    background and goes on decoding the slots that are not waiting."""
    from ragen_jax.rollout import group_seeds

    Blocking.built, Blocking.steps, Blocking.released_by_others = 0, 0, None
    Blocking.released.clear()
    cfg = _config(tmp_path)
    cfg.env.name, cfg.env.max_turn, cfg.env.max_actions_per_traj = "test_trainer_async:Blocking", 3, 3
    cfg.env.groups, cfg.env.group_size = 2, 2
    cfg.trainer.mini_batch_size = cfg.trainer.micro_batch_size = 4
    trainer = Trainer(cfg)
    trainer.engine.tokenizer.decode = lambda ids: "</think><answer>A</answer>"
    seeds, gids = group_seeds(0, 2, 2)
    result = trainer.engine.run(trainer.models.sampling_params(), trainer.train_env, seeds, gids, jax.random.key(0),
                                tag="t")
    assert Blocking.released_by_others is True  # the others decoded and stepped on while it waited
    assert all(ep.num_turns == 3 and not ep.error for ep in result.episodes)


@pytest.mark.slow
def test_an_asynchronous_run_resumes_where_its_checkpoint_left(tmp_path):
    """A checkpoint keeps the learner's state and the next rollout to take; the rollouts in flight are dropped and
    played again on resume. At max_staleness 0 (the synchronous run) the resumed run's parameters are the straight
    run's, bit for bit."""
    def config(workdir, steps, resume=False):
        cfg = _config(workdir, schedule="async", max_staleness=0, total_steps=steps, save_every=1, resume=resume)
        cfg.trainer.export_hf = False
        return cfg

    straight = Trainer(config(tmp_path / "straight", 3))
    straight.train()
    first = Trainer(config(tmp_path / "stopped", 2))
    first.train()
    resumed = Trainer(config(tmp_path / "stopped", 3, resume=True))
    assert resumed.state.start_step == 2 and resumed.state.rollout_index == 2
    resumed.train()
    assert resumed.state.rollout_index == 3
    assert all(np.array_equal(a, b) for a, b in zip(_leaves(straight), _leaves(resumed)))
