"""A tiny host env for exercising the env server (transport tests and load benchmarks).

Count from `seed % 5` up to `target` with the actions "up"/"down"; reward 1 on reaching the
target. `delay_s` makes every step slow (a stand-in for a heavy env); `release`, a threading.Event
(in-process servers only), ends the delays early, so tests need not wait them out. The action
"fail" raises, standing in for an env that crashes.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from envs.protocols import HostEnv


class CounterEnv(HostEnv):
    action_lookup = {"up": 0, "down": 1}
    action_names = ["Up", "Down"]

    def __init__(self, target: int = 10, delay_s: float = 0.0, max_steps: int = 50,
                 release: threading.Event | None = None):
        self.target, self.delay_s, self.max_steps, self.release = target, delay_s, max_steps, release
        self.value = self.steps = 0

    def instruction(self) -> str:
        return f"Reach {self.target} by answering Up or Down."

    def reset(self, seed: int) -> tuple[str, dict[str, Any]]:
        self.value, self.steps = int(seed) % 5, 0
        return f"Value: {self.value}", {}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.delay_s and self.release is not None:
            self.release.wait(self.delay_s)
        elif self.delay_s:
            time.sleep(self.delay_s)
        name = action.strip().lower()
        if name == "fail":
            raise RuntimeError("CounterEnv was asked to fail")
        valid = name in self.action_lookup
        self.value += {"up": 1, "down": -1}.get(name, 0)
        self.steps += 1
        done = self.value == self.target
        truncated = not done and self.steps >= self.max_steps
        info = {"action_is_valid": valid, "action_is_effective": valid, "success": done}
        return f"Value: {self.value}", float(done), done, truncated, info
