"""Evaluating what was trained: which weights --mode=eval scores, where it writes, and --print_config."""

import json
import os

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from ragen_jax.trainer.evaluate import EvalTarget, eval_target
from test_run_cli import run_cli


def _hf_folder(path):
    os.makedirs(path)
    for name in ("config.json", "model.safetensors"):
        open(os.path.join(path, name), "w").close()


def test_eval_target_finds_the_latest_checkpoint_then_the_export(tmp_path):
    run = tmp_path / "run"
    with pytest.raises(FileNotFoundError, match="--checkpoint=init"):  # nothing trained: never a silent untrained score
        eval_target(str(run))
    assert eval_target(str(run), "init").kind == "init"
    assert eval_target(str(run), "init").out_dir == str(run / "eval" / "init")
    _hf_folder(run / "hf_export")
    hf = eval_target(str(run))
    assert (hf.kind, hf.path, hf.out_dir) == ("hf", str(run / "hf_export"), str(run / "eval" / "hf_export"))
    for step in ("3", "12", "12.orbax-checkpoint-tmp-1"):
        os.makedirs(run / "checkpoints" / step)
    latest = eval_target(str(run))
    assert (latest.kind, latest.path, latest.step) == ("orbax", str(run / "checkpoints"), 12)
    assert latest.out_dir == str(run / "eval" / "step_12")
    # --checkpoint: a step folder, a run folder, an HF folder; outputs always under the evaluating workdir
    other = tmp_path / "other"
    picked = eval_target(str(other), str(run / "checkpoints" / "3"))
    assert (picked.kind, picked.step, picked.out_dir) == ("orbax", 3, str(other / "eval" / "step_3"))
    assert eval_target(str(other), str(run)).step == 12
    assert eval_target(str(other), str(run / "hf_export")).kind == "hf"
    with pytest.raises(FileNotFoundError, match="Orbax step folder"):
        eval_target(str(other), str(tmp_path / "nothing"))


def test_an_orbax_target_says_how_many_rl_steps_its_checkpoint_ran():
    target = EvalTarget("orbax", "/r/checkpoints", 1, "/w/eval/step_1")
    assert target.describe(2) == "checkpoint step 1 (/r/checkpoints/1, after 2 RL steps)"
    assert target.describe() == "checkpoint step 1 (/r/checkpoints/1)"


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_print_config_shows_the_config_and_the_memory_plan_then_exits(tmp_path):
    wd = tmp_path / "run"
    proc = run_cli("--config=configs/sokoban.py:tiny", "--config.algo.custom_policy_loss=ragen_jax.algos.policy_loss:"
                   "ppo_clip_loss", "--print_config", workdir=wd, mode="train")
    assert proc.returncode == 0, proc.stderr
    config = json.loads(proc.stdout[:proc.stdout.index("\n}\n") + 2])
    assert config["env"]["name"] == "SimpleSokoban" and config["model"]["preset"] == "tiny"
    assert "algo.custom_policy_loss = ragen_jax.algos.policy_loss:ppo_clip_loss (" in proc.stdout
    assert "ragen_jax/algos/policy_loss.py)" in proc.stdout  # the file the function comes from
    assert "memory plan per device" in proc.stdout and "training_peak" in proc.stdout
    assert not os.path.exists(wd)  # nothing built, nothing written


