"""Exact resume of the quickstart's recipe: a run killed half-way and resumed from its checkpoint equals the run
that never stopped, bit for bit on the CPU (warm start, KL reference, critic, a filter that drops groups)."""

import contextlib
import json
import logging
import os

import jax
import numpy as np
import pytest

from ragen_jax.trainer import report
from ragen_jax.trainer import Trainer
from disk_testlib import full_disk
from test_trainer_e2e import bandit_config

NOISY = ("timing_s/", "perf/")  # wall-clock metrics differ between any two runs


def recipe(workdir, total_steps):
    c = bandit_config(workdir, use_kl_loss=True, kl_loss_coef=0.5, kl_loss_type="low_var_kl")
    c.env.groups, c.env.group_size = 4, 4
    c.trainer.mini_batch_size, c.trainer.micro_batch_size = 8, 4
    c.trainer.total_steps, c.trainer.save_every, c.trainer.dump_rollouts_every = total_steps, 1, 2
    c.val.every, c.diagnostics.every = 0, 0
    c.rollout.temperature = 2.0  # varied answers, so groups differ and the filter has something to drop
    c.filter.strategy, c.filter.value, c.filter.include_zero = "top_k", 0.5, True
    c.warmstart.update(enabled=True, source="random", num_demos=64, steps=8, batch_size=16, lr=3e-3,
                       warmup_steps=1)
    c.val.groups = c.val.batch_size = 8
    return c


def run(cfg, resume=False):
    """Train `cfg` -> (trainer, {step: metrics}) with every logged scalar."""
    cfg.trainer.resume = resume
    trainer = Trainer(cfg)
    logged: dict[int, dict] = {}
    scalars = trainer.monitor.scalars
    trainer.monitor.scalars = lambda m, step: (logged.setdefault(step, {}).update(m), scalars(m, step))
    trainer.train()
    return trainer, logged


def _bits(tree):
    return [np.asarray(x) for x in jax.tree.leaves(tree)]


def assert_bitwise(a, b, what):
    a, b = _bits(a), _bits(b)
    assert len(a) == len(b), what
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and np.array_equal(x, y), what


def test_a_checkpoint_step_already_on_disk_is_never_skipped_silently(tmp_path):
    """Orbax declines to save a step at or below its latest one; a fresh run into an earlier run's folder must
    say so instead of leaving the earlier run's checkpoints under its own step numbers."""
    import jax.numpy as jnp

    from ragen_jax.checkpoint import Checkpointer

    folder = str(tmp_path / "checkpoints")
    earlier = Checkpointer(folder)
    for step in (0, 1):
        earlier.save(step, {"w": jnp.ones(3)}, {"step": step, "run": "earlier"})
    with pytest.raises(FileExistsError, match="trainer.resume=True"):
        Checkpointer(folder).save(0, {"w": jnp.zeros(3)}, {"step": 0, "run": "fresh"})
    assert Checkpointer(folder).restore_meta(1)["run"] == "earlier"


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_killed_and_resumed_run_equals_the_straight_run(tmp_path):
    straight, straight_log = run(recipe(tmp_path / "straight", 4))
    first, first_log = run(recipe(tmp_path / "resumed", 2))
    del first  # the process "dies" here: only the checkpoint folder survives
    resumed, resumed_log = run(recipe(tmp_path / "resumed", 4), resume=True)
    assert resumed.state.start_step == 2

    assert_bitwise(straight.models.actor.trainable, resumed.models.actor.trainable, "actor parameters")
    assert_bitwise(straight.models.actor_optim.state, resumed.models.actor_optim.state, "actor optimizer state")
    assert_bitwise(straight.models.critic.trainable, resumed.models.critic.trainable, "critic parameters")
    assert_bitwise(straight.models.critic_optim.state, resumed.models.critic_optim.state, "critic optimizer state")
    assert_bitwise(straight.models.ref_params, resumed.models.ref_params, "KL reference")
    assert not resumed.models.ref_is_initial  # the warm-started policy, restored from the checkpoint

    joined = {**first_log, **resumed_log}
    for step in range(1, 5):
        want = {k: v for k, v in straight_log[step].items() if not k.startswith(NOISY)}
        got = {k: v for k, v in joined[step].items() if not k.startswith(NOISY)}
        assert want.keys() == got.keys(), step
        assert want == got, step  # every metric, bit for bit (floats compared exactly)
    kept = [straight_log[s]["rollout/filter_kept_ratio"] for s in range(1, 5)]
    assert max(kept) < 1.0  # the filter dropped groups
    assert all(straight_log[s]["actor/kl_loss"] > 0 for s in range(2, 5))  # the KL term is live
    # rollout dumps are named by the step TensorBoard logs them at (1 = the first RL step), across a resume too
    for run_dir in ("straight", "resumed"):
        dumps = sorted(f for f in os.listdir(tmp_path / run_dir / "rollouts") if f.startswith("train_"))
        assert dumps == ["train_step2.jsonl", "train_step4.jsonl"], run_dir
    assert {2, 4} <= straight_log.keys()
    summary = report.run_summary(resumed, 1.0, 0.0, None, 0.5)
    assert summary["val_success_after_warmstart"] is not None and summary["warmstart_seconds"] is not None


