"""Bandit (RAGEN's `_1_bandit`): two named arms, one turn, one action, response_length 500.

Validation plays Bandit (the training arm names) and BanditTest (unseen names), 256 groups each, as RAGEN's
`_1_bandit` (`val/Bandit/*` and `val/BanditTest/*`; the run's history follows Bandit).
Variants: `:tiny` (tiny model on CPU; validates on Bandit only), `:test` (BanditTest only), plus `:grpo` /
`:0.5b` ... (see configs/base.py).
"""

from configs.base import apply_tiny, apply_variants, get_base_config


BOTH = "Bandit,BanditTest"  # RAGEN's es_manager.val tags, n_groups [256, 256]


def _tiny(c):
    """Tiny model on CPU: a format-only warm start (random arms), then PPO must find the high arm from rewards.

    Success = chose the high-reward arm, validated at temperature 1 (the policy's own probability)."""
    apply_tiny(c)
    c.env.groups, c.env.group_size = 8, 8
    c.rollout.response_length, c.rollout.max_model_len = 16, 384
    c.rollout.context_mode = "full"
    c.warmstart.enabled, c.warmstart.source = True, "random"
    c.warmstart.num_demos, c.warmstart.steps, c.warmstart.batch_size, c.warmstart.lr = 512, 150, 64, 1e-3
    c.trainer.total_steps, c.trainer.epochs = 25, 2
    c.trainer.mini_batch_size = c.trainer.micro_batch_size = 32
    c.val.groups = c.val.batch_size = 128
    c.val.temperature, c.val.every = 1.0, 5
    if c.val.name == BOTH:
        c.val.name = "Bandit"


def _test(c):
    c.val.name = "BanditTest"


def get_config(arg: str | None = None):
    c = get_base_config()
    c.env.name = "Bandit"
    c.env.max_turn = 1
    c.env.max_actions_per_turn = 1
    c.env.max_actions_per_traj = 1
    c.rollout.response_length = 500
    c.val.name, c.val.groups = BOTH, 256
    c.workdir = "runs/bandit"
    return apply_variants(c, arg, {"tiny": _tiny, "test": _test})
