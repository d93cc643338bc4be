"""2x2 Rubik's cube (RAGEN's `_10_rubikscube`): rubikscube, scramble depth 1, 20 moves; 25 turns x 4 moves,
response_length 500, a context window of 5 turns.

Variants: `:tiny` (tiny model on CPU: depth-2 scrambles, 3 turns x 2 moves, a warm start from the BFS solver, then
GRPO), plus `:grpo` / `:0.5b` ... (see configs/base.py).
"""

import ml_collections

from configs.base import apply_quickstart_rl, apply_tiny, apply_variants, get_base_config


def _tiny(c):
    """Tiny model on CPU: depth-2 scrambles solved in up to 3 turns of 2 moves, a warm start from BFS-solver play,
    then GRPO + SNR filter."""
    apply_tiny(c)
    apply_quickstart_rl(c)
    c.env.kwargs.scramble_depth = 2
    c.env.max_turn, c.env.max_actions_per_turn, c.env.max_actions_per_traj = 3, 2, 6
    c.rollout.max_model_len = 512  # instruction + one cube (~150 tiny-tokenizer tokens) + response
    c.warmstart.steps = 250


def get_config(arg: str | None = None):
    c = get_base_config()
    c.env.name = "rubikscube"
    c.env.max_turn = 25
    c.env.max_actions_per_turn = 4
    c.env.max_actions_per_traj = 20
    c.env.kwargs = ml_collections.ConfigDict(dict(scramble_depth=1, max_steps=20))
    c.rollout.response_length = 500
    c.rollout.context_window = 5  # RAGEN's max_context_window (used by the non-full context modes)
    c.workdir = "runs/rubikscube"
    return apply_variants(c, arg, {"tiny": _tiny})
