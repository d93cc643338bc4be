"""Countdown solvers: exhaustive search over + - * / and RAGEN's signed-sum solvability filter."""

from __future__ import annotations

import itertools
from fractions import Fraction
from typing import Sequence

ALLOWED_OPS = frozenset("+-*/")


def has_signed_sum_solution(nums: Sequence[int], target: int) -> bool:
    """True if `+-n1 +-n2 ... = target` for some signs (the filter RAGEN applies to its data)."""
    return any(sum(s * n for s, n in zip(signs, nums)) == target
               for signs in itertools.product((1, -1), repeat=len(nums)))


def solve(nums: Sequence[int], target: int, ops: str = "+-*/") -> str | None:
    """An expression using every number of `nums` exactly once with `ops` that equals `target`.

    Exhaustive over pairwise combinations (any bracketing and order; fractions and negative
    intermediates allowed, as the answer checker allows them); None if there is none.
    """
    check_ops(ops)
    items = [(Fraction(int(n)), str(int(n))) for n in nums]
    if not items:
        return None
    found = _search(items, Fraction(target), ops)
    if found is None:
        return None
    return found[1:-1] if len(items) > 1 else found


def check_ops(ops: str) -> None:
    if not ops or not set(ops) <= ALLOWED_OPS:
        raise ValueError(f"ops must be a non-empty string of characters from '+-*/', got {ops!r}.")


def _combine(a: tuple[Fraction, str], b: tuple[Fraction, str], ops: str):
    (va, ea), (vb, eb) = a, b
    if "+" in ops:
        yield va + vb, f"({ea} + {eb})"
    if "-" in ops:
        yield va - vb, f"({ea} - {eb})"
        yield vb - va, f"({eb} - {ea})"
    if "*" in ops:
        yield va * vb, f"({ea} * {eb})"
    if "/" in ops:
        if vb != 0:
            yield va / vb, f"({ea} / {eb})"
        if va != 0:
            yield vb / va, f"({eb} / {ea})"


def _search(items: list[tuple[Fraction, str]], target: Fraction, ops: str) -> str | None:
    if len(items) == 1:
        return items[0][1] if items[0][0] == target else None
    for i, j in itertools.combinations(range(len(items)), 2):
        rest = [items[k] for k in range(len(items)) if k not in (i, j)]
        for value, expr in _combine(items[i], items[j], ops):
            found = _search(rest + [(value, expr)], target, ops)
            if found is not None:
                return found
    return None
