"""Bandit: two named arms, low 0.1 vs high 1.0 w.p. 0.25, single turn."""

from envs.bandit.env import ARM_PAIRS, Bandit

__all__ = ["ARM_PAIRS", "Bandit"]
