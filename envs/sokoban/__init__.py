"""Sokoban: RAGEN's generator on the host, rules and rendering in JAX, a BFS oracle."""

from envs.sokoban.env import Sokoban, oracle_actions
from envs.sokoban.oracle import solve

__all__ = ["Sokoban", "oracle_actions", "solve"]
