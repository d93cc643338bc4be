"""End to end: the tiny vision-language preset (`configs/sokoban.py:tiny_vision`) trains on Sokoban pictures: one
RL step with `model.freeze_vision` changes the language model and not the tower, and the export is a Qwen2.5-VL
folder."""

import json

import jax
import numpy as np
import pytest

from configs.sokoban import get_config
from ragen_jax.config import validate_config
from ragen_jax.trainer import Trainer


@pytest.mark.slow  # ~1-2 min on 2 shared cores
def test_tiny_vision_preset_trains_the_language_model_with_the_tower_frozen(tmp_path):
    c = get_config("tiny_vision")
    c.env.groups, c.env.group_size = 2, 2
    c.env.max_turn = 2
    c.trainer.total_steps, c.trainer.mini_batch_size, c.trainer.micro_batch_size = 1, 4, 2
    c.val.every, c.val.groups, c.val.batch_size = 0, 4, 4
    c.model.freeze_vision = True
    c.workdir = str(tmp_path)
    validate_config(c)
    trainer = Trainer(c)
    leaves = lambda tree: [np.array(x) for x in jax.tree.leaves(tree)]  # noqa: E731
    tower, lm = leaves(trainer.models.actor.frozen), leaves(trainer.models.actor.trainable)
    assert tower and all("visual" in str(p) for p, _ in jax.tree_util.tree_leaves_with_path(trainer.models.actor.frozen))
    trainer.train()
    assert all(np.array_equal(a, b) for a, b in zip(tower, leaves(trainer.models.actor.frozen)))
    assert any(not np.array_equal(a, b) for a, b in zip(lm, leaves(trainer.models.actor.trainable)))
    exported = json.load(open(tmp_path / "hf_export" / "config.json"))
    assert exported["model_type"] == "qwen2_5_vl"
