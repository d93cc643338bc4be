"""Countdown as a single-step host env: build an expression from the numbers that hits the target.

Observation "Target: 4, nums: [3, 5, 2]"; the answer is one expression; reward 1 if it is
correct, 0.1 if it uses the numbers exactly once each but is wrong, else 0 (RAGEN's rules).
Tasks come from a local data file (`data_path`) or, with none, from the seeded generator.
"""

from __future__ import annotations

from typing import Any

from envs.countdown.data import load_tasks
from envs.countdown.expression import score_answer
from envs.countdown.generator import CountdownTask, generate_task
from envs.protocols import HostEnv
from envs.ragen_keys import RagenKeys

INSTRUCTION = (
    "You are solving the Countdown puzzle. You should use the num list to create an equation that "
    "equals the target. Example answer format: <think> To find an equation using [3, 5, 2] to get "
    "4. Let's check 2 + 5 = 7, 7 - 3 = 4. So the answer is 2 + 5 - 3 = 4. </think>"
    "<answer>2 + 5 - 3</answer>"
)


# RAGEN's CountdownEnvConfig names -> ours.
RAGEN_KEYS = RagenKeys(renames={"train_path": "data_path"},
                       fixed={"render_mode": ("text", "the observation is RAGEN's text")})


class CountdownEnv(HostEnv):
    """RAGEN's Countdown env. `data_path` None -> generated tasks (`solvable_ops` "+-" or "+-*/");
    a .parquet/.jsonl/.json path -> its first `max_instances` rows, filtered by `solvable_ops`."""

    ragen_keys = RAGEN_KEYS  # RAGEN's env_config names in env.kwargs (envs.ragen_keys)

    def __init__(self, data_path: str | None = None, max_instances: int | None = 20000,
                 solvable_ops: str | None = "+-", score: float = 1.0, format_score: float = 0.1,
                 min_count: int = 3, max_count: int = 4, min_num: int = 1, max_num: int = 99,
                 max_target: int = 100) -> None:
        self.score = float(score)
        self.format_score = float(format_score)
        self.data: list[CountdownTask] | None = (
            load_tasks(data_path, max_instances, solvable_ops) if data_path else None)
        gen_ops = solvable_ops or "+-*/"
        self._generator_kwargs = dict(ops=gen_ops, min_count=min_count, max_count=max_count,
                                      min_num=min_num, max_num=max_num, max_target=max_target)
        if self.data is None:
            generate_task(0, **self._generator_kwargs)  # fail fast on bad generator settings
        self.task: CountdownTask | None = None

    def instruction(self) -> str:
        return INSTRUCTION

    def task_for_seed(self, seed: int) -> CountdownTask:
        """Data row `seed % len(data)` (as the original), or the generated task of `seed`."""
        if self.data is not None:
            return self.data[int(seed) % len(self.data)]
        return generate_task(int(seed), **self._generator_kwargs)

    def reset(self, seed: int) -> tuple[str, dict[str, Any]]:
        self.task = self.task_for_seed(seed)
        return self.task.render(), {"target": self.task.target, "nums": list(self.task.nums)}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.task is None:
            raise RuntimeError("CountdownEnv.step called before reset(seed).")
        text = action if isinstance(action, str) else str(action)
        reward = score_answer(text, self.task.target, self.task.nums, self.score,
                              self.format_score)
        info = {"action_is_effective": reward > 0, "action_is_valid": True,
                "success": reward == self.score}
        return f"Your answer get {reward:g} points.", reward, True, False, info
