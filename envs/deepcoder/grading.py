"""Grade answers: extract code, run each test in the sandbox, compare outputs, score the fraction passed.

Comparison (LiveCodeBench-style): stdin tests compare stdout to the expected text line by line
after stripping whitespace and trailing blank lines, with numeric tokens equal within 1e-6 (integers
exactly); functional tests compare the JSON of the return value (tuples as lists, floats within 1e-6,
integers exactly).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import math
import re
import secrets
from typing import Any, Sequence

from envs.deepcoder.problems import FUNCTIONAL, Problem, TestCase
from envs.deepcoder.interpreter import SandboxError
from envs.deepcoder.sandbox import RunResult, Sandbox

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.DOTALL)
_TOL = 1e-6
_INT = re.compile(r"[+-]?[0-9]+")

# Names LiveCodeBench makes available to functional solutions.
_PRELUDE = ("from typing import *\nimport math, collections, heapq, bisect, itertools, functools, string, re\n"
            "from collections import *\nfrom functools import *\nfrom itertools import *\n"
            "from heapq import *\nfrom bisect import *\n")

_FUNCTIONAL_RUNNER = """
import sys as _sys, json as _json
def _sandbox_main(_src, _name):
    _payload = _json.loads(_sys.stdin.read())
    _ns = {"__name__": "__solution__"}
    exec(compile(_PRELUDE + _src, "solution.py", "exec"), _ns)
    _cls = _ns.get("Solution")
    _fn = getattr(_cls(), _name) if _cls is not None and hasattr(_cls, _name) else _ns[_name]
    _res = _fn(*_payload["args"])
    _sys.stdout.flush()
    _sys.__stdout__.write("\\n" + _payload["nonce"] + _json.dumps(_res) + "\\n")
    _sys.__stdout__.flush()
