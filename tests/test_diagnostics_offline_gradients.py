"""The offline gradient analysis of a PKL of one training step's rollouts under the checkpoint that sampled them
gives the split of the very batch the trainer builds for its update (critic values, KL reference, advantages),
with the training batch the PKL keeps and with rows rebuilt from the episodes alone (an evaluation's PKL); the
CLI prints, writes, draws and tabulates it (slow: a tiny Trainer, one step)."""

import csv
import json
import pickle
import types

import jax
import pytest
from test_diagnostics_offline import WORDS, _tiny_bandit_config
from test_rollout_engine import ScriptedSampler

from envs.bandit import ARM_PAIRS
from ragen_jax.algos.settings import AlgoSettings
from ragen_jax.diagnostics.__main__ import main
from ragen_jax.diagnostics.offline_gradients import offline_gradient_split
from ragen_jax.rollout.dump import dump_kwargs, write_jsonl, write_pkl
from ragen_jax.trainer import stages
from ragen_jax.trainer.gradient_split import split_training_batch

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def step(tmp_path_factory):
    """RL step 1 of the tiny model on Bandit (PPO with a critic and a KL loss, scripted replies with reward
    variance in 3 of 4 groups): its rollout as a PKL, the checkpoint that sampled it, and the split of the batch
    the trainer would update on, computed where the trainer would compute it."""
    from ragen_jax.trainer import Trainer

    cfg = _tiny_bandit_config()
    cfg.algo.update(use_kl_loss=True, kl_loss_coef=0.1, entropy_coeff=0.01)
    cfg.diagnostics.every = 0
    run = tmp_path_factory.mktemp("run")
    trainer = Trainer(cfg, str(run))
    real = trainer.engine.sampler
    seeds, gids = stages.step_seeds(trainer.run.env, 1)
    trainer.engine.sampler = ScriptedSampler(real, trainer.tokenizer, [["</think><answer>x</answer>"] * 8])
    probe = trainer.engine.run(trainer.models.sampling_params(), trainer.train_env, seeds, gids,
                               jax.random.PRNGKey(0), tag=trainer.tag)
    pairs = [next(p for p in ARM_PAIRS["train"] if all(n in ep.history[0].state for n in p)) for ep in probe.episodes]
    # each group's first episode pulls the safe arm (0.1), the second the risky one (1 or 0); the last group fails
    # its format twice (-0.1 each: no reward variance)
    replies = [f"{WORDS[b]}</think><answer>{pairs[b][b % 2] if b < 6 else 'x'}</answer>" for b in range(8)]
    trainer.engine.sampler = ScriptedSampler(real, trainer.tokenizer, [replies])
    seen = {}
    collect, update = stages.collect, stages.update

    def split_then_skip(models, fns, batch, step_, trainer_cfg, lrs):  # in place of the update stage
        seen["split"] = split_training_batch(models, batch, seen["collected"].episodes, AlgoSettings.of(trainer.run),
                                             mini_batch_size=trainer_cfg.mini_batch_size,
                                             micro_batch_size=trainer_cfg.micro_batch_size, num_buckets=2)
        return stages.Updated([], {}, False, False, 0.0)

    stages.collect = lambda *a, **k: seen.setdefault("collected", collect(*a, **k))
    stages.update = split_then_skip
    (run / "config.json").write_text(cfg.to_json_best_effort(indent=2))
    try:
        trainer.save(0)
        trainer.train_step(1)
    finally:
        stages.collect, stages.update = collect, update
    result = seen["collected"].result
    pkl = write_pkl(str(run / "rollouts" / "train.pkl"), result)
    rebuilt = run / "rollouts" / "episodes_only.pkl"
    with open(rebuilt, "wb") as f:
        pickle.dump({"episodes": result.episodes, "batch": None}, f)
    jsonl = write_jsonl(str(run / "rollouts" / "train.jsonl"), result.episodes, **dump_kwargs(trainer.rollout))
    return types.SimpleNamespace(cfg=cfg, run=run, pkl=pkl, rebuilt=str(rebuilt), jsonl=jsonl, split=seen["split"],
                                 rewards=[ep.total_reward for ep in result.episodes])


def test_offline_split_is_the_split_of_the_trainers_update_batch(step):
    assert len(set(step.rewards)) > 1  # groups with reward variance
    offline, buckets = offline_gradient_split(step.pkl, str(step.run), checkpoint_step=0, num_buckets=2)
    assert set(offline) == set(step.split)
    assert offline == pytest.approx(step.split, rel=1e-4, abs=1e-6)
    assert offline["actor/grad_norm/kl"] > 0 and offline["grad_norm/bucket_2/reward_std_mean"] > 0
    assert [b.group_ids.size for b in buckets.values()] == [4, 2, 2]
    # rows rebuilt from the episodes (no sampler log-probs: no rollout correction here, so the same split)
    from_episodes, _ = offline_gradient_split(step.rebuilt, str(step.run), checkpoint_step=0, num_buckets=2)
    assert from_episodes == pytest.approx(step.split, rel=1e-4, abs=1e-6)


def test_cli_prints_writes_draws_and_tabulates_the_split(step, tmp_path, capsys):
    out, png, table = tmp_path / "g.json", tmp_path / "g.png", tmp_path / "rv.csv"
    assert main([step.pkl, "--checkpoint", str(step.run), "--analysis", "gradients", "--checkpoint-step", "0",
                 "--buckets", "2", "--out", str(out), "--plot", str(png), "--rv-table", str(table)]) == 0
    text = capsys.readouterr().out
    assert "[grad_norm] gradient norm by part and reward-variance bucket" in text and "bucket_2" in text
    assert json.loads(out.read_text()) == pytest.approx(step.split, rel=1e-4, abs=1e-6)
    rows = list(csv.DictReader(table.open()))
    assert [r["bucket"] for r in rows].count("all") == 4 and {r["bucket"] for r in rows} == {"all", "bucket_1",
                                                                                             "bucket_2"}
    assert png.stat().st_size > 5000
    assert main([step.jsonl, "--checkpoint", str(step.run), "--analysis", "gradients"]) == 2
    assert "needs played episodes" in capsys.readouterr().err
