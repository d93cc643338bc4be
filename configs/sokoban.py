"""Sokoban (RAGEN's `_2_sokoban`): CoordSokoban, 8 groups x 16, PPO, Qwen2.5-3B-Instruct.

Variants: `:tiny` (built-in tiny model on CPU), `:tiny_reasoning` (the same with input-dependent thinking in the
demonstrations, for the MI diagnostics), `:tiny_vision` (a tiny vision-language agent reading Sokoban as pictures), `:grpo` / `:dapo` / `:drgrpo`, `:0.5b` / `:1.5b`, `:filter` (RAGEN-2's
recommended top_p 0.9 filter), `:no_filter`; combine with commas (`:tiny,grpo`).
"""

from configs.base import apply_algo_preset, apply_quickstart_rl, apply_reasoning, apply_tiny, apply_variants, get_base_config, no_filter


def _filter(c):
    c.filter.strategy, c.filter.value, c.filter.include_zero = "top_p", 0.9, False


def _tiny(c):
    """The quickstart: compact prompt, warm start from BFS-oracle play, then GRPO + SNR filter + KL leash."""
    apply_tiny(c)
    c.env.name = "SimpleSokoban"
    apply_quickstart_rl(c)


def _tiny_reasoning(c):
    """The quickstart with input-dependent thinking in the demonstrations (for RAGEN-2's MI diagnostics)."""
    _tiny(c)
    apply_reasoning(c)


def _tiny_vision(c):
    """A tiny vision-language agent: the tiny LM with a small vision tower (`model.preset="tiny_vision"`) reads
    Sokoban as 28-pixel-tile pictures (one image token per tile), rolled out by the lockstep engine and trained
    with GRPO. No warm start and no MI diagnostics yet (neither reads pictures)."""
    apply_tiny(c)
    c.model.preset = "tiny_vision"
    c.env.name = "SimpleSokoban"
    c.env.kwargs = {"render_mode": "image"}
    c.rollout.engine = "lockstep"
    c.rollout.context_mode = "limited_multi_turn"
    c.rollout.context_window = 1
    c.env.groups, c.env.group_size = 4, 4
    c.trainer.mini_batch_size = 16
    c.val.groups = c.val.batch_size = 16
    c.diagnostics.every = 0
    apply_algo_preset(c, "grpo")


def get_config(arg: str | None = None):
    c = get_base_config()
    c.env.name = "CoordSokoban"
    c.workdir = "runs/sokoban"
    return apply_variants(c, arg, {"tiny": _tiny, "tiny_reasoning": _tiny_reasoning, "tiny_vision": _tiny_vision,
                                   "filter": _filter,
                                   "no_filter": no_filter})
