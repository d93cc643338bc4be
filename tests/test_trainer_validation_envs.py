"""Validation on several envs in one run (RAGEN's es_manager.val tags): each env's metrics under its own tag, the
first env's episodes as a one-env validation plays them, the low-success stop counted per env."""

import dataclasses
import re

import pytest

from ragen_jax.trainer.early_stop import StepSignals, early_stop_reason
from ragen_jax.trainer import Trainer
from test_trainer_e2e import bandit_config


def _config(tmp_path, val_name):
    c = bandit_config(tmp_path)
    c.val.name, c.val.groups, c.val.batch_size = val_name, 6, 4  # two chunks per env, the second cut short
    c.diagnostics.every = 0
    return c


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_each_validation_env_plays_its_episodes_and_reports_under_its_tag(tmp_path):
    both = Trainer(_config(tmp_path / "both", "Bandit,BanditTest"))
    metrics, episodes = both.run_validation(3)
    assert both.val_tags == ["Bandit", "BanditTest"]  # the run's history follows the first
    assert [ep.env_tag for ep in episodes] == ["Bandit"] * 6 + ["BanditTest"] * 6
    # RAGEN's es_manager numbers every val tag's groups in one run of seeds (before: each env from 123 again)
    assert [ep.seed for ep in episodes] == list(range(123, 135))
    for tag in ("Bandit", "BanditTest"):
        assert {"success", "reward", "num_turns"} <= {k.split("/", 2)[2] for k in metrics
                                                       if k.startswith(f"val/{tag}/")}
    # the arm names differ between the two (BanditTest's are unseen in training)
    assert episodes[0].history[0].state != episodes[6].history[0].state

    one = Trainer(_config(tmp_path / "one", "Bandit"))
    one_metrics, one_episodes = one.run_validation(3)
    assert {k: v for k, v in one_metrics.items() if k.startswith("val/Bandit/")} == {
        k: v for k, v in metrics.items() if k.startswith("val/Bandit/")}
    for a, b in zip(one_episodes, episodes[:6]):  # the first env keeps a one-env validation's keys
        assert [list(r.response_tokens) for r in a.history] == [list(r.response_tokens) for r in b.history]
        assert a.total_reward == b.total_reward


def test_the_summary_counts_every_env(tmp_path, capsys):
    from ragen_jax.trainer import report

    trainer = Trainer(_config(tmp_path, "Bandit,BanditTest"))
    summary = report.run_summary(trainer, 1.0, 0.0, None, 0.5)
    assert summary["val_episodes"] == 12 and summary["val_envs"] == ["Bandit", "BanditTest"]
    report.print_summary(summary, str(tmp_path))
    out = capsys.readouterr().out
    assert re.search(r"episodes per validation +12\n", out), out
    assert re.search(r"validation success is on +Bandit \(also BanditTest: TensorBoard val/\*\)\n", out), out


def test_the_low_success_stop_counts_each_env(tmp_path):
    trainer = Trainer(_config(tmp_path, "Bandit,BanditTest"))
    es = trainer.run.trainer.early_stop
    for step in range(es.val_patience):
        assert early_stop_reason(trainer.state, StepSignals(), es, 5) is None
        trainer.record_validation(step, {"val/Bandit/success": 0.5, "val/BanditTest/success": 0.0})
    assert [h["val_success"] for h in trainer.state.history] == [0.5] * es.val_patience  # the history follows Bandit
    reason = early_stop_reason(trainer.state, StepSignals(), es, 5)
    assert reason == f"validation success on BanditTest stayed below {es.val_success_below} {es.val_patience} times " \
                     "in a row"
    trainer.record_validation(9, {"val/Bandit/success": 0.5, "val/BanditTest/success": 0.5})
    assert early_stop_reason(trainer.state, StepSignals(), es, 5) is None
    one_env = dataclasses.replace(trainer.state, val_low_streaks={"Bandit": es.val_patience})  # one env: no name
    assert early_stop_reason(one_env, StepSignals(), es, 5) == (f"validation success stayed below {es.val_success_below} "
                                                     f"{es.val_patience} times in a row")


