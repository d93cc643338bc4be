"""Sudoku (RAGEN's `_8_sudoku`): SimpleSudoku 9x9 (40% holes), 8 groups x 16, val 32 groups x 16.

RAGEN's budget (20 actions per trajectory, 5 turns x 2 actions) cannot finish a puzzle (32 holes);
`:finishable` gives enough turns and actions to place every hole. Variants: `:tiny` (tiny model on
CPU), `:medium` (MediumSudoku, 30 actions), `:finishable`, plus `:grpo` / `:0.5b` ... Combine with
commas; `:finishable` is applied last, so it sizes the budget for the chosen difficulty.
"""

import math

import ml_collections

from configs.base import apply_tiny, apply_variants, get_base_config
from envs.registry import get_spec
from envs.sudoku.generator import cells_to_remove

FINISH_ACTIONS_PER_TURN = 4
FINISH_SLACK = 2.0  # turns allow this many times the placements needed (room for invalid moves)


def _tiny(c):
    apply_tiny(c)
    c.val.groups, c.val.group_size, c.val.batch_size = 8, 4, 32
    c.rollout.max_model_len = 2048  # a with_feedback board is ~800 tiny-tokenizer tokens


def _medium(c):
    c.env.name = "MediumSudoku"
    c.env.max_actions_per_traj = 30


def _finishable(c):
    """Enough actions to fill every hole: 81-action budget, 4 per turn, turns for 2x the holes."""
    difficulty = get_spec(c.env.name).kwargs.get("difficulty", "easy")
    holes = cells_to_remove(difficulty)
    c.env.kwargs.max_steps = max(c.env.kwargs.max_steps, 81)
    c.env.max_actions_per_traj = c.env.kwargs.max_steps
    c.env.max_actions_per_turn = FINISH_ACTIONS_PER_TURN
    c.env.max_turn = math.ceil(FINISH_SLACK * holes / FINISH_ACTIONS_PER_TURN)
    if c.rollout.context_mode == "full":  # full history of ~20 boards: oldest turns drop past this
        c.rollout.max_model_len = max(c.rollout.max_model_len, 8192)


def get_config(arg: str | None = None):
    c = get_base_config()
    c.env.name = "SimpleSudoku"
    c.env.max_actions_per_traj = 20
    c.env.kwargs = ml_collections.ConfigDict(dict(
        max_steps=81, render_format="with_feedback", show_conflicts=True, show_valid_numbers=True))
    c.val.groups, c.val.group_size = 32, 16
    c.workdir = "runs/sudoku"
    names = [n.strip().lower() for n in (arg or "").split(",") if n.strip()]
    rest = [n for n in names if n != "finishable"] + (["finishable"] if "finishable" in names else [])
    return apply_variants(c, ",".join(rest), {"tiny": _tiny, "medium": _medium, "finishable": _finishable})
