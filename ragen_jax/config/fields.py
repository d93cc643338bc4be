"""A config entry as a dataclass field: its default, and the rule or choices its value must keep.

Sections (`config.sections`) declare their entries with `setting(...)`; `field_problems` checks a built section
against them and says, in config keys, what is wrong and what is allowed.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from typing import Any, Callable


@dataclasses.dataclass(frozen=True)
class Rule:
    """What a value must be: `valid(value)` and the words an error uses ("must be > 0")."""

    valid: Callable[[Any], bool]
    requirement: str


POSITIVE = Rule(lambda v: v > 0, "must be > 0")
AT_LEAST_0 = Rule(lambda v: v >= 0, "must be >= 0")
AT_LEAST_1 = Rule(lambda v: v >= 1, "must be >= 1")
UNIT = Rule(lambda v: 0 <= v <= 1, "must be in [0, 1]")
FINITE = Rule(lambda v: math.isfinite(v), "must be a finite number")


class Section:
    """Base of the config's sections: read like a mapping too (`section["lr"]`, `dict(section)`, `.get`), as the
    ml_collections config they come from, so functions that take either need not care which."""

    def keys(self) -> list[str]:
        return [f.name for f in dataclasses.fields(self)]

    def __getitem__(self, key: str) -> Any:
        if key not in self.keys():
            raise KeyError(key)
        return getattr(self, key)

    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key) if key in self.keys() else default


def setting(default: Any, rule: Rule | None = None, *, choices: tuple | None = None) -> Any:
    """A dataclass field for one config entry (a dict default is copied per instance)."""
    metadata = {k: v for k, v in (("rule", rule), ("choices", choices)) if v is not None}
    if isinstance(default, (dict, list)):
        return dataclasses.field(default_factory=lambda: copy.deepcopy(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def section(cls: type) -> Any:
    """A field holding a nested section, built with its defaults."""
    return dataclasses.field(default_factory=cls)


def field_problems(obj: Any, path: str) -> list[str]:
    """Every entry of dataclass `obj` (nested sections included) that breaks its choices or rule, as
    "config.{path}.{key} ..." lines."""
    problems = []
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        key = f"{path}.{f.name}"
        if dataclasses.is_dataclass(value):
            problems += field_problems(value, key)
            continue
        choices, rule = f.metadata.get("choices"), f.metadata.get("rule")
        if choices is not None and value not in choices:
            problems.append(f"config.{key}={value!r} is not one of {choices}")
        elif rule is not None and not _keeps(rule, value):
            problems.append(f"config.{key} {rule.requirement} (got {value})")
    return problems


def _keeps(rule: Rule, value: Any) -> bool:
    try:
        return bool(rule.valid(value))
    except TypeError:  # a value of the wrong type (ml_collections keeps types; a config file may not)
        return False
