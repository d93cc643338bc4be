"""Faults never train: failed episodes leave the update (loss, advantages, group statistics), are counted and
reported; a run whose updates keep overflowing stops with a reason instead of dying at save."""

import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from envs.protocols import HostEnv, JaxEnv
from ragen_jax.trainer import Trainer
from test_trainer_e2e import bandit_config


class FlakyPick(HostEnv):
    """One pick per episode ("A" pays 1, "B" 0); instances whose number is in FAILING raise when stepped."""

    action_lookup = {"a": 0, "b": 1}
    action_names = ["A", "B"]
    FAILING: set[int] = set()
    NAN: set[int] = set()  # instances that return a NaN reward
    built = 0

    def __init__(self):
        self.instance = FlakyPick.built % 8  # the train batch (8 episodes) is built first, then validation's
        FlakyPick.built += 1

    def instruction(self) -> str:
        return "Pick A or B."

    def reset(self, seed):
        return "Pick one.", {}

    def step(self, action):
        if self.instance in FlakyPick.FAILING:
            raise RuntimeError(f"flaky env {self.instance}")
        reward = 1.0 if action == "A" else 0.0
        if self.instance in FlakyPick.NAN:
            reward = float("nan")
        return "picked", reward, True, False, {"success": action == "A"}


ANSWERS = ["A", "B", "B", "A", "A", "B", "A", "B"]  # what the "model says" in each row, so groups carry signal


def _flaky_trainer(tmp_path, failing, monkeypatch, nan=()):
    """A GRPO trainer on FlakyPick whose untrained model's responses read as the picks in ANSWERS."""
    FlakyPick.FAILING, FlakyPick.NAN, FlakyPick.built = set(failing), set(nan), 0
    cfg = bandit_config(tmp_path, preset="grpo", adv_estimator="grpo", use_critic=False,
                        loss_agg_mode="seq-mean-token-mean", norm_adv_by_std_in_grpo=False)
    cfg.env.name = "test_trainer_faults:FlakyPick"
    cfg.rollout.engine = "lockstep"  # the scripted answers are read in the order responses are decoded
    cfg.trainer.save_every, cfg.val.every, cfg.diagnostics.every = 0, 0, 0
    trainer = Trainer(cfg)
    said = iter(ANSWERS * 4)
    monkeypatch.setattr(trainer.engine.tokenizer, "decode", lambda ids: f"</think><answer>{next(said)}</answer>")
    return trainer


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_failed_episodes_leave_the_update_and_are_reported(tmp_path, caplog, monkeypatch):
    trainer = _flaky_trainer(tmp_path, failing={1, 6}, monkeypatch=monkeypatch)  # one failure per group of 4
    seen = {}
    run = trainer.engine.run
    monkeypatch.setattr(trainer.engine, "run", lambda *a, **k: seen.setdefault("res", run(*a, **k)))
    capture_update(monkeypatch, seen)
    with caplog.at_level(logging.WARNING):
        metrics = trainer.train_step(0)
    res, dev, valid = seen["res"], seen["dev"], seen["valid"]
    failed = [i for i, ep in enumerate(res.episodes) if ep.error]
    assert failed == [1, 6] and "flaky env 1" in res.episodes[1].error
    assert metrics["rollout/env_error_ratio"] == pytest.approx(0.25)
    assert metrics["train/num_samples"] == 6
    # the policy's figures are over the 6 episodes that ran (3 picked A): a crashed env is no policy failure
    assert metrics[f"train/{trainer.tag}/success"] == pytest.approx(3 / 6)
    assert metrics[f"train/{trainer.tag}/env_error"] == pytest.approx(2 / 8)
    assert metrics["critic/score/mean"] == pytest.approx(3 / 6)
    assert any("2 of 8 episodes failed" in r.getMessage() and "flaky env" in r.getMessage() for r in caplog.records)
    # the batch marks a failed episode's tokens untrained; the update sees only the 6 healthy rows
    assert (res.batch.loss_mask[np.isin(res.batch.episode_ids, failed)] == 0).all()
    rows = np.nonzero(valid)[0]
    assert len(rows) == 6
    # group-mean advantages (no std) over the healthy members of each group only
    adv = np.asarray(dev["advantages"])[rows]
    mask = np.asarray(dev["loss_mask"])[rows] > 0
    healthy = [i for i in range(8) if i not in failed]
    rewards = np.array([res.episodes[i].total_reward for i in healthy])
    groups = np.array([res.episodes[i].group_id for i in healthy])
    expected = rewards - np.array([rewards[groups == g].mean() for g in groups])
    assert len(set(rewards[groups == 0])) > 1 and len(set(rewards[groups == 1])) > 1  # groups with signal
    for r in range(6):
        np.testing.assert_allclose(adv[r][mask[r]], expected[r], atol=1e-5)


