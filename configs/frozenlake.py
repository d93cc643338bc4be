"""FrozenLake (RAGEN's `_3_frozen_lake`): CoordFrozenLake, 4x4, frozen p 0.9, deterministic moves.

8 groups x 16, PPO, 5 turns x 2 actions, 10 actions per trajectory (RAGEN's base settings).
Variants: `:tiny` (tiny model on CPU, plain grid FrozenLake), `:tiny_reasoning` (with input-dependent thinking
in the demonstrations), `:slippery` (success_rate 0.8, the env table's default), `:filter` (top_p 0.9),
`:no_filter`, plus `:grpo` / `:0.5b` ... (see configs/base.py).
"""

import ml_collections

from configs.base import apply_quickstart_rl, apply_reasoning, apply_tiny, apply_variants, get_base_config, no_filter


def _tiny(c):
    """Tiny model on CPU: compact prompt, a short warm start from BFS-oracle play, then GRPO + SNR filter."""
    apply_tiny(c)
    c.env.name = "FrozenLake"
    apply_quickstart_rl(c)
    c.warmstart.steps = 250


def _tiny_reasoning(c):
    """The tiny preset with input-dependent thinking in the demonstrations (for RAGEN-2's MI diagnostics)."""
    _tiny(c)
    apply_reasoning(c)


def _slippery(c):
    c.env.kwargs.success_rate = 0.8


def _filter(c):
    c.filter.strategy, c.filter.value, c.filter.include_zero = "top_p", 0.9, False


def get_config(arg: str | None = None):
    c = get_base_config()
    c.env.name = "CoordFrozenLake"
    c.env.kwargs = ml_collections.ConfigDict(dict(size=4, p=0.9, success_rate=1.0))
    c.workdir = "runs/frozenlake"
    return apply_variants(c, arg, {"tiny": _tiny, "tiny_reasoning": _tiny_reasoning, "slippery": _slippery,
                                   "filter": _filter, "no_filter": no_filter})