@pytest.mark.slow  # four short runs with a warm start: ~2 minutes on 2 cores
def test_a_signalled_lockstep_lora_run_resumes_bit_for_bit(tmp_path, sigterm_kills):
    """Exact resume beyond the recipe above: the lockstep engine, LoRA adapters, veRL's adaptive KL-in-reward
    controller (its coefficient is carried state), a warmup + cosine schedule, validation every step, and a
    SIGTERM after step 1 instead of a shorter run."""
    import signal

    def config(workdir):
        c = recipe(workdir, 3)
        c.trainer.save_every, c.val.every, c.warmstart.steps = 0, 1, 2
        c.rollout.engine, c.model.lora.rank = "lockstep", 4
        c.algo.update(use_kl_in_reward=True, kl_ctrl_type="adaptive", kl_ctrl_coef=0.05)
        c.optim.actor.update(schedule="cosine", warmup_steps=1)
        return c

    straight, straight_log = run(config(tmp_path / "straight"))
    first = Trainer(config(tmp_path / "resumed"))
    first_log: dict[int, dict] = {}
    scalars, step_fn = first.monitor.scalars, first.train_step
    first.monitor.scalars = lambda m, step: (first_log.setdefault(step, {}).update(m), scalars(m, step))
    first.train_step = lambda step: (step_fn(step), step == 0 and signal.raise_signal(signal.SIGTERM))[0]
    assert first.train()["stopped_by_signal"] == "SIGTERM"
    resumed, resumed_log = run(config(tmp_path / "resumed"), resume=True)
    assert resumed.state.start_step == 1 and resumed.models.lora

    assert_bitwise(straight.models.actor.trainable, resumed.models.actor.trainable, "actor adapters")
    assert_bitwise(straight.models.actor_optim.state, resumed.models.actor_optim.state, "actor optimizer state")
    assert_bitwise(straight.models.critic.trainable, resumed.models.critic.trainable, "critic parameters")
    assert_bitwise(straight.models.critic_optim.state, resumed.models.critic_optim.state, "critic optimizer state")
    assert not all(np.array_equal(a, b) for a, b in zip(_bits(first.models.actor.trainable), _bits(resumed.models.actor.trainable)))
    for step in range(1, 4):
        want = {k: v for k, v in straight_log[step].items() if not k.startswith(NOISY)}
        got = {k: v for k, v in {**first_log.get(step, {}), **resumed_log.get(step, {})}.items()
               if not k.startswith(NOISY)}
        assert want == got, step  # every metric, validation included, bit for bit
    coefs = [straight_log[s]["actor/reward_kl_penalty_coeff"] for s in range(1, 4)]
    assert len(set(coefs)) == 3  # the controller moved the coefficient at every step: its state crossed the stop
    assert resumed.state.kl_in_reward_coef == straight.state.kl_in_reward_coef


def _two_checkpoints(folder):
    import jax.numpy as jnp

    from ragen_jax.checkpoint import Checkpointer

    for step in (0, 1):
        Checkpointer(folder).save(step, {"w": jnp.ones(3)}, {"step": step})
    return {"w": jax.ShapeDtypeStruct((3,), np.float32)}