def test_validation_env_names_are_checked(tmp_path):
    with pytest.raises(ValueError, match="several distinct ones separated by commas"):
        Trainer(_config(tmp_path, "Bandit,Bandit"))


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_a_run_that_never_validated_ends_with_a_validation(tmp_path):
    """val.at_start=False and val.every beyond total_steps: the final validation still runs (it was skipped
    because the history was empty, and the summary showed no validation figure at all)."""
    cfg = bandit_config(tmp_path, use_critic=False, adv_estimator="grpo")
    cfg.val.at_start, cfg.val.every = False, 5
    cfg.trainer.save_every, cfg.diagnostics.every = 0, 0
    summary = Trainer(cfg).train()
    assert [h["step"] for h in summary["val_history"]] == [cfg.trainer.total_steps]
    assert summary["val_success_final"] is not None


def test_the_validation_before_training_is_not_one_of_the_low_success_streak(tmp_path):
    """RAGEN counts the low-success stop over the validations of its training loop (test_freq), not the one before
    training (val_before_train): with every validation at 0, patience 5 and a validation after each step, it trains
    5 steps, not 4."""
    cfg = bandit_config(tmp_path, use_critic=False, adv_estimator="grpo")
    cfg.val.at_start, cfg.val.every = True, 1
    cfg.trainer.total_steps, cfg.trainer.save_every, cfg.diagnostics.every = 8, 0, 0
    trainer = Trainer(cfg)
    es = trainer.run.trainer.early_stop
    steps = []
    trainer.train_step = lambda step: steps.append(step) or {}
    trainer.validate = lambda step: {f"val/{trainer.val_tags[0]}/success": 0.0}
    summary = trainer.train()
    assert steps == list(range(es.val_patience))
    assert trainer.state.val_low_streaks == {trainer.val_tags[0]: es.val_patience}
    assert [h["step"] for h in summary["val_history"]] == list(range(es.val_patience + 1))  # the first one still shown


def test_the_banner_says_a_run_without_validation_validates_nothing(tmp_path):
    """val.every=0 and no warm start: no validation runs (the summary shows 0 episodes per validation), so the
    start-up lines must not promise validation episodes; a run that validates still names them."""
    from ragen_jax.trainer import report

    cfg = _config(tmp_path / "none", "Bandit")
    cfg.val.every, cfg.warmstart.enabled = 0, False
    banner = report.banner(Trainer(cfg), None)
    assert "no validation (val.every=0)" in banner and "per validation" not in banner, banner
    banner = report.banner(Trainer(_config(tmp_path / "some", "Bandit")), None)
    assert "6 episodes of Bandit per validation" in banner, banner


def test_token_rates_cover_the_wall_time_and_the_rl_steps_apart():
    from ragen_jax.trainer import report

    rates = report.token_rates(1200.0, wall_s=300.0, rl_step_s=100.0)
    assert rates == {"trained_tokens_per_s_wall": 4.0, "trained_tokens_per_s_rl_steps": 12.0}
    assert report.token_rates(0.0, 5.0, 0.0) == {"trained_tokens_per_s_wall": 0.0,
                                                 "trained_tokens_per_s_rl_steps": None}  # no RL step ran
    with pytest.raises(ValueError, match="must be >= 0"):
        report.token_rates(10.0, 5.0, -1.0)


class _Bar(list):
    """tqdm's surface that the RL loop uses."""

    def __init__(self, steps):
        super().__init__(range(steps))

    def set_postfix(self, values):
        pass


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_the_summary_rates_tokens_over_the_rl_steps_own_time(tmp_path, capsys):
    """The RL-only rate divides by the summed timing_s/step, not by the run's wall time (warm start, validation,
    compiles outside the steps)."""
    from ragen_jax.trainer import report
    from ragen_jax.trainer.interrupt import StopRequests

    trainer = Trainer(_config(tmp_path, "Bandit"))
    logged = []
    trainer.train_step = lambda step: {"perf/trained_tokens": 100.0 * (step + 1)}
    trainer.monitor.scalars = lambda metrics, step: logged.append(metrics["timing_s/step"])
    bar = _Bar(3)
    from ragen_jax.trainer.run_loop import rl_steps

    last, _, _, tokens, rl_step_s = rl_steps(trainer, bar, StopRequests())
    assert (last, tokens) == (2, 600.0) and rl_step_s == pytest.approx(sum(logged), rel=1e-12) and len(logged) == 3
    summary = report.run_summary(trainer, 40.0, 600.0, None, 3.0)
    assert summary["trained_tokens_per_s_wall"] == 15.0 and summary["trained_tokens_per_s_rl_steps"] == 200.0
    report.print_summary(summary, str(tmp_path))
    out = capsys.readouterr().out
    assert re.search(r"trained tokens / s of wall time +15\n", out), out
    assert re.search(r"trained tokens / s of RL steps +200\n", out), out
