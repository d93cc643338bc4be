"""DeepCoder: single-turn coding env; reward = fraction of the problem's tests the answer passes."""

from __future__ import annotations

import random
from typing import Any

from envs.deepcoder.builtin import BUILTIN_PROBLEMS
from envs.deepcoder.grading import grade
from envs.deepcoder.problems import Problem, format_prompt, load_problems
from envs.deepcoder.sandbox import Sandbox, SandboxConfig
from envs.protocols import HostEnv

INSTRUCTION = ("You are a competitive programmer. Solve the coding problem in Python 3. Give the complete "
               "program inside your answer as one fenced ```python code block.")


class DeepCoderEnv(HostEnv):
    """Single turn by default (`max_steps=1`, as RAGEN). A failed attempt with turns left shows feedback.

    `dataset_path`: a DeepCoder JSON/JSONL/parquet file or folder; None -> the built-in problems.
    Seeds pick problems deterministically (`seed % num_problems` after a seeded shuffle).
    """

    def __init__(self, dataset_path: str | None = None, max_steps: int = 1, test_timeout_s: float = 3.0,
                 max_concurrency: int = 4, memory_bytes: int = 1 << 30, limit: int | None = None,
                 problems: list[Problem] | None = None, sandbox: Sandbox | None = None):
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        self.problems = list(problems) if problems is not None else (
            load_problems(dataset_path, limit) if dataset_path else list(BUILTIN_PROBLEMS))
        if not self.problems:
            raise ValueError("DeepCoderEnv needs at least one problem")
        self.max_steps = max_steps
        self.sandbox = sandbox or Sandbox(SandboxConfig(cpu_time_s=test_timeout_s, wall_time_s=2 * test_timeout_s + 2,
                                                        memory_bytes=memory_bytes), max_concurrency=max_concurrency)
        most_tests = max(len(p.tests) for p in self.problems)
        waves = -(-most_tests // self.sandbox.max_concurrency)
        self.step_timeout_s = max(60.0, waves * (self.sandbox.config.wall_time_s + 1.0) + 10.0)
        self._order = list(range(len(self.problems)))
        random.Random(0).shuffle(self._order)
        self.problem: Problem | None = None
        self.prompt = ""
        self.num_steps = 0

    def instruction(self) -> str:
        return INSTRUCTION

    def reset(self, seed: int) -> tuple[str, dict[str, Any]]:
        self.problem = self.problems[self._order[seed % len(self.problems)]]
        self.prompt = format_prompt(self.problem)
        self.num_steps = 0
        return self.prompt, {"problem_id": self.problem.problem_id, "num_tests": len(self.problem.tests)}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.problem is None:
            raise RuntimeError("call reset(seed) before step()")
        result = grade(self.sandbox, self.problem, action)
        self.num_steps += 1
        out_of_steps = self.num_steps >= self.max_steps
        done = result.success or out_of_steps
        info = {"success": result.success, "action_is_valid": result.code_found,
                "action_is_effective": result.code_found, "tests_passed": result.num_passed,
                "num_tests": result.num_tests, "pass_rate": result.reward, "feedback": result.feedback()}
        if result.success:
            obs = "Correct! " + result.feedback()
        elif done:
            obs = "Incorrect. " + result.feedback()
        else:
            obs = f"{self.prompt}\n\nFeedback: {result.feedback()}"
        return obs, float(result.reward), bool(result.success), bool(done and not result.success), info