def test_resuming_the_warm_start_of_mode_sft_is_refused_with_the_way_to_rl_from_it(tmp_path):
    """`--mode=sft` saves checkpoint 0 after no RL step; a resume (what a fresh run into that workdir advises) took
    it for RL step 1: it skipped that step and every validation before it, and reported "after 2 RL steps" after 1."""
    import types

    import jax.numpy as jnp

    from ragen_jax.checkpoint import Checkpointer
    from ragen_jax.trainer import Trainer

    workdir = str(tmp_path / "sft")
    folder = os.path.join(workdir, "checkpoints")
    Checkpointer(folder).save(0, {"w": jnp.ones(3)}, {"step": 0, "counters": {"steps_run": 0},
                                                        "warmstart": {"val_success_after_warmstart": 0.5}})
    restored = []
    trainer = types.SimpleNamespace(checkpointer=Checkpointer(folder), workdir=workdir,
                                    restore=lambda directory, step: restored.append(step))
    with pytest.raises(FileExistsError,
                       match=r"checkpoints/0 is the warm start of `--mode=sft`, not an RL step: "
                             r".*--config.model.path=.*/sft/hf_export --config.warmstart.enabled=False"):
        Trainer._restore_latest(trainer)
    assert restored == []
    Checkpointer(folder).save(1, {"w": jnp.ones(3)}, {"step": 1, "counters": {"steps_run": 2}})  # an RL run's
    trainer.checkpointer = Checkpointer(folder)
    Trainer._restore_latest(trainer)
    assert restored == [1]


def test_a_damaged_checkpoint_names_the_one_before_it_instead_of_an_orbax_traceback(tmp_path):
    """A step cut short (a crash or a full disk while writing) is a CheckpointError naming it and the way on."""
    import shutil


    from ragen_jax.checkpoint import Checkpointer
    from ragen_jax.models import CheckpointError

    folder = str(tmp_path / "checkpoints")
    abstract = _two_checkpoints(folder)
    data = [os.path.join(d, f) for d, _, files in os.walk(os.path.join(folder, "1", "state")) for f in files
            if os.path.basename(d) == "d"]
    for path in data:  # every data file half-written
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) // 2)
    with pytest.raises(CheckpointError, match=r"Checkpoint 1 in .* cannot be read .*\(mv .*/1 .*/1\.damaged\) .*"
                                              r"checkpoint 0"):
        Checkpointer(folder).restore(1, abstract)
    shutil.rmtree(os.path.join(folder, "1", "state"))
    with pytest.raises(CheckpointError, match="Checkpoint 1 in .* cannot be read"):
        Checkpointer(folder).restore(1, abstract)
    shutil.rmtree(os.path.join(folder, "1", "meta"))
    with pytest.raises(CheckpointError, match="Checkpoint 1 in .* cannot be read"):
        Checkpointer(folder).restore_meta(1)
    os.rename(os.path.join(folder, "1"), os.path.join(folder, "1.damaged"))  # the fix the message gives
    state, meta = Checkpointer(folder).restore(0, abstract)
    assert meta["step"] == 0 and np.array_equal(state["w"], np.ones(3))


def test_a_checkpoint_of_another_model_is_refused_naming_what_differs(tmp_path):
    """Resuming or evaluating with another model size, LoRA rank or critic names the leaves and the fix."""

    from ragen_jax.checkpoint import Checkpointer
    from ragen_jax.models import CheckpointError

    folder = str(tmp_path / "checkpoints")
    _two_checkpoints(folder)
    wider = {"w": jax.ShapeDtypeStruct((4,), np.float32)}
    with pytest.raises(CheckpointError, match=r"w: the checkpoint has shape \(3,\), this config builds \(4,\).*"
                                              r"config\.json"):
        Checkpointer(folder).restore(1, wider)
    lora = {"w": jax.ShapeDtypeStruct((3,), np.float32), "lora_a": jax.ShapeDtypeStruct((2,), np.float32)}
    with pytest.raises(CheckpointError, match="lora_a: this config builds it, the checkpoint lacks it"):
        Checkpointer(folder).restore(1, lora)