@pytest.mark.slow
def test_train_then_eval_the_checkpoint_and_the_export(tmp_path):
    """A 1-step run saves its final state and HF export; eval scores each into its own folder."""
    wd = tmp_path / "run"
    tiny = ["--config=configs/bandit.py:tiny", "--config.trainer.total_steps=1", "--config.warmstart.enabled=False",
            "--config.val.groups=8", "--config.val.batch_size=8", "--config.val.every=1", "--config.val.at_start=False",
            "--config.env.groups=2", "--config.env.group_size=4", "--config.trainer.mini_batch_size=8",
            "--config.trainer.micro_batch_size=8"]
    proc = run_cli(*tiny, workdir=wd, mode="train")
    assert proc.returncode == 0, proc.stderr
    assert "Checkpoint after 1 RL steps" in proc.stdout and os.path.isdir(wd / "checkpoints" / "0")
    assert os.path.isfile(wd / "hf_export" / "model.safetensors")
    events = sorted(os.listdir(wd / "tb"))
    proc = run_cli(*tiny, workdir=wd)
    assert proc.returncode == 0, proc.stderr
    assert "Evaluated checkpoint step 0" in proc.stdout and "eval/step_0/rollouts.jsonl" in proc.stdout
    assert "after 1 RL steps" in proc.stdout  # checkpoint 0 is the state after the first step
    acc = EventAccumulator(str(wd / "eval" / "step_0" / "tb"))
    acc.Reload()
    assert [e.step for e in acc.Scalars("val/Bandit/success")] == [1]  # the RL steps it ran, as training logs them
    trained = EventAccumulator(str(wd / "tb"))
    trained.Reload()
    for name in ("success", "num_actions"):  # the same episodes and sampling keys as the run's last validation
        logged = [e.value for e in trained.Scalars(f"val/Bandit/{name}") if e.step == 1]
        assert logged == [acc.Scalars(f"val/Bandit/{name}")[0].value], name
    for name in ("config.json", "metrics.json", "rollouts.jsonl", "rollouts.pkl"):
        assert os.path.isfile(wd / "eval" / "step_0" / name)
    assert sorted(os.listdir(wd / "tb")) == events  # the training run's files are untouched
    proc = run_cli(*tiny, f"--checkpoint={wd / 'hf_export'}", workdir=tmp_path / "elsewhere")
    assert proc.returncode == 0, proc.stderr
    assert "Evaluated Hugging Face folder" in proc.stdout and "exported after 1 RL steps" in proc.stdout
    assert os.path.isfile(tmp_path / "elsewhere" / "eval" / "hf_export" / "rollouts.jsonl")
    # the export's weights and sampling keys are the checkpoint's: the same episodes (before: step 0's keys)
    scored = [json.load(open(folder / "metrics.json")) for folder in (wd / "eval" / "step_0",
                                                                       tmp_path / "elsewhere" / "eval" / "hf_export")]
    assert {k: v for k, v in scored[0].items() if k.startswith("val/")} == {
        k: v for k, v in scored[1].items() if k.startswith("val/")}
    proc = run_cli(*tiny, f"--checkpoint={tmp_path / 'nothing'}", workdir=wd)
    assert proc.returncode != 0 and proc.stderr.count("FATAL") == 1


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_the_resolved_config_records_the_workdir_given_on_the_command_line(tmp_path):
    """config.json and the TensorBoard hparams are written from the resolved config: its workdir is --workdir's."""
    wd = tmp_path / "elsewhere"
    proc = run_cli("--config=configs/sokoban.py:tiny", "--print_config", workdir=wd, mode="train")
    assert proc.returncode == 0, proc.stderr
    config = json.loads(proc.stdout[:proc.stdout.index("\n}\n") + 2])
    assert config["workdir"] == str(wd)


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_eval_banner_says_what_is_evaluated_and_eval_leaves_no_checkpoints_folder(tmp_path):
    """--mode=eval's banner names the weights, the episodes per validation and the outputs, and none of the
    training lines (steps, episodes per step); eval writes only under <workdir>/eval/ (no empty checkpoints/)."""
    wd = tmp_path / "run"
    proc = run_cli("--config=configs/bandit.py:tiny", "--config.val.groups=4", "--config.val.batch_size=4",
                   "--config.val.greedy=True", "--checkpoint=init", workdir=wd)
    assert proc.returncode == 0, proc.stderr
    banner = proc.stderr
    assert "evaluate    the freshly initialised model" in banner, banner
    assert "episodes    4 episodes of Bandit per validation (greedy)" in banner, banner
    assert f"outputs     {wd / 'eval' / 'init'}" in banner, banner
    assert "episodes per step" not in banner and "algorithm" not in banner, banner
    assert sorted(os.listdir(wd)) == ["eval"]


@pytest.mark.slow  # a warm-started LoRA run and two evaluations: ~1.5 minutes on 2 cores
def test_a_lora_runs_merged_export_and_final_checkpoint_reproduce_its_last_validation(tmp_path):
    """The export folds the adapters into the base weights; evaluating it (or the final checkpoint, adapters
    apart) plays the run's last validation episodes again, with the same figures."""
    from ragen_jax.models.hf_files import read_training_record
    from ragen_jax.config import validate_config
    from ragen_jax.trainer.evaluate import run_eval
    from ragen_jax.trainer import Trainer
    from test_trainer_resume import recipe

    def config():
        c = recipe(tmp_path / "run", 2)
        c.trainer.save_every, c.trainer.export_hf, c.val.every, c.warmstart.steps = 0, True, 2, 4
        c.model.lora.rank = 4
        return c

    trainer = Trainer(config())
    logged: dict[int, dict] = {}
    scalars = trainer.monitor.scalars
    trainer.monitor.scalars = lambda m, step: (logged.setdefault(step, {}).update(m), scalars(m, step))
    trainer.train()
    trainer.close()
    last = {k: v for k, v in logged[2].items() if k.startswith("val/")}
    export = tmp_path / "run" / "hf_export"
    with open(export / "config.json") as f:
        assert "lora" not in f.read().lower()  # a plain model transformers loads: the adapters are merged
    assert read_training_record(str(export))["rl_steps"] == 2
    for checkpoint in (None, str(export)):
        run = validate_config(config(), mode="eval")
        target = eval_target(str(tmp_path / "run"), checkpoint)
        if target.kind == "hf":  # the policy loads from the folder evaluated (run.py's eval does the same)
            run = run.replace(**{"model.path": target.path, "model.preset": ""})
        evaluator = Trainer(run, str(tmp_path / "run"), log_dir=os.path.join(target.out_dir, "tb"), mode="eval")
        with evaluator.activate_mesh():
            scored = run_eval(evaluator, target)
        evaluator.close()
        assert {k: scored[k] for k in last} == last, target.kind
        played = os.path.join(target.out_dir, "rollouts.jsonl")
        with open(tmp_path / "run" / "rollouts" / "val_step2.jsonl") as a, open(played) as b:
            assert a.read() == b.read(), target.kind  # the same episodes, token for token (figures alone barely move)
