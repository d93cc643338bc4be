"""The 2x2 Rubik's cube (RAGEN's `rubikscube`): sticker permutations in JAX, RAGEN's text, a BFS solver."""

from envs.rubikscube.env import RubiksCube
from envs.rubikscube.oracle import solve

__all__ = ["RubiksCube", "solve"]

