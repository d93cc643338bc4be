"""Safe arithmetic for Countdown answers: an `ast` walker over a whitelist, never `eval`.

Allowed: int/float literals, binary + - * / and bounded **, unary + and -, parentheses.
Values are exact fractions with bounded size, so any model text is checked in bounded time.
"""

from __future__ import annotations

import ast
import math
import re
from fractions import Fraction

# Answers longer than this cannot be an honest 3-4 number expression; they score 0.
MAX_EXPRESSION_CHARS = 300
# Any literal or intermediate value whose numerator or denominator exceeds this is rejected.
MAX_MAGNITUDE = 10**15
# `a ** b` needs an integer |b| <= MAX_EXPONENT (the original's eval allowed `**`).
MAX_EXPONENT = 32

_NUMBER_RE = re.compile(r"\d+")


class _Rejected(Exception):
    """The expression is not plain bounded arithmetic."""


def numbers_in(text: str) -> list[int] | None:
    """Integers written in `text` (every run of digits, as RAGEN's format rule reads them)."""
    try:
        return [int(n) for n in _NUMBER_RE.findall(text)]
    except ValueError:  # a digit run longer than Python's int-parsing limit
        return None


def uses_numbers_exactly(text: str, nums: list[int] | tuple[int, ...]) -> bool:
    """True when the digit runs of `text` are exactly the multiset `nums` (each used once)."""
    if len(text) > MAX_EXPRESSION_CHARS:
        return False
    found = numbers_in(text)
    return found is not None and sorted(found) == sorted(int(n) for n in nums)


def evaluate(text: str) -> Fraction | None:
    """The exact value of arithmetic expression `text`, or None if it is not allowed arithmetic."""
    if len(text) > MAX_EXPRESSION_CHARS:
        return None
    try:
        tree = ast.parse(text.strip(), mode="eval")
        return _eval_node(tree.body)
    except (_Rejected, SyntaxError, ValueError, TypeError, OverflowError, ZeroDivisionError,
            RecursionError, MemoryError):
        return None


def _checked(value: Fraction) -> Fraction:
    if abs(value.numerator) > MAX_MAGNITUDE or value.denominator > MAX_MAGNITUDE:
        raise _Rejected("value out of range")
    return value


def _eval_node(node: ast.AST) -> Fraction:
    if isinstance(node, ast.Constant):
        value = node.value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _Rejected("only numeric literals")
        if isinstance(value, float) and not math.isfinite(value):
            raise _Rejected("non-finite literal")
        return _checked(Fraction(value))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
        operand = _eval_node(node.operand)
        return operand if isinstance(node.op, ast.UAdd) else -operand
    if isinstance(node, ast.BinOp):
        left, right = _eval_node(node.left), _eval_node(node.right)
        op = node.op
        if isinstance(op, ast.Add):
            return _checked(left + right)
        if isinstance(op, ast.Sub):
            return _checked(left - right)
        if isinstance(op, ast.Mult):
            return _checked(left * right)
        if isinstance(op, ast.Div):
            if right == 0:
                raise _Rejected("division by zero")
            return _checked(left / right)
        if isinstance(op, ast.Pow):
            return _checked(_bounded_power(left, right))
    raise _Rejected(f"{type(node).__name__} is not allowed")


def _bounded_power(base: Fraction, exponent: Fraction) -> Fraction:
    if exponent.denominator != 1 or abs(exponent) > MAX_EXPONENT:
        raise _Rejected("exponent must be a small integer")
    if base == 0 and exponent < 0:
        raise _Rejected("zero to a negative power")
    bits = max(base.numerator.bit_length(), base.denominator.bit_length())
    if bits * abs(int(exponent)) > 2 * MAX_MAGNITUDE.bit_length():
        raise _Rejected("power too large")
    return base ** int(exponent)


def score_answer(answer: str, target: int, nums: list[int] | tuple[int, ...],
                 score: float = 1.0, format_score: float = 0.1) -> float:
    """RAGEN's Countdown reward: `score` if correct, `format_score` if the numbers are used
    exactly once each but the value is wrong (or not arithmetic), else 0."""
    if not uses_numbers_exactly(answer, nums):
        return 0.0
    value = evaluate(answer)
    if value is None or value != target:
        return float(format_score)
    return float(score)