"""


@dataclasses.dataclass
class TestVerdict:
    passed: bool
    status: str  # passed | wrong_answer | runtime_error | timeout | output_limit | no_code
    detail: str = ""

    __test__ = False


@dataclasses.dataclass
class GradeResult:
    """Per-answer grade: reward = fraction of tests passed; success = all passed."""

    verdicts: list[TestVerdict]
    code_found: bool = True

    @property
    def num_passed(self) -> int:
        return sum(v.passed for v in self.verdicts)

    @property
    def num_tests(self) -> int:
        return len(self.verdicts)

    @property
    def reward(self) -> float:
        return self.num_passed / self.num_tests if self.verdicts else 0.0

    @property
    def success(self) -> bool:
        return bool(self.verdicts) and all(v.passed for v in self.verdicts)

    def feedback(self) -> str:
        """One-line summary plus the first failure."""
        if not self.code_found:
            return "No code found in the answer."
        text = f"Passed {self.num_passed}/{self.num_tests} tests."
        failed = next((i for i, v in enumerate(self.verdicts) if not v.passed), None)
        if failed is not None:
            v = self.verdicts[failed]
            text += f" Test {failed}: {v.status}" + (f" ({v.detail})" if v.detail else "")
        return text


def extract_code(answer: str) -> str | None:
    """The last ```python fenced block (else the last fenced block, else the whole text); None if empty."""
    blocks = _FENCE.findall(answer)
    py = [body for lang, body in blocks if lang.lower() in ("python", "py", "python3")]
    code = py[-1] if py else blocks[-1][1] if blocks else answer
    code = code.strip("\n")
    return code if code.strip() else None


def merge_with_starter(code: str, starter_code: str) -> str:
    """Put a bare method answer into the starter's `class Solution` (as the original does)."""
    if "class Solution" in starter_code and "class Solution" not in code and code.lstrip().startswith("def "):
        body = "\n".join(("    " + line) if line.strip() else "" for line in code.splitlines())
        return "class Solution:\n" + body
    return code


def build_program(code: str, test: TestCase, func_name: str | None) -> tuple[str, str, str]:
    """(program, stdin, nonce) for one test; the nonce marks the functional result line."""
    if test.testtype != FUNCTIONAL:
        return code, test.input, ""
    if not func_name:
        raise ValueError("functional test without func_name; set Problem.func_name")
    args = [json.loads(line) for line in test.input.splitlines() if line.strip()]
    nonce = "@@RESULT-" + secrets.token_hex(8) + "@@"
    program = (f"_PRELUDE = {_PRELUDE!r}\n{_FUNCTIONAL_RUNNER}\n"
               f"_sandbox_main({code!r}, {func_name!r})\n")
    return program, json.dumps({"nonce": nonce, "args": args}), nonce


def _canonical_int(token: str) -> str:
    """An integer token without sign noise or leading zeros (as text: int() refuses over 4300 digits)."""
    digits = token.lstrip("+-").lstrip("0") or "0"
    return ("-" + digits) if token.startswith("-") and digits != "0" else digits


def _num_equal(a: str, b: str) -> bool:
    """Numeric tokens: integers equal exactly (a relative tolerance would pass 1000000008 for 1000000007),
    otherwise floats within the tolerance."""
    if _INT.fullmatch(a) and _INT.fullmatch(b):
        return _canonical_int(a) == _canonical_int(b)
    try:
        x, y = float(a), float(b)
    except ValueError:
        return False
    return math.isclose(x, y, rel_tol=_TOL, abs_tol=_TOL)


def stdout_matches(got: str, expected: str) -> bool:
    """Line-wise comparison ignoring surrounding whitespace; numeric tokens within tolerance."""
    g = [line.strip() for line in got.strip().splitlines()]
    e = [line.strip() for line in expected.strip().splitlines()]
    if len(g) != len(e):
        return False
    for gl, el in zip(g, e):
        if gl == el:
            continue
        gt, et = gl.split(), el.split()
        if len(gt) != len(et) or not all(x == y or _num_equal(x, y) for x, y in zip(gt, et)):
            return False
    return True


def values_equal(got: Any, expected: Any) -> bool:
    """JSON-value equality with float tolerance (bools are not numbers; two integers equal exactly)."""
    if isinstance(got, bool) or isinstance(expected, bool):
        return got is expected
    if isinstance(got, int) and isinstance(expected, int):
        return got == expected
    if isinstance(got, (int, float)) and isinstance(expected, (int, float)):
        return got == expected or math.isclose(got, expected, rel_tol=_TOL, abs_tol=_TOL)
    if isinstance(got, list) and isinstance(expected, list):
        return len(got) == len(expected) and all(values_equal(a, b) for a, b in zip(got, expected))
    if isinstance(got, dict) and isinstance(expected, dict):
        return got.keys() == expected.keys() and all(values_equal(got[k], expected[k]) for k in got)
    return got == expected


def judge(run: RunResult, test: TestCase, nonce: str) -> TestVerdict:
    """Verdict for one sandbox run of one test. A run the sandbox itself could not make is no verdict on the
    answer: it raises SandboxError, which ends the episode with that error (never trained on as a 0 reward)."""
    if run.status == "sandbox_error":
        raise SandboxError(f"the sandbox could not run the answer ({run.stderr.strip()[:300]}); "
                           "Sandbox().capabilities() shows what this host allows, the error names what failed")
    if not run.ok:
        tail = run.stderr.strip().splitlines()[-1:] if run.stderr.strip() else []
        return TestVerdict(False, run.status, tail[0][:200] if tail else "")
    if test.testtype != FUNCTIONAL:
        if stdout_matches(run.stdout, test.output):
            return TestVerdict(True, "passed")
        return TestVerdict(False, "wrong_answer",
                           f"got {run.stdout.strip()[:80]!r}, expected {test.output.strip()[:80]!r}")
    lines = [line for line in run.stdout.splitlines() if line.startswith(nonce)]
    if not lines:
        return TestVerdict(False, "runtime_error", "no return value")
    try:  # the runner writes JSON, but the answer runs in the same process and can write this line itself
        got = json.loads(lines[-1][len(nonce):])
    except (ValueError, RecursionError):
        return TestVerdict(False, "runtime_error", "unreadable return value")
    expected = json.loads(test.output)
    ok = values_equal(got, expected) or (test.unwrap_output and isinstance(expected, list)
                                         and len(expected) == 1 and values_equal(got, expected[0]))
    if ok:
        return TestVerdict(True, "passed")
    return TestVerdict(False, "wrong_answer", f"got {str(got)[:80]}, expected {test.output[:80]}")


def run_test(sandbox: Sandbox, code: str, test: TestCase, func_name: str | None) -> TestVerdict:
    program, stdin, nonce = build_program(code, test, func_name)
    return judge(sandbox.run(program, stdin), test, nonce)


def grade_batch(sandbox: Sandbox, items: Sequence[tuple[Problem, str]]) -> list[GradeResult]:
    """Grade (problem, answer text) pairs; all their tests run with at most `sandbox.max_concurrency` at once."""
    codes = [extract_code(answer) for _, answer in items]
    codes = [merge_with_starter(c, p.starter_code) if c is not None else None for (p, _), c in zip(items, codes)]
    jobs = [(i, j) for i, ((p, _), c) in enumerate(zip(items, codes)) if c is not None for j in range(len(p.tests))]
    verdicts: dict[tuple[int, int], TestVerdict] = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=sandbox.max_concurrency) as pool:
        futures = {pool.submit(run_test, sandbox, codes[i], items[i][0].tests[j], items[i][0].func_name): (i, j)
                   for i, j in jobs}
        for fut, key in futures.items():
            verdicts[key] = fut.result()
    results = []
    for i, ((problem, _), code) in enumerate(zip(items, codes)):
        if code is None:
            results.append(GradeResult([TestVerdict(False, "no_code")] * len(problem.tests), code_found=False))
        else:
            results.append(GradeResult([verdicts[(i, j)] for j in range(len(problem.tests))]))
    return results


def grade(sandbox: Sandbox, problem: Problem, answer: str) -> GradeResult:
    """Grade one answer text against all tests of `problem`."""
    return grade_batch(sandbox, [(problem, answer)])[0]
