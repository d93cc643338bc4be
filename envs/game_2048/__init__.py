"""2048 (RAGEN's `game_2048`): slide-and-merge rules in JAX, RAGEN's rewards and text, a corner heuristic."""

from envs.game_2048.env import Game2048
from envs.game_2048.oracle import corner_move

__all__ = ["Game2048", "corner_move"]