def test_a_group_left_with_one_healthy_episode_does_not_train(tmp_path, monkeypatch):
    """Three of group 0's four envs fail: its survivor has no group baseline (GRPO would train on its raw
    score), so only group 1 trains, and the broken group is counted."""
    trainer = _flaky_trainer(tmp_path, failing={1, 2, 3}, monkeypatch=monkeypatch)
    seen = {}
    capture_update(monkeypatch, seen)
    metrics = trainer.train_step(0)
    assert metrics["rollout/env_error_ratio"] == pytest.approx(3 / 8)
    assert metrics["rollout/groups_broken_by_env_errors"] == 1.0
    assert metrics["train/num_samples"] == 4
    rows = np.nonzero(seen["valid"])[0]
    assert set(np.asarray(seen["dev"]["group_ids"])[rows].tolist()) == {1}


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_a_non_finite_reward_fails_only_its_episode(tmp_path, caplog, monkeypatch):
    """A NaN reward from one env is an env error: its episode leaves the update, the others still train."""
    trainer = _flaky_trainer(tmp_path, failing=(), monkeypatch=monkeypatch, nan={1})
    seen = {}
    run = trainer.engine.run
    monkeypatch.setattr(trainer.engine, "run", lambda *a, **k: seen.setdefault("res", run(*a, **k)))
    with caplog.at_level(logging.WARNING):
        metrics = trainer.train_step(0)
    res = seen["res"]
    assert [i for i, ep in enumerate(res.episodes) if ep.error] == [1]
    assert "non-finite reward" in res.episodes[1].error
    assert metrics["rollout/env_error_ratio"] == pytest.approx(1 / 8) and metrics["train/num_samples"] == 7
    assert all(np.isfinite(v) for k, v in metrics.items() if k.startswith(("train/", "rollout/", "critic/")))
    assert metrics["actor/updates_skipped"] == 0 and np.isfinite(metrics["actor/loss"])
    assert not any("update skipped" in r.getMessage() for r in caplog.records)


def test_a_batch_where_every_episode_failed_skips_the_update(tmp_path, monkeypatch):
    trainer = _flaky_trainer(tmp_path, failing=set(range(8)), monkeypatch=monkeypatch)
    metrics = trainer.train_step(0)
    assert metrics["rollout/env_error_ratio"] == 1.0 and metrics["train/update_skipped_empty"] == 1.0
    assert "actor/loss" not in metrics
    trainer.state.empty_streak = trainer.run.filter.empty_stop_steps  # had it happened 5 steps in a row
    reason = trainer.stop_reason(metrics)
    assert reason.startswith("every episode's environment failed"), reason


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_a_batch_where_every_episode_failed_is_no_zero_reward_std_step(tmp_path, monkeypatch):
    """No group was measured, so the in-group std (reported 0) is no reading: the zero-std early stop neither
    counts the step nor forgets the streak it had; a measured step with equal rewards in every group counts."""
    trainer = _flaky_trainer(tmp_path, failing=set(range(8)), monkeypatch=monkeypatch)
    trainer.run = trainer.run.replace(**{"trainer.early_stop.reward_std_patience": 2})
    trainer.state.std_zero_streak = 1
    metrics = trainer.train_step(0)
    assert metrics["rollout/in_group_reward_std"] == 0.0 and metrics["rollout/groups_broken_by_env_errors"] == 2
    assert trainer.state.std_zero_streak == 1
    assert trainer.stop_reason(metrics) is None
    FlakyPick.FAILING = set()
    monkeypatch.setattr(trainer.engine.tokenizer, "decode", lambda ids: "</think><answer>A</answer>")
    metrics = trainer.train_step(1)
    assert metrics["rollout/in_group_reward_std"] == 0.0 and trainer.state.std_zero_streak == 2
    assert trainer.stop_reason(metrics) == "in-group reward std was zero for 2 steps in a row"


