"""ALFWorld (RAGEN's `Alfworld` env): household tasks in ALFWorld's text commands, 50 actions per trajectory.

Generated household games by default (the optional `pip install "textworld[pddl]==1.7.0"` plays them);
`--config.env.kwargs.data_dir=DIR` plays the real ALFWorld games under DIR ($ALFWORLD_DATA, as `alfworld-download`
writes it), validating on valid_seen (`:ood`: valid_unseen). Variants: `:tiny` (tiny model on CPU, pick-and-place
games only), `:ood`, `:grpo` / `:0.5b` ...
"""

import ml_collections
from ml_collections import config_dict

from configs.base import apply_tiny, apply_variants, get_base_config


def _tiny(c):
    apply_tiny(c)
    c.env.groups, c.env.group_size = 4, 4  # each new game is translated by Fast Downward at reset, the costly part
    c.val.groups = c.val.batch_size = 16
    c.env.kwargs.task_types = [1]
    c.rollout.max_model_len = 2048


def _ood(c):
    c.val.name = "AlfworldOOD"


def get_config(arg: str | None = None):
    c = get_base_config()
    c.env.name = "Alfworld"
    c.env.max_actions_per_traj = 50
    c.env.kwargs = ml_collections.ConfigDict(dict(
        data_dir=config_dict.placeholder(str), split="train", task_types=[1, 2, 3, 4, 5, 6], max_steps=50,
        score=10.0))
    c.val.env_kwargs = ml_collections.ConfigDict(dict(split="val"))  # RAGEN validates in mode "val": eval_dataset
    c.workdir = "runs/alfworld"
    return apply_variants(c, arg, {"tiny": _tiny, "ood": _ood})