def grpo_without_validation(workdir, **trainer):
    """Bandit GRPO without validation or diagnostics (the fault tests need only steps and checkpoints), with these
    `config.trainer` values."""
    cfg = bandit_config(workdir, use_critic=False, adv_estimator="grpo")
    cfg.val.every, cfg.diagnostics.every = 0, 0
    cfg.trainer.update(trainer)
    return cfg


class Killed(Exception):
    """What the process's own SIGTERM handler (the default one kills it) stands in for."""


@pytest.fixture
def sigterm_kills():
    """The process's own SIGTERM handler (it raises Killed) for the test, the previous one back after; -> handler."""
    import signal

    def kill(signum, frame):
        raise Killed

    previous = signal.signal(signal.SIGTERM, kill)
    try:
        yield kill
    finally:
        signal.signal(signal.SIGTERM, previous)


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_a_signal_mid_run_stops_after_the_step_saves_it_and_resumes(tmp_path, monkeypatch, sigterm_kills):
    """Ctrl-C or a scheduler's SIGTERM: the step in flight finishes and is saved (a preset with save_every=0 lost
    the whole run), no final validation or export, and the run goes on from there with resume=True."""
    import signal

    from ragen_jax.checkpoint import finished_steps

    kill = sigterm_kills
    cfg = grpo_without_validation(tmp_path, total_steps=4, save_every=0, export_hf=True)
    trainer = Trainer(cfg)
    step_fn = trainer.train_step

    def step_then_signal(step):
        metrics = step_fn(step)
        if step == 1:
            signal.raise_signal(signal.SIGTERM)
        return metrics

    monkeypatch.setattr(trainer, "train_step", step_then_signal)
    summary = trainer.train()
    assert signal.getsignal(signal.SIGTERM) is kill  # the process's own handler is back
    assert summary["stopped_by_signal"] == "SIGTERM" and "--config.trainer.resume=True" in summary["stop_reason"]
    assert finished_steps(str(tmp_path / "checkpoints")) == [1]
    assert not os.path.exists(tmp_path / "hf_export")
    cfg.trainer.resume = True
    resumed = Trainer(cfg)
    assert resumed.state.start_step == 2 and resumed.train()["stopped_by_signal"] is None
    assert finished_steps(str(tmp_path / "checkpoints")) == [1, 3]


