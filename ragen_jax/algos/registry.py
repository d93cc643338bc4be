"""Name -> function registries, so algorithms are selected by config strings.

A name is either a registered key (``"gae"``) or an import path
(``"my_pkg.my_module:my_fn"``, attributes may be dotted), which lets a config point at a
user's function without registering it first.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """A small mapping from names to objects (usually functions) of one kind."""

    def __init__(self, kind: str, variable: str = "the registry"):
        self.kind = kind
        self.variable = variable  # how users reach it, for error messages: "ragen_jax.algos.POLICY_LOSSES"
        self._items: dict[str, T] = {}
        self._unavailable: dict[str, str] = {}  # names users know from veRL / RAGEN that are not here, and why

    def register(self, name: str, obj: T | None = None, *, overwrite: bool = False):
        """Register ``obj`` under ``name``; without ``obj`` this is a decorator.

        Registering a different object under a taken name fails unless ``overwrite=True``.
        """
        if not isinstance(name, str) or not name or ":" in name:
            raise ValueError(
                f"{self.kind} name must be a non-empty string without ':' (got {name!r}); "
                "':' is reserved for 'package.module:function' import paths."
            )

        def add(item: T) -> T:
            if name in self._items and self._items[name] is not item and not overwrite:
                raise ValueError(
                    f"{self.kind} {name!r} is already registered ({self._items[name]!r}); "
                    "pick another name or pass overwrite=True."
                )
            self._items[name] = item
            return item

        return add if obj is None else add(obj)

    def mark_unavailable(self, name: str, why: str) -> None:
        """Make ``get(name)`` fail with ``why`` (what the name needs and what to use instead) rather than with
        the generic unknown-name message; registering ``name`` later lifts it."""
        self._unavailable[name] = why

    def unregister(self, name: str) -> None:
        """Remove ``name`` (useful in tests); unknown names raise KeyError."""
        del self._items[name]

    def get(self, name: str | T) -> T:
        """Look up a registered name or import ``"pkg.module:attr"``; objects pass through."""
        if not isinstance(name, str):
            if callable(name):
                return name
            raise TypeError(f"{self.kind} must be a name, an import path or a callable, got {name!r}")
        if name in self._items:
            return self._items[name]
        if ":" in name:
            return _import_path(name, self.kind)
        if name in self._unavailable:
            raise KeyError(f"{self.kind} {name!r} is not available in ragen-jax: {self._unavailable[name]}")
        raise KeyError(
            f"Unknown {self.kind} {name!r}. Known: {sorted(self._items)}. Register your own "
            f"with @{self.variable}.register({name!r}) or pass an import path 'package.module:function'."
        )

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {self.names()})"


def _import_path(path: str, kind: str) -> Callable:
    module_name, _, attr_path = path.partition(":")
    if not module_name or not attr_path:
        raise ValueError(f"{kind} import path {path!r} must look like 'package.module:function'.")
    try:
        obj = importlib.import_module(module_name)
    except ImportError as e:
        raise ImportError(
            f"Cannot import module {module_name!r} for {kind} {path!r}: {e}. "
            "Check that it is on PYTHONPATH."
        ) from e
    for attr in attr_path.split("."):
        if not hasattr(obj, attr):
            raise AttributeError(f"Module {module_name!r} has no attribute {attr_path!r} ({kind} {path!r}).")
        obj = getattr(obj, attr)
    return obj


ADVANTAGE_ESTIMATORS: Registry = Registry("advantage estimator", "ragen_jax.algos.ADVANTAGE_ESTIMATORS")
POLICY_LOSSES: Registry = Registry("policy loss", "ragen_jax.algos.POLICY_LOSSES")
VALUE_LOSSES: Registry = Registry("value loss", "ragen_jax.algos.VALUE_LOSSES")
KL_ESTIMATORS: Registry = Registry("KL estimator", "ragen_jax.algos.KL_ESTIMATORS")
AGG_MODES: Registry = Registry("loss aggregation mode", "ragen_jax.algos.AGG_MODES")
ROLLOUT_CORRECTIONS: Registry = Registry("rollout correction", "ragen_jax.algos.ROLLOUT_CORRECTIONS")
