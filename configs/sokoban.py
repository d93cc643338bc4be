"""Sokoban (RAGEN's `_2_sokoban`): CoordSokoban, 8 groups x 16, PPO, Qwen2.5-3B-Instruct.

Variants: `:tiny` (built-in tiny model on CPU), `:grpo` / `:dapo` / `:drgrpo`, `:0.5b` / `:1.5b`,
`:filter` (RAGEN-2's recommended top_p 0.9 filter); combine with commas (`:tiny,grpo`).
"""

from configs.base import apply_tiny, apply_variants, get_base_config


def _filter(c):
    c.filter.strategy, c.filter.value, c.filter.include_zero = "top_p", 0.9, False


def _tiny(c):
    """The quickstart: warm-start from BFS-oracle play, then RL with the stabilisers that held up."""
    apply_tiny(c)
    c.env.name = "SimpleSokoban"
    c.warmstart.enabled = True
    c.warmstart.num_demos = 2000
    c.warmstart.steps = 1000
    c.warmstart.max_seconds = 240.0
    c.warmstart.batch_size = 32
    c.warmstart.micro_batch_size = 16
    c.warmstart.lr = 1e-3
    c.rollout.response_length = 24
    c.rollout.max_model_len = 512
    c.env.groups, c.env.group_size = 16, 8
    c.trainer.total_steps = 30
    c.trainer.mini_batch_size = 64
    c.trainer.micro_batch_size = 64
    c.trainer.epochs = 1
    c.algo.update(dict(preset="grpo", adv_estimator="grpo", use_critic=False, norm_adv_by_std_in_grpo=True,
                       loss_agg_mode="seq-mean-token-mean", use_kl_loss=True, kl_loss_coef=0.05,
                       kl_loss_type="low_var_kl", entropy_coeff=0.0))
    c.optim.actor.lr = 3e-5
    c.filter.value, c.filter.include_zero = 0.9, False
    c.val.groups = c.val.batch_size = 128
    c.val.every = 10


def get_config(arg: str | None = None):
    c = get_base_config()
    c.env.name = "CoordSokoban"
    c.workdir = "runs/sokoban"
    return apply_variants(c, arg, {"tiny": _tiny, "filter": _filter})
