"""What a host env returns, checked against its contract before the rollout reads it.

A bare string from reset would be read as a tuple, a string reward never counts as a number, the string "False"
never ends an episode nor counts as a success: each is refused with the env's name and what it returned.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def describe_value(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:80]}{'...' if len(text) > 80 else ''}"


def checked_reset(result: Any) -> tuple[str, Any]:
    """A host env's reset result, or TypeError naming what it returned (a bare string would otherwise be read as
    a tuple: its first character the observation)."""
    if not (isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], str)):
        raise TypeError(f"reset(seed) must return (observation: str, info: dict), got {describe_value(result)}")
    return result


_STEP_CONTRACT = "(observation: str, reward: float, terminated: bool, truncated: bool, info: dict)"
# Info fields the rollout reads as flags (success, the action_is_* metrics, the format penalty). A string is refused
# rather than parsed: bool("False") is True, and no spelling of a string is the bool the step contract asks for.
INFO_FLAGS = ("success", "action_is_valid", "action_is_effective", "action_in_lookup")


def _scalar_kind(value: Any) -> str:
    """The numpy dtype kind of a scalar (a Python, numpy or JAX number, bool or 0-d array), "" for anything else
    (a string, None, a vector)."""
    if value is None or isinstance(value, (str, bytes)):
        return ""
    try:
        array = np.asarray(value)
    except Exception:  # noqa: BLE001 - not convertible: not a scalar
        return ""
    return array.dtype.kind if array.ndim == 0 and array.dtype.kind in "biuf" else ""


def _is_number(value: Any) -> bool:
    return bool(_scalar_kind(value))


def _is_flag(value: Any) -> bool:
    """A done flag: a bool or a number 0 / 1 (not the string "False", which is truthy)."""
    kind = _scalar_kind(value)
    return kind == "b" or bool(kind) and float(value) in (0.0, 1.0)


def step_result_problems(result: tuple) -> list[str]:
    """What is wrong with the fields of a host env's 5-tuple step result (empty when it keeps the contract)."""
    observation, reward, terminated, truncated, info = result
    problems = [] if isinstance(observation, str) else [
        f"observation {describe_value(observation)}, not a str (the text the model reads next; \"\" for none)"]
    problems += [] if _is_number(reward) else [f"reward {describe_value(reward)}, not a number (return a float, e.g. 0.0)"]
    problems += [f"{name} {describe_value(flag)}, not a bool" for name, flag in (("terminated", terminated),
                                                                             ("truncated", truncated))
                 if not _is_flag(flag)]
    if info is not None and not isinstance(info, dict):
        problems.append(f"info {describe_value(info)}, not a dict (return {{}} when there is nothing to report)")
    elif info:
        problems += [f"info[{k!r}] {describe_value(info[k])}, not a bool (give True/False or 0/1)" for k in INFO_FLAGS
                     if k in info and not _is_flag(info[k])]
    return problems


def checked_step(result: Any, env: str = "") -> tuple[str, Any, Any, Any, Any]:
    """A host env's step result, or TypeError naming the env (its class name) and what it returned (the model must
    never read 'None', a string reward never counts as a number, the string "False" never ends an episode nor
    counts as a success)."""
    where = f"{env}.step(action)" if env else "step(action)"
    if not (isinstance(result, tuple) and len(result) == 5):
        raise TypeError(f"{where} must return {_STEP_CONTRACT}, got {describe_value(result)}")
    problems = step_result_problems(result)
    if problems:
        raise TypeError(f"{where} returned {'; '.join(problems)}; it must return {_STEP_CONTRACT}")
    return result