def test_a_validation_whose_envs_all_failed_is_reported_and_never_reads_as_low_success(tmp_path, caplog,
                                                                                        monkeypatch):
    """Every validation episode's env failed (a dead env server): a warning names the errors, and the validation
    does not count towards the low-success stop. Before, nothing was logged and after val_patience such
    validations the run stopped saying validation success stayed below the bar."""
    trainer = _flaky_trainer(tmp_path, failing=set(range(8)), monkeypatch=monkeypatch)
    patience, tag = trainer.run.trainer.early_stop.val_patience, trainer.val_tags[0]
    assert patience > 0
    with caplog.at_level(logging.WARNING):
        metrics = trainer.validate(1)
    assert metrics[f"val/{tag}/env_error"] == 1.0 and metrics[f"val/{tag}/success"] == 0.0
    assert any("Validation at step 1: 8 of 8 episodes failed in the env" in r.getMessage()
               and "flaky env" in r.getMessage() for r in caplog.records)
    for step in range(patience + 1):
        trainer.record_validation(step, metrics)
    assert trainer.state.val_low_streaks.get(tag, 0) == 0 and trainer.stop_reason() is None
    for step in range(patience):  # a healthy validation at zero success still counts
        trainer.record_validation(step, {**metrics, f"val/{tag}/env_error": 0.0})
    assert trainer.stop_reason().startswith("validation success stayed below")


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_overflowing_updates_stop_the_run_with_a_reason(tmp_path, caplog):
    cfg = bandit_config(tmp_path)
    cfg.optim.actor.lr = cfg.optim.critic.lr = 1e39  # past float32: every update would make the weights inf/NaN
    cfg.optim.actor.grad_clip = cfg.optim.critic.grad_clip = 0.0
    cfg.trainer.total_steps, cfg.trainer.save_every = 4, 2
    cfg.trainer.early_stop.skipped_updates = 2
    cfg.val.every, cfg.val.at_start, cfg.diagnostics.every = 0, False, 0
    trainer = Trainer(cfg)
    before = [np.asarray(x).copy() for x in jax.tree.leaves(trainer.models.actor.trainable)]
    with caplog.at_level(logging.WARNING):
        summary = trainer.train()
    assert "updates in a row were skipped" in summary["stop_reason"]
    assert summary["updates_applied"] == 0 and summary["updates_skipped"] >= 2
    assert any("update skipped" in r.getMessage() for r in caplog.records)
    after = [np.asarray(x) for x in jax.tree.leaves(trainer.models.actor.trainable)]
    assert all(np.array_equal(a, b) for a, b in zip(before, after))  # never applied
    assert trainer.checkpointer.latest_step() is not None  # saving still works: the weights stayed finite


