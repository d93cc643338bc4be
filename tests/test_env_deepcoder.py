"""DeepCoder: grading (correct / wrong / partial, stdin and functional), loader, env, batch concurrency."""

import json
import time

import pytest
from hypothesis import given, strategies as st

from envs import registry
from envs.deepcoder.builtin import BUILTIN_PROBLEMS
from envs.deepcoder.env import DeepCoderEnv
from envs.deepcoder.grading import extract_code, grade, grade_batch, stdout_matches, values_equal
from envs.deepcoder.problems import FUNCTIONAL, STDIN, load_problems, parse_tests
from envs.deepcoder.sandbox import Sandbox, SandboxConfig

pytestmark = pytest.mark.timeout(120)
BY_ID = {p.problem_id: p for p in BUILTIN_PROBLEMS}


@pytest.fixture(scope="module")
def sandbox():
    return Sandbox(SandboxConfig(cpu_time_s=2, wall_time_s=5), max_concurrency=2)


def fenced(code):
    return f"Here you go:\n```python\n{code}\n```\n"


def test_reference_solutions_pass(sandbox):
    results = grade_batch(sandbox, [(p, fenced(p.solution)) for p in BUILTIN_PROBLEMS])
    assert len(BUILTIN_PROBLEMS) == 10
    assert [r.reward for r in results] == [1.0] * 10
    assert all(r.success for r in results)
    assert {t.testtype for p in BUILTIN_PROBLEMS for t in p.tests} == {STDIN, FUNCTIONAL}


def test_wrong_and_partial_answers(sandbox):
    r = grade(sandbox, BY_ID["sum_two"], fenced("print(0)"))  # right only for "-5 5"
    assert r.num_passed == 1 and r.num_tests == 3 and r.reward == pytest.approx(1 / 3) and not r.success
    r = grade(sandbox, BY_ID["sum_two"], fenced("a, b = map(int, input().split())\nprint(a - b)"))
    assert r.reward == 0.0 and not r.success  # wrong on every test
    partial = "class Solution:\n    def climbStairs(self, n):\n        return n if n <= 3 else 0\n"
    r = grade(sandbox, BY_ID["climb_stairs"], fenced(partial))
    assert r.reward == pytest.approx(3 / 5)
    r = grade(sandbox, BY_ID["two_sum"], fenced("class Solution:\n    def twoSum(self, nums, target):\n        return [0, 1]"))
    assert r.reward == pytest.approx(2 / 4)
    r = grade(sandbox, BY_ID["is_palindrome"], fenced("def oops(:\n    pass"))
    assert r.reward == 0.0 and r.verdicts[0].status == "runtime_error"


def test_bare_method_is_put_into_starter_class(sandbox):
    code = "def isPalindrome(self, s):\n    t = [c.lower() for c in s if c.isalnum()]\n    return t == t[::-1]"
    assert grade(sandbox, BY_ID["is_palindrome"], fenced(code)).success


def test_answer_cannot_forge_functional_result(sandbox):
    # Prints something that looks like a result line; the harness's nonce is secret, so it fails.
    forged = "print('@@RESULT-0000000000000000@@true')\nclass Solution:\n    def isPalindrome(self, s):\n        return None"
    assert grade(sandbox, BY_ID["is_palindrome"], fenced(forged)).reward == 0.0


def test_no_code_is_invalid(sandbox):
    r = grade(sandbox, BY_ID["sum_two"], "   ")
    assert not r.code_found and r.reward == 0.0


def test_extract_code_prefers_last_python_block():
    text = "```text\nnot code\n```\n```python\nprint(1)\n```\nthen\n```py\nprint(2)\n```"
    assert extract_code(text) == "print(2)"
    assert extract_code("print(3)") == "print(3)"
    assert extract_code("```\nx = 1\n```") == "x = 1"
    assert extract_code("") is None


