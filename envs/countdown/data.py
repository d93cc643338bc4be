"""Countdown tasks from a local file in the original format (rows with `target` and `nums`)."""

from __future__ import annotations

from typing import Any

from envs.countdown.generator import CountdownTask
from envs.countdown.solver import check_ops, has_signed_sum_solution, solve
from envs.records import read_records


def task_from_row(row: dict[str, Any], where: str = "row") -> CountdownTask:
    """One data row {"target": int, "nums": [int, ...]} -> a CountdownTask (clear error if malformed)."""
    missing = [k for k in ("target", "nums") if k not in row]
    if missing:
        raise ValueError(f"Countdown {where} lacks field(s) {missing}; each row needs 'target' "
                         f"(int) and 'nums' (list of int). Row keys: {sorted(row)}.")
    nums = row["nums"]
    if isinstance(nums, (str, bytes)) or not hasattr(nums, "__iter__"):
        raise ValueError(f"Countdown {where}: 'nums' must be a list of integers, got {nums!r}.")
    try:
        return CountdownTask(target=_as_int(row["target"]), nums=tuple(_as_int(n) for n in nums))
    except (TypeError, ValueError) as e:
        raise ValueError(f"Countdown {where}: target/nums must be integers ({e}).") from e


def _as_int(value: Any) -> int:
    if isinstance(value, float) and not value.is_integer():
        raise ValueError(f"{value!r} is not an integer")
    return int(value)


def is_solvable(task: CountdownTask, ops: str) -> bool:
    """Solvable with `ops`; "+-" is RAGEN's own data filter (signs only, fast)."""
    if set(ops) <= set("+-"):
        return has_signed_sum_solution(task.nums, task.target)
    return solve(task.nums, task.target, ops) is not None


def load_tasks(path: str, max_instances: int | None = 20000,
               solvable_ops: str | None = "+-") -> list[CountdownTask]:
    """The first `max_instances` rows of `path` (.parquet/.jsonl/.json), keeping only tasks
    solvable with `solvable_ops` (None keeps every row), as RAGEN does with its train parquet."""
    if solvable_ops is not None:
        check_ops(solvable_ops)
    rows = read_records(path, limit=max_instances)
    tasks = [task_from_row(row, f"{path} row {i}") for i, row in enumerate(rows)]
    if solvable_ops is not None:
        tasks = [t for t in tasks if is_solvable(t, solvable_ops)]
    if not tasks:
        raise ValueError(f"No usable Countdown tasks in {path!r} (rows read: {len(rows)}, "
                         f"solvable_ops={solvable_ops!r}); check the file or pass solvable_ops=None.")
    return tasks