def test_sampler_and_trainer_agree_on_the_sampled_tokens(tmp_path):
    """The same model scores the tokens it sampled: in float32 the sampler's and the trainer's log-probs agree."""
    cfg = bandit_config(tmp_path)
    cfg.trainer.save_every, cfg.val.every, cfg.diagnostics.every = 0, 0, 0
    metrics = Trainer(cfg).train_step(0)
    assert metrics["rollout/logprob_abs_diff_mean"] < 1e-4 and metrics["rollout/logprob_abs_diff_max"] < 1e-3
    assert abs(metrics["rollout/is_weight_mean"] - 1) < 1e-4
    assert 0.999 < metrics["rollout/is_weight_min"] <= metrics["rollout/is_weight_max"] < 1.001
    assert metrics["rollout/context_changed_token_ratio"] == 0.0  # one turn: every row is its sampling context


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_turns_trained_in_a_truncated_context_do_not_read_as_sampler_mismatch(tmp_path):
    """A "full" row past max_model_len drops old turns, so its earlier turns were sampled seeing more than the row
    shows (as RAGEN). Their sampler log-probs are of that longer context: before, they read as a mismatch of
    0.018 nats on average (0.16 at most) here, which a rollout correction would have dropped or re-weighted."""
    cfg = bandit_config(tmp_path)
    cfg.env.name = "FrozenLake"
    cfg.env.max_turn, cfg.env.max_actions_per_turn, cfg.env.max_actions_per_traj = 5, 1, 5
    cfg.rollout.prompt_style, cfg.rollout.max_model_len = "compact", 128
    cfg.trainer.save_every, cfg.val.every, cfg.diagnostics.every = 0, 0, 0
    metrics = Trainer(cfg).train_step(0)
    assert metrics["rollout/context_changed_token_ratio"] > 0.2  # truncation did drop turns that were seen
    assert metrics["rollout/logprob_abs_diff_mean"] < 1e-4 and metrics["rollout/logprob_abs_diff_max"] < 1e-3
    assert 0.999 < metrics["rollout/is_weight_min"] <= metrics["rollout/is_weight_max"] < 1.001


class ClosedPick(FlakyPick):
    """FlakyPick that counts its close() calls (a remote env's close ends its server session)."""

    closed = 0

    def close(self):
        ClosedPick.closed += 1


def test_closing_the_trainer_closes_every_env_once_and_twice_is_harmless(tmp_path):
    """run.py closes the trainer at the end, so a remote env server's sessions end with the run (they waited out
    the server's TTL, 900 s, and a sweep in one process piled them up until the server refused new ones)."""
    FlakyPick.FAILING, FlakyPick.NAN, ClosedPick.closed = set(), set(), 0
    cfg = bandit_config(tmp_path, use_critic=False, adv_estimator="grpo")
    cfg.env.name = "test_trainer_faults:ClosedPick"
    cfg.val.name = "test_trainer_faults:ClosedPick,Bandit"
    trainer = Trainer(cfg)
    host_envs = len(trainer.train_env.envs) + len(trainer.val_envs[0].envs)
    trainer.close()
    assert ClosedPick.closed == host_envs == 8 + 8
    trainer.close()  # idempotent for the manager and monitor; envs are closed again (best effort, harmless)
    assert trainer.checkpointer._manager is None and trainer.monitor.events is None


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_the_learning_rate_schedule_runs_over_rl_steps_as_verls(tmp_path):
    """veRL steps its lr scheduler once per training step, so every mini-batch of step s trains at lr(s) (and the
    filter, which changes how many mini-batches a step has, cannot stretch a warmup or a cosine). Before, the
    schedule counted optimizer updates: under a 2-step warmup with two mini-batches a step, step 0 already trained
    at half the rate, and a cosine ended early or late by the kept share."""
    cfg = bandit_config(tmp_path)  # 8 episodes, mini-batches of 4: two updates a step
    cfg.trainer.save_every, cfg.val.every, cfg.diagnostics.every = 0, 0, 0
    for model in ("actor", "critic"):
        cfg.optim[model].warmup_steps, cfg.optim[model].lr = 2, 1e-3
    trainer = Trainer(cfg)
    leaves = lambda: [np.asarray(x).copy() for x in jax.tree.leaves(trainer.models.actor.trainable)]  # noqa: E731
    before = leaves()
    metrics = trainer.train_step(0)
    assert metrics["actor/lr"] == 0.0 and metrics["critic/lr"] == 0.0
    assert all(np.array_equal(a, b) for a, b in zip(before, leaves()))  # lr(0) = 0 for both of step 0's updates
    metrics = trainer.train_step(1)
    assert metrics["actor/lr"] == pytest.approx(5e-4) and metrics["critic/lr"] == pytest.approx(5e-4)
    assert not all(np.array_equal(a, b) for a, b in zip(before, leaves()))


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_a_step_without_an_update_does_not_move_the_learning_rate_schedule(tmp_path, monkeypatch):
    """veRL steps a scheduler only when its update runs: a step the filter emptied (or a collapsed one) moves no
    warmup. Before, the schedules ran on the RL step, so the first update after an empty step 0 trained at
    lr(1) (here 5e-4) instead of lr(0) = 0, and a resume reads the position from the checkpoint's counters."""
    import importlib

    loop_module = importlib.import_module("ragen_jax.trainer.stages.select")  # the module, not the stage function
    from ragen_jax.checkpoint import Checkpointer

    cfg = bandit_config(tmp_path)
    cfg.trainer.save_every, cfg.val.every, cfg.diagnostics.every = 1, 0, 0
    for model in ("actor", "critic"):
        cfg.optim[model].warmup_steps, cfg.optim[model].lr = 2, 1e-3
    real = loop_module.filter_rollouts
    calls = []

    def empty_first(rewards, group_size, cfg, valid, **kw):
        calls.append(1)
        return real(rewards, group_size, cfg, valid=valid & (len(calls) > 1), **kw)

    monkeypatch.setattr(loop_module, "filter_rollouts", empty_first)
    trainer = Trainer(cfg)
    assert trainer.train_step(0)["train/update_skipped_empty"] == 1.0
    metrics = trainer.train_step(1)
    assert metrics["actor/lr"] == 0.0 and metrics["critic/lr"] == 0.0  # the schedules' first update
    assert trainer.state.actor_update_steps == trainer.state.critic_update_steps == 1
    trainer.save(1)
    cfg.trainer.resume = True
    resumed = Trainer(cfg)
    assert resumed.state.start_step == 2
    assert resumed.models.learning_rates(resumed.state.actor_update_steps, resumed.state.critic_update_steps) == pytest.approx((5e-4, 5e-4))
    # a checkpoint saved before these counters existed: every step until it counts as trained
    restore = Checkpointer.restore

    def without_counters(self, *a, **k):
        state, meta = restore(self, *a, **k)
        for key in ("actor_update_steps", "critic_update_steps"):
            meta["counters"].pop(key)
        return state, meta

    monkeypatch.setattr(Checkpointer, "restore", without_counters)
    old = Trainer(cfg)
    assert old.state.actor_update_steps == old.state.critic_update_steps == 2
    assert old.models.learning_rates(old.state.actor_update_steps, old.state.critic_update_steps) == pytest.approx((1e-3, 1e-3))


