"""FrozenLake: random solvable maps (jitted or RAGEN-seeded), slippery moves, BFS oracle."""

from envs.frozenlake.env import FrozenLake, oracle_actions
from envs.frozenlake.oracle import solve

__all__ = ["FrozenLake", "oracle_actions", "solve"]