def refuse_checkpoint(monkeypatch, checkpointer, refused_step: int) -> None:
    """Checkpoint `refused_step` is written with the disk full (the real Orbax write fails); the others normally."""
    save = type(checkpointer).save

    def save_maybe_full(self, step, state, meta):
        with full_disk() if step == refused_step else contextlib.nullcontext():
            return save(self, step, state, meta)

    monkeypatch.setattr(type(checkpointer), "save", save_maybe_full)


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_a_checkpoint_the_disk_refuses_is_reported_and_the_run_goes_on(tmp_path, monkeypatch, caplog):
    """A full disk at one save: its partial folder is removed (it holds space), one error line names the cause
    and the latest checkpoint, the run trains on, and the next save (a fresh Orbax manager state) succeeds."""
    from ragen_jax.checkpoint import finished_steps

    cfg = grpo_without_validation(tmp_path, total_steps=3, save_every=1, keep_checkpoints=3)
    trainer = Trainer(cfg)
    refuse_checkpoint(monkeypatch, trainer.checkpointer, refused_step=1)
    with caplog.at_level("ERROR"):
        summary = trainer.train()
    folder = str(tmp_path / "checkpoints")
    assert finished_steps(folder) == [0, 2] and sorted(os.listdir(folder)) == ["0", "2"]  # no partial folder
    assert summary["checkpoint_save_failures"] == 1 and summary["failures"] == []
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and "Checkpoint 1 could not be written" in errors[0], errors
    assert "File too large" in errors[0] and f"latest complete checkpoint is {folder}/0" in errors[0]
    assert "The run goes on" in errors[0] and "Traceback" not in caplog.text
    cfg.trainer.resume = True
    assert Trainer(cfg).state.start_step == 3


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_a_final_checkpoint_the_disk_refuses_ends_the_run_with_the_reason(tmp_path, monkeypatch):
    """The run's last save fails: the summary is still written, and the run ends with one error saying the final
    state is lost, why, what is on disk and how to go on (run.py prints it as its FATAL line)."""
    from ragen_jax.checkpoint import CheckpointWriteError, finished_steps

    cfg = grpo_without_validation(tmp_path, total_steps=2, save_every=0)
    trainer = Trainer(cfg)
    refuse_checkpoint(monkeypatch, trainer.checkpointer, refused_step=1)
    with pytest.raises(CheckpointWriteError) as failure:
        trainer.train()
    message = str(failure.value)
    assert "final state (after step 2) was not saved" in message and "File too large" in message
    assert "holds no complete checkpoint" in message and "--config.trainer.resume=True" in message
    assert finished_steps(str(tmp_path / "checkpoints")) == [] and os.listdir(tmp_path / "checkpoints") == []
    with open(tmp_path / "summary.json") as f:
        summary = json.load(f)
    assert summary["checkpoint_save_failures"] == 1 and summary["failures"] == [message]
    assert not any("Checkpoint after" in line for line in summary["outputs"])


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_an_export_the_disk_refuses_is_written_by_resuming_the_finished_run(tmp_path, monkeypatch, caplog):
    """The final checkpoint is on disk but the Hugging Face export fails (full disk): the run ends with that
    error, and the fix it names (the same command with resume=True) writes the export without training again."""
    from ragen_jax.checkpoint import CheckpointWriteError, finished_steps

    cfg = grpo_without_validation(tmp_path, total_steps=2, save_every=0, export_hf=True)
    trainer = Trainer(cfg)
    export = trainer.export

    def export_on_a_full_disk(folder):
        with full_disk():
            return export(folder)

    monkeypatch.setattr(trainer, "export", export_on_a_full_disk)
    with pytest.raises(CheckpointWriteError, match="export to .*hf_export failed .*File too large.*resume=True"):
        trainer.train()
    assert finished_steps(str(tmp_path / "checkpoints")) == [1]
    cfg.trainer.resume = True
    resumed = Trainer(cfg)
    steps_run = resumed.state.steps_run
    with caplog.at_level(logging.WARNING):
        summary = resumed.train()
    assert resumed.state.steps_run == steps_run == 2 and summary["failures"] == []
    assert any("already trained its 2 steps" in r.getMessage() and "raise --config.trainer.total_steps"
               in r.getMessage() for r in caplog.records)  # before: a fresh summary, no word why nothing ran
    assert os.path.exists(tmp_path / "hf_export" / "config.json")
    assert finished_steps(str(tmp_path / "checkpoints")) == [1]


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_a_run_that_stopped_early_is_not_trained_on_by_its_resume(tmp_path, caplog):
    """A run that stopped early (here: updates skipped for overflow) and is resumed (a requeued job, or the fix an
    export on a full disk names) stays stopped: it trained further steps, as the run itself had refused to, and the
    stop's counters only re-triggered it a step later. Turning the stop off lets the resume train on."""
    from ragen_jax.checkpoint import finished_steps

    cfg = grpo_without_validation(tmp_path, total_steps=4, save_every=0)
    cfg.optim.actor.lr, cfg.optim.actor.grad_clip = 1e39, 0.0  # every update overflows and is skipped
    cfg.trainer.early_stop.skipped_updates = 4  # two steps of two mini-batches
    stopped = Trainer(cfg).train()
    assert "updates in a row were skipped" in stopped["stop_reason"] and stopped["steps_run"] == 2
    folder = str(tmp_path / "checkpoints")
    assert finished_steps(folder) == [1]

    cfg.trainer.resume = True
    with caplog.at_level("WARNING"):
        again = Trainer(cfg).train()
    assert again["steps_run"] == 2 and again["stop_reason"] == stopped["stop_reason"]
    assert finished_steps(folder) == [1]
    assert any("stopped early after step 2" in r.getMessage() and "trains no further step" in r.getMessage()
               for r in caplog.records)

    cfg.trainer.early_stop.skipped_updates = 0  # the stop turned off: the resume goes on to total_steps
    on = Trainer(cfg).train()
    assert on["steps_run"] == 4 and on["stop_reason"] is None and finished_steps(folder) == [1, 3]


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_a_save_cut_short_by_a_kill_leaves_no_folder_behind_once_the_run_goes_on(tmp_path, caplog):
    """A process killed while writing a checkpoint (a scheduler's SIGKILL after its grace period) leaves Orbax's
    temporary folder, up to a whole checkpoint's size; Orbax never removes it, so every such kill held more disk
    until a save failed for the space. The next training run in that workdir removes it, and says so."""
    from ragen_jax.checkpoint import finished_steps

    cfg = grpo_without_validation(tmp_path, total_steps=1, save_every=0)
    partial = tmp_path / "checkpoints" / "0.orbax-checkpoint-tmp-1700000000"
    (partial / "state").mkdir(parents=True)
    (partial / "state" / "half_written").write_bytes(b"\0" * 1024)
    with caplog.at_level("WARNING"):
        Trainer(cfg).train()
    assert sorted(os.listdir(tmp_path / "checkpoints")) == ["0"]
    assert finished_steps(str(tmp_path / "checkpoints")) == [0]
    assert any("partial checkpoint folder" in r.getMessage() and str(partial) in r.getMessage()
               for r in caplog.records)


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_a_resume_with_another_config_names_each_change(tmp_path, caplog):
    """A resume overwrote config.json with its own config without a word: a changed seed, batch or lr silently
    made the resumed steps another run's, and the record of the first config was gone."""
    cfg = grpo_without_validation(tmp_path, total_steps=1, save_every=0)
    Trainer(cfg).train()
    cfg.trainer.update(resume=True, total_steps=2, seed=1)
    with caplog.at_level("WARNING"):
        Trainer(cfg).train()
    warnings = [r.getMessage() for r in caplog.records if "config differs" in r.getMessage()]
    assert len(warnings) == 1, [r.getMessage() for r in caplog.records]
    assert "trainer.seed: 0 -> 1; trainer.total_steps: 1 -> 2." in warnings[0] and "trainer.resume" not in warnings[0]
    with open(tmp_path / "config.json") as f:
        assert json.load(f)["trainer"]["seed"] == 1  # what the run now runs with
    from ragen_jax.config.files import config_changes

    assert config_changes({"trainer": {"resume": False, "seed": 0}}, {"trainer": {"resume": True, "seed": 0}}) == []
    assert config_changes({"a": 1}, {"b": None}) == ["a: 1 -> (absent)", "b: (absent) -> None"]


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_a_signal_during_the_final_save_lets_it_finish(tmp_path, monkeypatch, sigterm_kills):
    """The run's last checkpoint (its only one with save_every=0) was written after the signal handlers were
    given back: a scheduler's SIGTERM while it wrote killed the process and lost every step of the run."""
    import signal

    from ragen_jax.checkpoint import finished_steps

    kill = sigterm_kills
    cfg = grpo_without_validation(tmp_path, total_steps=2, save_every=0, export_hf=True)
    trainer = Trainer(cfg)
    save = trainer.save

    def signal_then_save(step):
        signal.raise_signal(signal.SIGTERM)  # arrives as the final save starts
        return save(step)

    monkeypatch.setattr(trainer, "save", signal_then_save)
    summary = trainer.train()
    assert summary["stopped_by_signal"] == "SIGTERM" and finished_steps(str(tmp_path / "checkpoints")) == [1]
    assert summary["steps_run"] == 2 and not os.path.exists(tmp_path / "hf_export")  # no export after a signal
    assert signal.getsignal(signal.SIGTERM) is kill


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_tensorboard_shows_each_step_once_after_a_resume(tmp_path):
    """A killed run logs steps past its last checkpoint; the resume logs them again. TensorBoard drew both (two
    points at one step, a zig-zag line); a session START at the first step the resume logs drops the earlier ones."""
    import shutil

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    cfg = bandit_config(tmp_path)
    cfg.trainer.total_steps, cfg.trainer.save_every = 3, 1
    cfg.val.every, cfg.diagnostics.every = 0, 0
    Trainer(cfg).train()
    shutil.rmtree(tmp_path / "checkpoints" / "2")  # the process died after logging step 3, before saving it
    cfg.trainer.resume = True
    resumed = Trainer(cfg)
    assert resumed.state.start_step == 2
    resumed.train()
    acc = EventAccumulator(str(tmp_path / "tb"))
    acc.Reload()
    tag = next(t for t in acc.Tags()["scalars"] if t.endswith("/success") and t.startswith("train/"))
    assert [e.step for e in acc.Scalars(tag)] == [1, 2, 3]


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_a_run_into_the_folder_of_one_that_never_saved_shows_only_its_own_curves(tmp_path):
    """A run stopped (Ctrl-C) before its first checkpoint leaves its TensorBoard events; the next run into that
    workdir (allowed: there is nothing to resume) drew its curves over the stopped run's. A finished run's folder
    keeps its curves: a fresh run into it is refused before anything is logged."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from ragen_jax.monitoring import Monitor

    stopped = Monitor(str(tmp_path / "tb"))
    for step in (1, 2, 3):
        stopped.scalars({"train/stale_only": 1.0, "actor/lr": 9.0}, step)
    stopped.close()
    cfg = bandit_config(tmp_path)
    cfg.trainer.total_steps, cfg.trainer.save_every = 1, 0
    cfg.val.every, cfg.val.at_start, cfg.diagnostics.every = 0, False, 0
    Trainer(cfg).train()
    acc = EventAccumulator(str(tmp_path / "tb"))
    acc.Reload()
    tags = acc.Tags()["scalars"]
    assert "train/stale_only" not in tags or acc.Scalars("train/stale_only") == []
    assert [(e.step, e.value != 9.0) for e in acc.Scalars("actor/lr")] == [(1, True)]
    with pytest.raises(FileExistsError):  # the finished run's folder: refused, its curves untouched
        Trainer(cfg).train()
    acc = EventAccumulator(str(tmp_path / "tb"))
    acc.Reload()
    assert [e.step for e in acc.Scalars("actor/lr")] == [1]


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_a_bfloat16_checkpoint_without_the_float32_master_resumes_with_the_master_rebuilt(tmp_path, caplog):
    """bfloat16 parameters train through a float32 master copy in the optimizer state (MasterWeights); a
    checkpoint written before it holds only what is now `.inner`, and its resume failed with "does not fit"
    (actor_opt.master.* missing). It restores the inner state and rebuilds the master as init would."""
    import jax.numpy as jnp

    from ragen_jax.checkpoint import Checkpointer
    from ragen_jax.optim import MasterWeights

    def config(workdir):
        cfg = bandit_config(workdir)  # with a critic: both optimizer states
        cfg.model.param_dtype = "bfloat16"
        cfg.trainer.total_steps, cfg.trainer.save_every = 1, 0
        cfg.val.every, cfg.diagnostics.every = 0, 0
        return cfg

    old = Trainer(config(tmp_path / "old"))
    old.train()
    assert isinstance(old.models.actor_optim.state, MasterWeights) and isinstance(old.models.critic_optim.state, MasterWeights)
    legacy = dict(old.models.state(False), actor_opt=old.models.actor_optim.state.inner, critic_opt=old.models.critic_optim.state.inner)
    meta = old.checkpointer.restore_meta(0)
    Checkpointer(str(tmp_path / "legacy" / "checkpoints")).save(0, legacy, meta)

    cfg = config(tmp_path / "legacy")
    cfg.trainer.update(resume=True, total_steps=2)
    with caplog.at_level("INFO"):
        resumed = Trainer(cfg)
    assert resumed.state.start_step == 1
    for model in ("actor", "critic"):
        params, opt = getattr(resumed.models, model).trainable, getattr(resumed.models, f"{model}_optim").state
        assert isinstance(opt, MasterWeights)
        assert_bitwise(getattr(old.models, model).trainable, params, f"{model} parameters")
        assert_bitwise(getattr(old.models, f"{model}_optim").state.inner, opt.inner, f"{model} optimizer state")
        assert_bitwise(jax.tree.map(lambda p: p.astype(jnp.float32), params), opt.master, f"{model} master")
        for m, p in zip(jax.tree.leaves(opt.master), jax.tree.leaves(params)):
            assert m.sharding == p.sharding
    notes = [r.getMessage() for r in caplog.records if "master" in r.getMessage()]
    assert len(notes) == 1 and "float32" in notes[0], notes
    assert resumed.train()["steps_run"] == 2  # it trains on


def test_only_a_bfloat16_checkpoint_without_the_master_gets_one_rebuilt(tmp_path):
    """The master is rebuilt only where the stored leaves are the wanted ones without it, dtypes too: a float32
    run's checkpoint resumed with bfloat16 parameters is refused as before, not rounded and given a master."""
    import jax.numpy as jnp

    from ragen_jax.checkpoint import Checkpointer
    from ragen_jax.models import CheckpointError
    from ragen_jax.optim import MasterWeights
    from ragen_jax.trainer.models import restore_state as restore_checkpoint_state

    spec = lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding)  # noqa: E731
    params = {"w": jnp.arange(3, dtype=jnp.bfloat16)}
    inner = {"mu": jnp.full(3, 0.5), "count": jnp.int32(4)}
    abstract = jax.tree.map(spec, {"actor": params, "actor_opt": MasterWeights(
        {"w": jnp.zeros(3)}, inner)})
    Checkpointer(str(tmp_path / "bf16")).save(0, {"actor": params, "actor_opt": inner}, {"step": 0})
    state, meta = restore_checkpoint_state(Checkpointer(str(tmp_path / "bf16")), 0, abstract)
    assert meta == {"step": 0} and isinstance(state["actor_opt"], MasterWeights)
    assert_bitwise(state["actor_opt"], MasterWeights({"w": jnp.arange(3, dtype=jnp.float32)}, inner), "state")
    wide = {"w": jnp.arange(3, dtype=jnp.float32)}
    Checkpointer(str(tmp_path / "f32")).save(0, {"actor": wide, "actor_opt": inner}, {"step": 0})
    with pytest.raises(CheckpointError, match="actor_opt.master.w: this config builds it, the checkpoint lacks it"):
        restore_checkpoint_state(Checkpointer(str(tmp_path / "f32")), 0, abstract)


