"""DeepCoder: single-turn coding env; reward = fraction of the problem's tests the answer passes."""

from __future__ import annotations

import random
import threading
import weakref
from typing import Any

from envs.deepcoder.builtin import BUILTIN_PROBLEMS
from envs.deepcoder.grading import grade
from envs.deepcoder.problems import Problem, format_prompt, load_problems
from envs.deepcoder.sandbox import Sandbox, SandboxConfig
from envs.deepcoder.slots import max_concurrent_sandboxes, set_max_concurrent_sandboxes
from envs.protocols import HostEnv
from envs.ragen_keys import RagenKeys

# RAGEN's DeepCoder env_instruction (config/envs.yaml), verbatim.
INSTRUCTION = ("You are solving a coding task. Provide a complete Python function solution only. "
               "Format: <answer>...</answer>")


class _LiveRuns:
    """The test runs every live DeepCoder env may start in its next step (its problem's tests), summed."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: dict[int, int] = {}
        self.total = 0

    def set(self, env: object, runs: int) -> None:
        with self._lock:
            if id(env) not in self._runs:
                weakref.finalize(env, self._forget, id(env))
            self.total += runs - self._runs.get(id(env), 0)
            self._runs[id(env)] = runs

    def _forget(self, key: int) -> None:
        with self._lock:
            self.total -= self._runs.pop(key, 0)


_LIVE_RUNS = _LiveRuns()


_LOCAL_PROBLEMS = ("ragen-jax never downloads a dataset: dataset_path is a local JSON/JSONL/parquet file of the "
                   "problems (one split); without it the built-in problems are used")
# RAGEN's DeepCoderEnvConfig keys ragen-jax has no argument for (dataset_path and max_steps are ours too).
RAGEN_KEYS = RagenKeys(
    fixed={"render_mode": ("text", "the observation is RAGEN's text"),
           "invalid_action_score": (0.0, "an answer with no code scores 0, the fraction of tests passed")},
    unsupported={"cache_dir": _LOCAL_PROBLEMS, "split": _LOCAL_PROBLEMS})


class DeepCoderEnv(HostEnv):
    """Single turn by default (`max_steps=1`, as RAGEN). A failed attempt with turns left shows feedback.

    `dataset_path`: a DeepCoder JSON/JSONL/parquet file or folder; None -> the built-in problems.
    Seed s picks problem `random.Random(s).randint(0, n - 1)`, RAGEN's choice (it seeds `random` with s).
    `max_concurrency`: this episode's tests run at once. `max_concurrent_sandboxes`: if set, the
    process-wide bound on sandboxed runs alive at once, shared by every env of the batch (the last
    env created with it sets it; None keeps the current bound, see `slots.py`).
    """

    ragen_keys = RAGEN_KEYS  # RAGEN's env_config names in env.kwargs (envs.ragen_keys)

    def __init__(self, dataset_path: str | None = None, max_steps: int = 1, test_timeout_s: float = 3.0,
                 max_concurrency: int = 4, memory_bytes: int = 1 << 30, limit: int | None = None,
                 problems: list[Problem] | None = None, sandbox: Sandbox | None = None,
                 max_concurrent_sandboxes: int | None = None):
        if max_concurrent_sandboxes is not None:
            set_max_concurrent_sandboxes(max_concurrent_sandboxes)
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        self.problems = list(problems) if problems is not None else (
            load_problems(dataset_path, limit) if dataset_path else list(BUILTIN_PROBLEMS))
        if not self.problems:
            raise ValueError("DeepCoderEnv needs at least one problem")
        self.max_steps = max_steps
        self.sandbox = sandbox or Sandbox(SandboxConfig(cpu_time_s=test_timeout_s, wall_time_s=2 * test_timeout_s + 2,
                                                        memory_bytes=memory_bytes), max_concurrency=max_concurrency)
        self.most_tests = max(len(p.tests) for p in self.problems)
        _LIVE_RUNS.set(self, self.most_tests)  # until reset picks a problem
        self.problem: Problem | None = None
        self.prompt = ""
        self.num_steps = 0

    @property
    def step_timeout_s(self) -> float:
        """HostEnvBatch's safety net for one step: every run all live envs can queue for the process-wide
        slots, then this episode's own waves of runs; each run ends within its wall limit."""
        per_run = self.sandbox.config.wall_time_s + 1.0
        tests = len(self.problem.tests) if self.problem is not None else self.most_tests
        queued = -(-_LIVE_RUNS.total // max_concurrent_sandboxes())
        own = -(-tests // self.sandbox.max_concurrency)
        return max(60.0, (queued + own) * per_run + 10.0)

    def instruction(self) -> str:
        return INSTRUCTION

    def reset(self, seed: int) -> tuple[str, dict[str, Any]]:
        self.problem = self.problems[random.Random(int(seed)).randint(0, len(self.problems) - 1)]
        _LIVE_RUNS.set(self, len(self.problem.tests))
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
                "action_is_effective": result.success, "tests_passed": result.num_passed,  # RAGEN's: is_correct
                "num_tests": result.num_tests, "pass_rate": result.reward, "feedback": result.feedback()}
        if result.success:
            obs = "Correct! " + result.feedback()
        elif done:
            obs = "Incorrect. " + result.feedback()
        else:
            obs = f"{self.prompt}\n\nFeedback: {result.feedback()}"
        return obs, float(result.reward), bool(result.success), bool(done and not result.success), info