class FragileCounter(JaxEnv):
    """A JAX env of three "Tick" steps whose host-side renderer raises on one state of the episodes at the batch
    positions in FAILING: at reset (n = 0) or mid-episode (n = 2). The episode's instance rides in its seed."""

    action_lookup = {"tick": 0}
    FAILING: set[int] = set()
    FAIL_AT = 2

    @property
    def default_params(self):
        return None

    @property
    def action_names(self):
        return ["Tick"]

    def instruction(self):
        return "Tick three times."

    def episode_seed(self, seed, instance):
        return int(seed) * 100 + int(instance)

    def reset_from_seeds(self, seeds, params):
        return {"n": jnp.zeros(len(seeds), jnp.int32), "seed": jnp.asarray(seeds, jnp.int32)}

    def reset_env(self, key, params):
        raise NotImplementedError

    def step_env(self, key, state, action, params):
        state = {**state, "n": state["n"] + 1}
        info = {"action_is_effective": jnp.bool_(True), "success": state["n"] >= 3}
        return jnp.zeros(()), state, jnp.float32(1.0), state["n"] >= 3, info

    def is_truncated(self, state, params):
        return jnp.bool_(False)

    def render_text(self, state, params=None):
        if int(state["seed"]) % 100 in FragileCounter.FAILING and int(state["n"]) == FragileCounter.FAIL_AT:
            raise ValueError(f"cannot draw state {int(state['n'])}")
        return f"ticks={int(state['n'])}"


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
@pytest.mark.parametrize("engine", ["lockstep", "continuous"])
@pytest.mark.parametrize("fail_at", [0, 2])
def test_a_jax_env_whose_renderer_raises_fails_only_its_episode(tmp_path, monkeypatch, engine, fail_at):
    """A JAX env's host-side render_text raising on one state (at reset or mid-episode) ends only that episode,
    under both rollout engines, in training and in validation. Before, the exception ended the run."""
    FragileCounter.FAILING, FragileCounter.FAIL_AT = {1, 6}, fail_at
    cfg = bandit_config(tmp_path, preset="grpo", adv_estimator="grpo", use_critic=False)
    cfg.env.name = "test_trainer_faults:FragileCounter"
    cfg.env.max_turn, cfg.env.max_actions_per_traj = 3, 3
    cfg.rollout.engine = engine
    cfg.trainer.save_every, cfg.val.every, cfg.diagnostics.every = 0, 0, 0
    trainer = Trainer(cfg)
    monkeypatch.setattr(trainer.engine.tokenizer, "decode", lambda ids: "</think><answer>Tick</answer>")
    seen = {}
    run = trainer.engine.run
    monkeypatch.setattr(trainer.engine, "run", lambda *a, **k: seen.setdefault("res", run(*a, **k)))
    metrics = trainer.train_step(0)
    res = seen["res"]
    assert [i for i, ep in enumerate(res.episodes) if ep.error] == [1, 6]
    assert f"cannot draw state {fail_at}" in res.episodes[1].error and "render_text" in res.episodes[1].error
    assert (res.batch.loss_mask[np.isin(res.batch.episode_ids, [1, 6])] == 0).all()
    assert metrics["rollout/env_error_ratio"] == pytest.approx(2 / 8) and metrics["train/num_samples"] == 6
    assert metrics[f"train/{trainer.tag}/success"] == 1.0 and np.isfinite(metrics["actor/loss"])
    val, episodes = trainer.run_validation(0)
    assert [i for i, ep in enumerate(episodes) if ep.error] == [1, 6]
    tag = trainer.val_tags[0]
    assert val[f"val/{tag}/env_error"] == pytest.approx(2 / 8) and val[f"val/{tag}/success"] == 1.0


