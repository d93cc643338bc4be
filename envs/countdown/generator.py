"""Seeded procedural Countdown tasks (3-4 numbers, reachable target) for use with no data files.

With ops "+-" every task is solvable by signs alone, the same set RAGEN's data filter keeps;
with "+-*/" targets come from random arithmetic trees (the Countdown-Tasks-3to4 style).
Every task is checked by the exhaustive solver before it is returned.
"""

from __future__ import annotations

import dataclasses
import random

from envs.countdown.solver import check_ops, has_signed_sum_solution, solve

_MAX_TRIES = 10_000


@dataclasses.dataclass(frozen=True)
class CountdownTask:
    """One puzzle: reach `target` using each of `nums` exactly once."""

    target: int
    nums: tuple[int, ...]

    def render(self) -> str:
        """The observation text, as the original prints it: "Target: 4, nums: [3, 5, 2]"."""
        return f"Target: {self.target}, nums: {list(self.nums)}"


def generate_task(seed: int, ops: str = "+-", min_count: int = 3, max_count: int = 4,
                  min_num: int = 1, max_num: int = 99, max_target: int = 100) -> CountdownTask:
    """The task of integer `seed` (same seed, same task); its target lies in [1, max_target]."""
    check_ops(ops)
    if not 2 <= min_count <= max_count <= 6:
        raise ValueError(f"Need 2 <= min_count <= max_count <= 6, got {min_count}, {max_count}.")
    if not 1 <= min_num <= max_num or max_target < 1:
        raise ValueError(f"Need 1 <= min_num <= max_num and max_target >= 1, got "
                         f"{min_num}, {max_num}, {max_target}.")
    rng = random.Random(seed)
    for _ in range(_MAX_TRIES):
        count = rng.randint(min_count, max_count)
        nums = [rng.randint(min_num, max_num) for _ in range(count)]
        target = _signed_sum(rng, nums) if set(ops) <= set("+-") else _tree_value(rng, nums, ops)
        if target is None or not 1 <= target <= max_target:
            continue
        solvable = (has_signed_sum_solution(nums, target) if set(ops) <= set("+-")
                    else solve(nums, target, ops) is not None)
        if solvable:
            return CountdownTask(target=target, nums=tuple(nums))
    raise RuntimeError(f"No Countdown task found for seed {seed} in {_MAX_TRIES} tries; widen "
                       f"max_target or the number range.")


def _signed_sum(rng: random.Random, nums: list[int]) -> int:
    return sum(n if rng.random() < 0.5 else -n for n in nums)


def _tree_value(rng: random.Random, nums: list[int], ops: str) -> int | None:
    """Combine random pairs with random ops, keeping every intermediate a positive integer."""
    values = list(nums)
    while len(values) > 1:
        a = values.pop(rng.randrange(len(values)))
        b = values.pop(rng.randrange(len(values)))
        op = rng.choice(ops)
        if op == "+":
            result = a + b
        elif op == "-":
            result = abs(a - b)
        elif op == "*":
            result = a * b
        else:
            big, small = max(a, b), min(a, b)
            if big % small:
                return None
            result = big // small
        if result <= 0:
            return None
        values.append(result)
    return values[0]
