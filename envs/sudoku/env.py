"""Sudoku as a multi-step host env: place one number per action, with feedback after each.

Rewards (the original's): +1 a placement matching the solution, +0.5 a rule-valid placement that
differs from it, -0.1 an invalid action (unparsable, a given cell, a rule conflict; the episode
continues), +10 more on the placement that solves the puzzle.

Finishing needs one action per hole: 32 (easy) / 40 (medium). RAGEN's defaults allow only 20 /
30 actions per trajectory (`max_actions_per_traj`), so with them no puzzle can be finished; give
the rollout at least `min_actions_to_finish` actions (and `max_steps` here at least as many,
or None for no env-side cap) to make solving possible.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from envs.protocols import HostEnv
from envs.ragen_keys import RagenKeys
from envs.sudoku.actions import Placement, parse_action
from envs.sudoku.board import conflict_units, is_solved, valid_numbers
from envs.sudoku.generator import REMOVAL_FRACTION, cells_to_remove, generate_puzzle
from envs.sudoku.render import RENDER_FORMATS, render_state

INSTRUCTION = (
    "You are solving a Sudoku puzzle. Fill in the grid so that every row, column, and 3x3 box "
    "contains the numbers 1-9 without repetition.\n"
    "Initial cells are shown in [brackets] and cannot be modified. Empty cells are shown as dots (.).\n"
    "Place numbers one at a time using the format: <answer>place 5 at row 2 col 3</answer> or "
    "<answer>2,3,5</answer>\n"
    "The environment will provide feedback on valid/invalid moves and show conflicts if any occur.\n"
)


# RAGEN's SudokuEnvConfig keys ragen-jax has no argument for (its other keys are ours too).
RAGEN_KEYS = RagenKeys(fixed={
    "render_mode": ("text", "the observation is RAGEN's text"),
    "show_candidates": (False, "RAGEN defines it but never renders candidates; show_valid_numbers shows the valid "
                               "numbers of the empty cells")})


class SudokuEnv(HostEnv):
    """RAGEN's Sudoku env (`difficulty` easy 40% / medium 50% / hard 60% of cells removed)."""

    ragen_keys = RAGEN_KEYS  # RAGEN's env_config names in env.kwargs (envs.ragen_keys)

    def __init__(self, difficulty: str = "easy", grid_size: int = 9, max_steps: int | None = 81,
                 render_format: str = "with_feedback", show_conflicts: bool = True,
                 show_valid_numbers: bool = True, correct_placement_score: float = 1.0,
                 valid_placement_score: float = 0.5, invalid_action_score: float = -0.1,
                 completion_bonus: float = 10.0) -> None:
        if difficulty not in REMOVAL_FRACTION:
            raise ValueError(f"difficulty must be one of {sorted(REMOVAL_FRACTION)}, got {difficulty!r}.")
        if render_format not in RENDER_FORMATS:
            raise ValueError(f"render_format must be one of {RENDER_FORMATS}, got {render_format!r}.")
        if max_steps is not None and max_steps < 1:
            raise ValueError(f"max_steps must be >= 1 or None (no cap), got {max_steps}.")
        self.difficulty = difficulty
        self.grid_size = grid_size
        self.max_steps = max_steps
        self.render_format = render_format
        self.show_conflicts = show_conflicts
        self.show_valid_numbers = show_valid_numbers
        self.correct_placement_score = correct_placement_score
        self.valid_placement_score = valid_placement_score
        self.invalid_action_score = invalid_action_score
        self.completion_bonus = completion_bonus
        self.min_actions_to_finish = cells_to_remove(difficulty, grid_size)
        self.initial: np.ndarray | None = None
        self.solution: np.ndarray | None = None
        self.grid: np.ndarray | None = None
        self.num_steps = 0
        self.feedback = ""

    def instruction(self) -> str:
        return INSTRUCTION

    def render(self) -> str:
        return render_state(self.grid, self.initial, self.render_format, self.feedback,
                            self.num_steps, self.max_steps, self.show_conflicts,
                            self.show_valid_numbers)

    def reset(self, seed: int) -> tuple[str, dict[str, Any]]:
        self.initial, self.solution = generate_puzzle(int(seed), self.difficulty, self.grid_size)
        self.grid = self.initial.copy()
        self.num_steps = 0
        self.feedback = ""
        return self.render(), {"cells_remaining": int(np.count_nonzero(self.grid == 0))}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.grid is None:
            raise RuntimeError("SudokuEnv.step called before reset(seed).")
        self.num_steps += 1
        parsed = parse_action(action if isinstance(action, str) else str(action), self.grid_size)
        if isinstance(parsed, Placement):
            reward, info = self._place(parsed)
        else:
            self.feedback = f"❌ Invalid action format: {parsed}"
            reward, info = self.invalid_action_score, self._invalid_info(parsed)
        terminated = bool(info["success"])
        truncated = not terminated and self.max_steps is not None and self.num_steps >= self.max_steps
        return self.render(), float(reward), terminated, truncated, info

    def _place(self, p: Placement) -> tuple[float, dict[str, Any]]:
        r, c, num = p.row, p.col, p.num
        if self.initial[r, c] != 0:
            self.feedback = f"❌ Cannot modify initial cell at ({r + 1},{c + 1})"
            return self.invalid_action_score, self._invalid_info("Cannot modify initial cells")
        units = conflict_units(self.grid, r, c, num)
        if units:
            where = ", ".join(units)
            valid = valid_numbers(self.grid, r, c)
            self.feedback = f"❌ Invalid placement: {num} conflicts with {where}"
            if valid:
                self.feedback += f"\n   Valid numbers for ({r + 1},{c + 1}): {valid}"
            info = self._invalid_info(f"Number {num} conflicts with {where}")
            info["valid_numbers"] = valid
            return self.invalid_action_score, info
        self.grid[r, c] = num
        correct = bool(num == self.solution[r, c])
        if correct:
            self.feedback = f"✓ Correct! Placed {num} at ({r + 1},{c + 1})"
            reward = self.correct_placement_score
        else:
            self.feedback = f"⚠ Placed {num} at ({r + 1},{c + 1}) - Valid but not optimal"
            reward = self.valid_placement_score
        solved = is_solved(self.grid)
        if solved:
            self.feedback += "\n🎉 Congratulations! Puzzle solved!"
            reward += self.completion_bonus
        info = {"action_is_effective": True, "action_is_valid": True, "success": solved,
                "correct_placement": correct,
                "cells_filled": int(np.count_nonzero(self.grid)),
                "cells_remaining": int(np.count_nonzero(self.grid == 0))}
        if self.max_steps is not None:
            info["steps_remaining"] = self.max_steps - self.num_steps
        return reward, info

    @staticmethod
    def _invalid_info(error: str) -> dict[str, Any]:
        return {"action_is_effective": False, "action_is_valid": False, "success": False,
                "error": error}
