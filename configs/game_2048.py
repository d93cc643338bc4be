"""2048 (RAGEN's `_9_2048`): game_2048, 4x4, one move a turn, 800 turns / 700 moves, response_length 256.

RAGEN plays until no move is left (success: a 2048 tile then), with a context window of 5 turns.
Variants: `:tiny` (tiny model on CPU: the episode ends solved at a 16 tile, 10 moves, warm start from the corner
heuristic, then GRPO), plus `:grpo` / `:0.5b` ... (see configs/base.py).
"""

import ml_collections

from configs.base import apply_quickstart_rl, apply_tiny, apply_variants, get_base_config

TINY_TARGET_TILE = 16  # the corner heuristic reaches it within 10 moves about half the time, random play 1 in 8


def _tiny(c):
    """Tiny model on CPU: a short game (a 16 tile within 10 moves, one a turn), a warm start on corner-heuristic play
    (its successful episodes), then GRPO + SNR filter."""
    apply_tiny(c)
    apply_quickstart_rl(c)
    c.env.kwargs.target_tile = TINY_TARGET_TILE
    c.env.max_turn, c.env.max_actions_per_turn, c.env.max_actions_per_traj = 10, 1, 10
    c.rollout.max_model_len = 512  # instruction + one board (~170 tiny-tokenizer tokens) + response
    c.warmstart.steps = 250
    c.warmstart.num_demos = 2000  # ~9 turns each: ~18k demo rows, more than 250 steps x 64 rows see


def get_config(arg: str | None = None):
    c = get_base_config()
    c.env.name = "game_2048"
    c.env.max_turn = 800
    c.env.max_actions_per_turn = 1
    c.env.max_actions_per_traj = 700
    c.env.kwargs = ml_collections.ConfigDict(dict(size=4, two_prob=0.9, use_log_reward=True, target_tile=0))
    c.rollout.response_length = 256
    c.rollout.max_model_len = 8192
    c.rollout.context_window = 5  # RAGEN's max_context_window (used by the non-full context modes)
    c.workdir = "runs/game_2048"
    return apply_variants(c, arg, {"tiny": _tiny})