def test_the_checkpoint_barrier_timeout_reaches_every_checkpointer_the_trainer_builds(tmp_path, monkeypatch):
    """config.trainer.checkpoint_barrier_timeout_s is the multi-host barrier timeout of the run's own checkpoints
    and of another run's that `restore` reads."""
    from ragen_jax.trainer import trainer as loop

    trainer = Trainer(grpo_without_validation(tmp_path, checkpoint_barrier_timeout_s=17))
    assert trainer.checkpointer.barrier_timeout_s == 17

    class Opened(Exception):
        pass

    class RecordingCheckpointer(loop.Checkpointer):
        def restore_meta(self, step):
            raise Opened(self.barrier_timeout_s)

    monkeypatch.setattr(loop, "Checkpointer", RecordingCheckpointer)
    with pytest.raises(Opened) as opened:
        trainer.restore(str(tmp_path / "another_run" / "checkpoints"), 1)
    assert opened.value.args == (17,)


def test_a_resumed_run_keeps_every_validation_it_made(tmp_path):
    """The summary's first and best validation figures read the whole history: a checkpoint that kept only the
    last 1,000 validations gave a long run's resume another val_success_start and val_success_best."""
    cfg = bandit_config(str(tmp_path / "run"))
    trainer = Trainer(cfg)
    trainer.state.history = [{"step": 0, "val_success": 0.9}] + [{"step": s, "val_success": 0.1} for s in range(1, 1500)]
    trainer.state.steps_run = 1500
    trainer.save(1499)
    resumed = Trainer(cfg)
    resumed.restore(trainer.checkpointer.directory, 1499)
    assert resumed.state.history == trainer.state.history
    summary = report.run_summary(resumed, 1.0, 0.0, None, 1.0)
    assert (summary["val_success_start"], summary["val_success_best"]) == (0.9, 0.9)