def test_output_comparison():
    assert stdout_matches("3\n", "3")
    assert stdout_matches("  1 2 \n3\n\n", "1 2\n3")
    assert stdout_matches("0.3333333", "0.333333")
    assert not stdout_matches("1 2", "1 3")
    assert not stdout_matches("1\n2", "1")
    assert values_equal([1, [2.0000000001]], [1, [2]])
    assert not values_equal(True, 1)


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=3), c, max_size=3)))
def test_values_equal_reflexive_through_json(v):
    assert values_equal(json.loads(json.dumps(v)), v)


def test_loader_reads_deepcoder_formats(tmp_path, sandbox):
    lcb = {"problem": "Return a+b.", "starter_code": "class Solution:\n    def add(self, a: int, b: int) -> int:\n        ",
           "metadata": json.dumps({"func_name": "add"}),
           "tests": json.dumps([{"input": "1\n2", "output": "3", "testtype": "functional"},
                                {"input": "5\n-5", "output": "0", "testtype": "functional"}])}
    taco = {"problem": "Print the square of n.", "tests": {"inputs": ["3\n", "4\n"], "outputs": ["9\n", "16\n"]}}
    taco_fn = {"question": "Return the maximum.", "ground_truth": json.dumps(
        {"fn_name": "biggest", "inputs": [[[1, 5, 2]], [[7]]], "outputs": [[5], [7]]})}
    path = tmp_path / "deepcoder.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in (lcb, taco, taco_fn)) + "\n")
    problems = load_problems(path)
    assert [p.func_name for p in problems] == ["add", None, "biggest"]
    assert grade(sandbox, problems[0], fenced("class Solution:\n    def add(self, a, b):\n        return a + b")).success
    assert grade(sandbox, problems[1], fenced("n = int(input())\nprint(n * n)")).success
    assert grade(sandbox, problems[2], fenced("def biggest(xs):\n    return max(xs)")).success
    (tmp_path / "one.json").write_text(json.dumps([taco]))
    assert len(load_problems(tmp_path)) == 4  # a folder: every json/jsonl file


def test_loader_errors_are_clear(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_problems(tmp_path / "missing.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"problem": "x", "tests": [{"input": "", "output": "", "testtype": "functional"}]}))
    with pytest.raises(ValueError, match="func_name"):
        load_problems(bad)
    with pytest.raises(ValueError, match="testtype"):
        parse_tests([{"input": "", "output": "", "testtype": "weird"}])


def test_env_single_turn_rewards(sandbox):
    env = registry.make("DeepCoder", sandbox=sandbox)
    assert isinstance(env, DeepCoderEnv)
    obs, info = env.reset(3)
    assert obs == env.reset(3)[0] and "Question:" in obs
    problem = env.problem
    obs, reward, terminated, truncated, info = env.step(fenced(problem.solution))
    assert (reward, terminated, truncated, info["success"]) == (1.0, True, False, True)
    env.reset(3)
    obs, reward, terminated, truncated, info = env.step("no code here")
    assert reward < 1.0 and not terminated and truncated and not info["success"]
    assert obs.startswith("Incorrect.")


def test_env_multi_step_shows_feedback(sandbox):
    env = DeepCoderEnv(problems=[BY_ID["sum_two"]], max_steps=2, sandbox=sandbox)
    env.reset(0)
    obs, reward, terminated, truncated, info = env.step(fenced("print(0)"))
    assert not (terminated or truncated) and "Feedback: Passed 1/3 tests." in obs
    _, reward, terminated, _, _ = env.step(fenced(BY_ID["sum_two"].solution))
    assert reward == 1.0 and terminated


def test_batch_respects_concurrency():
    sb = Sandbox(SandboxConfig(cpu_time_s=2, wall_time_s=5), max_concurrency=2)
    sleeper = "import time\ntime.sleep(0.6)\na, b = map(int, input().split())\nprint(a + b)"
    problem = BY_ID["sum_two"]  # 3 tests x 2 answers = 6 runs of >= 0.6 s, 2 at a time -> >= 1.8 s
    t = time.monotonic()
    results = grade_batch(sb, [(problem, fenced(sleeper))] * 2)
    assert time.monotonic() - t >= 1.8
    assert all(r.success for r in results)