def capture_update(monkeypatch, seen: dict) -> None:
    """Replace the update stage by one that records the training batch it gets (its `dev` arrays and `valid` rows)
    and trains nothing."""
    from ragen_jax.trainer import stages

    def update(models, fns, batch, step, trainer, learning_rates):
        seen.update(dev=batch.dev, valid=batch.row_valid)
        return stages.Updated([], {}, False, False, 0.0)

    monkeypatch.setattr(stages, "update", update)


def test_a_run_whose_every_episode_failed_ends_as_a_failure_naming_the_error(tmp_path, monkeypatch):
    """A custom env whose every episode failed (here: its env raises; a newcomer's saw ContextOverflowError at
    every second turn) ended rc=0 with "0 / 0 updates" and a summary that read as a result. The summary now keeps
    the commonest env errors, and `nothing_trained` turns such a run into one line naming the error (run.py
    exits with it)."""
    from ragen_jax.trainer import report
    from ragen_jax.trainer.run_loop import train

    trainer = _flaky_trainer(tmp_path, failing=set(range(8)), monkeypatch=monkeypatch)
    trainer.run = trainer.run.replace(**{"filter.empty_stop_steps": 2, "trainer.total_steps": 4,
                                         "trainer.export_hf": False})
    summary = train(trainer)
    assert summary["steps_run"] == 2 and summary["updates_applied"] == 0
    assert summary["stop_reason"].startswith("every episode's environment failed, 2 steps in a row")
    assert [e["count"] for e in summary["env_errors"]] == [2, 2, 2]  # 8 distinct errors (one per env), twice each
    assert all("flaky env" in e["error"] for e in summary["env_errors"])
    line = report.nothing_trained(summary)
    assert line.startswith("Nothing was trained: every episode of the last steps failed in its env (2 x ")
    assert "flaky env" in line and "\n" not in line
    assert report.nothing_trained({**summary, "updates_applied": 1}) is None  # some step trained: a result
