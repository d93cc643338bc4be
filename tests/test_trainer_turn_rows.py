"""An episode trained as one row per turn (`single_turn` context) counts once in its group's GRPO statistics,
however many turns it played (RAGEN's episode-id deduplication)."""

import numpy as np
import pytest

from envs.protocols import HostEnv
from ragen_jax.trainer import Trainer
from test_trainer_faults import capture_update
from test_trainer_e2e import bandit_config


class PickUntilB(HostEnv):
    """Each "A" pays 1 and the episode goes on (at most 3 turns); a "B" pays 0 and ends it."""

    action_lookup = {"a": 0, "b": 1}
    action_names = ["A", "B"]

    def instruction(self) -> str:
        return "Pick A or B."

    def reset(self, seed):
        self.turn = 0
        return "Pick one.", {}

    def step(self, action):
        self.turn += 1
        done = action == "B" or self.turn >= 3
        return "picked", float(action == "A"), done, False, {"success": action == "A"}


ANSWERS = ["A", "B", "A", "B", "A", "A", "B", "B",  # turn 1 of the 8 episodes
           "A", "B", "A", "B",  # turn 2 of episodes 0, 2, 4, 5
           "B", "A"]  # turn 3 of episodes 0 and 4


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_grpo_counts_each_episode_once_over_its_turn_rows(tmp_path, monkeypatch):
    cfg = bandit_config(tmp_path, preset="grpo", adv_estimator="grpo", use_critic=False,
                        loss_agg_mode="seq-mean-token-mean", norm_adv_by_std_in_grpo=True)
    cfg.env.name = "test_trainer_turn_rows:PickUntilB"
    cfg.env.max_turn, cfg.env.max_actions_per_traj = 3, 3
    cfg.rollout.context_mode = "single_turn"
    cfg.rollout.engine = "lockstep"  # the scripted answers are read in the order responses are decoded
    cfg.trainer.mini_batch_size = 2
    cfg.trainer.save_every, cfg.val.every, cfg.diagnostics.every = 0, 0, 0
    trainer = Trainer(cfg)
    said = iter(ANSWERS)
    monkeypatch.setattr(trainer.engine.tokenizer, "decode", lambda ids: f"</think><answer>{next(said)}</answer>")
    seen = {}
    run = trainer.engine.run
    monkeypatch.setattr(trainer.engine, "run", lambda *a, **k: seen.setdefault("res", run(*a, **k)))
    capture_update(monkeypatch, seen)
    trainer.train_step(0)
    res, dev, valid = seen["res"], seen["dev"], seen["valid"]
    turns = [len(ep.history) for ep in res.episodes]
    assert turns == [3, 1, 2, 1, 3, 2, 1, 1]  # the scripted play: episodes of unequal length in each group
    scores = np.array([ep.total_reward for ep in res.episodes])
    groups = np.array([ep.group_id for ep in res.episodes])
    mean = np.array([scores[groups == g].mean() for g in groups])
    std = np.array([scores[groups == g].std(ddof=1) for g in groups])
    expected = (scores - mean) / (std + 1e-6)  # one score per episode, whatever its number of turn rows
    rows = np.nonzero(valid)[0]
    episode = np.asarray(dev["episode_ids"])[rows]
    assert len(rows) == sum(turns) and sorted(set(episode)) == list(range(8))
    adv, mask = np.asarray(dev["advantages"])[rows], np.asarray(dev["loss_mask"])[rows] > 0
    for r, ep in enumerate(episode):
        np.testing.assert_allclose(adv[r][mask[r]], expected[ep], rtol=1e-5, atol=1e-5)
