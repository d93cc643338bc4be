"""Countdown: reach a target number with arithmetic on given numbers (RAGEN's Countdown env)."""

from envs.countdown.env import INSTRUCTION, CountdownEnv
from envs.countdown.expression import evaluate, score_answer
from envs.countdown.generator import CountdownTask, generate_task
from envs.countdown.solver import has_signed_sum_solution, solve

__all__ = ["INSTRUCTION", "CountdownEnv", "CountdownTask", "evaluate", "generate_task",
           "has_signed_sum_solution", "score_answer", "solve"]
