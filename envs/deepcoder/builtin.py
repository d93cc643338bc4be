"""Ten self-written problems with tests and reference solutions, for offline runs and tests."""

from __future__ import annotations

import json

from envs.deepcoder.problems import FUNCTIONAL, STDIN, Problem, TestCase


def _stdin(pid: str, question: str, cases: list[tuple[str, str]], solution: str) -> Problem:
    return Problem(pid, question, tuple(TestCase(i, o, STDIN) for i, o in cases), solution=solution)


def _func(pid: str, question: str, name: str, signature: str, cases: list[tuple[list, object]],
          solution: str) -> Problem:
    tests = tuple(TestCase("\n".join(json.dumps(a) for a in args), json.dumps(out), FUNCTIONAL)
                  for args, out in cases)
    starter = f"class Solution:\n    def {name}(self, {signature}):\n        "
    return Problem(pid, question, tests, starter_code=starter, func_name=name, solution=solution)


BUILTIN_PROBLEMS: tuple[Problem, ...] = (
    _stdin("sum_two", "Read two integers a and b on one line and print a + b.",
           [("1 2\n", "3"), ("-5 5\n", "0"), ("1000000000 1000000000\n", "2000000000")],
           "a, b = map(int, input().split())\nprint(a + b)\n"),
    _stdin("reverse_words", "Read one line and print its words in reverse order, separated by single spaces.",
           [("hello world\n", "world hello"), ("a b c d\n", "d c b a"), ("single\n", "single"),
            ("  spaced   out  \n", "out spaced")],
           "print(' '.join(input().split()[::-1]))\n"),
    _stdin("count_vowels", "Read a line of lowercase letters and print how many vowels (aeiou) it has.",
           [("banana\n", "3"), ("rhythm\n", "0"), ("aeiou\n", "5"), ("programming\n", "3")],
           "s = input().strip()\nprint(sum(c in 'aeiou' for c in s))\n"),
    _stdin("max_subarray", "The first line holds n, the second n integers. Print the largest sum of a "
           "non-empty contiguous subarray.",
           [("5\n1 -2 3 4 -1\n", "7"), ("3\n-3 -1 -2\n", "-1"), ("1\n42\n", "42"), ("6\n2 -1 2 -1 2 -1\n", "4")],
           "input()\nbest = cur = None\nfor x in map(int, input().split()):\n"
           "    cur = x if cur is None or cur < 0 else cur + x\n    best = cur if best is None else max(best, cur)\n"
           "print(best)\n"),
    _stdin("fizzbuzz", "Read n and print the numbers 1..n, one per line, replacing multiples of 3 by Fizz, "
           "of 5 by Buzz and of both by FizzBuzz.",
           [("5\n", "1\n2\nFizz\n4\nBuzz"), ("15\n", "\n".join(
               "FizzBuzz" if i % 15 == 0 else "Fizz" if i % 3 == 0 else "Buzz" if i % 5 == 0 else str(i)
               for i in range(1, 16))), ("1\n", "1")],
           "for i in range(1, int(input()) + 1):\n"
           "    print('FizzBuzz' if i % 15 == 0 else 'Fizz' if i % 3 == 0 else 'Buzz' if i % 5 == 0 else i)\n"),
    _stdin("mean_value", "The first line holds n, the second n integers. Print their mean with 6 decimals.",
           [("3\n1 2 4\n", "2.333333"), ("2\n-1 1\n", "0.000000"), ("4\n1 1 1 2\n", "1.250000")],
           "n = int(input())\nprint(f'{sum(map(int, input().split())) / n:.6f}')\n"),
    _func("two_sum", "Given a list nums and an integer target, return the indices [i, j] (i < j) of the "
          "two numbers that add up to target. Exactly one answer exists.", "twoSum",
          "nums: list[int], target: int",
          [([[2, 7, 11, 15], 9], [0, 1]), ([[3, 2, 4], 6], [1, 2]), ([[3, 3], 6], [0, 1]),
           ([[1, 5, 9, 14], 23], [2, 3])],
          "class Solution:\n    def twoSum(self, nums, target):\n        seen = {}\n"
          "        for j, x in enumerate(nums):\n            if target - x in seen:\n"
          "                return [seen[target - x], j]\n            seen[x] = j\n"),
    _func("is_palindrome", "Return true if the string s reads the same forwards and backwards after "
          "keeping only letters and digits and ignoring case.", "isPalindrome", "s: str",
          [(["A man, a plan, a canal: Panama"], True), (["race a car"], False), ([" "], True), (["0P"], False)],
          "class Solution:\n    def isPalindrome(self, s):\n        t = [c.lower() for c in s if c.isalnum()]\n"
          "        return t == t[::-1]\n"),
    _func("climb_stairs", "You climb a staircase of n steps taking 1 or 2 steps at a time. Return the "
          "number of distinct ways to reach the top.", "climbStairs", "n: int",
          [([1], 1), ([2], 2), ([3], 3), ([5], 8), ([30], 1346269)],
          "class Solution:\n    def climbStairs(self, n):\n        a, b = 1, 1\n        for _ in range(n):\n"
          "            a, b = b, a + b\n        return a\n"),
    _func("merge_intervals", "Given a list of intervals [start, end], merge all overlapping intervals and "
          "return them sorted by start.", "merge", "intervals: list[list[int]]",
          [([[[1, 3], [2, 6], [8, 10], [15, 18]]], [[1, 6], [8, 10], [15, 18]]), ([[[1, 4], [4, 5]]], [[1, 5]]),
           ([[[5, 7], [1, 2]]], [[1, 2], [5, 7]])],
          "class Solution:\n    def merge(self, intervals):\n        out = []\n"
          "        for s, e in sorted(intervals):\n            if out and s <= out[-1][1]:\n"
          "                out[-1][1] = max(out[-1][1], e)\n            else:\n                out.append([s, e])\n"
          "        return out\n"),
)
