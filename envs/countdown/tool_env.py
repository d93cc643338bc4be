"""Countdown with tools (`rollout.action_format="tool_call"`): a calculator to check arithmetic, then an answer tool.

`calculate(expression)` returns the exact value of an arithmetic expression (no reward, the episode goes on);
`submit(expression)` scores the equation with Countdown's rules (1 if it reaches the target using each number once,
0.1 if it uses them but misses, else 0) and ends the episode. The tasks are CountdownEnv's (generated from the seed,
or rows of `data_path`). `scripted_action` is a solver's play for warm-start demos: check the solution, then submit.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from envs.countdown.env import CountdownEnv
from envs.countdown.expression import evaluate, score_answer
from envs.countdown.solver import solve
from envs.protocols import ToolEnv
from ragen_jax.tool_calls import ToolCall

INSTRUCTION = (
    "You are solving the Countdown puzzle: combine the numbers of the list with + - * / and brackets, each number "
    "exactly once, into an expression equal to the target. Use the calculate tool to check arithmetic, then give "
    "your expression to the submit tool (it ends the puzzle).")

_EXPRESSION = {"type": "object", "properties": {"expression": {"type": "string", "description": "e.g. (3 + 5) - 2"}},
               "required": ["expression"], "additionalProperties": False}
TOOLS = [
    {"type": "function", "function": {"name": "calculate", "description": "The exact value of an arithmetic "
                                      "expression of numbers, + - * / and brackets.", "parameters": _EXPRESSION}},
    {"type": "function", "function": {"name": "submit", "description": "Submit the final expression; it must use "
                                      "each listed number exactly once. Ends the puzzle.", "parameters": _EXPRESSION}},
]


def _shown(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"


class ToolCountdownEnv(ToolEnv):
    """Countdown played through a calculator tool and a submit tool (kwargs as CountdownEnv's)."""

    def __init__(self, data_path: str | None = None, max_instances: int | None = 20000,
                 solvable_ops: str | None = "+-", score: float = 1.0, format_score: float = 0.1,
                 min_count: int = 3, max_count: int = 4, min_num: int = 1, max_num: int = 99,
                 max_target: int = 100) -> None:
        self.tasks = CountdownEnv(data_path, max_instances, solvable_ops, score, format_score, min_count, max_count,
                                  min_num, max_num, max_target)
        self.solvable_ops = solvable_ops or "+-*/"
        self.task = None
        self.checked = False  # the calculator ran this episode (the scripted policy then submits)

    def instruction(self) -> str:
        return INSTRUCTION

    def tools(self) -> list[dict[str, Any]]:
        return TOOLS

    def reset(self, seed: int) -> tuple[str, dict[str, Any]]:
        self.task = self.tasks.task_for_seed(seed)
        self.checked = False
        return self.task.render(), {"target": self.task.target, "nums": list(self.task.nums)}

    def call(self, name: str, arguments: dict[str, Any]) -> tuple[str, float, bool, dict[str, Any]]:
        if self.task is None:
            raise RuntimeError("ToolCountdownEnv.call before reset(seed).")
        expression = str(arguments.get("expression", ""))
        if name == "calculate":
            value = evaluate(expression)
            if value is None:
                return (f"Error: {expression!r} is not arithmetic of numbers, + - * / and brackets.", 0.0, False,
                        {"action_is_valid": False, "action_is_effective": False, "success": False})
            self.checked = True
            return f"{expression} = {_shown(value)}", 0.0, False, {"action_is_valid": True,
                                                                    "action_is_effective": True, "success": False}
        if name == "submit":
            reward = score_answer(expression, self.task.target, self.task.nums, self.tasks.score,
                                  self.tasks.format_score)
            success = reward == self.tasks.score
            return (f"Submitted {expression}: {reward:g} points.", reward, True,
                    {"action_is_valid": True, "action_is_effective": reward > 0, "success": success})
        raise ValueError(f"ToolCountdownEnv has no tool {name!r}")  # the rollout checks names before calling

    def scripted_action(self) -> ToolCall | None:
        """A solver's play: calculate the solution once, then submit it; None when the task has no solution."""
        if self.task is None:
            return None
        solution = solve(self.task.nums, self.task.target, self.solvable_ops)
        if solution is None:
            return None
        name = "submit" if self.checked else "calculate"
        return ToolCall(name, {"expression": solution})
