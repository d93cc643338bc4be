"""Bandit (RAGEN's `_1_bandit`): two named arms, one turn, one action, response_length 500.

RAGEN validates on Bandit and BanditTest (256 groups each) in one run; here one run validates on
one variant: `val.name` "" (= Bandit, the training arm names) or `:test` (BanditTest's unseen names).
Variants: `:tiny` (tiny model on CPU), `:test`, plus `:grpo` / `:0.5b` ... (see configs/base.py).
"""

from configs.base import apply_tiny, apply_variants, get_base_config


def _tiny(c):
    apply_tiny(c)
    c.val.groups = c.val.batch_size = 32


def _test(c):
    c.val.name = "BanditTest"


def get_config(arg: str | None = None):
    c = get_base_config()
    c.env.name = "Bandit"
    c.env.max_turn = 1
    c.env.max_actions_per_turn = 1
    c.env.max_actions_per_traj = 1
    c.rollout.response_length = 500
    c.workdir = "runs/bandit"
    return apply_variants(c, arg, {"tiny": _tiny, "test": _test})
